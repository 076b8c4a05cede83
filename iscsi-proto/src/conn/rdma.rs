//! The RDMA datamover mode of a [`Connection`] (RFC 7145 §7, iSER): the transport frames
//! one PDU per RDMA Send, the connection never sends Data-In, R2T or expects solicited
//! Data-Out; it asks the transport instead to *put* a READ's data into the initiator's
//! read buffer (RDMA WRITE) and to *get* a WRITE's solicited data from its write buffer
//! (RDMA READ), through the same ordered queue as its PDUs ([`RdmaTx`]).
//!
//! This module knows no iSER key or header: the transport answers its own login keys
//! through [`TransportKeys`] (the `iser` crate implements it for its negotiator) and
//! hands over the buffers the iSER header announced as opaque [`RemoteBuf`]s.

use super::framing::Framing;
use super::scsi::Task;
use super::state::State;
use super::tx::TxData;
use super::{Connection, Directory, Event, ProtocolError, ScsiCommand};
use crate::DataBuf;
use crate::pdu::{Bhs, Digests, Frame, check_frame};
use std::collections::VecDeque;

/// The login keys a transport owns (iSER's `RDMAExtensions`, `TargetRecvDataSegmentLength`
/// …), asked before the iSCSI negotiation sees a key. Errors fail the login with an
/// initiator error; the string is for the log.
pub trait TransportKeys: Send {
    /// The answer to `key=value` if the key is the transport's (`Ok(None)`: not ours, the
    /// iSCSI negotiation answers it).
    fn respond(&mut self, key: &str, value: &str) -> Result<Option<String>, String>;
    /// Keys the target declares itself on the last login response.
    fn declarations(&mut self) -> Vec<(String, String)>;
    /// The login is about to complete: the limits of the RDMA datamover, or why the login
    /// must fail (e.g. `RDMAExtensions=Yes` never negotiated in a normal session; in a
    /// discovery session the key is irrelevant, RFC 7145 §6.3, and the transport frames
    /// the Text PDUs all the same).
    fn finish(&mut self, discovery: bool) -> Result<RdmaLimits, String>;
}

/// Per-PDU data limits of an RDMA connection in full feature phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaLimits {
    /// Most data bytes in one PDU the target sends (sense, NOP-In echo, Text, Reject):
    /// what the initiator's receive buffers hold (Linux ib_iser: 128).
    pub max_send_data: u32,
    /// Most data bytes in one PDU the initiator may send (the target's receive buffers,
    /// e.g. iSER `TargetRecvDataSegmentLength`).
    pub max_recv_data: u32,
}

/// An initiator buffer announced with a command (iSER: STag and virtual address). Opaque
/// to the connection: handed back as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    pub stag: u32,
    pub va: u64,
}

/// The buffers announced along with one received PDU (iSER header: write / read STag).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteBufs {
    /// Where the initiator's WRITE data can be read from (solicited part).
    pub write: Option<RemoteBuf>,
    /// Where a READ's data is to be written.
    pub read: Option<RemoteBuf>,
}

/// The next thing an RDMA transport must do, in order.
#[derive(Debug)]
pub enum RdmaTx<B> {
    /// Send one whole PDU (BHS, then `data`; no AHS, no padding, no digests).
    Pdu { bhs: [u8; 48], data: Vec<u8> },
    /// RDMA WRITE the first `len` bytes of `data` to `remote` (a READ's Data-In). Comes
    /// before the task's SCSI Response. `data` is held until the WRITE completed.
    Put {
        itt: u32,
        remote: RemoteBuf,
        data: B,
        len: usize,
    },
    /// RDMA READ `len` bytes of task `itt`'s write data, bytes `offset..offset + len` of
    /// the command's data (the ones after the immediate / unsolicited data), from `remote`
    /// as announced. Linux ib_iser announces the write VA of the first solicited byte
    /// (base + unsolicited size), so the READ starts at `remote.va` itself. Answer with
    /// [`Connection::data_arrived`] and the same `xfer`.
    Get {
        itt: u32,
        xfer: u32,
        remote: RemoteBuf,
        offset: u32,
        len: u32,
    },
}

/// The framing of an RDMA transport: one whole PDU per Send, in one ordered queue with the
/// RDMA operations.
pub(crate) struct RdmaFraming<B> {
    pub(crate) tx: VecDeque<RdmaTx<B>>,
    /// Buffers announced with the PDU being dispatched.
    pub(crate) rx_bufs: RemoteBufs,
}

impl<B> RdmaFraming<B> {
    pub(crate) fn new() -> Self {
        RdmaFraming {
            tx: VecDeque::new(),
            rx_bufs: RemoteBufs::default(),
        }
    }

    /// Queues one PDU as a Send; payloads here are small and owned (no Data-In).
    pub(crate) fn push(&mut self, bhs: &Bhs, data: TxData) {
        let data = match data {
            TxData::Owned(v) => v,
            TxData::None | TxData::Shared { .. } => Vec::new(),
        };
        let bhs = bhs.encode(0, data.len() as u32);
        self.tx.push_back(RdmaTx::Pdu { bhs, data });
    }
}

/// RDMA state of a task.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TaskBufs {
    pub(crate) bufs: RemoteBufs,
    /// The Get in flight (its `xfer`), if any.
    pub(crate) get: Option<u32>,
    /// Where the Get in flight began (bytes of write data before it).
    pub(crate) get_from: u32,
}

impl<B: DataBuf> Connection<B> {
    /// Makes this a connection of an RDMA transport (iSER); call before the first PDU.
    /// From now on PDUs come in with [`Self::rx_pdu`] and go out with
    /// [`Self::pop_rdma_tx`] (not `rx_space`/`gather_tx`), digests are never negotiated
    /// (`None` only), and `keys` answers the transport's login keys. When the login
    /// completes, [`TransportKeys::finish`] switches on the RDMA datamover. No effect after
    /// the login phase.
    pub fn set_rdma_transport(&mut self, keys: Box<dyn TransportKeys>) {
        let State::Login(login) = &mut self.state else {
            return;
        };
        login.machine.set_transport_keys(keys);
        self.framing = Framing::Rdma(RdmaFraming::new());
    }

    /// True once logged in over an RDMA transport (no Data-In / R2T; Put / Get instead).
    pub fn is_rdma(&self) -> bool {
        self.rdma_limits().is_some()
    }

    /// The datamover limits, once logged in over an RDMA transport.
    pub fn rdma_limits(&self) -> Option<RdmaLimits> {
        self.state.session().and_then(|s| s.rdma)
    }

    /// One received PDU (the payload of one RDMA Send after the transport's header:
    /// BHS, AHS, data segment; trailing padding optional) with the buffers announced
    /// with it. A Send whose length does not match its BHS closes the connection.
    pub fn rx_pdu(&mut self, pdu: &[u8], bufs: RemoteBufs, dir: &dyn Directory, now_ms: u64) {
        self.now = now_ms;
        self.start_login_clock(now_ms);
        if !self.state.takes_input() {
            return;
        }
        let Framing::Rdma(r) = &mut self.framing else {
            return;
        };
        r.rx_bufs = bufs;
        let mut hdr = super::frame_header(pdu);
        if immediate_data_left_in_write_buffer(&hdr, pdu.len(), bufs) {
            // fetch it with the rest of the data, from the write buffer's first byte: the
            // PDU goes on as a command without immediate data (see the function)
            hdr[5..8].fill(0);
            self.stats.immediate_data_fetched += 1;
            self.rx_rdma_pdu(&hdr, dir);
        } else {
            self.rx_rdma_pdu(pdu, dir);
        }
    }

    /// [`Self::rx_pdu`] once the PDU is final: checks its length against its BHS and
    /// dispatches it.
    fn rx_rdma_pdu(&mut self, pdu: &[u8], dir: &dyn Directory) {
        let max = self.max_rx_data();
        let hdr = super::frame_header(pdu);
        let f = Frame::from_header(&hdr, Digests::default());
        let unpadded = f.data_off + f.data_len;
        if pdu.len() < unpadded.max(48) || pdu.len() > f.total {
            self.close(
                ProtocolError::PduSizeMismatch {
                    got: pdu.len(),
                    expected: unpadded.max(48),
                }
                .into(),
            );
            return;
        }
        // the length was checked above: `Incomplete` only means the padding is absent
        let checked = check_frame(pdu, max, Digests::default()).map(|_| ());
        match checked {
            Ok(()) => {
                self.stats.pdus_rx += 1;
                self.dispatch(&f, pdu, dir);
            }
            Err(e) => self.frame_error(e, &hdr, f, f.total),
        }
        if let Framing::Rdma(r) = &mut self.framing {
            r.rx_bufs = RemoteBufs::default();
        }
    }

    /// The next PDU to Send, or RDMA operation to post, in order (RDMA transport only).
    pub fn pop_rdma_tx(&mut self) -> Option<RdmaTx<B>> {
        match &mut self.framing {
            Framing::Rdma(r) => r.tx.pop_front(),
            Framing::Stream(_) => None,
        }
    }

    /// Caps the command window (MaxCmdSN − ExpCmdSN + 1) at `n`, e.g. the window the
    /// transport's receive credits allow (`iser::Credits::grant`). MaxCmdSN never moves
    /// back; a larger cap takes effect on the next PDU sent.
    pub fn set_window_limit(&mut self, n: u32) {
        self.window_cap = Some(n);
        self.window.set_cap(Some(n));
        self.window.update_max(self.active);
    }

    /// The RDMA READ of [`RdmaTx::Get`] `xfer` for task `itt` brought `data` (all or the
    /// next part of the requested bytes, in order). Returns false when the task is gone
    /// (aborted: drop the data) or does not expect it. Once all write data is in, the
    /// command goes to the server (`Event::Command`) in CmdSN order.
    pub fn data_arrived(&mut self, itt: u32, xfer: u32, data: &[u8]) -> bool {
        self.fetched(itt, xfer, |t| t.take_rdma_data(data))
    }

    /// Like [`data_arrived`](Connection::data_arrived), for `n` bytes the transport put
    /// where the server asked ([`Event::DataFetch`]) instead of handing them over: they
    /// count as received and as [`ScsiCommand::landed`]. A fetch is either all landed or
    /// all handed over: false (nothing counted) for landed bytes after handed-over ones
    /// of the same fetch, or when the task is gone or does not expect them.
    pub fn data_landed(&mut self, itt: u32, xfer: u32, n: u32) -> bool {
        self.fetched(itt, xfer, |t| t.count_landed(n))
    }

    /// Part of Get `xfer` of task `itt` is in, `take` counting it into the task: ends the
    /// fetch once all write data is in and delivers the command when it may go.
    fn fetched(&mut self, itt: u32, xfer: u32, take: impl FnOnce(&mut Task) -> bool) -> bool {
        if !matches!(self.state, State::FullFeature(_)) {
            return false;
        }
        let Some(t) = self.tasks.get_mut(&itt) else {
            return false;
        };
        if t.rdma.get != Some(xfer) || !take(t) {
            return false;
        }
        if t.write_done() {
            t.rdma.get = None;
        }
        self.try_deliver(itt);
        true
    }

    /// The command whose write data is being fetched ([`Event::DataFetch`]): its CDB, LUN,
    /// attributes and the write data already in (`data_out`, immediate and unsolicited);
    /// the fetch brings the rest, from `data_out.len()` on. `None` when the task is gone,
    /// already delivered, or not fetching.
    pub fn fetching_write(&self, itt: u32) -> Option<&ScsiCommand> {
        let t = self.tasks.get(&itt)?;
        t.rdma.get?;
        t.cmd.as_ref()
    }

    /// Queues an RDMA READ for the rest of a task's write data (instead of R2Ts).
    pub(crate) fn issue_get(&mut self, itt: u32) {
        let xfer = self.next_ttt;
        let Some(t) = self.tasks.get_mut(&itt) else {
            return;
        };
        let Some((offset, len)) = t.solicited_range() else {
            return;
        };
        let Some(remote) = t.rdma.bufs.write else {
            self.close(ProtocolError::RdmaBufferMissing { itt, write: true }.into());
            return;
        };
        self.next_ttt = super::scsi::next_tag(xfer);
        t.rdma.get = Some(xfer);
        t.rdma.get_from = offset;
        t.mark_solicited(offset + len);
        if let Framing::Rdma(r) = &mut self.framing {
            r.tx.push_back(RdmaTx::Get {
                itt,
                xfer,
                remote,
                offset,
                len,
            });
        }
        self.events.push_back(Event::DataFetch { itt });
    }

    /// The buffers announced with the PDU being dispatched (RDMA transport).
    pub(crate) fn rx_bufs(&self) -> RemoteBufs {
        match &self.framing {
            Framing::Rdma(r) => r.rx_bufs,
            Framing::Stream(_) => RemoteBufs::default(),
        }
    }
}

/// True for a SCSI WRITE command whose Send carried its BHS alone although the BHS
/// announces immediate data, with a write buffer advertised: the initiator left the
/// immediate data in its write buffer instead of sending it.
///
/// libiscsi 1.19's iSER initiator does exactly this (lib/iser.c, `iser_prepare_write_cmd`:
/// the whole transfer is copied into one registered buffer, WSV is set with the buffer's
/// own address as write VA, and the Send gets the headers only, while the generic command
/// code has already put the immediate length in DataSegmentLength). RFC 7145 wants the
/// immediate data in the Send, so the data segment is simply absent here, never to be read
/// from the receive buffer (whatever lies there is stale). What the initiator did
/// advertise is a write buffer that holds every byte of the command from offset 0: a
/// command without immediate data whose data all comes by RDMA READ from the write VA
/// reads exactly those bytes. That is the same VA reading as Linux ib_iser's (the VA of
/// the first byte not sent in the Send), so nothing else changes.
///
/// Only the whole data segment missing counts (a Send holding part of it is a protocol
/// error as before), and only with no AHS and a write buffer announced.
pub(crate) fn immediate_data_left_in_write_buffer(
    bhs: &[u8; 48],
    got: usize,
    bufs: RemoteBufs,
) -> bool {
    let is_write_cmd = bhs[0] & 0x3f == crate::pdu::op::SCSI_CMD && bhs[1] & 0x20 != 0;
    let data_len = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]);
    is_write_cmd && bhs[4] == 0 && data_len > 0 && got == 48 && bufs.write.is_some()
}

impl Task {
    /// The solicited part still to fetch, once the unsolicited phase is over.
    fn solicited_range(&self) -> Option<(u32, u32)> {
        if !self.write
            || self.data_failed
            || !self.unsol_done
            || self.rdma.get.is_some()
            || self.next_r2t_offset >= self.edtl_write
        {
            return None;
        }
        let off = self.next_r2t_offset;
        Some((off, self.edtl_write - off))
    }

    /// Counts `n` bytes landed where the server asked; false when more than was asked for,
    /// or when bytes of this fetch were already handed over (`data_out` would miss them).
    fn count_landed(&mut self, n: u32) -> bool {
        if u64::from(self.received) + u64::from(n) > u64::from(self.next_r2t_offset) {
            return false;
        }
        let Some(c) = self.cmd.as_mut() else {
            return false;
        };
        let from = if c.landed == 0 {
            self.rdma.get_from
        } else {
            self.received
        };
        if from != self.received || c.data_out.len() as u64 + u64::from(c.landed) != u64::from(from)
        {
            return false;
        }
        c.landed += n;
        self.received += n;
        true
    }

    fn mark_solicited(&mut self, end: u32) {
        self.next_r2t_offset = end;
    }

    fn write_done(&self) -> bool {
        self.received >= self.edtl_write
    }

    /// Appends data fetched by RDMA READ; false when more than was asked for.
    fn take_rdma_data(&mut self, data: &[u8]) -> bool {
        let n = data.len() as u64;
        if u64::from(self.received) + n > u64::from(self.next_r2t_offset)
            || self.cmd.as_ref().is_some_and(|c| c.landed > 0)
        {
            return false;
        }
        self.received += data.len() as u32;
        if let Some(c) = self.cmd.as_mut() {
            c.data_out.extend_from_slice(data);
        }
        true
    }
}
