//! EXTENDED COPY inside the target system, on an I/O worker: the `scsi` crate checked the
//! parameter list and handed over a [`CopyJob`]; here its CSCD descriptors are resolved to
//! exported LUNs (by the NAA designator VPD page 83h reports, across every target of the
//! daemon), and each block → block segment is copied in bounded chunks through the same
//! paths a READ and a WRITE take: the source read through the block cache (or around it,
//! after its dirty data), the destination written as a WRITE is — holding the LUN's write
//! range locks (`range_locks.rs`), kept dirty in the write-back cache when WCE=1, durable before
//! status when WCE=0. The outcome is recorded for RECEIVE COPY RESULTS by
//! `LogicalUnit::copy_finished`.
//!
//! Before each segment the copy manager checks, for the I_T nexus the command came from,
//! that its source may be read and its destination written (`LogicalUnit::copy_access`:
//! reservations, medium present, write protection). A running copy registers a
//! cancellation flag under its connection and task tag (`crate::backend::task_watch`); the event loop raises it when task
//! management ends the task (ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET,
//! TARGET RESET, PREEMPT AND ABORT) or the connection closes, and the copy stops before its
//! next chunk.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cache::BlockCache;
use scsi::copy_access::{CopyDenied, copy_ended_by_task_management};
use scsi::xcopy::{self, CopyJob, Cscd, Segment};
use scsi::{Nexus, Sense};

use super::StorageCtx;
use super::jobs::Extent;
use super::reply::{Answer, ReplyTo, completed};
use super::storage;
use crate::conn_id::ConnId;
use crate::registry::{Lun, LunSet};

/// Bytes moved per read + write: bounds the memory one copy holds (a multiple of every
/// supported block length).
const CHUNK: u64 = 1 << 20;

/// A running copy's registration with [`crate::backend::task_watch`]: the flag it checks between
/// chunks, raised when task management ends its task; unregistered when dropped.
struct Running {
    cancel: Arc<AtomicBool>,
    _watch: crate::backend::task_watch::Watch,
}

impl Running {
    fn register(conn: ConnId, itt: u32) -> Self {
        let cancel = Arc::new(AtomicBool::new(false));
        let watch = crate::backend::task_watch::Watch::new(
            conn,
            itt,
            crate::backend::task_watch::OnEnd::Stop(Arc::clone(&cancel)),
        );
        Running {
            cancel,
            _watch: watch,
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// A resolved copy target: the LUN and the cache its I/O goes through.
#[derive(Clone)]
struct CopyTarget {
    lun: Arc<Lun>,
    cache: Option<Arc<BlockCache>>,
}

/// Starts `job` (received by `lun`) on the connection's node's I/O pool; the result arrives
/// through `reply`.
pub fn start(
    job: Box<CopyJob>,
    lun: &Arc<Lun>,
    luns: &LunSet,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let targets: Vec<Option<CopyTarget>> = job
        .cscds
        .iter()
        .map(|c| {
            resolve(c, luns, ctx).map(|l| CopyTarget {
                cache: ctx.cache_for(&l).cloned(),
                lun: l,
            })
        })
        .collect();
    let lun = Arc::clone(lun);
    let node = ctx.node;
    let running = Running::register(reply.conn(), reply.itt());
    let (reply, later) = reply.defer();
    ctx.run(move || {
        let mut done = 0u16;
        let mut bytes = 0u64;
        let mut failure = None;
        let copy = Copy {
            cscds: &job.cscds,
            targets: &targets,
            issuer: &job.issuer,
            running: &running,
            node,
        };
        for seg in &job.segments {
            match copy.segment(seg) {
                Ok(n) => {
                    done += 1;
                    bytes += n;
                }
                Err(s) => {
                    failure = Some(s);
                    break;
                }
            }
        }
        if let Some(s) = &failure {
            tracing::info!(
                lun = lun.number,
                list_id = job.list_id,
                segment = done,
                "EXTENDED COPY ended: {:02x}/{:02x}/{:02x}",
                s.key,
                s.asc,
                s.ascq
            );
        }
        drop(running);
        reply.send(completed(
            lun.scsi.copy_finished(&job, done, bytes, failure),
        ));
    });
    Answer::Later(later)
}

/// The exported LUN a CSCD descriptor names: any target of the daemon (the NAA designator
/// is unique in the target system), or the command's own target when the registry is not
/// at hand.
fn resolve(c: &Cscd, luns: &LunSet, ctx: &StorageCtx<'_>) -> Option<Arc<Lun>> {
    let names = |l: &&Arc<Lun>| c.designator.names_naa_id(l.scsi.params().naa_id);
    if let Some(l) = luns.map.values().find(names) {
        return Some(Arc::clone(l));
    }
    ctx.registry?
        .targets()
        .iter()
        .find_map(|t| t.lun_set().map.values().find(names).cloned())
}

/// A resolved copy target whose block length is the one the CSCD descriptor states.
fn target_of<'a>(
    cscds: &[Cscd],
    targets: &'a [Option<CopyTarget>],
    index: u16,
) -> Result<&'a CopyTarget, Sense> {
    let i = usize::from(index);
    let t = targets
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(xcopy::copy_target_not_reachable)?;
    let stated = cscds.get(i).map_or(0, |c| c.block_len);
    if stated != t.lun.store.block_size() {
        return Err(xcopy::incorrect_copy_target_type());
    }
    Ok(t)
}

/// `lba .. lba + bytes / block length` lies within the LUN's capacity.
fn within(lun: &Lun, lba: u64, bytes: u64) -> bool {
    let bs = u64::from(lun.store.block_size().max(1));
    lba.checked_add(bytes / bs)
        .is_some_and(|end| end <= lun.scsi.num_blocks())
}

/// One copy operation as it runs: its resolved targets, the nexus it acts for, its
/// cancellation flag.
struct Copy<'a> {
    cscds: &'a [Cscd],
    targets: &'a [Option<CopyTarget>],
    issuer: &'a Nexus,
    running: &'a Running,
    node: usize,
}

impl Copy<'_> {
    /// One block → block segment: checks, then the chunks. Returns the bytes written.
    fn segment(&self, seg: &Segment) -> Result<u64, Sense> {
        let src = target_of(self.cscds, self.targets, seg.src)?;
        let dst = target_of(self.cscds, self.targets, seg.dst)?;
        let (sbs, dbs) = (src.lun.store.block_size(), dst.lun.store.block_size());
        let len = seg.bytes(sbs, dbs)?;
        if len == 0 {
            return Ok(0);
        }
        // the READs and WRITEs are this nexus': its reservations, the media, protection
        src.lun
            .scsi
            .copy_access(self.issuer, false)
            .map_err(CopyDenied::copy_sense)?;
        dst.lun
            .scsi
            .copy_access(self.issuer, true)
            .map_err(CopyDenied::copy_sense)?;
        copy_extent(src, seg.src_lba, dst, seg.dst_lba, len, self)
    }
}

/// Copies `len` bytes from block `src_lba` of `src` to block `dst_lba` of `dst` in chunks,
/// stopping between chunks when the task is ended.
fn copy_extent(
    src: &CopyTarget,
    src_lba: u64,
    dst: &CopyTarget,
    dst_lba: u64,
    len: u64,
    copy: &Copy<'_>,
) -> Result<u64, Sense> {
    let (sbs, dbs) = (src.lun.store.block_size(), dst.lun.store.block_size());
    if !within(&src.lun, src_lba, len) || !within(&dst.lun, dst_lba, len) {
        return Err(xcopy::copy_range_beyond_capacity());
    }
    let src_off = src_lba * u64::from(sbs);
    let dst_off = dst_lba * u64::from(dbs);
    // within one LUN, a destination overlapping the source's tail is copied back to front
    let backwards = Arc::ptr_eq(&src.lun, &dst.lun) && dst_off > src_off && dst_off < src_off + len;
    let chunks = len.div_ceil(CHUNK);
    for i in 0..chunks {
        if copy.running.cancelled() {
            return Err(copy_ended_by_task_management());
        }
        let k = if backwards { chunks - 1 - i } else { i };
        let at = k * CHUNK;
        let n = CHUNK.min(len - at);
        copy_chunk(src, src_off + at, dst, dst_off + at, n, copy.node)?;
    }
    Ok(len)
}

/// Read `n` bytes at `src_off` as a READ does, write them at `dst_off` as a WRITE does.
fn copy_chunk(
    src: &CopyTarget,
    src_off: u64,
    dst: &CopyTarget,
    dst_off: u64,
    n: u64,
    node: usize,
) -> Result<(), Sense> {
    let src_lba = src_off / u64::from(src.lun.store.block_size());
    let read = match &src.cache {
        Some(c) => storage::gather_read(c, &src.lun, src_lba, src_off, n, node),
        None => storage::direct_read(&src.lun, src_lba, src_off, n),
    };
    let data = match (&read.data, read.status) {
        (Some(p), 0) => p.contiguous(),
        _ => return Err(xcopy::third_party_device_failure()),
    };
    if data.len() as u64 != n {
        return Err(xcopy::third_party_device_failure());
    }
    let at = Extent {
        lun: Arc::clone(&dst.lun),
        lba: dst_off / u64::from(dst.lun.store.block_size()),
        offset: dst_off,
        len: n,
    };
    let durable = dst.lun.scsi.durable_writes(false);
    let written = storage::write_job(dst.cache.as_ref(), &at, durable, &data, 0);
    if written.status != scsi::status::GOOD {
        return Err(xcopy::third_party_device_failure());
    }
    Ok(())
}
