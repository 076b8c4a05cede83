//! The transmit queue: encoded headers (BHS + optional header digest) kept inline, data
//! segments referenced without copying (owned `Vec` for small control payloads, or a range
//! of a server `DataBuf` — possibly scattered over several buffers — for Data-In), padding
//! and data digest as a small trailer. A Data-In payload is held once, however many PDUs
//! carry parts of it, and dropped as soon as its last PDU has been written.

use crate::pdu::{Bhs, Digests, frame};
use crate::{DataBuf, for_each_chunk};
use std::collections::VecDeque;
use std::io::IoSlice;

/// A data segment to send.
#[derive(Debug)]
pub(crate) enum TxData {
    None,
    Owned(Vec<u8>),
    /// `len` bytes at `off` of the payload added by `TxQueue::add_buf` as `id`.
    Shared {
        id: u64,
        off: usize,
        len: usize,
    },
}

/// A payload shared by the PDUs that carry it.
#[derive(Debug)]
struct Held<B> {
    buf: B,
    /// Queued PDUs that still refer to it.
    pdus: u32,
}

#[derive(Debug)]
struct TxPdu {
    hdr: [u8; 52],
    hdr_len: u8,
    data: TxData,
    data_len: usize,
    trailer: [u8; 7],
    trailer_len: u8,
}

/// Bytes waiting to be written, PDU by PDU.
#[derive(Debug)]
pub(crate) struct TxQueue<B> {
    q: VecDeque<TxPdu>,
    /// Bytes of the front PDU already sent.
    off: usize,
    /// Payloads referred to by queued PDUs, oldest first; `bufs[0]` has id `base_id`.
    bufs: VecDeque<Held<B>>,
    base_id: u64,
}

impl<B: DataBuf> TxQueue<B> {
    pub(crate) fn new() -> Self {
        TxQueue {
            q: VecDeque::new(),
            off: 0,
            bufs: VecDeque::new(),
            base_id: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Holds `buf` for the PDUs about to be pushed with `TxData::Shared` and its id.
    pub(crate) fn add_buf(&mut self, buf: B) -> u64 {
        self.bufs.push_back(Held { buf, pdus: 0 });
        self.base_id + self.bufs.len() as u64 - 1
    }

    fn held(&self, id: u64) -> Option<&Held<B>> {
        let i = usize::try_from(id.checked_sub(self.base_id)?).ok()?;
        self.bufs.get(i)
    }

    /// Each contiguous piece of a data segment, in order.
    fn for_each_data(&self, data: &TxData, mut f: impl FnMut(&[u8])) {
        match data {
            TxData::None => {}
            TxData::Owned(v) => f(v),
            TxData::Shared { id, off, len } => {
                if let Some(h) = self.held(*id) {
                    for_each_chunk(&h.buf, *off, *len, f)
                }
            }
        }
    }

    fn data_len(&self, data: &TxData) -> usize {
        match data {
            TxData::None => 0,
            TxData::Owned(v) => v.len(),
            TxData::Shared { id, off, len } => self
                .held(*id)
                .map_or(0, |h| (*len).min(h.buf.len().saturating_sub(*off))),
        }
    }

    /// Queues one PDU (no AHS; targets never send one).
    pub(crate) fn push(&mut self, bhs: &Bhs, data: TxData, dg: Digests) {
        let dlen = self.data_len(&data);
        let h = bhs.encode(0, dlen as u32);
        let mut hdr = [0u8; 52];
        hdr[..48].copy_from_slice(&h);
        let mut hdr_len = 48u8;
        if dg.header {
            hdr[48..52].copy_from_slice(&crc32c::crc32c(&h).to_le_bytes());
            hdr_len = 52;
        }
        let mut trailer = [0u8; 7];
        let mut trailer_len = 0u8;
        if dlen > 0 {
            let pad = frame::pad4(dlen) - dlen;
            trailer_len = pad as u8;
            if dg.data {
                let mut c = 0u32;
                self.for_each_data(&data, |piece| c = crc32c::crc32c_append(c, piece));
                if pad > 0 {
                    c = crc32c::crc32c_append(c, &[0u8; 3][..pad]);
                }
                trailer[pad..pad + 4].copy_from_slice(&c.to_le_bytes());
                trailer_len += 4;
            }
        }
        if let TxData::Shared { id, .. } = data
            && let Some(i) = id.checked_sub(self.base_id)
            && let Some(h) = self.bufs.get_mut(i as usize)
        {
            h.pdus += 1;
        }
        self.q.push_back(TxPdu {
            hdr,
            hdr_len,
            data,
            data_len: dlen,
            trailer,
            trailer_len,
        });
        self.release_unused();
    }

    /// Drops held payloads at the front that no queued PDU refers to.
    fn release_unused(&mut self) {
        while self.bufs.front().is_some_and(|h| h.pdus == 0) {
            self.bufs.pop_front();
            self.base_id += 1;
        }
    }

    /// Each contiguous piece of PDU `p` on the wire, in order, until `f` says stop.
    fn for_each_part<'a>(&'a self, p: &'a TxPdu, mut f: impl FnMut(&'a [u8]) -> bool) -> bool {
        if !f(&p.hdr[..p.hdr_len as usize]) {
            return false;
        }
        let mut go = true;
        match &p.data {
            TxData::None => {}
            TxData::Owned(v) => go = f(v),
            TxData::Shared { id, off, len } => {
                if let Some(h) = self.held(*id) {
                    let b = &h.buf;
                    let end = off.saturating_add(*len).min(b.len());
                    let mut at = *off;
                    while go && at < end {
                        let c = b.chunk(at);
                        if c.is_empty() {
                            break;
                        }
                        let n = c.len().min(end - at);
                        go = f(&c[..n]);
                        at += n;
                    }
                }
            }
        }
        if !go {
            return false;
        }
        if p.trailer_len > 0 {
            return f(&p.trailer[..p.trailer_len as usize]);
        }
        true
    }

    /// Fills `out` with at most `max` slices of pending bytes.
    pub(crate) fn gather<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        let mut skip = self.off;
        for p in &self.q {
            let more = self.for_each_part(p, |part| {
                if out.len() >= max {
                    return false;
                }
                if skip >= part.len() {
                    skip -= part.len();
                    return true;
                }
                out.push(IoSlice::new(&part[skip..]));
                skip = 0;
                true
            });
            if !more {
                return;
            }
        }
    }

    /// `n` bytes were written.
    pub(crate) fn consumed(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.q.front() else {
                self.off = 0;
                return;
            };
            let left = pdu_len(front) - self.off;
            if n >= left {
                n -= left;
                if let Some(p) = self.q.pop_front()
                    && let TxData::Shared { id, .. } = p.data
                    && let Some(i) = id.checked_sub(self.base_id)
                    && let Some(h) = self.bufs.get_mut(i as usize)
                {
                    h.pdus = h.pdus.saturating_sub(1);
                }
                self.release_unused();
                self.off = 0;
            } else {
                self.off += n;
                n = 0;
            }
        }
    }

    /// Total pending bytes (tests and metrics).
    #[allow(dead_code)]
    pub(crate) fn pending_bytes(&self) -> usize {
        self.q.iter().map(pdu_len).sum::<usize>() - self.off
    }

    /// Payloads still held (tests).
    #[allow(dead_code)]
    pub(crate) fn held_payloads(&self) -> usize {
        self.bufs.len()
    }
}

fn pdu_len(p: &TxPdu) -> usize {
    p.hdr_len as usize + p.data_len + p.trailer_len as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdu::DataIn;
    use std::sync::Arc;

    /// A payload scattered over several buffers (as pinned cache blocks are).
    #[derive(Clone)]
    struct Scatter(Vec<Arc<[u8]>>);

    impl DataBuf for Scatter {
        fn len(&self) -> usize {
            self.0.iter().map(|b| b.len()).sum()
        }
        fn chunk(&self, mut offset: usize) -> &[u8] {
            for b in &self.0 {
                if offset < b.len() {
                    return &b[offset..];
                }
                offset -= b.len();
            }
            &[]
        }
    }

    fn data_in(len: u32) -> Bhs {
        Bhs::DataIn(DataIn {
            final_: true,
            ack: false,
            overflow: false,
            underflow: false,
            status: None,
            lun: 0,
            itt: 7,
            ttt: u32::MAX,
            stat_sn: 0,
            exp_cmd_sn: 1,
            max_cmd_sn: 2,
            data_sn: 0,
            buffer_offset: 0,
            residual: len,
        })
    }

    fn wire<B: DataBuf>(q: &mut TxQueue<B>, max_iov: usize) -> Vec<u8> {
        let mut out = Vec::new();
        while !q.is_empty() {
            let mut v = Vec::new();
            q.gather(&mut v, max_iov);
            // send only part of what was offered, to exercise partial writes
            let offered: Vec<u8> = v.iter().flat_map(|s| s.iter().copied()).collect();
            let n = offered.len().clamp(1, 1000);
            out.extend_from_slice(&offered[..n]);
            q.consumed(n);
        }
        out
    }

    #[test]
    fn scatter_payload_is_sent_like_a_contiguous_one() {
        let bytes: Vec<u8> = (0..10_001u32).map(|i| (i * 7 % 251) as u8).collect();
        let pieces: Vec<Arc<[u8]>> = [0usize, 4096, 4097, 8192, 10_001]
            .windows(2)
            .map(|w| Arc::from(&bytes[w[0]..w[1]]))
            .collect();
        for dg in [
            Digests::default(),
            Digests {
                header: true,
                data: true,
            },
        ] {
            for (off, len) in [(0usize, 10_001usize), (100, 5000), (4096, 1), (4000, 6001)] {
                let mut a: TxQueue<Arc<[u8]>> = TxQueue::new();
                let id = a.add_buf(Arc::from(bytes.as_slice()));
                a.push(&data_in(len as u32), TxData::Shared { id, off, len }, dg);
                let mut b: TxQueue<Scatter> = TxQueue::new();
                let id = b.add_buf(Scatter(pieces.clone()));
                b.push(&data_in(len as u32), TxData::Shared { id, off, len }, dg);
                for max_iov in [1, 2, 64] {
                    let mut a2: TxQueue<Arc<[u8]>> = TxQueue::new();
                    let id = a2.add_buf(Arc::from(bytes.as_slice()));
                    a2.push(&data_in(len as u32), TxData::Shared { id, off, len }, dg);
                    let mut b2: TxQueue<Scatter> = TxQueue::new();
                    let id = b2.add_buf(Scatter(pieces.clone()));
                    b2.push(&data_in(len as u32), TxData::Shared { id, off, len }, dg);
                    assert_eq!(
                        wire(&mut a2, max_iov),
                        wire(&mut b2, max_iov),
                        "off {off} len {len}"
                    );
                }
                let wa = wire(&mut a, 64);
                assert_eq!(
                    wa.len(),
                    48 + if dg.header { 4 } else { 0 }
                        + len.div_ceil(4) * 4
                        + if dg.data { 4 } else { 0 }
                );
                assert_eq!(wa, wire(&mut b, 64));
                assert_eq!(a.held_payloads(), 0, "payload kept after its PDU was sent");
                // the receiver's decoder accepts it (digests checked) and sees the same bytes
                match crate::pdu::Pdu::decode(&wa, 1 << 24, dg) {
                    Ok(crate::pdu::Decoded::Complete(p)) => {
                        assert_eq!(p.data, &bytes[off..off + len])
                    }
                    other => panic!("undecodable: {other:?}"),
                }
            }
        }
    }
}
