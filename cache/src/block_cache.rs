//! The NUMA-aware block cache: every partition and node arena of the daemon, the
//! configuration that shapes them, and the request-level API the server uses.
//!
//! A block's home is a pure function of its key ([`Geometry::partition_of`]): partition
//! `(block_no / group_blocks + lun) mod total_partitions`, on node `partition mod nodes`, with
//! its memory in that node's arena. There is exactly one place a block can be cached, so a
//! write on one node and a read on another always see the same copy.
//!
//! # Call sequences
//! The server splits each request with [`BlockCache::spans`] (one [`BlockSpan`] per cache
//! block) and handles each piece:
//!
//! * **READ, hit**: [`lookup`](BlockCache::lookup) → `Lookup::Hit(r)`; send `r.bytes()`
//!   (writev/RDMA straight from the slot), [`record_served`](BlockCache::record_served), drop
//!   `r` when the send (or RDMA Write) has completed — or when the task dies, whatever the
//!   reason: the pin goes with the `BlockRef`.
//! * **READ, miss**: `lookup` → `Lookup::Miss(fill)`; move `fill` to the I/O worker of
//!   `fill.node()`; for each `run` of `fill.runs_mut()` pread(O_DIRECT) `run.buf` at
//!   `run.disk_offset`; then `fill.complete()` → `BlockRef` (continue as a hit), or
//!   `fill.abort()` on an I/O error. `Err(FillRaced)` from `complete`: look up again.
//!   `Lookup::Busy`: retry shortly (another fill of the block is in flight) or read around
//!   the cache; `Lookup::NoSpace`: read around the cache (pread into a network buffer);
//!   `Lookup::Bypass` (full partition, block not admitted, see `admission`): pread the
//!   range from the backing store directly, nothing of it is cached.
//! * **WRITE, WCE=1**: for each piece [`write_back`](BlockCache::write_back) → `Written`: GOOD
//!   once every piece is written. `Throttled` / `NoSpace`: wait for the flusher and retry, or
//!   write through (below). `Busy`: retry.
//! * **WRITE, WCE=0**, simplest: `write_back` every piece, then flush the range as for
//!   SYNCHRONIZE CACHE (below), then GOOD. Flushes of one block are serialized by the cache,
//!   so the disk always ends with the newest data.
//! * **WRITE, bypass** (WCE=0 without caching, or `write_back` said `Throttled`/`NoSpace`):
//!   1. flush the range first ([`dirty_ranges`](BlockCache::dirty_ranges) until it takes
//!      nothing and reports nothing in flight) — otherwise an older dirty copy of the same
//!      sectors, flushed while step 2 runs, could land on disk after it;
//!   2. pwrite the data to the backing store;
//!   3. for each piece [`write_through_update`](BlockCache::write_through_update) until it
//!      returns `Updated`, `NotCached` or `Dropped` (a fill racing with the write is told to
//!      discard what it read); then GOOD.
//! * **Flush** (per-node flusher): [`collect_dirty`](BlockCache::collect_dirty)`(node, max, &mut v)`
//!   on node's own thread; for each `DirtyRange` pwrite every `runs()` entry, (fdatasync), then
//!   [`mark_clean`](BlockCache::mark_clean). Dropping a range instead (I/O error) keeps the
//!   block dirty and queued.
//! * **SYNCHRONIZE CACHE / FUA**: [`dirty_ranges`](BlockCache::dirty_ranges) over the range,
//!   write and `mark_clean` what it returns, fdatasync, and repeat while it reports
//!   `in_flight > 0` (a flusher holds some block: wait for it) or takes anything.
//!
//! The cache itself never does I/O and never blocks except on a partition lock.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::arena::{ArenaError, ArenaOptions, BindPolicy, Memory, NodeArena};
use crate::coherence::{PieceList, PiecePool};
use crate::counters::{CounterSnapshot, NodeCounters};
use crate::geometry::{BlockSpan, Geometry, GeometryError, RangeError, Spans};
use crate::partition::{
    BlockKey, DirtyProbe, DirtyRange, Landing, Lookup, Partition, PartitionError, PartitionStats,
    ReadAhead, UpdateOutcome, WriteOutcome,
};
use crate::topology::Topology;

/// Cache sizing and shape. Every field is checked by [`CacheConfig::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Cache block size: power of two, 4 KiB..1 MiB.
    pub block_size: usize,
    /// Neighbouring blocks per partition group (>= 1). `group_blocks * block_size` at least
    /// the largest common request keeps such requests within two partitions.
    pub group_blocks: u64,
    /// Partitions (independent locks) per node, >= 1.
    pub partitions_per_node: usize,
    /// Cache memory per node; rounded down to whole blocks per partition.
    pub bytes_per_node: usize,
    /// Validity granularity: 512..4096, power of two, at most every LUN's logical block size.
    pub sector_size: usize,
    /// Try huge pages for the arenas.
    pub huge_pages: bool,
    /// Dirty bytes per node above which write-back writes are throttled:
    /// block_size..=bytes_per_node.
    pub dirty_limit_bytes: u64,
    /// Memory policy of the arenas on real nodes.
    pub bind_policy: BindPolicy,
    /// Allocate every arena page at start (`false`: arenas grow as blocks are filled).
    pub prefault: bool,
}

impl Default for CacheConfig {
    /// 64 KiB blocks in groups of 8 (a 512 KiB request takes at most two partitions), 16
    /// partitions per node, 256 MiB per node, 512-byte sectors, a quarter of it dirty at most.
    fn default() -> Self {
        CacheConfig {
            block_size: 64 << 10,
            group_blocks: 8,
            partitions_per_node: 16,
            bytes_per_node: 256 << 20,
            sector_size: 512,
            huge_pages: true,
            dirty_limit_bytes: 64 << 20,
            bind_policy: BindPolicy::Bind,
            prefault: false,
        }
    }
}

/// Errors building the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Config(#[from] GeometryError),
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("the kept cache memory cannot be used: {0}")]
    KeptMemory(String),
}

/// Whose memory the arenas are ([`BlockCache::with_memory`]).
#[derive(Debug, Default)]
pub enum MemoryKind {
    /// Anonymous memory of this process.
    #[default]
    Private,
    /// New memory files, which a live upgrade can hand on.
    Shared,
    /// An earlier cache's memory files, one per node.
    Kept(Vec<OwnedFd>),
}

/// A clean cached block and where its bytes are ([`BlockCache::hot_blocks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptBlock {
    pub key: BlockKey,
    /// Global partition number and slot within it.
    pub partition: u32,
    pub slot: u32,
    /// The valid sectors of a block cached in part (one bit per sector, 64 per word);
    /// `None`: every sector.
    pub valid: Option<Vec<u64>>,
}

/// What must match for a cache to adopt another's memory: block and sector size, group,
/// partitions per node, blocks per partition, nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLayout {
    pub block_size: usize,
    pub sector_size: usize,
    pub group_blocks: u64,
    pub partitions_per_node: usize,
    pub blocks_per_partition: usize,
    pub nodes: usize,
}

impl MemoryLayout {
    /// The layout `config` gives on `nodes` nodes.
    pub fn of(config: &CacheConfig, nodes: usize) -> Self {
        MemoryLayout {
            block_size: config.block_size,
            sector_size: config.sector_size,
            group_blocks: config.group_blocks,
            partitions_per_node: config.partitions_per_node,
            blocks_per_partition: config.blocks_per_partition(),
            nodes,
        }
    }

    /// Bytes of cache per node.
    pub fn bytes_per_node(&self) -> usize {
        self.block_size
            .saturating_mul(self.blocks_per_partition)
            .saturating_mul(self.partitions_per_node)
    }

    /// As one line of words: `block-size N sector-size N group N partitions N blocks N
    /// nodes N`.
    pub fn to_text(&self) -> String {
        format!(
            "block-size {} sector-size {} group {} partitions {} blocks {} nodes {}",
            self.block_size,
            self.sector_size,
            self.group_blocks,
            self.partitions_per_node,
            self.blocks_per_partition,
            self.nodes
        )
    }

    /// Reads [`MemoryLayout::to_text`] back.
    pub fn from_text(t: &str) -> Option<Self> {
        let w: Vec<&str> = t.split_whitespace().collect();
        let names = [
            "block-size",
            "sector-size",
            "group",
            "partitions",
            "blocks",
            "nodes",
        ];
        if w.len() != 12 || w.iter().step_by(2).zip(names).any(|(a, b)| *a != b) {
            return None;
        }
        let n = |i: usize| w[2 * i + 1].parse::<u64>().ok();
        Some(MemoryLayout {
            block_size: usize::try_from(n(0)?).ok()?,
            sector_size: usize::try_from(n(1)?).ok()?,
            group_blocks: n(2)?,
            partitions_per_node: usize::try_from(n(3)?).ok()?,
            blocks_per_partition: usize::try_from(n(4)?).ok()?,
            nodes: usize::try_from(n(5)?).ok()?,
        })
    }
}

impl CacheConfig {
    /// Check the configuration for `nodes` nodes and return the geometry it gives.
    pub fn validate(&self, nodes: usize) -> Result<Geometry, GeometryError> {
        let g = Geometry::new(
            self.block_size,
            self.sector_size,
            self.group_blocks,
            self.partitions_per_node,
            nodes,
        )?;
        let err = |field, reason: String| GeometryError { field, reason };
        let blocks = self.bytes_per_node / self.block_size;
        if blocks < self.partitions_per_node {
            return Err(err(
                "bytes_per_node",
                format!(
                    "{} bytes hold {blocks} blocks of {}, fewer than the {} partitions per node",
                    self.bytes_per_node, self.block_size, self.partitions_per_node
                ),
            ));
        }
        if blocks / self.partitions_per_node >= u32::MAX as usize {
            return Err(err(
                "bytes_per_node",
                "too many blocks per partition".into(),
            ));
        }
        if self.dirty_limit_bytes < self.block_size as u64
            || self.dirty_limit_bytes > self.bytes_per_node as u64
        {
            return Err(err(
                "dirty_limit_bytes",
                format!(
                    "{} is not between the block size ({}) and bytes_per_node ({})",
                    self.dirty_limit_bytes, self.block_size, self.bytes_per_node
                ),
            ));
        }
        Ok(g)
    }

    /// Blocks per partition this configuration gives.
    pub fn blocks_per_partition(&self) -> usize {
        self.bytes_per_node / self.block_size.max(1) / self.partitions_per_node.max(1)
    }
}

/// What [`BlockCache::dirty_ranges`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirtyScan {
    /// Dirty blocks appended to the output (now pinned and marked as being flushed).
    pub taken: usize,
    /// Dirty blocks whose flush is already in flight elsewhere: wait, then scan again.
    pub in_flight: usize,
}

/// The cache (see the module documentation). Share it as `Arc<BlockCache>`.
pub struct BlockCache {
    geometry: Geometry,
    config: CacheConfig,
    partitions: Vec<Arc<Partition>>,
    arenas: Vec<Arc<NodeArena>>,
    counters: Vec<Arc<NodeCounters>>,
    flush_cursor: Vec<AtomicUsize>,
    /// The write-back clock (ms), advanced by the flushers; see `set_clock_ms`.
    clock: Arc<AtomicU64>,
    virtual_nodes: bool,
    /// Spare piece lists of reads with misses, one pool per node.
    piece_pools: Vec<Arc<PiecePool>>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("geometry", &self.geometry)
            .field("virtual_nodes", &self.virtual_nodes)
            .finish()
    }
}

/// Blocks [`BlockCache::range_clean`] probes at most (one partition lock each).
pub const CLEAN_PROBE_BLOCKS: u64 = 64;

impl BlockCache {
    /// Validate `config`, map and bind one arena per node of `topology` (pre-faulted when
    /// `config.prefault`, else grown as blocks are filled), and build the partitions. Done
    /// once at start; nothing is allocated afterwards.
    pub fn new(config: CacheConfig, topology: &Topology) -> Result<Self, CacheError> {
        Self::with_memory(config, topology, MemoryKind::Private)
    }

    /// As [`BlockCache::new`], the arenas in `memory`: private, new memory files, or the
    /// memory files of an earlier cache of the same [`MemoryLayout`] (one per node, in node
    /// order; their blocks are free until [`BlockCache::adopt`]ed).
    pub fn with_memory(
        config: CacheConfig,
        topology: &Topology,
        memory: MemoryKind,
    ) -> Result<Self, CacheError> {
        let geometry = config.validate(topology.node_count())?;
        let shared = matches!(memory, MemoryKind::Shared);
        let mut kept = match memory {
            MemoryKind::Kept(files) => {
                if files.len() != topology.node_count() {
                    return Err(CacheError::KeptMemory(format!(
                        "{} memory files for {} nodes",
                        files.len(),
                        topology.node_count()
                    )));
                }
                files.into_iter().map(Some).collect()
            }
            _ => Vec::new(),
        };
        let per_part = config.blocks_per_partition();
        let ppn = config.partitions_per_node;
        let mut arenas = Vec::with_capacity(topology.node_count());
        let mut counters = Vec::with_capacity(topology.node_count());
        for node in topology.nodes() {
            let arena_memory = match kept.get_mut(node.index).and_then(Option::take) {
                Some(fd) => Memory::Kept(fd),
                None if shared => Memory::Shared,
                None => Memory::Private,
            };
            let a = NodeArena::with_memory(
                node,
                topology.is_virtual(),
                ArenaOptions {
                    slot_size: config.block_size,
                    slots: per_part * ppn,
                    huge_pages: config.huge_pages,
                    policy: config.bind_policy,
                    prefault: config.prefault,
                },
                arena_memory,
            )?;
            tracing::info!(
                node = node.index,
                bytes = a.len(),
                pages = ?a.page_kind(),
                binding = ?a.binding(),
                memory_file = a.memory_file().is_some(),
                "cache arena ready"
            );
            arenas.push(Arc::new(a));
            counters.push(Arc::new(NodeCounters::for_nodes(topology.node_count())));
        }
        let clock = Arc::new(AtomicU64::new(0));
        let mut partitions = Vec::with_capacity(geometry.total_partitions());
        for p in 0..geometry.total_partitions() {
            let n = geometry.node_of_partition(p);
            let part = Partition::new(
                p,
                Arc::clone(&arenas[n]),
                geometry.local_index(p) * per_part,
                per_part,
                config.sector_size,
                Arc::clone(&counters[n]),
            )?
            .with_clock(Arc::clone(&clock));
            partitions.push(Arc::new(part));
        }
        Ok(BlockCache {
            flush_cursor: (0..topology.node_count())
                .map(|_| AtomicUsize::new(0))
                .collect(),
            geometry,
            config,
            partitions,
            arenas,
            counters,
            clock,
            virtual_nodes: topology.is_virtual(),
            piece_pools: (0..topology.node_count())
                .map(|_| PiecePool::new())
                .collect(),
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }
    /// True when the nodes are virtual (arenas not bound; local/remote counts are nominal).
    pub fn is_virtual(&self) -> bool {
        self.virtual_nodes
    }
    pub fn arenas(&self) -> &[Arc<NodeArena>] {
        &self.arenas
    }
    pub fn partitions(&self) -> &[Arc<Partition>] {
        &self.partitions
    }
    /// Home node of a block.
    /// The clean, idle cached blocks, most recently used first within each partition and
    /// the partitions interleaved (the order approximates recency across them): what a
    /// warm start loads again (`coherence::warm`).
    pub fn hot_blocks(&self) -> Vec<KeptBlock> {
        let lists: Vec<Vec<_>> = self.partitions.iter().map(|p| p.clean_blocks()).collect();
        let total = lists.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(total);
        let mut at = 0;
        while out.len() < total {
            for (p, l) in lists.iter().enumerate() {
                if let Some((key, slot, part)) = l.get(at) {
                    out.push(KeptBlock {
                        key: *key,
                        partition: p as u32,
                        slot: *slot,
                        valid: part.clone(),
                    });
                }
            }
            at += 1;
        }
        out
    }

    /// The shape of the cache's memory: a kept arena can be adopted only by a cache of the
    /// same layout.
    pub fn layout(&self) -> MemoryLayout {
        MemoryLayout::of(&self.config, self.arenas.len())
    }

    /// The arenas' memory files, in node order (`None`: private memory).
    pub fn memory_files(&self) -> Option<Vec<BorrowedFd<'_>>> {
        self.arenas.iter().map(|a| a.memory_file()).collect()
    }

    /// Makes the kept block `b` (its slot's memory holds its valid sectors: see
    /// [`Partition::adopt`]) cached again, as `lun`'s block. False when its partition is not
    /// that block's home, or the partition refused it.
    pub fn adopt(&self, lun: u32, b: &KeptBlock) -> bool {
        let key = BlockKey {
            lun,
            block_no: b.key.block_no,
        };
        let p = b.partition as usize;
        self.geometry.partition_of(lun, key.block_no) == p
            && self
                .partitions
                .get(p)
                .is_some_and(|part| part.adopt(key, b.slot, b.valid.as_deref()))
    }

    pub fn home_node(&self, lun: u32, block_no: u64) -> usize {
        self.geometry.home_node(lun, block_no)
    }

    /// An empty piece list from `node`'s pool (out of range: the last node's); it goes
    /// back there when dropped.
    pub fn piece_list(&self, node: usize) -> PieceList {
        let last = self.piece_pools.len().saturating_sub(1);
        self.piece_pools[node.min(last)].take()
    }

    /// Split a request's byte range into per-block pieces.
    pub fn spans(&self, offset: u64, len: u64) -> Result<Spans, RangeError> {
        self.geometry.spans(offset, len)
    }

    fn part(&self, lun: u32, block_no: u64) -> &Arc<Partition> {
        &self.partitions[self.geometry.partition_of(lun, block_no)]
    }

    /// Read side, one piece: see the module documentation for the sequence.
    pub fn lookup(&self, lun: u32, span: &BlockSpan, ra: ReadAhead) -> Lookup {
        let key = BlockKey {
            lun,
            block_no: span.block_no(),
        };
        self.part(lun, span.block_no())
            .lookup(key, span.start(), span.len(), ra)
    }

    /// Write-back (WCE=1), one piece: copy `data` (exactly `span.len()` bytes, whole sectors)
    /// into the cache as dirty. `Unaligned` when the length differs or is not whole sectors.
    pub fn write_back(&self, lun: u32, span: &BlockSpan, data: &[u8]) -> WriteOutcome {
        if data.len() != span.len() {
            return WriteOutcome::Unaligned;
        }
        let key = BlockKey {
            lun,
            block_no: span.block_no(),
        };
        self.part(lun, span.block_no()).write_back(
            key,
            span.start(),
            data,
            self.config.dirty_limit_bytes,
        )
    }

    /// A fresh slot of the block's home partition for write data that a device will put
    /// there before the write is committed (see [`Landing`]): `span`'s bytes, whole
    /// sectors. `None`: unaligned, or no slot can be reused.
    pub fn land(&self, lun: u32, span: &BlockSpan) -> Option<Landing> {
        let key = BlockKey {
            lun,
            block_no: span.block_no(),
        };
        self.part(lun, span.block_no())
            .reserve_landing(key, span.start(), span.len())
    }

    /// Commits a landing as a write-back under this cache's dirty limit
    /// ([`Landing::commit`]).
    pub fn commit_landing(&self, l: Landing) -> Result<u64, (Landing, WriteOutcome)> {
        l.commit(self.config.dirty_limit_bytes)
    }

    /// Write-through (WCE=0 or bypass), one piece, **after** `data` is in the backing store:
    /// update the cached copy if there is one. Repeat on `Busy` / `NoSpace`.
    pub fn write_through_update(&self, lun: u32, span: &BlockSpan, data: &[u8]) -> UpdateOutcome {
        if data.len() != span.len() {
            return UpdateOutcome::Unaligned;
        }
        let key = BlockKey {
            lun,
            block_no: span.block_no(),
        };
        self.part(lun, span.block_no())
            .write_through_update(key, span.start(), data)
    }

    /// For a node's flusher: up to `max` dirty blocks homed on `node`, oldest first per
    /// partition, partitions taken round-robin between calls. Appends to `out` (reuse it to
    /// avoid allocating). Returns how many were added; 0 for an unknown node.
    pub fn collect_dirty(&self, node: usize, max: usize, out: &mut Vec<DirtyRange>) -> usize {
        self.collect_dirty_aged(node, max, out, 0)
    }

    /// Like [`BlockCache::collect_dirty`], but only blocks dirty for at least `min_age_ms`
    /// by the write-back clock ([`BlockCache::set_clock_ms`]): lazy write-back leaves young
    /// dirty blocks in the cache, where further writes to them coalesce.
    pub fn collect_dirty_aged(
        &self,
        node: usize,
        max: usize,
        out: &mut Vec<DirtyRange>,
        min_age_ms: u64,
    ) -> usize {
        let cutoff = match min_age_ms {
            0 => u64::MAX,
            age => match self.clock.load(Ordering::Relaxed).checked_sub(age) {
                Some(c) => c,
                None => return 0, // the clock has not run that long: nothing is that old
            },
        };
        let Some(cursor) = self.flush_cursor.get(node) else {
            return 0;
        };
        let ppn = self.geometry.partitions_per_node();
        let nodes = self.geometry.nodes();
        let first = cursor.fetch_add(1, Ordering::Relaxed);
        let mut n = 0;
        for k in 0..ppn {
            if n >= max {
                break;
            }
            let local = (first + k) % ppn;
            n += self.partitions[local * nodes + node].collect_dirty_older(max - n, out, cutoff);
        }
        n
    }

    /// Advance the write-back clock to `ms` (milliseconds on any monotonic scale; it never
    /// goes back). Blocks are stamped with it as they become dirty.
    pub fn set_clock_ms(&self, ms: u64) {
        self.clock.fetch_max(ms, Ordering::Relaxed);
    }

    /// For SYNCHRONIZE CACHE / FUA: take the dirty blocks of `lun` overlapping
    /// `[offset, offset + len)`, appending them to `out`.
    pub fn dirty_ranges(
        &self,
        lun: u32,
        offset: u64,
        len: u64,
        out: &mut Vec<DirtyRange>,
    ) -> Result<DirtyScan, RangeError> {
        let mut scan = DirtyScan::default();
        let end = offset.checked_add(len).ok_or(RangeError { offset, len })?;
        if len == 0 {
            return Ok(scan);
        }
        let first = self.geometry.block_of(offset);
        let last = self.geometry.block_of(end - 1);
        let total_slots: u64 = self.partitions.iter().map(|p| p.slot_count() as u64).sum();
        let mut probe = |p: &Arc<Partition>, key: BlockKey| match p.dirty_of(key) {
            DirtyProbe::Clean => {}
            DirtyProbe::InFlight => scan.in_flight += 1,
            DirtyProbe::Taken(r) => {
                out.push(r);
                scan.taken += 1;
            }
        };
        if last - first < total_slots {
            for b in first..=last {
                probe(self.part(lun, b), BlockKey { lun, block_no: b });
            }
        } else {
            // More blocks in the range than the cache can hold: walk the cached keys instead.
            let mut keys = Vec::new();
            for p in &self.partitions {
                keys.clear();
                p.dirty_keys(lun, first, last, &mut keys);
                for &k in &keys {
                    probe(p, k);
                }
            }
        }
        Ok(scan)
    }

    /// Whether no block of `lun`'s byte range holds dirty data (neither waiting for nor
    /// being written back), without taking any: a write-through may then go to the
    /// backing store without writing older data of the range back first, for as long as
    /// the caller keeps writers of the range out. `false` also for a range of more than
    /// [`CLEAN_PROBE_BLOCKS`] blocks (not probed) or one the cache cannot map.
    pub fn range_clean(&self, lun: u32, offset: u64, len: u64) -> bool {
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        if len == 0 {
            return true;
        }
        let first = self.geometry.block_of(offset);
        let last = self.geometry.block_of(end - 1);
        if last - first >= CLEAN_PROBE_BLOCKS {
            return false;
        }
        (first..=last).all(|b| !self.part(lun, b).is_dirty(BlockKey { lun, block_no: b }))
    }

    /// A flushed range is on stable storage: clean the block unless it was written again
    /// meanwhile. Same as [`DirtyRange::mark_clean`].
    pub fn mark_clean(&self, range: DirtyRange) -> bool {
        range.mark_clean()
    }

    /// Drop every cached block of `lun` (LUN removal; flush first if the data must survive).
    /// Pinned blocks are released only when their last reference is dropped.
    pub fn invalidate_lun(&self, lun: u32) -> usize {
        self.partitions.iter().map(|p| p.invalidate_lun(lun)).sum()
    }

    /// Count `bytes` served by `serving_node` from a block homed on `home_node`.
    pub fn record_served(&self, home_node: usize, serving_node: usize, bytes: u64) {
        let Some(c) = self.counters.get(serving_node) else {
            return;
        };
        if home_node == serving_node {
            NodeCounters::add(&c.served_local_bytes, bytes);
        } else {
            NodeCounters::add(&c.served_remote_bytes, bytes);
        }
    }

    /// Count a task forwarded from node `from` to node `to`.
    pub fn record_forward(&self, from: usize, to: usize) {
        if let Some(c) = self.counters.get(from) {
            NodeCounters::add(&c.forwards_out, 1);
            if let Some(t) = c.forwards_to.get(to) {
                NodeCounters::add(t, 1);
            }
        }
        if let Some(c) = self.counters.get(to) {
            NodeCounters::add(&c.forwards_in, 1);
        }
    }

    /// The live counters of a node.
    pub fn node_counters(&self, node: usize) -> Option<&NodeCounters> {
        self.counters.get(node).map(|c| &**c)
    }

    /// A snapshot of a node's counters.
    pub fn counters(&self, node: usize) -> Option<CounterSnapshot> {
        self.counters.get(node).map(|c| c.snapshot())
    }

    /// Dirty bytes of blocks homed on `node`.
    pub fn dirty_bytes(&self, node: usize) -> u64 {
        self.counters
            .get(node)
            .map_or(0, |c| c.dirty_bytes.load(Ordering::Relaxed))
    }

    /// Slot-state counts summed over all partitions.
    pub fn stats(&self) -> PartitionStats {
        let mut t = PartitionStats::default();
        for p in &self.partitions {
            let s = p.stats();
            t.slots += s.slots;
            t.free += s.free;
            t.lru += s.lru;
            t.dirty_queued += s.dirty_queued;
            t.mapped += s.mapped;
            t.pinned += s.pinned;
            t.busy += s.busy;
            t.detached += s.detached;
            t.dirty_sectors += s.dirty_sectors;
        }
        t
    }

    /// Check every partition's invariants and the per-node dirty counters (the counter check
    /// is exact only while no other thread is using the cache).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut dirty = vec![0u64; self.counters.len()];
        let mut mapped = vec![0u64; self.counters.len()];
        for p in &self.partitions {
            p.check_invariants()
                .map_err(|e| format!("partition {}: {e}", p.index()))?;
            dirty[p.node()] += p.dirty_sectors() as u64 * self.config.sector_size as u64;
            mapped[p.node()] += p.stats().mapped as u64;
        }
        for (n, m) in mapped.iter().enumerate() {
            let counted = self.counters[n].cached_blocks.load(Ordering::Relaxed);
            if counted != *m {
                return Err(format!(
                    "node {n}: cached_blocks counter {counted} but {m} blocks mapped"
                ));
            }
        }
        for (n, d) in dirty.iter().enumerate() {
            if self.dirty_bytes(n) != *d {
                return Err(format!(
                    "node {n}: dirty counter {} but {d} dirty bytes cached",
                    self.dirty_bytes(n)
                ));
            }
        }
        Ok(())
    }
}
