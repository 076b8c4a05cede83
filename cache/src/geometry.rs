//! Cache geometry: block size, sector size, grouping and partition count, and the pure
//! functions built on them that both the cache and the router use: which partition and which
//! node a block belongs to, and how a byte range splits into cache-block pieces.
//!
//! Partition of a block (seed 004 §5.2.2, plus a per-LUN rotation):
//! `partition = (block_no / group_blocks + lun) mod total_partitions`, and partition `p` lives
//! on node `p mod nodes`. Neighbouring blocks share a partition, so a request no larger than
//! a group touches at most two partitions. The `+ lun` term is zero for LUN 0 (exactly the
//! seed's formula) and keeps the first group of every LUN (where file systems keep their hot
//! metadata) from landing on the same partition.

use std::fmt;

/// Most nodes the router's fixed arrays hold.
pub const MAX_NODES: usize = 64;
/// Smallest cache block.
pub const MIN_BLOCK: usize = 4096;
/// Largest cache block.
pub const MAX_BLOCK: usize = 1 << 20;

/// A geometry that cannot work, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cache.{field}: {reason}")]
pub struct GeometryError {
    pub field: &'static str,
    pub reason: String,
}

fn bad(field: &'static str, reason: impl Into<String>) -> GeometryError {
    GeometryError {
        field,
        reason: reason.into(),
    }
}

/// The shape of the cache. Cheap to copy; every method is a pure function.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    block_shift: u32,
    sector_shift: u32,
    group_blocks: u64,
    partitions_per_node: u32,
    nodes: u32,
}

impl fmt::Debug for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Geometry")
            .field("block_size", &self.block_size())
            .field("sector_size", &self.sector_size())
            .field("group_blocks", &self.group_blocks)
            .field("partitions_per_node", &self.partitions_per_node)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl Geometry {
    /// Validate and build. `block_size`: power of two, 4 KiB..1 MiB; `sector_size`: power of
    /// two, 512..4096, at most the block size; `group_blocks >= 1`;
    /// `partitions_per_node >= 1`; `1 <= nodes <= 64`.
    pub fn new(
        block_size: usize,
        sector_size: usize,
        group_blocks: u64,
        partitions_per_node: usize,
        nodes: usize,
    ) -> Result<Self, GeometryError> {
        if !block_size.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&block_size) {
            return Err(bad(
                "block_size",
                format!("{block_size} is not a power of two between 4 KiB and 1 MiB"),
            ));
        }
        if !sector_size.is_power_of_two() || !(512..=4096).contains(&sector_size) {
            return Err(bad(
                "sector_size",
                format!("{sector_size} is not 512, 1024, 2048 or 4096"),
            ));
        }
        if group_blocks == 0 {
            return Err(bad("group_blocks", "must be at least 1"));
        }
        if group_blocks.checked_mul(block_size as u64).is_none() {
            return Err(bad("group_blocks", format!("{group_blocks} is too large")));
        }
        if partitions_per_node == 0 || partitions_per_node > 1 << 16 {
            return Err(bad(
                "partitions_per_node",
                format!("{partitions_per_node} is not between 1 and 65536"),
            ));
        }
        if nodes == 0 || nodes > MAX_NODES {
            return Err(bad(
                "nodes",
                format!("{nodes} nodes; between 1 and {MAX_NODES} are supported"),
            ));
        }
        Ok(Geometry {
            block_shift: block_size.trailing_zeros(),
            sector_shift: sector_size.trailing_zeros(),
            group_blocks,
            partitions_per_node: partitions_per_node as u32,
            nodes: nodes as u32,
        })
    }

    pub fn block_size(&self) -> usize {
        1 << self.block_shift
    }
    pub fn sector_size(&self) -> usize {
        1 << self.sector_shift
    }
    /// Sectors per block (bits in each validity/dirty bitmap).
    pub fn sectors_per_block(&self) -> usize {
        1 << (self.block_shift - self.sector_shift)
    }
    pub fn group_blocks(&self) -> u64 {
        self.group_blocks
    }
    /// Bytes covered by one group of neighbouring blocks (all in one partition).
    pub fn group_bytes(&self) -> u64 {
        self.group_blocks << self.block_shift
    }
    pub fn nodes(&self) -> usize {
        self.nodes as usize
    }
    pub fn partitions_per_node(&self) -> usize {
        self.partitions_per_node as usize
    }
    pub fn total_partitions(&self) -> usize {
        self.partitions_per_node as usize * self.nodes as usize
    }

    /// The block holding byte `offset` of a LUN.
    pub fn block_of(&self, offset: u64) -> u64 {
        offset >> self.block_shift
    }

    /// Partition index (0..total_partitions) of a block.
    #[inline]
    pub fn partition_of(&self, lun: u32, block_no: u64) -> usize {
        let group = block_no / self.group_blocks;
        (group.wrapping_add(lun as u64) % self.total_partitions() as u64) as usize
    }

    /// Node that partition `p` lives on.
    #[inline]
    pub fn node_of_partition(&self, p: usize) -> usize {
        p % self.nodes as usize
    }

    /// Position of partition `p` among its node's partitions.
    pub fn local_index(&self, p: usize) -> usize {
        p / self.nodes as usize
    }

    /// Home node of a block: where its only cached copy lives.
    #[inline]
    pub fn home_node(&self, lun: u32, block_no: u64) -> usize {
        self.node_of_partition(self.partition_of(lun, block_no))
    }

    /// Home node of the group containing byte `offset` (every block of a group shares it).
    #[inline]
    pub fn home_node_of_offset(&self, lun: u32, offset: u64) -> usize {
        self.home_node(lun, offset >> self.block_shift)
    }

    /// Split `[offset, offset + len)` into cache-block pieces, in order. Errors when the end
    /// overflows `u64`. An empty request yields no piece.
    pub fn spans(&self, offset: u64, len: u64) -> Result<Spans, RangeError> {
        let end = offset.checked_add(len).ok_or(RangeError { offset, len })?;
        Ok(Spans {
            pos: offset,
            end,
            req_start: offset,
            block_shift: self.block_shift,
        })
    }
}

/// A byte range whose end does not fit in 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("byte range at {offset} of {len} bytes overflows")]
pub struct RangeError {
    pub offset: u64,
    pub len: u64,
}

/// The part of a request that falls in one cache block. Built only by [`Geometry::spans`]
/// (or [`BlockSpan::new`], which checks it), so it always lies inside its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpan {
    block_no: u64,
    start: u32,
    len: u32,
    req_offset: u64,
}

impl BlockSpan {
    /// A span of `len` bytes at `start` inside block `block_no`, for a cache of `block_size`
    /// blocks. `None` when empty or not inside the block.
    pub fn new(block_size: usize, block_no: u64, start: usize, len: usize) -> Option<Self> {
        if len == 0 || start.checked_add(len)? > block_size || block_size > MAX_BLOCK {
            return None;
        }
        Some(BlockSpan {
            block_no,
            start: start as u32,
            len: len as u32,
            req_offset: 0,
        })
    }
    pub fn block_no(&self) -> u64 {
        self.block_no
    }
    /// Byte offset inside the block.
    pub fn start(&self) -> usize {
        self.start as usize
    }
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn end(&self) -> usize {
        self.start as usize + self.len as usize
    }
    /// Offset of this piece from the start of the request it was split from.
    pub fn req_offset(&self) -> u64 {
        self.req_offset
    }
}

/// Iterator over the [`BlockSpan`]s of a request.
#[derive(Debug, Clone)]
pub struct Spans {
    pos: u64,
    end: u64,
    req_start: u64,
    block_shift: u32,
}

impl Iterator for Spans {
    type Item = BlockSpan;

    fn next(&mut self) -> Option<BlockSpan> {
        if self.pos >= self.end {
            return None;
        }
        let bs = 1u64 << self.block_shift;
        let block_no = self.pos >> self.block_shift;
        let start = self.pos & (bs - 1);
        let len = (bs - start).min(self.end - self.pos);
        let span = BlockSpan {
            block_no,
            start: start as u32,
            len: len as u32,
            req_offset: self.pos - self.req_start,
        };
        self.pos += len;
        Some(span)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.pos >= self.end {
            return (0, Some(0));
        }
        let first = self.pos >> self.block_shift;
        let last = (self.end - 1) >> self.block_shift;
        let n = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validation_names_field() {
        assert_eq!(
            Geometry::new(3000, 512, 8, 4, 2).unwrap_err().field,
            "block_size"
        );
        assert_eq!(
            Geometry::new(2 << 20, 512, 8, 4, 2).unwrap_err().field,
            "block_size"
        );
        assert_eq!(
            Geometry::new(4096, 8192, 8, 4, 2).unwrap_err().field,
            "sector_size"
        );
        assert_eq!(
            Geometry::new(4096, 512, 0, 4, 2).unwrap_err().field,
            "group_blocks"
        );
        assert_eq!(
            Geometry::new(4096, 512, 8, 0, 2).unwrap_err().field,
            "partitions_per_node"
        );
        assert_eq!(
            Geometry::new(4096, 512, 8, 4, 65).unwrap_err().field,
            "nodes"
        );
        assert!(Geometry::new(1 << 20, 4096, 1, 1, 64).is_ok());
    }

    #[test]
    fn seed_formula_for_lun0() {
        let g = Geometry::new(4096, 512, 128, 4, 2).unwrap();
        for b in 0..10_000u64 {
            assert_eq!(g.partition_of(0, b), ((b / 128) % 8) as usize);
            assert_eq!(g.home_node(0, b), ((b / 128) % 8 % 2) as usize);
        }
        // Per-LUN rotation.
        assert_eq!(g.partition_of(3, 0), 3);
    }

    #[test]
    fn partitions_spread_evenly_over_nodes() {
        let g = Geometry::new(65536, 512, 8, 3, 4).unwrap();
        let mut per_node = [0usize; 4];
        for p in 0..g.total_partitions() {
            per_node[g.node_of_partition(p)] += 1;
        }
        assert_eq!(per_node, [3, 3, 3, 3]);
    }

    #[test]
    fn spans_overflow_is_error() {
        let g = Geometry::new(4096, 512, 8, 1, 1).unwrap();
        assert!(g.spans(u64::MAX - 10, 100).is_err());
        assert_eq!(g.spans(5, 0).unwrap().count(), 0);
    }

    proptest! {
        /// A request no larger than a group touches at most two partitions (seed §5.2.2): with
        /// the default geometry (64 KiB blocks, 8 per group) a 512 KiB request takes <= 2 locks.
        #[test]
        fn request_within_group_touches_at_most_two_partitions(
            offset in 0u64..(1 << 40), len in 1u64..=(512 << 10), lun in 0u32..8,
            ppn in 1usize..8, nodes in 1usize..5,
        ) {
            let g = Geometry::new(65536, 512, 8, ppn, nodes).unwrap();
            let mut parts: Vec<usize> = g.spans(offset, len).unwrap()
                .map(|s| g.partition_of(lun, s.block_no())).collect();
            parts.dedup();
            prop_assert!(parts.len() <= 2, "{:?}", parts);
        }

        #[test]
        fn spans_tile_the_request(offset in 0u64..(1 << 40), len in 0u64..(4 << 20), shift in 12u32..=20) {
            let g = Geometry::new(1 << shift, 512, 4, 2, 2).unwrap();
            let spans = g.spans(offset, len).unwrap();
            let (lo, hi) = spans.size_hint();
            let v: Vec<BlockSpan> = spans.collect();
            prop_assert_eq!(lo, v.len());
            prop_assert_eq!(hi, Some(v.len()));
            let mut pos = offset;
            for s in &v {
                prop_assert_eq!((s.block_no() << shift) + s.start() as u64, pos);
                prop_assert_eq!(s.req_offset(), pos - offset);
                prop_assert!(s.end() <= g.block_size() && !s.is_empty());
                pos += s.len() as u64;
            }
            prop_assert_eq!(pos, offset + len);
        }
    }
}
