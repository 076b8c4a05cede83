//! numatgtd under systemd: the shipped unit file (tools/systemd/numatgtd.service) passes
//! `systemd-analyze verify`, and the daemon speaks the Type=notify protocol — `READY=1` only
//! once its portal accepts connections, `STOPPING=1` on SIGTERM — to the socket named by
//! NOTIFY_SOCKET, as systemd would provide it.

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
    // verify it with the binary under test in place of the installed path
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("numatgtd.service");
    let bin = numatgtd_bin();
    std::fs::write(
        &path,
        unit.replace("/usr/local/sbin/numatgtd", &bin.display().to_string()),
    )
    .expect("write unit");
    let run = tools::run(
        30,
        &analyze.display().to_string(),
        ["verify", &path.display().to_string()],
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
