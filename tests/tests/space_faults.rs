//! A backing store that runs out of space (issue 15), for real: the LUN files live on a
//! 16 MiB tmpfs mounted for the test and nearly filled by another file. With the write
//! cache on, writes are acknowledged from the cache, their write-back fails with ENOSPC,
//! the dirty data is kept (reads return it), and SYNCHRONIZE CACHE reports the failure as
//! SPACE ALLOCATION FAILED WRITE PROTECT until space returns; then it succeeds and the
//! file holds the data. With the write cache off, a write that cannot be stored gets that
//! sense at once and is never acknowledged; once space returns the same write succeeds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tests::cdb::{SYNC10, sense_of};
use tests::daemon::{create_sparse, numatgtd_config};
use tests::pdu::ScsiSession;
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

const CHUNK: usize = 64 * 1024;
const CHUNKS: usize = 64; // 4 MiB per LUN, four times what the file system has left
const BLOCK: usize = 512;

/// A tmpfs mounted for the test; unmounted (lazily) when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> SmallFs {
        std::fs::create_dir_all(dir).expect("mount point");
        tools::run(
            20,
            "mount",
            [
                "-t".to_string(),
                "tmpfs".into(),
                "-o".into(),
                format!("size={size}"),
                "tmpfs".into(),
                dir.display().to_string(),
            ],
        )
        .check("mount a small tmpfs (root needed)");
        SmallFs(dir.to_path_buf())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system at `dir` with `filler` until about `leave` bytes are free.
fn fill(dir: &Path, filler: &Path, leave: u64) {
    let df = tools::run(
        10,
        "df",
        [
            "--output=avail".to_string(),
            "-B1".into(),
            dir.display().to_string(),
        ],
    );
    df.check("df");
    let free: u64 = df
        .stdout
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next()
        .unwrap_or_else(|| panic!("no free space figure from df:\n{df}"));
    let n = free.saturating_sub(leave);
    std::fs::write(filler, vec![0x55u8; n as usize]).expect("write the filler");
}

fn pattern(lun: u64, chunk: usize) -> u8 {
    (chunk as u8)
        .wrapping_mul(31)
        .wrapping_add(7 + lun as u8 * 100)
        | 1
}

fn write10(lba: u32, blocks: u16) -> [u8; 10] {
    let l = lba.to_be_bytes();
    let n = blocks.to_be_bytes();
    [0x2a, 0, l[0], l[1], l[2], l[3], 0, n[0], n[1], 0]
}

fn read10(lba: u32, blocks: u16) -> [u8; 10] {
    let mut c = write10(lba, blocks);
    c[0] = 0x28;
    c
}

/// DATA PROTECT / SPACE ALLOCATION FAILED WRITE PROTECT
const NO_SPACE: (u8, u8, u8) = (0x07, 0x27, 0x07);

fn write_chunk(s: &mut ScsiSession, lun: u64, i: usize) -> (u8, Option<(u8, u8, u8)>) {
    s.lun = lun as u16;
    let data = vec![pattern(lun, i); CHUNK];
    let lba = (i * CHUNK / BLOCK) as u32;
    let (status, sense, _) = s.command(&write10(lba, (CHUNK / BLOCK) as u16), &data, 0);
    (status, sense_of(&sense))
}

fn read_chunk_ok(s: &mut ScsiSession, lun: u64, i: usize) -> bool {
    s.lun = lun as u16;
    let lba = (i * CHUNK / BLOCK) as u32;
    let (status, _, data) = s.command(&read10(lba, (CHUNK / BLOCK) as u16), &[], CHUNK as u32);
    status == 0 && data.len() == CHUNK && data.iter().all(|&b| b == pattern(lun, i))
}

#[test]
fn out_of_space_is_reported_and_nothing_acknowledged_is_lost() {
    tools::require_root("mounting a small tmpfs");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = tmp.path().join("small");
    // declared before the daemon: dropped (unmounted) after it has stopped
    let fs = SmallFs::mount(&mnt, "16m");
    let filler = mnt.join("filler");
    let (cached, through) = (
        LunSpec::new(1, BLOCK as u32, 64 * MIB).thin(),
        LunSpec::new(2, BLOCK as u32, 64 * MIB)
            .thin()
            .with_write_cache(false),
    );
    let (p1, p2) = (mnt.join("lun1.img"), mnt.join("lun2.img"));
    create_sparse(&p1, cached.size);
    create_sparse(&p2, through.size);
    fill(&mnt, &filler, MIB);
    let luns = vec![(cached, p1.clone()), (through, p2.clone())];
    let mut d = Daemon::start_numatgtd_yaml(&|port| numatgtd_config(port, &luns));
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:space");

    // 1. write cache on: acknowledged from the cache
    for i in 0..CHUNKS {
        let (status, sense) = write_chunk(&mut s, 1, i);
        assert!(
            status == 0 || sense == Some(NO_SPACE),
            "cached write {i}: status {status:#x} sense {sense:x?}\n{}",
            d.log_tail(20)
        );
        assert_eq!(
            status, 0,
            "cached write {i} refused though the cache had room"
        );
    }
    // the flusher tries (blocks are due after a second) and fails; SYNCHRONIZE CACHE must
    // say so, not pretend
    std::thread::sleep(Duration::from_millis(1500));
    s.lun = 1;
    let (status, sense, _) = s.command(&SYNC10, &[], 0);
    assert_eq!(
        (status, sense_of(&sense)),
        (0x02, Some(NO_SPACE)),
        "SYNCHRONIZE CACHE with write-back failing for lack of space\n{}",
        d.log_tail(20)
    );
    // the data is still there for readers
    for i in 0..CHUNKS {
        assert!(
            read_chunk_ok(&mut s, 1, i),
            "cached chunk {i} lost before space returned"
        );
    }

    // 2. write cache off: a write that cannot be stored is refused with the sense, never
    // acknowledged (first LUN 2's power-on unit attention, for this nexus)
    s.lun = 2;
    for _ in 0..3 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
    let mut refused = Vec::new();
    for i in 0..CHUNKS {
        match write_chunk(&mut s, 2, i) {
            (0, _) => {}
            (0x02, Some(NO_SPACE)) => refused.push(i),
            (status, sense) => panic!(
                "write-through {i}: status {status:#x} sense {sense:x?}\n{}",
                d.log_tail(20)
            ),
        }
    }
    assert!(
        !refused.is_empty(),
        "no write-through was refused: the file system did not fill up"
    );
    eprintln!(
        "write-through: {} of {CHUNKS} chunks of 64 KiB acknowledged, {} refused with \
         DATA PROTECT / SPACE ALLOCATION FAILED WRITE PROTECT",
        CHUNKS - refused.len(),
        refused.len()
    );
    for i in (0..CHUNKS).filter(|i| !refused.contains(i)) {
        assert!(
            read_chunk_ok(&mut s, 2, i),
            "acknowledged write-through chunk {i} lost"
        );
    }

    // 3. space returns: SYNCHRONIZE CACHE succeeds (retried until the flusher's pause is
    // over, at most 10 s), and the refused writes go through
    std::fs::remove_file(&filler).expect("remove the filler");
    let t0 = Instant::now();
    loop {
        s.lun = 1;
        let (status, sense, _) = s.command(&SYNC10, &[], 0);
        if status == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "SYNCHRONIZE CACHE still fails after space returned: {status:#x} {:x?}\n{}",
            sense_of(&sense),
            d.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for &i in &refused {
        let (status, sense) = write_chunk(&mut s, 2, i);
        assert_eq!((status, sense), (0, None), "write {i} once space returned");
    }
    for i in 0..CHUNKS {
        assert!(
            read_chunk_ok(&mut s, 1, i),
            "chunk {i} of LUN 1 after recovery"
        );
        assert!(
            read_chunk_ok(&mut s, 2, i),
            "chunk {i} of LUN 2 after recovery"
        );
    }
    drop(s);
    let (status, _) = d.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "clean stop: {status:?}"
    );
    // both files hold every chunk
    for (lun, path) in [(1u64, &p1), (2, &p2)] {
        let bytes = std::fs::read(path).expect("read LUN file");
        for i in 0..CHUNKS {
            let c = &bytes[i * CHUNK..(i + 1) * CHUNK];
            assert!(
                c.iter().all(|&b| b == pattern(lun, i)),
                "LUN {lun} file, chunk {i}"
            );
        }
    }
    drop(fs);
}
