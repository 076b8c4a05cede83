//! Long-running server-side tasks that task management can end before their work is done:
//! EXTENDED COPY (it stops before its next chunk) and SANITIZE without IMMED (its task ends
//! at once, the sanitize operation goes on, as SBC-4 wants). One registry for both, keyed
//! by connection and task tag; the event thread reports after every task management
//! request, and when a connection goes, which of its tasks are no longer wanted. Cheap when
//! nothing is watched (one uncontended lock per task management request).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use iscsi_proto::CommandResult;

use super::reply::Replier;
use crate::conn_id::ConnId;

/// What ending a watched task does.
pub enum OnEnd {
    /// Raise the flag the job checks between its steps.
    Stop(Arc<AtomicBool>),
    /// Answer the task now (the connection swallows the answer of an aborted task, so the
    /// task management response need not wait); the job's own answer is then dropped.
    AnswerNow(Replier),
}

struct Watched {
    id: u64,
    conn: ConnId,
    itt: u32,
    on_end: OnEnd,
}

static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn watched() -> MutexGuard<'static, Vec<Watched>> {
    WATCHED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A watched task's registration; dropping it ends the watch.
pub struct Watch {
    id: u64,
}

impl Watch {
    /// Starts watching task `itt` of connection `conn`.
    pub fn new(conn: ConnId, itt: u32, on_end: OnEnd) -> Watch {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        watched().push(Watched {
            id,
            conn,
            itt,
            on_end,
        });
        Watch { id }
    }

    /// The task's replier back (an `AnswerNow` watch whose task is still wanted), to send
    /// the job's answer; `None` when task management already answered it.
    pub fn take_replier(self) -> Option<Replier> {
        let mut w = watched();
        let i = w.iter().position(|x| x.id == self.id)?;
        match w.swap_remove(i).on_end {
            OnEnd::AnswerNow(r) => Some(r),
            OnEnd::Stop(_) => None,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // taken out under the lock, dropped after it (a dropped replier answers)
        let gone = {
            let mut w = watched();
            w.iter()
                .position(|x| x.id == self.id)
                .map(|i| w.swap_remove(i))
        };
        drop(gone);
    }
}

/// Task management may have ended tasks of connection `conn` (or the connection is gone:
/// `wanted` says no for every task): the watched tasks `wanted` no longer lists end.
pub fn tasks_ended(conn: ConnId, wanted: impl Fn(u32) -> bool) {
    let answers: Vec<Replier> = {
        let mut w = watched();
        let mut answers = Vec::new();
        let mut i = 0;
        while i < w.len() {
            if w[i].conn != conn || wanted(w[i].itt) {
                i += 1;
                continue;
            }
            match &w[i].on_end {
                OnEnd::Stop(flag) => {
                    flag.store(true, Ordering::Relaxed);
                    i += 1;
                }
                OnEnd::AnswerNow(_) => {
                    if let OnEnd::AnswerNow(r) = w.swap_remove(i).on_end {
                        answers.push(r);
                    }
                }
            }
        }
        answers
    };
    // outside the lock: sending wakes another thread
    for r in answers {
        r.send(CommandResult::good());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(slot: usize) -> ConnId {
        ConnId {
            thread: 7,
            slot,
            generation: 9_000 + slot as u64,
        }
    }

    #[test]
    fn only_unwanted_tasks_of_that_connection_stop() {
        let (a, b, c) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let _wa = Watch::new(conn(1), 10, OnEnd::Stop(Arc::clone(&a)));
        let _wb = Watch::new(conn(1), 11, OnEnd::Stop(Arc::clone(&b)));
        let _wc = Watch::new(conn(2), 10, OnEnd::Stop(Arc::clone(&c)));
        tasks_ended(conn(1), |itt| itt != 10);
        assert!(
            a.load(Ordering::Relaxed),
            "task 10 of connection 1 was ended"
        );
        assert!(!b.load(Ordering::Relaxed), "task 11 is still wanted");
        assert!(!c.load(Ordering::Relaxed), "another connection's task 10");
        // a dropped watch is gone: ending its connection touches nothing
        drop(_wc);
        tasks_ended(conn(2), |_| false);
        assert!(!c.load(Ordering::Relaxed));
    }
}
