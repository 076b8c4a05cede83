//! What every iSER connection on one RDMA device shares: the device context, one protection
//! domain, and the block cache's node arenas registered once in it (local read only: the
//! device reads them for RDMA WRITEs, never writes them), so a READ's data goes to the
//! initiator straight from the pinned cache blocks, without a copy.
//!
//! Registration pins every page of an arena (the arena stops growing lazily: all of it
//! becomes resident) and needs `RLIMIT_MEMLOCK` / `CAP_IPC_LOCK` to cover it. When it
//! fails, iSER still works: READ data is then copied into the connection's registered
//! staging memory first (logged once per device).

use std::sync::{Arc, Mutex};

use cache::{BlockCache, NodeArena};
use rdma::{Access, CmId, Context, MemoryRegion, ProtectionDomain};

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
    arenas: Vec<ArenaRegion>,
    pd: Arc<ProtectionDomain>,
    ctx: Context,
    name: String,
}

static DEVICES: Mutex<Vec<Arc<DeviceRes>>> = Mutex::new(Vec::new());

impl DeviceRes {
    /// The shared state of `id`'s device, set up (and the arenas registered) by the first
    /// connection on it.
    pub fn of_id(id: &CmId, cache: Option<&Arc<BlockCache>>) -> Result<Arc<DeviceRes>, String> {
        let ctx = Context::of_id(id).map_err(|e| format!("device context: {e}"))?;
        let name = ctx.device_name();
        let mut all = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = all.iter().find(|d| d.name == name) {
            return Ok(Arc::clone(d));
        }
        let pd = ProtectionDomain::new(&ctx).map_err(|e| format!("protection domain: {e}"))?;
        let mut arenas = Vec::new();
        if let Some(c) = cache {
            for a in c.arenas() {
                let (base, len) = (a.base(), a.len());
                // SAFETY: the arena's mapping stays in place, unmoved, while the Arc kept
                // beside the region lives, and the region is dropped first (field order).
                // It is registered for local reads only: the device never writes it, so
                // the cache's own references to block bytes alias no device write.
                let r = unsafe { MemoryRegion::register_raw(&pd, base, len, Access::LOCAL_READ) };
                match r {
                    Ok(mr) => arenas.push(ArenaRegion {
                        mr,
                        base: base.as_ptr() as usize,
                        len,
                        _arena: Arc::clone(a),
                    }),
                    Err(e) => {
                        tracing::warn!(device = %name, node = a.node(), bytes = len,
                            "cannot register the cache arena for RDMA ({e}; RLIMIT_MEMLOCK or CAP_IPC_LOCK?): READ data is copied before it is sent");
                        arenas.clear();
                        break;
                    }
                }
            }
            if !arenas.is_empty() {
                tracing::info!(device = %name, arenas = arenas.len(),
                    bytes = arenas.iter().map(|a| a.len).sum::<usize>(),
                    "cache arenas registered for RDMA: READ data goes out from cache blocks");
            }
        }
        let d = Arc::new(DeviceRes {
            arenas,
            pd,
            ctx,
            name,
        });
        all.push(Arc::clone(&d));
        Ok(d)
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

    /// The local key covering `len` bytes at `addr`, when they lie in a registered arena.
    pub fn lkey_of(&self, addr: usize, len: usize) -> Option<u32> {
        let end = addr.checked_add(len)?;
        self.arenas
            .iter()
            .find(|a| addr >= a.base && end <= a.base + a.len)
            .map(|a| a.mr.lkey())
    }
}
