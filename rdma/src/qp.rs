//! A connection: an RC queue pair created on a CM id (`rdma_create_qp`) with one completion
//! queue for sends and receives, the CM calls that connect it (accept, or connect on the
//! client side, disconnect), and the posting of work requests.
//!
//! Posting is safe: every scatter/gather entry is checked by the device against the region
//! its lkey names (a stale or foreign key ends in an error completion, not a stray access),
//! and inline Sends copy from a borrowed slice. The parameters are plain (address, length,
//! key) so the `iser` crate's planned requests map onto them one to one.

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys as ffi;

use crate::cm::CmId;
use crate::context::ProtectionDomain;
use crate::cq::CompletionQueue;
use crate::error::{Error, LIBRDMACM, Result};
use crate::srq::SharedReceiveQueue;

/// One local scatter/gather entry: `len` bytes at `addr` of the region `lkey` names. Same
/// layout as `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the memory region holding it.
    pub lkey: u32,
}

const _: () = {
    assert!(std::mem::size_of::<Sge>() == std::mem::size_of::<ffi::ibv_sge>());
    assert!(std::mem::offset_of!(Sge, addr) == std::mem::offset_of!(ffi::ibv_sge, addr));
    assert!(std::mem::offset_of!(Sge, len) == std::mem::offset_of!(ffi::ibv_sge, length));
    assert!(std::mem::offset_of!(Sge, lkey) == std::mem::offset_of!(ffi::ibv_sge, lkey));
};

/// The peer's buffer of an RDMA READ or WRITE: its address and remote key (iSER's STag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Remote {
    /// Address of the first byte in the peer's region.
    pub addr: u64,
    /// The peer region's rkey.
    pub rkey: u32,
}

/// Queue-pair capacities: asked at creation, the real ones (possibly larger) after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send-queue depth (Sends, RDMA READs and WRITEs outstanding).
    pub max_send_wr: u32,
    /// Receive-queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send-queue request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
    /// Bytes a Send can carry inline.
    pub max_inline_data: u32,
}

/// Most scatter/gather entries one post takes (copied on the stack).
pub const MAX_POST_SGE: usize = 32;

/// How a Send is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendOptions {
    /// Whether it produces a completion (the queue pair does not signal all requests).
    pub signaled: bool,
    /// Send with Invalidate of this rkey at the peer (only when the peer negotiated it).
    pub invalidate: Option<u32>,
    /// Solicited event at the peer.
    pub solicited: bool,
}

/// An RC queue pair on a CM id. Dropping it destroys the queue pair, then the id; the
/// completion queue and protection domain it holds are released after.
pub struct Connection {
    qp: NonNull<ffi::ibv_qp>,
    caps: QpCaps,
    id: CmId,
    _cqs: Cqs,
    // after the queue pair: a shared receive queue outlives every queue pair on it
    _srq: Option<Arc<SharedReceiveQueue>>,
    _pd: Arc<ProtectionDomain>,
}

/// The completion queue(s) a queue pair reports to, held while it lives.
enum Cqs {
    One(Arc<CompletionQueue>),
    Two {
        send: Arc<CompletionQueue>,
        recv: Arc<CompletionQueue>,
    },
}

// SAFETY: posting and CM calls on a queue pair are thread-safe in libibverbs/librdmacm; the
// wrapper holds no Rust-side mutable state; teardown is unique (drop).
unsafe impl Send for Connection {}
// SAFETY: as above.
unsafe impl Sync for Connection {}

impl Connection {
    /// Creates an RC queue pair on `id` (an accepted connect request's id, or a client id
    /// whose route is resolved) in `pd`, with `cq` for both its sends and its receives, and
    /// completions only for signaled sends. `pd` must be on the id's device.
    ///
    /// On failure the id comes back with the error, so that a connect request can still be
    /// rejected (`CmId::reject`) rather than left to time out.
    pub fn create(
        id: CmId,
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> std::result::Result<Connection, (Error, CmId)> {
        Connection::create_on(id, pd, cq, caps, None)
    }

    /// As [`Connection::create`], the receives drawn from `srq` when given (then the queue
    /// pair has no receive queue of its own: [`Connection::post_recv`] fails, receives are
    /// posted to the shared queue; `caps.max_recv_wr` is ignored).
    pub fn create_on(
        id: CmId,
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        caps: QpCaps,
        srq: Option<&Arc<SharedReceiveQueue>>,
    ) -> std::result::Result<Connection, (Error, CmId)> {
        Connection::create_split(id, pd, Cqs::One(cq.clone()), caps, srq)
    }

    /// As [`Connection::create_on`], with the completions of the sends going to `send_cq`
    /// and those of the receives to `recv_cq` (each armed on its own: a side that needs no
    /// wake-up for its completions leaves its queue unarmed and polls it when it wakes for
    /// the other).
    pub fn create_on_split(
        id: CmId,
        pd: &Arc<ProtectionDomain>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
        srq: Option<&Arc<SharedReceiveQueue>>,
    ) -> std::result::Result<Connection, (Error, CmId)> {
        let cqs = Cqs::Two {
            send: send_cq.clone(),
            recv: recv_cq.clone(),
        };
        Connection::create_split(id, pd, cqs, caps, srq)
    }

    fn create_split(
        id: CmId,
        pd: &Arc<ProtectionDomain>,
        cqs: Cqs,
        caps: QpCaps,
        srq: Option<&Arc<SharedReceiveQueue>>,
    ) -> std::result::Result<Connection, (Error, CmId)> {
        let (send_cq, recv_cq) = match &cqs {
            Cqs::One(cq) => (cq.as_ptr(), cq.as_ptr()),
            Cqs::Two { send, recv } => (send.as_ptr(), recv.as_ptr()),
        };
        if id.verbs() != pd.context().as_ptr() {
            return Err((
                Error::Invalid("protection domain is not on the CM id's device"),
                id,
            ));
        }
        if srq.is_some_and(|s| !s.in_pd(pd)) {
            return Err((
                Error::Invalid("shared receive queue of another protection domain"),
                id,
            ));
        }
        let mut attr = ffi::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq,
            recv_cq,
            srq: srq.map_or(std::ptr::null_mut(), |s| s.as_ptr()),
            cap: ffi::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: if srq.is_some() { 0 } else { caps.max_recv_wr },
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the id, PD, CQs (and SRQ) are live and on the same device (checked above;
        // an SRQ is made in a PD of its own device); `attr` is a valid in/out attribute
        // block (the real caps are written back).
        if unsafe { ffi::rdma_create_qp(id.as_ptr(), pd.as_ptr(), &mut attr) } != 0 {
            return Err((Error::last("rdma_create_qp", LIBRDMACM), id));
        }
        // SAFETY: rdma_create_qp succeeded, so the id's `qp` field is set until
        // rdma_destroy_qp.
        let qp = unsafe { (*id.as_ptr()).qp };
        let Some(qp) = NonNull::new(qp) else {
            // SAFETY: the id is live; destroying its (absent) QP is a no-op.
            unsafe { ffi::rdma_destroy_qp(id.as_ptr()) };
            return Err((Error::Invalid("rdma_create_qp left no queue pair"), id));
        };
        let c = attr.cap;
        Ok(Connection {
            qp,
            caps: QpCaps {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            id,
            _cqs: cqs,
            _srq: srq.cloned(),
            _pd: pd.clone(),
        })
    }

    /// The raw queue pair (for posting from sibling modules).
    pub(crate) fn qp_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp.as_ptr()
    }

    /// The real capacities.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The CM id's handle: CM events about this connection carry it.
    pub fn handle(&self) -> usize {
        self.id.handle()
    }

    /// The queue pair number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live; `qp_num` is constant after creation.
        unsafe { self.qp.as_ref().qp_num }
    }

    /// Accepts the connect request the id came from, sending `private_data` (iSER: 4 bytes,
    /// at most 196 on RDMA_PS_TCP), with the RDMA READ depths this side serves
    /// (`responder_resources`) and issues (`initiator_depth`).
    pub fn accept(
        &self,
        private_data: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> Result<()> {
        let mut p = conn_param(private_data, responder_resources, initiator_depth)?;
        // SAFETY: the id is live with its QP; `p` points at `private_data`, which outlives
        // the call (librdmacm copies it).
        if unsafe { ffi::rdma_accept(self.id.as_ptr(), &mut p) } != 0 {
            return Err(Error::last("rdma_accept", LIBRDMACM));
        }
        Ok(())
    }

    /// Connects (client side, after route resolution), sending `private_data`.
    pub fn connect(
        &self,
        private_data: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> Result<()> {
        let mut p = conn_param(private_data, responder_resources, initiator_depth)?;
        // SAFETY: as for accept: the id is live with its QP; the private data is copied.
        if unsafe { ffi::rdma_connect(self.id.as_ptr(), &mut p) } != 0 {
            return Err(Error::last("rdma_connect", LIBRDMACM));
        }
        Ok(())
    }

    /// Rejects the connect request the id came from (set-up failed after the queue pair
    /// was created); errors are ignored: the request times out at the peer then.
    pub fn reject(&self) {
        let _ = self.id.reject(&[]);
    }

    /// Disconnects: the queue pair goes to the error state (outstanding requests complete
    /// flushed) and both sides get a `Disconnected` event.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is live.
        if unsafe { ffi::rdma_disconnect(self.id.as_ptr()) } != 0 {
            return Err(Error::last("rdma_disconnect", LIBRDMACM));
        }
        Ok(())
    }

    /// Posts one receive into `sge`.
    pub fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<()> {
        with_recv_wr(wr_id, sge, |wr, bad| {
            // SAFETY: the QP is live; `wr` and its one-entry list live across the call (the
            // provider copies them); the device checks the entry against its lkey's region.
            let rc = unsafe { ffi::ibv_post_recv(self.qp.as_ptr(), wr, bad) };
            post_result("ibv_post_recv", rc)
        })
    }

    /// Posts a Send of `sges` (Send with Invalidate when `opts.invalidate` is set).
    pub fn post_send(&self, wr_id: u64, sges: &[Sge], opts: SendOptions) -> Result<()> {
        let (opcode, inv) = send_opcode(opts);
        let mut list = sge_list(sges)?;
        let mut wr = new_send_wr(
            wr_id,
            opcode,
            send_flags(opts.signaled, opts.solicited, false),
        );
        wr.sg_list = list.as_mut_ptr();
        wr.num_sge = sges.len() as libc::c_int;
        wr.imm_data_invalidated_rkey_union.invalidated_rkey = inv;
        self.post(wr)
    }

    /// Posts a Send whose bytes are copied inline into the request (at most
    /// `caps().max_inline_data`): `data` may be reused as soon as this returns, and needs no
    /// registration.
    pub fn post_send_inline(&self, wr_id: u64, data: &[u8], opts: SendOptions) -> Result<()> {
        if data.len() > self.caps.max_inline_data as usize {
            return Err(Error::Invalid("inline Send larger than max_inline_data"));
        }
        let (opcode, inv) = send_opcode(opts);
        let mut list = [ffi::ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len() as u32,
            lkey: 0,
        }];
        let mut wr = new_send_wr(
            wr_id,
            opcode,
            send_flags(opts.signaled, opts.solicited, true),
        );
        wr.sg_list = list.as_mut_ptr();
        wr.num_sge = i32::from(!data.is_empty());
        wr.imm_data_invalidated_rkey_union.invalidated_rkey = inv;
        self.post(wr)
    }

    /// Posts an RDMA WRITE of `sges`, in order, to `remote`.
    pub fn post_rdma_write(
        &self,
        wr_id: u64,
        sges: &[Sge],
        remote: Remote,
        signaled: bool,
    ) -> Result<()> {
        self.post_rdma(
            ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            wr_id,
            sges,
            remote,
            signaled,
        )
    }

    /// Posts an RDMA READ from `remote` into `sges`, in order.
    pub fn post_rdma_read(
        &self,
        wr_id: u64,
        sges: &[Sge],
        remote: Remote,
        signaled: bool,
    ) -> Result<()> {
        self.post_rdma(
            ffi::ibv_wr_opcode::IBV_WR_RDMA_READ,
            wr_id,
            sges,
            remote,
            signaled,
        )
    }

    fn post_rdma(
        &self,
        opcode: ffi::ibv_wr_opcode::Type,
        wr_id: u64,
        sges: &[Sge],
        remote: Remote,
        signaled: bool,
    ) -> Result<()> {
        let mut list = sge_list(sges)?;
        let mut wr = new_send_wr(wr_id, opcode, send_flags(signaled, false, false));
        wr.sg_list = list.as_mut_ptr();
        wr.num_sge = sges.len() as libc::c_int;
        wr.wr.rdma = ffi::rdma_t {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        };
        self.post(wr)
    }

    fn post(&self, mut wr: ffi::ibv_send_wr) -> Result<()> {
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` is a single fully initialised request whose list the
        // caller keeps alive across the call (providers copy requests before returning);
        // non-inline entries are checked by the device against their lkeys, inline ones
        // point into a borrowed slice.
        let rc = unsafe { ffi::ibv_post_send(self.qp.as_ptr(), &mut wr, &mut bad) };
        post_result("ibv_post_send", rc)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the QP is destroyed once, before the id (dropped after this) and the CQ
        // and PD (held by this connection).
        unsafe { ffi::rdma_destroy_qp(self.id.as_ptr()) };
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection(qp {}, {:?})", self.qp_num(), self.id)
    }
}

fn conn_param(
    private_data: &[u8],
    responder_resources: u8,
    initiator_depth: u8,
) -> Result<ffi::rdma_conn_param> {
    let len = u8::try_from(private_data.len())
        .map_err(|_| Error::Invalid("CM private data longer than 255 bytes"))?;
    Ok(ffi::rdma_conn_param {
        private_data: if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        },
        private_data_len: len,
        responder_resources,
        initiator_depth,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    })
}

/// Calls `post` with a one-entry receive work request for `sge` and a bad-request out
/// pointer, both valid for the call.
pub(crate) fn with_recv_wr(
    wr_id: u64,
    sge: Sge,
    post: impl FnOnce(&mut ffi::ibv_recv_wr, &mut *mut ffi::ibv_recv_wr) -> Result<()>,
) -> Result<()> {
    let mut list = [to_ffi(sge)];
    let mut wr = ffi::ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: list.as_mut_ptr(),
        num_sge: 1,
    };
    let mut bad: *mut ffi::ibv_recv_wr = std::ptr::null_mut();
    post(&mut wr, &mut bad)
}

fn to_ffi(s: Sge) -> ffi::ibv_sge {
    ffi::ibv_sge {
        addr: s.addr,
        length: s.len,
        lkey: s.lkey,
    }
}

/// `sges` copied into a stack list; [`Error::Invalid`] above [`MAX_POST_SGE`] entries.
fn sge_list(sges: &[Sge]) -> Result<[ffi::ibv_sge; MAX_POST_SGE]> {
    if sges.len() > MAX_POST_SGE {
        return Err(Error::Invalid(
            "too many scatter/gather entries in one request",
        ));
    }
    let mut list = [to_ffi(Sge::default()); MAX_POST_SGE];
    for (l, s) in list.iter_mut().zip(sges) {
        *l = to_ffi(*s);
    }
    Ok(list)
}

fn send_opcode(opts: SendOptions) -> (ffi::ibv_wr_opcode::Type, u32) {
    match opts.invalidate {
        Some(rkey) => (ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_INV, rkey),
        None => (ffi::ibv_wr_opcode::IBV_WR_SEND, 0),
    }
}

fn send_flags(signaled: bool, solicited: bool, inline: bool) -> libc::c_uint {
    let mut f = 0;
    if signaled {
        f |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
    }
    if solicited {
        f |= ffi::ibv_send_flags::IBV_SEND_SOLICITED.0;
    }
    if inline {
        f |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
    }
    f
}

fn new_send_wr(
    wr_id: u64,
    opcode: ffi::ibv_wr_opcode::Type,
    flags: libc::c_uint,
) -> ffi::ibv_send_wr {
    // SAFETY: all-zero is a valid ibv_send_wr (NULL pointers, integers, integer unions).
    let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.send_flags = flags;
    wr
}

/// A post's return: 0, or an errno (ENOMEM: the queue is full; EINVAL: a bad request).
pub(crate) fn post_result(call: &'static str, rc: libc::c_int) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    Err(Error::Call {
        call,
        source: std::io::Error::from_raw_os_error(if rc < 0 { -rc } else { rc }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_opcodes_and_flags() {
        assert_eq!(
            send_opcode(SendOptions::default()),
            (ffi::ibv_wr_opcode::IBV_WR_SEND, 0)
        );
        let o = SendOptions {
            invalidate: Some(0xabcd),
            ..Default::default()
        };
        assert_eq!(
            send_opcode(o),
            (ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_INV, 0xabcd)
        );
        assert_eq!(send_flags(false, false, false), 0);
        assert_eq!(send_flags(true, false, true), 2 | 8);
        assert_eq!(send_flags(false, true, false), 4);
    }

    #[test]
    fn sge_lists() {
        let s = Sge {
            addr: 0x1000,
            len: 512,
            lkey: 9,
        };
        let l = sge_list(&[s, s]).unwrap();
        assert_eq!((l[1].addr, l[1].length, l[1].lkey), (0x1000, 512, 9));
        assert!(sge_list(&[s; MAX_POST_SGE + 1]).is_err());
    }

    #[test]
    fn conn_params() {
        let p = conn_param(&[0x80, 0, 0, 0], 16, 4).unwrap();
        assert_eq!(
            (p.private_data_len, p.responder_resources, p.initiator_depth),
            (4, 16, 4)
        );
        assert!(conn_param(&[], 0, 0).unwrap().private_data.is_null());
        assert!(conn_param(&[0; 256], 0, 0).is_err());
    }

    #[test]
    fn post_errors() {
        assert!(post_result("x", 0).is_ok());
        assert_eq!(
            post_result("x", libc::ENOMEM).unwrap_err().errno(),
            Some(libc::ENOMEM)
        );
        assert_eq!(
            post_result("x", -libc::EINVAL).unwrap_err().errno(),
            Some(libc::EINVAL)
        );
    }

    /// Without an RDMA device a client id cannot be created or resolved: a clean error.
    #[test]
    fn client_without_device_fails_cleanly() {
        match CmId::create_client() {
            Err(e) => eprintln!("create_client: {e}"),
            Ok((id, _ch)) => {
                assert!(
                    crate::Context::of_id(&id).is_err(),
                    "unbound id has no context"
                );
                if let Err(e) = id.resolve_addr("127.0.0.1:3260".parse().unwrap(), 100) {
                    eprintln!("resolve_addr: {e}");
                }
            }
        }
    }
}
