//! One TCP connection's socket: reads into the protocol connection's receive buffer (a
//! bounded number per wakeup, so one busy connection does not starve the others on its
//! thread) and sends what the connection queued with one writev per pass, from an iovec
//! array kept between flushes.

use std::io::{self, IoSlice, Read, Write};

use iscsi_proto::Connection;
use mio::Interest;
use mio::net::TcpStream;

use super::TcpError;
use crate::backend::payload::Payload;
use crate::transport::{Feed, Input, Link, LinkError, Ready, Sources};

/// Reads per connection per wakeup before other connections get their turn.
const READS_PER_WAKEUP: usize = 32;
/// Slices per writev.
const IOV_MAX: usize = 64;
/// The socket is the link's only poll source.
const SOCKET: usize = 0;

/// A connection's socket.
pub(super) struct TcpLink {
    sock: TcpStream,
    /// The peer closed or reset the connection (an event said so): read until the socket
    /// reports it, a short read is no proof of an empty socket then.
    hangup: bool,
    /// The writev iovec array, kept between flushes (empty, capacity IOV_MAX).
    iov_spare: Vec<IoSlice<'static>>,
}

/// Empty an iovec array and give its allocation back for the next flush (an in-place
/// collect of an empty vector keeps the buffer; no slice outlives the call).
fn recycle(mut iov: Vec<IoSlice<'_>>) -> Vec<IoSlice<'static>> {
    iov.clear();
    iov.into_iter().map(|_| IoSlice::new(&[])).collect()
}

impl TcpLink {
    pub(super) fn new(sock: TcpStream) -> TcpLink {
        TcpLink {
            sock,
            hangup: false,
            iov_spare: Vec::with_capacity(IOV_MAX),
        }
    }
}

impl Link for TcpLink {
    fn driver(&self) -> config::Driver {
        config::Driver::Iscsi
    }

    fn register(&mut self, sources: &Sources<'_>) -> io::Result<()> {
        sources.register(
            SOCKET,
            &mut self.sock,
            Interest::READABLE | Interest::WRITABLE,
        )
    }

    fn on_ready(&mut self, _source: usize, ready: Ready, feed: Feed<'_>) -> Input {
        if ready.hangup {
            // data and the close can arrive in one edge: the data is read first, and a short
            // read must not end the pass before the end of the stream is seen (there will be
            // no further edge)
            self.hangup = true;
        }
        if !(ready.readable || ready.hangup) {
            return Input::Idle;
        }
        if feed.finishing {
            // nothing more is read: what is queued goes out, then the connection closes
            return Input::Drained;
        }
        let conn = feed.conn;
        let mut reads = 0;
        loop {
            let space = conn.rx_space();
            let cap = space.len();
            match self.sock.read(space) {
                Ok(0) => return Input::Ended(TcpError::Closed.into()),
                Ok(n) => {
                    conn.rx_commit(n, feed.dir, feed.now_ms);
                    if n < cap && !self.hangup {
                        return Input::Drained; // the next arrival raises a new edge
                    }
                    reads += 1;
                    if reads >= READS_PER_WAKEUP {
                        return Input::More;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Input::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Input::Ended(TcpError::Read(e).into()),
            }
        }
    }

    fn flush(&mut self, conn: &mut Connection<Payload>) -> Result<(), LinkError> {
        let mut result = Ok(());
        let mut spare = std::mem::take(&mut self.iov_spare);
        while conn.has_tx() {
            let mut iov: Vec<IoSlice<'_>> = spare;
            conn.gather_tx(&mut iov, IOV_MAX);
            let sent = if iov.is_empty() {
                None
            } else {
                Some(self.sock.write_vectored(&iov))
            };
            spare = recycle(iov);
            match sent {
                None => break,
                Some(Ok(0)) => {
                    result = Err(TcpError::WriteClosed);
                    break;
                }
                Some(Ok(n)) => conn.tx_consumed(n),
                Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Some(Err(e)) => {
                    result = Err(TcpError::Write(e));
                    break;
                }
            }
        }
        self.iov_spare = spare;
        result.map_err(LinkError::from)
    }

    /// Once nothing is left to write.
    fn may_close(&mut self, conn: &Connection<Payload>) -> bool {
        !conn.has_tx()
    }

    fn retire(&mut self, registry: &mio::Registry) {
        let _ = registry.deregister(&mut self.sock);
    }

    fn can_move(&self) -> bool {
        true
    }

    fn detach(&mut self, registry: &mio::Registry) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        let _ = registry.deregister(&mut self.sock);
        match self.sock.as_fd().try_clone_to_owned() {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::warn!("cannot keep the socket for the new numatgtd: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_iovec_keeps_its_allocation() {
        let mut v: Vec<IoSlice<'static>> = Vec::with_capacity(IOV_MAX);
        let ptr = v.as_ptr() as usize;
        for _ in 0..3 {
            let data = vec![1u8; 10];
            let mut iov: Vec<IoSlice<'_>> = v;
            iov.push(IoSlice::new(&data));
            iov.push(IoSlice::new(&data[2..]));
            v = recycle(iov);
            assert!(v.is_empty());
            assert!(v.capacity() >= IOV_MAX);
            assert_eq!(v.as_ptr() as usize, ptr, "the buffer was reallocated");
        }
    }
}
