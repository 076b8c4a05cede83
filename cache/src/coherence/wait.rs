//! Named, bounded waits for work another thread is finishing (a fill or a flush of the same
//! block). Only I/O workers wait; an event thread uses [`NoWait`] and hands the request to a
//! worker instead.

use std::time::{Duration, Instant};

/// A wait gave up: its limit passed (logged by the waiter's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("gave up waiting to {what}")]
pub struct GaveUp {
    pub what: &'static str,
}

/// How a coherence step waits before it tries a busy block again.
pub trait Waiter {
    /// Wait a little; `Err` when the step must give up instead.
    fn wait(&mut self) -> Result<(), GaveUp>;
}

/// Never waits (event threads): the first busy block gives up, silently.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoWait;

impl Waiter for NoWait {
    fn wait(&mut self) -> Result<(), GaveUp> {
        Err(GaveUp { what: "not wait" })
    }
}

/// Yields to the other thread for the first tries, then sleeps in short pauses, until
/// `limit` has passed since the first wait; then gives up with a warning naming the wait.
#[derive(Debug)]
pub struct Backoff {
    what: &'static str,
    limit: Duration,
    tries: u32,
    started: Option<Instant>,
}

/// Tries that only yield the CPU before pauses start.
const SPINS: u32 = 64;
/// One pause.
const PAUSE: Duration = Duration::from_micros(50);

impl Backoff {
    pub const fn new(what: &'static str, limit: Duration) -> Self {
        Backoff {
            what,
            limit,
            tries: 0,
            started: None,
        }
    }

    /// Waiting for another thread's write-back of a block in the range (SYNCHRONIZE CACHE,
    /// read-around, write-through): as long as a slow disk may take.
    pub const fn flush_range() -> Self {
        Self::new("flush a range", Duration::from_secs(10))
    }

    /// Waiting for a fill or flush of a block before its cached copy can take a
    /// write-through's data (given up: the LUN's cache is dropped).
    pub const fn update_cached_copy() -> Self {
        Self::new("update a cached copy", Duration::from_secs(1))
    }

    /// Waiting for a fill before a write-back write can take the block (given up: the
    /// write goes through to the medium instead).
    pub const fn write_back() -> Self {
        Self::new("write back into a busy block", Duration::from_millis(10))
    }

    /// Tries so far.
    pub fn tries(&self) -> u32 {
        self.tries
    }
}

impl Waiter for Backoff {
    fn wait(&mut self) -> Result<(), GaveUp> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let waited = started.elapsed();
        if waited >= self.limit {
            tracing::warn!(
                wait = self.what,
                tries = self.tries,
                ?waited,
                "gave up waiting"
            );
            return Err(GaveUp { what: self.what });
        }
        self.tries += 1;
        if self.tries < SPINS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(PAUSE);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_gives_up_after_its_limit() {
        let mut b = Backoff::new("test", Duration::from_millis(5));
        let t = Instant::now();
        let err = loop {
            if let Err(e) = b.wait() {
                break e;
            }
        };
        assert_eq!(err.what, "test");
        assert!(t.elapsed() >= Duration::from_millis(5));
        assert!(b.tries() >= 1, "it waited before it gave up");
        assert!(NoWait.wait().is_err());
    }
}
