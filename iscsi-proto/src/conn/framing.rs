//! How PDUs travel on the transport: a byte stream (TCP: the receive buffer PDUs are cut
//! out of, the transmit queue, the digests in force) or one PDU per RDMA Send (iSER: the
//! ordered queue of Sends and RDMA operations, `rdma::RdmaFraming`). Chosen before the
//! first PDU (`Connection::set_rdma_transport`) and fixed after.

use super::rdma::RdmaFraming;
use super::tx::{TxData, TxQueue};
use crate::DataBuf;
use crate::pdu::{Bhs, Digests};

/// Receive buffer size to start with (grows up to one maximum-size PDU).
const RX_INITIAL: usize = 64 * 1024;

pub(super) enum Framing<B> {
    Stream(Stream<B>),
    Rdma(RdmaFraming<B>),
}

/// A byte stream (TCP).
pub(super) struct Stream<B> {
    pub(super) rx: RxBuf,
    pub(super) tx: TxQueue<B>,
    /// Header and data digests in force (negotiated at login; none before).
    pub(super) dg: Digests,
}

/// Received bytes not processed yet: `buf[start..end]`.
#[derive(Default)]
pub(super) struct RxBuf {
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Bytes the PDU being received needs in all.
    pub(super) need: usize,
}

impl<B: DataBuf> Framing<B> {
    pub(super) fn stream() -> Self {
        Framing::Stream(Stream {
            rx: RxBuf {
                buf: vec![0; RX_INITIAL],
                start: 0,
                end: 0,
                need: 48,
            },
            tx: TxQueue::new(),
            dg: Digests::default(),
        })
    }

    /// Queues one PDU.
    pub(super) fn push(&mut self, bhs: &Bhs, data: TxData) {
        match self {
            Framing::Stream(s) => s.tx.push(bhs, data, s.dg),
            Framing::Rdma(r) => r.push(bhs, data),
        }
    }

    pub(super) fn has_tx(&self) -> bool {
        match self {
            Framing::Stream(s) => !s.tx.is_empty(),
            Framing::Rdma(r) => !r.tx.is_empty(),
        }
    }

    /// The digests applied to received PDUs.
    pub(super) fn digests(&self) -> Digests {
        match self {
            Framing::Stream(s) => s.dg,
            Framing::Rdma(_) => Digests::default(),
        }
    }
}

impl RxBuf {
    /// Spare room after the received bytes: at least 48 bytes and enough for the PDU
    /// being received (the bytes move to the front, or the buffer grows).
    pub(super) fn space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let need = self.need.max(48);
        if self.buf.len() - self.start < need || self.buf.len() - self.end < 48 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < need {
                self.buf.resize(need, 0);
            }
            if self.buf.len() - self.end < 48 {
                let l = self.buf.len();
                self.buf.resize(l + 48, 0);
            }
        }
        &mut self.buf[self.end..]
    }
}
