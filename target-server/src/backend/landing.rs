//! Write data that lands in registered cache memory before its command runs. A transport
//! that fetches a WRITE's data itself (iSER: an RDMA READ from the initiator's buffer) can
//! have it put straight into fresh cache slots (`cache::Landing`: the node arenas' memory,
//! registered with the device, sector-aligned) instead of into staging memory from which
//! it would be copied into the command's buffer and on. When the command runs,
//! [`storage::write_landed`] takes the slots as they are:
//! - a write-back to a cached LUN: the slots become the blocks' cached copies, dirty — no
//!   byte copied;
//! - a durable write (FUA, WCE=0, `bsoflags=sync`) or a LUN that does not cache
//!   (`cache: off`/`page`): an I/O worker writes the slots to the backing store as they
//!   are (one vectored write; O_DIRECT straight from them, no bounce); a slot whose block
//!   is cached then becomes its cached copy, clean (no copy either), the others are freed;
//! - anything else (a changed LUN, the range held by another write, a refused block): the
//!   bytes not taken are copied into the command's buffer for the ordinary path.
//!
//! Only a plain WRITE (6/10/12/16) lands, for exactly the length its CDB gives, of a daemon
//! with a cache (the slots are its memory); everything else is fetched as before.
//!
//! [`storage::write_landed`]: super::storage::write_landed

use std::cell::RefCell;
use std::sync::Arc;

use cache::BlockCache;
use iscsi_proto::ScsiCommand;

use super::StorageCtx;
use crate::registry::Lun;

/// Largest write that lands (bytes); longer ones are fetched through staging memory.
const MAX_LANDING: u64 = 8 << 20;

/// Spare block lists, so that a landing allocates nothing once a thread has made a few.
const SPARE_LISTS: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<Vec<Option<cache::Landing>>>> = const { RefCell::new(Vec::new()) };
}

/// One command's write data landing in fresh cache slots (see the module documentation):
/// the transfer's bytes `0..len` at byte `offset` of the LUN, one slot per cache block.
pub struct Landing {
    cache: Arc<BlockCache>,
    cache_id: u32,
    offset: u64,
    len: usize,
    /// Bytes copied in when it was made (the command's write data in so far); the
    /// transport fetches the rest into it.
    prefilled: usize,
    /// In transfer order; `None` once committed.
    blocks: Vec<Option<cache::Landing>>,
}

impl Landing {
    /// A landing for `cmd`, a command of `lun` whose write data is being fetched, when it
    /// is a plain WRITE (the transfer exactly the CDB's length) and the daemon's cache has
    /// slots for it — whether the write will be cached or written through decides itself
    /// when the command runs: the write data in so far (`data_out`) copied in, the rest to
    /// come from the transport.
    pub fn reserve(lun: &Lun, cmd: &ScsiCommand, ctx: &StorageCtx<'_>) -> Option<Landing> {
        // a passed-through device takes its write data from `data_out`
        if !ctx.sends_from_blocks || cmd.landed != 0 || lun.passthrough.is_some() {
            return None;
        }
        // a LUN another gateway owns ships its write data there from `data_out`
        if lun.rbd_ownership.as_ref().is_some_and(|o| !o.owns()) {
            return None;
        }
        // the slots are the daemon's cache memory, also for a LUN that does not cache
        let cache = ctx.cache?;
        let ext = scsi::write_extent(&cmd.cdb)?;
        let bs = u64::from(lun.store.block_size());
        let len = u64::from(ext.blocks).checked_mul(bs)?;
        let offset = ext.lba.checked_mul(bs)?;
        if len != u64::from(cmd.expected_write_len)
            || len > MAX_LANDING
            || cmd.data_out.len() as u64 >= len
            // block boundaries must fall on LUN block boundaries (a rest after a refused
            // block is a write of whole LUN blocks)
            || cache.geometry().block_size() as u64 % bs != 0
        {
            return None;
        }
        let spans = cache.spans(offset, len).ok()?;
        let mut blocks = SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        for span in spans {
            match cache.land(lun.cache_id, &span) {
                Some(l) => blocks.push(Some(l)),
                None => {
                    recycle(blocks);
                    return None;
                }
            }
        }
        let mut landing = Landing {
            cache: Arc::clone(cache),
            cache_id: lun.cache_id,
            offset,
            len: len as usize,
            prefilled: 0,
            blocks,
        };
        landing.prefill(&cmd.data_out).then_some(landing)
    }

    /// Copies the write data already in (the transfer's first bytes) into the slots.
    fn prefill(&mut self, data: &[u8]) -> bool {
        let mut at = 0;
        for l in self.blocks.iter_mut().flatten() {
            if at >= data.len() {
                break;
            }
            let n = l.len().min(data.len() - at);
            if !l.fill(0, &data[at..at + n]) {
                return false;
            }
            at += n;
        }
        self.prefilled = at;
        at == data.len()
    }

    /// Where the transport's fetch must begin: the bytes before it were copied in.
    pub fn fetch_from(&self) -> usize {
        self.prefilled
    }

    /// Bytes of the whole transfer.
    pub fn transfer_len(&self) -> usize {
        self.len
    }

    /// The memory of transfer bytes `from..from + n`, in order, as (address, length)
    /// pieces appended to `out` (for a device to write them; the addresses lie in the
    /// cache's node arenas). False, and `out` as it was, when the range is not inside the
    /// landing.
    pub fn pieces(&self, from: usize, n: usize, out: &mut Vec<(usize, usize)>) -> bool {
        let Some(end) = from.checked_add(n).filter(|&e| e <= self.len) else {
            return false;
        };
        let mut at = 0;
        for l in self.blocks.iter().flatten() {
            let (lo, hi) = (at, at + l.len());
            at = hi;
            let (a, b) = (lo.max(from), hi.min(end));
            if a < b {
                out.push((l.dma_addr() + (a - lo), b - a));
            }
        }
        true
    }

    /// True when the landing holds exactly bytes `offset..offset + len` of `lun` in
    /// `cache`.
    pub(crate) fn holds(&self, cache: &Arc<BlockCache>, lun: &Lun, offset: u64, len: u64) -> bool {
        Arc::ptr_eq(&self.cache, cache)
            && self.cache_id == lun.cache_id
            && self.offset == offset
            && self.len as u64 == len
            && self.blocks.iter().all(Option::is_some)
    }

    /// Commits the blocks in order ([`BlockCache::commit_landing`]) until one is refused.
    /// `Ok`: all of them are cached, dirty. `Err(at)`: the blocks before transfer byte `at`
    /// are; the landing still holds the rest.
    pub(crate) fn commit(&mut self) -> Result<(), usize> {
        let mut at = 0;
        for slot in self.blocks.iter_mut() {
            let Some(l) = slot.take() else { continue };
            let n = l.len();
            match self.cache.commit_landing(l) {
                Ok(_) => at += n,
                Err((l, _why)) => {
                    *slot = Some(l);
                    return Err(at);
                }
            }
        }
        Ok(())
    }

    /// The slots, in transfer order (`None` once committed), for a write straight from them
    /// (`coherence::write_through_landed`, which takes them).
    pub(crate) fn blocks_mut(&mut self) -> &mut [Option<cache::Landing>] {
        &mut self.blocks
    }

    /// Appends the bytes of the blocks not committed (all of them, or those from where
    /// [`commit`](Landing::commit) stopped), less their first `skip` bytes, to `data` (the
    /// ordinary write path takes them from there).
    ///
    /// # Safety
    /// No device write into the landing may be in flight (the transport's fetch is over:
    /// it gave the landing back).
    pub(crate) unsafe fn append_rest(&self, skip: usize, data: &mut Vec<u8>) {
        let mut at = 0;
        for l in self.blocks.iter().flatten() {
            let (lo, hi) = (at, at + l.len());
            at = hi;
            if hi <= skip {
                continue;
            }
            // SAFETY: the caller guarantees no device writes into the landing meanwhile.
            let bytes = unsafe { l.bytes() };
            data.extend_from_slice(&bytes[skip.saturating_sub(lo)..]);
        }
    }
}

/// Gives a block list back to this thread's spares (its landings dropped: slots freed).
fn recycle(mut blocks: Vec<Option<cache::Landing>>) {
    blocks.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_LISTS && blocks.capacity() > 0 {
            s.push(blocks);
        }
    });
}

impl Drop for Landing {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.blocks));
    }
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing")
            .field("cache_id", &self.cache_id)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("prefilled", &self.prefilled)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}
