//! Resource limits (issue 15) against real peers on loopback: the session limit (global and
//! per target) refuses logins with status 0x0302 while existing sessions keep working, the
//! connection limit closes what is over it, a half-finished login is dropped after
//! `limits.login_timeout`, management clients beyond `limits.max_mgmt_clients` are refused
//! while a served one still gets its answer, and Debian's tgtadm shows and updates the
//! limits. Every refusal is counted in `numatgt_limit_refusals_total` and logged once per
//! burst.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use tests::mgmt::raw_request;
use tests::pdu::{self, ScsiSession};
use tests::{Daemon, LunSpec, MIB, TEST_IQN, TargetKind};

const TEST_UNIT_READY: [u8; 6] = [0; 6];

fn start(yaml: &str) -> Daemon {
    Daemon::start_kind_with(
        TargetKind::Numatgtd,
        &[LunSpec::new(1, 512, 16 * MIB)],
        yaml,
    )
}

fn refusals(d: &Daemon) -> BTreeMap<String, f64> {
    let (code, body) = d
        .http_get("/metrics")
        .unwrap_or_else(|e| panic!("GET /metrics: {e}\n{}", d.log_tail(30)));
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("numatgt_limit_refusals_total{limit=\"")?;
            let (label, value) = rest.split_once("\"} ")?;
            Some((label.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

fn refused(d: &Daemon, limit: &str) -> f64 {
    let m = refusals(d);
    *m.get(limit)
        .unwrap_or_else(|| panic!("no series for limit {limit}: {m:?}"))
}

/// A login of `initiator` to `iqn` that must be refused with 0x0302 (out of resources).
fn assert_out_of_resources(d: &Daemon, initiator: &str, iqn: &str) {
    match pdu::login_normal(d.addr(), initiator, iqn) {
        Ok(_) => panic!("{initiator}: login over the limit accepted"),
        Err(e) => assert!(e.contains("class 0x3 detail 0x2"), "{initiator}: {e}"),
    }
}

fn tur_ok(s: &mut ScsiSession, ctx: &str) {
    let (st, sense, _) = s.command(&TEST_UNIT_READY, &[], 0);
    assert_eq!(st, 0, "{ctx}: TEST UNIT READY failed, sense {sense:02x?}");
}

/// Polls `f` every 100 ms until it holds or `limit` passes.
fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// A login of `initiator` succeeds within 5 s (room was made).
fn assert_room_soon(d: &Daemon, initiator: &str) {
    assert!(
        wait_for(Duration::from_secs(5), || {
            pdu::login_normal(d.addr(), initiator, TEST_IQN).is_ok()
        }),
        "{initiator}: no room: {}",
        d.log_tail(20)
    );
}

#[test]
fn session_limit_refuses_with_out_of_resources_and_logs_once_per_burst() {
    let mut d = start("limits:\n  max_sessions: 2\n");
    let mut a = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:limits-a");
    let b = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:limits-b");
    for i in 0..4 {
        assert_out_of_resources(&d, &format!("iqn.2026-11.org.numatgt:over-{i}"), TEST_IQN);
    }
    // the sessions inside the limit keep working
    tur_ok(&mut a, "session a after the refusals");
    assert_eq!(refused(&d, "sessions"), 4.0);
    assert_eq!(refused(&d, "connections"), 0.0);
    let first = "login refused: 2 sessions (limits.max_sessions)";
    assert_eq!(d.log().matches(first).count(), 1, "{}", d.log_tail(20));
    // the other three are summarised in one line once the 10 s window is over
    let summary = "limit sessions: 3 more refused in the last 10s";
    assert!(
        wait_for(Duration::from_secs(15), || d.log().contains(summary)),
        "no summary line: {}",
        d.log_tail(20)
    );
    assert_eq!(d.log().matches(first).count(), 1, "{}", d.log_tail(20));
    // a session that ends makes room
    drop(b);
    assert_room_soon(&d, "iqn.2026-11.org.numatgt:limits-c");
    tur_ok(&mut a, "session a at the end");
    d.assert_alive("session limit");
}

#[test]
fn connection_limit_closes_what_is_over_it() {
    let mut d = start("limits:\n  max_connections: 3\n");
    let held: Vec<_> = (0..3).map(|_| pdu::connect(d.addr())).collect();
    assert!(
        wait_for(Duration::from_secs(5), || {
            let mut s = pdu::connect(d.addr());
            pdu::drain_until_close(&mut s, Duration::from_millis(500)).1
        }),
        "a 4th connection was not closed"
    );
    assert!(refused(&d, "connections") >= 1.0);
    assert!(
        d.log().contains("(limits.max_connections 3)"),
        "{}",
        d.log_tail(20)
    );
    drop(held);
    // room again: a whole login works
    assert_room_soon(&d, "iqn.2026-11.org.numatgt:after");
    d.assert_alive("connection limit");
}

#[test]
fn half_finished_login_is_dropped_after_the_login_timeout() {
    let mut d = start("limits:\n  login_timeout: 2\n");
    let mut session = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:patient");
    // half a Login Request header (slow loris) and a connection that sends nothing
    let mut half = pdu::connect(d.addr());
    half.write_all(&[0x43, 0x87, 0, 0, 0, 0, 0, 0x40, 0x80, 0, 0x4e, 0x47])
        .expect("send half a header");
    let mut mute = pdu::connect(d.addr());
    let t = Instant::now();
    let (_, closed) = pdu::drain_until_close(&mut half, Duration::from_secs(8));
    let took = t.elapsed();
    assert!(closed, "the half-finished login was not dropped in 8 s");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(5),
        "dropped after {took:?}, want about 2 s"
    );
    assert!(
        pdu::drain_until_close(&mut mute, Duration::from_secs(3)).1,
        "mute connection kept"
    );
    assert_eq!(refused(&d, "login_timeout"), 2.0);
    // a logged-in session is not subject to the login timeout
    tur_ok(&mut session, "logged-in session after the timeout");
    d.assert_alive("login timeout");
}

/// Sends `--op show --mode sys` on an open management connection and reads the answer.
fn show_sys_on(s: &mut UnixStream) -> (u32, String) {
    s.write_all(&raw_request(0, 2, -1, 120, b""))
        .expect("send request");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(out.len() >= 8, "short answer {out:?}");
    let code = u32::from_le_bytes([out[0], out[1], out[2], out[3]]);
    (code, String::from_utf8_lossy(&out[8..]).into_owned())
}

#[test]
fn management_clients_over_the_limit_are_refused_while_a_served_one_works() {
    let mut d = start("limits:\n  max_mgmt_clients: 2\n");
    let path = d.mgmt_socket();
    let mut first = UnixStream::connect(&path).expect("client 1");
    let _second = UnixStream::connect(&path).expect("client 2");
    // both are taken in (each on its thread) before the third arrives
    std::thread::sleep(Duration::from_millis(300));
    let r = d.tgtadm(&["--op", "show", "--mode", "sys"]);
    assert!(!r.status.success(), "a third client was served: {r}");
    assert!(r.stderr.contains("this driver is busy"), "{r}");
    // the first client, served all along, gets its answer
    let (code, text) = show_sys_on(&mut first);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("System:"), "{text}");
    assert!(refused(&d, "mgmt_clients") >= 1.0);
    drop(_second);
    assert!(
        wait_for(Duration::from_secs(5), || d
            .tgtadm(&["--op", "show", "--mode", "sys"])
            .status
            .success()),
        "tgtadm refused after the clients left: {}",
        d.log_tail(20)
    );
    d.assert_alive("mgmt clients");
}

#[test]
fn debian_tgtadm_shows_and_updates_the_limits() {
    tests::tools::require_tool("tgtadm");
    let mut d = start("");
    let sys = d.tgtadm(&["--op", "show", "--mode", "sys"]);
    sys.check("show sys");
    for line in [
        "Limits:\n",
        "    MaxSessions=1024\n",
        "    MaxConnections=4096\n",
        "    LoginTimeout=15\n",
        "    MaxMgmtClients=64\n",
    ] {
        assert!(sys.stdout.contains(line), "{line:?} missing: {sys}");
    }
    let update = |name: &str, value: &str| {
        d.tgtadm(&[
            "--op", "update", "--mode", "sys", "--name", name, "--value", value,
        ])
    };
    update("MaxSessions", "1").check("MaxSessions 1");
    // bad values are refused and change nothing
    for (name, value) in [
        ("MaxSessions", "0"),
        ("MaxSessions", "70000"),
        ("LoginTimeout", "abc"),
        ("max_mgmt_clients", "-1"),
    ] {
        let r = update(name, value);
        assert!(!r.status.success(), "{name}={value} accepted: {r}");
        assert!(r.stderr.contains("invalid request"), "{name}={value}: {r}");
    }
    let sys = d.tgtadm(&["--op", "show", "--mode", "sys"]);
    assert!(sys.stdout.contains("    MaxSessions=1\n"), "{sys}");
    let mut one = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:only");
    assert_out_of_resources(&d, "iqn.2026-11.org.numatgt:second", TEST_IQN);
    assert_eq!(refused(&d, "sessions"), 1.0);
    // the target's own limit (the global one raised again)
    update("max_sessions", "100").check("max_sessions 100");
    let target_update: Vec<&str> = "--op update --mode target --tid 1 --name MaxSessions --value 2"
        .split(' ')
        .collect();
    d.tgtadm(&target_update).check("target MaxSessions 2");
    let show = d.tgtadm(&["--op", "show", "--mode", "target"]);
    assert!(show.stdout.contains("        Max sessions: 2\n"), "{show}");
    let _two = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:two");
    assert_out_of_resources(&d, "iqn.2026-11.org.numatgt:third", TEST_IQN);
    assert_eq!(refused(&d, "target_sessions"), 1.0);
    tur_ok(&mut one, "first session");
    d.assert_alive("tgtadm limits");
}

/// A command beyond MaxCmdSN (more than `MaxQueueCmd` outstanding) is dropped silently on
/// the wire (RFC 7143 4.2.2.1), counted as `limit="command_window"`, logged once per burst,
/// and the session goes on.
#[test]
fn commands_outside_the_cmdsn_window_are_dropped_and_counted() {
    let mut d = start("");
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:window");
    assert_eq!(refused(&d, "command_window"), 0.0);
    let far = s.cmd_sn().wrapping_add(100_000);
    for k in 0..5u32 {
        // a non-immediate TEST UNIT READY (F bit) far beyond MaxCmdSN
        let bhs = pdu::Bhs::new(0x01, false)
            .flags(0x80)
            .set_u32(8, 1 << 16) // LUN 1
            .itt(0x7000 + k)
            .set_u32(24, far.wrapping_add(k))
            .set_u32(28, 0);
        s.stream.write_all(bhs.bytes()).expect("send");
    }
    assert!(
        wait_for(Duration::from_secs(5), || refused(&d, "command_window")
            >= 5.0),
        "five dropped commands counted: {:?}",
        refusals(&d)
    );
    tur_ok(&mut s, "after the dropped commands");
    let lines = d
        .log()
        .lines()
        .filter(|l| l.contains("command dropped") && l.contains("beyond MaxCmdSN"))
        .count();
    assert_eq!(lines, 1, "one log line for the burst:\n{}", d.log_tail(20));
    d.assert_alive("after out-of-window commands");
}
