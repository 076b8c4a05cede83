//! Starting and stopping the daemon: topology, LUNs, per-node I/O pools, event threads bound
//! to their node's CPUs, listeners; and the clean stop (connections closed, LUNs synced).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cache::create_sparse;
use cache::{
    BackingOptions, BackingStore, BindPolicy, BlockCache, CacheConfig, Router, RouterPolicy,
    Topology,
};
use iscsi_proto::ConnConfig;

use crate::backend::flusher::Flushers;
use crate::backend::workers::NodeWorkers;
use crate::event_loop::{EventThread, EventThreadSetup, Msg, Shared};
use crate::registry::{Accounts, Acl, AuthBinding, Lun, LunMeta, Portal, Registry, Target};
use crate::transport::Listener;

/// Everything needed to start, already validated.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The validated configuration (file, demo or empty, with the command line applied).
    pub config: config::Config,
    /// Where state that must survive a restart is kept (persistent reservations).
    pub state_dir: std::path::PathBuf,
    /// Virtual NUMA nodes to split the CPUs into; `None` = the host's real nodes.
    pub numa_nodes: Option<usize>,
    /// Event threads in total; `None` = one per CPU.
    pub event_threads: Option<usize>,
    /// Backing-store I/O threads per node (at least 1).
    pub io_threads: usize,
    /// How write-back reaches the backing stores.
    pub io_engine: config::IoEngine,
    /// How long an event thread keeps polling after its last work before it sleeps.
    pub busy_poll: std::time::Duration,
    /// Listening sockets a handover passed on (`crate::handover`): used instead of
    /// binding the same addresses again.
    pub inherited: Inherited,
}

/// Listening sockets received from the numatgtd that handed over to this one.
#[derive(Debug, Default)]
pub struct Inherited {
    /// TCP portals; each serves the configured portal of its address.
    pub tcp: Vec<std::net::TcpListener>,
    /// TCP portals the previous process added at run time: they stay such (the portal
    /// acceptor takes them, [`Daemon::mgmt_ctx`]) and the configuration's portal of the same
    /// address is not bound.
    pub added_tcp: Vec<std::net::TcpListener>,
    /// The metrics server's.
    pub metrics: Option<std::net::TcpListener>,
    /// TCP connections of normal sessions, with their protocol state: they go on here.
    pub moved: Vec<(iscsi_proto::MovedConn, std::os::fd::OwnedFd)>,
    /// Logical units' state (`scsi::LogicalUnit::handover_state`): target name, LUN, bytes.
    pub lu_states: Vec<(String, u64, Vec<u8>)>,
    /// The previous process's cached blocks, loaded again once serving.
    pub hot: Option<crate::backend::warm::HotList>,
    /// The previous process's cache memory, adopted when the cache's layout is the same.
    pub cache_memory: Option<KeptMemory>,
    /// The ownership records of the RBD LUNs the previous process owned
    /// (`alua::owned_before_upgrade`).
    pub alua_owned: Vec<String>,
}

/// A cache's memory files (one per node, in node order) and their shape, passed from one
/// executable to the next.
#[derive(Debug)]
pub struct KeptMemory {
    /// The shape the files were made for.
    pub layout: cache::MemoryLayout,
    /// One memory file per node, in node order.
    pub files: Vec<std::os::fd::OwnedFd>,
}

impl KeptMemory {
    /// New descriptors of the same files (`None` when one cannot be duplicated).
    pub fn try_clone(&self) -> Option<KeptMemory> {
        Some(KeptMemory {
            layout: self.layout,
            files: self
                .files
                .iter()
                .map(|f| f.try_clone().ok())
                .collect::<Option<Vec<_>>>()?,
        })
    }
}

/// What a stop that keeps the cache for the next executable leaves
/// ([`Daemon::stop_keeping`]).
pub struct KeptCache {
    /// The cached blocks, with their places in `memory` when it goes along.
    pub hot: crate::backend::warm::HotList,
    /// The cache's memory files, when they go along.
    pub memory: Option<KeptMemory>,
}

impl Clone for Inherited {
    /// New descriptors of the same sockets (one that cannot be duplicated is left out:
    /// its address is bound again).
    fn clone(&self) -> Inherited {
        Inherited {
            tcp: self.tcp.iter().filter_map(|l| l.try_clone().ok()).collect(),
            added_tcp: self
                .added_tcp
                .iter()
                .filter_map(|l| l.try_clone().ok())
                .collect(),
            metrics: self.metrics.as_ref().and_then(|l| l.try_clone().ok()),
            moved: self
                .moved
                .iter()
                .filter_map(|(s, f)| Some((s.clone(), f.try_clone().ok()?)))
                .collect(),
            lu_states: self.lu_states.clone(),
            hot: self.hot.clone(),
            cache_memory: self.cache_memory.as_ref().and_then(KeptMemory::try_clone),
            alua_owned: self.alua_owned.clone(),
        }
    }
}

/// What [`Daemon::quiesce`] saw.
pub struct Quiesced {
    /// Connections open when it began.
    pub connections: usize,
    /// TCP connections moved out for the next numatgtd, with their state.
    pub moved: Vec<crate::event_loop::MovedOut>,
    /// Connections still open when it gave up waiting (closed by the stop that follows).
    pub left: usize,
    /// How long it took.
    pub took: Duration,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A LUN's backing store could not be created or opened.
    #[error("LUN {lun} of {target}: {source}")]
    Lun {
        /// The target's iSCSI name.
        target: String,
        /// The LUN number.
        lun: u64,
        /// What went wrong.
        source: cache::BackingError,
    },
    /// A LUN's ALUA port groups could not be set.
    #[error("LUN {lun} of {target}: ALUA: {reason}")]
    Alua {
        /// The target's iSCSI name.
        target: String,
        /// The LUN number.
        lun: u64,
        /// What went wrong.
        reason: String,
    },
    /// A portal could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The portal's address.
        addr: SocketAddr,
        /// What went wrong.
        source: std::io::Error,
    },
    /// An iSER portal could not be bound (explicitly configured ones only).
    #[error("cannot listen for iSER on {addr}: {reason}")]
    IserListen {
        /// The portal's address.
        addr: SocketAddr,
        /// What went wrong.
        reason: String,
    },
    /// A thread could not be started.
    #[error("cannot start threads: {0}")]
    Threads(std::io::Error),
    /// The block cache could not be set up.
    #[error("cannot set up the block cache: {0}")]
    Cache(cache::CacheError),
    /// The metrics server could not listen on the address configured for it.
    #[error("{0}")]
    Metrics(crate::MetricsError),
}

/// The iSER portals asked for (`iser_portals`, `--iser portal=`): `None` is tgtd's
/// default (all addresses, port 3260, when the host has an RDMA device; nothing
/// otherwise), `Some` exactly the list.
fn iser_portal_request(rc: &RuntimeConfig) -> Option<Vec<SocketAddr>> {
    rc.config
        .iser_portals
        .as_ref()
        .map(|l| l.iter().map(|p| p.addr).collect())
}

/// Binds the iSER portals (see [`iser_portal_request`]). The default portal is skipped
/// with a log line when there is no RDMA device (or no iSER in this build) or it cannot be
/// bound; a configured one that cannot be bound stops the start.
fn bind_iser_portals(req: Option<Vec<SocketAddr>>) -> Result<Vec<Box<dyn Listener>>, StartError> {
    let mut out = Vec::new();
    match req {
        None => {
            if crate::rdma_probe::iser_state() != "ready" {
                return Ok(out);
            }
            let addr = SocketAddr::from(([0, 0, 0, 0], 3260));
            match crate::transport::bind_iser(addr) {
                Ok(l) => out.push(l),
                Err(e) => tracing::warn!(
                    "iSER: cannot listen on the default {addr}: {e}; iSCSI over TCP only"
                ),
            }
        }
        Some(list) => {
            for addr in list {
                let l = crate::transport::bind_iser(addr).map_err(|e| StartError::IserListen {
                    addr,
                    reason: e.to_string(),
                })?;
                out.push(l);
            }
        }
    }
    Ok(out)
}

/// A running daemon.
pub struct Daemon {
    shared: Arc<Shared>,
    /// The configuration it started with.
    base: Arc<config::Config>,
    flushers: Option<Flushers>,
    threads: Vec<JoinHandle<()>>,
    listening: Vec<SocketAddr>,
    /// Second descriptors of the startup TCP portals' listening sockets (a handover
    /// passes them on).
    tcp_listeners: Vec<std::net::TcpListener>,
    metrics: Option<crate::metrics::MetricsServer>,
    /// `cache.warm_restart`: where a clean stop lists the cached blocks for the next start.
    warm_file: Option<std::path::PathBuf>,
    /// Portals the previous numatgtd added at run time, for the portal acceptor
    /// ([`Daemon::mgmt_ctx`]).
    added_portals: Vec<std::net::TcpListener>,
}

/// The file `cache.warm_restart` keeps the cached blocks' list in, in the state directory.
const WARM_FILE: &str = "cache-hot-blocks";

/// The list a clean stop saved in `path` (`cache.warm_restart`), taken: the file is removed
/// so that it is used once.
fn take_saved_hot_list(path: &std::path::Path) -> Option<crate::backend::warm::HotList> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), "cache warm-up: cannot read the saved block list: {e}");
            return None;
        }
    };
    if let Err(e) = std::fs::remove_file(path) {
        tracing::warn!(file = %path.display(), "cache warm-up: cannot remove the saved block list: {e}");
    }
    match crate::backend::warm::HotList::from_text(&text) {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(file = %path.display(), "cache warm-up: the saved block list is unreadable, the cache starts cold: {e}");
            None
        }
    }
}

/// Saves `list` in `path` atomically (a temporary file renamed over it).
fn save_hot_list(path: &std::path::Path, list: &crate::backend::warm::HotList) {
    let tmp = path.with_extension("tmp");
    let r = std::fs::write(&tmp, list.to_text()).and_then(|()| std::fs::rename(&tmp, path));
    match r {
        Ok(()) => tracing::info!(
            blocks = list.blocks(),
            file = %path.display(),
            "cache: block list saved for a warm restart"
        ),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            tracing::warn!(file = %path.display(), "cache: cannot save the block list for a warm restart: {e}");
        }
    }
}

/// Stable 64-bit identity for a LUN (FNV-1a of target name and LUN number).
fn lun_identity(iqn: &str, lun: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in iqn.bytes().chain(lun.to_be_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Opens every configured target. `kept_ids`: cache identities the previous process gave
/// LUNs (target name, LUN, identity) whose cached blocks are in the memory it passed on;
/// those LUNs get them again, the others the lowest free ones.
fn open_targets(
    cfg: &config::Config,
    state_dir: &std::path::Path,
    kept_ids: &[(String, u64, u32)],
) -> Result<Vec<Arc<Target>>, StartError> {
    let mut out = Vec::new();
    let mut used: Vec<u32> = cfg.targets.iter().filter_map(|t| t.tid).collect();
    let mut next_cache_id = 0u32;
    let taken: Vec<u32> = kept_ids.iter().map(|(_, _, id)| *id).collect();
    for t in &cfg.targets {
        // targets without an explicit tid get the lowest free one
        let tid = t.tid.unwrap_or_else(|| {
            let free = (1..).find(|n| !used.contains(n)).unwrap_or(u32::MAX);
            used.push(free);
            free
        });
        let mut cache_ids = |lun: u64| {
            if let Some((_, _, id)) = kept_ids
                .iter()
                .find(|(iqn, l, _)| *l == lun && iqn.eq_ignore_ascii_case(&t.iqn))
            {
                return *id;
            }
            while taken.contains(&next_cache_id) {
                next_cache_id += 1;
            }
            let id = next_cache_id;
            next_cache_id += 1;
            id
        };
        out.push(Arc::new(open_target(
            cfg,
            t,
            tid,
            &mut cache_ids,
            state_dir,
            false,
        )?));
    }
    Ok(out)
}

/// Opens one configured target's LUNs (creating sparse files asked for) and builds it as
/// target `tid`; `cache_id` hands out block-cache identities. Used at start and by reload.
pub(crate) fn open_target(
    cfg: &config::Config,
    t: &config::TargetConfig,
    tid: u32,
    cache_id: &mut dyn FnMut(u64) -> u32,
    state_dir: &std::path::Path,
    defer_media: bool,
) -> Result<Target, StartError> {
    let mut luns = BTreeMap::new();
    for l in &t.luns {
        let alua = t.alua.clone().unwrap_or_default();
        let home = LunHome {
            iqn: &t.iqn,
            tid,
            alua: &alua,
            defer_media,
        };
        let lun = open_lun(&cfg.cache, &home, l, cache_id(l.lun), state_dir, None)?;
        let qos = l.effective_qos(t);
        if !qos.is_unlimited() {
            lun.qos.set(&qos, crate::io_stats::now_ns());
            tracing::info!(target = %t.iqn, lun = l.lun, qos = %crate::mgmt::show::qos_text(&qos),
                "QoS limits set");
        }
        luns.insert(l.lun, Arc::new(lun));
    }
    let target = Target::new(
        tid,
        t.iqn.clone(),
        t.alias.clone(),
        luns,
        conn_config(&t.effective_iscsi(&cfg.iscsi)),
        Acl::from_config(t),
    )
    .with_driver(t.driver)
    .with_alua(t.alua.clone().unwrap_or_default());
    target.set_max_sessions(t.max_sessions);
    {
        let mut m = target.mgmt();
        m.state = t.state;
        m.auth = AuthBinding {
            incoming: t.incoming_users.clone(),
            outgoing: t.outgoing_user.clone(),
        };
    }
    Ok(target)
}

/// The target a LUN is opened for: its name, tgtadm id and ALUA settings.
pub(crate) struct LunHome<'a> {
    pub iqn: &'a str,
    pub tid: u32,
    pub alua: &'a config::AluaConfig,
    /// A reload opens the target while its old version still runs: a tape drive's tape is
    /// checked but loaded only once the old drive let go of it
    /// ([`crate::backend::tape::load_deferred`]).
    pub defer_media: bool,
}

/// Opens one LUN of target `iqn` (tid `tid`), however it was asked for: the YAML file, an
/// imported targets.conf, a reload, or tgtadm (`shown_flags`: the `--bsoflags` text tgtadm
/// shows back as given; `None` shows the flags the store really runs with). The cache mode
/// is the LUN's own or the configured default; tgt's `bsoflags` keep their meaning: `direct`
/// opens the backing store with O_DIRECT whatever the mode (under the NUMA cache it always
/// is), `sync` makes every write durable before it completes (write-through). Persistent
/// reservations saved with APTPL are restored.
pub(crate) fn open_lun(
    cache: &config::CacheSettings,
    home: &LunHome<'_>,
    l: &config::LunConfig,
    cache_id: u32,
    state_dir: &std::path::Path,
    shown_flags: Option<&str>,
) -> Result<Lun, StartError> {
    let LunHome { iqn, tid, alua, .. } = *home;
    let lun_err = |source| StartError::Lun {
        target: iqn.to_string(),
        lun: l.lun,
        source,
    };
    create_if_asked(l).map_err(lun_err)?;
    let mode = l.cache_mode(cache);
    let store = open_store(iqn, l, mode, !alua.peers.is_empty()).map_err(lun_err)?;
    let id = lun_identity(iqn, l.lun);
    let sync_writes = l.bsoflags.sync;
    let lu = logical_unit(home, l, id, store.num_blocks(), state_dir);
    let serial = device_thread(&lu, l, home.defer_media).map_err(lun_err)?;
    let passthrough = passthrough_device(iqn, l).map_err(lun_err)?;
    let mut meta = lun_meta(tid, l, id);
    if let Some(flags) = shown_flags {
        meta.bsoflags = flags.to_string();
    }
    tracing::info!(target = %iqn, lun = l.lun, path = %l.path.display(),
        bstype = l.bs_type.as_str(), blocks = store.num_blocks(), block_size = l.block_size, direct = store.is_direct(),
        cache = mode.as_str(), write_cache = l.write_cache && !sync_writes, sync = sync_writes,
        "LUN ready");
    let owner = alua.owner_of(l.alua_owner);
    meta.alua_owner = owner;
    let rbd_ownership = crate::alua::rbd_ownership_for(alua, &store);
    let shared_pr = crate::pr_shared::for_lun(alua, &store);
    if let (Some(sp), Some(image)) = (&shared_pr, store.rbd_image()) {
        crate::backend::pr_cluster::init(&lu, l.lun, image, sp).map_err(|e| StartError::Alua {
            target: iqn.to_string(),
            lun: l.lun,
            reason: format!("shared persistent reservations: {e}"),
        })?;
    }
    let lun = Lun {
        number: l.lun,
        scsi: lu,
        rbd_ownership,
        shared_pr,
        store: Arc::new(store),
        cache_id,
        cache_mode: mode,
        cache_in_use: crate::alua::shared::CacheInUse::off(),
        read_ahead: cache.read_ahead,
        last_read_end: std::sync::atomic::AtomicU64::new(u64::MAX),
        locks: Default::default(),
        meta: std::sync::Mutex::new(meta),
        stats: Default::default(),
        qos: Default::default(),
        serial,
        passthrough,
    };
    crate::alua::init(&lun, alua, owner).map_err(|e| StartError::Alua {
        target: iqn.to_string(),
        lun: l.lun,
        reason: e.to_string(),
    })?;
    Ok(lun)
}

/// A tape drive's tape (the image at the LUN's path, unless the LUN is offline: an empty
/// drive), a changer's elements (its configuration, then the state it saved in its state
/// file), and the thread that runs their commands; nothing for other device types.
fn device_thread(
    lu: &scsi::LogicalUnit,
    l: &config::LunConfig,
    defer_media: bool,
) -> Result<Option<crate::serial_work::SerialWork>, cache::BackingError> {
    let bad = |e: String| cache::BackingError::Io {
        path: l.path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    };
    let name = match l.device_type {
        config::DeviceType::Tape => "tape",
        config::DeviceType::Changer => "changer",
        _ => return Ok(None),
    };
    if l.device_type == config::DeviceType::Changer {
        if let Some(saved) = crate::backend::changer::saved_state(&l.path) {
            tracing::info!(lun = l.lun, path = %l.path.display(), "changer state restored");
            lu.changer_restore(saved);
        }
        for params in &l.changer {
            let pairs: Vec<(&str, &str)> = params
                .split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())))
                .collect();
            lu.changer_configure(&pairs)
                .map_err(|e| bad(format!("changer {params:?}: {e}")))?;
        }
    } else if l.online && defer_media {
        crate::backend::tape::check(&l.path).map_err(bad)?;
    } else if l.online {
        let tape = crate::backend::tape::FileTape::open(&l.path, l.readonly)
            .map_err(|e| bad(e.to_string()))?;
        lu.tape_insert(Box::new(tape))
            .map_err(|e| bad(e.to_string()))?;
        let st = lu.tape_status();
        tracing::info!(lun = l.lun, path = %l.path.display(), barcode = %st.barcode,
            "tape loaded");
    }
    crate::serial_work::SerialWork::start(format!("{name}-{}", l.lun))
        .map(Some)
        .map_err(|e| bad(format!("cannot start the drive's thread: {e}")))
}

/// A passthrough LUN's local SCSI device, open with its thread(s); nothing for other
/// device types.
fn passthrough_device(
    iqn: &str,
    l: &config::LunConfig,
) -> Result<Option<std::sync::Arc<crate::sgio::PtDevice>>, cache::BackingError> {
    let kind = match l.bs_type {
        config::BsType::Sg => crate::sgio::Kind::Sg,
        config::BsType::Bsg => crate::sgio::Kind::Bsg,
        _ => return Ok(None),
    };
    let dev = crate::sgio::PtDevice::open(&l.path, kind, &l.lun.to_string()).map_err(|e| {
        cache::BackingError::Io {
            path: l.path.clone(),
            source: e,
        }
    })?;
    let id = dev.identity();
    tracing::info!(target = %iqn, lun = l.lun, path = %l.path.display(), bstype = kind.as_str(),
        pdt = id.pdt, vendor = %id.vendor, product = %id.product, revision = %id.revision,
        "passthrough device open");
    Ok(Some(std::sync::Arc::new(dev)))
}

/// Creates the sparse backing file a LUN's `size:` asks for, when it does not exist yet.
fn create_if_asked(l: &config::LunConfig) -> Result<(), cache::BackingError> {
    if let Some(size) = l.create_size {
        if create_sparse(&l.path, size)? {
            tracing::info!(path = %l.path.display(), size, "created sparse backing file");
        }
    }
    Ok(())
}

/// Opens LUN `l`'s backing store through the bstype table, for cache mode `mode`;
/// `arbitrated`: gateways arbitrate it (ALUA peers), so it may be fenced alone.
pub(crate) fn open_store(
    iqn: &str,
    l: &config::LunConfig,
    mode: config::CacheMode,
    arbitrated: bool,
) -> Result<BackingStore, cache::BackingError> {
    let opts = BackingOptions {
        block_size: l.block_size,
        // a CD/DVD image is only read
        readonly: l.readonly || l.device_type == config::DeviceType::Cd,
        // `page`: buffered I/O through the kernel page cache (tgtd's rdwr backend),
        // unless tgt's `direct` flag asks for O_DIRECT
        direct: mode != config::CacheMode::Page || l.bsoflags.direct,
        fenced_alone: arbitrated,
    };
    let bsopts = l.bsopts.as_deref().unwrap_or("");
    let t0 = std::time::Instant::now();
    let store = BackingStore::open_as(
        l.bs_type.store(),
        &cache::OpenRequest {
            path: &l.path,
            bsopts,
            // the LUN's cache mode is the daemon's (`--bsopts cache=`)
            skip: &["cache"],
            options: &opts,
        },
    )?;
    if l.bs_type == config::BsType::Rbd {
        tracing::info!(target = %iqn, lun = l.lun, image = %l.path.display(),
            bsopts = %rbd::redact(bsopts), ms = t0.elapsed().as_millis() as u64,
            "rbd image open");
    }
    Ok(store)
}

/// The SCSI logical unit of LUN `l` (identity `id`, `num_blocks` long), with its flags set
/// and its persistent reservations saved with APTPL restored.
fn logical_unit(
    home: &LunHome<'_>,
    l: &config::LunConfig,
    id: u64,
    num_blocks: u64,
    state_dir: &std::path::Path,
) -> scsi::LogicalUnit {
    let LunHome { iqn, alua, .. } = *home;
    let sync_writes = l.bsoflags.sync;
    let cd = l.device_type == config::DeviceType::Cd;
    let device_type = match l.device_type {
        config::DeviceType::Disk => scsi::DeviceType::Disk,
        config::DeviceType::Cd => scsi::DeviceType::Cd,
        config::DeviceType::Tape => scsi::DeviceType::Tape,
        config::DeviceType::Changer => scsi::DeviceType::Changer,
        config::DeviceType::Passthrough => scsi::DeviceType::Passthrough,
    };
    let params = scsi::LuParams {
        lun: l.lun,
        block_size: l.block_size,
        num_blocks,
        vendor_id: l.vendor_id.clone().unwrap_or_else(|| "NUMATGT".into()),
        product_id: l.product_id.clone().unwrap_or_else(|| {
            match device_type {
                scsi::DeviceType::Disk => "VIRTUAL-DISK",
                scsi::DeviceType::Cd => "VIRTUAL-CDROM",
                scsi::DeviceType::Tape => "VIRTUAL-TAPE",
                scsi::DeviceType::Changer => "VIRTUAL-CHANGER",
                // the device answers INQUIRY itself
                scsi::DeviceType::Passthrough => "PASSTHROUGH",
            }
            .into()
        }),
        product_rev: l.product_rev.clone().unwrap_or_else(|| "0001".into()),
        serial: l.serial.clone().unwrap_or_else(|| format!("{:016x}", id)),
        naa_id: id,
        write_cache: l.write_cache && !sync_writes,
        write_through: sync_writes,
        readonly: l.readonly,
        target_name: iqn.to_string(),
        rel_port_id: alua.relative_port,
        tpg: alua.group,
        device_type,
    };
    let lu = scsi::LogicalUnit::new(params);
    lu.set_thin_provisioning(l.thin_provisioning);
    // tgtd's `lbppbe` (default 0, one logical block per physical block, as tgtd:
    // GET LBA STATUS extents then start at the LBA asked for, which libiscsi's
    // GetLBAStatus.UnmapSingle needs)
    lu.set_physical_block_exponent(l.lbppbe.unwrap_or(0));
    // a CD/DVD drive's disc (always removable) is out while the LUN is offline (tgtd)
    lu.set_removable(l.removable);
    if cd && !l.online {
        lu.set_medium_present(false);
    }
    crate::backend::pr_store::restore(&lu, state_dir, iqn, l.lun);
    lu.set_descriptor_sense(l.sense_format == config::SenseFormat::Descriptor);
    lu
}

/// What tgtadm shows for a LUN from the configuration (its `bsoflags` as configured, as
/// tgtd shows what it was given; the cache mode is in the log and `numatgtadm --dump`).
fn lun_meta(tid: u32, l: &config::LunConfig, id: u64) -> LunMeta {
    let mut flags = Vec::new();
    if l.bsoflags.sync {
        flags.push("sync");
    }
    if l.bsoflags.direct {
        flags.push("direct");
    }
    let d = LunMeta::tgt_defaults(tid, l.lun, &l.path.display().to_string());
    LunMeta {
        scsi_id: l.scsi_id.clone().unwrap_or(d.scsi_id.clone()),
        scsi_sn: l.serial.clone().unwrap_or_else(|| format!("{:016x}", id)),
        bstype: l.bs_type.as_str().to_string(),
        bsopts: l.bsopts.clone().unwrap_or_default(),
        bsoflags: flags.join(":"),
        online: l.online,
        removable: l.removable
            || !matches!(
                l.device_type,
                config::DeviceType::Disk | config::DeviceType::Passthrough
            ),
        thin_provisioning: l.thin_provisioning,
        sense_format: u8::from(l.sense_format == config::SenseFormat::Descriptor),
        ..d
    }
}

/// The connection limits and offers for one set of iSCSI parameters.
pub(crate) fn conn_config(p: &config::IscsiParams) -> ConnConfig {
    let digest = |d: &config::Digest| match d {
        config::Digest::None => iscsi_proto::Digest::None,
        config::Digest::Crc32c => iscsi_proto::Digest::Crc32c,
    };
    ConnConfig {
        max_recv_data_segment_length: p.max_recv_data_segment_length,
        max_burst_length: p.max_burst_length,
        first_burst_length: p.first_burst_length,
        immediate_data: p.immediate_data,
        initial_r2t: p.initial_r2t,
        max_outstanding_r2t: p.max_outstanding_r2t,
        header_digest: p.header_digest.iter().map(digest).collect(),
        data_digest: p.data_digest.iter().map(digest).collect(),
        max_queued_commands: p.max_queued_commands,
        nop_interval_ms: u64::from(p.nop_interval) * 1000,
        nop_count: p.nop_count,
        ..ConnConfig::default()
    }
}

/// Bytes of cache per node: `cache.size_per_node` resolved against every node's memory (the
/// smallest node decides: every node has the same shape). A fixed size larger than a node's
/// free memory falls back to the `auto` rule, and says so.
fn cache_bytes_per_node(s: &config::CacheSettings, topology: &Topology) -> u64 {
    let bs = u64::from(s.block_size.max(1));
    let floor = bs * s.min_blocks();
    let mut chosen: Option<u64> = None;
    for node in topology.nodes() {
        let Some((total, free)) = topology.node_memory(node.index) else {
            continue;
        };
        let mut bytes = s.resolve_size(total, free);
        if let config::CacheSize::Bytes(want) = s.size_per_node
            && want > free
        {
            bytes = config::CacheSize::auto_bytes(total, free, s.block_size).max(floor);
            tracing::warn!(
                node = node.index,
                "cache.size_per_node {} is more than the {} free on node {}: using {} \
                 (the auto rule: a quarter of the node's memory, at most half of its free memory)",
                config::format_size(want),
                config::format_size(free),
                node.index,
                config::format_size(bytes)
            );
        }
        chosen = Some(chosen.map_or(bytes, |c| c.min(bytes)));
    }
    match (chosen, s.size_per_node) {
        (Some(b), _) => b,
        (None, config::CacheSize::Bytes(b)) => b,
        (None, config::CacheSize::Auto) => {
            let b = config::AUTO_CACHE_MIN.max(floor);
            tracing::warn!(
                "cannot read the nodes' memory (/proc/meminfo): cache.size_per_node auto uses {}",
                config::format_size(b)
            );
            b
        }
    }
}

/// The block cache and router from the `cache:` and `router:` settings: arenas bound to
/// their nodes and grown as blocks are filled. When the memory cannot be mapped the cache is
/// halved until it can (down to its smallest shape), and the log says so: a daemon never
/// fails to start for want of cache memory.
///
/// `kept`: the previous executable's cache memory (live upgrade). The cache is built on it
/// when its layout is the one these settings give (with `size_per_node: auto`, its size is
/// taken): the third value is then true, and its blocks can be adopted
/// (`backend::warm::adopt`); otherwise it is let go, with a log line saying why.
fn build_cache(
    cfg: &config::Config,
    topology: &Topology,
    kept: Option<KeptMemory>,
) -> Result<(Arc<BlockCache>, Option<Router>, bool), StartError> {
    let s = &cfg.cache;
    let mut bytes = cache_bytes_per_node(s, topology);
    let floor = u64::from(s.block_size.max(1)) * s.min_blocks();
    let started = Instant::now();
    let mut shared = shared_cache_memory(s);
    let mut kept = kept.and_then(|k| {
        if s.size_per_node == config::CacheSize::Auto {
            bytes = k.layout.bytes_per_node() as u64;
        }
        let want = cache::MemoryLayout::of(&cache_config(s, bytes), topology.node_count());
        if want == k.layout {
            Some(k)
        } else {
            tracing::warn!(
                kept = %k.layout.to_text(),
                now = %want.to_text(),
                "the previous numatgtd's cache memory has another layout: let go, its blocks \
                 are read back from the backing stores"
            );
            bytes = cache_bytes_per_node(s, topology);
            None
        }
    });
    let mut adopted_memory = false;
    let cache = loop {
        let cc = cache_config(s, bytes);
        if let Some(k) = kept.take() {
            match BlockCache::with_memory(cc.clone(), topology, cache::MemoryKind::Kept(k.files)) {
                Ok(c) => {
                    adopted_memory = true;
                    break c;
                }
                Err(e) => {
                    tracing::warn!(
                        "the previous numatgtd's cache memory cannot be mapped ({e}): its blocks \
                         are read back from the backing stores"
                    );
                    continue;
                }
            }
        }
        let memory = if shared {
            cache::MemoryKind::Shared
        } else {
            cache::MemoryKind::Private
        };
        match BlockCache::with_memory(cc, topology, memory) {
            Ok(c) => break c,
            Err(cache::CacheError::Arena(e @ cache::ArenaError::MemoryFile { .. })) => {
                tracing::warn!(
                    "cache memory files cannot be made ({e}): the cache uses private memory \
                     (an upgrade reads its blocks back instead of keeping them)"
                );
                shared = false;
            }
            Err(cache::CacheError::Arena(e)) if bytes / 2 >= floor => {
                tracing::warn!(
                    "cache of {} per node cannot be set up ({e}); trying {}",
                    config::format_size(bytes),
                    config::format_size(bytes / 2)
                );
                bytes /= 2;
            }
            Err(e) => return Err(StartError::Cache(e)),
        }
    };
    tracing::info!(
        size_per_node = %config::format_size(bytes),
        configured = %s.size_per_node,
        block_size = s.block_size,
        group_blocks = s.group_blocks,
        partitions_per_node = s.partitions_per_node,
        nodes = topology.node_count(),
        virtual_nodes = topology.is_virtual(),
        ms = started.elapsed().as_millis() as u64,
        memory = if adopted_memory { "kept" } else if shared { "shared" } else { "private" },
        "NUMA block cache ready (memory is taken as blocks are cached)"
    );
    let router = cfg.router.enabled.then(|| {
        Router::new(
            *cache.geometry(),
            RouterPolicy {
                min_forward_bytes: cfg.router.min_forward_bytes,
                max_queue: cfg.router.max_queue as usize,
            },
        )
    });
    Ok((Arc::new(cache), router, adopted_memory))
}

/// The block cache's shape from the `cache:` settings, `bytes` per node.
fn cache_config(s: &config::CacheSettings, bytes: u64) -> CacheConfig {
    CacheConfig {
        block_size: s.block_size as usize,
        group_blocks: u64::from(s.group_blocks),
        partitions_per_node: s.partitions_per_node as usize,
        bytes_per_node: usize::try_from(bytes).unwrap_or(usize::MAX),
        sector_size: 512,
        huge_pages: s.huge_pages,
        dirty_limit_bytes: s.dirty_limit_bytes(bytes),
        bind_policy: BindPolicy::Bind,
        prefault: false,
    }
}

/// `cache.memory`: whether the arenas are memory files a live upgrade hands on. `auto`:
/// when shared memory gets huge pages as private memory would (or huge pages are off), so
/// the choice costs no speed.
fn shared_cache_memory(s: &config::CacheSettings) -> bool {
    match s.memory {
        config::CacheMemory::Shared => true,
        config::CacheMemory::Private => false,
        config::CacheMemory::Auto => {
            !s.huge_pages
                || cache::memory_file::shared_huge_pages()
                || cache::memory_file::hugetlb_free_pages() > 0
        }
    }
}

/// The I/O side every event thread uses: the backing-store I/O pools of each node, the
/// block cache and its router.
struct DataPath {
    workers: NodeWorkers,
    cache: Option<Arc<BlockCache>>,
    router: Option<Router>,
    /// The cache was built on the previous executable's memory.
    kept_memory: bool,
}

impl DataPath {
    /// Starts the I/O pools, then sets the block cache up.
    fn start(
        rc: &RuntimeConfig,
        topology: &Topology,
        kept: Option<KeptMemory>,
    ) -> Result<DataPath, StartError> {
        let workers = NodeWorkers::start(topology.nodes(), rc.io_threads, rc.io_engine)
            .map_err(StartError::Threads)?;
        // the cache always runs (its memory is taken only as blocks are cached): LUNs made
        // later by tgtadm or a reload get the configured mode like those of the file
        let (cache, router, kept_memory) = build_cache(&rc.config, topology, kept)?;
        Ok(DataPath {
            workers,
            cache: Some(cache),
            router,
            kept_memory,
        })
    }
}

/// The TCP portals bound at start.
struct TcpPortals {
    listeners: Vec<Box<dyn Listener>>,
    /// Second descriptors of the same sockets.
    kept: Vec<std::net::TcpListener>,
    /// The addresses they are bound to (the port chosen by the kernel for port 0).
    listening: Vec<SocketAddr>,
    /// What the registry knows of them (SendTargets, NOP settings).
    portals: Vec<Portal>,
}

/// Binds the configured TCP portals. tgtd's default IPv6 wildcard is skipped with a log line
/// on a host without IPv6 when an IPv4 portal is configured too; any other failure stops the
/// start.
fn bind_tcp_portals(
    configured: &[config::PortalConfig],
    inherited: Vec<std::net::TcpListener>,
) -> Result<TcpPortals, StartError> {
    let mut out = TcpPortals {
        listeners: Vec::new(),
        kept: Vec::new(),
        listening: Vec::new(),
        portals: Vec::new(),
    };
    let mut inherited: Vec<Option<std::net::TcpListener>> =
        inherited.into_iter().map(Some).collect();
    for p in configured {
        let addr = p.addr;
        let passed = inherited
            .iter_mut()
            .find(|l| l.as_ref().and_then(|l| l.local_addr().ok()) == Some(addr))
            .and_then(Option::take);
        let bound = match passed {
            Some(l) => {
                tracing::info!(
                    "portal {addr}: listening socket taken over from the previous numatgtd"
                );
                Ok(l)
            }
            None => crate::transport::bind_portal(addr),
        };
        let std_l = match bound {
            Ok(l) => l,
            // tgtd's default wildcards on a host without IPv6: serve IPv4 alone
            Err(e) if no_ipv6_beside_ipv4(addr, &e, configured) => {
                tracing::warn!("portal {addr}: no IPv6 on this host ({e}); IPv4 only");
                continue;
            }
            Err(source) => return Err(StartError::Listen { addr, source }),
        };
        let local = std_l
            .local_addr()
            .map_err(|source| StartError::Listen { addr, source })?;
        out.listening.push(local);
        out.portals.push(Portal {
            addr: local,
            nop_interval: p.nop_interval,
            nop_count: p.nop_count,
        });
        if let Ok(k) = std_l.try_clone() {
            out.kept.push(k);
        }
        out.listeners.push(crate::transport::tcp_listener(std_l));
    }
    for l in inherited.into_iter().flatten() {
        // a portal the configuration no longer names (closed here: the new daemon serves
        // what its configuration says)
        tracing::info!(addr = ?l.local_addr().ok(), "passed-on portal not configured: closed");
    }
    Ok(out)
}

/// Binding IPv6 wildcard `addr` failed with `e` because the host has no IPv6, and an IPv4
/// portal is configured beside it.
fn no_ipv6_beside_ipv4(
    addr: SocketAddr,
    e: &std::io::Error,
    configured: &[config::PortalConfig],
) -> bool {
    addr.is_ipv6()
        && addr.ip().is_unspecified()
        && configured.iter().any(|o| o.addr.is_ipv4())
        && matches!(
            e.raw_os_error(),
            Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL)
        )
}

/// Where the event threads run: one per CPU by default; thread `i` on the node of CPU `i`
/// (round robin when there are more threads than CPUs).
struct EventPlacement {
    /// The node of each CPU, CPUs in the topology's order.
    cpu_nodes: Vec<usize>,
    /// Event threads in total (at least 1).
    threads: usize,
}

impl EventPlacement {
    fn new(topology: &Topology, asked: Option<usize>) -> EventPlacement {
        let cpu_nodes: Vec<usize> = topology
            .nodes()
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |_| n.index))
            .collect();
        let threads = asked.unwrap_or(cpu_nodes.len()).max(1);
        EventPlacement { cpu_nodes, threads }
    }

    /// The node of event thread `i` (`None`: the topology lists no CPU).
    fn node_of(&self, i: usize) -> Option<usize> {
        self.cpu_nodes.get(i % self.cpu_nodes.len().max(1)).copied()
    }

    /// The event threads of each of `nodes` nodes.
    fn threads_by_node(&self, nodes: usize) -> Vec<Vec<usize>> {
        (0..nodes)
            .map(|node| {
                (0..self.threads)
                    .filter(|&i| self.node_of(i) == Some(node))
                    .collect()
            })
            .collect()
    }

    /// Each event thread's statistics, its node set.
    fn thread_stats(&self) -> Vec<crate::event_loop::ThreadStats> {
        (0..self.threads)
            .map(|i| crate::event_loop::ThreadStats {
                node: self.node_of(i).unwrap_or(0),
                busy_ns: Default::default(),
            })
            .collect()
    }
}

/// The registry of the configured targets and TCP portals, with its state directory.
fn new_registry(
    rc: &RuntimeConfig,
    targets: Vec<Arc<Target>>,
    portals: Vec<Portal>,
) -> Arc<Registry> {
    let registry = Arc::new(Registry::new(
        targets,
        portals,
        conn_config(&rc.config.iscsi),
    ));
    registry.set_state_dir(rc.state_dir.clone());
    registry
}

/// The configured limits, CHAP accounts and discovery authentication, into the registry.
fn apply_access_settings(registry: &Registry, cfg: &config::Config) {
    registry.limits.apply(&cfg.limits);
    *registry.accounts() = Accounts::from_config(cfg);
}

/// The block cache's write-back threads, one set per node (none without a cache).
fn start_flushers(
    rc: &RuntimeConfig,
    block_cache: Option<&Arc<BlockCache>>,
    topology: &Topology,
    registry: &Arc<Registry>,
) -> Result<Option<Flushers>, StartError> {
    let Some(c) = block_cache else {
        return Ok(None);
    };
    Flushers::start(
        c,
        topology.nodes(),
        Arc::clone(registry),
        c.config().dirty_limit_bytes,
        (rc.io_threads / 2).max(2),
        rc.io_engine,
    )
    .map(Some)
    .map_err(StartError::Threads)
}

/// What every thread shares (its inboxes are set once the event threads exist).
fn shared_state(
    rc: &RuntimeConfig,
    registry: Arc<Registry>,
    data: DataPath,
    topology: &Topology,
    placement: &EventPlacement,
    started: Instant,
) -> Arc<Shared> {
    Arc::new(Shared {
        registry,
        workers: data.workers,
        cache: data.cache,
        router: data.router,
        inboxes: OnceLock::new(),
        next_thread: AtomicUsize::new(0),
        threads_by_node: placement.threads_by_node(topology.node_count()),
        topology: topology.clone(),
        nic_nodes: std::sync::Mutex::new(std::collections::HashMap::new()),
        connections: AtomicUsize::new(0),
        busy_poll: rc.busy_poll,
        started,
        thread_stats: placement.thread_stats(),
        proto_stats: Default::default(),
        moved_out: Default::default(),
    })
}

/// Starts the event threads, each bound to the CPUs of its node; thread 0 gets every
/// startup listener.
fn spawn_event_threads(
    setups: Vec<EventThreadSetup>,
    shared: &Arc<Shared>,
    topology: &Topology,
    placement: &EventPlacement,
    listeners: Vec<Box<dyn Listener>>,
) -> Result<Vec<JoinHandle<()>>, StartError> {
    let mut threads = Vec::new();
    let mut listeners = Some(listeners);
    for (i, setup) in setups.into_iter().enumerate() {
        let node = placement.node_of(i).unwrap_or(0);
        let cpus = topology
            .nodes()
            .get(node)
            .map(|n| n.cpus.clone())
            .unwrap_or_default();
        let mine = if i == 0 {
            listeners.take().unwrap_or_default()
        } else {
            Vec::new()
        };
        let et = EventThread::new(i, node, setup, Arc::clone(shared), mine);
        let h = std::thread::Builder::new()
            .name(format!("ev-n{node}-{i}"))
            .spawn(move || {
                if let Err(e) = cache::topology::bind_current_thread(&cpus) {
                    tracing::debug!("cannot bind event thread to {cpus:?}: {e}");
                }
                et.run();
            })
            .map_err(StartError::Threads)?;
        threads.push(h);
    }
    Ok(threads)
}

/// One log line per portal: where it listens, and on which node its connections are
/// served.
fn log_portals(topology: &Topology, listening: &[SocketAddr], iser_listening: &[SocketAddr]) {
    for a in listening {
        match topology.nic_node(a.ip()) {
            Some(n) => tracing::info!(
                "portal {a}: its network device is on NUMA node {n}; its connections are served there"
            ),
            None if a.ip().is_unspecified() => tracing::info!(
                "portal {a}: each connection is served on the node of the device it arrives on, when known"
            ),
            None => tracing::info!(
                "portal {a}: NUMA node of the network device unknown (loopback, virtual, or not reported); connections are spread over all nodes"
            ),
        }
        tracing::info!("numatgtd: listening on {a}");
    }
    for a in iser_listening {
        tracing::info!("numatgtd: listening for iSER on {a}");
    }
}

/// What the registry knows of the bound iSER portals: their NOP settings as configured.
fn iser_portal_entries(cfg: &config::Config, iser_listening: &[SocketAddr]) -> Vec<Portal> {
    let configured = cfg.iser_listen(true);
    iser_listening
        .iter()
        .map(|&addr| {
            let p = configured.iter().find(|p| p.addr == addr);
            Portal {
                addr,
                nop_interval: p.and_then(|p| p.nop_interval),
                nop_count: p.and_then(|p| p.nop_count),
            }
        })
        .collect()
}

/// The logical units go on with the state the previous numatgtd left them in (before any
/// session is added).
fn resume_lu_states(targets: &[Arc<Target>], states: &[(String, u64, Vec<u8>)]) {
    for (iqn, lun, text) in states {
        let Some(l) = targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .and_then(|t| t.lun_set().map.get(lun).cloned())
        else {
            tracing::warn!(target = %iqn, lun, "the previous numatgtd's LUN is not configured here: its state is dropped");
            continue;
        };
        if let Err(e) = l.scsi.resume_state(text) {
            tracing::warn!(target = %iqn, lun, "cannot go on with the previous numatgtd's logical unit state: {e}");
        }
    }
    if !states.is_empty() {
        tracing::info!(
            luns = states.len(),
            "logical units go on with the previous numatgtd's state"
        );
    }
}

/// The connections the previous numatgtd moved here: each to the event thread of its node,
/// which goes on with it.
fn resume_moved(shared: &Shared, moved: Vec<(iscsi_proto::MovedConn, std::os::fd::OwnedFd)>) {
    use crate::event_loop::MovedIn;
    use crate::transport::Placement;
    let n = moved.len();
    for (state, fd) in moved {
        let accepted = match crate::transport::moved_tcp(fd) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(
                    initiator = state.info.initiator_name,
                    "moved connection lost: {e}"
                );
                crate::event_loop::lose_moved_nexus(shared, &state.info);
                continue;
            }
        };
        let t = match accepted.placement(&shared.topology) {
            Placement::Nic(ip) => shared.thread_for(ip),
            Placement::Node(node) => shared.thread_on_node(node),
        };
        if let Some(inbox) = shared.inbox(t) {
            inbox.send(Msg::Resume(Box::new(MovedIn { state, accepted })));
        }
    }
    if n > 0 {
        tracing::info!(
            connections = n,
            "going on with the previous numatgtd's connections"
        );
    }
}

impl Daemon {
    /// Detects the topology, opens every LUN, starts the I/O pools and the block cache, binds
    /// the portals, then starts the event threads and the metrics server; returns once the
    /// daemon serves.
    pub fn start(mut rc: RuntimeConfig) -> Result<Daemon, StartError> {
        let started = Instant::now();
        let mut inherited = std::mem::take(&mut rc.inherited);
        let topology = Topology::detect(rc.numa_nodes);
        tracing::info!("topology: {}", topology.describe());
        // with the previous process's cache memory, its LUNs keep their cache identities
        let kept_ids = match (&inherited.hot, &inherited.cache_memory) {
            (Some(h), Some(_)) => h.cache_ids(),
            _ => Vec::new(),
        };
        crate::alua::owned_before_upgrade(std::mem::take(&mut inherited.alua_owned));
        let targets = open_targets(&rc.config, &rc.state_dir, &kept_ids)?;

        let data = DataPath::start(&rc, &topology, inherited.cache_memory.take())?;
        let kept_memory = data.kept_memory;
        // listen only once the cache is ready: a bound portal means a serving daemon. The
        // previous process's portals added at run time go to the portal acceptor instead.
        let added_portals = std::mem::take(&mut inherited.added_tcp);
        let added: Vec<SocketAddr> = added_portals
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let configured: Vec<config::PortalConfig> = rc
            .config
            .portals
            .iter()
            .filter(|p| !added.contains(&p.addr))
            .cloned()
            .collect();
        let tcp = bind_tcp_portals(&configured, inherited.tcp)?;
        let iser_listeners = bind_iser_portals(iser_portal_request(&rc))?;
        let iser_listening: Vec<SocketAddr> = iser_listeners.iter().map(|l| l.addr()).collect();

        let placement = EventPlacement::new(&topology, rc.event_threads);
        let setups = (0..placement.threads)
            .map(|_| EventThreadSetup::new().map_err(StartError::Threads))
            .collect::<Result<Vec<_>, _>>()?;
        resume_lu_states(&targets, &inherited.lu_states);
        let registry = new_registry(&rc, targets, tcp.portals);
        for (m, _) in &inherited.moved {
            registry.keep_tsih(m.info.tsih);
        }
        crate::backend::changer::settle(&registry);
        crate::backend::tape::resume_all(&registry);
        crate::alua::start_all(&registry.targets(), data.cache.as_ref());
        apply_access_settings(&registry, &rc.config);
        // the kept cache memory's blocks are cached again before any connection is served
        // (a command could otherwise take, and give back, a slot a kept block is in)
        let mut hot = inherited.hot.take();
        if let (Some(list), Some(cache), true) = (hot.as_mut(), data.cache.as_ref(), kept_memory) {
            crate::backend::warm::adopt(list, cache, &registry);
        }
        let flushers = start_flushers(&rc, data.cache.as_ref(), &topology, &registry)?;
        let shared = shared_state(&rc, registry, data, &topology, &placement, started);
        let _ = shared
            .inboxes
            .set(setups.iter().map(|s| Arc::clone(&s.inbox)).collect());
        crate::backend::pr_cluster::set_task_control(Arc::clone(&shared) as _);
        crate::ship::serve::install(Arc::clone(&shared));

        // every startup portal, of every transport, is event thread 0's
        let mut listeners = tcp.listeners;
        listeners.extend(iser_listeners);
        let threads = spawn_event_threads(setups, &shared, &topology, &placement, listeners)?;
        log_portals(&topology, &tcp.listening, &iser_listening);
        shared
            .registry
            .set_iser_portals(iser_portal_entries(&rc.config, &iser_listening));
        // the moved connections go on first: their initiators wait for every step here
        resume_moved(&shared, inherited.moved);
        let metrics = start_metrics(&rc.config.metrics, &shared, inherited.metrics)?;
        let warm_file = rc
            .config
            .cache
            .warm_restart
            .then(|| rc.state_dir.join(WARM_FILE));
        let hot = hot.or_else(|| warm_file.as_deref().and_then(take_saved_hot_list));
        if let Some(list) = hot {
            crate::backend::warm::start(list, shared.cache.as_ref(), &shared.registry);
        }
        tracing::info!(
            event_threads = placement.threads,
            io_threads_per_node = rc.io_threads,
            nodes = topology.node_count(),
            virtual_nodes = topology.is_virtual(),
            "numatgtd ready"
        );
        Ok(Daemon {
            shared,
            base: Arc::new(rc.config.clone()),
            flushers,
            threads,
            listening: tcp.listening,
            tcp_listeners: tcp.kept,
            metrics,
            warm_file,
            added_portals,
        })
    }

    /// New descriptors of the listening sockets a handover passes on: the startup TCP
    /// portals' and the metrics server's.
    pub fn listeners(&self) -> (Vec<std::net::TcpListener>, Option<std::net::TcpListener>) {
        let tcp = self
            .tcp_listeners
            .iter()
            .filter_map(|l| l.try_clone().ok())
            .collect();
        (tcp, self.metrics.as_ref().and_then(|m| m.listener()))
    }

    /// The first half of a handover: stop accepting (new connections wait in the
    /// listeners' backlog); with `move_tcp`, hold the TCP connections of normal sessions
    /// and move them out once quiet (no command in flight, nothing to send); ask every
    /// other session's initiator to log out within `logout_within` seconds; close the
    /// other connections; and wait until every connection has moved or ended or `wait`
    /// has passed. [`Daemon::stop`] follows.
    pub fn quiesce(&self, logout_within: u16, move_tcp: bool, wait: Duration) -> Quiesced {
        let t0 = Instant::now();
        let open = || {
            self.shared
                .connections
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let connections = open();
        if let Some(inboxes) = self.shared.inboxes.get() {
            for i in inboxes {
                i.send(Msg::Quiesce {
                    logout_within,
                    move_tcp,
                });
            }
        }
        while open() > 0 && t0.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(1));
        }
        let moved = std::mem::take(
            &mut *self
                .shared
                .moved_out
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        Quiesced {
            connections,
            moved,
            left: open(),
            took: t0.elapsed(),
        }
    }

    /// Where the metrics server listens (`None`: off, or its default port was taken).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr())
    }

    /// Log the block cache's state per node (SIGUSR1 and shutdown): one line per node with
    /// the arena's page placement (move_pages) and the cache counters. Tools and the VM
    /// test parse these `cache report:` lines.
    pub fn report(&self) {
        let Some(cache) = self.shared.cache.as_ref() else {
            tracing::info!("cache report: no LUN uses the NUMA block cache");
            return;
        };
        for (node, arena) in cache.arenas().iter().enumerate() {
            let placement = match arena.local_fraction() {
                Ok(f) => format!("{f:.4}"),
                Err(e) => format!("unknown({e})"),
            };
            let c = cache.counters(node).unwrap_or_default();
            let resident = arena
                .resident_bytes()
                .map_or_else(|e| format!("unknown({e})"), |b| b.to_string());
            let served = c.served_local_bytes + c.served_remote_bytes;
            let local_share = if served == 0 {
                1.0
            } else {
                c.served_local_bytes as f64 / served as f64
            };
            tracing::info!(
                "cache report: node={node} virtual={} binding={:?} placement_local={placement} \
                 capacity_bytes={} resident_bytes={resident} hits={} misses={} evictions={} \
                 bypassed={} dirty_bytes={} served_local_bytes={} \
                 served_remote_bytes={} served_local_share={local_share:.4} forwards_out={} \
                 forwards_in={} throttled={} busy={} no_space={}",
                cache.is_virtual(),
                arena.binding(),
                arena.len(),
                c.hits,
                c.misses,
                c.evictions,
                c.bypassed,
                c.dirty_bytes,
                c.served_local_bytes,
                c.served_remote_bytes,
                c.forwards_out,
                c.forwards_in,
                c.throttled,
                c.busy,
                c.no_space,
            );
        }
    }

    /// What the management socket works on.
    /// Starts the acceptor thread for portals added at run time.
    /// The portals the previous numatgtd added at run time go on there.
    pub fn mgmt_ctx(&mut self) -> crate::mgmt::Ctx {
        let portals = match crate::mgmt::portals::PortalAcceptor::start(Arc::clone(&self.shared)) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!("cannot start the portal acceptor: {e}; portals are fixed");
                None
            }
        };
        for l in std::mem::take(&mut self.added_portals) {
            match &portals {
                Some(p) => p.adopt(l),
                None => tracing::error!(
                    "portal {:?} added at run time is closed: no portal acceptor",
                    l.local_addr().ok()
                ),
            }
        }
        crate::mgmt::Ctx {
            registry: Arc::clone(&self.shared.registry),
            control: Arc::clone(&self.shared) as Arc<dyn crate::registry::ConnControl>,
            cache: self.shared.cache.clone(),
            base: Arc::clone(&self.base),
            debug: None,
            portals,
            loaded: Arc::new(std::sync::Mutex::new(crate::reload::Loaded {
                path: None,
                config: (*self.base).clone(),
                portals_from_cli: false,
                iser_portals_from_cli: false,
                metrics_from_cli: false,
                demo: Vec::new(),
            })),
            saved: None,
        }
    }

    /// The addresses the portals are bound to.
    pub fn listening(&self) -> &[SocketAddr] {
        &self.listening
    }

    /// Close every connection, stop the threads, and make every LUN's data durable; with
    /// `cache.warm_restart`, list the cached blocks for the next start.
    pub fn stop(self) {
        let file = self.warm_file.clone();
        if let Some(kept) = self.stop_steps(file.is_some(), false, true)
            && let Some(path) = file
        {
            save_hot_list(&path, &kept.hot);
        }
    }

    /// As [`Daemon::stop`], and with `hot` the cache's blocks after the write-back (every
    /// one clean), for a warm start of the next process; with `memory` too, the cache's
    /// memory files (when it has them) and the blocks' places in them.
    /// It logs no cache report: a handover reports before it pauses, as the scan of the
    /// arenas' pages takes a while.
    pub fn stop_keeping(self, hot: bool, memory: bool) -> Option<KeptCache> {
        self.stop_steps(hot, memory, false)
    }

    fn stop_steps(mut self, hot: bool, memory: bool, report: bool) -> Option<KeptCache> {
        // a warm start still loading would go on filling (and evicting) blocks after the
        // list is taken: the memory goes along only once it has ended
        let t0 = Instant::now();
        let warm_ended = crate::backend::warm::stop();
        let warm_ms = t0.elapsed().as_millis() as u64;
        self.stop_serving();
        let serving_ms = t0.elapsed().as_millis() as u64 - warm_ms;
        if report {
            self.report();
        }
        let Daemon {
            shared, flushers, ..
        } = self;
        let mut times = StopTimes {
            warm_ms,
            serving_ms,
            ..StopTimes::default()
        };
        let kept = write_back_and_sync(shared, flushers, hot, memory && warm_ended, &mut times);
        tracing::info!(
            warm_load_ms = times.warm_ms,
            serving_ms = times.serving_ms,
            workers_ms = times.workers_ms,
            write_back_ms = times.write_back_ms,
            sync_ms = times.sync_ms,
            list_ms = times.list_ms,
            close_ms = times.close_ms,
            total_ms = t0.elapsed().as_millis() as u64,
            "stopped: warm start ended, event threads, I/O workers, write-back, sync, cached \
             blocks listed, stores closed"
        );
        kept
    }

    /// Stops the metrics server, then the event threads (each closes its connections).
    fn stop_serving(&mut self) {
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
        if let Some(inboxes) = self.shared.inboxes.get() {
            for i in inboxes {
                i.send(Msg::Shutdown);
            }
        }
        for h in std::mem::take(&mut self.threads) {
            let _ = h.join();
        }
    }
}

/// Once every connection is closed: lets the I/O workers finish what is queued, writes every
/// dirty cache block back, makes everything that was written durable, then closes every
/// LUN's backing store.
fn write_back_and_sync(
    shared: Arc<Shared>,
    flushers: Option<Flushers>,
    hot: bool,
    memory: bool,
    times: &mut StopTimes,
) -> Option<KeptCache> {
    let registry = Arc::clone(&shared.registry);
    let cache = shared.cache.clone();
    // every I/O worker ends (the event threads have): nothing of this process touches the
    // cache from here on but the write-back below, so its list (and memory) can go along
    let mut t = Instant::now();
    let lap = |t: &mut Instant| {
        let ms = t.elapsed().as_millis() as u64;
        *t = Instant::now();
        ms
    };
    shared.workers.drain();
    drop(shared);
    times.workers_ms = lap(&mut t);
    if let Some(f) = flushers {
        f.stop();
    }
    times.write_back_ms = lap(&mut t);
    let unsynced = sync_all(&registry);
    times.sync_ms = lap(&mut t);
    let kept = cache.filter(|_| hot).map(|c| {
        let files = c
            .memory_files()
            .filter(|_| memory)
            .and_then(|f| f.iter().map(|f| f.try_clone_to_owned().ok()).collect());
        KeptCache {
            hot: crate::backend::warm::HotList::collect(&c, &registry, files.is_some()),
            memory: files.map(|files| KeptMemory {
                layout: c.layout(),
                files,
            }),
        }
    });
    times.list_ms = lap(&mut t);
    close_all(&registry, &unsynced, CLOSE_WAIT);
    times.close_ms = lap(&mut t);
    kept
}

/// How long each step of a stop took (logged; a handover's pause is mostly these).
#[derive(Default)]
struct StopTimes {
    warm_ms: u64,
    serving_ms: u64,
    workers_ms: u64,
    write_back_ms: u64,
    sync_ms: u64,
    list_ms: u64,
    close_ms: u64,
}

/// How long a stop waits for the backing stores to close.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Takes every LUN out of its target and lets it go, its store closing with it (an RBD
/// image: `rbd_close`, which ends its watch and gives its exclusive lock back, so the next
/// client of the image — a restarted daemon, another gateway, `rbd rm` — need not wait for
/// the cluster to time them out; the cluster connection closes with its last image). Each
/// on a thread of its own, after its ALUA ownership thread let go of it; waits at most
/// `wait` for all of them. LUNs whose final sync failed (`unsynced`: tid and LUN) stay
/// open until the process ends: closing an image whose cluster does not answer can abort
/// inside librbd (Pacific's exclusive-lock dispatch asserts), and the cluster times their
/// watches out anyway.
fn close_all(registry: &Registry, unsynced: &[(u32, u64)], wait: Duration) {
    let mut luns = Vec::new();
    for t in registry.targets() {
        let taken = t.update_luns(|m| {
            let (sick, healthy) = std::mem::take(m)
                .into_iter()
                .partition(|(n, _)| unsynced.contains(&(t.tid, *n)));
            *m = sick;
            healthy
        });
        luns.extend(taken.into_values());
    }
    if luns.is_empty() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let n = luns.len();
    for lun in luns {
        if let Some(o) = &lun.rbd_ownership {
            o.stop();
        }
        let done = tx.clone();
        let close = move || {
            // the last holder drops it; an ownership thread ends within its poll step
            let until = Instant::now() + wait;
            while Arc::strong_count(&lun) > 1 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(lun);
            let _ = done.send(());
        };
        if let Err(e) = std::thread::Builder::new()
            .name("close-lun".into())
            .spawn(close)
        {
            tracing::error!("closing the LUNs: cannot start a thread: {e}");
            let _ = tx.send(());
        }
    }
    let until = Instant::now() + wait;
    let closed = (0..n)
        .take_while(|_| {
            rx.recv_timeout(until.saturating_duration_since(Instant::now()))
                .is_ok()
        })
        .count();
    if closed < n {
        tracing::warn!(
            luns = n - closed,
            "backing stores not closed within {wait:?}; stopping anyway"
        );
    }
}

/// Start the metrics server where `settings` say. An explicit address that cannot be used
/// stops the start; the default one (127.0.0.1:9470) may be taken by another daemon on the
/// host: then this one runs without metrics and says so.
fn start_metrics(
    settings: &config::MetricsSettings,
    shared: &Arc<Shared>,
    inherited: Option<std::net::TcpListener>,
) -> Result<Option<crate::metrics::MetricsServer>, StartError> {
    let Some(addr) = settings.address.addr() else {
        tracing::info!("metrics server off");
        return Ok(None);
    };
    // the passed-on socket when it is bound where the settings say (port 0: any port)
    let inherited = inherited.filter(|l| {
        l.local_addr()
            .is_ok_and(|a| a == addr || (addr.port() == 0 && a.ip() == addr.ip()))
    });
    match crate::metrics::MetricsServer::start(
        addr,
        Arc::clone(shared),
        settings.session_info,
        inherited,
    ) {
        Ok(m) => {
            tracing::info!(
                "metrics: http://{}/metrics, status page http://{}/",
                m.addr(),
                m.addr()
            );
            Ok(Some(m))
        }
        Err(e) if settings.address == config::MetricsAddress::Default => {
            tracing::warn!("{e}; running without metrics (set metrics.address or --metrics)");
            Ok(None)
        }
        Err(e) => Err(StartError::Metrics(e)),
    }
}

/// Makes every LUN's store durable (not the RBD LUNs another gateway owns: nothing of
/// theirs is pending here); returns the LUNs (tid, number) whose sync failed.
fn sync_all(registry: &Registry) -> Vec<(u32, u64)> {
    // every LUN at once: a sick cluster's flushes time out together, not one after another
    let targets = registry.targets();
    let failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in &targets {
            for lun in t.lun_set().map.values() {
                let lun = Arc::clone(lun);
                let failed = &failed;
                let run = move || {
                    if lun
                        .rbd_ownership
                        .as_ref()
                        .is_some_and(|o| !o.owns() && !o.is_fenced())
                    {
                        // another gateway owns the LUN: this one has written nothing it
                        // must flush (a non-owner's I/O is refused or moves the LUN here
                        // first; a handover writes back before it lets go), and librbd
                        // refuses a flush without the image's lock (EROFS). Its image
                        // closes as every healthy one does, ending its watches at once.
                        return;
                    }
                    // a tape drive's tape is its own file
                    if let Err(e) = lun.store.sync().and_then(|()| lun.scsi.tape_sync()) {
                        tracing::error!(target = %t.iqn, lun = lun.number, "final sync failed: {e}");
                        failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((t.tid, lun.number));
                    }
                };
                if let Err(e) = std::thread::Builder::new()
                    .name("final-sync".into())
                    .spawn_scoped(s, run)
                {
                    tracing::error!(target = %t.iqn, "final sync: cannot start a thread: {e}");
                }
            }
        }
    });
    failed.into_inner().unwrap_or_else(|p| p.into_inner())
}
