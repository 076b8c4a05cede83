//! Hostile initiators (issue 15): one daemon meets a matrix of misbehaving peers on raw TCP,
//! loopback only, each case bounded in count and time, while a well-behaved session (the
//! canary) keeps writing and reading back verified data the whole time. Afterwards the
//! daemon is alive, the canary never failed and its slowest command stayed under a bound,
//! and numatgtd's memory and descriptors are back near where they started.
//!
//! Cases: malformed headers, a lying data-segment length, commands far outside the CmdSN
//! window, Data-Out for unknown tasks, an R2T overrun, a task-management storm, half-finished
//! logins, a slow loris, a login flood, a thousand idle connections, a reinstatement storm
//! with one ISID.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, RngCore};
use tests::cdb::{cdb10, rss_kib};
use tests::pdu::{self, Bhs, ReadOutcome, ScsiSession};
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const BLOCK: usize = 512;

/// The canary: writes 4 KiB patterns at LBAs 0..8192 and reads each back, until `stop`;
/// returns (commands, slowest command).
fn canary(d: &Daemon, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, Duration)> {
    let mut s = ScsiSession::open(d, "iqn.2026-11.org.numatgt:canary");
    std::thread::spawn(move || {
        let mut rng = rand::thread_rng();
        let (mut n, mut worst) = (0u64, Duration::ZERO);
        while !stop.load(Ordering::Relaxed) {
            let lba = rng.gen_range(0..1024u64) * 8;
            let pat: u8 = rng.gen_range(1..=255);
            let data = vec![pat; 8 * BLOCK];
            let t = Instant::now();
            let (st, sense, _) = s.command(&cdb10(0x2a, lba, 8), &data, 0);
            assert_eq!(st, 0, "canary WRITE at {lba}: sense {sense:02x?}");
            let (st, _, back) = s.command(&cdb10(0x28, lba, 8), &[], 8 * BLOCK as u32);
            assert!(
                st == 0 && back == data,
                "canary READ at {lba}: status {st:#x}"
            );
            worst = worst.max(t.elapsed());
            n += 2;
        }
        (n, worst)
    })
}

fn login(d: &Daemon, initiator: &str) -> TcpStream {
    pdu::login_normal(d.addr(), initiator, TEST_IQN)
        .unwrap_or_else(|e| panic!("login {initiator}: {e}"))
        .stream
}

/// A non-immediate SCSI Command header for LUN 1.
fn command_bhs(itt: u32, cmd_sn: u32, cdb: &[u8], write: bool, edtl: u32, dlen: u32) -> Bhs {
    let mut b = Bhs::new(0x01, false)
        .flags(0x80 | if write { 0x20 } else { 0x40 })
        .data_len(dlen)
        .itt(itt)
        .set_u32(20, edtl)
        .set_u32(24, cmd_sn);
    b.0[8..10].copy_from_slice(&[0, 1]);
    b.0[32..32 + cdb.len()].copy_from_slice(cdb);
    b
}

/// Reads whatever the target sends until it closes or `t` passes; true if it closed.
fn closed_within(s: &mut TcpStream, t: Duration) -> bool {
    pdu::drain_until_close(s, t).1
}

#[test]
fn hostile_matrix_leaves_a_well_behaved_session_unharmed() {
    let mut d = Daemon::start(&[LunSpec::new(1, BLOCK as u32, 64 * MIB)]);
    let pid = d.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let canary = canary(&d, Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, fds0) = (rss_kib(pid), d.open_fds());
    let mut report: Vec<String> = Vec::new();
    let mut rng = rand::thread_rng();

    // 1. malformed headers after login: random BHS bytes
    let (mut dropped, mut answered_bytes) = (0, 0);
    for i in 0..30 {
        let mut s = login(&d, &format!("iqn.2026-11.org.numatgt:junk{i}"));
        s.set_nonblocking(false).expect("blocking");
        let mut junk = [0u8; 48];
        rng.fill_bytes(&mut junk);
        junk[4..8].fill(0); // no AHS, no data segment: only the header is nonsense
        let _ = s.write_all(&junk);
        let (n, closed) = pdu::drain_until_close(&mut s, Duration::from_millis(300));
        answered_bytes += n;
        dropped += usize::from(closed);
    }
    report.push(format!(
        "malformed headers: 30 sessions, {dropped} dropped by the target within 0.3 s, \
         {answered_bytes} bytes of answers (Reject PDUs are 48 bytes + the header)"
    ));

    // 2. a lying data-segment length: announces 256 KiB, sends 100 bytes, goes quiet
    let mut liars = Vec::new();
    for i in 0..20 {
        let mut s = login(&d, &format!("iqn.2026-11.org.numatgt:liar{i}"));
        let h = command_bhs(1, 1, &cdb10(0x2a, 0, 512), true, 256 * 1024, 256 * 1024);
        let _ = s.write_all(h.bytes());
        let _ = s.write_all(&[0x77; 100]);
        liars.push(s);
    }
    std::thread::sleep(Duration::from_secs(1));
    drop(liars);
    report.push("lying data-segment length: 20 sessions held 1 s, then closed".into());

    // 3. commands far outside the CmdSN window, then an immediate TUR must still answer
    let mut answered = 0;
    for i in 0..10 {
        let rs = pdu::login_normal(
            d.addr(),
            &format!("iqn.2026-11.org.numatgt:win{i}"),
            TEST_IQN,
        )
        .expect("login");
        let b = &rs.login_response.bhs;
        let exp = u32::from_be_bytes([b[28], b[29], b[30], b[31]]);
        let mut s = rs.stream;
        for k in 0..50u32 {
            let h = command_bhs(100 + k, exp.wrapping_add(100_000 + k), &[0; 6], false, 0, 0);
            let _ = s.write_all(h.bytes());
        }
        let mut tur = Bhs::new(0x01, true).flags(0x80).itt(999).set_u32(24, exp);
        tur.0[8..10].copy_from_slice(&[0, 1]);
        let _ = s.write_all(tur.bytes());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match pdu::read_pdu(&mut s, Duration::from_secs(3)) {
                ReadOutcome::Pdu(p)
                    if p.opcode() == 0x21 && p.bhs[16..20] == 999u32.to_be_bytes() =>
                {
                    answered += 1;
                    break;
                }
                ReadOutcome::Pdu(_) => {}
                _ => break,
            }
        }
    }
    report.push(format!(
        "CmdSN far outside the window: 10 sessions x 50 commands, the immediate TUR after \
         them answered in {answered}"
    ));

    // 4. Data-Out for tasks that do not exist
    let mut dropped = 0;
    for i in 0..10 {
        let mut s = login(&d, &format!("iqn.2026-11.org.numatgt:dout{i}"));
        for _ in 0..100 {
            let mut b = Bhs::new(0x05, false)
                .flags(0x80)
                .data_len(512)
                .itt(rng.r#gen())
                .set_u32(20, rng.r#gen());
            b.0[8..10].copy_from_slice(&[0, 1]);
            let _ = s.write_all(b.bytes());
            let _ = s.write_all(&[0u8; 512]);
        }
        dropped += usize::from(closed_within(&mut s, Duration::from_millis(300)));
    }
    report.push(format!(
        "Data-Out for unknown tasks: 10 sessions x 100, {dropped} sessions dropped"
    ));

    // 5. R2T overrun: a 64 KiB WRITE without immediate data, then twice the data asked for
    let (mut overruns, mut overrun_dropped) = (0, 0);
    for i in 0..10 {
        let rs = pdu::login_normal(
            d.addr(),
            &format!("iqn.2026-11.org.numatgt:r2t{i}"),
            TEST_IQN,
        )
        .expect("login");
        let b = &rs.login_response.bhs;
        let exp = u32::from_be_bytes([b[28], b[29], b[30], b[31]]);
        let mut s = rs.stream;
        let h = command_bhs(7, exp, &cdb10(0x2a, 2048, 128), true, 64 * 1024, 0);
        let _ = s.write_all(h.bytes());
        if let ReadOutcome::Pdu(p) = pdu::read_pdu(&mut s, Duration::from_secs(3))
            && p.opcode() == 0x31
        {
            let ttt = u32::from_be_bytes([p.bhs[20], p.bhs[21], p.bhs[22], p.bhs[23]]);
            let mut b = Bhs::new(0x05, false)
                .flags(0x80)
                .data_len(128 * 1024)
                .itt(7)
                .set_u32(20, ttt)
                .set_u32(40, 32 * 1024);
            b.0[8..10].copy_from_slice(&[0, 1]);
            let _ = s.write_all(b.bytes());
            let _ = s.write_all(&vec![0xee; 128 * 1024]);
            overruns += 1;
        }
        overrun_dropped += usize::from(closed_within(&mut s, Duration::from_secs(1)));
    }
    report.push(format!(
        "R2T overrun: {overruns} sessions sent 128 KiB at offset 32 KiB of a 64 KiB R2T, \
         {overrun_dropped} dropped by the target"
    ));

    // 6. task-management storm: ABORT TASK for tasks that do not exist
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:tmf");
    let t0 = Instant::now();
    let mut answers = [0usize; 256];
    for k in 0..1000 {
        answers[usize::from(s.task_management(0x01, 0x7000_0000 + k))] += 1;
    }
    report.push(format!(
        "task-management storm: 1000 ABORT TASK for unknown tasks in {:.1?}, {} answered \
         'task does not exist' or 'function complete'",
        t0.elapsed(),
        answers[0] + answers[1]
    ));
    drop(s);

    // 7. half-finished logins and 8. a slow loris, held open together
    let mut half = Vec::new();
    for i in 0..100 {
        let mut s = pdu::connect(d.addr());
        let req = pdu::login_request(
            [0x80, 0, 0, 0, 0, i as u8],
            1,
            1,
            pdu::STAGE_SECURITY,
            pdu::STAGE_OPERATIONAL,
            false,
            &[
                ("InitiatorName", "iqn.2026-11.org.numatgt:half"),
                ("SessionType", "Normal"),
            ],
        );
        let _ = s.write_all(&req);
        half.push(s);
    }
    let loris: Vec<_> = (0..10)
        .map(|i| {
            let addr = d.addr();
            std::thread::spawn(move || {
                let mut s = pdu::connect(addr);
                let req = pdu::login_request(
                    [0x80, 0, 0, 0, 1, i],
                    1,
                    1,
                    pdu::STAGE_OPERATIONAL,
                    pdu::STAGE_FFP,
                    true,
                    &[("InitiatorName", "iqn.2026-11.org.numatgt:loris")],
                );
                let t = Instant::now();
                for b in req.iter().take(40) {
                    if s.write_all(&[*b]).is_err() || t.elapsed() > Duration::from_secs(3) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    for l in loris {
        l.join().expect("loris thread");
    }
    drop(half);
    report.push("half-finished logins: 100 held ~2 s; slow loris: 10 x 1 byte per 50 ms".into());

    // 9. login flood
    let t0 = Instant::now();
    for i in 0..300 {
        drop(login(&d, &format!("iqn.2026-11.org.numatgt:flood{i}")));
    }
    report.push(format!("login flood: 300 logins in {:.1?}", t0.elapsed()));

    // 10. a thousand idle connections
    let idle: Vec<TcpStream> = (0..1000).map(|_| pdu::connect(d.addr())).collect();
    std::thread::sleep(Duration::from_secs(2));
    let fds_idle = d.open_fds();
    drop(idle);
    report.push(format!(
        "1000 idle connections held 2 s (numatgtd held {fds_idle} descriptors)"
    ));

    // 11. reinstatement storm: one initiator name and ISID, 200 logins, the old connections
    // left open by the initiator
    let mut old = Vec::new();
    for _ in 0..200 {
        old.push(login(&d, "iqn.2026-11.org.numatgt:same-isid"));
    }
    let mut closed_by_target = 0;
    for s in old.iter_mut().take(199) {
        closed_by_target += usize::from(closed_within(s, Duration::from_millis(50)));
    }
    drop(old);
    report.push(format!(
        "reinstatement storm: 200 logins with one ISID; the target closed {closed_by_target} \
         of the 199 replaced connections"
    ));

    // the well-behaved session kept going throughout
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let (ops, worst) = canary
        .join()
        .expect("the canary failed (see its panic above)");
    d.assert_alive("after the hostile matrix");
    // connections the target still holds close within its timeouts; allow them a moment
    let t0 = Instant::now();
    while d.open_fds() > fds0 + 2 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (rss1, fds1) = (rss_kib(pid), d.open_fds());
    for l in &report {
        eprintln!("hostile: {l}");
    }
    eprintln!(
        "hostile: canary {ops} commands, slowest {worst:.1?}; RSS {rss0} -> {rss1} KiB; \
         descriptors {fds0} -> {fds1}"
    );
    assert!(ops > 100, "the canary hardly ran: {ops} commands");
    assert!(
        worst < Duration::from_secs(3),
        "the canary waited {worst:?} for one command"
    );
    assert!(
        rss1 < rss0 + 64 * 1024,
        "numatgtd's RSS grew from {rss0} KiB to {rss1} KiB"
    );
    assert!(
        fds1 <= fds0 + 2,
        "numatgtd still holds {fds1} descriptors ({fds0} before the matrix)\n{}",
        d.log_tail(20)
    );
    assert!(
        answers[0] + answers[1] == 1000,
        "task management answers: {:?}",
        answers
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .collect::<Vec<_>>()
    );
}
