//! Write data that lands in the cache before its command runs. A transport that fetches a
//! WRITE's data itself (iSER: an RDMA READ from the initiator's buffer) can have it put
//! straight into fresh cache slots of the blocks it will become (`cache::Landing`), instead
//! of into staging memory from which it would be copied twice (into the command's buffer,
//! then into the cache). When the command runs, [`storage::write_landed`] makes those slots
//! the cached copies, dirty, as a write-back would leave them — no byte copied — or, when
//! the command turns out to need anything else (write-through, an error, a changed LUN),
//! copies the bytes into the command's buffer for the ordinary path.
//!
//! Only a plain WRITE of a cached LUN with the write cache enabled and no FUA lands, for
//! exactly the length its CDB gives; everything else is fetched as before.
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
    /// is a plain WRITE that will go into the cache (write cache on, no FUA, a cached LUN,
    /// the transfer exactly the CDB's length) and the cache has slots: the write data in
    /// so far (`data_out`) copied in, the rest to come from the transport.
    pub fn reserve(lun: &Lun, cmd: &ScsiCommand, ctx: &StorageCtx<'_>) -> Option<Landing> {
        if !ctx.sends_from_blocks || cmd.landed != 0 {
            return None;
        }
        let cache = ctx.cache_for(lun)?;
        let ext = scsi::write_extent(&cmd.cdb)?;
        let bs = u64::from(lun.store.block_size());
        let len = u64::from(ext.blocks).checked_mul(bs)?;
        let offset = ext.lba.checked_mul(bs)?;
        if ext.fua
            || lun.scsi.durable_writes(false)
            || len != u64::from(cmd.expected_write_len)
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
