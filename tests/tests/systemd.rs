//! numatgtd under systemd: the shipped unit file (tools/systemd/numatgtd.service) passes
//! `systemd-analyze verify`, and the daemon speaks the Type=notify protocol — `READY=1` only
//! once its portal accepts connections, `STOPPING=1` on SIGTERM — to the socket named by
//! NOTIFY_SOCKET, as systemd would provide it. The unit runs numatgtd as the user numatgt
//! with two ambient capabilities, and numatgtd does its job that way (setpriv). The unit's
//! `ExecReload=` (numatgtadm --reload) returns once the new configuration is applied and
//! fails, saying why, when it is refused.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::daemon::{create_sparse, free_port, numatgtd_bin, numatgtd_config, send_signal};
use tests::tools;
use tests::{LunSpec, MIB};

#[test]
fn unit_file_verifies() {
    let analyze = tools::require_tool("systemd-analyze");
    let unit =
        std::fs::read_to_string(tests::workspace_root().join("tools/systemd/numatgtd.service"))
            .expect("read unit file");
    assert!(
        unit.contains("ExecStart=/usr/local/sbin/numatgtd -f --config /etc/numatgt/numatgt.yaml")
    );
    assert!(unit.contains("Type=notify"));
    // reload waits for the daemon and fails when it refuses the file (not kill -HUP, which
    // returns at once); same control port as ExecStart (none given: 0)
    assert_eq!(
        unit_setting(&unit, "ExecReload").as_deref(),
        Some("/usr/local/sbin/numatgtadm --reload")
    );
    // verify it with the binaries under test in place of the installed paths
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("numatgtd.service");
    std::fs::write(&path, with_built_binaries(&unit)).expect("write unit");
    let run = tools::run(
        30,
        &analyze.display().to_string(),
        // the man pages the unit names are the package's, not installed on a build host
        ["verify", "--man=no", &path.display().to_string()],
    );
    // systemd-analyze exits 0 on some problems (an unknown Type= is only a warning), so any
    // message about our unit counts as a failure
    assert!(
        run.status.success() && !run.stderr.contains("numatgtd.service"),
        "systemd-analyze verify complained:\n{run}"
    );
}

#[test]
fn notifies_ready_after_listening_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).expect("bind notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let spec = LunSpec::new(1, 512, 8 * MIB);
    let lun = dir.path().join("lun1.img");
    create_sparse(&lun, spec.size);
    let port = free_port();
    let cfg = dir.path().join("numatgtd.yaml");
    std::fs::write(&cfg, numatgtd_config(port, &[(spec, lun)])).expect("write config");
    let mut child = Command::new(numatgtd_bin())
        .arg("-f")
        .arg("--config")
        .arg(&cfg)
        .arg("--state-dir")
        .arg(dir.path())
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn numatgtd");
    let mut buf = [0u8; 512];
    let got = notify.recv(&mut buf);
    let ready = got.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    // READY=1 promises a listening portal: connect right away, no retry
    let connected = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    send_signal(child.id(), libc::SIGTERM);
    let stopping = notify
        .recv(&mut buf)
        .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break Some(s);
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ready = ready.expect("no READY notification within 20 s");
    assert!(ready.lines().any(|l| l == "READY=1"), "got {ready:?}");
    assert!(
        ready
            .lines()
            .any(|l| l == format!("MAINPID={}", child.id())),
        "got {ready:?}"
    );
    assert!(
        ready.contains(&format!("127.0.0.1:{port}")),
        "STATUS should name the portal: {ready:?}"
    );
    assert!(
        connected,
        "READY=1 was sent before the portal accepted connections"
    );
    let stopping = stopping.expect("no STOPPING notification after SIGTERM");
    assert_eq!(stopping, "STOPPING=1");
    let status = status.expect("numatgtd did not exit within 10 s of SIGTERM");
    assert!(status.success(), "exit status {status}");
}

/// `text` with the installed binaries' directory (/usr/local/sbin) replaced by the one of
/// the binaries under test (numatgtd and numatgtadm are built side by side).
fn with_built_binaries(text: &str) -> String {
    let bin = numatgtd_bin();
    let dir = bin.parent().expect("numatgtd's directory");
    text.replace("/usr/local/sbin/", &format!("{}/", dir.display()))
}

/// `systemctl reload` runs the unit's `ExecReload=` and waits for it: against a daemon
/// started as `ExecStart=` starts it (no `-C`), the command returns once a changed file is
/// applied (the new LUN is there when it exits 0), and exits non-zero with the file's error
/// when the file is refused, the daemon keeping what it had.
#[test]
fn exec_reload_waits_and_fails_when_the_file_is_refused() {
    let unit =
        std::fs::read_to_string(tests::workspace_root().join("tools/systemd/numatgtd.service"))
            .expect("read unit file");
    let reload = with_built_binaries(&unit_setting(&unit, "ExecReload").expect("ExecReload="));
    let reload: Vec<&str> = reload.split_whitespace().collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = LunSpec::new(1, 512, 8 * MIB);
    let lun1 = dir.path().join("lun1.img");
    let lun2 = dir.path().join("lun2.img");
    create_sparse(&lun1, spec.size);
    create_sparse(&lun2, spec.size);
    let port = free_port();
    let cfg = dir.path().join("numatgtd.yaml");
    let one = numatgtd_config(port, &[(spec.clone(), lun1.clone())]);
    std::fs::write(&cfg, &one).expect("write config");
    let socket = dir.path().join("socket");
    let log = dir.path().join("log");
    let out = std::fs::File::create(&log).expect("create log");
    let err = out.try_clone().expect("clone log");
    // as the unit's ExecStart: -f --config, the default control port
    let mut child = Command::new(numatgtd_bin())
        .arg("-f")
        .arg("--config")
        .arg(&cfg)
        .arg("--state-dir")
        .arg(dir.path())
        .args(["--metrics", "off"])
        .env("TGT_IPC_SOCKET", &socket)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn numatgtd");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let t = Instant::now();
    while !read_log().contains(&format!("listening on 127.0.0.1:{port}"))
        || std::os::unix::net::UnixStream::connect(socket.with_extension("0")).is_err()
    {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "numatgtd exited
{}",
            read_log()
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "not up
{}",
            read_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let env = [("TGT_IPC_SOCKET", socket.as_os_str())];
    let run_reload = || tools::run_env(60, reload[0], &reload[1..], &env);
    let show = || {
        let r = tools::run_env(
            20,
            &tests::mgmt::numatgtadm_bin(),
            ["--mode", "target", "--op", "show"],
            &env,
        );
        r.check("numatgtadm show");
        r.stdout
    };

    // a changed file: applied by the time the command returns
    let two = numatgtd_config(
        port,
        &[(spec.clone(), lun1), (LunSpec::new(2, 512, 8 * MIB), lun2)],
    );
    std::fs::write(&cfg, &two).expect("write config");
    let good = run_reload();
    let shown = show();
    // a refused file: the command fails and says why; nothing changes
    std::fs::write(&cfg, "targets: [\n").expect("write config");
    let bad = run_reload();
    let shown_after = show();
    send_signal(child.id(), libc::SIGTERM);
    let status = child.wait().expect("wait numatgtd");

    good.check("ExecReload with a changed file");
    assert!(good.stdout.contains("1 changed"), "{good}");
    assert!(
        shown.contains("LUN: 2"),
        "LUN 2 not there when ExecReload returned:\n{shown}"
    );
    assert_eq!(
        bad.status.code(),
        Some(22),
        "a refused file fails ExecReload:\n{bad}"
    );
    assert!(
        bad.stderr
            .contains(&format!("tgtadm: {}:2:1: ", cfg.display())),
        "the failure names the file and the place:\n{bad}"
    );
    assert!(shown_after.contains("LUN: 2"), "{shown_after}");
    assert!(status.success(), "numatgtd exit {status}\n{}", read_log());
}

/// The unit's settings: `KEY=VALUE` lines of `[Service]`.
fn unit_setting(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

/// The shipped unit is sandboxed: `systemd-analyze security` (offline, on the file) rates
/// it at most 4.0 (the tgtd-like unit without sandboxing rated 9.4, UNSAFE), runs as the
/// user numatgt with exactly the two capabilities it documents (ambient), owns /run/tgtd
/// and /var/lib/numatgt, and sets no new privileges.
#[test]
fn unit_file_is_sandboxed() {
    let analyze = tools::require_tool("systemd-analyze");
    let unit =
        std::fs::read_to_string(tests::workspace_root().join("tools/systemd/numatgtd.service"))
            .expect("read unit file");
    assert_eq!(
        unit_setting(&unit, "CapabilityBoundingSet").as_deref(),
        Some(UNIT_CAPS)
    );
    assert_eq!(
        unit_setting(&unit, "AmbientCapabilities").as_deref(),
        Some(UNIT_CAPS)
    );
    assert_eq!(unit_setting(&unit, "User").as_deref(), Some("numatgt"));
    assert_eq!(
        unit_setting(&unit, "RuntimeDirectory").as_deref(),
        Some("tgtd")
    );
    assert_eq!(
        unit_setting(&unit, "StateDirectory").as_deref(),
        Some("numatgt")
    );
    assert_eq!(
        unit_setting(&unit, "NoNewPrivileges").as_deref(),
        Some("yes")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("numatgtd.service");
    std::fs::write(&path, &unit).expect("write unit");
    let run = tools::run(
        60,
        &analyze.display().to_string(),
        [
            "security".to_string(),
            "--offline=yes".into(),
            path.display().to_string(),
        ],
    );
    let score = run
        .stdout
        .lines()
        .find_map(|l| {
            let rest = l
                .split("Overall exposure level for numatgtd.service:")
                .nth(1)?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .unwrap_or_else(|| panic!("no exposure level in the output:\n{run}"));
    eprintln!("systemd-analyze security: exposure {score}");
    assert!(
        score <= 4.0,
        "exposure {score} > 4.0:\n{}",
        run.stdout
            .lines()
            .filter(|l| l.contains('✗'))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The unit's capabilities (ambient and bounding set) and setpriv's names for them.
const UNIT_CAPS: &str = "CAP_NET_BIND_SERVICE CAP_IPC_LOCK";
const SETPRIV_CAPS: &str = "-all,+net_bind_service,+ipc_lock";

/// Two uids that /etc/passwd does not name: the service user and a third party.
fn unused_uids() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let taken: Vec<u32> = passwd
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect();
    let mut free = (61_000..62_000).filter(|u| !taken.contains(u));
    match (free.next(), free.next()) {
        (Some(a), Some(b)) => (a, b),
        _ => panic!("no two unused uids in 61000..62000"),
    }
}

/// The gid of the group `disk` (Debian: 6).
fn disk_gid() -> u32 {
    std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == "disk").then(|| f.nth(1)?.parse().ok())?
        })
        .unwrap_or(6)
}

/// A port below 1024 that is free on 127.0.0.1 (probed by binding it, as root).
fn privileged_port() -> u16 {
    let start = 600 + (std::process::id() % 300) as u16;
    (start..1024)
        .chain(600..start)
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .unwrap_or_else(|| panic!("no free port in 600..1024 on 127.0.0.1"))
}

/// `setpriv` options that run a command as `uid` (group `uid`, supplementary `groups`) with
/// `caps` as its inheritable, ambient and bounding sets, and no new privileges.
fn as_user(setpriv: &str, uid: u32, groups: &str, caps: &str) -> Vec<String> {
    let mut v = vec![
        setpriv.to_string(),
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
    ];
    v.push(if groups.is_empty() {
        "--clear-groups".into()
    } else {
        format!("--groups={groups}")
    });
    v.extend([
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        format!("--bounding-set={caps}"),
        "--no-new-privs".into(),
        "--".into(),
    ]);
    v
}

/// numatgtd as the unit runs it: an unprivileged uid in the group disk whose only
/// capabilities are the unit's two, ambient (the /proc status shows exactly them). It binds
/// a port below 1024 (the same uid without the capabilities cannot), serves a write and a
/// read back on a LUN file that only root and the group disk may write, is managed by
/// root's tgtadm and by its own uid, and refuses a third uid on its management socket even
/// when the file modes would let that uid in (SO_PEERCRED).
#[test]
fn serves_as_an_unprivileged_user_with_the_units_ambient_capabilities() {
    let setpriv = tools::require_tool("setpriv").display().to_string();
    tools::require_tool("qemu-io");
    tools::require_root("changing to another uid");
    let (uid, third) = unused_uids();
    let disk = disk_gid();
    let port = privileged_port();

    // without the capabilities the same uid cannot listen on that port
    let no_caps = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(no_caps.path(), Some(uid), Some(uid)).expect("chown");
    let mut cmd = as_user(&setpriv, uid, &disk.to_string(), "-all");
    cmd.extend([
        numatgtd_bin().display().to_string(),
        "-f".into(),
        "-C".into(),
        tests::daemon::random_control_port().to_string(),
        "--iscsi".into(),
        format!("portal=127.0.0.1:{port}"),
        "--state-dir".into(),
        no_caps.path().display().to_string(),
        "--metrics".into(),
        format!("127.0.0.1:{}", free_port()),
    ]);
    let socket = no_caps.path().join("socket");
    let refused = tools::run_env(
        30,
        &cmd[0],
        &cmd[1..],
        &[("TGT_IPC_SOCKET", socket.as_os_str())],
    );
    assert!(
        !refused.status.success() && !refused.timed_out(),
        "numatgtd without CAP_NET_BIND_SERVICE should fail to listen on port {port}:\n{refused}"
    );
    assert!(
        refused.stderr.to_lowercase().contains("permission denied"),
        "the failure should be the port: {refused}"
    );

    let wrapper = as_user(&setpriv, uid, &disk.to_string(), SETPRIV_CAPS);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut d = tests::Daemon::like_tgtd_under(&wrapper, &[]);
    d.port = port;
    // the daemon's directory (management socket, lock file) and state directory are its
    // own, as RuntimeDirectory= and StateDirectory= make them
    std::os::unix::fs::chown(d.dir.path(), Some(uid), Some(uid)).expect("chown dir");
    std::os::unix::fs::chown(&d.state_dir, Some(uid), Some(uid)).expect("chown state");
    // a LUN file as a block device is on Debian: root:disk 0660
    let lun = d.dir.path().join("lun.img");
    create_sparse(&lun, 8 * MIB);
    std::os::unix::fs::chown(&lun, Some(0), Some(disk)).expect("chown lun");
    std::fs::set_permissions(&lun, std::os::unix::fs::PermissionsExt::from_mode(0o660))
        .expect("chmod lun");
    let d = d.started();

    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).expect("status");
    let line = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {k} in\n{status}"))
            .to_string()
    };
    let caps = |k: &str| u64::from_str_radix(&line(k), 16).expect("hex caps");
    // CAP_NET_BIND_SERVICE 10, CAP_IPC_LOCK 14
    let want = (1u64 << 10) | (1 << 14);
    for k in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        assert_eq!(caps(k), want, "{k} of the daemon");
    }
    let ids: Vec<u32> = line("Uid:")
        .split_whitespace()
        .chain(line("Gid:").split_whitespace())
        .map(|v| v.parse().expect("id"))
        .collect();
    assert_eq!(ids, vec![uid; 8], "real, effective, saved, fs uid and gid");
    assert_eq!(line("Groups:"), disk.to_string());
    assert_eq!(line("NoNewPrivs:"), "1");

    // root's tgtadm manages it; the daemon opens the LUN through the group disk
    let iqn = "iqn.2026-11.org.numatgt:unprivileged";
    tests::mgmt::export_lun(&d, "1", iqn, &lun.display().to_string());
    let url = format!("iscsi://127.0.0.1:{port}/{iqn}/1");
    let r = tools::run(
        60,
        "qemu-io",
        [
            "-f".to_string(),
            "raw".into(),
            "-c".into(),
            "write -P 0x5a 1M 1M".into(),
            "-c".into(),
            "read -P 0x5a 1M 1M".into(),
            url,
        ],
    );
    r.check("qemu-io against the unprivileged daemon");
    assert!(!r.stdout.contains("Pattern verification failed"), "{r}");

    // its own uid may manage it too; a third uid is refused by the daemon itself: the file
    // modes are opened up so that only the SO_PEERCRED check stands in the way
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()))
    };
    mode(d.dir.path(), 0o711);
    mode(&d.mgmt_socket(), 0o777);
    let show_as = |who: u32| {
        let mut cmd = as_user(&setpriv, who, "", "-all");
        cmd.extend(
            [
                "tgtadm",
                "-C",
                &d.control_port.to_string(),
                "--lld",
                "iscsi",
                "--op",
                "show",
                "--mode",
                "target",
            ]
            .map(String::from),
        );
        tools::run_env(
            20,
            &cmd[0],
            &cmd[1..],
            &[("TGT_IPC_SOCKET", d.ipc_prefix.as_os_str())],
        )
    };
    let own = show_as(uid);
    own.check("tgtadm as the daemon's own uid");
    assert!(own.stdout.contains(iqn), "{own}");
    let refusals = d.log().matches("management request refused").count();
    let other = show_as(third);
    assert!(
        !other.status.success() && !other.timed_out() && !other.stdout.contains(iqn),
        "a third uid must not manage the daemon:\n{other}"
    );
    assert_eq!(
        d.log().matches("management request refused").count(),
        refusals + 1,
        "the daemon should log the refusal of uid {third}"
    );
}
