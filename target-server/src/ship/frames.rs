//! Frames on a gateway link's TCP stream: reading them through a buffer (under load one
//! `read` brings many frames, not two per frame), and writing them in batches (what the
//! writer thread finds queued goes out in one `write`, large data on its own). Both ends of
//! a link use them: the non-owner's sender and receiver, the owner's reader and answer
//! writer.

use std::io::{Read, Write};

use super::wire::{self, Frame};

/// The read buffer, and the size a batch is written at.
const BUF: usize = 64 << 10;
/// Data larger than this is written from where it is, not copied into the batch.
const INLINE: usize = 16 << 10;

/// Whether a read error is a read timeout (the stream is still fine).
pub(super) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Reads frames from a stream with a read timeout: a frame cut by a timeout is kept and
/// finished by the next call.
pub(super) struct FrameReader {
    buf: Vec<u8>,
    /// The unparsed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader {
            buf: vec![0; BUF],
            start: 0,
            end: 0,
        }
    }
}

impl FrameReader {
    /// The next frame; a timeout error leaves what was read so far for the next call.
    pub(super) fn next(&mut self, s: &mut impl Read) -> std::io::Result<Frame> {
        loop {
            if let Some(f) = self.parse()? {
                return Ok(f);
            }
            self.make_room()?;
            match s.read(&mut self.buf[self.end..])? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => self.end += n,
            }
        }
    }

    /// Whether a whole frame is already read (the next [`next`](Self::next) will not wait).
    pub(super) fn has_frame(&self) -> bool {
        self.frame_size()
            .ok()
            .flatten()
            .is_some_and(|size| self.end - self.start >= size)
    }

    /// How many bytes the frame at `start` takes, prefix included, once its prefix is in.
    fn frame_size(&self) -> std::io::Result<Option<usize>> {
        let Some(p) = self.buf.get(self.start..self.start + wire::LEN_PREFIX) else {
            return Ok(None);
        };
        if self.end - self.start < wire::LEN_PREFIX {
            return Ok(None);
        }
        let mut prefix = [0; wire::LEN_PREFIX];
        prefix.copy_from_slice(p);
        let n = wire::frame_len(prefix).map_err(std::io::Error::other)?;
        Ok(Some(wire::LEN_PREFIX + n))
    }

    /// The frame at `start` when all of it is in.
    fn parse(&mut self) -> std::io::Result<Option<Frame>> {
        let Some(size) = self.frame_size()? else {
            return Ok(None);
        };
        if self.end - self.start < size {
            return Ok(None);
        }
        let body = &self.buf[self.start + wire::LEN_PREFIX..self.start + size];
        let f = wire::decode(body).map_err(std::io::Error::other)?;
        self.start += size;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > BUF {
                // a large frame made it grow: back to the usual size
                self.buf.truncate(BUF);
                self.buf.shrink_to_fit();
            }
        }
        Ok(Some(f))
    }

    /// Room after `end` for the rest of the frame at `start` (the buffer grows for a frame
    /// larger than it).
    fn make_room(&mut self) -> std::io::Result<()> {
        let need = self.frame_size()?.unwrap_or(wire::LEN_PREFIX);
        if self.start > 0 && (self.buf.len() - self.start < need || self.end == self.buf.len()) {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
        Ok(())
    }
}

/// Reads one frame from a blocking stream, byte-exact (nothing after it is read: the
/// hellos, before the link's threads take the stream over).
pub(super) fn read_frame(s: &mut impl Read) -> std::io::Result<Frame> {
    let mut prefix = [0; wire::LEN_PREFIX];
    s.read_exact(&mut prefix)?;
    let n = wire::frame_len(prefix).map_err(std::io::Error::other)?;
    let mut body = vec![0; n];
    s.read_exact(&mut body)?;
    wire::decode(&body).map_err(std::io::Error::other)
}

/// Frames gathered for one `write`.
pub(super) struct Batch {
    buf: Vec<u8>,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            buf: Vec::with_capacity(BUF),
        }
    }
}

impl Batch {
    /// Adds a frame's head.
    pub(super) fn head(&mut self, head: &[u8]) {
        self.buf.extend_from_slice(head);
    }

    /// Adds data that follows a head: copied when small, else written now, after what is
    /// gathered.
    pub(super) fn data(&mut self, s: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
        if data.len() <= INLINE {
            self.buf.extend_from_slice(data);
            Ok(())
        } else {
            self.flush(s)?;
            s.write_all(data)
        }
    }

    /// Whether more frames may be gathered before the batch is written.
    pub(super) fn has_room(&self) -> bool {
        self.buf.len() < BUF
    }

    /// Writes what is gathered.
    pub(super) fn flush(&mut self, s: &mut impl Write) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            s.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ship::wire::{Response, encode_response_head};

    /// A stream that hands out its bytes a few at a time, with a timeout between reads.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
        timeout_next: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.timeout_next = !self.timeout_next;
            if self.timeout_next {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            let n = self.step.min(out.len()).min(self.bytes.len() - self.at);
            out[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn response(id: u32, data: &[u8]) -> Vec<u8> {
        let mut v = encode_response_head(id, 0, &[], data.len());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn frames_come_whole_across_timeouts_short_reads_and_growth() {
        let big = vec![7u8; 3 * BUF];
        let mut bytes = Vec::new();
        for (id, d) in [
            (1, &b"abc"[..]),
            (2, &big[..]),
            (3, &b""[..]),
            (4, &[9u8; 100][..]),
        ] {
            bytes.extend(response(id, d));
        }
        for step in [1, 5, 4096, 1 << 20] {
            let mut s = Trickle {
                bytes: bytes.clone(),
                at: 0,
                step,
                timeout_next: false,
            };
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            while got.len() < 4 {
                match r.next(&mut s) {
                    Ok(Frame::Response(Response { id, data, .. })) => got.push((id, data.len())),
                    Ok(other) => panic!("{other:?}"),
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            assert_eq!(
                got,
                vec![(1, 3), (2, 3 * BUF), (3, 0), (4, 100)],
                "step {step}"
            );
            assert!(matches!(
                r.next(&mut s).map_err(|e| e.kind()),
                Err(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::UnexpectedEof)
            ));
            assert_eq!(r.buf.len(), BUF, "back to its usual size");
        }
    }

    #[test]
    fn a_batch_keeps_the_frames_in_order() {
        let mut out = Vec::new();
        let mut b = Batch::default();
        let big = vec![1u8; INLINE + 1];
        b.head(b"h1");
        b.data(&mut out, b"small").expect("write");
        b.head(b"h2");
        b.data(&mut out, &big).expect("write");
        b.head(b"h3");
        b.flush(&mut out).expect("write");
        let mut want = b"h1smallh2".to_vec();
        want.extend(&big);
        want.extend(b"h3");
        assert_eq!(out, want);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut r = FrameReader::default();
        let mut s: &[u8] = &[0, 0, 0, 0, 1, 2, 3];
        assert!(r.next(&mut s).is_err());
        let mut r = FrameReader::default();
        let mut s: &[u8] = &[0xFF, 0xFF, 0xFF, 0xFF];
        assert!(r.next(&mut s).is_err());
    }
}
