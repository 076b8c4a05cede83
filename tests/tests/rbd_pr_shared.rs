//! Persistent reservations shared by two numatgtd gateways of one RBD LUN (issue 26), on
//! the project's mini Ceph cluster. Both gateways are started like tgtd and set up with
//! Debian's tgtadm alone (ALUA group, peer, the LUN with `--bstype rbd`); raw iSCSI
//! sessions play two initiators. Checked:
//!
//! - a registration or reservation made through gateway A is seen through gateway B as
//!   soon as A answered GOOD (the change went through the cluster and B took it first);
//! - B enforces A's reservation on every command (a conflicting WRITE through B is
//!   refused), and the same initiator port through B is another I_T nexus (SPC-4: the
//!   target port is part of it; READ FULL STATUS names the relative port it came through);
//! - PREEMPT AND ABORT through A reaches the preempted nexus on B (REGISTRATIONS
//!   PREEMPTED);
//! - A frozen (SIGSTOP): B keeps enforcing; its next change waits for A until the notify
//!   timeout, then fences A (blocklists its Ceph client) before its status; A thawed admits
//!   no WRITE on its stale copy (its lease ran out); A restarted reads the cluster's state.

use std::time::{Duration, Instant};

use tests::cdb::{cdb10, sense_of};
use tests::ceph::Cluster;
use tests::daemon::{require_numatgtd, send_signal};
use tests::pdu::ScsiSession;
use tests::testcu;
use tests::{Daemon, tools};

const REGISTER: u8 = 0;
const RESERVE: u8 = 1;
const PREEMPT_AND_ABORT: u8 = 5;
/// WRITE EXCLUSIVE – REGISTRANTS ONLY.
const WE_RO: u8 = 5;
const CONFLICT: u8 = 0x18;

/// A gateway as a tgtd user makes it: numatgtd started like tgtd, then Debian's tgtadm:
/// target 1, ALUA group `group` with peer `peer` (standby non-owners), LUN 1 on the
/// cluster's image `rbd/shared`.
fn gateway(c: &Cluster, group: u16, peer: u16) -> Daemon {
    c.gateway(group, peer, "standby")
}

/// PERSISTENT RESERVE OUT through `s` (a basic parameter list): the status, and how long
/// it took (waiting up to 30 s, as Linux's SCSI command timeout: a change waits for a
/// silent gateway up to the notify timeout).
fn prout(s: &mut ScsiSession, sa: u8, ty: u8, key: u64, sa_key: u64) -> (u8, Duration) {
    let mut p = [0u8; 24];
    p[0..8].copy_from_slice(&key.to_be_bytes());
    p[8..16].copy_from_slice(&sa_key.to_be_bytes());
    let cdb = [0x5F, sa, ty, 0, 0, 0, 0, 0, 24, 0];
    let t = Instant::now();
    let (st, _) = s
        .try_command(&cdb, &p, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("PERSISTENT RESERVE OUT {sa}: {e}"));
    (st, t.elapsed())
}

/// PERSISTENT RESERVE IN service action `sa` through `s`: (status, parameter data).
fn prin(s: &mut ScsiSession, sa: u8) -> (u8, Vec<u8>) {
    let (st, _, d) = s.command(&[0x5E, sa, 0, 0, 0, 0, 0, 0x10, 0, 0], &[], 4096);
    (st, d)
}

fn keys(s: &mut ScsiSession) -> Vec<u64> {
    let (st, d) = prin(s, 0);
    assert_eq!(st, 0, "READ KEYS");
    listed_keys(&d)
}

/// The keys READ KEYS parameter data `d` lists.
fn listed_keys(d: &[u8]) -> Vec<u64> {
    d.get(8..)
        .unwrap_or_default()
        .chunks(8)
        .map(|k| u64::from_be_bytes(k.try_into().expect("8 bytes")))
        .collect()
}

/// (key, type) of the reservation.
fn reservation(s: &mut ScsiSession) -> Option<(u64, u8)> {
    let (st, d) = prin(s, 1);
    assert_eq!(st, 0, "READ RESERVATION");
    (d.len() >= 22).then(|| {
        (
            u64::from_be_bytes(d[8..16].try_into().expect("8 bytes")),
            d[21] & 0x0F,
        )
    })
}

/// READ FULL STATUS: (key, relative target port) of every registration.
fn full_status(s: &mut ScsiSession) -> Vec<(u64, u16)> {
    let (st, d) = prin(s, 3);
    assert_eq!(st, 0, "READ FULL STATUS");
    let mut out = Vec::new();
    let mut at = 8;
    while at + 24 <= d.len() {
        let key = u64::from_be_bytes(d[at..at + 8].try_into().expect("8 bytes"));
        let port = u16::from_be_bytes([d[at + 18], d[at + 19]]);
        let tid_len = u32::from_be_bytes(d[at + 20..at + 24].try_into().expect("4")) as usize;
        out.push((key, port));
        at += 24 + tid_len;
    }
    out
}

fn write_status(s: &mut ScsiSession) -> (u8, Option<(u8, u8, u8)>) {
    let (st, sense, _) = s.command(&cdb10(0x2a, 0, 1), &[0x5a; 512], 0);
    (st, sense_of(&sense))
}

#[test]
fn reservations_are_shared_by_the_gateways_of_an_rbd_lun() {
    require_numatgtd("reservations_are_shared_by_the_gateways_of_an_rbd_lun");
    tools::require_tool("tgtadm");
    let c = Cluster::start();
    c.create_image("shared", 16 << 20);
    let mut a = gateway(&c, 1, 2);
    let b = gateway(&c, 2, 1);
    let mut xa = ScsiSession::open(&a, "iqn.2026-11.test:pr-x");
    let mut xb = ScsiSession::open(&b, "iqn.2026-11.test:pr-x");
    let mut yb = ScsiSession::open(&b, "iqn.2026-11.test:pr-y");

    // X registers and reserves through A; B knows each change once A answered
    let (st, took) = prout(&mut xa, REGISTER, 0, 0, 0xA);
    assert_eq!(st, 0, "REGISTER through A\n{}", a.log_tail(30));
    eprintln!("shared REGISTER took {took:?}");
    assert_eq!(keys(&mut yb), vec![0xA], "B sees A's registration at once");
    assert_eq!(
        prout(&mut xa, RESERVE, WE_RO, 0xA, 0).0,
        0,
        "RESERVE through A"
    );
    assert_eq!(reservation(&mut yb), Some((0xA, WE_RO)));

    // B enforces it: Y is no registrant, and X through B is another nexus (not registered)
    assert_eq!(write_status(&mut yb).0, CONFLICT, "Y's WRITE through B");
    assert_eq!(write_status(&mut xb).0, CONFLICT, "X's WRITE through B");
    assert_eq!(
        write_status(&mut xa),
        (0, None),
        "X's WRITE through A (owner)"
    );

    // Y registers through B: A sees it, with the relative port it came through
    assert_eq!(
        prout(&mut yb, REGISTER, 0, 0, 0xB).0,
        0,
        "REGISTER through B"
    );
    assert_eq!(keys(&mut xa), vec![0xA, 0xB]);
    assert_eq!(full_status(&mut xa), vec![(0xA, 1), (0xB, 2)]);

    // X preempts and aborts Y through A: Y's nexus on B is told
    let (st, _) = prout(&mut xa, PREEMPT_AND_ABORT, WE_RO, 0xA, 0xB);
    assert_eq!(st, 0, "PREEMPT AND ABORT through A");
    let (st, sense, _) = yb.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((6, 0x2A, 0x05))),
        "REGISTRATIONS PREEMPTED on B"
    );
    assert_eq!(keys(&mut yb), vec![0xA]);

    // the metrics say the same on both gateways
    let generation = a.metric("numatgt_lun_pr_generation", "lun=\"1\"");
    assert_eq!(generation, 3.0, "REGISTER, REGISTER, PREEMPT AND ABORT");
    assert_eq!(
        b.metric("numatgt_lun_pr_generation", "lun=\"1\""),
        generation
    );
    assert_eq!(
        a.metric("numatgt_lun_pr_shared_changes_total", "result=\"written\""),
        3.0,
        "REGISTER, RESERVE, PREEMPT AND ABORT written through A"
    );
    assert_eq!(b.metric("numatgt_lun_pr_shared_taken_total", ""), 3.0);
    assert_eq!(a.metric("numatgt_lun_pr_shared_taken_total", ""), 1.0);
    assert!(
        b.metric("numatgt_lun_errors_total", "reservation_conflict") >= 2.0,
        "B counted its conflicts"
    );
    assert_eq!(b.metric("numatgt_lun_pr_shared_stale", ""), 0.0);

    // A freezes (SIGSTOP: a hung host, a long pause): B goes on alone. Its first change
    // waits for A's answer until the notify timeout, then fences A (blocklists its Ceph
    // client) before the status; B still enforces A's reservation meanwhile
    send_signal(a.pid(), libc::SIGSTOP);
    assert_eq!(
        write_status(&mut yb).0,
        CONFLICT,
        "B enforces with A frozen"
    );
    let (st, took) = prout(&mut yb, REGISTER, 0, 0, 0xC);
    assert_eq!(
        st,
        0,
        "REGISTER through B with A frozen\n{}",
        b.log_tail(30)
    );
    eprintln!("REGISTER with a frozen peer took {took:?}");
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(20),
        "the notify timeout, then the fencing: {took:?}"
    );
    assert_eq!(b.metric("numatgt_lun_pr_shared_fenced_total", ""), 1.0);
    assert!(b.log().contains("fenced a gateway"), "{}", b.log_tail(30));
    // Y takes the reservation from X (X through A is no registrant any more)
    let (st, took) = prout(&mut yb, PREEMPT_AND_ABORT, WE_RO, 0xC, 0xA);
    assert_eq!(st, 0, "PREEMPT through B\n{}", b.log_tail(30));
    eprintln!("PREEMPT AND ABORT after the fencing took {took:?}");
    assert_eq!(reservation(&mut yb), Some((0xC, WE_RO)));

    // A thaws with a stale copy (X holds, in its eyes): its copy's lease ran out while it
    // was frozen, so it admits no WRITE — not the first one, not later (it was fenced and
    // cannot watch again)
    send_signal(a.pid(), libc::SIGCONT);
    let until = Instant::now() + Duration::from_secs(6);
    let mut refusals = Vec::new();
    while Instant::now() < until {
        let (st, sense) = write_status(&mut xa);
        assert_ne!(
            st, 0,
            "the thawed gateway admitted a WRITE on its stale copy after {refusals:?}"
        );
        refusals.push((st, sense));
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!("the thawed gateway's answers to WRITEs: {refusals:?}");
    // Two refusals race after the thaw, and either may come first: the reservation copy is
    // not trusted (NOT READY, transitioning), and the ALUA side finds its image lock lost
    // with its client (the unit attention ASYMMETRIC ACCESS STATE CHANGED, which SAM reports
    // before NOT READY, then the port unavailable). Every answer must be one of these.
    const STALE_COPY: (u8, Option<(u8, u8, u8)>) = (2, Some((2, 0x04, 0x0A)));
    const ALUA_CHANGED: (u8, Option<(u8, u8, u8)>) = (2, Some((6, 0x2A, 0x06)));
    const PORT_UNAVAILABLE: (u8, Option<(u8, u8, u8)>) = (2, Some((2, 0x04, 0x0C)));
    assert!(
        refusals[0] == STALE_COPY || refusals[0] == ALUA_CHANGED,
        "the first refusal: {refusals:?}"
    );
    assert!(
        refusals
            .iter()
            .all(|r| [STALE_COPY, ALUA_CHANGED, PORT_UNAVAILABLE].contains(r)),
        "every refusal says stale copy or lost ownership: {refusals:?}"
    );
    assert_eq!(
        refusals.last(),
        Some(&PORT_UNAVAILABLE),
        "in the end the fenced gateway's port is unavailable: {refusals:?}"
    );
    assert_eq!(
        a.metric("numatgt_lun_pr_shared_stale", ""),
        1.0,
        "the thawed gateway says its copy may be stale"
    );

    // A restarted (a new Ceph client: not fenced) and set up again with tgtadm reads the
    // state the cluster holds
    a.kill9();
    a.respawn();
    c.set_up_gateway(&a, 1, 2, "standby");
    let mut xa = ScsiSession::open(&a, "iqn.2026-11.test:pr-x");
    assert_eq!(keys(&mut xa), vec![0xC], "A restarted sees B's changes");
    assert_eq!(reservation(&mut xa), Some((0xC, WE_RO)));
    assert_eq!(
        write_status(&mut xa).0,
        CONFLICT,
        "X through A is no registrant"
    );
    assert!(
        a.log()
            .contains("persistent reservations shared through the cluster"),
        "{}",
        a.log_tail(30)
    );
}

const RESERVE6: [u8; 6] = [0x16, 0, 0, 0, 0, 0];
const RELEASE6: [u8; 6] = [0x17, 0, 0, 0, 0, 0];

/// The status of `cdb` (no data) through `s`, after the unit attentions queued for it
/// (reset, nexus loss) have been reported. Waits up to 30 s, as Linux's SCSI command
/// timeout: a change of the shared state waits for a dead gateway's watch until the notify
/// timeout (10 s), then fences it.
fn status_after_attentions(s: &mut ScsiSession, cdb: &[u8]) -> u8 {
    for _ in 0..4 {
        let (st, sense) = s
            .try_command(cdb, &[], Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{cdb:02x?}: {e}"));
        if st == 2 && sense_of(&sense).is_some_and(|(key, _, _)| key == 6) {
            continue;
        }
        return st;
    }
    panic!("unit attentions without end")
}

/// SPC-2 RESERVE / RELEASE shared by the two gateways of an RBD LUN (active/non-optimized
/// non-owners: B ships its media commands to A): a reservation taken through A is enforced
/// through B, and each way SPC-2 ends one reaches both gateways — the holder's Logout
/// (answered only once the release is in the cluster: the other initiator reserves
/// through B right after the Logout Response), RELEASE, a LOGICAL UNIT RESET through the
/// other gateway, the holder's connection dropped, and the holder's gateway killed and
/// restarted (what went through its port is released as it starts).
#[test]
fn spc2_reservations_are_shared_by_the_gateways_of_an_rbd_lun() {
    require_numatgtd("spc2_reservations_are_shared_by_the_gateways_of_an_rbd_lun");
    tools::require_tool("tgtadm");
    let c = Cluster::start();
    c.create_image("shared", 16 << 20);
    let ano = "active-non-optimized";
    let mut a = c.gateway(1, 2, ano);
    let mut b = c.gateway(2, 1, ano);
    let mut xa = ScsiSession::open(&a, "iqn.2026-11.test:spc2-x");
    let mut xb = ScsiSession::open(&b, "iqn.2026-11.test:spc2-x");
    let mut yb = ScsiSession::open(&b, "iqn.2026-11.test:spc2-y");

    // X reserves through A; B enforces it at once, X through B being another I_T nexus
    assert_eq!(xa.command(&RESERVE6, &[], 0).0, 0, "{}", a.log_tail(20));
    assert_eq!(write_status(&mut yb).0, CONFLICT, "Y's WRITE through B");
    assert_eq!(yb.command(&RESERVE6, &[], 0).0, CONFLICT, "Y's RESERVE");
    assert_eq!(write_status(&mut xb).0, CONFLICT, "X's WRITE through B");
    assert_eq!(yb.command(&[0x12, 0, 0, 0, 36, 0], &[], 36).0, 0, "INQUIRY");
    assert_eq!(yb.command(&RELEASE6, &[], 0).0, 0, "a RELEASE of no holder");
    assert_eq!(write_status(&mut xa), (0, None), "the holder writes");
    assert_eq!(prout(&mut yb, REGISTER, 0, 0, 0xB).0, CONFLICT, "PR OUT");

    // X logs out of A: once the Logout Response is in, B has the release
    assert_eq!(xa.logout(), 0, "Logout Response");
    assert_eq!(
        yb.command(&RESERVE6, &[], 0).0,
        0,
        "Y reserves through B right after X's logout\n{}",
        a.log_tail(20)
    );
    let mut xa = ScsiSession::open(&a, "iqn.2026-11.test:spc2-x");
    assert_eq!(
        write_status(&mut xa).0,
        CONFLICT,
        "X through A after Y's RESERVE"
    );
    assert_eq!(write_status(&mut yb), (0, None), "Y writes through B");

    // a LOGICAL UNIT RESET through A releases Y's reservation held through B
    assert_eq!(xa.task_management(5, 0), 0, "LOGICAL UNIT RESET");
    assert_eq!(
        status_after_attentions(&mut xa, &RESERVE6),
        0,
        "X after the reset"
    );
    assert_eq!(
        status_after_attentions(&mut yb, &RESERVE6),
        CONFLICT,
        "Y's RESERVE through B after the reset: X holds now"
    );
    assert_eq!(xa.command(&RELEASE6, &[], 0).0, 0, "X's RELEASE");
    // (RESERVATION CONFLICT comes before a unit attention: Y's reset attention is still
    // queued)
    assert_eq!(
        status_after_attentions(&mut yb, &RESERVE6),
        0,
        "Y after X's RELEASE"
    );

    // Y's connection to B dropped (no logout): B releases for it, and A learns of it
    drop(yb);
    let t0 = Instant::now();
    while xa.command(&RESERVE6, &[], 0).0 != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "X never got the reservation after Y's connection dropped\n{}",
            b.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "released after the holder's connection dropped in {:?}",
        t0.elapsed()
    );
    assert_eq!(xa.command(&RELEASE6, &[], 0).0, 0, "X's RELEASE");

    // Y holds through B, and B is killed: A keeps refusing X; B restarted releases what
    // went through its port before it answers tgtadm
    let mut yb = ScsiSession::open(&b, "iqn.2026-11.test:spc2-y");
    assert_eq!(yb.command(&RESERVE6, &[], 0).0, 0, "Y's RESERVE through B");
    b.kill9();
    assert_eq!(write_status(&mut xa).0, CONFLICT, "A enforces with B dead");
    b.respawn();
    c.set_up_gateway(&b, 2, 1, ano);
    let t0 = Instant::now();
    assert_eq!(
        status_after_attentions(&mut xa, &RESERVE6),
        0,
        "X after B restarted\n{}",
        b.log_tail(20)
    );
    eprintln!("X's RESERVE after B restarted took {:?}", t0.elapsed());
    assert!(
        b.log()
            .contains("SPC-2 reservation released in the cluster")
    );
    assert!(a.metric("numatgt_lun_pr_shared_changes_total", "result=\"written\"") >= 4.0);

    // X holds through A, the owner, and A dies; the administrator moves the LUN to B
    // (tgtadm alua_owner=2): B takes it by fencing the silent A, whose nexuses are gone
    // with it — and with them X's reservation
    let mut yb = ScsiSession::open(&b, "iqn.2026-11.test:spc2-y");
    assert_eq!(
        status_after_attentions(&mut yb, &RESERVE6),
        CONFLICT,
        "X still holds"
    );
    const RELEASED: &str = "SPC-2 reservation released in the cluster";
    let released_before = b.log().matches(RELEASED).count();
    a.kill9();
    let r = tests::mgmt::update_lun1(&b, "alua_owner=2");
    assert!(r.status.success(), "alua_owner=2: {}{}", r.stdout, r.stderr);
    let t0 = Instant::now();
    while status_after_attentions(&mut yb, &RESERVE6) != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the fenced owner's SPC-2 reservation stayed\n{}",
            b.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("released after the owner was fenced in {:?}", t0.elapsed());
    assert_eq!(
        b.log().matches(RELEASED).count(),
        released_before + 1,
        "B released it for the fenced A"
    );
    assert_eq!(
        b.metric(
            "numatgt_lun_alua_transitions_total",
            "kind=\"fenced_other\""
        ),
        1.0
    );
    assert_eq!(
        b.metric("numatgt_lun_alua_takeover_causes_total", "cause=\"admin\""),
        1.0,
        "tgtadm asked for it"
    );
}

/// libiscsi's iscsi-test-cu reservation and multipath suites with their first I_T nexus on
/// gateway A and their second (the multipath URL) on gateway B of the same RBD LUN,
/// non-owners active/non-optimized (libiscsi's login needs TEST UNIT READY to pass, which
/// a standby port refuses): pass / skip / fail counted apart, 0 fail, and no ownership move
/// during the run. ProutReserve and MultipathIO read and write through both paths: B ships
/// its media commands to A; MultipathIO's LUN reset through one gateway sets the reset's
/// unit attention on the other's nexuses too; Reserve6 takes its SPC-2 reservation through
/// one gateway and its conflicts and releases through the other.
#[test]
fn libiscsi_reservation_suites_across_two_gateways() {
    require_numatgtd("libiscsi_reservation_suites_across_two_gateways");
    tools::require_tool("tgtadm");
    tools::require_tool("iscsi-test-cu");
    let c = Cluster::start();
    c.create_image("shared", 64 << 20);
    let ano = "active-non-optimized";
    let mut a = c.gateway(1, 2, ano);
    let mut b = c.gateway(2, 1, ano);
    let urls = [a.url(1), b.url(1)];
    let results: Vec<testcu::SuiteResult> = [
        "SCSI.PrinReadKeys",
        "SCSI.PrinServiceactionRange",
        "SCSI.PrinReportCapabilities",
        "SCSI.ProutRegister",
        "SCSI.ProutClear",
        "SCSI.ProutPreempt",
        "SCSI.ProutReserve",
        "SCSI.Reserve6",
        "SCSI.MultipathIO",
    ]
    .iter()
    .map(|suite| testcu::run_suite_urls(&mut a, suite, "two-gateways", &[], &urls))
    .collect();
    b.assert_alive("after the suites");
    for d in [&a, &b] {
        assert_eq!(
            d.metric("numatgt_lun_alua_transitions_total", "kind=\"takeover\""),
            0.0,
            "no ownership move"
        );
        assert!(d.metric("numatgt_lun_pr_generation", "lun=\"1\"") > 0.0);
    }
    assert!(
        b.metric("numatgt_lun_pr_shared_changes_total", "result=\"written\"") > 0.0,
        "the suites changed the state through B too"
    );
    assert!(a.metric("numatgt_lun_pr_shared_taken_total", "") > 0.0);
    let sent = b.metric("numatgt_lun_shipped_commands_total", "kind=\"sent\"");
    assert!(sent > 0.0, "B shipped the suites' I/O to A");
    assert_eq!(
        a.metric("numatgt_lun_shipped_commands_total", "kind=\"served\""),
        sent
    );
    testcu::assert_clean(
        &results,
        "numatgtd, two gateways",
        "iscsi-test-cu-two-gateways",
    );
}

/// The state object damaged (garbage written over it) or removed by hand: a PERSISTENT
/// RESERVE OUT answers HARDWARE ERROR and says why in the log, nothing panics; once an
/// administrator removes the damaged object, the gateways make it again from their copies
/// and reservations work again through either gateway.
#[test]
fn a_damaged_state_object_is_refused_and_a_removed_one_made_again() {
    require_numatgtd("a_damaged_state_object_is_refused_and_a_removed_one_made_again");
    tools::require_tool("tgtadm");
    tools::require_tool("rados");
    let c = Cluster::start();
    c.create_image("shared", 16 << 20);
    let a = gateway(&c, 1, 2);
    let b = gateway(&c, 2, 1);
    let mut xa = ScsiSession::open(&a, "iqn.2026-11.test:pr-x");
    let mut yb = ScsiSession::open(&b, "iqn.2026-11.test:pr-y");
    assert_eq!(
        prout(&mut xa, REGISTER, 0, 0, 0xA).0,
        0,
        "REGISTER through A"
    );

    let garbage = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(garbage.path(), b"NTPR this is no state at all").expect("write");
    let path = garbage.path().to_string_lossy().into_owned();
    c.rados(30, &["put", "numatgt.pr.shared", &path])
        .check("rados put");
    let mut p = [0u8; 24];
    p[8..16].copy_from_slice(&0xBu64.to_be_bytes());
    let (st, sense) = xa
        .try_command(
            &[0x5F, 6, 0, 0, 0, 0, 0, 0, 24, 0],
            &p,
            Duration::from_secs(30),
        )
        .expect("REGISTER AND IGNORE EXISTING KEY answered");
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((4, 0x44, 0x00))),
        "a damaged state: HARDWARE ERROR, INTERNAL TARGET FAILURE"
    );
    assert!(
        a.log()
            .contains("the reservation state in the cluster is damaged"),
        "{}",
        a.log_tail(20)
    );
    assert_eq!(keys(&mut xa), vec![0xA], "the copy is unchanged");

    c.rados(30, &["rm", "numatgt.pr.shared"]).check("rados rm");
    // the gateways notice their watches gone and make the object again from their copies;
    // until then media access waits, reservation changes may fail: try for 20 s
    let until = Instant::now() + Duration::from_secs(20);
    let st = loop {
        let (st, sense) = xa
            .try_command(
                &[0x5F, 6, 0, 0, 0, 0, 0, 0, 24, 0],
                &p,
                Duration::from_secs(30),
            )
            .expect("REGISTER AND IGNORE EXISTING KEY answered");
        if st == 0 || Instant::now() > until {
            break (st, sense_of(&sense));
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        st,
        (0, None),
        "REGISTER AND IGNORE after the object was made again"
    );
    // B learns the removal from its watch (its next ping, within seconds), watches again
    // and reads the object
    // (meanwhile it answers READ KEYS NOT READY, never with a stale list)
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, d) = prin(&mut yb, 0);
        let listed = listed_keys(&d);
        assert!(
            st == 2 || listed == vec![0xA] || listed == vec![0xB],
            "B's READ KEYS: status {st}, {listed:x?}"
        );
        if (st == 0 && listed == vec![0xB]) || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(keys(&mut yb), vec![0xB], "B sees it\n{}", b.log_tail(20));
    let made = c.rados(30, &["stat", "numatgt.pr.shared"]);
    assert!(made.status.success(), "the object exists again: {made}");
}
