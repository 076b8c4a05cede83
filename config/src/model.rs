//! The validated configuration model handed to the daemon: portals, NUMA and
//! thread sizing, iSCSI negotiation defaults, targets with their ACLs, LUNs and QoS limits.
//! Owns the defaults and the small decisions the daemon asks of it (does this
//! initiator pass a target's ACL, what are a target's effective iSCSI values,
//! the `--demo` configuration). Values here have already passed validation
//! when they come from [`crate::parse`].

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

pub use crate::auth::{Account, DiscoveryAuth};
pub use crate::kinds::{BsOflags, BsType, DeviceType, Driver, SenseFormat, TargetState};
pub use crate::net::AddressRule;
pub use crate::qos::Qos;

/// Default portal when the file lists none: all IPv4 addresses, port 3260.
pub const DEFAULT_PORTAL: &str = "0.0.0.0:3260";
/// Portal of `numatgtd --demo` when no `--iscsi` option is given.
pub const DEMO_PORTAL: &str = "127.0.0.1:3260";
/// Target name exported by `numatgtd --demo`.
pub const DEMO_IQN: &str = "iqn.2026-11.org.numatgt:demo";
/// Backing file name (inside the state directory) of the demo LUN.
pub const DEMO_IMAGE: &str = "demo.img";
/// Size of the demo LUN's backing file.
pub const DEMO_SIZE: u64 = 1 << 30;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Listening portals; never empty after parsing (default `0.0.0.0:3260`).
    pub portals: Vec<PortalConfig>,
    /// iSER (RDMA) portals (`iser_portals:`, same entries as `portals:`). `None` (key
    /// absent) is tgtd's default: iSER on [`DEFAULT_PORTAL`] when the host has an RDMA
    /// device, silently nothing otherwise; `Some(list)` is exactly these portals, and an
    /// empty list switches iSER off. See [`Config::iser_listen`].
    pub iser_portals: Option<Vec<PortalConfig>>,
    /// NUMA layout (`numa:`).
    pub numa: NumaConfig,
    /// Thread counts (`threads:`).
    pub threads: ThreadConfig,
    /// Global iSCSI negotiation values; a target may override some of them.
    pub iscsi: IscsiParams,
    /// The NUMA block cache (`cache:`); a LUN may override the mode.
    pub cache: CacheSettings,
    /// The affinity router (`router:`).
    pub router: RouterSettings,
    /// The metrics and status page HTTP server (`metrics:`).
    pub metrics: MetricsSettings,
    /// Resource limits (`limits:`): sessions, connections, login time, management clients.
    pub limits: LimitsSettings,
    /// CHAP accounts (`accounts:`), referenced by name from targets and
    /// `discovery_auth`.
    pub accounts: Vec<Account>,
    /// CHAP for discovery sessions (`discovery_auth:`).
    pub discovery_auth: DiscoveryAuth,
    /// The exported targets (`targets:`).
    pub targets: Vec<TargetConfig>,
}

impl Default for Config {
    /// No targets, one portal `0.0.0.0:3260`, everything else default.
    fn default() -> Self {
        Config {
            portals: vec![PortalConfig::new(default_portal_addr())],
            iser_portals: None,
            numa: NumaConfig::default(),
            threads: ThreadConfig::default(),
            iscsi: IscsiParams::default(),
            cache: CacheSettings::default(),
            router: RouterSettings::default(),
            metrics: MetricsSettings::default(),
            limits: LimitsSettings::default(),
            accounts: Vec::new(),
            discovery_auth: DiscoveryAuth::default(),
            targets: Vec::new(),
        }
    }
}

pub(crate) fn default_portal_addr() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], crate::net::ISCSI_PORT))
}

impl Config {
    /// The configuration of `numatgtd --demo`: target `iqn.2026-11.org.numatgt:demo`
    /// with LUN 1 backed by `STATE_DIR/demo.img` (created sparse, 1 GiB, if
    /// missing), 512-byte blocks, write cache on, open to every initiator.
    /// `portals` empty means `127.0.0.1:3260`. The target has no fixed tid
    /// (`None`), so it can be added to a parsed configuration without clashing.
    pub fn demo(state_dir: &Path, portals: &[SocketAddr]) -> Config {
        let portals = if portals.is_empty() {
            vec![PortalConfig::new(SocketAddr::from((
                [127, 0, 0, 1],
                crate::net::ISCSI_PORT,
            )))]
        } else {
            portals.iter().map(|&a| PortalConfig::new(a)).collect()
        };
        Config {
            portals,
            iser_portals: None,
            numa: NumaConfig::default(),
            threads: ThreadConfig::default(),
            iscsi: IscsiParams::default(),
            cache: CacheSettings::default(),
            router: RouterSettings::default(),
            metrics: MetricsSettings::default(),
            limits: LimitsSettings::default(),
            accounts: Vec::new(),
            discovery_auth: DiscoveryAuth::default(),
            targets: vec![TargetConfig {
                luns: vec![LunConfig {
                    create_size: Some(DEMO_SIZE),
                    ..LunConfig::new(1, state_dir.join(DEMO_IMAGE))
                }],
                ..TargetConfig::new(DEMO_IQN)
            }],
        }
    }

    /// The iSER portals to listen on, given whether the host has an RDMA device: the
    /// configured list, or (`iser_portals` absent) `0.0.0.0:3260` with a device and none
    /// without one, as tgtd's iSER driver.
    pub fn iser_listen(&self, rdma_present: bool) -> Vec<PortalConfig> {
        match &self.iser_portals {
            Some(list) => list.clone(),
            None if rdma_present => vec![PortalConfig::new(default_portal_addr())],
            None => Vec::new(),
        }
    }

    /// The account called `user`.
    pub fn account(&self, user: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.user == user)
    }

    /// Advisories about a valid configuration that tgtd would also accept
    /// (today: CHAP secrets shorter than 12 bytes). The daemon logs them.
    pub fn warnings(&self) -> Vec<String> {
        self.accounts
            .iter()
            .filter_map(|a| crate::auth::secret_advice(&a.user, &a.password))
            .collect()
    }

    /// The target named `iqn` (iSCSI names compare case-insensitively).
    pub fn target(&self, iqn: &str) -> Option<&TargetConfig> {
        self.targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
    }

    /// Serialises the configuration back to the YAML format [`crate::parse`] reads
    /// (defaults written out explicitly). `parse(&c.to_yaml(), ..)` gives back `c`.
    pub fn to_yaml(&self) -> String {
        crate::raw::to_yaml(self)
    }
}

/// One listening portal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalConfig {
    /// The address and port to listen on.
    pub addr: SocketAddr,
    /// Seconds between NOP-In pings on this portal's connections (0 = off);
    /// `None` = the global `iscsi.NopInterval`.
    pub nop_interval: Option<u32>,
    /// Unanswered pings before a connection is dropped; `None` = global `iscsi.NopCount`.
    pub nop_count: Option<u32>,
}

impl PortalConfig {
    /// A portal at `addr` with the global NOP settings.
    pub fn new(addr: SocketAddr) -> Self {
        PortalConfig {
            addr,
            nop_interval: None,
            nop_count: None,
        }
    }

    /// Parses tgtd's `--iscsi` option value:
    /// `portal=IP:PORT[,nop_interval=S][,nop_count=N]` (IPv6 as `[addr]:port`;
    /// a bare IP means port 3260). The `source` of errors is `--iscsi`.
    pub fn from_tgtd_option(text: &str) -> Result<PortalConfig, crate::ConfigError> {
        crate::validate::portal_from_option(text)
    }
}

/// NUMA layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NumaConfig {
    /// `None` (`auto`) = the machine's real topology; `Some(n)` = split the
    /// CPUs into `n` virtual nodes (1..=256).
    pub nodes: Option<usize>,
}

/// Thread counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadConfig {
    /// Event (network) threads in total, spread over the nodes; `None`
    /// (`auto`) = one per CPU. 1..=4096.
    pub event_threads: Option<usize>,
    /// Backing-store I/O threads per node; `None` = the daemon's default
    /// (or its `-t/--nr_iothreads` option). 1..=256.
    pub io_threads: Option<usize>,
    /// How write-back reaches the backing stores.
    pub io_engine: IoEngine,
    /// Microseconds an event thread keeps polling its sockets without sleeping after its
    /// last piece of work (0 = sleep at once, the default). Trades CPU for latency at low
    /// queue depth: a sleeping thread is woken by the kernel, which costs tens of µs in a VM.
    pub busy_poll_us: u32,
}

/// How the cache's write-back reaches the backing stores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum IoEngine {
    /// `auto`: io_uring where the kernel allows it, else `threads` (the log says why).
    #[default]
    Auto,
    /// `io_uring`: one flusher per node writes whole batches through its own ring; the
    /// daemon does not start when io_uring is unavailable.
    Uring,
    /// `threads`: flusher threads writing with pwrite, one block at a time each.
    Threads,
}

impl IoEngine {
    /// Every engine, in the order the documentation lists them.
    pub const ALL: [IoEngine; 3] = [IoEngine::Auto, IoEngine::Uring, IoEngine::Threads];

    /// The configuration word: `auto`, `io_uring` or `threads`.
    pub fn as_str(self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::Uring => "io_uring",
            IoEngine::Threads => "threads",
        }
    }

    /// Parses `auto` / `io_uring` / `threads` (any case, surrounding blanks ignored).
    pub fn parse(text: &str) -> Option<IoEngine> {
        let t = text.trim();
        IoEngine::ALL
            .into_iter()
            .find(|m| t.eq_ignore_ascii_case(m.as_str()))
    }
}

/// How a LUN's data goes between the network and the backing store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// `numa`: the NUMA-aware block cache (blocks in memory of their home node).
    #[default]
    Numa,
    /// `off`: O_DIRECT straight to the backing store, no cache.
    Off,
    /// `page`: buffered I/O through the kernel page cache (as tgtd's rdwr backend).
    Page,
}

impl CacheMode {
    /// Every mode, in the order the documentation lists them.
    pub const ALL: [CacheMode; 3] = [CacheMode::Numa, CacheMode::Off, CacheMode::Page];

    /// The configuration word: `numa`, `off` or `page`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Numa => "numa",
            CacheMode::Off => "off",
            CacheMode::Page => "page",
        }
    }

    /// Parses `numa` / `off` / `page` (any case, surrounding blanks ignored).
    pub fn parse(text: &str) -> Option<CacheMode> {
        let t = text.trim();
        CacheMode::ALL
            .into_iter()
            .find(|m| t.eq_ignore_ascii_case(m.as_str()))
    }
}

impl std::fmt::Display for CacheMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The write-back throttle: dirty data per node above which writers wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirtyLimit {
    /// `N%` of `size_per_node`, 1..=100.
    Percent(u8),
    /// An absolute number of bytes per node, `block_size..=size_per_node`.
    Bytes(u64),
}

impl DirtyLimit {
    /// The limit in bytes for a cache of `size_per_node` bytes per node.
    /// (A percentage rounds down; above 100 % it is capped at `size_per_node`.)
    pub fn bytes(self, size_per_node: u64) -> u64 {
        match self {
            DirtyLimit::Percent(p) => {
                let p = u128::from(p.min(100));
                (u128::from(size_per_node) * p / 100) as u64
            }
            DirtyLimit::Bytes(b) => b,
        }
    }
}

impl Default for DirtyLimit {
    /// 25 % of the cache.
    fn default() -> Self {
        DirtyLimit::Percent(25)
    }
}

impl std::fmt::Display for DirtyLimit {
    /// `25%` or a size in the short form `parse_size` reads (`64M`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirtyLimit::Percent(p) => write!(f, "{p}%"),
            DirtyLimit::Bytes(b) => f.write_str(&crate::size::format_size(*b)),
        }
    }
}

/// How much cache memory each NUMA node gets (`cache.size_per_node`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CacheSize {
    /// `auto`: derived from the node's memory when the daemon starts
    /// ([`CacheSize::auto_bytes`] is the rule).
    #[default]
    Auto,
    /// A fixed number of bytes per node (rounded down to whole blocks).
    Bytes(u64),
}

/// The share of a node's memory `auto` takes: a quarter of it...
pub const AUTO_CACHE_SHARE_DIV: u64 = 4;
/// ...but at most half of what is free on the node when the daemon starts.
pub const AUTO_CACHE_FREE_DIV: u64 = 2;
/// The smallest cache `auto` (or a fallback for lack of memory) gives a node.
pub const AUTO_CACHE_MIN: u64 = 64 << 20;

impl CacheSize {
    /// The `auto` rule for one node with `total` bytes of memory of which `free` are
    /// free now: a quarter of `total`, at most half of `free`, at least [`AUTO_CACHE_MIN`]
    /// (the kernel's page cache, the daemon and everything else keep the rest). Rounded
    /// down to whole `block_size` blocks.
    pub fn auto_bytes(total: u64, free: u64, block_size: u32) -> u64 {
        let want = (total / AUTO_CACHE_SHARE_DIV)
            .min(free / AUTO_CACHE_FREE_DIV)
            .max(AUTO_CACHE_MIN);
        let bs = u64::from(block_size.max(1));
        want / bs * bs
    }

    /// The bytes per node: the fixed size, or `auto` for a node as [`CacheSize::auto_bytes`].
    pub fn resolve(self, total: u64, free: u64, block_size: u32) -> u64 {
        match self {
            CacheSize::Bytes(b) => b,
            CacheSize::Auto => CacheSize::auto_bytes(total, free, block_size),
        }
    }

    /// The fixed size, if one was configured.
    pub fn fixed(self) -> Option<u64> {
        match self {
            CacheSize::Bytes(b) => Some(b),
            CacheSize::Auto => None,
        }
    }
}

impl std::fmt::Display for CacheSize {
    /// `auto` or a size in the short form `parse_size` reads (`256M`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheSize::Auto => f.write_str("auto"),
            CacheSize::Bytes(b) => f.write_str(&crate::size::format_size(*b)),
        }
    }
}

/// The NUMA block cache (`cache:` section). Sizes are per NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    /// Default mode of every LUN (a LUN's own `cache:` overrides it). Default `numa`.
    pub mode: CacheMode,
    /// Bytes of cache blocks per node (rounded down to whole blocks), or `auto` (the
    /// default: see [`CacheSize::auto_bytes`]); a fixed size holds at least 16 blocks and
    /// one block per partition.
    pub size_per_node: CacheSize,
    /// Cache block size: a power of two, 4 KiB..=1 MiB. Default 64 KiB.
    pub block_size: u32,
    /// Neighbouring blocks sharing a partition: a power of two, 1..=4096. Default 8.
    pub group_blocks: u32,
    /// Independent partitions (locks) per node, 1..=1024. Default 16.
    pub partitions_per_node: u32,
    /// Back the cache arenas with huge pages when the system has them. Default true.
    pub huge_pages: bool,
    /// Write-back throttle per node. Default 25 %.
    pub dirty_limit: DirtyLimit,
    /// Blocks read ahead on a sequential miss, 0 (off, default)..=1024.
    pub read_ahead: u32,
    /// Save the cache's block list at a clean stop and load those blocks again in the
    /// background at the next start. Default false.
    pub warm_restart: bool,
    /// Whose memory the cache arenas are, so whether a live upgrade hands it on. Default
    /// `auto`.
    pub memory: CacheMemory,
}

/// `cache.memory`: the arenas in memory files (memfd) a live upgrade hands to the new
/// executable, which then starts with the blocks in memory, or in the process's own memory
/// (read back from the backing stores after an upgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMemory {
    /// `shared` when the kernel gives shared memory huge pages (shared-memory transparent
    /// huge pages enabled, or enough free hugetlbfs pages) or `huge_pages` is off;
    /// `private` otherwise.
    #[default]
    Auto,
    /// Memory files, whatever pages back them.
    Shared,
    /// Anonymous memory of the process.
    Private,
}

impl CacheMemory {
    /// Every choice, in the order the documentation lists them.
    pub const ALL: [CacheMemory; 3] =
        [CacheMemory::Auto, CacheMemory::Shared, CacheMemory::Private];

    /// The configuration word: `auto`, `shared` or `private`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMemory::Auto => "auto",
            CacheMemory::Shared => "shared",
            CacheMemory::Private => "private",
        }
    }

    /// Parses [`CacheMemory::as_str`]'s words (any case, blanks around ignored).
    pub fn parse(text: &str) -> Option<CacheMemory> {
        let t = text.trim();
        CacheMemory::ALL
            .into_iter()
            .find(|m| t.eq_ignore_ascii_case(m.as_str()))
    }
}

impl Default for CacheSettings {
    /// `numa`, `auto` size per node, 64 KiB blocks in groups of 8, 16 partitions per
    /// node, huge pages, 25 % dirty, no read-ahead.
    fn default() -> Self {
        CacheSettings {
            mode: CacheMode::Numa,
            size_per_node: CacheSize::Auto,
            block_size: 64 << 10,
            group_blocks: 8,
            partitions_per_node: 16,
            huge_pages: true,
            dirty_limit: DirtyLimit::default(),
            read_ahead: 0,
            warm_restart: false,
            memory: CacheMemory::Auto,
        }
    }
}

impl CacheSettings {
    /// The bytes per node for a node with `total` bytes of memory, `free` of them free:
    /// a fixed size as configured, `auto` by [`CacheSize::auto_bytes`] but never fewer
    /// blocks than the cache's shape needs (16, and one per partition).
    pub fn resolve_size(&self, total: u64, free: u64) -> u64 {
        let bs = u64::from(self.block_size.max(1));
        match self.size_per_node {
            CacheSize::Bytes(b) => b,
            CacheSize::Auto => {
                CacheSize::auto_bytes(total, free, self.block_size).max(bs * self.min_blocks())
            }
        }
    }

    /// These settings with `size` per node (numatgtd's `--cache-size`), checked as the
    /// file's `cache.size_per_node` is: a fixed size holds the blocks the shape needs and
    /// twice the read-ahead (an absolute dirty limit is kept within the cache at start).
    pub fn with_size(self, size: CacheSize) -> Result<CacheSettings, String> {
        if let CacheSize::Bytes(b) = size {
            let blocks = self.blocks_per_node(b);
            if blocks < self.min_blocks() {
                return Err(format!(
                    "{} holds {blocks} cache blocks of {}, fewer than {} (the cache needs at \
                     least 16 blocks per node and one per partition)",
                    crate::format_size(b),
                    crate::format_size(self.block_size.into()),
                    self.min_blocks()
                ));
            }
            if u64::from(self.read_ahead) > blocks / 2 {
                return Err(format!(
                    "{} holds {blocks} cache blocks, fewer than twice cache.read_ahead ({})",
                    crate::format_size(b),
                    self.read_ahead
                ));
            }
        }
        Ok(CacheSettings {
            size_per_node: size,
            ..self
        })
    }

    /// The fewest blocks a node's cache may have: 16, and one per partition.
    pub fn min_blocks(&self) -> u64 {
        16u64.max(u64::from(self.partitions_per_node))
    }

    /// Whole cache blocks per node for a cache of `bytes_per_node`.
    pub fn blocks_per_node(&self, bytes_per_node: u64) -> u64 {
        bytes_per_node / u64::from(self.block_size.max(1))
    }

    /// The dirty limit in bytes per node for a cache of `bytes_per_node`, kept within
    /// one block and the cache (an absolute limit may exceed an `auto` size).
    pub fn dirty_limit_bytes(&self, bytes_per_node: u64) -> u64 {
        let bs = u64::from(self.block_size.max(1));
        self.dirty_limit
            .bytes(bytes_per_node)
            .min(bytes_per_node)
            .max(bs.min(bytes_per_node))
    }
}

/// The affinity router (`router:` section): where a request is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterSettings {
    /// Requests of fewer bytes are served on the connection's own node.
    /// 0..=16 MiB; default 32 KiB.
    pub min_forward_bytes: u64,
    /// A node with more queued requests than this is not sent more work. 1..=65535; default 64.
    pub max_queue: u32,
    /// `false`: every request is served on its connection's node. Default true.
    pub enabled: bool,
}

impl Default for RouterSettings {
    /// Enabled; requests of 32 KiB and more may move; 64 queued requests per node at most.
    fn default() -> Self {
        RouterSettings {
            min_forward_bytes: 32 << 10,
            max_queue: 64,
            enabled: true,
        }
    }
}

/// Default address of the metrics server.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9470";

/// Where the metrics server listens (`metrics.address`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsAddress {
    /// Not configured: [`DEFAULT_METRICS_ADDR`]; when that port is taken (another daemon
    /// runs) the daemon warns and goes on without metrics.
    #[default]
    Default,
    /// `off`: no metrics server.
    Off,
    /// An explicit address: the daemon does not start if it cannot listen there.
    At(SocketAddr),
}

impl MetricsAddress {
    /// The address to listen on, if any.
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            MetricsAddress::Default => Some(SocketAddr::from(([127, 0, 0, 1], 9470))),
            MetricsAddress::Off => None,
            MetricsAddress::At(a) => Some(a),
        }
    }

    /// Parse `off` or `IP:PORT` (`[IPv6]:PORT`).
    pub fn parse(s: &str) -> Result<MetricsAddress, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsAddress::Off);
        }
        s.parse::<SocketAddr>()
            .map(MetricsAddress::At)
            .map_err(|_| {
                format!("`{s}` is not `off` or an address like 127.0.0.1:9470 or [::1]:9470")
            })
    }
}

/// The metrics and status page HTTP server (`metrics:` section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSettings {
    /// Where it listens.
    pub address: MetricsAddress,
    /// Export `numatgt_session_info` (the only series that names initiators). Default false.
    pub session_info: bool,
}

/// Resource limits (`limits:` section). Every limit is on by default, with values no
/// ordinary installation reaches; what exceeds one is refused (a login with status
/// 0x0302 "out of resources", a connection or management client closed at once), logged
/// once per burst and counted in `numatgt_limit_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsSettings {
    /// Logged-in normal sessions, all targets together. 1..=65535 (TSIHs are 16 bits);
    /// default 1024. A target may have a lower limit of its own (`max_sessions`).
    pub max_sessions: u32,
    /// Open iSCSI connections (TCP and iSER, any phase, discovery included).
    /// 1..=1048576; default 4096.
    pub max_connections: u32,
    /// Seconds a connection may spend before it reaches full-feature phase (half-finished
    /// logins, slow-loris). 1..=3600; default 15.
    pub login_timeout: u32,
    /// Management socket clients served at once (tgtadm, numatgtadm). 1..=1024; default 64.
    pub max_mgmt_clients: u32,
}

impl Default for LimitsSettings {
    /// 1024 sessions, 4096 connections, 15 s to log in, 64 management clients.
    fn default() -> Self {
        LimitsSettings {
            max_sessions: 1024,
            max_connections: 4096,
            login_timeout: 15,
            max_mgmt_clients: 64,
        }
    }
}

/// A digest algorithm an iSCSI connection may use (RFC 7143 §13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digest {
    /// `None`
    None,
    /// `CRC32C`
    Crc32c,
}

impl Digest {
    /// The RFC 7143 key value: `None` or `CRC32C`.
    pub fn as_str(self) -> &'static str {
        match self {
            Digest::None => "None",
            Digest::Crc32c => "CRC32C",
        }
    }

    /// Parses `None` / `CRC32C` (any case).
    pub fn parse(text: &str) -> Option<Digest> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("none") {
            Some(Digest::None)
        } else if t.eq_ignore_ascii_case("crc32c") {
            Some(Digest::Crc32c)
        } else {
            None
        }
    }
}

/// iSCSI negotiation values (RFC 7143 §13), with tgtd's key names in YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IscsiParams {
    /// `MaxRecvDataSegmentLength`: what the target accepts. 512..=16777215, default 262144.
    pub max_recv_data_segment_length: u32,
    /// `MaxBurstLength`: 512..=16777215, default 262144.
    pub max_burst_length: u32,
    /// `FirstBurstLength`: 512..=16777215 and <= MaxBurstLength, default 65536.
    pub first_burst_length: u32,
    /// `ImmediateData`, default true.
    pub immediate_data: bool,
    /// `InitialR2T`, default true.
    pub initial_r2t: bool,
    /// `MaxOutstandingR2T`: 1..=65535, default 1.
    pub max_outstanding_r2t: u32,
    /// `HeaderDigest`: allowed, in order of preference; default [None, CRC32C].
    pub header_digest: Vec<Digest>,
    /// `DataDigest`: allowed, in order of preference; default [None, CRC32C].
    pub data_digest: Vec<Digest>,
    /// `MaxQueueCmd`: commands queued per session (CmdSN window). 1..=2048, default 128.
    pub max_queued_commands: u32,
    /// `NopInterval`: seconds between NOP-In pings, 0 = off (default). 0..=86400.
    pub nop_interval: u32,
    /// `NopCount`: unanswered pings before dropping the connection, 0 = never (default). 0..=65535.
    pub nop_count: u32,
    /// `DataPDUInOrder`, default true.
    pub data_pdu_in_order: bool,
    /// `DataSequenceInOrder`, default true.
    pub data_sequence_in_order: bool,
    /// `ErrorRecoveryLevel`: 0..=2, default 0.
    pub error_recovery_level: u8,
    /// `DefaultTime2Wait`: seconds, 0..=3600, default 2.
    pub default_time2wait: u16,
    /// `DefaultTime2Retain`: seconds, 0..=3600, default 20.
    pub default_time2retain: u16,
    /// `MaxConnections`: per session, 1..=65535, default 1.
    pub max_connections: u32,
    /// `MaxXmitDataSegmentLength`: largest data segment the target sends,
    /// further limited by the initiator's MaxRecvDataSegmentLength;
    /// `None` (default) = only the initiator's limit. 512..=16777215.
    pub max_xmit_data_segment_length: Option<u32>,
}

impl Default for IscsiParams {
    /// numatgt's offers from [`iscsi_proto::limits`].
    fn default() -> Self {
        use iscsi_proto::limits as iscsi;
        IscsiParams {
            max_recv_data_segment_length: iscsi::MAX_RECV_DATA_SEGMENT_LENGTH.target_default,
            max_burst_length: iscsi::MAX_BURST_LENGTH.target_default,
            first_burst_length: iscsi::FIRST_BURST_LENGTH.target_default,
            immediate_data: true,
            initial_r2t: true,
            max_outstanding_r2t: iscsi::MAX_OUTSTANDING_R2T.target_default,
            header_digest: vec![Digest::None, Digest::Crc32c],
            data_digest: vec![Digest::None, Digest::Crc32c],
            max_queued_commands: 128,
            nop_interval: 0,
            nop_count: 0,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: iscsi::ERROR_RECOVERY_LEVEL.target_default as u8,
            default_time2wait: iscsi::DEFAULT_TIME2WAIT.target_default as u16,
            default_time2retain: iscsi::DEFAULT_TIME2RETAIN.target_default as u16,
            max_connections: iscsi::MAX_CONNECTIONS.target_default,
            max_xmit_data_segment_length: None,
        }
    }
}

impl IscsiParams {
    /// These values with every field that `o` sets replaced.
    pub fn merged_with(&self, o: &IscsiParamsOverride) -> IscsiParams {
        IscsiParams {
            max_recv_data_segment_length: o
                .max_recv_data_segment_length
                .unwrap_or(self.max_recv_data_segment_length),
            max_burst_length: o.max_burst_length.unwrap_or(self.max_burst_length),
            first_burst_length: o.first_burst_length.unwrap_or(self.first_burst_length),
            immediate_data: o.immediate_data.unwrap_or(self.immediate_data),
            initial_r2t: o.initial_r2t.unwrap_or(self.initial_r2t),
            max_outstanding_r2t: o.max_outstanding_r2t.unwrap_or(self.max_outstanding_r2t),
            header_digest: o
                .header_digest
                .clone()
                .unwrap_or_else(|| self.header_digest.clone()),
            data_digest: o
                .data_digest
                .clone()
                .unwrap_or_else(|| self.data_digest.clone()),
            max_queued_commands: o.max_queued_commands.unwrap_or(self.max_queued_commands),
            nop_interval: o.nop_interval.unwrap_or(self.nop_interval),
            nop_count: o.nop_count.unwrap_or(self.nop_count),
            data_pdu_in_order: o.data_pdu_in_order.unwrap_or(self.data_pdu_in_order),
            data_sequence_in_order: o
                .data_sequence_in_order
                .unwrap_or(self.data_sequence_in_order),
            error_recovery_level: o.error_recovery_level.unwrap_or(self.error_recovery_level),
            default_time2wait: o.default_time2wait.unwrap_or(self.default_time2wait),
            default_time2retain: o.default_time2retain.unwrap_or(self.default_time2retain),
            max_connections: o.max_connections.unwrap_or(self.max_connections),
            max_xmit_data_segment_length: o
                .max_xmit_data_segment_length
                .or(self.max_xmit_data_segment_length),
        }
    }
}

/// Per-target overrides of [`IscsiParams`]; `None` = use the global value.
/// Same keys, ranges and meaning as the global `iscsi` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IscsiParamsOverride {
    /// `MaxRecvDataSegmentLength`.
    pub max_recv_data_segment_length: Option<u32>,
    /// `MaxBurstLength`.
    pub max_burst_length: Option<u32>,
    /// `FirstBurstLength`.
    pub first_burst_length: Option<u32>,
    /// `ImmediateData`.
    pub immediate_data: Option<bool>,
    /// `InitialR2T`.
    pub initial_r2t: Option<bool>,
    /// `MaxOutstandingR2T`.
    pub max_outstanding_r2t: Option<u32>,
    /// `HeaderDigest`, in order of preference.
    pub header_digest: Option<Vec<Digest>>,
    /// `DataDigest`, in order of preference.
    pub data_digest: Option<Vec<Digest>>,
    /// `MaxQueueCmd`.
    pub max_queued_commands: Option<u32>,
    /// `NopInterval`, seconds.
    pub nop_interval: Option<u32>,
    /// `NopCount`.
    pub nop_count: Option<u32>,
    /// `DataPDUInOrder`.
    pub data_pdu_in_order: Option<bool>,
    /// `DataSequenceInOrder`.
    pub data_sequence_in_order: Option<bool>,
    /// `ErrorRecoveryLevel`.
    pub error_recovery_level: Option<u8>,
    /// `DefaultTime2Wait`, seconds.
    pub default_time2wait: Option<u16>,
    /// `DefaultTime2Retain`, seconds.
    pub default_time2retain: Option<u16>,
    /// `MaxConnections`.
    pub max_connections: Option<u32>,
    /// `MaxXmitDataSegmentLength`.
    pub max_xmit_data_segment_length: Option<u32>,
}

impl IscsiParamsOverride {
    /// True when no value is overridden.
    pub fn is_empty(&self) -> bool {
        *self == IscsiParamsOverride::default()
    }
}

/// One exported target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// The target's iSCSI name (iqn./eui./naa.).
    pub iqn: String,
    /// tgtadm target id (1..), unique; `None` = the daemon assigns one.
    pub tid: Option<u32>,
    /// `TargetAlias` sent at login.
    pub alias: Option<String>,
    /// Initiator names allowed to log in; empty or containing `ALL` = any.
    pub allow_initiators: Vec<String>,
    /// Initiator addresses allowed; empty or containing [`AddressRule::All`] = any.
    pub allow_addresses: Vec<AddressRule>,
    /// Overrides of the global `iscsi` values for this target.
    pub iscsi: Option<IscsiParamsOverride>,
    /// `iscsi` (default) or `iser`.
    pub driver: Driver,
    /// `ready` (default) or `offline`.
    pub state: TargetState,
    /// CHAP accounts an initiator may log in as; empty = no CHAP required.
    pub incoming_users: Vec<String>,
    /// CHAP account the target answers with (mutual CHAP).
    pub outgoing_user: Option<String>,
    /// Logged-in sessions this target accepts (`max_sessions`); `None` = only the global
    /// `limits.max_sessions` applies. 1..=65535.
    pub max_sessions: Option<u32>,
    /// The target's logical units.
    pub luns: Vec<LunConfig>,
    /// ALUA: this gateway's port group and its peers (`None`: one group, number 1).
    pub alua: Option<crate::AluaConfig>,
    /// `qos:` the default QoS limits of the target's LUNs: a field a LUN leaves unset is
    /// taken from here ([`LunConfig::effective_qos`]). Each LUN is limited on its own; the
    /// target as a whole is not.
    pub qos: Qos,
}

impl TargetConfig {
    /// A target called `iqn` with no LUNs, open to all, every other field at its default.
    pub fn new(iqn: &str) -> Self {
        TargetConfig {
            iqn: iqn.to_string(),
            tid: None,
            alias: None,
            allow_initiators: Vec::new(),
            allow_addresses: Vec::new(),
            iscsi: None,
            driver: Driver::Iscsi,
            state: TargetState::Ready,
            incoming_users: Vec::new(),
            outgoing_user: None,
            max_sessions: None,
            luns: Vec::new(),
            alua: None,
            qos: Qos::default(),
        }
    }

    /// True when an initiator called `initiator_name` connecting from `addr`
    /// passes both ACL lists (names compare ASCII-case-insensitively; an
    /// IPv4-mapped IPv6 address matches IPv4 rules).
    pub fn allows(&self, initiator_name: &str, addr: IpAddr) -> bool {
        let name_ok = self.allow_initiators.is_empty()
            || self
                .allow_initiators
                .iter()
                .any(|n| n.eq_ignore_ascii_case("all") || n.eq_ignore_ascii_case(initiator_name));
        let addr_ok =
            self.allow_addresses.is_empty() || self.allow_addresses.iter().any(|r| r.matches(addr));
        name_ok && addr_ok
    }

    /// The iSCSI values in force for this target: the global ones with this
    /// target's overrides applied.
    pub fn effective_iscsi(&self, global: &IscsiParams) -> IscsiParams {
        match &self.iscsi {
            Some(o) => global.merged_with(o),
            None => global.clone(),
        }
    }

    /// The LUN numbered `lun`.
    pub fn lun(&self, lun: u64) -> Option<&LunConfig> {
        self.luns.iter().find(|l| l.lun == lun)
    }
}

/// One logical unit of a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LunConfig {
    /// LUN number, 0..=16383.
    pub lun: u64,
    /// Backing file or block device, always absolute; for `bs_type: rbd` the image,
    /// `[pool/]image[@snap]`.
    pub path: PathBuf,
    /// 512 or 4096 (default 512).
    pub block_size: u32,
    /// Default of the Caching mode page WCE bit (default true).
    pub write_cache: bool,
    /// Export write-protected (default false).
    pub readonly: bool,
    /// `size:` create a sparse file of this many bytes if `path` does not
    /// exist; a positive multiple of `block_size`.
    pub create_size: Option<u64>,
    /// INQUIRY T10 vendor id override, 1..=8 printable ASCII.
    pub vendor_id: Option<String>,
    /// INQUIRY product id override, 1..=16 printable ASCII.
    pub product_id: Option<String>,
    /// INQUIRY product revision override, 1..=4 printable ASCII.
    pub product_rev: Option<String>,
    /// Unit serial number override (`serial`, alias `scsi_sn`), 1..=36 printable ASCII.
    pub serial: Option<String>,
    /// `cache:` this LUN's cache mode; `None` = the global `cache.mode`.
    pub cache: Option<CacheMode>,
    /// Device identification (VPD page 0x83) override, 1..=24 printable ASCII (tgt's `scsi_id`).
    pub scsi_id: Option<String>,
    /// Sense data format (default fixed).
    pub sense_format: SenseFormat,
    /// Report removable media (INQUIRY RMB). Default false.
    pub removable: bool,
    /// Thin provisioned: UNMAP / WRITE SAME unmap and the LBP VPD page. Default false.
    pub thin_provisioning: bool,
    /// Online (default true); an offline LUN answers NOT READY.
    pub online: bool,
    /// tgt backing-store type (`rdwr` default, `aio`).
    pub bs_type: BsType,
    /// tgt's device type: a disk (default) or a CD/DVD drive (`cd`: 2048-byte blocks,
    /// removable, read-only disc).
    pub device_type: DeviceType,
    /// tgt `bsoflags` as configured (O_DIRECT / O_SYNC).
    pub bsoflags: BsOflags,
    /// tgt `bsopts` of an `rbd` LUN (`conf=…;id=…;cluster=…` and librados settings),
    /// without numatgt's `cache=` (that is [`LunConfig::cache`]).
    pub bsopts: Option<String>,
    /// Logical blocks per physical block exponent (READ CAPACITY 16), 0..=15.
    pub lbppbe: Option<u8>,
    /// Lowest aligned LBA (READ CAPACITY 16), 0..=16383.
    pub la_lba: Option<u16>,
    /// Optimal transfer length granularity in blocks (Block Limits VPD).
    pub optimal_xfer_gran: Option<u32>,
    /// Optimal transfer length in blocks (Block Limits VPD).
    pub optimal_xfer_len: Option<u32>,
    /// ALUA: the target port group that owns this LUN (active/optimized there); `None` =
    /// the target's lowest group.
    pub alua_owner: Option<u16>,
    /// A medium changer's elements: tgt's `--params` strings
    /// (`element_type=2,start_address=1000,quantity=24`, `element_type=2,address=1000,
    /// barcode=A0000001`, `element_type=4,address=500,tid=1,lun=1`, `media_home=DIR`),
    /// applied in order.
    pub changer: Vec<String>,
    /// `qos:` this LUN's own QoS limits; an unset field is the target's
    /// ([`LunConfig::effective_qos`]).
    pub qos: Qos,
}

impl LunConfig {
    /// LUN `lun` on `path` with every other field at its default.
    pub fn new(lun: u64, path: PathBuf) -> Self {
        LunConfig {
            lun,
            path,
            block_size: 512,
            write_cache: true,
            readonly: false,
            create_size: None,
            vendor_id: None,
            product_id: None,
            product_rev: None,
            serial: None,
            cache: None,
            scsi_id: None,
            sense_format: SenseFormat::Fixed,
            removable: false,
            thin_provisioning: false,
            online: true,
            bs_type: BsType::Rdwr,
            device_type: DeviceType::Disk,
            bsoflags: BsOflags::default(),
            bsopts: None,
            lbppbe: None,
            la_lba: None,
            optimal_xfer_gran: None,
            optimal_xfer_len: None,
            alua_owner: None,
            changer: Vec::new(),
            qos: Qos::default(),
        }
    }

    /// The QoS limits this LUN runs with: its own settings over those of `target` (its
    /// target); a field unset in both (or 0) means no limit.
    pub fn effective_qos(&self, target: &TargetConfig) -> Qos {
        self.qos.over(&target.qos)
    }

    /// The cache mode this LUN runs with: its own `cache:` or the global mode — except a
    /// `null` LUN, uncached unless it asks (it holds nothing worth caching, and as the
    /// benchmark floor it measures the path without storage, as tgtd's).
    pub fn cache_mode(&self, global: &CacheSettings) -> CacheMode {
        match self.cache {
            // a tape drive reads and writes its image itself; a changer has no data
            // a passed-through device is the device's: nothing of it is kept here
            _ if matches!(
                self.bs_type,
                BsType::Ssc | BsType::Smc | BsType::Sg | BsType::Bsg
            ) =>
            {
                CacheMode::Off
            }
            Some(mode) => mode,
            None if self.bs_type == BsType::Null => CacheMode::Off,
            None => global.mode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn demo_config() {
        let c = Config::demo(Path::new("/var/lib/numatgt"), &[]);
        assert_eq!(
            c.portals,
            vec![PortalConfig::new("127.0.0.1:3260".parse().unwrap())]
        );
        let t = c.target(DEMO_IQN).unwrap();
        let l = t.lun(1).unwrap();
        assert_eq!(l.path, Path::new("/var/lib/numatgt/demo.img"));
        assert_eq!(l.create_size, Some(1 << 30));
        assert_eq!(l.block_size, 512);
        assert!(l.write_cache && !l.readonly);
        assert!(t.allows("iqn.1993-08.org.debian:01:x", ip("10.0.0.1")));
        let a: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let c = Config::demo(Path::new("/tmp"), &[a]);
        assert_eq!(c.portals, vec![PortalConfig::new(a)]);
    }

    #[test]
    fn acl() {
        let mut t = Config::demo(Path::new("/x"), &[]).targets.remove(0);
        t.allow_initiators = vec!["iqn.1993-08.org.debian:01:a".into()];
        t.allow_addresses = vec![AddressRule::parse("10.0.0.0/8").unwrap()];
        assert!(t.allows("iqn.1993-08.org.debian:01:a", ip("10.1.1.1")));
        assert!(t.allows("IQN.1993-08.org.debian:01:A", ip("::ffff:10.1.1.1")));
        assert!(!t.allows("iqn.1993-08.org.debian:01:b", ip("10.1.1.1")));
        assert!(!t.allows("iqn.1993-08.org.debian:01:a", ip("192.168.1.1")));
        t.allow_initiators = vec!["ALL".into()];
        assert!(t.allows("iqn.1993-08.org.debian:01:b", ip("10.1.1.1")));
        t.allow_addresses.push(AddressRule::All);
        assert!(t.allows("iqn.1993-08.org.debian:01:b", ip("192.168.1.1")));
    }

    #[test]
    fn merge() {
        let g = IscsiParams::default();
        assert_eq!(g.merged_with(&IscsiParamsOverride::default()), g);
        let o = IscsiParamsOverride {
            max_recv_data_segment_length: Some(65536),
            data_digest: Some(vec![Digest::Crc32c]),
            ..Default::default()
        };
        let m = g.merged_with(&o);
        assert_eq!(m.max_recv_data_segment_length, 65536);
        assert_eq!(m.data_digest, vec![Digest::Crc32c]);
        assert_eq!(m.header_digest, g.header_digest);
        assert_eq!(m.max_burst_length, g.max_burst_length);
    }
}
