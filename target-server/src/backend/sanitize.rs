//! The I/O of SANITIZE: one background thread per operation sanitizes the whole LUN while
//! the `scsi` crate answers every other command with NOT READY / SANITIZE IN PROGRESS.
//!
//! Cache coherence, in this order: every writer of the LUN is waited for and kept out (the
//! LUN's range locks held exclusively over the whole LUN), dirty cached blocks are written
//! back and flushes already running elsewhere are waited for (so no flusher can write old
//! data over the sanitized medium later), the medium is sanitized, made durable, and then
//! every cached block of the LUN is dropped (a fill that raced is told not to validate), so
//! no read returns pre-sanitize data from the cache.
//!
//! Methods: OVERWRITE writes the pattern block over every block in large aligned chunks, for
//! each pass (optionally throttled, `--sanitize-rate`); BLOCK ERASE and CRYPTOGRAPHIC ERASE
//! (thin LUNs only) deallocate the whole LUN: holes punched in a file, a zeroing discard on
//! a block device, and where neither works fallocate ZERO_RANGE or plain zero writes
//! (`BackingStore::deallocate`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cache::{AlignedBuf, BlockCache};
use iscsi_proto::CommandResult;
use scsi::sanitize::{Method, Sanitize};

use super::reply::{Answer, ReplyTo, completed};
use super::storage::flush_range;
use super::task_watch::{OnEnd, Watch};
use crate::registry::Lun;

/// Bytes per OVERWRITE write and per erase step (progress granularity).
const CHUNK: usize = 1 << 20;
/// Bytes per erase call (deallocate / zero range), so progress moves on large LUNs.
const ERASE_STEP: u64 = 1 << 30;

/// OVERWRITE throughput limit in bytes per second (0 = unlimited), daemon-wide.
static RATE_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Sets the OVERWRITE throughput limit (`--sanitize-rate`, MiB/s; 0 = unlimited), so a
/// sanitize does not starve the other LUNs on the same disks.
pub fn set_rate_limit_mib(mib_per_s: u64) {
    RATE_LIMIT.store(mib_per_s.saturating_mul(1 << 20), Ordering::Relaxed);
}

/// Starts `op` on `lun` in the background. With IMMED the GOOD status is answered now;
/// otherwise the status goes through `reply` when the operation ends (unless the task was
/// aborted meanwhile).
pub fn start(
    lun: &Arc<Lun>,
    op: Sanitize,
    cache: Option<Arc<BlockCache>>,
    reply: ReplyTo,
) -> Answer {
    let immed = op.immed;
    // without IMMED the task waits for the operation; task management may end it sooner
    // (the operation goes on): see super::task_watch. The watch is shared with the thread
    // so that a thread that cannot start gives the replier back.
    let (watch, later) = if immed {
        (None, None)
    } else {
        let (conn, itt) = (reply.conn(), reply.itt());
        let (r, later) = reply.defer();
        (
            Some(Watch::new(conn, itt, OnEnd::AnswerNow(r))),
            Some(later),
        )
    };
    let watch = Arc::new(std::sync::Mutex::new(watch));
    let thread_watch = Arc::clone(&watch);
    let job_lun = Arc::clone(lun);
    let spawned = std::thread::Builder::new()
        .name(format!("sanitize-{}", lun.number))
        .spawn(move || {
            let lun = job_lun;
            let started = Instant::now();
            tracing::info!(lun = lun.number, path = %lun.store.path().display(),
                method = method_name(&op.method), passes = op.method.passes(), immed,
                "SANITIZE started");
            let res = run(cache.as_ref(), &lun, &op.method);
            lun.scsi.sanitize_finished(res.is_ok());
            let result = match res {
                Ok(()) => {
                    tracing::info!(lun = lun.number, elapsed = ?started.elapsed(),
                        "SANITIZE completed");
                    CommandResult::good()
                }
                Err(e) => {
                    tracing::error!(lun = lun.number, path = %lun.store.path().display(),
                        "SANITIZE failed: {e}; the LUN is in sanitize failure mode");
                    completed(lun.scsi.check_condition(&scsi::sanitize::failed_sense()))
                }
            };
            if let Some(r) = take_watch(&thread_watch).and_then(Watch::take_replier) {
                r.send(result);
            }
        });
    match (spawned, later) {
        (Ok(_), Some(later)) => Answer::Later(later),
        (Ok(_), None) => Answer::Now(CommandResult::good()),
        (Err(e), later) => {
            tracing::error!(lun = lun.number, "cannot start the SANITIZE thread: {e}");
            lun.scsi.sanitize_finished(false);
            let failed = completed(
                lun.scsi
                    .check_condition(&scsi::Sense::internal_target_failure()),
            );
            match (take_watch(&watch).and_then(Watch::take_replier), later) {
                (Some(r), Some(later)) => {
                    r.send(failed);
                    Answer::Later(later)
                }
                _ => Answer::Now(failed),
            }
        }
    }
}

fn take_watch(w: &std::sync::Mutex<Option<Watch>>) -> Option<Watch> {
    w.lock().unwrap_or_else(|p| p.into_inner()).take()
}

fn method_name(m: &Method) -> &'static str {
    match m {
        Method::Overwrite { .. } => "overwrite",
        Method::BlockErase => "block erase",
        Method::CryptoErase => "cryptographic erase",
    }
}

/// The whole operation (see the module documentation for the order of steps).
fn run(cache: Option<&Arc<BlockCache>>, lun: &Lun, method: &Method) -> std::io::Result<()> {
    let size = lun.store.size();
    let _exclusive = lun.locks.compare_and_write(0, size);
    let flushed = match cache {
        Some(c) => flush_range(c, lun, 0, size),
        None => Ok(()),
    };
    let res = flushed.and_then(|()| match method {
        Method::Overwrite { .. } => overwrite(lun, method, size),
        Method::BlockErase | Method::CryptoErase => erase(lun, size),
    });
    let res = res.and_then(|()| lun.store.sync());
    // whatever happened, the medium may have changed: no cached block may survive
    if let Some(c) = cache {
        c.invalidate_lun(lun.cache_id);
    }
    res
}

/// Every block written with the method's block for each pass.
fn overwrite(lun: &Lun, method: &Method, size: u64) -> std::io::Result<()> {
    let bs = lun.store.block_size() as usize;
    let passes = method.passes();
    let total = size.saturating_mul(u64::from(passes));
    let chunk_len = (CHUNK as u64).min(size) as usize;
    let mut buf = AlignedBuf::new(chunk_len);
    let started = Instant::now();
    let mut done = 0u64;
    for pass in 0..passes {
        let block = method.block(bs, pass);
        for piece in buf.as_mut_slice().chunks_mut(bs) {
            piece.copy_from_slice(&block[..piece.len()]);
        }
        let mut at = 0u64;
        while at < size {
            let n = (size - at).min(chunk_len as u64) as usize;
            lun.store.write_at(&buf.as_slice()[..n], at, false)?;
            at += n as u64;
            done += n as u64;
            lun.scsi.sanitize_progress(done, total);
            throttle(started, done);
        }
    }
    Ok(())
}

/// Sleeps until `done` bytes since `started` are within the rate limit.
fn throttle(started: Instant, done: u64) {
    let rate = RATE_LIMIT.load(Ordering::Relaxed);
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(done as f64 / rate as f64);
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(wait);
    }
}

/// Every block deallocated (the erase methods are offered on thin LUNs only).
fn erase(lun: &Lun, size: u64) -> std::io::Result<()> {
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(ERASE_STEP);
        lun.store.deallocate(at, n)?;
        at += n;
        lun.scsi.sanitize_progress(at, size);
    }
    Ok(())
}
