//! What every iSER connection on one RDMA device shares: the device context, one protection
//! domain, and the block cache's node arenas registered once in it (no remote access; the
//! device only reads them, as sources of RDMA WRITEs), so a READ's data goes to the
//! initiator straight from the pinned cache blocks, without a copy.
//!
//! Registration pins every page of an arena (the arena stops growing lazily: all of it
//! becomes resident) and needs `RLIMIT_MEMLOCK` / `CAP_IPC_LOCK` to cover it. It runs on a
//! thread of its own, started by the first connection on the device (faulting in a large
//! cache takes seconds, which no event thread may spend); until it is done, and when it
//! fails, iSER still works: READ data is then copied into the connection's registered
//! staging memory first (a failure is logged once per device).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cache::{BlockCache, NodeArena};
use rdma::{Access, CmId, Context, MemoryRegion, ProtectionDomain};

use super::error::IserError;
use crate::transport::iser_stats::{self, Kind};

/// One registered arena (the region is deregistered before the arena can go).
struct ArenaRegion {
    mr: MemoryRegion,
    base: usize,
    len: usize,
    _arena: Arc<NodeArena>,
}

/// A device's shared verbs objects.
pub struct DeviceRes {
    // drop order: regions, then the protection domain, then the context
    /// Set once by the registration thread (empty when registration failed).
    arenas: OnceLock<Vec<ArenaRegion>>,
    pd: Arc<ProtectionDomain>,
    ctx: Context,
    name: String,
}

static DEVICES: Mutex<Vec<Arc<DeviceRes>>> = Mutex::new(Vec::new());

/// A removal watcher runs ([`watch_removal`]).
static WATCHING: AtomicBool = AtomicBool::new(false);
/// How long a removal watcher keeps making librdmacm re-read the device list.
const WATCH_FOR: Duration = Duration::from_secs(20);

/// After an RDMA device removal event: for [`WATCH_FOR`], a thread makes librdmacm re-read
/// the device list every 250 ms ([`rdma::resync_devices`]), so that it closes the removed
/// device's context once numatgtd's last object of it is gone and the device has left the
/// list — the removal waits for that close. One watcher at a time; never on an event
/// thread's path (a few system calls per round, off the I/O path).
pub fn watch_removal() {
    if WATCHING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("rdma-removal".into())
        .spawn(|| {
            let t0 = Instant::now();
            while t0.elapsed() < WATCH_FOR {
                std::thread::sleep(Duration::from_millis(250));
                rdma::resync_devices();
            }
            WATCHING.store(false, Ordering::Release);
        });
    if let Err(e) = spawned {
        WATCHING.store(false, Ordering::Release);
        tracing::warn!("cannot start the RDMA device removal watcher: {e}");
    }
}

impl DeviceRes {
    /// The shared state of `id`'s device, set up (and the arenas registered) by the first
    /// connection on it.
    pub fn of_id(id: &CmId, cache: Option<&Arc<BlockCache>>) -> Result<Arc<DeviceRes>, IserError> {
        let mut all = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
        // by context, not by name: librdmacm opens a device anew when its device list
        // changes (a device added or removed), and a protection domain of the old context
        // cannot hold queue pairs of the new one
        if let Some(d) = all.iter().find(|d| d.ctx.is_of(id)) {
            return Ok(Arc::clone(d));
        }
        let ctx = Context::of_id(id).map_err(IserError::rdma("device context"))?;
        let name = ctx.device_name();
        // an older context of the same device is no longer handed out; its objects go with
        // the last connection holding them
        all.retain(|d| {
            let stale = d.name == name;
            if stale {
                tracing::info!(device = %name, "RDMA device context opened anew by librdmacm: new connections get new verbs objects");
            }
            !stale
        });
        let pd = ProtectionDomain::new(&ctx).map_err(IserError::rdma("protection domain"))?;
        let d = Arc::new(DeviceRes {
            arenas: OnceLock::new(),
            pd,
            ctx,
            name,
        });
        all.push(Arc::clone(&d));
        match cache {
            Some(c) => {
                let (dev, c) = (Arc::clone(&d), Arc::clone(c));
                let spawned = std::thread::Builder::new()
                    .name("rdma-register".into())
                    .spawn(move || dev.register_arenas(&c));
                if let Err(e) = spawned {
                    tracing::warn!(device = %d.name, "cannot start the arena registration: {e}");
                    let _ = d.arenas.set(Vec::new());
                }
            }
            None => {
                let _ = d.arenas.set(Vec::new());
            }
        }
        Ok(d)
    }

    /// Registers every arena of `cache` (read-only for the device); all or none.
    fn register_arenas(&self, cache: &BlockCache) {
        let t0 = std::time::Instant::now();
        let mut arenas = Vec::new();
        for a in cache.arenas() {
            let (base, len) = (a.base(), a.len());
            // SAFETY: the arena's mapping stays in place, unmoved, while the Arc kept beside
            // the region lives, and the region is dropped first (field order). The device
            // never writes it: no receive or RDMA READ is ever posted with this region's
            // key and no remote access is granted, so the cache's own references to block
            // bytes alias no device write. LOCAL_WRITE is asked only so that the pin faults
            // every page in writable: a read-only long-term pin of an untouched anonymous
            // page may pin the shared zero page on older kernels, and later cache writes
            // would then never reach what the device reads.
            let r = unsafe { MemoryRegion::register_raw(&self.pd, base, len, Access::LOCAL_WRITE) };
            match r {
                Ok(mr) => arenas.push(ArenaRegion {
                    mr,
                    base: base.as_ptr() as usize,
                    len,
                    _arena: Arc::clone(a),
                }),
                Err(e) => {
                    tracing::warn!(device = %self.name, node = a.node(), bytes = len,
                        "cannot register the cache arena for RDMA ({e}; RLIMIT_MEMLOCK or CAP_IPC_LOCK?): READ data is copied before it is sent");
                    arenas.clear();
                    break;
                }
            }
        }
        iser_stats::add(Kind::Cache, arenas.iter().map(|a| a.len as i64).sum());
        if !arenas.is_empty() {
            tracing::info!(device = %self.name, arenas = arenas.len(),
                bytes = arenas.iter().map(|a| a.len).sum::<usize>(),
                ms = t0.elapsed().as_millis() as u64,
                "cache arenas registered for RDMA: READ data goes out from cache blocks");
        }
        let _ = self.arenas.set(arenas);
    }

    /// The device is being removed: new connections no longer get this device's objects
    /// (a device of the same name that comes back gets new ones); they are released when
    /// the last connection holding them is dropped, which the removal waits for.
    pub fn forget(self: &Arc<Self>) {
        let mut all = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|d| !Arc::ptr_eq(d, self));
        drop(all);
        watch_removal();
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True once the cache arenas are registered: READ data can go out from cache blocks.
    pub fn sends_from_cache(&self) -> bool {
        self.arenas.get().is_some_and(|a| !a.is_empty())
    }

    /// The local key covering `len` bytes at `addr`, when they lie in a registered arena.
    pub fn lkey_of(&self, addr: usize, len: usize) -> Option<u32> {
        let end = addr.checked_add(len)?;
        self.arenas
            .get()?
            .iter()
            .find(|a| addr >= a.base && end <= a.base + a.len)
            .map(|a| a.mr.lkey())
    }
}

impl Drop for DeviceRes {
    fn drop(&mut self) {
        if let Some(arenas) = self.arenas.get() {
            iser_stats::add(
                Kind::Cache,
                -arenas.iter().map(|a| a.len as i64).sum::<i64>(),
            );
        }
    }
}
