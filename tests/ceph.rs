//! A throw-away Ceph cluster for one test: `tools/ceph/up.sh` in a temporary directory (one
//! monitor on a free loopback port, one memstore OSD, pool `rbd`), `rbd` commands against
//! it, an OSD stopped by PID to make the cluster sick, and `tools/ceph/down.sh` (teardown by
//! PID) on drop. A host without Ceph fails the test with how to install it; nothing skips.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::tools::{self, ToolRun};

/// Panics (fails the test) unless the Ceph daemons and tools are installed.
pub fn require_ceph() {
    for t in ["ceph-mon", "ceph-osd", "ceph", "rbd", "uuidgen"] {
        if tools::find_in_path(t).is_none() {
            panic!(
                "`{t}` not found: the RBD tests need a local Ceph; run \
                 `sudo tools/install-test-deps.sh` (installs ceph-mon ceph-osd ceph-common \
                 librbd1 uuid-runtime). This test does not skip."
            );
        }
    }
}

/// A running cluster; stopped (by PID) and removed on drop.
pub struct Cluster {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Cluster {
    /// Brings a cluster up (about 8 s), or fails the test with up.sh's output.
    pub fn start() -> Cluster {
        require_ceph();
        let dir = tempfile::Builder::new()
            .prefix("numatgt-ceph-")
            .tempdir()
            .expect("temp dir for the cluster");
        let root = dir.path().join("c");
        let script = crate::workspace_root().join("tools/ceph/up.sh");
        let up = tools::run(120, "bash", [script.as_os_str(), root.as_os_str()]);
        let c = Cluster { _dir: dir, root };
        up.check("bringing the test Ceph cluster up (tools/ceph/up.sh)");
        eprintln!("{}", up.stdout.trim_end());
        c
    }

    /// The cluster's ceph.conf.
    pub fn conf(&self) -> PathBuf {
        self.root.join("ceph.conf")
    }

    /// The directory holding the cluster's state, logs and PID files.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// tgt's `--bsopts` for this cluster (the admin client), with `extra` appended.
    pub fn bsopts(&self, extra: &str) -> String {
        let base = format!("conf={};id=admin", self.conf().display());
        if extra.is_empty() {
            base
        } else {
            format!("{base};{extra}")
        }
    }

    /// `rbd -c CONF ARGS…` (at most `timeout_secs`).
    pub fn rbd(&self, timeout_secs: u64, args: &[&str]) -> ToolRun {
        let conf = self.conf();
        let mut all: Vec<&std::ffi::OsStr> = vec!["-c".as_ref(), conf.as_os_str()];
        all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        tools::run(timeout_secs, "rbd", all)
    }

    /// `rados -c CONF -p rbd ARGS…` (at most `timeout_secs`).
    pub fn rados(&self, timeout_secs: u64, args: &[&str]) -> ToolRun {
        let conf = self.conf();
        let mut all: Vec<&std::ffi::OsStr> = vec![
            "-c".as_ref(),
            conf.as_os_str(),
            "-p".as_ref(),
            "rbd".as_ref(),
        ];
        all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        tools::run(timeout_secs, "rados", all)
    }

    /// Creates image `name` in pool `rbd` of `size` bytes.
    pub fn create_image(&self, name: &str, size: u64) {
        let size = format!("{}K", size / 1024);
        self.rbd(60, &["create", "--size", &size, &format!("rbd/{name}")])
            .check("rbd create");
    }

    /// Sets up daemon `d` as a tgtd user makes a gateway of an RBD LUN several gateways
    /// export, with Debian's tgtadm alone: target 1 (the test IQN, open to all), ALUA group
    /// `group` with peer `peer` and non-owners in state `non_owner`, LUN 1 on this
    /// cluster's image `rbd/shared`.
    pub fn set_up_gateway(&self, d: &crate::Daemon, group: u16, peer: u16, non_owner: &str) {
        crate::mgmt::new_open_target(d, "1", crate::TEST_IQN);
        for (name, value) in [
            ("alua_group", group.to_string()),
            ("alua_peers", peer.to_string()),
            ("alua_non_owner_state", non_owner.to_string()),
        ] {
            d.tgtadm(&[
                "--lld", "iscsi", "--mode", "target", "--op", "update", "--tid", "1", "--name",
                name, "--value", &value,
            ])
            .check(name);
        }
        let bsopts = self.bsopts("rados_osd_op_timeout=10");
        crate::mgmt::new_lun(
            d,
            "1",
            "1",
            Path::new("rbd/shared"),
            &["--bstype", "rbd", "--bsopts", &bsopts],
        )
        .check("LUN 1 on rbd/shared");
    }

    /// A numatgtd started like tgtd and set up by [`Cluster::set_up_gateway`].
    pub fn gateway(&self, group: u16, peer: u16, non_owner: &str) -> crate::Daemon {
        let d = crate::Daemon::start_like_tgtd_env(crate::daemon::TargetKind::Numatgtd, &[], &[]);
        self.set_up_gateway(&d, group, peer, non_owner);
        d
    }

    /// The PID of a daemon (`osd.0`, `mon.a`) from its PID file.
    pub fn pid_of(&self, daemon: &str) -> u32 {
        let f = self.root.join("run").join(format!("{daemon}.pid"));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", f.display()))
    }

    /// Stops `daemon` by its PID (SIGKILL: a crash, not a clean leave) and waits (≤ 10 s)
    /// until it is gone.
    pub fn kill_daemon(&self, daemon: &str) {
        let pid = self.pid_of(daemon);
        crate::daemon::send_signal(pid, libc::SIGKILL);
        let t0 = Instant::now();
        while Path::new(&format!("/proc/{pid}/status")).exists()
            && !zombie(pid)
            && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let script = crate::workspace_root().join("tools/ceph/down.sh");
        let down = tools::run(60, "bash", [script.as_os_str(), self.root.as_os_str()]);
        if !down.status.success() {
            eprintln!("tools/ceph/down.sh failed:\n{down}");
        }
    }
}
