//! Soak (issue 15): 32 iSCSI sessions (qemu-io processes) run mixed random I/O against one
//! cached LUN at once for a bounded time (`NUMATGT_SOAK_SECS`, 60 s by default; the
//! 10-minute run is `tools/soak.sh`): writes of random patterns, reads that verify every
//! byte against a model of what each session wrote, and flushes. Each session owns its
//! region, so the model is exact; at the end every byte of the LUN is read back through a
//! fresh session and compared with the model. Zero mismatches and zero errors are required,
//! and numatgtd's resident memory and descriptor count must stay flat under the load.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tests::cdb::rss_kib;
use tests::qemuio::{Check, IoCmd, Session};
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

const SESSIONS: u64 = 32;
const REGION: u64 = MIB;
const SECTOR: u64 = 512;
/// Commands per batch (one qemu-io command is awaited at a time in a session).
const BATCH: usize = 48;

fn soak_secs() -> u64 {
    std::env::var("NUMATGT_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(60)
}

/// What one session did.
#[derive(Default, Debug)]
struct Tally {
    writes: u64,
    reads: u64,
    flushes: u64,
    bytes_verified: u64,
}

/// One session's loop: random writes, verified reads and flushes inside its region until
/// `until`; returns its tally and its model (pattern byte per sector).
fn run_session(url: &str, index: u64, until: Instant) -> Result<(Tally, Vec<u8>), String> {
    let base = index * REGION;
    let sectors = (REGION / SECTOR) as usize;
    let mut model = vec![0u8; sectors];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed_0000 + index);
    let mut tally = Tally::default();
    let mut s = Session::open(url, soak_secs() + 240)?;
    while Instant::now() < until {
        let mut cmds = Vec::with_capacity(BATCH);
        for _ in 0..BATCH {
            let roll: u32 = rng.gen_range(0..100);
            if roll < 3 {
                cmds.push(IoCmd::Flush);
                tally.flushes += 1;
                continue;
            }
            // 1..=128 sectors (512 B .. 64 KiB), at any sector of the region
            let n = rng.gen_range(1..=128usize).min(sectors);
            let first = rng.gen_range(0..=sectors - n);
            if roll < 50 {
                let pat: u8 = rng.gen_range(1..=255);
                model[first..first + n].fill(pat);
                cmds.push(IoCmd::Write {
                    off: base + first as u64 * SECTOR,
                    len: n as u64 * SECTOR,
                    pat,
                });
                tally.writes += 1;
            } else {
                // one read per run of equal pattern, each fully verified
                let mut i = first;
                while i < first + n {
                    let pat = model[i];
                    let mut j = i;
                    while j < first + n && model[j] == pat {
                        j += 1;
                    }
                    let len = (j - i) as u64 * SECTOR;
                    cmds.push(IoCmd::Read {
                        off: base + i as u64 * SECTOR,
                        len,
                        check: Some(Check { start: 0, len, pat }),
                    });
                    tally.reads += 1;
                    tally.bytes_verified += len;
                    i = j;
                }
            }
        }
        s.run(&cmds, Duration::from_secs(120))
            .map_err(|e| format!("session {index}: {e}"))?;
    }
    match s.close(Duration::from_secs(10)) {
        Some(st) if st.success() => Ok((tally, model)),
        other => Err(format!("session {index}: qemu-io ended with {other:?}")),
    }
}

#[test]
fn thirty_two_sessions_of_verified_random_io() {
    tools::require_tool("qemu-io");
    let secs = soak_secs();
    let lun_size = SESSIONS * REGION;
    let d = Daemon::start(&[LunSpec::new(1, 512, lun_size)]);
    let url = d.url(1);
    // warm: the whole LUN once, so the cache's memory is resident before the baseline
    tests::qemuio::read_all(&url, d.dir.path(), "warm.img").expect("warm-up read");
    let pid = d.pid();
    let (rss0, fds0) = (rss_kib(pid), d.open_fds());
    let until = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handles: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || run_session(&url, i, until))
        })
        .collect();
    // sample the daemon while the sessions run
    let mut fds_under_load = Vec::new();
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(500));
        peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
        fds_under_load.push(d.open_fds());
    }
    let mut total = Tally::default();
    let mut image = vec![0u8; lun_size as usize];
    let mut errors = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join().expect("session thread panicked") {
            Ok((t, model)) => {
                total.writes += t.writes;
                total.reads += t.reads;
                total.flushes += t.flushes;
                total.bytes_verified += t.bytes_verified;
                let base = i * REGION as usize;
                for (k, pat) in model.iter().enumerate() {
                    let at = base + k * SECTOR as usize;
                    image[at..at + SECTOR as usize].fill(*pat);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    let elapsed = started.elapsed();
    assert!(
        errors.is_empty(),
        "{} of {SESSIONS} sessions failed:\n{}\n{}",
        errors.len(),
        errors.join("\n"),
        d.log_tail(30)
    );
    // every byte, read back through a fresh session, is what the sessions last wrote
    let back = tests::qemuio::read_all(&url, d.dir.path(), "final.img").expect("final read");
    let mismatch = back.iter().zip(&image).position(|(a, b)| a != b);
    let (rss1, fds1) = (rss_kib(pid), d.open_fds());
    let rss_peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "soak: {SESSIONS} sessions, {:.1?}: {} writes, {} verified reads ({} MiB verified), {} \
         flushes, {:.0} I/Os/s; numatgtd RSS {rss0} KiB before, {rss_peak} KiB peak, {rss1} KiB \
         after; fds {fds0} before, {}..{} under load, {fds1} after",
        elapsed,
        total.writes,
        total.reads,
        total.bytes_verified >> 20,
        total.flushes,
        (total.writes + total.reads) as f64 / elapsed.as_secs_f64(),
        fds_under_load.iter().min().copied().unwrap_or(0),
        fds_under_load.iter().max().copied().unwrap_or(0),
    );
    assert_eq!(
        mismatch, None,
        "the LUN differs from what the sessions wrote at byte {mismatch:?}"
    );
    assert!(
        total.writes > SESSIONS * 10 && total.reads > SESSIONS * 10,
        "too little I/O to mean anything: {total:?}"
    );
    // flat: memory grows by less than 32 MiB over the whole run, and every descriptor the
    // sessions used is given back once they have logged out
    assert!(
        rss_peak.max(rss1) < rss0 + 32 * 1024,
        "numatgtd's RSS grew from {rss0} KiB to {} KiB",
        rss_peak.max(rss1)
    );
    assert!(
        fds1 <= fds0 + 1,
        "numatgtd holds {fds1} descriptors after the sessions ended, {fds0} before"
    );
    assert!(
        fds_under_load
            .iter()
            .all(|&n| n <= fds0 + SESSIONS as usize + 4),
        "more descriptors than sessions under load: {fds_under_load:?} (before: {fds0})"
    );
}
