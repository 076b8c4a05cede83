//! Per-LUN QoS (issue 30) against the real numatgtd, set the ways an administrator sets
//! it: Debian's tgtadm (`--op update --params qos_iops=…`), the YAML file (a target's
//! default and a LUN's own) and a reload. Each test sends reads at once over a raw session
//! and checks that they are held to the rate (a lower bound on the time they take — a slow
//! machine only makes it longer — and the held-back counter), that task management and
//! reservations are not held behind them, and that a change applies to the running session.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tests::daemon::{TargetKind, create_sparse, require_numatgtd};
use tests::mgmt::{
    exchange, export_lun1, numatgtadm_bin, numatgtadm_dump, raw_request, update_lun1,
};
use tests::pdu::{ReadOutcome, ScsiSession, read_pdu};
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

/// READ(10) of 8 blocks at `lba`.
fn read10(lba: u32) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = 0x28;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[8] = 8;
    c
}

/// The ITT and status of a PDU that ends a command (SCSI Response, or Data-In with status).
fn ended(p: &tests::pdu::Pdu) -> Option<(u32, u8)> {
    let itt = u32::from_be_bytes([p.bhs[16], p.bhs[17], p.bhs[18], p.bhs[19]]);
    match p.opcode() {
        0x21 => Some((itt, p.bhs[3])),
        0x25 if p.flags() & 0x01 != 0 => Some((itt, p.bhs[3])),
        _ => None,
    }
}

/// Sends `n` reads of 4 KiB at once; the ITTs.
fn send_reads(s: &mut ScsiSession, n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| s.send_command(&read10(i * 8), &[], 4096, true))
        .collect()
}

/// Waits until every command of `itts` has ended; their statuses and how long it took.
fn wait_ended(s: &mut ScsiSession, itts: &[u32]) -> (Vec<u8>, Duration) {
    let t = Instant::now();
    let mut left: HashSet<u32> = itts.iter().copied().collect();
    let mut statuses = Vec::new();
    while !left.is_empty() {
        match read_pdu(&mut s.stream, Duration::from_secs(30)) {
            ReadOutcome::Pdu(p) => {
                if let Some((itt, status)) = ended(&p)
                    && left.remove(&itt)
                {
                    statuses.push(status);
                }
            }
            other => panic!("{} commands not answered: {other:?}", left.len()),
        }
    }
    (statuses, t.elapsed())
}

fn lun_show(d: &Daemon) -> String {
    let r = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    r.check("tgtadm show");
    r.stdout
}

fn throttled(d: &Daemon, lun: u64) -> f64 {
    d.metric(
        "numatgt_lun_qos_throttled_commands_total",
        &format!("lun=\"{lun}\""),
    )
}

fn disk(d: &Daemon, name: &str) -> std::path::PathBuf {
    let p = d.dir.path().join(name);
    create_sparse(&p, 16 * MIB);
    p
}

#[test]
fn a_limit_set_through_tgtadm_holds_reads_to_its_rate_and_changes_live() {
    require_numatgtd("qos");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let path = disk(&d, "qos.img");
    export_lun1(&d, TEST_IQN, &path, &[]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:qos-a");

    update_lun1(&d, "qos_iops=100").check("tgtadm qos_iops=100");
    assert!(
        lun_show(&d).contains("            QoS: qos_iops=100\n"),
        "{}",
        lun_show(&d)
    );
    // 50 reads at 100 per second: at least 0.45 s, whatever the machine
    let itts = send_reads(&mut s, 50);
    let (st, took) = wait_ended(&mut s, &itts);
    assert!(st.iter().all(|&x| x == 0), "{st:?}");
    assert!(
        took >= Duration::from_millis(450),
        "50 reads at 100 IOPS took {took:?}"
    );
    let held = throttled(&d, 1);
    assert!(held >= 40.0, "held back: {held}");
    assert!(d.metric("numatgt_lun_qos_limit", "kind=\"iops\"") == 100.0);
    assert!(d.metric("numatgt_lun_qos_wait_seconds_total", "lun=\"1\"") > 1.0);

    // a bad value is refused and changes nothing
    assert!(!update_lun1(&d, "qos_iops=lots").status.success());
    assert!(
        !update_lun1(&d, "qos_iops=10,qos_nonsense=1")
            .status
            .success()
    );
    assert!(lun_show(&d).contains("QoS: qos_iops=100\n"));

    // lifted on the same session: nothing is held any more
    update_lun1(&d, "qos_iops=0").check("tgtadm qos_iops=0");
    assert!(!lun_show(&d).contains("QoS:"), "{}", lun_show(&d));
    let itts = send_reads(&mut s, 50);
    let (st, _) = wait_ended(&mut s, &itts);
    assert!(st.iter().all(|&x| x == 0));
    assert_eq!(throttled(&d, 1), held, "no read held without a limit");

    // bandwidth: 64 KiB reads at 1 MiB/s, 16 of them: at least 0.9 s
    update_lun1(&d, "qos_read_bps=1M").check("tgtadm qos_read_bps=1M");
    let mut c = read10(0);
    c[7..9].copy_from_slice(&128u16.to_be_bytes());
    let itts: Vec<u32> = (0..16)
        .map(|_| s.send_command(&c, &[], 65536, true))
        .collect();
    let (st, took) = wait_ended(&mut s, &itts);
    assert!(st.iter().all(|&x| x == 0));
    assert!(
        took >= Duration::from_millis(900),
        "1 MiB at 1 MiB/s took {took:?}"
    );
    // writes are not read-limited
    let before = throttled(&d, 1);
    let block = vec![0x5Au8; 4096];
    let mut w = [0u8; 10];
    w[0] = 0x2A;
    w[8] = 8;
    for _ in 0..20 {
        assert_eq!(s.command(&w, &block, 0).0, 0);
    }
    assert_eq!(throttled(&d, 1), before);

    // Debian's tgtadm sends no `--params` with `--op new` ("option '-P' is not
    // allowed/supported"); a client of the protocol that does gets the LUN with its limits
    let path2 = disk(&d, "qos2.img");
    let new_lun = |lun: u64, payload: &str| {
        let mut req = raw_request(2, 0, 1, 0, format!("{payload}\0").as_bytes());
        req[8..13].copy_from_slice(b"iscsi");
        req[88..96].copy_from_slice(&lun.to_le_bytes());
        let len = req.len() as u32;
        req[72..76].copy_from_slice(&len.to_le_bytes());
        exchange(&d.mgmt_socket(), &req).map(|r| r.0)
    };
    let p2 = path2.display();
    assert_eq!(
        new_lun(2, &format!("path={p2},qos_write_iops=50,qos_burst=0.5")),
        Some(0)
    );
    let show = lun_show(&d);
    assert!(
        show.contains("QoS: qos_write_iops=50,qos_burst=0.5\n"),
        "{show}"
    );
    assert_ne!(new_lun(3, &format!("path={p2},qos_iops=-1")), Some(0));
    assert!(
        !lun_show(&d).contains("LUN: 3"),
        "a refused LUN is not made"
    );
}

#[test]
fn task_management_and_reservations_are_not_held_behind_throttled_reads() {
    require_numatgtd("qos");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let path = disk(&d, "qos.img");
    export_lun1(&d, TEST_IQN, &path, &[]);
    update_lun1(&d, "qos_iops=10").check("tgtadm qos_iops=10");
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:qos-b");
    // 100 reads at 10 per second: 10 s of work held back
    send_reads(&mut s, 100);
    std::thread::sleep(Duration::from_millis(300));

    // a reservation goes ahead of them
    let t = Instant::now();
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5F; // PERSISTENT RESERVE OUT, REGISTER
    cdb[8] = 24;
    let mut params = [0u8; 24];
    params[8..16].copy_from_slice(&0xABCDu64.to_be_bytes());
    let pr = s.send_command(&cdb, &params, 24, false);
    let mut reads_done = 0;
    loop {
        match read_pdu(&mut s.stream, Duration::from_secs(30)) {
            ReadOutcome::Pdu(p) => match ended(&p) {
                Some((itt, status)) if itt == pr => {
                    assert_eq!(status, 0, "REGISTER");
                    break;
                }
                Some(_) => reads_done += 1,
                None => {}
            },
            other => panic!("no answer to PERSISTENT RESERVE OUT: {other:?}"),
        }
    }
    assert!(
        reads_done < 50,
        "the reservation waited for {reads_done} reads"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // a LOGICAL UNIT RESET ends the held reads at once: answered long before their time
    let t = Instant::now();
    let resp = s.task_management(5, 0);
    assert_eq!(resp, 0, "LOGICAL UNIT RESET");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the reset took {:?}",
        t.elapsed()
    );
    // the ended reads get no answer (TAS=0); the session works on
    let (st, _) = {
        let tur = s.send_command(&[0; 6], &[], 0, false);
        wait_ended(&mut s, &[tur])
    };
    assert_eq!(st, [2], "the reset's unit attention");
    let itts = send_reads(&mut s, 2);
    let (st, _) = wait_ended(&mut s, &itts);
    assert_eq!(st, [0, 0]);
    assert!(d.log().contains("QoS limits set"), "{}", d.log_tail(20));
}

/// A configuration with LUNs 1 and 2 of 16 MiB, `qos_yaml` (indented lines) added under
/// the target and, `lun2_yaml`, under LUN 2.
fn with_qos(base: &str, target_yaml: &str, lun2_yaml: &str) -> String {
    let mut out = String::new();
    let mut in_lun2 = false;
    for line in base.lines() {
        if line.starts_with("  - iqn: ") {
            out.push_str(line);
            out.push('\n');
            out.push_str(target_yaml);
            continue;
        }
        if line.trim_start().starts_with("- lun: ") {
            if in_lun2 {
                out.push_str(lun2_yaml);
            }
            in_lun2 = line.trim_start() == "- lun: 2";
        }
        out.push_str(line);
        out.push('\n');
    }
    if in_lun2 {
        out.push_str(lun2_yaml);
    }
    out
}

fn reload(d: &Daemon) -> String {
    let r = d.admin_tool(
        &numatgtadm_bin(),
        &["--reload", &d.config_path.display().to_string()],
    );
    r.check("numatgtadm --reload");
    r.stdout
}

#[test]
fn yaml_limits_apply_on_reload_without_touching_sessions_and_survive_a_dump() {
    require_numatgtd("qos");
    let d = Daemon::start(&[
        LunSpec::new(1, 512, 16 * MIB),
        LunSpec::new(2, 512, 16 * MIB),
    ]);
    let base = std::fs::read_to_string(&d.config_path).expect("read config");
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:qos-c");

    // the target's default holds LUN 1; LUN 2 lifts the IOPS limit and limits its reads'
    // bandwidth instead
    let target = "    qos:\n      iops: 100\n";
    let lun2 = "        qos:\n          iops: 0\n          read_bps: 4M\n          burst: 1.5\n";
    std::fs::write(&d.config_path, with_qos(&base, target, lun2)).expect("write");
    let out = reload(&d);
    assert!(
        out.contains("0 changed") && out.contains("0 sessions closed"),
        "{out}"
    );
    let show = lun_show(&d);
    assert!(show.contains("QoS: qos_iops=100\n"), "{show}");
    assert!(
        show.contains("qos_read_bps=4194304") && show.contains("qos_burst=1.5"),
        "{show}"
    );
    let itts = send_reads(&mut s, 40);
    let (st, took) = wait_ended(&mut s, &itts);
    assert!(st.iter().all(|&x| x == 0));
    assert!(
        took >= Duration::from_millis(350),
        "40 reads at 100 IOPS took {took:?}"
    );
    assert!(throttled(&d, 1) >= 30.0);
    assert_eq!(
        d.log().matches("login complete").count(),
        1,
        "one session all along"
    );

    // a bad value: the reload is refused with the place, the limits stay
    std::fs::write(
        &d.config_path,
        with_qos(&base, "    qos:\n      iops: fast\n", ""),
    )
    .expect("write");
    let r = d.admin_tool(
        &numatgtadm_bin(),
        &["--reload", &d.config_path.display().to_string()],
    );
    assert!(!r.status.success(), "{r}");
    assert!(
        r.stdout.contains("iops") || r.stderr.contains("iops"),
        "{r}"
    );
    assert!(lun_show(&d).contains("QoS: qos_iops=100\n"));

    // the dump keeps them, each LUN's as it runs: read back as numatgtd reads a file
    let dump = numatgtadm_dump(&d).stdout;
    let c = config::parse(&dump, "numatgtadm --dump")
        .unwrap_or_else(|e| panic!("the dump does not read back: {e}\n{dump}"));
    let t = &c.targets[0];
    let qos = |n: u64| t.lun(n).map(|l| l.effective_qos(t)).unwrap_or_default();
    assert_eq!(qos(1).iops, Some(100), "{dump}");
    assert_eq!(
        (qos(2).read_bps, qos(2).burst_ms),
        (Some(4 << 20), Some(1500)),
        "{dump}"
    );
    assert!(qos(2).iops.is_none_or(|v| v == 0), "{dump}");
    drop(s);
}

#[test]
fn each_initiator_is_held_to_its_own_limit() {
    require_numatgtd("qos");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let path = disk(&d, "qos.img");
    export_lun1(&d, TEST_IQN, &path, &[]);
    update_lun1(&d, "qos_initiator_iops=50").check("tgtadm qos_initiator_iops=50");
    assert!(
        lun_show(&d).contains("QoS: qos_initiator_iops=50\n"),
        "{}",
        lun_show(&d)
    );
    assert_eq!(
        d.metric("numatgt_lun_qos_limit", "kind=\"initiator_iops\""),
        50.0
    );
    let mut a = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:qos-d1");
    let mut b = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:qos-d2");
    // A queues 40 reads (0.8 s of its limit); B's one read is not behind them
    let a_reads = send_reads(&mut a, 40);
    std::thread::sleep(Duration::from_millis(100));
    let b_read = send_reads(&mut b, 1);
    let (st, _) = wait_ended(&mut b, &b_read);
    assert_eq!(st, [0]);
    let a_done = {
        let mut n = 0;
        while let Some(p) = a.next_pdu(Duration::from_millis(1)) {
            n += usize::from(ended(&p).is_some());
        }
        n
    };
    assert!(a_done < 20, "B's read waited for {a_done} of A's");
    let (st, took) = wait_ended(&mut a, &a_reads[a_done..]);
    assert!(st.iter().all(|&x| x == 0));
    assert!(
        took >= Duration::from_millis(300),
        "A's last {} reads at 50 IOPS took {took:?}",
        40 - a_done
    );
    // B alone is held too: 20 reads at 50 per second
    let itts = send_reads(&mut b, 20);
    let (st, took) = wait_ended(&mut b, &itts);
    assert!(st.iter().all(|&x| x == 0));
    assert!(
        took >= Duration::from_millis(300),
        "B's 20 reads took {took:?}"
    );
    // the limit lifted: the sessions' sets follow
    update_lun1(&d, "qos_initiator_iops=0").check("tgtadm qos_initiator_iops=0");
    let held = throttled(&d, 1);
    let itts = send_reads(&mut a, 30);
    let (st, _) = wait_ended(&mut a, &itts);
    assert!(st.iter().all(|&x| x == 0));
    assert_eq!(throttled(&d, 1), held);
}
