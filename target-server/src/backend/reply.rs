//! The bottom of the backend: how a finished command gets back to the transport that
//! received it, without the backend knowing which transport that is. The event loop (one
//! for every transport: TCP, iSER) implements [`CompletionSink`]; each
//! command carries a [`ReplyTo`]; one that completes at once answers [`Answer::Now`], one
//! that continues on an I/O worker defers it into an armed [`Replier`] that sends its result
//! through the sink exactly once (and [`Answer::Later`] needs the proof that it did). A
//! `Replier` dropped unanswered — a job that panicked, a path that forgot to answer —
//! answers CHECK CONDITION (HARDWARE ERROR, INTERNAL TARGET FAILURE) and logs it, so no
//! command is ever left for the initiator to time out.
//!
//! Also here: [`TaskControl`], the one thing the backend asks of the transports' event
//! threads (end other sessions' tasks, [`TasksEnded`] counting them until their work has
//! ended), and [`completed`], the conversion of an emulated
//! command's `scsi::Completion` into what a connection sends.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use iscsi_proto::CommandResult;

use super::payload::Payload;
use crate::conn_id::ConnId;
use crate::io_stats::{IoKind, IoTag};

/// Where results of commands finished off the connection's thread go: the connection
/// driver's mailbox. Called on I/O workers and background threads; must not block for long.
pub trait CompletionSink: Send + Sync {
    /// Command `itt` of connection `conn` finished with `result`; `buffer` is its write
    /// buffer, back for the connection to reuse (empty if none); `tag` is what the
    /// connection attached to the command for its statistics.
    fn complete(
        &self,
        conn: ConnId,
        itt: u32,
        tag: IoTag,
        result: CommandResult<Payload>,
        buffer: Vec<u8>,
    );
}

/// Ends tasks of other sessions (task management from another I_T nexus, PREEMPT AND
/// ABORT): every event thread of every transport ends the matching tasks of its sessions
/// of target `tid` — on `lun` (every LUN with `None`), of the listed nexuses only (all with
/// `None`), never of connection `except`. Their answers are not sent. With `ended`, each
/// thread counts the ended tasks whose work is still running into it and counts each
/// down when that work ends, so that whoever holds it learns when all of them have.
pub trait TaskControl: Sync {
    fn abort_tasks(
        &self,
        tid: u32,
        lun: Option<u64>,
        nexuses: Option<Vec<scsi::NexusId>>,
        except: Option<ConnId>,
        ended: Option<Arc<TasksEnded>>,
    );
}

/// A countdown of what a task management response waits for — the event threads that
/// have still to look at their sessions, then the ended tasks whose work (a backend job, a
/// command shipped to another gateway) is still running — and what to do at zero: send
/// the response (SAM-5 7.1: a LOGICAL UNIT RESET completes once the tasks it aborted have
/// ended, those of every I_T nexus). Counting down past zero does nothing.
pub struct TasksEnded {
    left: AtomicUsize,
    then: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl TasksEnded {
    /// Waits for `count` things (at least one: the holder's own part), then runs `then`.
    pub fn new(count: usize, then: impl FnOnce() + Send + 'static) -> Arc<TasksEnded> {
        Arc::new(TasksEnded {
            left: AtomicUsize::new(count.max(1)),
            then: Mutex::new(Some(Box::new(then))),
        })
    }

    /// `n` more to wait for (before the caller's own count down).
    pub fn add(&self, n: usize) {
        self.left.fetch_add(n, std::sync::atomic::Ordering::AcqRel);
    }

    /// One of them ended.
    pub fn one_done(&self) {
        let before = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before == 1 {
            self.fire();
        }
    }

    /// What is left to wait for.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::Acquire)
    }

    fn fire(&self) {
        let then = self.then.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(f) = then {
            f();
        }
    }
}

/// Where the answer of one command goes, before it is known whether the command completes
/// at once (most emulated commands, cache hits) or continues on an I/O worker. Dropping it
/// sends nothing: the caller answers an [`Answer::Now`] itself. A command that continues
/// elsewhere [`defer`](ReplyTo::defer)s it into an armed [`Replier`].
pub struct ReplyTo {
    sink: Arc<dyn CompletionSink>,
    conn: ConnId,
    itt: u32,
    /// The CDB's write transfer length, stamped on the result for the write residuals.
    write_transfer_len: Option<u32>,
    /// The command's statistics tag, handed back with the result.
    tag: IoTag,
}

impl ReplyTo {
    pub fn new(sink: Arc<dyn CompletionSink>, conn: ConnId, itt: u32) -> Self {
        ReplyTo {
            sink,
            conn,
            itt,
            write_transfer_len: None,
            tag: IoTag::NONE,
        }
    }

    /// Attach the connection's statistics tag (arrival time, counter block).
    pub fn set_tag(&mut self, tag: IoTag) {
        self.tag = tag;
    }

    /// What the command turned out to be (set by dispatch once the action is known).
    pub fn set_kind(&mut self, kind: IoKind) {
        self.tag.kind = kind;
    }

    /// The connection the command arrived on.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// The command's initiator task tag.
    pub fn itt(&self) -> u32 {
        self.itt
    }

    pub fn set_write_transfer_len(&mut self, len: Option<u32>) {
        self.write_transfer_len = len;
    }

    /// The command continues off this thread: the armed replier that must carry its answer,
    /// and the proof for [`Answer::Later`] that one exists.
    pub fn defer(self) -> (Replier, Deferred) {
        (
            Replier {
                sink: Some(self.sink),
                conn: self.conn,
                itt: self.itt,
                write_transfer_len: self.write_transfer_len,
                tag: self.tag,
            },
            Deferred(()),
        )
    }
}

/// Proof that a command's answer was handed to an armed [`Replier`]; only
/// [`ReplyTo::defer`] makes one.
#[must_use = "a deferred command is answered through its Replier"]
#[derive(Debug)]
pub struct Deferred(());

/// How a command handed to the backend is answered.
#[must_use = "an Answer::Now must be sent by the caller"]
#[derive(Debug)]
pub enum Answer {
    /// Complete: the caller sends this (stamping the write transfer length).
    Now(CommandResult<Payload>),
    /// Continues elsewhere; its [`Replier`] answers.
    Later(Deferred),
}

impl From<CommandResult<Payload>> for Answer {
    fn from(r: CommandResult<Payload>) -> Self {
        Answer::Now(r)
    }
}

impl From<Deferred> for Answer {
    fn from(d: Deferred) -> Self {
        Answer::Later(d)
    }
}

/// The armed answer of one command that continues off the connection's thread. Consumed by
/// [`Replier::send`]; dropping it unsent answers CHECK CONDITION (see the module doc).
pub struct Replier {
    /// `None` once answered.
    sink: Option<Arc<dyn CompletionSink>>,
    conn: ConnId,
    itt: u32,
    write_transfer_len: Option<u32>,
    tag: IoTag,
}

impl Replier {
    pub fn send(self, result: CommandResult<Payload>) {
        self.send_with_buffer(result, Vec::new());
    }

    /// The result, and the command's write buffer back for the connection to reuse.
    pub fn send_with_buffer(mut self, mut result: CommandResult<Payload>, buffer: Vec<u8>) {
        result.write_transfer_len = self.write_transfer_len;
        if let Some(sink) = self.sink.take() {
            sink.complete(self.conn, self.itt, self.tag, result, buffer);
        }
    }
}

impl Drop for Replier {
    fn drop(&mut self) {
        let Some(sink) = self.sink.take() else {
            return;
        };
        tracing::error!(
            itt = format_args!("{:#x}", self.itt),
            "internal error: a command ended without an answer (a backend job panicked?); \
             answering CHECK CONDITION / INTERNAL TARGET FAILURE"
        );
        let mut result = internal_failure();
        result.write_transfer_len = self.write_transfer_len;
        sink.complete(self.conn, self.itt, self.tag, result, Vec::new());
    }
}

/// CHECK CONDITION, HARDWARE ERROR / INTERNAL TARGET FAILURE (fixed-format sense: the
/// replier does not know the LUN's D_SENSE setting).
pub fn internal_failure() -> CommandResult<Payload> {
    completed(scsi::Completion::check_condition(
        &scsi::Sense::internal_target_failure(),
        false,
    ))
}

/// An emulated command's completion as the connection sends it. (A function, not `From`:
/// both types are foreign to this crate.)
pub fn completed(c: scsi::Completion) -> CommandResult<Payload> {
    CommandResult {
        status: c.status,
        sense: c.sense,
        data: if c.data.is_empty() {
            None
        } else {
            Some(Payload::bytes(c.data))
        },
        write_transfer_len: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// What a sink was sent: connection, ITT, status, sense, write transfer length.
    type Sent = (ConnId, u32, u8, Vec<u8>, Option<u32>);

    /// A sink that keeps what it is sent.
    #[derive(Default)]
    struct Collect(Mutex<Vec<Sent>>);

    impl CompletionSink for Collect {
        fn complete(
            &self,
            conn: ConnId,
            itt: u32,
            _: IoTag,
            r: CommandResult<Payload>,
            _: Vec<u8>,
        ) {
            if let Ok(mut v) = self.0.lock() {
                v.push((conn, itt, r.status, r.sense, r.write_transfer_len));
            }
        }
    }

    fn conn() -> ConnId {
        ConnId {
            thread: 1,
            slot: 2,
            generation: 3,
        }
    }

    #[test]
    fn send_answers_once_with_the_write_length() {
        let sink = Arc::new(Collect::default());
        let mut to = ReplyTo::new(sink.clone(), conn(), 0x42);
        to.set_write_transfer_len(Some(4096));
        let (r, _later) = to.defer();
        r.send(CommandResult::good());
        let got = sink.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(got.len(), 1, "exactly one answer");
        assert_eq!((got[0].1, got[0].2, got[0].4), (0x42, 0, Some(4096)));
    }

    #[test]
    fn dropped_unanswered_means_check_condition() {
        let sink = Arc::new(Collect::default());
        // an undeferred ReplyTo answers nothing (its caller answers now)
        drop(ReplyTo::new(sink.clone(), conn(), 6));
        assert!(sink.0.lock().map(|v| v.is_empty()).unwrap_or(false));
        let (r, _later) = ReplyTo::new(sink.clone(), conn(), 7).defer();
        drop(r);
        let got = sink.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].2, scsi::status::CHECK_CONDITION);
        // fixed format: key at byte 2, ASC/ASCQ at 12/13
        assert_eq!(
            (got[0].3[2] & 0x0f, got[0].3[12], got[0].3[13]),
            (0x04, 0x44, 0x00)
        );
    }

    #[test]
    fn a_panicking_job_still_answers() {
        let sink = Arc::new(Collect::default());
        let (r, _later) = ReplyTo::new(sink.clone(), conn(), 9).defer();
        let job = move || {
            let _reply = r;
            panic!("simulated bug in a backend job");
        };
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err());
        let got = sink.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(got.len(), 1, "the unwinding job answered");
        assert_eq!((got[0].1, got[0].2), (9, scsi::status::CHECK_CONDITION));
    }
}
