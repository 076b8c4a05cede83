//! The landings an iSER link holds: for commands whose write data it fetches by RDMA READ,
//! the fresh cache slots the server gave it (`backend::landing::Landing`, from
//! `Link::land`), so that the READs put the data where the cache keeps it. A landing is
//! held until its READs have all completed (or the link is gone: the queue pair is
//! destroyed before the landings are dropped, so no device write can reach a freed slot),
//! then handed back with the delivered command (`Link::take_landing`) or dropped when its
//! task ended without it.

use iscsi_proto::Connection;

use crate::backend::landing::Landing;
use crate::backend::payload::Payload;

/// One command's landing and the RDMA READs into it.
struct Held {
    itt: u32,
    landing: Landing,
    /// Its READs were posted (a fetch lands whole, or not at all).
    posted: bool,
    /// READs into it not completed yet.
    reads: u32,
}

/// Cache bytes one connection may hold in landings at once: an initiator that announces
/// large writes and never serves their RDMA READs (the watchdog drops it after
/// `STALL_LIMIT_MS`) must not take the cache's slots meanwhile. Beyond it, write data goes
/// through staging chunks.
const MAX_HELD_BYTES: usize = 32 << 20;

/// The landings of one link (a handful at once: linear search).
#[derive(Default)]
pub(super) struct Landings {
    held: Vec<Held>,
    /// Bytes of the landings held.
    bytes: usize,
}

impl Landings {
    /// Holds `landing` for command `itt`; gives it back when that command already has one
    /// (an ITT reused while READs into the old one are in flight) or the connection holds
    /// [`MAX_HELD_BYTES`] already.
    pub(super) fn add(&mut self, itt: u32, landing: Landing) -> Option<Landing> {
        let n = landing.transfer_len();
        if self.bytes + n > MAX_HELD_BYTES || self.held.iter().any(|h| h.itt == itt) {
            return Some(landing);
        }
        self.bytes += n;
        self.held.push(Held {
            itt,
            landing,
            posted: false,
            reads: 0,
        });
        None
    }

    /// The landing for command `itt`'s fetch of bytes `offset..offset + len`, when one is
    /// held, not used yet, and made for exactly that (the bytes before `offset` copied in,
    /// the fetch reaching its end).
    pub(super) fn for_fetch(&self, itt: u32, offset: usize, len: usize) -> Option<&Landing> {
        self.held
            .iter()
            .find(|h| {
                h.itt == itt
                    && !h.posted
                    && h.landing.fetch_from() == offset
                    && offset.checked_add(len) == Some(h.landing.transfer_len())
            })
            .map(|h| &h.landing)
    }

    /// `reads` RDMA READs into command `itt`'s landing were posted.
    pub(super) fn posted(&mut self, itt: u32, reads: u32) {
        if let Some(h) = self.held.iter_mut().find(|h| h.itt == itt) {
            h.posted = true;
            h.reads += reads;
        }
    }

    /// One RDMA READ into command `itt`'s landing completed (or was flushed).
    pub(super) fn read_done(&mut self, itt: u32) {
        if let Some(h) = self.held.iter_mut().find(|h| h.itt == itt) {
            h.reads = h.reads.saturating_sub(1);
        }
    }

    /// Command `itt`'s landing, once no READ into it is in flight.
    pub(super) fn take(&mut self, itt: u32) -> Option<Landing> {
        let i = self
            .held
            .iter()
            .position(|h| h.itt == itt && h.reads == 0)?;
        let h = self.held.swap_remove(i);
        self.bytes -= h.landing.transfer_len();
        Some(h.landing)
    }

    /// Drops the landings no command will claim: no READ into them in flight and their
    /// task gone or ended by task management. (A live task's landing waits for its
    /// delivery, even when it waits for an earlier CmdSN or was fetched through staging.)
    pub(super) fn sweep(&mut self, conn: &Connection<Payload>) {
        if self.held.is_empty() {
            return;
        }
        let mut freed = 0;
        self.held.retain(|h| {
            let keep = h.reads > 0 || conn.task_wanted(h.itt);
            if !keep {
                freed += h.landing.transfer_len();
            }
            keep
        });
        self.bytes -= freed;
    }
}
