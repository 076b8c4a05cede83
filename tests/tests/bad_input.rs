//! (e) Hostile or broken clients on raw TCP: garbage bytes, a BHS announcing a huge data
//! segment, an unknown opcode before login, a login without InitiatorName, truncated PDUs.
//! After each, the daemon must still run and a fresh `iscsi-ls` must work - both while the
//! bad connection is still open (one bad peer must not block the others) and after it closed.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use rand::RngCore;
use tests::pdu::{self, Bhs, ReadOutcome};
use tests::tools;
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const INITIATOR: &str = "iqn.2026-11.org.numatgt:bad-input-test";

fn start() -> Daemon {
    Daemon::start(&[LunSpec::new(1, 512, 64 * MIB)])
}

/// The daemon is alive and serves a fresh discovery + LUN listing.
fn assert_serving(d: &mut Daemon, ctx: &str) {
    d.assert_alive(ctx);
    let r = tools::run(30, "iscsi-ls", ["-s", &d.portal_url()]);
    assert!(
        r.status.success() && r.stdout.contains(TEST_IQN) && r.stdout.contains("Lun:1"),
        "iscsi-ls failed {ctx}\n{r}"
    );
    d.assert_alive(ctx);
}

/// Send `bytes`, check service with the bad connection open, then close it and check again.
fn send_then_check(d: &mut Daemon, what: &str, bytes: &[u8]) -> TcpStream {
    let mut s = pdu::connect(d.addr());
    // the target may close early; a write error here is an acceptable reaction
    let _ = s.write_all(bytes);
    assert_serving(d, &format!("with the `{what}` connection open"));
    s
}

#[test]
fn garbage_bytes() {
    let mut d = start();
    let mut junk = vec![0u8; 4096];
    rand::thread_rng().fill_bytes(&mut junk);
    let mut s = send_then_check(&mut d, "garbage", &junk);
    let (n, closed) = pdu::drain_until_close(&mut s, Duration::from_secs(3));
    eprintln!("garbage: target sent {n} bytes, closed={closed}");
    drop(s);
    assert_serving(&mut d, "after garbage bytes");
}

#[test]
fn huge_data_segment_length() {
    let mut d = start();
    // a Login Request announcing a 16 MiB - 1 data segment (far above any MaxRecvDataSegmentLength)
    let bhs = Bhs::new(pdu::OP_LOGIN_REQ, true)
        .flags(0x81)
        .data_len(0x00ff_ffff)
        .itt(1);
    let mut s = send_then_check(&mut d, "huge DataSegmentLength", bhs.bytes());
    // and some of that data, as a slow attacker would
    let _ = s.write_all(&[0x41u8; 65536]);
    d.assert_alive("after 64 KiB of the huge segment");
    let (n, closed) = pdu::drain_until_close(&mut s, Duration::from_secs(3));
    eprintln!("huge DSL: target sent {n} bytes, closed={closed}");
    drop(s);
    assert_serving(&mut d, "after a huge DataSegmentLength");
}

#[test]
fn unknown_opcode_before_login() {
    let mut d = start();
    // opcode 0x0f is reserved for initiators (RFC 7143 §11.1.1); the first PDU must be a login
    let bhs = Bhs::new(0x0f, true).flags(0x80).itt(7);
    let mut s = send_then_check(&mut d, "unknown opcode", bhs.bytes());
    let (n, closed) = pdu::drain_until_close(&mut s, Duration::from_secs(5));
    eprintln!("unknown opcode: target sent {n} bytes, closed={closed}");
    assert!(
        closed,
        "target kept a connection open for 5 s after a non-login first PDU (opcode 0x0f)"
    );
    drop(s);
    assert_serving(&mut d, "after an unknown opcode before login");
}

#[test]
fn login_without_initiator_name() {
    let mut d = start();
    let req = pdu::login_request(
        [0x80, 0, 0, 0, 0, 9],
        1,
        1,
        pdu::STAGE_SECURITY,
        pdu::STAGE_OPERATIONAL,
        true,
        &[
            ("TargetName", TEST_IQN),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ],
    );
    let mut s = pdu::connect(d.addr());
    s.write_all(&req).expect("send login request");
    match pdu::read_pdu(&mut s, Duration::from_secs(5)) {
        ReadOutcome::Pdu(p) => {
            assert_eq!(
                p.opcode(),
                pdu::OP_LOGIN_RSP,
                "expected a Login Response, got opcode {:#x}",
                p.opcode()
            );
            let (class, detail) = p.login_status();
            eprintln!("login without InitiatorName: status class {class:#x} detail {detail:#x}");
            assert_eq!(
                class, 2,
                "login without InitiatorName must fail with an initiator error (class 2), got \
                 class {class:#x} detail {detail:#x}"
            );
        }
        other => panic!("no Login Response to a login without InitiatorName: {other:?}"),
    }
    assert_serving(&mut d, "with the rejected login connection open");
    let (_, closed) = pdu::drain_until_close(&mut s, Duration::from_secs(5));
    assert!(
        closed,
        "target did not close the connection after a failed login"
    );
    drop(s);
    assert_serving(&mut d, "after a login without InitiatorName");
}

#[test]
fn truncated_pdus_then_close() {
    let mut d = start();
    let login = pdu::login_request(
        [0x80, 0, 0, 0, 0, 10],
        1,
        1,
        pdu::STAGE_SECURITY,
        pdu::STAGE_OPERATIONAL,
        true,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TEST_IQN),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ],
    );
    // half a BHS, then close
    let s = send_then_check(&mut d, "half a BHS", &login[..20]);
    s.shutdown(Shutdown::Write).expect("shutdown(write)");
    drop(s);
    assert_serving(&mut d, "after half a BHS then close");
    // a whole BHS but only part of its data segment, then close
    let s = send_then_check(
        &mut d,
        "truncated data segment",
        &login[..pdu::BHS_LEN + 10],
    );
    s.shutdown(Shutdown::Both).expect("shutdown(both)");
    drop(s);
    assert_serving(&mut d, "after a truncated data segment then close");
}

#[test]
fn many_bad_connections_in_a_row() {
    let mut d = start();
    assert_serving(&mut d, "at start");
    let fds_before = d.open_fds();
    for i in 0..50u32 {
        let mut s = pdu::connect(d.addr());
        let mut junk = vec![0u8; 48 + (i as usize % 7) * 13];
        rand::thread_rng().fill_bytes(&mut junk);
        let _ = s.write_all(&junk);
        drop(s);
    }
    assert_serving(&mut d, "after 50 short-lived garbage connections");
    // every bad connection must have been closed by the target: no descriptor leak
    let start = std::time::Instant::now();
    let mut fds = d.open_fds();
    while fds > fds_before + 2 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        fds = d.open_fds();
    }
    assert!(
        fds <= fds_before + 2,
        "daemon holds {fds} descriptors after 50 closed bad connections (was {fds_before})"
    );
}
