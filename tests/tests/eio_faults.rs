//! A backing store with a bad spot (issue 15): a preload shim (tests/fixtures/faultshim.c,
//! built here with cc) makes every pread/pwrite that touches bytes 1 MiB..1 MiB+64 KiB of
//! the LUN files fail with EIO, for real, inside numatgtd (`--io-engine threads`: io_uring
//! I/O would not pass through the shim). A real initiator session sees:
//! - a READ of the bad range: MEDIUM ERROR / UNRECOVERED READ ERROR, while every other
//!   range keeps reading back its data;
//! - a write-through WRITE (write cache off) of the bad range: MEDIUM ERROR / WRITE ERROR,
//!   never GOOD;
//! - a cached WRITE (write cache on) of the bad range: acknowledged, its write-back fails and
//!   the data stays dirty and readable; SYNCHRONIZE CACHE reports MEDIUM ERROR / WRITE
//!   ERROR until the "disk" is repaired, then succeeds, and the file holds the data.

use std::path::Path;
use std::time::{Duration, Instant};

use tests::cdb::{SYNC10, cdb10, sense_of};
use tests::pdu::ScsiSession;
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

const BLOCK: usize = 512;
const BAD_START: u64 = MIB;
const BAD_LEN: u64 = 64 * 1024;

const UNRECOVERED_READ: (u8, u8, u8) = (0x03, 0x11, 0x00);
const WRITE_ERROR: (u8, u8, u8) = (0x03, 0x0c, 0x00);

fn shim(dir: &Path) -> String {
    tools::fault_shim(dir)
}

/// The bytes a LUN file starts with: byte i of sector k is `k as u8 ^ 0x5a`.
fn initial(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i / BLOCK) as u8 ^ 0x5a).collect()
}

fn clear_ua(s: &mut ScsiSession, lun: u16) {
    s.lun = lun;
    for _ in 0..3 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
}

#[test]
fn medium_errors_are_reported_and_the_rest_keeps_serving() {
    tools::require_root("loading a preload shim into the daemon");
    let tmp = tempfile::tempdir().expect("tempdir");
    let so = shim(tmp.path());
    let repaired = tmp.path().join("repaired");
    let size = 8 * MIB;
    let (start, end) = (BAD_START.to_string(), (BAD_START + BAD_LEN).to_string());
    let luns = [
        LunSpec::new(1, BLOCK as u32, size).with_write_cache(false),
        LunSpec::new(2, BLOCK as u32, size).with_write_cache(true),
    ];
    // the files exist (sparse) once the daemon is configured; fill them before it reads
    let mut d = Daemon::start_with_env(
        &luns,
        &["--io-engine", "threads"],
        &[
            ("LD_PRELOAD", so.as_str()),
            ("NUMATGT_FAULT_PATH", "/lun"),
            ("NUMATGT_FAULT_START", start.as_str()),
            ("NUMATGT_FAULT_END", end.as_str()),
            ("NUMATGT_FAULT_OFF", &repaired.display().to_string()),
        ],
    );
    let image = initial(size as usize);
    for lun in [1, 2] {
        std::fs::write(d.lun_path(lun), &image).expect("LUN contents");
    }
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:eio");
    clear_ua(&mut s, 2);
    let bad_lba = BAD_START / BLOCK as u64;
    let bad_blocks = (BAD_LEN / BLOCK as u64) as u16;

    // reads: the bad range fails (from the start, in the middle), the rest is served
    for lun in [1u16, 2] {
        s.lun = lun;
        for (lba, n) in [(bad_lba, 8u16), (bad_lba + 40, 16), (bad_lba - 4, 8)] {
            let (status, sense, _) =
                s.command(&cdb10(0x28, lba, n), &[], u32::from(n) * BLOCK as u32);
            assert_eq!(
                (status, sense_of(&sense)),
                (0x02, Some(UNRECOVERED_READ)),
                "LUN {lun} READ of LBA {lba}+{n} over the bad spot\n{}",
                d.log_tail(10)
            );
        }
        for lba in [
            0u64,
            100,
            bad_lba - 200,
            bad_lba + u64::from(bad_blocks),
            10_000,
        ] {
            let (status, _, data) = s.command(&cdb10(0x28, lba, 64), &[], 64 * BLOCK as u32);
            let at = lba as usize * BLOCK;
            assert!(
                status == 0 && data == image[at..at + 64 * BLOCK],
                "LUN {lun} READ of good LBA {lba}: status {status:#x}"
            );
        }
    }

    // write-through into the bad spot: never acknowledged
    s.lun = 1;
    let new = vec![0xc3u8; BAD_LEN as usize];
    let (status, sense, _) = s.command(&cdb10(0x2a, bad_lba, bad_blocks), &new, 0);
    assert_eq!(
        (status, sense_of(&sense)),
        (0x02, Some(WRITE_ERROR)),
        "write-through WRITE over the bad spot\n{}",
        d.log_tail(10)
    );
    // a good write next to it works
    let (status, _, _) = s.command(&cdb10(0x2a, 0, 16), &new[..16 * BLOCK], 0);
    assert_eq!(status, 0, "write-through WRITE of a good range");

    // write-back into the bad spot: acknowledged from the cache, kept while it cannot be
    // written, and SYNCHRONIZE CACHE says so
    s.lun = 2;
    let (status, sense, _) = s.command(&cdb10(0x2a, bad_lba, bad_blocks), &new, 0);
    assert_eq!(
        (status, sense_of(&sense)),
        (0, None),
        "cached WRITE over the bad spot"
    );
    std::thread::sleep(Duration::from_millis(1500)); // due for write-back, which fails
    let (status, sense, _) = s.command(&SYNC10, &[], 0);
    assert_eq!(
        (status, sense_of(&sense)),
        (0x02, Some(WRITE_ERROR)),
        "SYNCHRONIZE CACHE while the write-back fails\n{}",
        d.log_tail(10)
    );
    let (status, _, data) = s.command(&cdb10(0x28, bad_lba, bad_blocks), &[], BAD_LEN as u32);
    assert!(
        status == 0 && data == new,
        "the acknowledged data is readable from the cache: status {status:#x}"
    );

    // the disk is repaired: SYNCHRONIZE CACHE succeeds and the file holds the data
    std::fs::write(&repaired, b"").expect("repair");
    let t0 = Instant::now();
    loop {
        let (status, sense, _) = s.command(&SYNC10, &[], 0);
        if status == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "SYNCHRONIZE CACHE still fails after the repair: {:x?}",
            sense_of(&sense)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(s);
    let (st, _) = d.terminate(Duration::from_secs(30));
    assert!(st.is_some_and(|s| s.success()), "clean stop: {st:?}");
    let f2 = std::fs::read(d.lun_path(2)).expect("LUN 2 file");
    let r = BAD_START as usize..(BAD_START + BAD_LEN) as usize;
    assert!(
        f2[r.clone()] == new[..],
        "LUN 2's file holds the written data"
    );
    let f1 = std::fs::read(d.lun_path(1)).expect("LUN 1 file");
    assert!(
        f1[r.clone()] == image[r],
        "LUN 1's refused write-through must not have landed"
    );
    assert!(
        f1[..16 * BLOCK] == new[..16 * BLOCK],
        "LUN 1's good write landed"
    );
}
