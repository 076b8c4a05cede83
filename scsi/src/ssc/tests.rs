//! A tape drive against SSC-3 over an in-memory tgt tape image: records and filemarks
//! written and read back in both block modes, spacing and locating, READ POSITION, the
//! ends of the tape (end of data, beginning, early warning, overflow), write protection,
//! load and unload, and the file format's links.

use super::format::{self, Header};
use super::{MemTape, TapeOp};
use crate::test_util::*;
use crate::{Action, Completion, DeviceType, LogicalUnit};

fn drive(size_mib: u32, medium: u8) -> LogicalUnit {
    let lu = lu_with(|p| {
        p.device_type = DeviceType::Tape;
        p.block_size = 1;
        p.num_blocks = 0;
    });
    let img = format::new_image("A0000001", size_mib, medium, 1);
    let tape = MemTape {
        bytes: img,
        ..MemTape::default()
    };
    assert!(lu.tape_insert(Box::new(tape)).expect("a tape").is_none());
    lu
}

/// Runs `cdb` as the server would: decode, then the drive.
fn run(lu: &LogicalUnit, cdb: &[u8], data: &[u8]) -> Completion {
    match exec(lu, cdb, data) {
        Action::Tape(op) => lu.run_tape(&op, data),
        Action::Complete(c) => c,
        other => panic!("unexpected action {other:?}"),
    }
}

fn ok(c: &Completion) {
    assert_eq!(c.status, 0, "sense {:02x?}", c.sense);
}

fn write(lu: &LogicalUnit, data: &[u8]) {
    let n = data.len() as u32;
    ok(&run(
        lu,
        &[0x0A, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8, 0],
        data,
    ));
}

fn read(lu: &LogicalUnit, n: u32, sili: bool) -> Completion {
    let b1 = if sili { 2 } else { 0 };
    run(
        lu,
        &[0x08, b1, (n >> 16) as u8, (n >> 8) as u8, n as u8, 0],
        &[],
    )
}

fn filemarks(lu: &LogicalUnit, n: u8) {
    ok(&run(lu, &[0x10, 0, 0, 0, n, 0], &[]));
}

fn space(lu: &LogicalUnit, code: u8, n: i32) -> Completion {
    let b = n.to_be_bytes();
    run(lu, &[0x11, code, b[1], b[2], b[3], 0], &[])
}

fn rewind(lu: &LogicalUnit) {
    ok(&run(lu, &[0x01, 0, 0, 0, 0, 0], &[]));
}

fn position(lu: &LogicalUnit) -> (u8, u32) {
    let c = run(lu, &[0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    ok(&c);
    (
        c.data[0],
        u32::from_be_bytes([c.data[4], c.data[5], c.data[6], c.data[7]]),
    )
}

/// (key, asc, ascq, stream bits, information).
fn sense(c: &Completion) -> (u8, u8, u8, u8, i32) {
    assert_eq!(c.status, 2, "expected CHECK CONDITION");
    let s = &c.sense;
    let info = i32::from_be_bytes([s[3], s[4], s[5], s[6]]);
    (s[2] & 0x0F, s[12], s[13], s[2] & 0xE0, info)
}

#[test]
fn identity_is_a_removable_sequential_access_device() {
    let lu = drive(10, format::medium::DATA);
    let d = complete(&lu, &[0x12, 0, 0, 0, 96, 0]).data;
    assert_eq!((d[0], d[1] & 0x80), (0x01, 0x80));
    assert_eq!(&d[64..66], &[0x03, 0x40], "SSC-3");
    let limits = complete(&lu, &[0x05, 0, 0, 0, 0, 0]).data;
    assert_eq!(limits, vec![0, 0x80, 0, 0, 0, 1], "8 MiB max, 1 byte min");
}

#[test]
fn records_and_filemarks_read_back_with_the_senses_of_ssc() {
    let lu = drive(10, format::medium::DATA);
    write(&lu, &[1u8; 100]);
    write(&lu, &[2u8; 300]);
    filemarks(&lu, 1);
    write(&lu, &[3u8; 50]);
    filemarks(&lu, 1);
    assert_eq!(position(&lu).1, 5);
    rewind(&lu);
    assert_eq!(position(&lu), (0x80, 0), "BOP");
    // exact length
    let c = read(&lu, 100, false);
    ok(&c);
    assert_eq!(c.data, vec![1u8; 100]);
    // asked for more: ILI with a positive residue, unless SILI
    let c = read(&lu, 1000, false);
    assert_eq!(sense(&c), (0, 0, 0, 0x20, 700));
    assert_eq!(c.data, vec![2u8; 300]);
    // the filemark
    let c = read(&lu, 10, false);
    assert_eq!(sense(&c), (0, 0, 1, 0x80, 10));
    assert!(c.data.is_empty());
    // asked for less: ILI with a negative residue, SILI does not hide it in fixed mode
    let c = read(&lu, 20, true);
    ok(&c); // variable mode with block length 0: an overlength is quiet with SILI
    assert_eq!(c.data, vec![3u8; 20]);
    let c = read(&lu, 10, false);
    assert_eq!(sense(&c).3, 0x80);
    // end of data
    let c = read(&lu, 10, false);
    assert_eq!(sense(&c), (8, 0, 5, 0, 10));
    let c = read(&lu, 10, false);
    assert_eq!(sense(&c).0, 8, "stays at end of data");
}

#[test]
fn overlength_without_sili_reports_a_negative_residue() {
    let lu = drive(10, format::medium::DATA);
    write(&lu, &[7u8; 64]);
    rewind(&lu);
    let c = read(&lu, 16, false);
    assert_eq!(sense(&c), (0, 0, 0, 0x20, -48));
    assert_eq!(c.data, vec![7u8; 16]);
}

#[test]
fn fixed_block_mode_follows_mode_select() {
    let lu = drive(10, format::medium::DATA);
    // block length 512 in the block descriptor
    let sel = [0, 0, 0x10, 8, 0, 0, 0, 0, 0, 0, 2, 0];
    ok(&run(&lu, &[0x15, 0x10, 0, 0, 12, 0], &sel));
    let ms = complete(&lu, &[0x1A, 0, 0, 0, 255, 0]).data;
    assert_eq!((ms[2], &ms[9..12]), (0x10, &[0u8, 2, 0][..]));
    let data: Vec<u8> = (0..1536u32).map(|i| i as u8).collect();
    ok(&run(&lu, &[0x0A, 1, 0, 0, 3, 0], &data));
    assert_eq!(position(&lu).1, 3, "three records");
    filemarks(&lu, 1);
    rewind(&lu);
    let c = run(&lu, &[0x08, 1, 0, 0, 5, 0], &[]);
    assert_eq!(
        sense(&c),
        (0, 0, 1, 0x80, 2),
        "two blocks short: the filemark"
    );
    assert_eq!(c.data, data);
    // fixed mode without a block length is refused
    let sel0 = [0, 0, 0x10, 8, 0, 0, 0, 0, 0, 0, 0, 0];
    ok(&run(&lu, &[0x15, 0x10, 0, 0, 12, 0], &sel0));
    assert_eq!(sense(&run(&lu, &[0x08, 1, 0, 0, 1, 0], &[])).0, 5);
}

#[test]
fn space_and_locate_move_over_blocks_and_filemarks() {
    let lu = drive(10, format::medium::DATA);
    for f in 0..3u8 {
        for r in 0..4u8 {
            write(&lu, &[f * 10 + r; 10]);
        }
        filemarks(&lu, 1);
    }
    rewind(&lu);
    // forward two files: after the second filemark (object 10)
    ok(&space(&lu, 1, 2));
    assert_eq!(position(&lu).1, 10);
    assert_eq!(read(&lu, 10, false).data, vec![20u8; 10]);
    // back one filemark: on its beginning side (object 9)
    ok(&space(&lu, 1, -1));
    assert_eq!(position(&lu).1, 9);
    // blocks forward stop after a filemark with the residue
    ok(&space(&lu, 0, -2));
    assert_eq!(position(&lu).1, 7);
    let c = space(&lu, 0, 5);
    assert_eq!(sense(&c), (0, 0, 1, 0x80, 3));
    assert_eq!(position(&lu).1, 10);
    // blocks backward stop before a filemark
    let c = space(&lu, 0, -3);
    assert_eq!(sense(&c), (0, 0, 1, 0x80, 3));
    assert_eq!(position(&lu).1, 9);
    // to the beginning and past it
    let c = space(&lu, 1, -5);
    assert_eq!(sense(&c), (0, 0, 4, 0x40, 4), "one of five crossed");
    assert_eq!(position(&lu), (0x80, 0));
    // end of data
    ok(&space(&lu, 3, 0));
    assert_eq!(position(&lu).1, 15);
    let c = space(&lu, 1, 1);
    assert_eq!(sense(&c), (8, 0, 5, 0, 1));
    // locate there and back, then past the end
    ok(&run(&lu, &[0x2B, 0, 0, 0, 0, 0, 6, 0, 0, 0], &[]));
    assert_eq!(read(&lu, 10, false).data, vec![11u8; 10]);
    ok(&run(&lu, &[0x2B, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[]));
    assert_eq!(read(&lu, 10, false).data, vec![1u8; 10]);
    let c = run(&lu, &[0x2B, 0, 0, 0, 0, 0, 99, 0, 0, 0], &[]);
    assert_eq!(sense(&c).0, 8);
    assert_eq!(position(&lu).1, 15);
    // the long form counts files
    ok(&run(&lu, &[0x2B, 0, 0, 0, 0, 0, 11, 0, 0, 0], &[]));
    let c = run(&lu, &[0x34, 6, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    ok(&c);
    assert_eq!((c.data[15], c.data[23]), (11, 2));
}

#[test]
fn writing_in_the_middle_ends_the_data_there() {
    let lu = drive(10, format::medium::DATA);
    for r in 0..5u8 {
        write(&lu, &[r; 8]);
    }
    rewind(&lu);
    ok(&space(&lu, 0, 2));
    write(&lu, &[9u8; 8]);
    rewind(&lu);
    ok(&space(&lu, 3, 0));
    assert_eq!(position(&lu).1, 3);
    // and ERASE ends it where it is
    rewind(&lu);
    ok(&space(&lu, 0, 1));
    ok(&run(&lu, &[0x19, 1, 0, 0, 0, 0], &[]));
    ok(&space(&lu, 3, 0));
    assert_eq!(position(&lu).1, 1);
}

#[test]
fn early_warning_then_overflow() {
    let lu = drive(1, format::medium::DATA);
    let rec = vec![5u8; 60_000];
    let mut warned = false;
    for _ in 0..40 {
        let c = run(&lu, &[0x0A, 0, 0, 0xEA, 0x60, 0], &rec);
        if c.status == 0 {
            assert!(!warned, "GOOD again after early warning");
            continue;
        }
        let s = sense(&c);
        if s.0 == 0 {
            assert_eq!((s.1, s.2, s.3, s.4), (0, 2, 0x40, 0), "early warning");
            warned = true;
        } else {
            assert!(warned);
            assert_eq!((s.0, s.1, s.2, s.3, s.4), (0x0D, 0, 2, 0x40, 60_000));
            let (flags, _) = position(&lu);
            assert_eq!(flags & 0x40, 0x40, "EOP");
            return;
        }
    }
    panic!("no overflow on a 1 MiB tape");
}

#[test]
fn write_protection_cleaning_and_worm() {
    let lu = lu_with(|p| p.device_type = DeviceType::Tape);
    let img = format::new_image("RO", 10, format::medium::DATA, 1);
    let ro = MemTape {
        bytes: img,
        read_only: true,
        ..MemTape::default()
    };
    lu.tape_insert(Box::new(ro)).expect("tape");
    let ms = complete(&lu, &[0x1A, 0, 0, 0, 255, 0]).data;
    assert_eq!(ms[2] & 0x80, 0x80, "WP");
    assert_eq!(sense(&run(&lu, &[0x0A, 0, 0, 0, 1, 0], &[1])).0, 7);
    let worm = drive(10, format::medium::WORM);
    write(&worm, &[1u8; 4]);
    write(&worm, &[2u8; 4]);
    rewind(&worm);
    let c = run(&worm, &[0x0A, 0, 0, 0, 1, 0], &[1]);
    let s = sense(&c);
    assert_eq!((s.0, s.1, s.2), (7, 0x30, 0x0C), "WORM: no overwrite");
    ok(&space(&worm, 3, 0));
    write(&worm, &[3u8; 4]);
}

#[test]
fn unload_and_load_with_unit_attention_and_prevention() {
    let lu = drive(10, format::medium::DATA);
    write(&lu, &[1u8; 4]);
    ok(&run(&lu, &[0x1E, 0, 0, 0, 1, 0], &[]));
    assert_eq!(sense(&run(&lu, &[0x1B, 0, 0, 0, 0, 0], &[])).1, 0x53);
    ok(&run(&lu, &[0x1E, 0, 0, 0, 0, 0], &[]));
    ok(&run(&lu, &[0x1B, 0, 0, 0, 0, 0], &[]));
    assert_eq!(check(&complete(&lu, &[0; 6])), (2, 0x3A, 0));
    assert_eq!(sense(&run(&lu, &[0x08, 0, 0, 0, 4, 0], &[])).1, 0x3A);
    ok(&run(&lu, &[0x1B, 0, 0, 0, 1, 0], &[]));
    ok(&complete(&lu, &[0; 6]));
    assert_eq!(position(&lu), (0x80, 0));
    assert_eq!(read(&lu, 4, false).data, vec![1u8; 4]);
    assert_eq!(lu.tape_status().barcode, "A0000001");
}

#[test]
fn the_image_links_as_tgt_writes_it() {
    // the checksum of the BOT header tgtimg 1.0.85 wrote for a 10 MiB tape: CRC32C of its
    // last 44 bytes, little-endian
    let mut bot = [0u8; 48];
    bot[..16].copy_from_slice(&[
        0x4f, 0x20, 0x10, 0x0c, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0x10,
    ]);
    bot[40..48].copy_from_slice(&1152u64.to_be_bytes());
    assert!(Header::checksum_ok(&bot), "tgtimg's BOT header");
    assert_eq!(Header::decode(&bot).encode(), bot, "written the same");
    let lu = drive(10, format::medium::DATA);
    write(&lu, &[0xAB; 10]);
    filemarks(&lu, 1);
    let removed = lu.tape_remove().expect("the tape");
    assert!(removed.synced.is_ok());
    let mut io = removed.medium;
    let mut h = [0u8; 48];
    io.read_at(format::FIRST_RECORD, &mut h).expect("header");
    assert!(Header::checksum_ok(&h), "the CRC32C tgt checks");
    let rec = Header::decode(&h);
    assert_eq!(
        (rec.blk_type, rec.ondisk_sz, rec.blk_num, rec.prev, rec.next),
        (2, 10, 1, 0, format::FIRST_RECORD + 58)
    );
    io.read_at(rec.next, &mut h).expect("header");
    let fm = Header::decode(&h);
    assert_eq!(
        (fm.blk_type, fm.blk_num, fm.prev),
        (0x40, 2, format::FIRST_RECORD)
    );
    io.read_at(fm.next, &mut h).expect("header");
    let eod = Header::decode(&h);
    assert!(eod.is_eod() && eod.next == fm.next && eod.blk_num == 3);
    assert_eq!(
        TapeOp::Write {
            fixed: true,
            len: 3
        }
        .bytes(512),
        1536
    );
}

#[test]
fn a_load_tells_every_nexus_the_tape_is_ready() {
    use crate::{CmdCtx, Nexus, NexusId, Outcome};
    let lu = drive(10, format::medium::DATA);
    let a = Nexus::iscsi(
        NexusId(1),
        "iqn.2026-11.test:a",
        1,
        &lu.params().target_name,
        1,
    );
    let b = Nexus::iscsi(
        NexusId(2),
        "iqn.2026-11.test:b",
        2,
        &lu.params().target_name,
        1,
    );
    let on = |n: &Nexus, cdb: &[u8]| {
        let cmd = CmdCtx {
            cdb,
            data_out: &[],
            landed: 0,
            luns: &[1],
        };
        match lu.execute_nexus(n, &cmd) {
            Outcome::Action(Action::Tape(op)) => lu.run_tape(&op, &[]),
            Outcome::Action(Action::Complete(c)) => c,
            other => panic!("{other:?}"),
        }
    };
    lu.nexus_added(&a);
    lu.nexus_added(&b);
    for n in [&a, &b] {
        assert_eq!(on(n, &[0; 6]).status, 2, "power on");
        ok(&on(n, &[0; 6]));
    }
    ok(&on(&a, &[0x1B, 0, 0, 0, 0, 0]));
    assert_eq!(check(&on(&a, &[0; 6])), (2, 0x3A, 0));
    ok(&on(&a, &[0x1B, 0, 0, 0, 1, 0]));
    for n in [&a, &b] {
        assert_eq!(check(&on(n, &[0; 6])), (6, 0x28, 0));
        ok(&on(n, &[0; 6]));
    }
}

#[test]
fn mode_select_checks_every_page_length() {
    let lu = drive(10, format::medium::DATA);
    // a device configuration page of length 0 (fuzzing found it)
    let c = run(&lu, &[0x15, 0x10, 0, 0, 6, 0], &[0, 0, 0, 0, 0x10, 0]);
    assert_eq!(check(&c), (5, 0x26, 0));
    // the data compression page turns DCE on, and MODE SENSE says so
    let mut sel = vec![0, 0, 0x10, 0];
    let mut page = complete(&lu, &[0x1A, 0x08, 0x0F, 0, 255, 0]).data[4..].to_vec();
    page[2] |= 0x80;
    sel.extend_from_slice(&page);
    let n = sel.len() as u8;
    ok(&run(&lu, &[0x15, 0x10, 0, 0, n, 0], &sel));
    let now = complete(&lu, &[0x1A, 0x08, 0x0F, 0, 255, 0]).data;
    assert_eq!(now[6] & 0x80, 0x80, "DCE");
}

#[test]
fn filemarks_without_immed_are_durable_before_good() {
    use std::sync::{Arc, Mutex};
    /// A tape that counts its syncs where the test can see them.
    struct Counting(MemTape, Arc<Mutex<u32>>);
    impl super::TapeMedium for Counting {
        fn read_at(&mut self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.0.read_at(off, buf)
        }
        fn write_at(&mut self, off: u64, parts: &[&[u8]]) -> std::io::Result<()> {
            self.0.write_at(off, parts)
        }
        fn sync(&mut self) -> std::io::Result<()> {
            *self.1.lock().expect("lock") += 1;
            Ok(())
        }
        fn writable(&self) -> bool {
            true
        }
    }
    let lu = lu_with(|p| p.device_type = DeviceType::Tape);
    let syncs = Arc::new(Mutex::new(0));
    let img = format::new_image("S", 10, format::medium::DATA, 1);
    let tape = Counting(
        MemTape {
            bytes: img,
            ..MemTape::default()
        },
        Arc::clone(&syncs),
    );
    lu.tape_insert(Box::new(tape)).expect("tape");
    let n = || *syncs.lock().expect("lock");
    write(&lu, &[1u8; 100]);
    assert_eq!(n(), 0, "buffered mode: a WRITE is not synced");
    ok(&run(&lu, &[0x10, 1, 0, 0, 1, 0], &[]));
    assert_eq!(n(), 0, "IMMED: not waited for");
    ok(&run(&lu, &[0x10, 0, 0, 0, 0, 0], &[]));
    assert_eq!(n(), 1, "WRITE FILEMARKS(0) without IMMED flushes");
    write(&lu, &[2u8; 100]);
    filemarks(&lu, 1);
    assert_eq!(n(), 2, "a filemark is durable before GOOD");
    rewind(&lu);
    assert_eq!(n(), 2, "nothing written since");
    write(&lu, &[3u8; 10]);
    drop(lu.tape_remove());
    assert_eq!(n(), 3, "taking the tape out syncs it");
}

#[test]
fn a_drive_goes_on_in_the_next_process_with_its_tape_and_position() {
    use crate::{Nexus, NexusId};
    // the nexus `run` uses (test_util::exec), as the session that moves
    let nexus = |lu: &LogicalUnit| {
        Nexus::iscsi(
            NexusId(1),
            "iqn.2026-11.test:unit",
            1,
            &lu.params().target_name,
            1,
        )
    };
    let a = drive(10, format::medium::DATA);
    let x = nexus(&a);
    a.nexus_added(&x);
    for _ in 0..3 {
        if run(&a, &[0; 6], &[]).status == 0 {
            break;
        }
    }
    write(&a, &[1u8; 300]);
    write(&a, &[2u8; 50]);
    filemarks(&a, 1);
    write(&a, &[3u8; 70]);
    let before = position(&a);
    assert_eq!(before.1, 4);
    let state = a.handover_state(&[x.id]);
    assert_eq!(state[4..6], [0, 3], "the tape section's version");
    for n in 0..state.len() {
        let b = lu_with(|p| p.device_type = DeviceType::Tape);
        assert!(b.resume_state(&state[..n]).is_err(), "truncated at {n}");
    }
    let disk = lu_with(|_| {});
    assert!(
        disk.resume_state(&state).is_err(),
        "a disk refuses a drive's state"
    );
    let medium = a.tape_remove().expect("the tape").medium;

    // the same tape in the next process's drive: the same place, one filemark before it
    let b = lu_with(|p| p.device_type = DeviceType::Tape);
    b.resume_state(&state).expect("resume");
    b.tape_insert(medium).expect("the tape again");
    b.tape_resume().expect("goes on");
    b.nexus_added(&nexus(&b));
    assert_eq!(position(&b), before);
    assert_eq!(b.tape_status().file, 1);
    rewind(&b);
    let c = space(&b, 1, 1);
    ok(&c);
    assert_eq!(position(&b).1, 3, "past the filemark");

    // another tape: the carried session is told of a power on, and the drive is at BOT
    let c = lu_with(|p| p.device_type = DeviceType::Tape);
    c.resume_state(&state).expect("resume");
    let other = format::new_image("B0000002", 10, format::medium::DATA, 1);
    c.tape_insert(Box::new(MemTape {
        bytes: other,
        ..MemTape::default()
    }))
    .expect("another tape");
    let e = c.tape_resume().expect_err("another tape");
    assert!(e.contains("B0000002") && e.contains("A0000001"), "{e}");
    c.nexus_added(&nexus(&c));
    let tur = run(&c, &[0; 6], &[]);
    assert_eq!(
        crate::sense::parse_key_asc(&tur.sense),
        Some((6, 0x29, 0x00)),
        "POWER ON OCCURRED"
    );
}
