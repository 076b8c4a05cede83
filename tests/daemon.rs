//! `Daemon`: one target process under test, with its own temp dir (config, state dir, sparse
//! LUN files, log), its own 127.0.0.1 portal port and control port. It is started in the
//! foreground, waited for until the portal accepts (bounded), and stopped BY PID on drop
//! (SIGTERM, then SIGKILL after a grace period). The daemon log is printed when a test fails.
//!
//! The target is `numatgtd` (env `NUMATGTD_BIN`, else the `numatgtd` next to the test binary's
//! profile dir, else `<workspace>/target/debug/numatgtd`). With `NUMATGT_TEST_TARGET=tgtd` the
//! same tests run against Debian's tgtd (configured through tgtadm) to validate the harness.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use tempfile::TempDir;

use crate::tools;

/// The IQN every test target uses.
pub const TEST_IQN: &str = "iqn.2026-11.org.numatgt:test";

/// How long a daemon may take until its portal accepts connections.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// SIGTERM grace before SIGKILL on drop.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Which target implementation the harness drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    Numatgtd,
    Tgtd,
}

impl TargetKind {
    /// From env `NUMATGT_TEST_TARGET` (`numatgtd`, the default, or `tgtd`).
    pub fn from_env() -> TargetKind {
        match std::env::var("NUMATGT_TEST_TARGET").as_deref() {
            Ok("tgtd") => TargetKind::Tgtd,
            Ok("numatgtd") | Ok("") | Err(_) => TargetKind::Numatgtd,
            Ok(other) => panic!("NUMATGT_TEST_TARGET={other}: expected numatgtd or tgtd"),
        }
    }
}

/// Panics unless the harness drives numatgtd (for tests of numatgtd-only behaviour:
/// config errors, signal handling).
pub fn require_numatgtd(test: &str) {
    assert_eq!(
        TargetKind::from_env(),
        TargetKind::Numatgtd,
        "{test} tests numatgtd-only behaviour; skip it explicitly when validating against tgtd"
    );
}

/// One LUN to export: number, block size, size in bytes (a sparse file is created).
#[derive(Clone, Debug)]
pub struct LunSpec {
    pub lun: u64,
    pub block_size: u32,
    pub size: u64,
    /// Optional identity overrides: vendor, product, revision, serial.
    pub identity: Option<Identity>,
    /// numatgtd only: the LUN's `cache` mode word (`numa`, `off`, `page`); None = the global.
    pub cache: Option<String>,
    /// numatgtd only: the LUN's `write_cache` (initial WCE bit); None = the daemon's default.
    pub write_cache: Option<bool>,
    /// numatgtd only: thin provisioned (UNMAP, deallocating WRITE SAME). Ignored for tgtd.
    pub thin: bool,
    /// numatgtd only: removable medium (INQUIRY RMB, LOAD/EJECT, PREVENT ALLOW MEDIUM
    /// REMOVAL). Ignored for tgtd.
    pub removable: bool,
    /// numatgtd only: write protected (MODE SENSE WP, DATA PROTECT on writes). Ignored for
    /// tgtd.
    pub readonly: bool,
}

/// INQUIRY identity of a LUN.
#[derive(Clone, Debug)]
pub struct Identity {
    pub vendor: String,
    pub product: String,
    pub revision: String,
    pub serial: String,
}

impl LunSpec {
    pub fn new(lun: u64, block_size: u32, size: u64) -> LunSpec {
        assert!(
            size % u64::from(block_size) == 0,
            "LUN size must be whole blocks"
        );
        LunSpec {
            lun,
            block_size,
            size,
            identity: None,
            cache: None,
            write_cache: None,
            thin: false,
            removable: false,
            readonly: false,
        }
    }

    /// numatgtd: this LUN's cache mode (`numa`, `off` or `page`). Ignored for tgtd.
    pub fn with_cache(mut self, mode: &str) -> Self {
        self.cache = Some(mode.into());
        self
    }

    /// numatgtd: a thin-provisioned LUN. Ignored for tgtd.
    pub fn thin(mut self) -> Self {
        self.thin = true;
        self
    }

    /// numatgtd: a LUN with removable medium. Ignored for tgtd.
    pub fn removable(mut self) -> Self {
        self.removable = true;
        self
    }

    /// numatgtd: a write-protected LUN. Ignored for tgtd.
    pub fn readonly(mut self) -> Self {
        self.readonly = true;
        self
    }

    /// numatgtd: this LUN's initial WCE bit. Ignored for tgtd.
    pub fn with_write_cache(mut self, on: bool) -> Self {
        self.write_cache = Some(on);
        self
    }

    pub fn with_identity(
        mut self,
        vendor: &str,
        product: &str,
        revision: &str,
        serial: &str,
    ) -> Self {
        self.identity = Some(Identity {
            vendor: vendor.into(),
            product: product.into(),
            revision: revision.into(),
            serial: serial.into(),
        });
        self
    }

    pub fn num_blocks(&self) -> u64 {
        self.size / u64::from(self.block_size)
    }
}

/// Path of the numatgtd binary under test; panics with a hint when it does not exist.
pub fn numatgtd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NUMATGTD_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "NUMATGTD_BIN={} does not exist", p.display());
        return p;
    }
    // target/<profile>/deps/<test-binary> -> target/<profile>/numatgtd
    if let Ok(exe) = std::env::current_exe()
        && let Some(profile_dir) = exe.parent().and_then(Path::parent)
    {
        let p = profile_dir.join("numatgtd");
        if p.is_file() {
            return p;
        }
    }
    let p = crate::workspace_root().join("target/debug/numatgtd");
    assert!(
        p.is_file(),
        "numatgtd not found at {} (build it first: `cargo build --workspace`, or set NUMATGTD_BIN)",
        p.display()
    );
    p
}

/// A free TCP port on 127.0.0.1 (bind port 0, read it, drop the listener).
pub fn free_port() -> u16 {
    // the kernel may hand the same free port to two tests running at once (each probe
    // closes before its daemon binds): never give out a port twice in one test process
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..1000 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
        let port = l.local_addr().expect("local_addr of probe listener").port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
    panic!("no free port that this process has not handed out already");
}

/// A random control port in 1000..60000 (tgtd accepts at most 32767).
pub fn random_control_port() -> u16 {
    rand::thread_rng().gen_range(1000..60000)
}

fn control_port_for(_kind: TargetKind) -> u16 {
    // tgtadm accepts -C up to 32767, and numatgtd is driven by tgtadm too
    rand::thread_rng().gen_range(1000..32000)
}

/// Creates a sparse file of `size` bytes.
pub fn create_sparse(path: &Path, size: u64) {
    let f = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.set_len(size)
        .unwrap_or_else(|e| panic!("truncate {} to {size}: {e}", path.display()));
}

/// The YAML config for numatgtd (format fixed in the interface spec).
pub fn numatgtd_config(port: u16, luns: &[(LunSpec, PathBuf)]) -> String {
    numatgtd_config_with(port, luns, "")
}

/// [`numatgtd_config`] with `global_yaml` (top-level sections such as `cache:`, complete
/// lines) prepended.
pub fn numatgtd_config_with(port: u16, luns: &[(LunSpec, PathBuf)], global_yaml: &str) -> String {
    let mut y = String::new();
    y.push_str(global_yaml);
    if !global_yaml.is_empty() && !global_yaml.ends_with('\n') {
        y.push('\n');
    }
    y.push_str("portals:\n");
    y.push_str(&format!("  - address: 127.0.0.1:{port}\n"));
    y.push_str("targets:\n");
    y.push_str(&format!("  - iqn: {TEST_IQN}\n"));
    y.push_str("    luns:\n");
    for (spec, path) in luns {
        y.push_str(&format!("      - lun: {}\n", spec.lun));
        y.push_str(&format!("        path: {}\n", path.display()));
        y.push_str(&format!("        block_size: {}\n", spec.block_size));
        if let Some(id) = &spec.identity {
            y.push_str(&format!("        vendor_id: \"{}\"\n", id.vendor));
            y.push_str(&format!("        product_id: \"{}\"\n", id.product));
            y.push_str(&format!("        product_rev: \"{}\"\n", id.revision));
            y.push_str(&format!("        serial: \"{}\"\n", id.serial));
        }
        if let Some(mode) = &spec.cache {
            y.push_str(&format!("        cache: {mode}\n"));
        }
        if spec.thin {
            y.push_str("        thin_provisioning: true\n");
        }
        if spec.removable {
            y.push_str("        removable: true\n");
        }
        if spec.readonly {
            y.push_str("        readonly: true\n");
        }
        if let Some(wce) = spec.write_cache {
            y.push_str(&format!("        write_cache: {wce}\n"));
        }
    }
    y
}

/// A running target process under test.
/// numatgtd's block-cache counters, summed over its nodes ([`Daemon::cache_report`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheReport {
    pub nodes: u64,
    pub hits: u64,
    pub misses: u64,
    pub bypassed: u64,
    pub capacity_bytes: u64,
    pub resident_bytes: u64,
}

pub struct Daemon {
    pub kind: TargetKind,
    pub port: u16,
    pub control_port: u16,
    pub config_path: PathBuf,
    pub state_dir: PathBuf,
    pub log_path: PathBuf,
    pub luns: Vec<(LunSpec, PathBuf)>,
    /// `TGT_IPC_SOCKET` for the daemon and its tgtadm: the management socket lives in the
    /// temp dir (`<prefix>.<control_port>`), never in /var/run/tgtd.
    pub ipc_prefix: PathBuf,
    /// Started without targets (tgtd: nothing configured; numatgtd: a config with none).
    pub bare: bool,
    /// numatgtd only: extra command-line options (e.g. `--sanitize-rate 32`), also on restart.
    pub extra_args: Vec<String>,
    /// numatgtd started tgtd-style only: a command that runs it (`setpriv ... --`), the
    /// daemon's path and options appended.
    pub wrapper: Vec<String>,
    /// numatgtd only: extra environment variables (e.g. `LD_PRELOAD` of a fault shim).
    pub extra_env: Vec<(String, String)>,
    /// numatgtd started exactly as tgtd is: no `--config`, the portal from `--iscsi`.
    pub tgtd_style: bool,
    /// numatgtd only: the loopback port of its metrics server (`--metrics`), unless the
    /// test's own options or configuration set one.
    pub metrics_port: u16,
    /// How many "listening on" lines the log held when the daemon was last spawned.
    listen_mark: usize,
    child: Option<Child>,
    /// Declared last so the files outlive the process on drop.
    pub dir: TempDir,
}

impl Daemon {
    /// Starts the target (kind from env) exporting `luns` under [`TEST_IQN`] on a free port.
    pub fn start(luns: &[LunSpec]) -> Daemon {
        Self::start_kind(TargetKind::from_env(), luns)
    }

    pub fn start_kind(kind: TargetKind, luns: &[LunSpec]) -> Daemon {
        Self::start_kind_with(kind, luns, "")
    }

    /// Like [`Daemon::start`], with top-level YAML sections (e.g. `cache:`) added to
    /// numatgtd's config. tgtd has no such settings: they are ignored there.
    pub fn start_with(luns: &[LunSpec], global_yaml: &str) -> Daemon {
        Self::start_kind_with(TargetKind::from_env(), luns, global_yaml)
    }

    pub fn start_kind_with(kind: TargetKind, luns: &[LunSpec], global_yaml: &str) -> Daemon {
        Self::start_full(kind, luns, global_yaml, false, None, &[])
    }

    /// A daemon with no targets at all, to be configured through its management socket
    /// (tgtadm). numatgtd gets tgtd's iSCSI defaults so `show` output can be compared.
    pub fn start_bare(kind: TargetKind) -> Daemon {
        Self::start_full(kind, &[], "", true, None, &[])
    }

    /// The target started the way tgtd users start it: `-f -C N --iscsi portal=127.0.0.1:PORT`
    /// and no configuration file at all (numatgtd's own defaults), then configured with
    /// tgtadm / tgt-admin. `args`: more numatgtd options (e.g. `--numa-nodes 2`).
    pub fn start_like_tgtd(kind: TargetKind, args: &[&str]) -> Daemon {
        Self::start_like_tgtd_env(kind, args, &[])
    }

    /// [`start_like_tgtd`](Self::start_like_tgtd) with `env` added to the daemon's
    /// environment (e.g. `NUMATGT_LIBRBD`).
    pub fn start_like_tgtd_env(kind: TargetKind, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut d = Self::start_full_deferred(kind, &[], "", true, None, args);
        d.extra_env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        d.tgtd_style = true;
        d.spawn();
        d.wait_ready();
        d
    }

    /// numatgtd to be started as tgtd (see [`start_like_tgtd`](Self::start_like_tgtd)) under
    /// `wrapper` (a command that execs the daemon with its options, e.g. `setpriv ...`), not
    /// started yet: the test may change the portal port or the owners of the daemon's files
    /// (`dir`, `state_dir`) first, then calls [`started`](Self::started).
    pub fn like_tgtd_under(wrapper: &[&str], args: &[&str]) -> Daemon {
        let mut d = Self::start_full_deferred(TargetKind::Numatgtd, &[], "", true, None, args);
        d.tgtd_style = true;
        d.wrapper = wrapper.iter().map(|a| a.to_string()).collect();
        d
    }

    /// Starts a daemon made by [`like_tgtd_under`](Self::like_tgtd_under) and waits until
    /// its portal accepts connections.
    pub fn started(mut self) -> Daemon {
        self.spawn();
        self.wait_ready();
        self
    }

    /// numatgtd with the YAML `yaml(portal_port)` (it must listen on 127.0.0.1:portal_port).
    pub fn start_numatgtd_yaml(yaml: &dyn Fn(u16) -> String) -> Daemon {
        Self::start_full(TargetKind::Numatgtd, &[], "", true, Some(yaml), &[])
    }

    /// numatgtd with extra command-line options and environment variables.
    pub fn start_with_env(luns: &[LunSpec], args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::start_with_yaml_env(luns, "", args, env)
    }

    /// numatgtd with top-level YAML sections (see [`start_with`](Self::start_with)), extra
    /// command-line options and environment variables.
    pub fn start_with_yaml_env(
        luns: &[LunSpec],
        global_yaml: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut d =
            Self::start_full_deferred(TargetKind::Numatgtd, luns, global_yaml, false, None, args);
        d.extra_env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        d.spawn();
        d.wait_ready();
        d
    }

    /// numatgtd with extra command-line options (tgtd: the options are ignored).
    pub fn start_with_args(luns: &[LunSpec], args: &[&str]) -> Daemon {
        Self::start_full(TargetKind::from_env(), luns, "", false, None, args)
    }

    fn start_full(
        kind: TargetKind,
        luns: &[LunSpec],
        global_yaml: &str,
        bare: bool,
        custom: Option<&dyn Fn(u16) -> String>,
        args: &[&str],
    ) -> Daemon {
        let mut d = Self::start_full_deferred(kind, luns, global_yaml, bare, custom, args);
        d.spawn();
        d.wait_ready();
        if kind == TargetKind::Tgtd && !bare {
            d.configure_tgtd();
        }
        d
    }

    /// Everything [`Daemon::start_full`] prepares, without starting the process.
    fn start_full_deferred(
        kind: TargetKind,
        luns: &[LunSpec],
        global_yaml: &str,
        bare: bool,
        custom: Option<&dyn Fn(u16) -> String>,
        args: &[&str],
    ) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("numatgt-test.")
            .tempdir()
            .expect("create temp dir for the daemon");
        let state_dir = dir.path().join("state");
        std::fs::create_dir_all(&state_dir).expect("create state dir");
        let luns: Vec<(LunSpec, PathBuf)> = luns
            .iter()
            .map(|s| {
                let p = dir.path().join(format!("lun{}.img", s.lun));
                create_sparse(&p, s.size);
                (s.clone(), p)
            })
            .collect();
        let port = free_port();
        let control_port = control_port_for(kind);
        let config_path = dir.path().join("numatgtd.yaml");
        let yaml = if let Some(f) = custom {
            f(port)
        } else if bare {
            format!(
                "portals:\n  - address: 127.0.0.1:{port}\niscsi:\n  MaxRecvDataSegmentLength: 8192\n  HeaderDigest: None\n  DataDigest: None\n"
            )
        } else {
            numatgtd_config_with(port, &luns, global_yaml)
        };
        std::fs::write(&config_path, yaml).expect("write config file");
        let ipc_prefix = dir.path().join("tgtd-socket");
        let log_path = dir.path().join("daemon.log");
        Daemon {
            kind,
            port,
            control_port,
            config_path,
            state_dir,
            log_path,
            luns,
            ipc_prefix,
            bare,
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            wrapper: Vec::new(),
            extra_env: Vec::new(),
            tgtd_style: false,
            metrics_port: free_port(),
            listen_mark: 0,
            child: None,
            dir,
        }
    }

    fn log_file(&self) -> (File, File) {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("open log {}: {e}", self.log_path.display()));
        let g = f.try_clone().expect("clone log file handle");
        (f, g)
    }

    /// `--metrics 127.0.0.1:PORT`, unless the test chose its own metrics settings.
    fn metrics_args(&self) -> Vec<String> {
        let own_args = self.extra_args.iter().any(|a| a.starts_with("--metrics"));
        let own_yaml = !self.tgtd_style
            && std::fs::read_to_string(&self.config_path)
                .is_ok_and(|y| y.lines().any(|l| l.starts_with("metrics:")));
        if own_args || own_yaml {
            Vec::new()
        } else {
            vec![
                "--metrics".into(),
                format!("127.0.0.1:{}", self.metrics_port),
            ]
        }
    }

    /// `http://127.0.0.1:PORT` of the metrics server started by [`Daemon::spawn`] (numatgtd).
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.metrics_port)
    }

    /// Waits (at most 20 s) until the cache's warm start has ended
    /// (`numatgt_cache_warm_jobs` 0).
    pub fn wait_warm_start(&self) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.metric("numatgt_cache_warm_jobs", "") > 0.0 && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The value of metric `name` (a sample with labels, or the one without) whose line
    /// contains `with`, from the daemon's /metrics; 0 when there is none.
    pub fn metric(&self, name: &str, with: &str) -> f64 {
        let (code, body) = self.http_get("/metrics").expect("GET /metrics");
        assert_eq!(code, 200);
        body.lines()
            .filter(|l| {
                (l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
                    && l.contains(with)
            })
            .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    }

    /// GET `path` from the metrics server: (status code, body). Plain HTTP/1.0 on loopback,
    /// bounded by a 10 s timeout.
    pub fn http_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_get(("127.0.0.1", self.metrics_port), path)
    }

    fn spawn(&mut self) {
        self.listen_mark = self
            .log()
            .matches(format!("numatgtd: listening on {}", self.addr()).as_str())
            .count();
        let (out, err) = self.log_file();
        let mut cmd = match self.kind {
            TargetKind::Numatgtd if self.tgtd_style => {
                let mut c = match self.wrapper.split_first() {
                    Some((prog, rest)) => {
                        let mut c = Command::new(prog);
                        c.args(rest).arg(numatgtd_bin());
                        c
                    }
                    None => Command::new(numatgtd_bin()),
                };
                c.args(self.metrics_args())
                    .arg("-f")
                    .arg("-C")
                    .arg(self.control_port.to_string())
                    .arg("--iscsi")
                    .arg(format!("portal=127.0.0.1:{}", self.port))
                    .arg("--state-dir")
                    .arg(&self.state_dir)
                    .args(&self.extra_args)
                    .env("RUST_BACKTRACE", "1");
                c
            }
            TargetKind::Numatgtd => {
                let mut c = Command::new(numatgtd_bin());
                c.args(self.metrics_args())
                    .arg("-f")
                    .arg("--config")
                    .arg(&self.config_path)
                    .arg("--state-dir")
                    .arg(&self.state_dir)
                    .arg("-C")
                    .arg(self.control_port.to_string())
                    .args(&self.extra_args)
                    .env("RUST_BACKTRACE", "1");
                c
            }
            TargetKind::Tgtd => {
                tools::require_root("tgtd");
                let mut c = Command::new(tools::require_tool("tgtd"));
                c.arg("-f")
                    .arg("-C")
                    .arg(self.control_port.to_string())
                    .arg("--iscsi")
                    .arg(format!("portal=127.0.0.1:{}", self.port));
                c
            }
        };
        if self.kind == TargetKind::Numatgtd {
            cmd.envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        }
        cmd.env("TGT_IPC_SOCKET", &self.ipc_prefix)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
        self.child = Some(child);
    }

    /// Polls the portal until it accepts a TCP connection (bounded by READY_TIMEOUT).
    fn wait_ready(&mut self) {
        let start = Instant::now();
        let addr = self.addr();
        // numatgtd says when it listens: wait for that line too, so that a connection
        // accepted by some other process on the same port is never taken for ours
        let own = format!("numatgtd: listening on {addr}");
        loop {
            self.assert_alive("while starting");
            let listening = self.kind != TargetKind::Numatgtd
                || self.log().matches(own.as_str()).count() > self.listen_mark;
            if listening && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if start.elapsed() > READY_TIMEOUT {
                panic!(
                    "{:?} did not accept on {addr} within {READY_TIMEOUT:?}\n{}",
                    self.kind,
                    self.log_tail(200)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs Debian's `tgtadm -C <control port> ARGS` against this daemon's socket.
    pub fn tgtadm(&self, args: &[&str]) -> tools::ToolRun {
        self.admin_tool("tgtadm", args)
    }

    /// Runs `prog -C <control port> ARGS` (tgtadm, numatgtadm, tgt-admin) with this daemon's
    /// `TGT_IPC_SOCKET`.
    pub fn admin_tool(&self, prog: &str, args: &[&str]) -> tools::ToolRun {
        let ctl = self.control_port.to_string();
        let mut all = vec!["-C", ctl.as_str()];
        all.extend_from_slice(args);
        tools::run_env(
            20,
            prog,
            all,
            &[("TGT_IPC_SOCKET", self.ipc_prefix.as_os_str())],
        )
    }

    /// numatgtd's block-cache counters summed over its nodes, from the `cache report:` lines
    /// it logs on SIGUSR1 (waits for them, at most 5 s).
    pub fn cache_report(&self) -> CacheReport {
        let before = self.log().matches("alloc report:").count();
        send_signal(self.pid(), libc::SIGUSR1);
        let t = Instant::now();
        let log = loop {
            let log = self.log();
            if log.matches("alloc report:").count() > before {
                break log;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "no report after SIGUSR1\n{}",
                self.log_tail(50)
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // the cache report lines (one per node) come just before the alloc report
        let lines: Vec<&str> = log.lines().collect();
        let end = lines
            .iter()
            .rposition(|l| l.contains("alloc report:"))
            .unwrap_or(0);
        let field = |line: &str, key: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
                .unwrap_or_else(|| panic!("no {key}= in {line}"))
        };
        let mut r = CacheReport::default();
        for l in lines[..end].iter().rev() {
            if !l.contains("cache report: node=") {
                break;
            }
            r.nodes += 1;
            r.hits += field(l, "hits");
            r.misses += field(l, "misses");
            r.bypassed += field(l, "bypassed");
            r.capacity_bytes += field(l, "capacity_bytes");
            r.resident_bytes += field(l, "resident_bytes");
        }
        r
    }

    /// The management socket path.
    pub fn mgmt_socket(&self) -> PathBuf {
        PathBuf::from(format!(
            "{}.{}",
            self.ipc_prefix.display(),
            self.control_port
        ))
    }

    fn configure_tgtd(&mut self) {
        self.tgtadm(&[
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "1", "-T", TEST_IQN,
        ])
        .check("tgtadm new target");
        for (spec, path) in self.luns.clone() {
            let lun = spec.lun.to_string();
            let bs = format!("--blocksize={}", spec.block_size);
            crate::mgmt::new_lun(self, "1", &lun, &path, &[&bs]).check("tgtadm new logicalunit");
            if let Some(id) = &spec.identity {
                let params = format!(
                    "vendor_id={},product_id={},product_rev={},scsi_sn={}",
                    id.vendor, id.product, id.revision, id.serial
                );
                self.tgtadm(&[
                    "--lld",
                    "iscsi",
                    "--op",
                    "update",
                    "--mode",
                    "logicalunit",
                    "--tid",
                    "1",
                    "--lun",
                    &lun,
                    "--params",
                    &params,
                ])
                .check("tgtadm update logicalunit identity");
            }
        }
        self.tgtadm(&[
            "--lld", "iscsi", "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ])
        .check("tgtadm bind ALL");
    }

    /// The portal address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `iscsi://127.0.0.1:PORT`
    pub fn portal_url(&self) -> String {
        format!("iscsi://127.0.0.1:{}", self.port)
    }

    /// `iscsi://127.0.0.1:PORT/IQN/LUN`
    pub fn url(&self, lun: u64) -> String {
        format!("iscsi://127.0.0.1:{}/{TEST_IQN}/{lun}", self.port)
    }

    /// Backing file of `lun`.
    pub fn lun_path(&self, lun: u64) -> &Path {
        self.luns
            .iter()
            .find(|(s, _)| s.lun == lun)
            .map(|(_, p)| p.as_path())
            .unwrap_or_else(|| panic!("no LUN {lun} configured"))
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(Child::id)
            .expect("daemon was started")
    }

    /// Panics (with the log) if the process has exited.
    pub fn assert_alive(&mut self, ctx: &str) {
        let status = self
            .child
            .as_mut()
            .expect("daemon was started")
            .try_wait()
            .expect("try_wait on daemon");
        if let Some(st) = status {
            self.child = None;
            panic!(
                "{:?} (port {}) died {ctx}: {st}\n{}",
                self.kind,
                self.port,
                self.log_tail(200)
            );
        }
    }

    /// Number of open file descriptors of the daemon (from /proc/PID/fd).
    pub fn open_fds(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.pid());
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {dir}: {e}"))
            .count()
    }

    /// The whole daemon log.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("(no log at {}: {e})", self.log_path.display()))
    }

    /// The last `n` lines of the daemon log, framed for test output.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(n);
        format!(
            "===== {:?} log {} (last {} of {} lines) =====\n{}\n===== end of log =====",
            self.kind,
            self.log_path.display(),
            lines.len() - from,
            lines.len(),
            lines[from..].join("\n")
        )
    }

    /// Target ids tgtd reports (for teardown).
    fn tgtd_tids(&self) -> Vec<String> {
        let r = self.tgtadm(&["--op", "show", "--mode", "target"]);
        r.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("Target "))
            .filter_map(|l| l.split(':').next())
            .map(str::to_string)
            .collect()
    }

    fn tgtd_teardown(&self) {
        // SIGTERM alone does not stop tgtd while a target exists.
        let _ = self.tgtadm(&[
            "--op", "update", "--mode", "sys", "--name", "State", "-v", "offline",
        ]);
        for tid in self.tgtd_tids() {
            let _ = self.tgtadm(&[
                "--lld", "iscsi", "--op", "delete", "--mode", "target", "--tid", &tid, "--force",
            ]);
        }
        let _ = self.tgtadm(&["--op", "delete", "--mode", "system"]);
    }

    /// Sends SIGTERM and waits up to `grace` for the exit. Returns the exit status and how
    /// long it took, or None when the process had to be SIGKILLed.
    /// Stops the target (SIGTERM) and starts it again with the same configuration, LUN
    /// files and state directory.
    pub fn restart(&mut self) {
        let (status, _) = self.terminate(STOP_GRACE);
        assert!(
            status.is_some_and(|s| s.success()),
            "stop before restart failed: {status:?}\n{}",
            self.log_tail(50)
        );
        self.spawn();
        self.wait_ready();
    }

    pub fn terminate(&mut self, grace: Duration) -> (Option<ExitStatus>, Duration) {
        let Some(mut child) = self.child.take() else {
            return (None, Duration::ZERO);
        };
        if let Ok(Some(st)) = child.try_wait() {
            return (Some(st), Duration::ZERO);
        }
        if self.kind == TargetKind::Tgtd {
            self.tgtd_teardown();
        }
        let start = Instant::now();
        send_signal(child.id(), libc::SIGTERM);
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return (Some(st), start.elapsed()),
                Ok(None) if start.elapsed() < grace => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => break,
            }
        }
        eprintln!(
            "harness: {:?} pid {} ignored SIGTERM for {grace:?}: SIGKILL",
            self.kind,
            child.id()
        );
        let _ = child.kill();
        let _ = child.wait();
        (None, start.elapsed())
    }
}

impl Daemon {
    /// Starts the target again after it ended (e.g. [`Daemon::kill9`] or a crash), with the
    /// same configuration, LUN files and state directory; waits until it accepts logins.
    pub fn respawn(&mut self) {
        assert!(self.child.is_none(), "respawn of a running daemon");
        self.spawn();
        self.wait_ready();
    }

    /// SIGKILLs the target (a crash: no shutdown code runs) and reaps it. Returns how it
    /// ended, or None when it had already been reaped.
    pub fn kill9(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        send_signal(child.id(), libc::SIGKILL);
        Some(child.wait().expect("wait for the SIGKILLed daemon"))
    }
}

/// kill(pid, sig) for a process this harness started.
pub fn send_signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill() has no memory-safety preconditions; pid is a child we spawned and have
    // not yet reaped, so it cannot have been recycled.
    unsafe {
        libc::kill(pid, sig);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        let (st, took) = self.terminate(STOP_GRACE);
        if panicking {
            let _ = writeln!(
                std::io::stderr(),
                "harness: test failed; {:?} stopped with {st:?} after {took:?}\n{}",
                self.kind,
                self.log_tail(300)
            );
        }
    }
}

/// GET `path` from an HTTP server at `addr`: (status code, body). HTTP/1.0, 10 s timeouts.
pub fn http_get(addr: impl std::net::ToSocketAddrs, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let a = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut s = std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(10))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    s.set_write_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {a}\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head:?}")))?;
    Ok((code, body.to_string()))
}
