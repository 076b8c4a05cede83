//! (c) Data path through qemu-img's libiscsi block driver: write random data to the LUN,
//! read the whole LUN back, and compare the read-back AND the backing file byte for byte.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::time::Duration;

use rand::RngCore;
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

/// Compares `path` with `pattern` followed by zeros up to `total` bytes; returns the first
/// differing offset.
fn first_mismatch(path: &Path, pattern: &[u8], total: u64) -> Option<u64> {
    let f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let len = f.metadata().expect("metadata").len();
    assert_eq!(
        len,
        total,
        "{} has size {len}, want {total}",
        path.display()
    );
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut buf = vec![0u8; 1 << 20];
    let mut off: u64 = 0;
    while off < total {
        let n = r
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(n > 0, "{}: early EOF at {off}", path.display());
        for (i, b) in buf[..n].iter().enumerate() {
            let pos = off + i as u64;
            let want = usize::try_from(pos)
                .ok()
                .and_then(|p| pattern.get(p))
                .copied()
                .unwrap_or(0);
            if *b != want {
                return Some(pos);
            }
        }
        off += n as u64;
    }
    None
}

fn roundtrip(block_size: u32, lun_size: u64, data_size: usize) {
    tools::require_tool("qemu-img");
    let spec = LunSpec::new(1, block_size, lun_size);
    let mut d = Daemon::start(&[spec]);
    let url = d.url(1);

    let mut pattern = vec![0u8; data_size];
    rand::thread_rng().fill_bytes(&mut pattern);
    let pat_path = d.dir.path().join("pattern.bin");
    File::create(&pat_path)
        .and_then(|mut f| f.write_all(&pattern))
        .expect("write pattern file");

    let w = tools::run(
        180,
        "qemu-img",
        ["convert", "-n", "-f", "raw", "-O", "raw"]
            .iter()
            .map(|s| s.to_string())
            .chain([pat_path.to_string_lossy().into_owned(), url.clone()]),
    );
    w.check("qemu-img convert (write to LUN)");
    eprintln!("write of {} MiB took {:.1?}", data_size >> 20, w.elapsed);

    let out = d.dir.path().join("readback.img");
    let r = tools::run(
        180,
        "qemu-img",
        ["convert", "-f", "raw", "-O", "raw", "-S", "0"]
            .iter()
            .map(|s| s.to_string())
            .chain([url.clone(), out.to_string_lossy().into_owned()]),
    );
    r.check("qemu-img convert (read LUN back)");
    eprintln!("read of {} MiB took {:.1?}", lun_size >> 20, r.elapsed);

    if let Some(off) = first_mismatch(&out, &pattern, lun_size) {
        panic!(
            "read-back differs from the written data at byte {off} (block {})",
            off / u64::from(block_size)
        );
    }
    // qemu-img convert sends no SYNCHRONIZE CACHE, so with the write cache on the data may
    // still be dirty in numatgtd's cache (written back after a second, or now at a clean
    // stop): stop the daemon, then the backing file must hold everything
    let (status, _) = d.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "clean stop failed: {status:?}\n{}",
        d.log_tail(30)
    );
    if let Some(off) = first_mismatch(d.lun_path(1), &pattern, lun_size) {
        panic!(
            "backing file differs from the written data at byte {off} (block {})",
            off / u64::from(block_size)
        );
    }
}

#[test]
fn qemu_img_write_read_compare_512() {
    roundtrip(512, 256 * MIB, 64 << 20);
}

#[test]
fn qemu_img_write_read_compare_4096() {
    roundtrip(4096, 64 * MIB, 16 << 20);
}

/// Four initiators (separate qemu-io processes = separate iSCSI sessions) write distinct
/// patterns to distinct 8 MiB regions at the same time, each reads its region back with
/// pattern verification; then the backing file must hold every region.
#[test]
fn concurrent_sessions_distinct_regions() {
    tools::require_tool("qemu-io");
    const REGION: u64 = 8 * MIB;
    let spec = LunSpec::new(1, 512, 64 * MIB);
    let d = Daemon::start(&[spec]);
    let url = d.url(1);
    let handles: Vec<_> = (0..4u64)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let pat = 0x11 * (i + 1);
                let off = i * 2 * REGION; // leave a gap between regions
                tools::run(
                    120,
                    "qemu-io",
                    [
                        "-f".to_string(),
                        "raw".into(),
                        "-c".into(),
                        format!("write -P {pat:#x} {off} {REGION}"),
                        "-c".into(),
                        format!("read -P {pat:#x} {off} {REGION}"),
                        url,
                    ],
                )
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.join().expect("qemu-io thread panicked");
        r.check(&format!("qemu-io session {i}"));
        assert!(
            !r.stdout.contains("Pattern verification failed"),
            "session {i}: read-back pattern mismatch\n{r}"
        );
    }
    let data = std::fs::read(d.lun_path(1)).expect("read backing file");
    for i in 0..4u64 {
        let pat = u8::try_from(0x11 * (i + 1)).expect("pattern fits u8");
        let off = usize::try_from(i * 2 * REGION).expect("offset fits usize");
        let len = usize::try_from(REGION).expect("len fits usize");
        if let Some(p) = data[off..off + len].iter().position(|b| *b != pat) {
            panic!("backing file: region {i} differs at byte {}", off + p);
        }
        let gap = &data[off + len..off + 2 * len];
        if let Some(p) = gap.iter().position(|b| *b != 0) {
            panic!(
                "backing file: gap after region {i} written at byte {}",
                off + len + p
            );
        }
    }
}
