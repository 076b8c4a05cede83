//! An event thread's mailbox: the messages other threads send it ([`Msg`]), the queue that
//! carries them without allocating once warm ([`Inbox`], also the backend's completion sink
//! for this thread's connections), the poll objects made before the thread starts
//! ([`EventThreadSetup`]), and how the thread works through a batch (`drain_inbox`).

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use iscsi_proto::CommandResult;
use mio::{Poll, Waker};

use super::EventThread;
use super::tokens::WAKER;
use crate::backend::payload::Payload;
use crate::backend::reply::{CompletionSink, TasksEnded};
use crate::conn_id::ConnId;
use crate::io_stats::IoTag;
use crate::transport::Accepted;

/// Messages to an event thread.
pub enum Msg {
    /// A freshly accepted connection (of any transport) to adopt: this thread serves the
    /// node it is to be served on.
    Adopt(Box<dyn Accepted>),
    /// A backing-store job finished.
    IoDone {
        conn: ConnId,
        itt: u32,
        tag: IoTag,
        result: CommandResult<Payload>,
        /// The command's write buffer, back for the connection to reuse (empty if none).
        buffer: Vec<u8>,
    },
    /// Close one connection.
    Close(ConnId, &'static str),
    /// End the tasks of other sessions of target `tid` (task management or PREEMPT AND
    /// ABORT from another I_T nexus): on `lun` (every LUN with `None`), only of the sessions
    /// whose nexus is listed (all with `None`), never of `except`.
    AbortTasks {
        tid: u32,
        lun: Option<u64>,
        nexuses: Option<Vec<scsi::NexusId>>,
        except: Option<ConnId>,
        /// Counts the ended tasks whose work still runs until it ends (and this thread,
        /// once it has looked).
        ended: Option<Arc<TasksEnded>>,
    },
    /// A task management response that waited: for the work of the tasks it ended on other
    /// connections (`TasksEnded`), and for the other gateways of a shared LUN (they reset
    /// their copies first).
    TmfDone {
        conn: ConnId,
        itt: u32,
        resp: iscsi_proto::TmfResponse,
    },
    /// A held Logout may be answered: the releases it needed are done
    /// (`pr_cluster::release_spc2`).
    LogoutDone(ConnId),
    /// A handover to another numatgtd (`crate::handover`): stop accepting (connections
    /// wait in the listeners' backlog for the new process); with `move_tcp`, hold every
    /// normal session's TCP connection (its command window stops opening) and move it out
    /// to `Shared::moved_out` once it is quiet; ask the other normal sessions' initiators
    /// to log out within `logout_within` seconds (Asynchronous Message); close the rest
    /// (discovery, login phase). The loop goes on until `Shutdown`.
    Quiesce { logout_within: u16, move_tcp: bool },
    /// A connection from the previous numatgtd (live upgrade) to adopt and go on with.
    Resume(Box<super::shared::MovedIn>),
    /// Stop: close every connection and leave the loop.
    Shutdown,
}

/// An event thread's mailbox: anyone may send; the thread is woken at most once per batch.
/// The queue keeps its memory (the thread swaps it with an emptied one), so sending does not
/// allocate once the queue has reached its working size.
pub struct Inbox {
    pub(super) queue: Mutex<VecDeque<Msg>>,
    pub(super) waker: Waker,
    pub(super) wake_pending: AtomicBool,
    pub(super) stopped: AtomicBool,
}

impl Inbox {
    pub fn send(&self, msg: Msg) {
        if self.stopped.load(Ordering::Acquire) {
            return; // the thread has stopped; the message is dropped
        }
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(msg);
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            if let Err(e) = self.waker.wake() {
                tracing::error!("cannot wake event thread: {e}");
            }
        }
    }
}

impl CompletionSink for Inbox {
    fn complete(
        &self,
        conn: ConnId,
        itt: u32,
        tag: IoTag,
        result: CommandResult<Payload>,
        buffer: Vec<u8>,
    ) {
        self.send(Msg::IoDone {
            conn,
            itt,
            tag,
            result,
            buffer,
        });
    }
}

/// The poll objects of a thread, created before the thread starts so that the inbox exists.
pub struct EventThreadSetup {
    pub poll: Poll,
    pub inbox: Arc<Inbox>,
}

impl EventThreadSetup {
    pub fn new() -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok(EventThreadSetup {
            poll,
            inbox: Arc::new(Inbox {
                queue: Mutex::new(VecDeque::with_capacity(256)),
                waker,
                wake_pending: AtomicBool::new(false),
                stopped: AtomicBool::new(false),
            }),
        })
    }
}

impl EventThread {
    pub(super) fn drain_inbox(&mut self) {
        self.inbox.wake_pending.store(false, Ordering::Release);
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        let mut batch = std::mem::take(&mut self.batch);
        loop {
            if batch.is_empty() {
                std::mem::swap(
                    &mut *self.inbox.queue.lock().unwrap_or_else(|p| p.into_inner()),
                    &mut batch,
                );
                if batch.is_empty() {
                    break;
                }
            }
            let Some(msg) = batch.pop_front() else {
                break;
            };
            match msg {
                Msg::Adopt(a) => {
                    if !self.stopping {
                        self.adopt(a);
                    }
                }
                Msg::IoDone {
                    conn,
                    itt,
                    tag,
                    result,
                    buffer,
                } => {
                    if !self.awaited.is_empty()
                        && let Some(e) = self.awaited.remove(&(conn, itt))
                    {
                        e.one_done();
                    }
                    if self.id(conn.slot) != Some(conn) {
                        continue; // the connection is gone; the result is dropped
                    }
                    self.current = Some(conn.slot);
                    if let Some(slot) = self.slots[conn.slot].as_mut() {
                        slot.inflight = slot.inflight.saturating_sub(1);
                        slot.complete(itt, &tag, result, buffer);
                        if !touched.contains(&conn.slot) {
                            touched.push(conn.slot);
                        }
                    }
                }
                Msg::TmfDone { conn, itt, resp } => {
                    if self.id(conn.slot) != Some(conn) {
                        continue; // the connection is gone
                    }
                    self.current = Some(conn.slot);
                    if let Some(slot) = self.slots[conn.slot].as_mut() {
                        slot.conn.complete_tmf(itt, resp);
                        slot.tmf_answered();
                        if !touched.contains(&conn.slot) {
                            touched.push(conn.slot);
                        }
                    }
                }
                Msg::LogoutDone(conn) => {
                    if self.id(conn.slot) != Some(conn) {
                        continue; // the connection is gone
                    }
                    self.current = Some(conn.slot);
                    if let Some(slot) = self.slots[conn.slot].as_mut() {
                        slot.conn.confirm_logout();
                        if !touched.contains(&conn.slot) {
                            touched.push(conn.slot);
                        }
                    }
                }
                Msg::Close(conn, reason) => {
                    if self.id(conn.slot) == Some(conn) {
                        self.close(conn.slot, reason);
                    }
                }
                Msg::AbortTasks {
                    tid,
                    lun,
                    nexuses,
                    except,
                    ended,
                } => {
                    let mut running = Vec::new();
                    for s in 0..self.slots.len() {
                        let id = self.id(s);
                        let Some(slot) = self.slots[s].as_mut() else {
                            continue;
                        };
                        let ours = slot.session.normal().is_some_and(|n| {
                            n.target.tid == tid
                                && nexuses
                                    .as_ref()
                                    .is_none_or(|list| list.contains(&n.nexus.id))
                        }) && id != except;
                        running.clear();
                        if ours && slot.conn.abort_tasks(lun, &mut running) > 0 {
                            if let (Some(c), Some(e)) = (id, &ended) {
                                e.add(running.len());
                                for &itt in &running {
                                    self.awaited.insert((c, itt), Arc::clone(e));
                                }
                            }
                            if let Some(c) = id {
                                crate::backend::task_watch::tasks_ended(c, |itt| {
                                    slot.conn.task_wanted(itt)
                                });
                            }
                            tracing::info!(peer = %slot.peer, lun, "tasks ended by another I_T nexus");
                            if !touched.contains(&s) {
                                touched.push(s);
                            }
                        }
                    }
                    // held commands of the ended tasks leave now, before the count goes down
                    if !self.throttle.is_empty() {
                        self.end_unwanted_held();
                    }
                    if let Some(e) = ended {
                        e.one_done();
                    }
                }
                Msg::Resume(m) => {
                    if !self.stopping {
                        self.resume(m);
                    }
                }
                Msg::Quiesce {
                    logout_within,
                    move_tcp,
                } => {
                    for l in &mut self.listeners {
                        l.deregister(self.poll.registry());
                    }
                    self.listeners.clear();
                    for s in 0..self.slots.len() {
                        let Some(slot) = self.slots[s].as_mut() else {
                            continue;
                        };
                        if move_tcp
                            && slot.link.can_move()
                            && slot.session.normal().is_some()
                            && !slot.conn.is_closing()
                            && !slot.finishing()
                        {
                            slot.conn.hold_commands();
                            if !slot.moving {
                                slot.moving = true;
                                self.moving += 1;
                            }
                        } else if slot.conn.request_logout(logout_within) {
                            if !touched.contains(&s) {
                                touched.push(s);
                            }
                        } else if !slot.conn.is_closing() {
                            self.flush(s);
                            self.close(s, "target handing over to a new numatgtd");
                        }
                    }
                }
                Msg::Shutdown => {
                    self.stopping = true;
                    for l in &mut self.listeners {
                        l.deregister(self.poll.registry());
                    }
                    self.listeners.clear();
                    for s in 0..self.slots.len() {
                        if self.slots[s].is_some() {
                            self.flush(s);
                            self.close(s, "target shutting down");
                        }
                    }
                }
            }
        }
        self.batch = batch;
        for &s in &touched {
            self.process_events(s);
            self.flush(s);
        }
        self.touched = touched;
    }
}
