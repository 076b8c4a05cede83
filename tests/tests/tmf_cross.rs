//! Task management across I_T nexuses: a LOGICAL UNIT RESET from one session ends the
//! tasks of another session on that LUN. Session A starts a WRITE and waits for its R2T;
//! session B resets the LUN; A's write then never completes — its late Data-Out is ignored,
//! no status is ever sent for it, nothing reaches the disk — and A's next command reports
//! the reset (UNIT ATTENTION, BUS DEVICE RESET FUNCTION OCCURRED) on a connection that
//! stays up.
//!
//! And the reset waits for the work of the tasks it ended (SAM-5: a LOGICAL UNIT RESET
//! completes once they have ended): with a slow disk (the preload fault shim delays
//! pwrite), A's write-through WRITE is in the disk's hands when B resets the LUN, and B's
//! response comes only once that write has returned.

use std::time::{Duration, Instant};

use tests::cdb::cdb10;
use tests::daemon::require_numatgtd;
use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB};

#[test]
fn lun_reset_from_another_session_ends_its_tasks() {
    require_numatgtd("tmf_cross");
    let d = Daemon::start(&[LunSpec::new(1, 512, 8 * MIB)]);
    let mut a = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:tmf-a");
    let mut b = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:tmf-b");

    // A: WRITE(10) of 8 blocks at LBA 0 without immediate data → the target asks with an R2T
    let itt = a.send_command(&[0x2A, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[], 4096, false);
    let r2t = a
        .next_pdu(Duration::from_secs(5))
        .expect("an R2T for A's write");
    assert_eq!(r2t.opcode(), 0x31, "expected R2T, got {:#x}", r2t.opcode());
    let ttt = u32::from_be_bytes([r2t.bhs[20], r2t.bhs[21], r2t.bhs[22], r2t.bhs[23]]);

    // B: LOGICAL UNIT RESET
    assert_eq!(
        b.task_management(5, 0xFFFF_FFFF),
        0,
        "LUN RESET not complete"
    );

    // A's write is gone: its data is ignored and nothing is answered for it
    a.send_data_out(itt, ttt, 0, &[0xAB; 4096]);
    if let Some(p) = a.next_pdu(Duration::from_millis(800)) {
        panic!("the aborted write got an answer: opcode {:#x}", p.opcode());
    }
    // A's next command sees the reset, then the connection works as before
    let (st, sense, _) = a.command(&[0; 6], &[], 0);
    assert_eq!(st, 2, "unit attention expected");
    assert_eq!(
        (sense[2] & 0x0F, sense[12], sense[13]),
        (0x06, 0x29, 0x03),
        "BUS DEVICE RESET FUNCTION OCCURRED: {sense:02x?}"
    );
    assert_eq!(a.command(&[0; 6], &[], 0).0, 0);
    let (st, _, data) = a.command(&[0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[], 4096);
    assert_eq!(st, 0);
    assert!(
        data.iter().all(|&x| x == 0),
        "the aborted write's data reached the LUN"
    );
}

#[test]
fn lun_reset_waits_for_the_work_of_the_tasks_it_ends() {
    require_numatgtd("tmf_cross");
    tests::tools::require_root("loading a preload shim into the daemon");
    const DELAY_MS: u64 = 1500;
    let tmp = tempfile::tempdir().expect("tempdir");
    let so = tests::tools::fault_shim(tmp.path());
    let (start, end, delay) = (MIB.to_string(), (2 * MIB).to_string(), DELAY_MS.to_string());
    let d = Daemon::start_with_env(
        &[LunSpec::new(1, 512, 8 * MIB).with_write_cache(false)],
        &["--io-engine", "threads"],
        &[
            ("LD_PRELOAD", so.as_str()),
            ("NUMATGT_FAULT_PATH", "/lun"),
            ("NUMATGT_FAULT_START", start.as_str()),
            ("NUMATGT_FAULT_END", end.as_str()),
            ("NUMATGT_FAULT_DELAY_MS", delay.as_str()),
        ],
    );
    let mut a = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:slow-a");
    let mut b = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:slow-b");
    // the disk is slow where A writes: a write there takes DELAY_MS
    let lba = MIB / 512;
    let t = Instant::now();
    let (st, _, _) = a.command(&cdb10(0x2a, lba, 1), &[0x11; 512], 0);
    assert_eq!(st, 0);
    assert!(
        t.elapsed() >= Duration::from_millis(DELAY_MS),
        "the shim slows the range"
    );
    // A's WRITE (immediate data) reaches the disk; B resets the LUN meanwhile
    let t = Instant::now();
    a.send_command(&cdb10(0x2a, lba + 256, 1), &[0x22; 512], 512, false);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(b.task_management(5, 0xFFFF_FFFF), 0, "LUN RESET");
    let took = t.elapsed();
    eprintln!("LUN RESET answered {took:?} after A's write was sent (disk: {DELAY_MS} ms)");
    assert!(
        took >= Duration::from_millis(DELAY_MS - 100),
        "the reset answered before A's write left the disk: {took:?}\n{}",
        d.log_tail(20)
    );
    // nothing is answered for A's write; A's next command sees the reset
    if let Some(p) = a.next_pdu(Duration::from_millis(500)) {
        panic!("the ended write got an answer: opcode {:#x}", p.opcode());
    }
    let (st, sense, _) = a.command(&[0; 6], &[], 0);
    assert_eq!((st, sense.get(12..14)), (2, Some(&[0x29, 0x03][..])));
    // a reset that ends nothing still answers at once
    let t = Instant::now();
    assert_eq!(b.task_management(5, 0xFFFF_FFFF), 0, "LUN RESET");
    assert!(
        t.elapsed() < Duration::from_millis(DELAY_MS),
        "{:?}",
        t.elapsed()
    );
}
