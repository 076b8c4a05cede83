//! (g) SIGTERM stops numatgtd within 5 s with exit status 0 while sessions are open (one idle
//! raw session in full-feature phase, one libiscsi session doing reads), and the open session
//! is closed by the target. Also: the "listening on" line of the interface spec is logged.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::daemon::{require_numatgtd, send_signal};
use tests::pdu;
use tests::tools;
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

#[test]
fn sigterm_with_open_sessions_exits_zero_within_5s() {
    require_numatgtd("signals");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 64 * MIB)]);
    let mut raw = pdu::login_normal(d.addr(), "iqn.2026-11.org.numatgt:sigterm-test", TEST_IQN)
        .unwrap_or_else(|e| panic!("raw login failed: {e}\n{}", d.log_tail(100)));

    let perf = tools::require_tool("iscsi-perf");
    let mut load = Command::new(perf)
        .args(["-m", "4", "-b", "8", "-r", &d.url(1)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iscsi-perf");
    std::thread::sleep(Duration::from_millis(1500));
    let perf_running = load.try_wait().expect("try_wait iscsi-perf").is_none();

    d.assert_alive("before SIGTERM");
    let (status, took) = d.terminate(Duration::from_secs(5));

    // stop the load generator by PID: SIGINT, then SIGKILL
    send_signal(load.id(), libc::SIGINT);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) && load.try_wait().ok().flatten().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = load.kill();
    let _ = load.wait();

    let status = status.unwrap_or_else(|| {
        panic!(
            "numatgtd did not exit within 5 s of SIGTERM (SIGKILLed)\n{}",
            d.log_tail(100)
        )
    });
    assert!(
        status.success(),
        "numatgtd exited with {status} after SIGTERM (want 0)\n{}",
        d.log_tail(100)
    );
    assert!(took <= Duration::from_secs(5), "stop took {took:?}");
    assert!(
        perf_running,
        "iscsi-perf was not running when SIGTERM was sent"
    );
    let (_, closed) = pdu::drain_until_close(&mut raw.stream, Duration::from_secs(2));
    assert!(
        closed,
        "the raw session's connection is still open after the daemon exited"
    );
    eprintln!("SIGTERM -> exit 0 in {took:?}");
}

#[test]
fn logs_listening_line() {
    require_numatgtd("signals");
    let d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let want = format!("listening on 127.0.0.1:{}", d.port);
    let t = Instant::now();
    while !d.log().contains(&want) && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        d.log().contains(&want),
        "log lacks `{want}`\n{}",
        d.log_tail(50)
    );
}
