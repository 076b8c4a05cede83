//! Commands an event thread holds back for their LUN's QoS limits: each is charged when it
//! arrives (`qos::LunQos::charge` says when it may start) and, when that is later than
//! this loop turn, waits here, in its connection's name, until its time. Held commands are
//! never failed: they start in the order of their times (the order the LUN's buckets
//! charged them, whatever connection or thread they came from), and a connection that has
//! commands held gets a narrowed command window (so an initiator queues the rest itself and
//! sessions of one LUN get even shares). Task management is never held: the tasks it ends
//! leave this queue at once ([`Throttle::take_unwanted`]).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use iscsi_proto::ScsiCommand;

use crate::conn_id::ConnId;
use crate::qos::{Dir, LunQos};

/// The commands a connection with held commands may have in flight and sendable together.
pub(super) const NARROWED_WINDOW: u32 = 16;

/// How long a connection's window stays narrowed after its last held command (ms).
pub(super) const NARROWED_FOR_MS: u64 = 1000;

/// One held command.
pub(super) struct Held {
    /// When it may start (`io_stats::now_ns`'s clock).
    pub due_ns: u64,
    /// Arrival order among commands due at the same time.
    seq: u64,
    /// When it was held.
    pub since_ns: u64,
    pub conn: ConnId,
    pub cmd: ScsiCommand,
    /// Its LUN's limits (counts the wait).
    pub qos: Arc<LunQos>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due_ns, self.seq) == (o.due_ns, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    /// The earliest first out of the (max-)heap.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.due_ns, o.seq).cmp(&(self.due_ns, self.seq))
    }
}

/// An event thread's held commands, the earliest first.
#[derive(Default)]
pub(super) struct Throttle {
    heap: BinaryHeap<Held>,
    seq: u64,
}

impl Throttle {
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Holds `cmd` of `conn` until `due_ns`.
    pub fn hold(
        &mut self,
        due_ns: u64,
        now_ns: u64,
        conn: ConnId,
        cmd: ScsiCommand,
        qos: Arc<LunQos>,
    ) {
        self.seq += 1;
        self.heap.push(Held {
            due_ns,
            seq: self.seq,
            since_ns: now_ns,
            conn,
            cmd,
            qos,
        });
    }

    /// How long until the earliest is due (`None`: none held).
    pub fn wait(&self, now_ns: u64) -> Option<Duration> {
        self.heap
            .peek()
            .map(|h| Duration::from_nanos(h.due_ns.saturating_sub(now_ns)))
    }

    /// The earliest held command if it is due at `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Held> {
        if self.heap.peek()?.due_ns <= now_ns {
            self.heap.pop()
        } else {
            None
        }
    }

    /// Takes out every held command `unwanted` says no longer runs (its task ended by task
    /// management, its connection gone).
    pub fn take_unwanted(&mut self, mut unwanted: impl FnMut(&Held) -> bool) -> Vec<Held> {
        if !self.heap.iter().any(&mut unwanted) {
            return Vec::new();
        }
        let (gone, kept): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.heap)
            .into_iter()
            .partition(|h| unwanted(h));
        self.heap = kept.into();
        gone
    }
}

/// What a command is to its LUN's limits: a read or a write and its data's bytes; `None`
/// for what no limit counts (task attribute ORDERED or HEAD OF QUEUE: never held behind
/// others; commands that neither read nor write the medium: reservations, TEST UNIT
/// READY, SYNCHRONIZE CACHE, UNMAP…).
pub(super) fn charged_as(cmd: &ScsiCommand) -> Option<(Dir, u64)> {
    const ORDERED: u8 = 2;
    const HEAD_OF_QUEUE: u8 = 3;
    if matches!(cmd.attr, ORDERED | HEAD_OF_QUEUE) {
        return None;
    }
    match scsi::op_class(cmd.cdb.first().copied().unwrap_or(0)) {
        scsi::OpClass::Read => Some((Dir::Read, u64::from(cmd.expected_read_len))),
        scsi::OpClass::Write => Some((Dir::Write, u64::from(cmd.expected_write_len))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(itt: u32, op: u8, attr: u8) -> ScsiCommand {
        let mut cdb = [0u8; 16];
        cdb[0] = op;
        ScsiCommand {
            itt,
            lun: 0,
            cdb: iscsi_proto::Cdb::new(&cdb).expect("16 bytes"),
            attr,
            read: op == 0x28,
            write: op == 0x2A,
            expected_read_len: if op == 0x28 { 4096 } else { 0 },
            expected_write_len: if op == 0x2A { 8192 } else { 0 },
            data_out: Vec::new(),
            landed: 0,
            immediate: false,
        }
    }

    const C: ConnId = ConnId {
        thread: 0,
        slot: 1,
        generation: 1,
    };

    #[test]
    fn the_earliest_comes_out_first_and_only_when_due() {
        let mut t = Throttle::default();
        let q = Arc::new(LunQos::default());
        t.hold(30, 0, C, cmd(3, 0x28, 1), Arc::clone(&q));
        t.hold(10, 0, C, cmd(1, 0x28, 1), Arc::clone(&q));
        t.hold(10, 0, C, cmd(2, 0x28, 1), Arc::clone(&q));
        assert_eq!(t.wait(4), Some(Duration::from_nanos(6)));
        assert!(t.pop_due(9).is_none());
        let order: Vec<u32> = std::iter::from_fn(|| t.pop_due(30))
            .map(|h| h.cmd.itt)
            .collect();
        assert_eq!(order, [1, 2, 3], "by time, then arrival");
        assert!(t.is_empty());
        assert_eq!(t.wait(0), None);
    }

    #[test]
    fn ended_tasks_leave_at_once() {
        let mut t = Throttle::default();
        let q = Arc::new(LunQos::default());
        for itt in 0..6 {
            t.hold(
                100 + u64::from(itt),
                0,
                C,
                cmd(itt, 0x28, 1),
                Arc::clone(&q),
            );
        }
        assert!(t.take_unwanted(|_| false).is_empty());
        let gone = t.take_unwanted(|h| h.cmd.itt % 2 == 0);
        assert_eq!(gone.len(), 3);
        let left: Vec<u32> = std::iter::from_fn(|| t.pop_due(u64::MAX))
            .map(|h| h.cmd.itt)
            .collect();
        assert_eq!(left, [1, 3, 5]);
    }

    #[test]
    fn only_simple_reads_and_writes_are_charged() {
        assert_eq!(charged_as(&cmd(1, 0x28, 1)), Some((Dir::Read, 4096)));
        assert_eq!(charged_as(&cmd(1, 0x2A, 0)), Some((Dir::Write, 8192)));
        assert_eq!(charged_as(&cmd(1, 0x28, 2)), None, "ordered");
        assert_eq!(charged_as(&cmd(1, 0x2A, 3)), None, "head of queue");
        for op in [0x00, 0x5F, 0x35, 0x42, 0x12] {
            assert_eq!(charged_as(&cmd(1, op, 1)), None, "{op:#x}");
        }
    }
}
