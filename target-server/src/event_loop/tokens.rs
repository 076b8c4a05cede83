//! An event thread's poll tokens, made and read here only: the inbox's waker, the I/O
//! rings' eventfds, the listeners (by index), and the connections' poll sources (slot and
//! the link's own source number, [`MAX_SOURCES`] per slot, whatever the transport).

use mio::Token;

use crate::transport::MAX_SOURCES;

/// The inbox's waker.
pub(super) const WAKER: Token = Token(usize::MAX);
/// The eventfds of the thread's io_uring read ring and librbd ring (completions arrived).
pub(super) const RING: Token = Token(usize::MAX - 1);
/// Listener `i` is `LISTENER_BASE + i`; connection sources count from zero below it.
const LISTENER_BASE: usize = usize::MAX / 2;

/// What a token stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The waker or a ring: the loop's own work, done every turn anyway.
    Wake,
    Listener(usize),
    /// Poll source `source` of the connection in `slot`.
    Conn {
        slot: usize,
        source: usize,
    },
}

/// The token of listener `i`.
pub(super) fn listener(i: usize) -> Token {
    Token(LISTENER_BASE + i)
}

/// The token of poll source `source` of the connection in `slot`.
pub(super) fn conn(slot: usize, source: usize) -> Token {
    Token(slot * MAX_SOURCES + source)
}

pub(super) fn decode(t: Token) -> Source {
    match t {
        WAKER | RING => Source::Wake,
        Token(t) if t >= LISTENER_BASE => Source::Listener(t - LISTENER_BASE),
        Token(t) => Source::Conn {
            slot: t / MAX_SOURCES,
            source: t % MAX_SOURCES,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for slot in [0, 1, 7, 100_000] {
            for source in 0..MAX_SOURCES {
                assert_eq!(decode(conn(slot, source)), Source::Conn { slot, source });
            }
        }
        assert_eq!(decode(listener(0)), Source::Listener(0));
        assert_eq!(decode(listener(3)), Source::Listener(3));
        assert_eq!(decode(WAKER), Source::Wake);
        assert_eq!(decode(RING), Source::Wake);
    }
}
