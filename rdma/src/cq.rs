//! A completion queue with its own completion channel (one per connection, never shared):
//! the channel's fd is non-blocking and goes into the owning event thread's mio poll set.
//!
//! The cycle, as verbs wants it to lose no completion:
//! [`CompletionQueue::arm`], then on readiness [`CompletionQueue::get_event`] until it
//! returns `false` (each event is acked at once), re-arm, and [`CompletionQueue::poll`]
//! until it returns fewer than asked — polling after re-arming catches what completed in
//! between.

use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;

use rdma_mummy_sys as ffi;

use crate::context::Context;
use crate::error::{Error, LIBIBVERBS, Result};

/// A work completion's status (`enum ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// The request completed.
    pub const SUCCESS: WcStatus = WcStatus(ffi::ibv_wc_status::IBV_WC_SUCCESS);
    /// Flushed: the queue pair went to the error state (disconnect, teardown).
    pub const FLUSH: WcStatus = WcStatus(ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR);

    /// Whether it is [`WcStatus::SUCCESS`].
    pub fn is_success(self) -> bool {
        self == WcStatus::SUCCESS
    }

    /// The name verbs gives it (as `ibv_wc_status_str`, without calling the library).
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 24] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "aborted error",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
            "TM error",
            "TM software rendezvous",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("unknown")
    }
}

impl std::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// What a work completion completed (`enum ibv_wc_opcode`; only meaningful on success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcOpcode {
    /// A Send (or Send with Invalidate) of this side.
    #[default]
    Send,
    /// An RDMA WRITE of this side.
    RdmaWrite,
    /// An RDMA READ of this side.
    RdmaRead,
    /// A local invalidation.
    LocalInv,
    /// A receive: the peer's Send arrived.
    Recv,
    /// A receive of an RDMA WRITE with immediate data.
    RecvRdmaWithImm,
    /// Another value.
    Other(u32),
}

impl WcOpcode {
    fn from_raw(v: ffi::ibv_wc_opcode::Type) -> WcOpcode {
        use ffi::ibv_wc_opcode::*;
        match v {
            IBV_WC_SEND => WcOpcode::Send,
            IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
            IBV_WC_RECV => WcOpcode::Recv,
            IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            o => WcOpcode::Other(o),
        }
    }
}

/// One work completion, copied out of `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// The caller's id of the work request.
    pub wr_id: u64,
    /// Its status.
    pub status: WcStatus,
    /// What completed (meaningful on success only).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred (RDMA READ).
    pub byte_len: u32,
    /// For a receive of a Send with Invalidate: the rkey the peer invalidated here.
    pub invalidated_rkey: Option<u32>,
    /// The vendor's error code (errors only).
    pub vendor_err: u32,
}

impl Completion {
    fn from_wc(wc: &ffi::ibv_wc) -> Completion {
        let with_inv = wc.wc_flags & ffi::ibv_wc_flags::IBV_WC_WITH_INV.0 != 0;
        // SAFETY: both union members are plain u32; with IBV_WC_WITH_INV the provider wrote
        // the invalidated rkey there.
        let inv = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
        Completion {
            wr_id: wc.wr_id,
            status: WcStatus(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            invalidated_rkey: with_inv.then_some(inv),
            vendor_err: wc.vendor_err,
        }
    }
}

/// A completion queue and its own completion channel.
pub struct CompletionQueue {
    cq: NonNull<ffi::ibv_cq>,
    channel: NonNull<ffi::ibv_comp_channel>,
    depth: u32,
    _ctx: Context,
}

// SAFETY: libibverbs CQ verbs (poll, req_notify, get/ack events) are thread-safe; this
// wrapper keeps no Rust-side mutable state; destruction happens once, in drop.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

/// Completions copied per `ibv_poll_cq` call.
const POLL_CHUNK: usize = 16;

impl CompletionQueue {
    /// A completion channel (its fd made non-blocking) and a queue of at least `depth`
    /// entries bound to it, on `ctx`. Size it for every signaled send and posted receive of
    /// the queue pairs using it.
    pub fn new(ctx: &Context, depth: u32) -> Result<CompletionQueue> {
        let cqe = libc::c_int::try_from(depth)
            .ok()
            .filter(|&d| d > 0)
            .ok_or(Error::Invalid(
                "completion queue depth must be 1..=i32::MAX",
            ))?;
        // SAFETY: the context is open (held by `ctx`).
        let ch = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
        let channel =
            NonNull::new(ch).ok_or_else(|| Error::last("ibv_create_comp_channel", LIBIBVERBS))?;
        // SAFETY: the channel was just created; `fd` is set at creation and constant.
        let fd = unsafe { channel.as_ref().fd };
        if let Err(e) = set_nonblocking(fd, LIBIBVERBS) {
            // SAFETY: the channel has no CQ yet and is destroyed once.
            unsafe { ffi::ibv_destroy_comp_channel(channel.as_ptr()) };
            return Err(e);
        }
        // SAFETY: the context and the channel are live; no CQ context pointer is used.
        let cq = unsafe {
            ffi::ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), channel.as_ptr(), 0)
        };
        let Some(cq) = NonNull::new(cq) else {
            let e = Error::last("ibv_create_cq", LIBIBVERBS);
            // SAFETY: the channel has no CQ and is destroyed once.
            unsafe { ffi::ibv_destroy_comp_channel(channel.as_ptr()) };
            return Err(e);
        };
        // SAFETY: the CQ was just created; `cqe` (the real depth) is constant.
        let real = unsafe { cq.as_ref().cqe };
        Ok(CompletionQueue {
            cq,
            channel,
            depth: u32::try_from(real).unwrap_or(depth),
            _ctx: ctx.clone(),
        })
    }

    /// The queue's real depth (the provider may round up).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Asks for one event on the channel at the next completion (`solicited_only`: only at
    /// the next solicited one or error).
    pub fn arm(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: the CQ is live; req_notify_cq is thread-safe.
        let rc = unsafe { ffi::ibv_req_notify_cq(self.cq.as_ptr(), i32::from(solicited_only)) };
        if rc != 0 {
            return Err(Error::Call {
                call: "ibv_req_notify_cq",
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        Ok(())
    }

    /// Reads and acks one completion event without blocking: `false` when there is none.
    /// The queue is disarmed by the event: call [`CompletionQueue::arm`] again.
    pub fn get_event(&self) -> Result<bool> {
        let mut cq: *mut ffi::ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; `cq` and `ctx` are valid out pointers.
        let rc = unsafe { ffi::ibv_get_cq_event(self.channel.as_ptr(), &mut cq, &mut ctx) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(Error::classify(
                "ibv_get_cq_event",
                crate::error::LIBIBVERBS,
                e,
            ));
        }
        if cq != self.cq.as_ptr() {
            return Err(Error::Invalid("completion event for a foreign CQ"));
        }
        // SAFETY: one event of this CQ was just read; it is acked once.
        unsafe { ffi::ibv_ack_cq_events(self.cq.as_ptr(), 1) };
        Ok(true)
    }

    /// Moves up to `out.len()` completions into `out`; returns how many (fewer than asked:
    /// the queue is empty).
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize> {
        // SAFETY: all-zero is a valid ibv_wc (integers and an integer union).
        let mut wcs: [ffi::ibv_wc; POLL_CHUNK] = unsafe { std::mem::zeroed() };
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(POLL_CHUNK);
            // SAFETY: the CQ is live; `wcs` has room for `want <= POLL_CHUNK` entries.
            let n = unsafe { ffi::ibv_poll_cq(self.cq.as_ptr(), want as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(Error::Call {
                    call: "ibv_poll_cq",
                    source: std::io::Error::from_raw_os_error(-n),
                });
            }
            let n = n as usize;
            for (o, wc) in out[done..].iter_mut().zip(&wcs[..n]) {
                *o = Completion::from_wc(wc);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.cq.as_ptr()
    }
}

impl AsRawFd for CompletionQueue {
    /// The completion channel's fd (non-blocking), for a mio poll set.
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is live while `self` is; `fd` is constant.
        unsafe { self.channel.as_ref().fd }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: every queue pair using the CQ holds an Arc to it, so none is left; every
        // event was acked when read; the CQ goes first, then its channel, each once.
        unsafe {
            ffi::ibv_destroy_cq(self.cq.as_ptr());
            ffi::ibv_destroy_comp_channel(self.channel.as_ptr());
        }
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CompletionQueue(fd {}, depth {})",
            self.as_raw_fd(),
            self.depth
        )
    }
}

/// Sets O_NONBLOCK on `fd` (a channel of `lib`, named in the error).
pub(crate) fn set_nonblocking(fd: RawFd, lib: &'static std::ffi::CStr) -> Result<()> {
    // SAFETY: `fd` is an open fd owned by the caller; F_GETFL/F_SETFL only change its flags.
    let rc = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 {
            fl
        } else {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        return Err(Error::last("fcntl(O_NONBLOCK)", lib));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names() {
        assert!(WcStatus::SUCCESS.is_success());
        assert_eq!(WcStatus::FLUSH.name(), "Work Request Flushed Error");
        assert_eq!(WcStatus(10).name(), "remote access error");
        assert_eq!(WcStatus(99).name(), "unknown");
        assert_eq!(
            WcStatus(12).to_string(),
            "transport retry counter exceeded (12)"
        );
    }

    #[test]
    fn completion_from_wc() {
        // SAFETY: all-zero is a valid ibv_wc.
        let mut wc: ffi::ibv_wc = unsafe { std::mem::zeroed() };
        wc.wr_id = 7;
        wc.opcode = ffi::ibv_wc_opcode::IBV_WC_RECV;
        wc.byte_len = 76;
        wc.imm_data_invalidated_rkey_union.invalidated_rkey = 0x1234;
        let c = Completion::from_wc(&wc);
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len, c.invalidated_rkey),
            (7, WcOpcode::Recv, 76, None)
        );
        wc.wc_flags = ffi::ibv_wc_flags::IBV_WC_WITH_INV.0;
        assert_eq!(Completion::from_wc(&wc).invalidated_rkey, Some(0x1234));
        wc.opcode = ffi::ibv_wc_opcode::IBV_WC_RDMA_READ;
        wc.status = ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
        let c = Completion::from_wc(&wc);
        assert_eq!((c.opcode, c.status), (WcOpcode::RdmaRead, WcStatus::FLUSH));
        assert_eq!(WcOpcode::from_raw(200), WcOpcode::Other(200));
    }
}
