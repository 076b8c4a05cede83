//! Reload without disruption: while iscsi-perf reads from target A, target B is added to
//! the configuration file, changed (a second LUN) and removed again — by SIGHUP and by
//! `numatgtadm --reload` — and A's session carries on: one login, no disconnect, iscsi-perf
//! still running. An invalid file changes nothing and says why.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::daemon::{create_sparse, require_numatgtd, send_signal};
use tests::mgmt::numatgtadm_bin;
use tests::tools;
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const B: &str = "iqn.2026-11.org.numatgt:reload-b";

fn wait_log(d: &Daemon, needle: &str, count: usize) {
    let t = Instant::now();
    while d.log().matches(needle).count() < count {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no `{needle}` (#{count}) in the log\n{}",
            d.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn targets(d: &Daemon) -> String {
    let r = tools::run(30, "iscsi-ls", [d.portal_url().as_str()]);
    r.check("iscsi-ls");
    r.stdout
}

#[test]
fn reload_touches_only_changed_targets() {
    require_numatgtd("reload");
    let perf = tools::require_tool("iscsi-perf");
    let d = Daemon::start(&[LunSpec::new(1, 512, 64 * MIB)]);
    let base = std::fs::read_to_string(&d.config_path).expect("read config");
    let b1 = d.dir.path().join("b1.img");
    let b2 = d.dir.path().join("b2.img");
    create_sparse(&b1, 8 * MIB);
    create_sparse(&b2, 4 * MIB);
    let with_b = |luns: &[&std::path::Path]| {
        let mut y = base.clone();
        y.push_str(&format!("  - iqn: {B}\n    luns:\n"));
        for (i, p) in luns.iter().enumerate() {
            y.push_str(&format!(
                "      - lun: {}\n        path: {}\n",
                i + 1,
                p.display()
            ));
        }
        y
    };

    let mut load = Command::new("timeout")
        .args(["-k", "5", "120"])
        .arg(perf)
        .args(["-m", "4", "-b", "8", "-r", &d.url(1)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iscsi-perf");
    wait_log(&d, "iscsi-perf", 1);
    std::thread::sleep(Duration::from_millis(500));

    // 1. add B (SIGHUP)
    std::fs::write(&d.config_path, with_b(&[&b1])).expect("write config");
    send_signal(d.pid(), libc::SIGHUP);
    wait_log(&d, "SIGHUP: reloaded", 1);
    assert!(
        d.log()
            .contains("1 added, 0 changed, 0 removed, 1 unchanged"),
        "{}",
        d.log_tail(20)
    );
    let ls = targets(&d);
    assert!(ls.contains(B) && ls.contains(TEST_IQN), "{ls}");

    // 2. change B: a second LUN (numatgtadm --reload)
    std::fs::write(&d.config_path, with_b(&[&b1, &b2])).expect("write config");
    let path = d.config_path.display().to_string();
    let r = d.admin_tool(&numatgtadm_bin(), &["--reload", &path]);
    r.check("numatgtadm --reload");
    assert!(
        r.stdout
            .contains("0 added, 1 changed, 0 removed, 1 unchanged"),
        "{r}"
    );
    let cap = tools::run(
        30,
        "iscsi-readcapacity16",
        [format!("{}/{B}/2", d.portal_url())],
    );
    cap.check("read capacity of B's new LUN");
    assert!(
        cap.stdout.contains(&format!("Total size:{}", 4 * MIB)),
        "{cap}"
    );

    // 3. an invalid file changes nothing
    std::fs::write(&d.config_path, "targets: [\n").expect("write config");
    let r = d.admin_tool(&numatgtadm_bin(), &["--reload", &path]);
    assert!(
        !r.status.success(),
        "a broken file must fail the reload: {r}"
    );
    assert!(
        r.stderr.contains("reload") || r.stderr.contains(&path),
        "{r}"
    );
    // the form the unit's ExecReload= runs (no FILE: the daemon's --config) fails the same
    // way, with tgtadm's EINVAL status and the file's error
    let r = d.admin_tool(&numatgtadm_bin(), &["--reload"]);
    assert_eq!(r.status.code(), Some(22), "{r}");
    assert!(r.stderr.starts_with(&format!("tgtadm: {path}:")), "{r}");
    assert!(targets(&d).contains(B), "B must survive a failed reload");

    // 4. remove B (SIGHUP)
    std::fs::write(&d.config_path, &base).expect("write config");
    send_signal(d.pid(), libc::SIGHUP);
    wait_log(&d, "SIGHUP: reloaded", 2);
    let ls = targets(&d);
    assert!(!ls.contains(B) && ls.contains(TEST_IQN), "{ls}");

    // A's reader never noticed
    std::thread::sleep(Duration::from_millis(500));
    let running = load.try_wait().expect("try_wait").is_none();
    send_signal(load.id(), libc::SIGINT);
    let _ = load.wait();
    let log = d.log();
    let perf_logins = log
        .lines()
        .filter(|l| l.contains("login complete") && l.contains("iscsi-perf"))
        .count();
    assert!(
        running,
        "iscsi-perf stopped during the reloads\n{}",
        d.log_tail(40)
    );
    assert_eq!(
        perf_logins,
        1,
        "iscsi-perf logged in again\n{}",
        d.log_tail(40)
    );
    assert!(
        !log.lines().any(|l| l.contains("connection closed")
            && l.contains("target reconfigured")
            && l.contains(TEST_IQN)),
        "A's session was closed\n{}",
        d.log_tail(40)
    );
}

/// A reload binds an iSER portal added to the file and closes it again when the file drops
/// it, as tgtadm's `--lld iser --mode portal` does; on a host without an RDMA device the
/// reload says why the portal could not be bound (never "at the next start").
#[test]
fn reload_binds_and_closes_iser_portals() {
    require_numatgtd("reload");
    let d = Daemon::start(&[LunSpec::new(1, 512, 8 * MIB)]);
    let base = std::fs::read_to_string(&d.config_path).expect("read config");
    let port = tests::daemon::free_port();
    let portal = format!("127.0.0.1:{port}");
    let path = d.config_path.display().to_string();
    let reload = |yaml: &str| {
        std::fs::write(&d.config_path, yaml).expect("write config");
        let r = d.admin_tool(&numatgtadm_bin(), &["--reload", &path]);
        format!("{}{}", r.stdout, r.stderr)
    };
    let listed = || {
        let r = d.tgtadm(&["--lld", "iser", "--mode", "portal", "--op", "show"]);
        r.stdout.contains(&portal)
    };
    let out = reload(&format!("{base}iser_portals:\n  - address: {portal}\n"));
    assert!(!out.contains("next start"), "{out}");
    let rdma = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut e| e.next().is_some());
    if !rdma {
        assert!(
            out.contains(&format!("iser portal {portal}: Bind(")),
            "no RDMA device: the reload must say the portal was not bound: {out}"
        );
        return;
    }
    assert!(listed(), "the reload bound the iSER portal {portal}: {out}");
    let out = reload(&format!("{base}iser_portals: []\n"));
    assert!(!out.contains(&format!("iser portal {portal}")), "{out}");
    assert!(
        !listed(),
        "the reload closed the iSER portal {portal}: {out}"
    );
}
