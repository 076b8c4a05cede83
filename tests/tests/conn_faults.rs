//! Connection faults (issue 15): initiators that vanish at the worst moments, on raw TCP,
//! while a canary session on the same target writes and verifies blocks throughout:
//! in the middle of a Data-Out burst, in the middle of a large Data-In, between the R2Ts of
//! one write; a task aborted while its cached blocks are pinned for sending and the socket
//! is full; a session reinstated (same ISID) while commands are in flight; a logout sent
//! under unread Data-In. Afterwards nothing leaks (descriptors back where they were, memory
//! flat), nothing hangs (a fresh session reads the LUN's data), and the canary never failed.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tests::cdb::{cdb10, rss_kib};
use tests::pdu::{self, Bhs, ReadOutcome, ScsiSession};
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const BLOCK: usize = 512;

/// A logged-in raw connection and the CmdSN to use next.
fn session(d: &Daemon, initiator: &str) -> (TcpStream, u32) {
    let rs = pdu::login_normal(d.addr(), initiator, TEST_IQN).expect("login");
    let b = &rs.login_response.bhs;
    (rs.stream, u32::from_be_bytes([b[28], b[29], b[30], b[31]]))
}

fn command(itt: u32, cmd_sn: u32, cdb: &[u8], write: bool, edtl: u32) -> Bhs {
    let mut b = Bhs::new(0x01, false)
        .flags(0x80 | if write { 0x20 } else { 0x40 })
        .itt(itt)
        .set_u32(20, edtl)
        .set_u32(24, cmd_sn);
    b.0[8..10].copy_from_slice(&[0, 1]);
    b.0[32..32 + cdb.len()].copy_from_slice(cdb);
    b
}

fn data_out(itt: u32, ttt: u32, offset: u32, len: usize, last: bool) -> Vec<u8> {
    let mut b = Bhs::new(0x05, false)
        .flags(if last { 0x80 } else { 0 })
        .data_len(len as u32)
        .itt(itt)
        .set_u32(20, ttt)
        .set_u32(40, offset);
    b.0[8..10].copy_from_slice(&[0, 1]);
    let mut v = b.bytes().to_vec();
    v.extend(std::iter::repeat_n(0xabu8, len));
    v
}

/// Sends `n` 1 MiB READs (ITTs `first_itt`.., CmdSNs from `cmd_sn`) and does not read
/// their Data-In.
fn queue_reads(s: &mut TcpStream, first_itt: u32, cmd_sn: u32, n: u32) {
    for k in 0..n {
        let lba = u64::from(k % 16) * 2048;
        let c = command(
            first_itt + k,
            cmd_sn + k,
            &cdb10(0x28, lba, 2048),
            false,
            MIB as u32,
        );
        let _ = s.write_all(c.bytes());
    }
}

/// The next R2T's (TTT, offset, length), if one comes.
fn next_r2t(s: &mut TcpStream) -> Option<(u32, u32, u32)> {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match pdu::read_pdu(s, Duration::from_secs(3)) {
            ReadOutcome::Pdu(p) if p.opcode() == 0x31 => {
                let w = |o: usize| {
                    u32::from_be_bytes([p.bhs[o], p.bhs[o + 1], p.bhs[o + 2], p.bhs[o + 3]])
                };
                return Some((w(20), w(40), w(44)));
            }
            ReadOutcome::Pdu(_) => {}
            _ => return None,
        }
    }
    None
}

/// Reads (and drops) what the target sends until it closes the connection (true) or `t`
/// passes (false).
fn closes_within(s: &mut TcpStream, t: Duration) -> bool {
    let deadline = Instant::now() + t;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        if pdu::drain_until_close(s, left).1 {
            return true;
        }
    }
}

/// Closes with a reset (SO_LINGER 0): the initiator vanishes, no FIN handshake.
fn vanish(s: TcpStream) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}

#[test]
fn vanishing_initiators_leak_nothing_and_disturb_no_one() {
    let mut d = Daemon::start(&[LunSpec::new(1, BLOCK as u32, 64 * MIB)]);
    let pid = d.pid();
    // known contents in the first 8 MiB, cached by a first read
    let mut w = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:seed");
    let chunk = vec![0x5au8; 64 * 1024];
    for i in 0..128u64 {
        let (st, _, _) = w.command(&cdb10(0x2a, i * 128, 128), &chunk, 0);
        assert_eq!(st, 0, "seed write {i}");
    }
    drop(w);

    let stop = Arc::new(AtomicBool::new(false));
    let canary = {
        let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:canary");
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            let mut worst = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let lba = 20_000 + (n % 512) * 8;
                let data = vec![(n % 251) as u8 + 1; 8 * BLOCK];
                let t = Instant::now();
                assert_eq!(
                    s.command(&cdb10(0x2a, lba, 8), &data, 0).0,
                    0,
                    "canary write"
                );
                let (st, _, back) = s.command(&cdb10(0x28, lba, 8), &[], 8 * BLOCK as u32);
                assert!(st == 0 && back == data, "canary read at {lba}");
                worst = worst.max(t.elapsed());
                n += 1;
            }
            (n, worst)
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (rss0, fds0) = (rss_kib(pid), d.open_fds());
    let mut report = Vec::new();

    // 1. vanish in the middle of a Data-Out burst
    for i in 0..10u32 {
        let (mut s, sn) = session(&d, &format!("iqn.2026-11.org.numatgt:dout{i}"));
        let _ = s.write_all(command(1, sn, &cdb10(0x2a, 4096, 128), true, 64 * 1024).bytes());
        if let Some((ttt, off, _)) = next_r2t(&mut s) {
            let _ = s.write_all(&data_out(1, ttt, off, 8192, false));
        }
        vanish(s);
    }
    report.push("mid Data-Out: 10 initiators reset the connection after 8 KiB of a 64 KiB burst");

    // 2. vanish in the middle of a 1 MiB Data-In (cached blocks being sent)
    for i in 0..10u32 {
        let (mut s, sn) = session(&d, &format!("iqn.2026-11.org.numatgt:din{i}"));
        let _ = s.write_all(command(1, sn, &cdb10(0x28, 0, 2048), false, MIB as u32).bytes());
        let _ = pdu::read_pdu(&mut s, Duration::from_secs(3)); // one Data-In, then gone
        vanish(s);
    }
    report.push("mid Data-In: 10 initiators reset after the first PDU of a 1 MiB READ");

    // 3. vanish between the R2Ts of one write (1 MiB, several bursts)
    for i in 0..10u32 {
        let (mut s, sn) = session(&d, &format!("iqn.2026-11.org.numatgt:r2t{i}"));
        let _ = s.write_all(command(1, sn, &cdb10(0x2a, 8192, 2048), true, MIB as u32).bytes());
        if let Some((ttt, off, len)) = next_r2t(&mut s) {
            let _ = s.write_all(&data_out(1, ttt, off, len as usize, true));
        }
        vanish(s);
    }
    report.push(
        "mid R2T sequence: 10 initiators answered the first R2T of a 1 MiB WRITE, then reset",
    );

    // 4. a task whose cached blocks are pinned for sending, aborted with the socket full
    for i in 0..5u32 {
        let (mut s, sn) = session(&d, &format!("iqn.2026-11.org.numatgt:abort{i}"));
        queue_reads(&mut s, 10, sn, 8);
        std::thread::sleep(Duration::from_millis(100)); // the socket fills; blocks stay pinned
        let mut tmf = Bhs::new(0x02, true)
            .flags(0x80 | 0x01)
            .itt(99)
            .set_u32(20, 17)
            .set_u32(24, sn + 8);
        tmf.0[8..10].copy_from_slice(&[0, 1]);
        let _ = s.write_all(tmf.bytes());
        std::thread::sleep(Duration::from_millis(50));
        vanish(s);
    }
    report.push(
        "abort with pinned blocks: 5 sessions queue 8 MiB of READs unread, ABORT TASK, reset",
    );

    // 5. reinstatement (same ISID) while commands are in flight on the old connection
    let mut olds = Vec::new();
    for _ in 0..10 {
        let (mut s, sn) = session(&d, "iqn.2026-11.org.numatgt:reinstate");
        queue_reads(&mut s, 1, sn, 4);
        olds.push(s);
    }
    let mut closed = 0;
    for s in olds.iter_mut().take(9) {
        closed += usize::from(closes_within(s, Duration::from_secs(3)));
    }
    drop(olds);
    report.push(if closed == 9 {
        "reinstatement under I/O: 10 logins with one ISID, each with 4 MiB of READs in flight; all 9 old connections closed"
    } else {
        "reinstatement under I/O: NOT all old connections were closed"
    });
    assert_eq!(
        closed, 9,
        "old connections the reinstatement should have closed"
    );

    // 6. logout with unread Data-In queued
    let mut finished = 0;
    for i in 0..5u32 {
        let (mut s, sn) = session(&d, &format!("iqn.2026-11.org.numatgt:logout{i}"));
        queue_reads(&mut s, 1, sn, 4);
        let logout = Bhs::new(0x06, true).flags(0x80).itt(50).set_u32(24, sn + 4);
        let _ = s.write_all(logout.bytes());
        let t = Instant::now();
        let mut got_logout = false;
        while t.elapsed() < Duration::from_secs(5) {
            match pdu::read_pdu(&mut s, Duration::from_secs(5)) {
                ReadOutcome::Pdu(p) if p.opcode() == 0x26 => got_logout = true,
                ReadOutcome::Pdu(_) => {}
                _ => break,
            }
        }
        finished += usize::from(got_logout);
    }
    report.push(if finished == 5 {
        "logout under I/O: 5 sessions with 4 MiB of READs unread; every one got its Logout Response and was closed"
    } else {
        "logout under I/O: a Logout Response was missing"
    });
    assert_eq!(finished, 5, "logouts answered under I/O");

    // nothing hangs: the data is intact through a fresh session; nothing leaks
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (ops, worst) = canary
        .join()
        .expect("the canary failed (see its panic above)");
    d.assert_alive("after the connection faults");
    let mut r = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:after");
    for i in [0u64, 63, 127] {
        let (st, _, data) = r.command(&cdb10(0x28, i * 128, 128), &[], 64 * 1024);
        assert!(
            st == 0 && data == chunk,
            "seeded chunk {i} after the faults"
        );
    }
    drop(r);
    let t0 = Instant::now();
    while d.open_fds() > fds0 + 1 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (rss1, fds1) = (rss_kib(pid), d.open_fds());
    if fds1 > fds0 + 1 {
        let ss = std::process::Command::new("ss")
            .args(["-tanpi"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mine: Vec<&str> = ss
            .lines()
            .filter(|l| l.contains(&format!("pid={pid},")))
            .collect();
        eprintln!("conn faults: numatgtd's sockets:\n{}", mine.join("\n"));
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|r| {
                r.filter_map(Result::ok)
                    .map(|e| {
                        format!(
                            "{} -> {}",
                            e.file_name().to_string_lossy(),
                            std::fs::read_link(e.path())
                                .map(|p| p.display().to_string())
                                .unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        eprintln!("conn faults: numatgtd's descriptors:\n{}", fds.join("\n"));
    }
    for l in &report {
        eprintln!("conn faults: {l}");
    }
    eprintln!(
        "conn faults: canary {ops} write+read pairs, slowest {worst:.1?}; RSS {rss0} -> {rss1} \
         KiB; descriptors {fds0} -> {fds1}"
    );
    assert!(ops > 50, "the canary hardly ran: {ops}");
    assert!(
        worst < Duration::from_secs(3),
        "the canary waited {worst:?}"
    );
    assert!(
        fds1 <= fds0 + 1,
        "descriptors {fds0} -> {fds1}\n{}",
        d.log_tail(20)
    );
    assert!(rss1 < rss0 + 64 * 1024, "RSS {rss0} -> {rss1} KiB");
    // a clean stop still works: no task is stuck holding the daemon
    let (st, took) = d.terminate(Duration::from_secs(30));
    assert!(
        st.is_some_and(|s| s.success()) && took < Duration::from_secs(15),
        "clean stop after the faults: {st:?} in {took:?}"
    );
}
