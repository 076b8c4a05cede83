//! SANITIZE against data that sits dirty in numatgtd's write-back block cache: after the
//! operation no read returns the old data (from the cache or the medium), and no dirty
//! block is written back over the sanitized medium later — the backing file itself holds
//! the sanitize result, before and after a daemon restart. Driven over a raw iSCSI session
//! (WRITE with the write cache enabled stays in the cache until flushed).

use std::time::{Duration, Instant};

use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB};

const SIZE: u64 = 16 * MIB;
const BS: usize = 512;
/// Blocks per write / read (64 KiB: fits in immediate data).
const RUN: usize = 128;

fn write10(s: &mut ScsiSession, lba: u32, byte: u8) {
    let [a, b, c, e] = lba.to_be_bytes();
    let cdb = [0x2A, 0, a, b, c, e, 0, 0, RUN as u8, 0];
    let (st, sense, _) = s.command(&cdb, &vec![byte; RUN * BS], 0);
    assert_eq!(st, 0, "WRITE(10) at {lba}: {sense:02x?}");
}

fn read10(s: &mut ScsiSession, lba: u32) -> Vec<u8> {
    let [a, b, c, e] = lba.to_be_bytes();
    let cdb = [0x28, 0, a, b, c, e, 0, 0, RUN as u8, 0];
    let (st, sense, data) = s.command(&cdb, &[], (RUN * BS) as u32);
    assert_eq!(st, 0, "READ(10) at {lba}: {sense:02x?}");
    assert_eq!(data.len(), RUN * BS);
    data
}

fn sanitize(s: &mut ScsiSession, byte1: u8, list: &[u8]) -> (u8, Vec<u8>) {
    let [hi, lo] = (list.len() as u16).to_be_bytes();
    let cdb = [0x48, byte1, 0, 0, 0, 0, 0, hi, lo, 0];
    let (st, sense, _) = s.command(&cdb, list, 0);
    (st, sense)
}

fn overwrite_list(byte0: u8, pattern: &[u8]) -> Vec<u8> {
    let mut l = vec![byte0, 0];
    l.extend_from_slice(&(pattern.len() as u16).to_be_bytes());
    l.extend_from_slice(pattern);
    l
}

/// The LBAs written and checked: the first and the last run of the LUN.
fn probes() -> [u32; 2] {
    [0, (SIZE as usize / BS - RUN) as u32]
}

/// What the backing file holds at the probe LBAs.
fn file_probes(d: &Daemon) -> Vec<Vec<u8>> {
    let f = std::fs::read(d.lun_path(1)).expect("read the LUN file");
    probes()
        .iter()
        .map(|&lba| {
            let off = lba as usize * BS;
            f[off..off + RUN * BS].to_vec()
        })
        .collect()
}

/// Polls REQUEST SENSE until the sanitize operation ends; every answer while it runs is
/// NOT READY / SANITIZE IN PROGRESS.
fn wait_done(s: &mut ScsiSession) {
    let start = Instant::now();
    loop {
        let (st, _, data) = s.command(&[0x03, 0, 0, 0, 18, 0], &[], 18);
        assert_eq!(st, 0, "REQUEST SENSE");
        let kcq = (data[2] & 0x0F, data[12], data[13]);
        if kcq == (0, 0, 0) {
            return;
        }
        assert_eq!(
            kcq,
            (2, 0x04, 0x1B),
            "REQUEST SENSE during SANITIZE: {data:02x?}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "SANITIZE never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn overwrite_replaces_dirty_cached_data() {
    tests::daemon::require_numatgtd("SANITIZE");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, SIZE).with_write_cache(true)]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:sanitize");
    for lba in probes() {
        write10(&mut s, lba, 0xA5);
        assert!(read10(&mut s, lba).iter().all(|&b| b == 0xA5));
    }
    // WCE=1: the data is in the cache, not in the file
    assert!(
        file_probes(&d).iter().all(|p| p.iter().all(|&b| b == 0)),
        "the writes already reached the file: the test would prove nothing"
    );

    // OVERWRITE, no IMMED: GOOD when done; a 3-byte pattern repeats within each block
    let pattern = [0x5A, 0xC3, 0x0F];
    let (st, sense) = sanitize(&mut s, 0x01, &overwrite_list(0x01, &pattern));
    assert_eq!(st, 0, "SANITIZE OVERWRITE: {sense:02x?}");
    let block: Vec<u8> = pattern.iter().cycle().take(BS).copied().collect();
    let expect: Vec<u8> = block.iter().cycle().take(RUN * BS).copied().collect();
    for lba in probes() {
        assert!(
            read10(&mut s, lba) == expect,
            "read after SANITIZE at {lba}"
        );
    }
    assert!(file_probes(&d).iter().all(|p| *p == expect), "backing file");

    // dirty again, then IMMED with INVERT and three passes (the last one plain)
    for lba in probes() {
        write10(&mut s, lba, 0x11);
    }
    let (st, sense) = sanitize(&mut s, 0x81, &overwrite_list(0x83, &[0x33]));
    assert_eq!(st, 0, "SANITIZE OVERWRITE IMMED: {sense:02x?}");
    wait_done(&mut s);
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(st, 0, "TEST UNIT READY after SANITIZE: {sense:02x?}");
    for lba in probes() {
        assert!(read10(&mut s, lba).iter().all(|&b| b == 0x33), "at {lba}");
    }
    assert!(file_probes(&d).iter().all(|p| p.iter().all(|&b| b == 0x33)));

    // a restart (which flushes the cache) brings nothing old back
    drop(s);
    d.restart();
    assert!(file_probes(&d).iter().all(|p| p.iter().all(|&b| b == 0x33)));
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:sanitize");
    for lba in probes() {
        assert!(read10(&mut s, lba).iter().all(|&b| b == 0x33), "at {lba}");
    }
}

#[test]
fn block_erase_deallocates_dirty_cached_data() {
    tests::daemon::require_numatgtd("SANITIZE");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, SIZE).thin().with_write_cache(true)]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:sanitize");
    // one run written through (FUA) so the file has data, one left dirty in the cache
    let [a, b, c, e] = probes()[0].to_be_bytes();
    let (st, _, _) = s.command(
        &[0x2A, 0x08, a, b, c, e, 0, 0, RUN as u8, 0],
        &vec![0xEE; RUN * BS],
        0,
    );
    assert_eq!(st, 0, "WRITE(10) FUA");
    write10(&mut s, probes()[1], 0xA5);
    let (st, sense) = sanitize(&mut s, 0x02, &[]);
    assert_eq!(st, 0, "SANITIZE BLOCK ERASE: {sense:02x?}");
    for lba in probes() {
        assert!(read10(&mut s, lba).iter().all(|&b| b == 0), "at {lba}");
    }
    assert!(file_probes(&d).iter().all(|p| p.iter().all(|&b| b == 0)));
    let meta = std::fs::metadata(d.lun_path(1)).expect("stat");
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&meta) * 512 < 64 * 1024,
        "the file still holds data blocks: {} bytes",
        std::os::unix::fs::MetadataExt::blocks(&meta) * 512
    );
    drop(s);
    d.restart();
    assert!(file_probes(&d).iter().all(|p| p.iter().all(|&b| b == 0)));
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:sanitize");
    for lba in probes() {
        assert!(read10(&mut s, lba).iter().all(|&b| b == 0), "at {lba}");
    }
}
