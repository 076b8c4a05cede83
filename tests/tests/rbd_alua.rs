//! Two numatgtd gateways over one RBD image (issue 16), on the project's mini Ceph
//! cluster: ownership follows the image's exclusive lock. Checked through raw iSCSI
//! sessions on each gateway:
//!
//! 1. the first gateway owns the LUN and caches it; the other is standby; SET TARGET PORT
//!    GROUPS sent to the second one (as Linux's ALUA handler does when multipath switches
//!    paths) makes the owner hand it over — its dirty blocks, synchronized or not, are
//!    written back first, so the second one reads every acknowledged write;
//! 2. the owner is SIGKILLed during writes: the other gateway fences it (breaks its lock)
//!    and takes over; every write acknowledged before a completed SYNCHRONIZE CACHE reads
//!    back through it;
//! 3. an owner frozen with SIGSTOP while it holds dirty blocks is fenced the same way;
//!    after SIGCONT its late write-back cannot land (its Ceph client is blocklisted): the
//!    data written through the new owner stays, and the frozen gateway reports its port
//!    unavailable.

use std::time::Duration;

use tests::alua::{command_through_transition, rtpg, stpg_optimized};
use tests::cdb::{SYNC10, cdb10, sense_of};
use tests::ceph::Cluster;
use tests::daemon::{require_numatgtd, send_signal};
use tests::pdu::ScsiSession;
use tests::{Daemon, TEST_IQN};

const BS: usize = 512;
/// Blocks per write in these tests.
const CHUNK: u16 = 16;
const HANDOVER: Duration = Duration::from_secs(20);

fn gateway_yaml(port: u16, c: &Cluster, group: u16, peer: u16, non_owner: &str) -> String {
    format!(
        "portals:\n  - address: 127.0.0.1:{port}\n\
         targets:\n  - iqn: {TEST_IQN}\n    alua:\n      group: {group}\n{non_owner}      \
         peers:\n        - group: {peer}\n    luns:\n      - lun: 1\n        bs_type: rbd\n        \
         path: rbd/shared\n        bsopts: \"{}\"\n        write_cache: true\n",
        c.bsopts("rados_osd_op_timeout=10")
    )
}

/// SET TARGET PORT GROUPS for `group` through `s`: GOOD, and how long it took.
fn take(s: &mut ScsiSession, group: u16, who: &str) -> Duration {
    let (st, sense, took) = stpg_optimized(s, group);
    assert_eq!(
        st,
        0,
        "{who}: SET TARGET PORT GROUPS: sense {:?}",
        sense_of(&sense)
    );
    took
}

fn pattern(seed: u32) -> Vec<u8> {
    (0..usize::from(CHUNK) * BS)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(97)) as u8
        })
        .collect()
}

fn write(s: &mut ScsiSession, lba: u64, data: &[u8], who: &str) {
    let (st, sense, _, _) =
        command_through_transition(s, &cdb10(0x2a, lba, CHUNK), data, 0, HANDOVER);
    assert_eq!(st, 0, "{who}: WRITE at {lba}: sense {:?}", sense_of(&sense));
}

fn sync(s: &mut ScsiSession, who: &str) {
    let (st, sense, _, _) = command_through_transition(s, &SYNC10, &[], 0, HANDOVER);
    assert_eq!(
        st,
        0,
        "{who}: SYNCHRONIZE CACHE: sense {:?}",
        sense_of(&sense)
    );
}

/// READ of one chunk at `lba` through a handover: (data, time it took).
fn read(s: &mut ScsiSession, lba: u64, who: &str) -> (Vec<u8>, Duration) {
    let len = u32::from(CHUNK) * BS as u32;
    let (st, sense, data, took) =
        command_through_transition(s, &cdb10(0x28, lba, CHUNK), &[], len, HANDOVER);
    assert_eq!(st, 0, "{who}: READ at {lba}: sense {:?}", sense_of(&sense));
    (data, took)
}

fn lba(i: u32) -> u64 {
    u64::from(i) * u64::from(CHUNK)
}

#[test]
fn ownership_follows_the_rbd_lock_and_a_silent_owner_is_fenced() {
    require_numatgtd("ownership_follows_the_rbd_lock_and_a_silent_owner_is_fenced");
    let c = Cluster::start();
    c.create_image("shared", 64 << 20);
    let mut a = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &c, 1, 2, ""));
    let mut b = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &c, 2, 1, ""));
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:rbd-alua-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:rbd-alua-b");
    // an RBD LUN's non-owners are standby by default, and the LUN offers explicit ALUA
    let a_owns = vec![(1, 0x0, vec![1]), (2, 0x2, vec![2])];
    let b_owns = vec![(1, 0x2, vec![1]), (2, 0x0, vec![2])];
    assert_eq!(rtpg(&mut sa), a_owns, "A owns the LUN at start");
    assert_eq!(rtpg(&mut sb), a_owns, "B knows it from the record");
    let (_, _, inq) = sb.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!(inq[5] & 0x30, 0x30, "TPGS = 11b: implicit and explicit");
    // a probe of the standby path (the kernel's partition scan) moves nothing
    let (st, sense, _) = sb.command(&cdb10(0x28, 0, CHUNK), &[], u32::from(CHUNK) * 512);
    assert_eq!((st, sense_of(&sense)), (2, Some((2, 0x04, 0x0B))));
    assert_eq!(rtpg(&mut sa), a_owns);

    // 1. cooperative handover on SET TARGET PORT GROUPS: A's dirty blocks (synchronized
    //    or not) reach B
    write(&mut sa, lba(0), &pattern(1), "A");
    sync(&mut sa, "A");
    write(&mut sa, lba(1), &pattern(2), "A");
    let took = take(&mut sb, 2, "B");
    eprintln!("handover A -> B took {took:?}");
    let (st, sense, _) = sb.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((6, 0x2A, 0x06))),
        "B's session is told"
    );
    let (got0, _) = read(&mut sb, lba(0), "B");
    assert!(got0 == pattern(1), "B reads A's synchronized write");
    assert!(
        read(&mut sb, lba(1), "B").0 == pattern(2),
        "and its cached one"
    );
    assert_eq!(rtpg(&mut sb), b_owns);
    let (st, sense, _) = sa.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((6, 0x2A, 0x06))),
        "A's session is told"
    );
    assert_eq!(rtpg(&mut sa), b_owns);
    assert!(
        a.log().contains("RBD LUN handed over"),
        "{}",
        a.log_tail(20)
    );

    // 2. B, the owner, is SIGKILLed during writes; A fences it and takes over
    let mut synced: Vec<(u32, u32)> = Vec::new();
    let mut pending: Vec<(u32, u32)> = Vec::new();
    for k in 0..40u32 {
        let chunk = 2 + k % 12;
        write(&mut sb, lba(chunk), &pattern(100 + k), "B");
        pending.push((chunk, 100 + k));
        if k % 5 == 4 {
            sync(&mut sb, "B");
            synced.append(&mut pending);
        }
    }
    b.kill9();
    let took = take(&mut sa, 1, "A after the kill");
    eprintln!("takeover by A after B was killed took {took:?}");
    let mut latest = std::collections::BTreeMap::new();
    for (chunk, seed) in &synced {
        latest.insert(*chunk, *seed);
    }
    for (chunk, seed) in &latest {
        // a later unsynchronized write of the same chunk may or may not have landed
        let later: Vec<u32> = pending
            .iter()
            .filter(|(c, _)| c == chunk)
            .map(|(_, s)| *s)
            .collect();
        let got = read(&mut sa, lba(*chunk), "A").0;
        assert!(
            got == pattern(*seed) || later.iter().any(|s| got == pattern(*s)),
            "chunk {chunk}: the synchronized write (seed {seed}) is lost"
        );
    }
    assert!(
        a.log().contains("fencing it"),
        "A broke the dead owner's lock:\n{}",
        a.log_tail(30)
    );

    // 3. B comes back, takes the LUN over, holds dirty blocks and freezes: it is fenced,
    //    and its late write-back cannot overwrite what A writes afterwards
    b.respawn();
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:rbd-alua-b2");
    assert_eq!(rtpg(&mut sb), a_owns, "B restarts standby: A owns the LUN");
    take(&mut sb, 2, "B again");
    write(&mut sb, lba(20), &pattern(7), "B again");
    assert_eq!(rtpg(&mut sb), b_owns);
    std::thread::sleep(Duration::from_millis(1200)); // past the owner's minimum hold
    write(
        &mut sb,
        lba(21),
        &pattern(8),
        "B (dirty, never synchronized)",
    );
    send_signal(b.pid(), libc::SIGSTOP);
    let took = take(&mut sa, 1, "A while B is frozen");
    eprintln!("takeover from the frozen B took {took:?}");
    write(&mut sa, lba(21), &pattern(9), "A");
    sync(&mut sa, "A");
    send_signal(b.pid(), libc::SIGCONT);
    // give B's flushers and its ownership thread time to try their late writes
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        read(&mut sa, lba(21), "A").0 == pattern(9),
        "a late write-back from the fenced gateway landed over the new owner's data"
    );
    eprintln!("B's log after the fencing:\n{}", b.log_tail(12));
    assert!(
        b.log().contains("fenced:"),
        "B knows it was fenced:\n{}",
        b.log_tail(30)
    );
    let (st, sense, _) = sb.command(&cdb10(0x28, lba(21), CHUNK), &[], u32::from(CHUNK) * 512);
    let answer = sense_of(&sense);
    assert!(
        st == 2 && matches!(answer, Some((2, 0x04, 0x0C)) | Some((6, 0x2A, 0x06))),
        "the fenced gateway does not serve the LUN: {st} {answer:?}"
    );
    let (code, metrics) = a.http_get("/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in A's metrics"))
    };
    assert_eq!(value("numatgt_lun_alua_owner_group{"), 1.0);
    // one series per ALUA state: A's is active/optimized, and only that one
    for (state, want) in [
        ("active_optimized", 1.0),
        ("active_non_optimized", 0.0),
        ("standby", 0.0),
        ("unavailable", 0.0),
        ("transitioning", 0.0),
    ] {
        let series =
            format!("numatgt_lun_alua_state{{target=\"{TEST_IQN}\",lun=\"1\",state=\"{state}\"}}");
        assert_eq!(value(&series), want, "{series}");
    }
    let fenced_other = metrics
        .lines()
        .find(|l| {
            l.starts_with("numatgt_lun_alua_transitions_total{") && l.contains("fenced_other")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(
        fenced_other,
        Some(2.0),
        "A fenced B twice (killed, then frozen)"
    );
    let cause = |c: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("numatgt_lun_alua_takeover_causes_total{")
                    && l.contains(&format!("cause=\"{c}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(
        (cause("stpg"), cause("io"), cause("admin")),
        (Some(2.0), Some(0.0), Some(0.0)),
        "both of A's takeovers were asked for by SET TARGET PORT GROUPS"
    );
    a.assert_alive("after the fencing");
}

/// With `non_owner_state: active-non-optimized` configured in YAML, an RBD LUN's other
/// gateway serves I/O by shipping it to the owner: B reads A's cached (not yet written
/// back) write, and the LUN stays where it was.
#[test]
fn active_non_optimized_rbd_gateways_ship_io_to_the_owner() {
    require_numatgtd("active_non_optimized_rbd_gateways_ship_io_to_the_owner");
    let c = Cluster::start();
    c.create_image("shared", 16 << 20);
    let ano = "      non_owner_state: active-non-optimized\n";
    let a = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &c, 1, 2, ano));
    let b = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &c, 2, 1, ano));
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:rbd-ano-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:rbd-ano-b");
    assert_eq!(rtpg(&mut sb), vec![(1, 0x0, vec![1]), (2, 0x1, vec![2])]);
    write(&mut sa, lba(3), &pattern(33), "A");
    let (got, took) = read(&mut sb, lba(3), "B");
    eprintln!("first READ through B answered after {took:?}");
    assert!(got == pattern(33), "B reads A's cached write");
    assert_eq!(
        rtpg(&mut sb),
        vec![(1, 0x0, vec![1]), (2, 0x1, vec![2])],
        "no ownership move\n{}",
        b.log_tail(40)
    );
    assert!(b.log().contains("gateway link up"), "{}", b.log_tail(30));
}

/// A live upgrade (`numatgtadm --upgrade`) of the gateway that owns the LUN without being
/// its configured owner (it took the LUN with SET TARGET PORT GROUPS): the stop gives the
/// image's lock back and the new executable takes it again at once (the ownership records
/// go along), so it stays the owner — both gateways report it, its moved session sees no
/// unit attention, and it reads what was written before, synchronized or only cached.
#[test]
fn an_upgraded_owner_keeps_its_rbd_lun() {
    require_numatgtd("an_upgraded_owner_keeps_its_rbd_lun");
    let c = Cluster::start();
    c.create_image("shared", 64 << 20);
    let a = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &c, 1, 2, ""));
    let b = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &c, 2, 1, ""));
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:rbd-upgrade-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:rbd-upgrade-b");
    let b_owns = vec![(1, 0x2, vec![1]), (2, 0x0, vec![2])];
    take(&mut sb, 2, "B");
    for s in [&mut sa, &mut sb] {
        // the access state change each session is told of
        let _ = s.command(&[0; 6], &[], 0);
    }
    assert_eq!(rtpg(&mut sb), b_owns);
    write(&mut sb, lba(0), &pattern(7), "B");
    sync(&mut sb, "B");
    write(&mut sb, lba(1), &pattern(8), "B");

    tests::mgmt::upgrade_moving(&b, 1);
    assert!(
        b.log()
            .contains("owned by this gateway before the upgrade: taking the image's lock back"),
        "{}",
        b.log_tail(30)
    );
    let (st, sense, _) = sb.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense_of(&sense)),
        (0, None),
        "B's moved session: no unit attention, B still active/optimized"
    );
    assert_eq!(rtpg(&mut sb), b_owns, "B owns the LUN after its upgrade");
    let (got, _) = read(&mut sb, lba(0), "B");
    assert!(got == pattern(7), "the synchronized write");
    let (got, _) = read(&mut sb, lba(1), "B");
    assert!(got == pattern(8), "the write that was only cached");
    // A went on following the record
    std::thread::sleep(Duration::from_millis(600));
    let (st, sense, _) = sa.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((2, 0x04, 0x0B))),
        "A's session: still standby, no unit attention"
    );
    assert_eq!(rtpg(&mut sa), b_owns, "A reports B as the owner");
}
