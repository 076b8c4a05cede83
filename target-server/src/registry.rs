//! The daemon's shared view of targets, LUNs, access rules, accounts and sessions: built
//! from the configuration at start, changed at run time by the management socket (tgtadm),
//! consulted at login (target lookup, state, ACL, TSIH, session reinstatement) and in
//! discovery (SendTargets). On the per-I/O path only [`Target::lun_set`] is read: one
//! uncontended read lock and an `Arc` clone, so a LUN added or removed by tgtadm is seen by
//! the target's existing sessions at their next command.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cache::BackingStore;
use iscsi_proto::ConnConfig;

use crate::conn_id::ConnId;

mod access;
mod login;
#[cfg(test)]
mod tests;

pub use access::{Accounts, Acl, AuthBinding, ChapCredentials, TargetState, os_random};
pub use login::LoginContext;

/// One exported logical unit.
pub struct Lun {
    pub number: u64,
    pub scsi: scsi::LogicalUnit,
    pub store: Arc<BackingStore>,
    /// The LUN's identity in the block cache (unique in the daemon).
    pub cache_id: u32,
    /// The cache mode decided when the LUN was opened (its own, or the configured default;
    /// `runtime::open_lun`): what the log, the metrics and `numatgtadm --dump` show. Under
    /// `numa` the LUN uses the block cache only while this gateway owns it
    /// ([`Lun::cache_in_use`]).
    pub cache_mode: config::CacheMode,
    /// The cache is in use now: configured, and this gateway owns the LUN (ALUA
    /// active/optimized; see [`crate::alua`]).
    pub cache_in_use: crate::alua::shared::CacheInUse,
    /// The ownership of an RBD LUN exported by several gateways, moved through the image's
    /// exclusive lock (`None`: other LUNs, whose owner the administrator sets).
    pub rbd_ownership: Option<Arc<crate::alua::shared::RbdOwnership>>,
    /// Persistent reservations kept in the cluster, shared by every gateway of an RBD LUN
    /// exported by several (`None`: local reservations).
    pub shared_pr: Option<Arc<crate::pr_shared::SharedPr>>,
    /// Cache blocks to read ahead after a sequential read (0 = off).
    pub read_ahead: u32,
    /// Where the last read of this LUN ended (byte offset), to spot sequential streams.
    pub last_read_end: std::sync::atomic::AtomicU64,
    /// What tgtadm shows and updates about the LUN.
    pub meta: Mutex<LunMeta>,
    /// Write atomicity for COMPARE AND WRITE.
    pub locks: crate::range_locks::RangeLocks,
    /// I/O statistics (kept when the LUN is rebuilt by `--op update`).
    pub stats: Arc<crate::io_stats::LunStats>,
    /// Its QoS limits and what they held back (kept when the LUN is rebuilt, like `stats`).
    pub qos: Arc<crate::qos::LunQos>,
    /// The thread that runs a tape drive's commands in arrival order (`None` for other
    /// device types).
    pub serial: Option<crate::serial_work::SerialWork>,
    /// A passthrough LUN's local SCSI device (`None` for other device types).
    pub passthrough: Option<Arc<crate::sgio::PtDevice>>,
}

/// The management view of a LUN (tgtadm `show`/`update --params`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LunMeta {
    pub scsi_id: String,
    pub scsi_sn: String,
    pub path: String,
    /// `rdwr` or `aio` (both served the same way here), or `rbd`.
    pub bstype: String,
    /// An rbd LUN's `--bsopts` as given (without `cache=`), empty otherwise; kept for the
    /// dump, never shown or logged unredacted (`rbd::redact`).
    pub bsopts: String,
    /// As given with `--bsoflags` (`direct`, `sync`, `sync:direct`), empty when none.
    pub bsoflags: String,
    pub online: bool,
    pub removable: bool,
    pub thin_provisioning: bool,
    pub sense_format: u8,
    /// ALUA: the target port group that owns the LUN.
    pub alua_owner: u16,
}

impl LunMeta {
    /// tgtd's defaults for LUN `lun` of target `tid`.
    pub fn tgt_defaults(tid: u32, lun: u64, path: &str) -> LunMeta {
        LunMeta {
            scsi_id: format!("IET     {:04x}{:04x}", tid, lun),
            scsi_sn: format!("beaf{tid}{lun}"),
            path: path.to_string(),
            bstype: "rdwr".into(),
            bsopts: String::new(),
            bsoflags: String::new(),
            online: true,
            removable: false,
            thin_provisioning: false,
            sense_format: 0,
            alua_owner: 1,
        }
    }
}

impl Lun {
    /// The LUN is configured for the NUMA-aware block cache (`cache: numa`); it uses the
    /// cache only while this gateway owns it ([`Lun::cache_in_use`]).
    pub fn cache_configured(&self) -> bool {
        self.cache_mode == config::CacheMode::Numa
    }

    /// Whether commands use the block cache now (see [`Lun::cache_in_use`]).
    pub fn caches_now(&self) -> bool {
        self.cache_in_use.get()
    }
}

/// A LUN's write holds ([`crate::range_locks::WriteClaim`]s of asynchronous writes).
impl AsRef<crate::range_locks::RangeLocks> for Lun {
    fn as_ref(&self) -> &crate::range_locks::RangeLocks {
        &self.locks
    }
}

/// A target's LUNs as one immutable snapshot, replaced as a whole when tgtadm changes it.
#[derive(Default)]
pub struct LunSet {
    pub map: BTreeMap<u64, Arc<Lun>>,
    /// LUN numbers, sorted, for REPORT LUNS.
    pub numbers: Vec<u64>,
}

impl LunSet {
    pub fn new(map: BTreeMap<u64, Arc<Lun>>) -> LunSet {
        let numbers = map.keys().copied().collect();
        LunSet { map, numbers }
    }
}

/// What tgtadm changes about a target at run time.
#[derive(Debug, Clone)]
pub struct TargetMgmt {
    pub state: TargetState,
    pub acl: Acl,
    pub auth: AuthBinding,
    /// Session keys set with `--op update` that numatgt shows but does not negotiate
    /// differently (e.g. `DataPDUInOrder`), in the order they were set.
    pub extra: Vec<(String, String)>,
}

/// One target: its name, LUNs and access rules.
pub struct Target {
    pub tid: u32,
    pub iqn: String,
    pub alias: Option<String>,
    /// The LLD the target was made for (`driver:` in the configuration, tgtadm's `--lld`):
    /// recorded, shown (`Driver:` in `--op show`) and used to split tgtadm's per-LLD target
    /// lists as tgtd does. It does not limit the transports: every target is reachable over
    /// every portal, TCP and iSER.
    pub driver: config::Driver,
    luns: RwLock<Arc<LunSet>>,
    /// Bumped after every change of `luns`: event threads keep a snapshot per connection
    /// and only re-read the table when this moved (one load of a rarely written word per
    /// command, instead of a lock and a reference count shared by every node).
    luns_gen: std::sync::atomic::AtomicU64,
    /// The target's iSCSI limits and offers (global parameters merged with its own), for new
    /// sessions.
    conn_config: RwLock<ConnConfig>,
    pub mgmt: Mutex<TargetMgmt>,
    /// ALUA: this gateway's port group (also the iSCSI target portal group tag) and peers;
    /// set while the target has no LUN and no session ([`Target::set_alua`]).
    alua: RwLock<Arc<config::AluaConfig>>,
    /// The target's own session limit (`max_sessions`, tgtadm `MaxSessions`); 0 = none.
    max_sessions: AtomicU32,
}

/// A listening portal (its bound address) and its NOP-In settings, if it has its own.
#[derive(Debug, Clone)]
pub struct Portal {
    pub addr: SocketAddr,
    pub nop_interval: Option<u32>,
    pub nop_count: Option<u32>,
}

impl Target {
    pub fn new(
        tid: u32,
        iqn: String,
        alias: Option<String>,
        luns: BTreeMap<u64, Arc<Lun>>,
        conn_config: ConnConfig,
        acl: Acl,
    ) -> Target {
        Target {
            tid,
            iqn,
            alias,
            driver: config::Driver::Iscsi,
            luns: RwLock::new(Arc::new(LunSet::new(luns))),
            luns_gen: std::sync::atomic::AtomicU64::new(0),
            conn_config: RwLock::new(conn_config),
            mgmt: Mutex::new(TargetMgmt {
                state: TargetState::Ready,
                acl,
                auth: AuthBinding::default(),
                extra: Vec::new(),
            }),
            alua: RwLock::new(Arc::new(config::AluaConfig::default())),
            max_sessions: AtomicU32::new(0),
        }
    }

    /// The same target with ALUA settings `alua` (its LUNs must have been opened with them).
    pub fn with_alua(self, alua: config::AluaConfig) -> Target {
        self.set_alua(alua);
        self
    }

    /// The target's ALUA settings now.
    pub fn alua(&self) -> Arc<config::AluaConfig> {
        Arc::clone(&self.alua.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces the ALUA settings. Only for a target without LUNs (each LUN was opened with
    /// the settings of its time: its state machine, its owner's lock) and without sessions
    /// (they logged in with the old group as their portal group tag): management checks.
    pub fn set_alua(&self, alua: config::AluaConfig) {
        *self.alua.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(alua);
    }

    /// The iSCSI target portal group tag: the ALUA target port group.
    pub fn portal_group_tag(&self) -> u16 {
        self.alua().group
    }

    /// The target's own session limit, if it has one.
    pub fn max_sessions(&self) -> Option<u32> {
        Some(self.max_sessions.load(Ordering::Relaxed)).filter(|&n| n != 0)
    }

    /// Sets (or, `None`, removes) the target's own session limit; logged-in sessions
    /// above a lowered limit stay, new logins are refused until there is room.
    pub fn set_max_sessions(&self, n: Option<u32>) {
        self.max_sessions.store(n.unwrap_or(0), Ordering::Relaxed);
    }

    /// The same target made for LLD `driver` ([`Target::new`] makes `iscsi` targets).
    pub fn with_driver(mut self, driver: config::Driver) -> Target {
        self.driver = driver;
        self
    }

    /// The current LUNs (cheap: a read lock and an `Arc` clone).
    pub fn lun_set(&self) -> Arc<LunSet> {
        Arc::clone(&self.luns.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replace the LUN table through `f` (management only); returns what `f` returns.
    pub fn update_luns<R>(&self, f: impl FnOnce(&mut BTreeMap<u64, Arc<Lun>>) -> R) -> R {
        let mut guard = self.luns.write().unwrap_or_else(|p| p.into_inner());
        let mut map = guard.map.clone();
        let r = f(&mut map);
        *guard = Arc::new(LunSet::new(map));
        self.luns_gen
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        r
    }

    /// Changes whenever the LUN table does (see [`Target::lun_set`]).
    pub fn luns_generation(&self) -> u64 {
        self.luns_gen.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn conn_config(&self) -> ConnConfig {
        self.conn_config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn update_conn_config<R>(&self, f: impl FnOnce(&mut ConnConfig) -> R) -> R {
        f(&mut self.conn_config.write().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn mgmt(&self) -> std::sync::MutexGuard<'_, TargetMgmt> {
        self.mgmt.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn allows(&self, initiator: &str, peer: SocketAddr) -> bool {
        self.mgmt().acl.allows(initiator, peer.ip())
    }
}

/// Something the registry asks an event thread to do to one of its connections.
pub trait ConnControl: Send + Sync {
    /// Close a connection (session reinstatement, forced logout).
    fn close(&self, id: ConnId, reason: &'static str);
}

#[derive(Debug, Clone)]
struct SessionEntry {
    owner: ConnId,
    tsih: u16,
    target: String,
    alias: Option<String>,
    peer: SocketAddr,
    transport: config::Driver,
}

/// One logged-in normal session, as tgtadm shows it (one connection per session here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    pub tsih: u16,
    pub initiator: String,
    pub alias: Option<String>,
    pub peer: SocketAddr,
    /// Connection id (always 0: one connection per session).
    pub cid: u16,
    pub owner: ConnId,
    /// The transport the session's connection runs over (`iscsi`: TCP, `iser`: RDMA).
    pub transport: config::Driver,
}

/// Daemon-wide state changed with `--mode sys --op update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemState {
    pub offline: bool,
    pub debug: bool,
}

/// A session's I_T nexus: initiator name, ISID, target name (lower case).
pub(crate) type NexusKey = (String, [u8; 6], String);

/// Targets, portals and the session table.
pub struct Registry {
    targets: RwLock<Vec<Arc<Target>>>,
    portals: RwLock<Vec<Portal>>,
    /// The iSER (RDMA) portals the runtime listens on (set once bound).
    iser_portals: RwLock<Vec<Portal>>,
    /// Limits for connections before login picks a target (and for discovery sessions).
    default_config: ConnConfig,
    /// Logged-in sessions by I_T nexus: initiator name, ISID and target name (lower case) —
    /// the same initiator port logged in to two targets has two sessions (RFC 7143 4.4.2).
    sessions: Mutex<HashMap<NexusKey, SessionEntry>>,
    /// TSIHs granted to normal logins that have not authenticated yet, by connection, with
    /// their target (lower case): they count against the session limits.
    pending: Mutex<HashMap<ConnId, (u16, String)>>,
    /// The resource limits in force and their refusals.
    pub limits: crate::limits::Limits,
    next_tsih: AtomicU16,
    accounts: Mutex<Accounts>,
    system: Mutex<SystemState>,
    /// Next block-cache identity for a LUN made at run time.
    next_cache_id: AtomicU32,
    /// The daemon's state directory (persistent reservations), set once at start.
    state_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// Next I_T nexus identity.
    next_nexus: std::sync::atomic::AtomicU64,
}

/// Portal group tag of every portal (one portal group, as tgtd's default).
pub const PORTAL_GROUP_TAG: u16 = 1;

impl Registry {
    /// Where the daemon keeps state across restarts (set once, at start).
    pub fn set_state_dir(&self, dir: std::path::PathBuf) {
        let _ = self.state_dir.set(dir);
    }

    pub fn state_dir(&self) -> Option<&std::path::Path> {
        self.state_dir.get().map(|p| p.as_path())
    }

    /// A fresh I_T nexus identity for a session.
    pub fn next_nexus_id(&self) -> scsi::NexusId {
        scsi::NexusId(
            self.next_nexus
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }

    pub fn new(
        targets: Vec<Arc<Target>>,
        portals: Vec<Portal>,
        default_config: ConnConfig,
    ) -> Self {
        let next_cache_id = targets
            .iter()
            .flat_map(|t| {
                t.lun_set()
                    .map
                    .values()
                    .map(|l| l.cache_id + 1)
                    .collect::<Vec<_>>()
            })
            .max()
            .unwrap_or(0);
        Registry {
            targets: RwLock::new(targets),
            portals: RwLock::new(portals),
            iser_portals: RwLock::new(Vec::new()),
            default_config,
            sessions: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            limits: crate::limits::Limits::default(),
            next_tsih: AtomicU16::new(1),
            accounts: Mutex::new(Accounts::default()),
            system: Mutex::new(SystemState {
                offline: false,
                debug: false,
            }),
            next_cache_id: AtomicU32::new(next_cache_id),
            state_dir: std::sync::OnceLock::new(),
            next_nexus: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Change the target list (management only).
    pub fn update_targets<R>(&self, f: impl FnOnce(&mut Vec<Arc<Target>>) -> R) -> R {
        f(&mut self.targets.write().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn target_by_tid(&self, tid: u32) -> Option<Arc<Target>> {
        self.targets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|t| t.tid == tid)
            .cloned()
    }

    /// The global iSCSI defaults a target made by tgtadm starts from.
    pub fn default_config(&self) -> &ConnConfig {
        &self.default_config
    }

    /// The listening portals, in the order they were added.
    pub fn portals(&self) -> Vec<Portal> {
        self.portals
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The iSER portals are listening on `v` (the runtime calls this after binding them;
    /// empty: no iSER).
    pub fn set_iser_portals(&self, v: Vec<Portal>) {
        *self.iser_portals.write().unwrap_or_else(|p| p.into_inner()) = v;
    }

    /// The listening iSER portals, in the order they were set.
    pub fn iser_portals(&self) -> Vec<Portal> {
        self.iser_portals
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A portal was bound at run time (`--mode portal --op new`).
    pub fn add_portal(&self, p: Portal) {
        self.portals
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(p);
    }

    /// An iSER portal was bound at run time.
    #[cfg_attr(not(feature = "iser"), allow(dead_code))]
    pub fn add_iser_portal(&self, p: Portal) {
        self.iser_portals
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(p);
    }

    /// An iSER portal was closed at run time.
    #[cfg_attr(not(feature = "iser"), allow(dead_code))]
    pub fn remove_iser_portal(&self, addr: SocketAddr) {
        self.iser_portals
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p.addr != addr);
    }

    /// A portal was closed at run time.
    pub fn remove_portal(&self, addr: SocketAddr) {
        self.portals
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p.addr != addr);
    }

    pub fn accounts(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn system(&self) -> std::sync::MutexGuard<'_, SystemState> {
        self.system.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The exported LUN whose block-cache identity is `id` (the write-back flushers find a
    /// dirty block's LUN this way; not on the per-command path).
    pub fn lun_by_cache_id(&self, id: u32) -> Option<Arc<Lun>> {
        let targets = self.targets.read().unwrap_or_else(|p| p.into_inner());
        targets
            .iter()
            .find_map(|t| t.lun_set().map.values().find(|l| l.cache_id == id).cloned())
    }

    /// A fresh block-cache identity for a LUN made at run time.
    pub fn alloc_cache_id(&self) -> u32 {
        self.next_cache_id.fetch_add(1, Ordering::Relaxed)
    }

    /// CHAP credentials for a normal session to `target` (None: discovery sessions).
    pub fn chap_credentials(&self, target: Option<&str>) -> ChapCredentials {
        let binding = match target {
            Some(name) => match self.target(name) {
                Some(t) => t.mgmt().auth.clone(),
                None => return ChapCredentials::default(),
            },
            None => self.accounts().discovery.clone(),
        };
        self.accounts().resolve(&binding)
    }

    /// Logged-in sessions of target `iqn`, by TSIH.
    pub fn sessions_of(&self, iqn: &str) -> Vec<SessionView> {
        let s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<SessionView> = s
            .iter()
            .filter(|(_, e)| e.target.eq_ignore_ascii_case(iqn))
            .map(|((name, _, _), e)| SessionView {
                tsih: e.tsih,
                initiator: name.clone(),
                alias: e.alias.clone(),
                peer: e.peer,
                cid: 0,
                owner: e.owner,
                transport: e.transport,
            })
            .collect();
        v.sort_by_key(|x| x.tsih);
        v
    }

    pub fn target(&self, iqn: &str) -> Option<Arc<Target>> {
        let targets = self.targets.read().unwrap_or_else(|p| p.into_inner());
        targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .cloned()
    }

    pub fn targets(&self) -> Vec<Arc<Target>> {
        self.targets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn alloc_tsih(&self) -> u16 {
        loop {
            let t = self.next_tsih.fetch_add(1, Ordering::Relaxed);
            if t != 0 {
                return t;
            }
        }
    }

    /// Room for one more session of `target` (lower case) for the login of connection
    /// `me` from I_T nexus `key`? If so it is reserved (as pending, with `tsih`) and `None`
    /// returned; else the limit that is full, with its value. A reinstatement (the nexus
    /// has a session already) replaces that session and always has room.
    pub(crate) fn reserve_session(
        &self,
        me: ConnId,
        tsih: u16,
        key: &NexusKey,
        own_limit: Option<u32>,
    ) -> Option<(crate::limits::Limit, usize)> {
        use crate::limits::Limit;
        let target = &key.2;
        // pending first, then sessions: no other path holds both, so no deadlock; a login
        // moving from one to the other meanwhile may be missed once (one session over)
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if !sessions.contains_key(key) {
            let max = self.limits.max_sessions();
            if sessions.len() + pending.len() >= max {
                return Some((Limit::Sessions, max));
            }
            if let Some(own) = own_limit {
                let of_target = sessions
                    .values()
                    .filter(|e| e.target.eq_ignore_ascii_case(target))
                    .count()
                    + pending.values().filter(|(_, t)| t == target).count();
                if of_target >= own as usize {
                    return Some((Limit::TargetSessions, own as usize));
                }
            }
        }
        drop(sessions);
        pending.insert(me, (tsih, target.clone()));
        None
    }

    /// A connection went away: drop the session entries it owned.
    /// A session moved from the previous numatgtd (live upgrade) on connection `id`: into
    /// the session table as a login would have put it, and its TSIH never given again.
    pub fn adopt_session(
        &self,
        id: ConnId,
        info: &iscsi_proto::SessionInfo,
        target: &str,
        peer: SocketAddr,
        transport: config::Driver,
    ) {
        let key = (
            info.initiator_name.clone(),
            info.isid,
            target.to_ascii_lowercase(),
        );
        self.keep_tsih(info.tsih);
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                key,
                SessionEntry {
                    owner: id,
                    tsih: info.tsih,
                    target: target.to_string(),
                    alias: info.params.initiator_alias.clone(),
                    peer,
                    transport,
                },
            );
    }

    /// TSIH `tsih` is in use by a session from the previous numatgtd: logins get others.
    pub fn keep_tsih(&self, tsih: u16) {
        let _ = self
            .next_tsih
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n <= tsih && tsih != u16::MAX).then(|| tsih + 1)
            });
    }

    pub fn connection_closed(&self, id: ConnId) {
        let mut s = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        s.retain(|_, e| e.owner != id);
        drop(s);
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// The connection configuration for a connection that reached us on `local`, before
    /// login (or for a target's `base` limits): the portal's own NOP-In settings win.
    pub fn config_for(&self, base: Option<&ConnConfig>, local: SocketAddr) -> ConnConfig {
        let mut c = base.unwrap_or(&self.default_config).clone();
        c.login_timeout_ms = self.limits.login_timeout_ms();
        if let Some(p) = self.portal_of(local) {
            if let Some(i) = p.nop_interval {
                c.nop_interval_ms = u64::from(i) * 1000;
            }
            if let Some(n) = p.nop_count {
                c.nop_count = n;
            }
        }
        c
    }

    fn portal_of(&self, local: SocketAddr) -> Option<Portal> {
        let portals = self.portals.read().unwrap_or_else(|p| p.into_inner());
        portals
            .iter()
            .find(|p| p.addr == local)
            .or_else(|| {
                portals
                    .iter()
                    .find(|p| p.addr.ip().is_unspecified() && p.addr.port() == local.port())
            })
            .cloned()
    }

    /// The SendTargets addresses for a discovery session that reached us on `local` over
    /// `transport`: the iSER portals over iSER, the TCP portals over TCP; `tpgt` is the
    /// target's portal group tag.
    fn portal_strings(
        &self,
        local: SocketAddr,
        transport: config::Driver,
        tpgt: u16,
    ) -> Vec<String> {
        let portals = match transport {
            config::Driver::Iscsi => self.portals(),
            config::Driver::Iser => self.iser_portals(),
        };
        portals
            .iter()
            .map(|p| p.addr)
            .map(|p| {
                // a wildcard portal is advertised with the address the initiator reached us on
                let addr = if p.ip().is_unspecified() {
                    SocketAddr::new(local.ip(), p.port())
                } else {
                    p
                };
                format!("{},{}", addr, tpgt)
            })
            .collect()
    }
}
