//! Removable medium and SEND DIAGNOSTIC against numatgtd over raw sessions (exact control of
//! the I_T nexuses and of the unit attentions libiscsi's tools would hide):
//! `tgtadm --params removable=1` makes a LUN removable at run time (INQUIRY RMB), PREVENT
//! ALLOW MEDIUM REMOVAL is per I_T nexus and ends with the nexus, an ejected medium makes
//! medium access NOT READY / MEDIUM NOT PRESENT, and loading it tells the other nexuses
//! NOT READY TO READY CHANGE. SEND DIAGNOSTIC's default self-test reads the backing store:
//! GOOD while it is readable, HARDWARE ERROR / LOGICAL UNIT FAILED SELF-TEST once it is not.

use std::time::{Duration, Instant};

use tests::daemon::require_numatgtd;
use tests::mgmt::update_lun1;
use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB};

const TUR: [u8; 6] = [0; 6];
const INQUIRY: [u8; 6] = [0x12, 0, 0, 0, 36, 0];
const PREVENT: [u8; 6] = [0x1E, 0, 0, 0, 1, 0];
const ALLOW: [u8; 6] = [0x1E, 0, 0, 0, 0, 0];
const EJECT: [u8; 6] = [0x1B, 0, 0, 0, 0x02, 0];
const LOAD: [u8; 6] = [0x1B, 0, 0, 0, 0x03, 0];
const READ10: [u8; 10] = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];

fn key_asc(sense: &[u8]) -> (u8, u8, u8) {
    // fixed format (70h): key in byte 2, ASC/ASCQ in bytes 12/13
    (
        sense.get(2).map_or(0, |b| b & 0x0F),
        sense.get(12).copied().unwrap_or(0),
        sense.get(13).copied().unwrap_or(0),
    )
}

/// (status, key/asc/ascq) of a command without data.
fn run(s: &mut ScsiSession, cdb: &[u8]) -> (u8, (u8, u8, u8)) {
    let (st, sense, _) = s.command(cdb, &[], 0);
    (st, key_asc(&sense))
}

const GOOD: (u8, (u8, u8, u8)) = (0, (0, 0, 0));
const PREVENTED: (u8, (u8, u8, u8)) = (2, (5, 0x53, 0x02));
const NO_MEDIUM: (u8, (u8, u8, u8)) = (2, (2, 0x3A, 0x00));

#[test]
fn removable_medium_prevention_per_nexus_and_eject() {
    require_numatgtd("removable");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 8 * MIB)]);
    let mut a = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:rm-a");
    let mut b = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:rm-b");

    // not removable: RMB 0, nothing to lock or eject
    let (st, _, inq) = a.command(&INQUIRY, &[], 36);
    assert_eq!((st, inq[1] & 0x80), (0, 0), "RMB before");
    assert_eq!(run(&mut a, &PREVENT), (2, (5, 0x24, 0)));
    assert_eq!(run(&mut a, &EJECT), (2, (5, 0x24, 0)));

    update_lun1(&d, "removable=1").check("tgtadm removable=1");
    let (st, _, inq) = a.command(&INQUIRY, &[], 36);
    assert_eq!((st, inq[1] & 0x80), (0, 0x80), "RMB after tgtadm");

    // a prevents: nobody may eject, b's ALLOW does not lift a's prevention
    assert_eq!(run(&mut a, &PREVENT), GOOD);
    assert_eq!(run(&mut b, &EJECT), PREVENTED);
    assert_eq!(run(&mut b, &ALLOW), GOOD);
    assert_eq!(run(&mut b, &EJECT), PREVENTED);
    assert_eq!(run(&mut b, &TUR), GOOD);

    // a's I_T nexus goes away (connection dropped): its prevention ends with it
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match run(&mut b, &EJECT) {
            GOOD => break,
            PREVENTED if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => panic!("eject after a's nexus loss: {other:?}"),
        }
    }

    // the medium is out: medium access is NOT READY, INQUIRY still works
    let mut c = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:rm-c");
    assert_eq!(run(&mut b, &TUR), NO_MEDIUM);
    let (st, sense, data) = b.command(&READ10, &[], 512);
    assert_eq!((st, key_asc(&sense)), NO_MEDIUM);
    assert!(data.is_empty());
    assert_eq!(run(&mut c, &TUR), NO_MEDIUM);
    assert_eq!(b.command(&INQUIRY, &[], 36).0, 0);

    // b loads it: b may read at once, c is told the medium may have changed
    assert_eq!(run(&mut b, &LOAD), GOOD);
    assert_eq!(run(&mut b, &TUR), GOOD);
    assert_eq!(b.command(&READ10, &[], 512).0, 0);
    assert_eq!(run(&mut c, &TUR), (2, (6, 0x28, 0x00)));
    assert_eq!(run(&mut c, &TUR), GOOD);

    // a LOGICAL UNIT RESET ends every prevention
    assert_eq!(run(&mut c, &PREVENT), GOOD);
    assert_eq!(run(&mut b, &EJECT), PREVENTED);
    assert_eq!(b.task_management(5, 0), 0, "LOGICAL UNIT RESET");
    assert_eq!(run(&mut b, &TUR), (2, (6, 0x29, 0x03)));
    assert_eq!(run(&mut b, &EJECT), GOOD);
    assert_eq!(run(&mut b, &LOAD), GOOD);
    d.assert_alive("after the removable medium test");
}

#[test]
fn send_diagnostic_self_test_reads_the_backing_store() {
    require_numatgtd("SEND DIAGNOSTIC");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 8 * MIB)]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:diag");
    let selftest = [0x1D, 0x04, 0, 0, 0, 0];
    assert_eq!(run(&mut s, &selftest), GOOD);
    // foreground short self-test, background short, abort without one running
    assert_eq!(run(&mut s, &[0x1D, 0xA0, 0, 0, 0, 0]), GOOD);
    assert_eq!(run(&mut s, &[0x1D, 0x20, 0, 0, 0, 0]), GOOD);
    assert_eq!(run(&mut s, &[0x1D, 0x80, 0, 0, 0, 0]), (2, (5, 0x24, 0)));
    // the supported diagnostic pages page: sent, then received
    let (st, _, _) = s.command(&[0x1D, 0x10, 0, 0, 4, 0], &[0, 0, 0, 0], 0);
    assert_eq!(st, 0);
    let (st, _, data) = s.command(&[0x1C, 0x01, 0, 0, 64, 0], &[], 64);
    assert_eq!((st, data), (0, vec![0, 0, 0, 1, 0]));

    // the backing file loses its blocks: the self-test read fails
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.lun_path(1))
        .and_then(|f| f.set_len(0))
        .expect("truncate the backing file");
    assert_eq!(run(&mut s, &selftest), (2, (4, 0x3E, 0x03)));
    d.assert_alive("after SEND DIAGNOSTIC");
}
