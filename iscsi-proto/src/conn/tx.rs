//! The transmit queue: encoded headers (BHS + optional header digest) kept inline, data
//! segments referenced without copying (owned `Vec` for small control payloads, or a
//! slice of a server `DataBuf` for Data-In), padding and data digest as a small trailer.

use crate::DataBuf;
use crate::pdu::{Bhs, Digests, frame};
use std::collections::VecDeque;
use std::io::IoSlice;

/// A data segment to send.
#[derive(Debug, Clone)]
pub(crate) enum TxData<B> {
    None,
    Owned(Vec<u8>),
    Buf(B, usize, usize),
}

impl<B: DataBuf> TxData<B> {
    fn bytes(&self) -> &[u8] {
        match self {
            TxData::None => &[],
            TxData::Owned(v) => v,
            TxData::Buf(b, off, len) => b.as_ref().get(*off..*off + *len).unwrap_or(&[]),
        }
    }
}

#[derive(Debug)]
struct TxPdu<B> {
    hdr: [u8; 52],
    hdr_len: u8,
    data: TxData<B>,
    trailer: [u8; 7],
    trailer_len: u8,
}

impl<B: DataBuf> TxPdu<B> {
    fn parts(&self) -> [&[u8]; 3] {
        [
            &self.hdr[..self.hdr_len as usize],
            self.data.bytes(),
            &self.trailer[..self.trailer_len as usize],
        ]
    }
    fn len(&self) -> usize {
        self.hdr_len as usize + self.data.bytes().len() + self.trailer_len as usize
    }
}

/// Bytes waiting to be written, PDU by PDU.
#[derive(Debug)]
pub(crate) struct TxQueue<B> {
    q: VecDeque<TxPdu<B>>,
    /// Bytes of the front PDU already sent.
    off: usize,
}

impl<B: DataBuf> TxQueue<B> {
    pub(crate) fn new() -> Self {
        TxQueue {
            q: VecDeque::new(),
            off: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Queues one PDU (no AHS; targets never send one).
    pub(crate) fn push(&mut self, bhs: &Bhs, data: TxData<B>, dg: Digests) {
        let dlen = data.bytes().len();
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
                let c = frame::data_digest(data.bytes());
                trailer[pad..pad + 4].copy_from_slice(&c.to_le_bytes());
                trailer_len += 4;
            }
        }
        self.q.push_back(TxPdu {
            hdr,
            hdr_len,
            data,
            trailer,
            trailer_len,
        });
    }

    /// Fills `out` with at most `max` slices of pending bytes.
    pub(crate) fn gather<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        let mut skip = self.off;
        for p in &self.q {
            for part in p.parts() {
                if out.len() >= max {
                    return;
                }
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                out.push(IoSlice::new(&part[skip..]));
                skip = 0;
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
            let left = front.len() - self.off;
            if n >= left {
                n -= left;
                self.q.pop_front();
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
        self.q.iter().map(|p| p.len()).sum::<usize>() - self.off
    }
}
