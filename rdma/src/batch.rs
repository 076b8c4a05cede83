//! Send-queue requests gathered and posted together: one `ibv_post_send` call for a chain of
//! Sends, RDMA WRITEs and READs. Providers ring the doorbell once per call; with soft-RoCE
//! the doorbell is a system call, so a READ command's data WRITE and its response Send cost
//! one instead of two.
//!
//! A [`SendBatch`] is plain data (ids, opcodes, scatter/gather entries): the `ibv_send_wr`
//! chain is built on the stack at post time, so the batch holds no pointers into itself and
//! can move between threads with its connection. Its storage is allocated once, at creation.

use rdma_mummy_sys as ffi;

use crate::error::{Error, Result};
use crate::qp::{Connection, MAX_POST_SGE, Remote, SendOptions, Sge};

/// Most requests in one batch (one post).
pub const MAX_BATCH: usize = 16;

/// Most scatter/gather entries of all the batch's requests together.
const MAX_BATCH_SGE: usize = MAX_BATCH * 4;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send { invalidate: Option<u32> },
    Write(Remote),
    Read(Remote),
}

#[derive(Debug, Clone, Copy)]
struct Request {
    wr_id: u64,
    kind: Kind,
    signaled: bool,
    solicited: bool,
    /// Its entries: `sges[first..first + count]`.
    first: usize,
    count: usize,
}

/// Requests waiting to be posted in one call, in order (see the module documentation).
#[derive(Debug)]
pub struct SendBatch {
    reqs: Vec<Request>,
    sges: Vec<Sge>,
}

/// A batch post that failed part-way: the first `posted` requests are on the queue, the
/// rest are not (their ids: [`SendBatch::wr_id`] from `posted` on).
#[derive(Debug)]
pub struct BatchError {
    /// Requests posted before the failure.
    pub posted: usize,
    /// Why the rest was refused.
    pub error: Error,
}

impl Default for SendBatch {
    fn default() -> Self {
        SendBatch::new()
    }
}

impl SendBatch {
    /// An empty batch with room for [`MAX_BATCH`] requests.
    pub fn new() -> SendBatch {
        SendBatch {
            reqs: Vec::with_capacity(MAX_BATCH),
            sges: Vec::with_capacity(MAX_BATCH_SGE),
        }
    }

    /// Requests gathered.
    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    /// Nothing gathered.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether a request of `sges` entries still fits (else post the batch first).
    pub fn has_room(&self, sges: usize) -> bool {
        self.reqs.len() < MAX_BATCH && self.sges.len() + sges <= MAX_BATCH_SGE
    }

    /// The work-request id of request `i`, in posting order.
    pub fn wr_id(&self, i: usize) -> Option<u64> {
        self.reqs.get(i).map(|r| r.wr_id)
    }

    /// Forgets every request (after a post, or to drop the unposted rest of a failed one).
    pub fn clear(&mut self) {
        self.reqs.clear();
        self.sges.clear();
    }

    /// Adds a Send of `sges` (Send with Invalidate when `opts.invalidate` is set).
    pub fn send(&mut self, wr_id: u64, sges: &[Sge], opts: SendOptions) -> Result<()> {
        self.push(
            wr_id,
            Kind::Send {
                invalidate: opts.invalidate,
            },
            sges,
            opts.signaled,
            opts.solicited,
        )
    }

    /// Adds an RDMA WRITE of `sges`, in order, to `remote`.
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        remote: Remote,
        signaled: bool,
    ) -> Result<()> {
        self.push(wr_id, Kind::Write(remote), sges, signaled, false)
    }

    /// Adds an RDMA READ from `remote` into `sges`, in order.
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        remote: Remote,
        signaled: bool,
    ) -> Result<()> {
        self.push(wr_id, Kind::Read(remote), sges, signaled, false)
    }

    fn push(
        &mut self,
        wr_id: u64,
        kind: Kind,
        sges: &[Sge],
        signaled: bool,
        solicited: bool,
    ) -> Result<()> {
        if sges.len() > MAX_POST_SGE {
            return Err(Error::Invalid(
                "too many scatter/gather entries in one request",
            ));
        }
        if !self.has_room(sges.len()) {
            return Err(Error::Invalid("send batch full"));
        }
        self.reqs.push(Request {
            wr_id,
            kind,
            signaled,
            solicited,
            first: self.sges.len(),
            count: sges.len(),
        });
        self.sges.extend_from_slice(sges);
        Ok(())
    }
}

impl Connection {
    /// Posts every request of `batch`, in order, with one `ibv_post_send` call, and empties
    /// it. On failure the batch is left as it was: [`BatchError::posted`] says how many of
    /// its requests went on the queue; the caller takes back the rest and clears it.
    pub fn post_batch(&self, batch: &mut SendBatch) -> std::result::Result<(), BatchError> {
        let n = batch.reqs.len();
        if n == 0 {
            return Ok(());
        }
        // SAFETY: all-zero is a valid ibv_send_wr (NULL pointers, integers, integer unions).
        let mut wrs: [ffi::ibv_send_wr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let sges = batch.sges.as_mut_ptr().cast::<ffi::ibv_sge>();
        let base = wrs.as_mut_ptr();
        for (i, r) in batch.reqs.iter().enumerate() {
            let wr = &mut wrs[i];
            wr.wr_id = r.wr_id;
            wr.num_sge = r.count as libc::c_int;
            // SAFETY: `first + count <= sges.len()` (push keeps it so); `Sge` has the layout
            // of `ibv_sge` (asserted in qp.rs); the provider only reads the entries.
            wr.sg_list = unsafe { sges.add(r.first) };
            let mut flags = 0;
            if r.signaled {
                flags |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if r.solicited {
                flags |= ffi::ibv_send_flags::IBV_SEND_SOLICITED.0;
            }
            wr.send_flags = flags;
            match r.kind {
                Kind::Send { invalidate: None } => wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND,
                Kind::Send {
                    invalidate: Some(rkey),
                } => {
                    wr.opcode = ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                    wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
                }
                Kind::Write(to) | Kind::Read(to) => {
                    wr.opcode = if matches!(r.kind, Kind::Write(_)) {
                        ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE
                    } else {
                        ffi::ibv_wr_opcode::IBV_WR_RDMA_READ
                    };
                    wr.wr.rdma = ffi::rdma_t {
                        remote_addr: to.addr,
                        rkey: to.rkey,
                    };
                }
            }
            if i + 1 < n {
                // SAFETY: `i + 1 < n <= MAX_BATCH`: inside `wrs`, which outlives the call.
                wr.next = unsafe { base.add(i + 1) };
            }
        }
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `wrs[..n]` is a fully initialised chain whose entries and
        // scatter/gather lists (in `batch`, borrowed mutably) live across the call;
        // providers copy requests before returning; the device checks every entry against
        // its lkey's region.
        let rc = unsafe { ffi::ibv_post_send(self.qp_ptr(), base, &mut bad) };
        if rc == 0 {
            batch.clear();
            return Ok(());
        }
        // the first refused request: the ones before it are posted
        let posted = if bad.is_null() {
            0
        } else {
            (bad as usize).saturating_sub(base as usize) / std::mem::size_of::<ffi::ibv_send_wr>()
        };
        Err(BatchError {
            posted: posted.min(n),
            error: Error::Call {
                call: "ibv_post_send",
                source: std::io::Error::from_raw_os_error(if rc < 0 { -rc } else { rc }),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(n: u32) -> Sge {
        Sge {
            addr: 0x1000 * u64::from(n),
            len: 512,
            lkey: n,
        }
    }

    #[test]
    fn gathers_in_order_and_refuses_past_its_room() {
        let mut b = SendBatch::new();
        assert!(b.is_empty());
        b.rdma_write(7, &[sge(1), sge(2)], Remote::default(), false)
            .unwrap();
        b.send(8, &[sge(3)], SendOptions::default()).unwrap();
        assert_eq!(
            (b.len(), b.wr_id(0), b.wr_id(1), b.wr_id(2)),
            (2, Some(7), Some(8), None)
        );
        assert!(
            b.send(9, &[sge(1); MAX_POST_SGE + 1], SendOptions::default())
                .is_err()
        );
        for i in 2..MAX_BATCH {
            assert!(b.has_room(1));
            b.rdma_read(i as u64, &[sge(1)], Remote::default(), true)
                .unwrap();
        }
        assert!(!b.has_room(1));
        assert!(b.send(99, &[sge(1)], SendOptions::default()).is_err());
        b.clear();
        assert!(b.is_empty() && b.has_room(MAX_BATCH_SGE) && !b.has_room(MAX_BATCH_SGE + 1));
    }
}
