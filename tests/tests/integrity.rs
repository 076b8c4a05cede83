//! Issue 3, data integrity: seeded random mixed reads and writes of many sizes through a real
//! initiator (qemu-io's libiscsi driver), every read verified against a model of the LUN, for
//! each cache mode (`numa`, `off`, `page`) with the write cache (WCE) on and off; crashes
//! (`kill -9` of numatgtd) after which every write acknowledged before the last completed
//! SYNCHRONIZE CACHE (WCE=1) or every acknowledged write (WCE=0) must be in the backing file;
//! and two initiators writing the same blocks at once, after which every reader sees one
//! consistent, stable copy equal to the disk.
//!
//! Reproduce a run with `INTEGRITY_SEED=<seed printed by the test>`; `INTEGRITY_OPS=<n>` sets
//! the operations per workload (default 300). qemu-io is opened with `-t writeback`, so the
//! only SYNCHRONIZE CACHE commands are the workload's `flush`es and no write carries FUA.

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tests::model::{Model, SECTOR, mismatch_report};
use tests::qemuio::{self, Check, IoCmd, Session};
use tests::{Daemon, LunSpec, MIB, reports_dir, tools};

const LUN_SIZE: u64 = 64 * MIB;
/// The cache block size configured for `numa` (writes are chosen around its boundaries).
const CACHE_BLOCK: u64 = 64 * 1024;
/// Concurrent qemu-io processes of the mixed workload, each on its own region.
const WORKERS: usize = 4;
/// qemu-io commands per process (one iSCSI session per batch).
const BATCH: usize = 30;
const QEMU_IO_TIMEOUT: u64 = 30;
/// The mixed workload stops starting new batches after this long (reported, not a failure).
const WORKLOAD_BUDGET: Duration = Duration::from_secs(35);
/// Read commands cover at most this many runs of the model (one verified read per run).
const MAX_RUNS_PER_READ: usize = 8;

// ---------------------------------------------------------------------------------------
// seeds, randomness

/// SplitMix64: tiny, and its sequence never changes with a dependency's version.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    fn derive(&mut self, salt: u64) -> Rng {
        Rng(self.next() ^ salt.wrapping_mul(0x2545_f491_4f6c_dd1d))
    }
}

/// `INTEGRITY_SEED` (decimal or 0x-hex), else fresh from the clock.
fn seed(test: &str) -> u64 {
    let s = match std::env::var("INTEGRITY_SEED") {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("INTEGRITY_SEED={v}: {e}"))
        }
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970");
            (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
        }
    };
    eprintln!(
        "{test}: seed {s:#x} (reproduce: INTEGRITY_SEED={s:#x} cargo test -p tests --test \
         integrity {test} -- --nocapture)"
    );
    s
}

fn num_ops() -> usize {
    match std::env::var("INTEGRITY_OPS") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("INTEGRITY_OPS={v}: {e}")),
        Err(_) => 300,
    }
}

// ---------------------------------------------------------------------------------------
// configuration, daemon, failures

/// Top-level `cache:` section: `mode` plus a small cache (so eviction happens).
fn cache_yaml(mode: &str, size_per_node: &str, read_ahead: u32) -> String {
    format!(
        "cache:\n  mode: {mode}\n  size_per_node: {size_per_node}\n  block_size: 64K\n  \
         read_ahead: {read_ahead}\n"
    )
}

fn start(mode: &str, wce: bool, yaml: &str) -> Daemon {
    tools::require_tool("qemu-io");
    tools::require_tool("qemu-img");
    let spec = LunSpec::new(1, 512, LUN_SIZE)
        .with_cache(mode)
        .with_write_cache(wce);
    Daemon::start_with(&[spec], yaml)
}

/// Fails the test with everything needed to understand and reproduce it; keeps a copy of the
/// daemon log (its temp dir is removed when the test ends).
fn fail(d: &Daemon, test: &str, seed: u64, msg: &str) -> ! {
    let copy = reports_dir().join(format!("integrity-{test}.daemon.log"));
    let kept = match std::fs::copy(&d.log_path, &copy) {
        Ok(_) => format!("copy kept at {}", copy.display()),
        Err(e) => format!("could not copy it: {e}"),
    };
    panic!(
        "{test} FAILED\n{msg}\n\nseed: INTEGRITY_SEED={seed:#x} cargo test -p tests --test \
         integrity {test} -- --nocapture\ndaemon log: {} ({kept})",
        d.log_path.display()
    );
}

/// SIGTERM; the daemon must exit 0 (a clean shutdown flushes everything).
fn stop_cleanly(d: &mut Daemon, test: &str, seed: u64) -> Duration {
    let (st, took) = d.terminate(Duration::from_secs(15));
    match st {
        Some(st) if st.success() => took,
        other => fail(
            d,
            test,
            seed,
            &format!("numatgtd did not stop cleanly on SIGTERM: {other:?} after {took:?}"),
        ),
    }
}

fn read_file_range(path: &Path, off: u64, len: u64) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let mut buf = vec![0u8; usize::try_from(len).expect("len fits usize")];
    f.read_exact_at(&mut buf, off)
        .map_err(|e| format!("read {} at {off}: {e}", path.display()))?;
    Ok(buf)
}

fn read_backing(d: &Daemon) -> Vec<u8> {
    let data = std::fs::read(d.lun_path(1)).expect("read the backing file");
    assert_eq!(data.len() as u64, LUN_SIZE, "backing file changed size");
    data
}

// ---------------------------------------------------------------------------------------
// workload planning

#[derive(Clone, Copy, Debug)]
struct Region {
    start: u64,
    end: u64,
}

impl Region {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

/// Operation mix, in percent.
#[derive(Clone, Copy, Debug)]
struct Profile {
    write: u64,
    flush: u64,
    /// of reads: re-read a recently written or read range (cache hits)
    reread: u64,
    /// of reads: issue the read twice in a row
    repeat: u64,
}

const MIXED: Profile = Profile {
    write: 45,
    flush: 8,
    reread: 30,
    repeat: 10,
};

const READ_HEAVY: Profile = Profile {
    write: 25,
    flush: 5,
    reread: 50,
    repeat: 40,
};

const WRITES_AND_READS: Profile = Profile {
    write: 80,
    flush: 0,
    reread: 50,
    repeat: 0,
};

/// One planned qemu-io command; `op` is its operation's index (a read of several model runs
/// is several commands of one op).
#[derive(Clone, Debug)]
struct Planned {
    worker: usize,
    op: usize,
    cmd: IoCmd,
}

/// Request sizes 512 B .. 1 MiB: tiny, sub-block, exactly a cache block, just over/under
/// one, several blocks, 1 MiB, and anything in between.
fn pick_len(rng: &mut Rng) -> u64 {
    match rng.below(10) {
        0 => SECTOR * (1 + rng.below(8)),
        1 => 4096 * (1 + rng.below(16)),
        2 => CACHE_BLOCK,
        3 => CACHE_BLOCK + SECTOR * (1 + rng.below(8)),
        4 => CACHE_BLOCK - SECTOR * (1 + rng.below(8)),
        5 => CACHE_BLOCK * (2 + rng.below(2)),
        6 => CACHE_BLOCK * [4, 8][rng.below(2) as usize],
        7 => MIB,
        _ => SECTOR * (1 + rng.below(2048)),
    }
}

/// A sector-aligned range of `region`: cache-block aligned, straddling a block boundary, in
/// the region's hot first 2 MiB, overlapping a recent range, or anywhere.
fn pick_range(rng: &mut Rng, region: Region, recent: &[(u64, u64)]) -> (u64, u64) {
    let len = pick_len(rng).min(region.len());
    let sectors = |n: u64| n / SECTOR;
    let rel = match rng.below(8) {
        0 => rng.below(region.len() / CACHE_BLOCK) * CACHE_BLOCK,
        1 => (rng.below(region.len() / CACHE_BLOCK) * CACHE_BLOCK)
            .saturating_sub(SECTOR * (1 + rng.below(16))),
        2 | 3 => rng.below(sectors((2 * MIB).min(region.len()))) * SECTOR,
        4 if !recent.is_empty() => {
            let (o, l) = recent[rng.below(recent.len() as u64) as usize];
            let shift = rng.below(sectors(l) + 1) * SECTOR;
            let o = o - region.start;
            if rng.pct(50) {
                o + shift
            } else {
                o.saturating_sub(shift)
            }
        }
        _ => rng.below(sectors(region.len())) * SECTOR,
    };
    let rel = rel.min(region.len() - len);
    (region.start + rel, len)
}

/// Pattern byte of `worker`'s `k`-th write: never 0, distinct between workers.
fn pattern(worker: usize, k: usize) -> u8 {
    u8::try_from(1 + (k % 63) * 4 + worker).expect("pattern fits u8")
}

/// Read commands for `off..off+len`: one verified read of the whole range per model run
/// (capped at MAX_RUNS_PER_READ runs, shortening the range).
fn verified_reads(model: &Model, off: u64, len: u64) -> Vec<IoCmd> {
    let mut runs = model.runs(off, len);
    runs.truncate(MAX_RUNS_PER_READ);
    let last = runs.last().expect("a read has at least one run");
    let len = last.off + last.len - off;
    runs.iter()
        .map(|r| IoCmd::Read {
            off,
            len,
            check: Some(Check {
                start: r.off - off,
                len: r.len,
                pat: r.pat,
            }),
        })
        .collect()
}

/// Plans `n` operations of `worker` on `region`, updating `model` as the writes would.
fn plan_worker(
    rng: &mut Rng,
    model: &mut Model,
    worker: usize,
    region: Region,
    n: usize,
    profile: Profile,
) -> Vec<Planned> {
    let mut out = Vec::new();
    let mut recent: Vec<(u64, u64)> = Vec::new();
    let mut writes = 0usize;
    let remember = |recent: &mut Vec<(u64, u64)>, r: (u64, u64)| {
        recent.push(r);
        if recent.len() > 16 {
            recent.remove(0);
        }
    };
    for op in 0..n {
        let roll = rng.below(100);
        if roll < profile.write {
            let (off, len) = pick_range(rng, region, &recent);
            let pat = pattern(worker, writes);
            writes += 1;
            let cmd = IoCmd::Write { off, len, pat };
            model.write(
                off,
                len,
                pat,
                format!("worker {worker} op {op} `{}`", cmd.command()),
            );
            out.push(Planned { worker, op, cmd });
            remember(&mut recent, (off, len));
        } else if roll < profile.write + profile.flush {
            out.push(Planned {
                worker,
                op,
                cmd: IoCmd::Flush,
            });
        } else {
            let (off, len) = if !recent.is_empty() && rng.pct(profile.reread) {
                recent[rng.below(recent.len() as u64) as usize]
            } else {
                pick_range(rng, region, &recent)
            };
            let times = if rng.pct(profile.repeat) { 2 } else { 1 };
            let reads = verified_reads(model, off, len);
            for _ in 0..times {
                out.extend(reads.iter().map(|cmd| Planned {
                    worker,
                    op,
                    cmd: cmd.clone(),
                }));
            }
            remember(&mut recent, (off, len));
        }
    }
    out
}

/// The LUN split into WORKERS regions whose boundaries are NOT cache-block aligned, so
/// neighbouring workers write different sectors of the same cache block.
fn regions() -> Vec<Region> {
    let step = LUN_SIZE / WORKERS as u64;
    let bound = |i: u64| if i == 0 { 0 } else { i * step + 3 * SECTOR };
    (0..WORKERS as u64)
        .map(|i| Region {
            start: bound(i),
            end: if i + 1 == WORKERS as u64 {
                LUN_SIZE
            } else {
                bound(i + 1)
            },
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// execution and diagnosis

#[derive(Default, Debug)]
struct Outcome {
    commands: usize,
    sessions: usize,
    written: u64,
    read: u64,
    flushes: usize,
    skipped_commands: usize,
}

/// The last planned write before `plan[..pos]` that covers `off`.
fn last_write_before(plan: &[Planned], pos: usize, off: u64) -> String {
    plan[..pos]
        .iter()
        .rev()
        .find_map(|p| match p.cmd {
            IoCmd::Write { off: o, len, .. } if (o..o + len).contains(&off) => Some(format!(
                "worker {} op {} `{}`",
                p.worker,
                p.op,
                p.cmd.command()
            )),
            _ => None,
        })
        .unwrap_or_else(|| "never written (zeros)".into())
}

/// What is really at `x..x+n` (first 64 KiB of it), against the expected pattern: read again
/// through a new session with the SAME request as the failed read (`off`, `len`), with
/// 512-byte requests, and in the backing file.
#[allow(clippy::too_many_arguments)]
fn diagnose(
    d: &Daemon,
    plan: &[Planned],
    pos: usize,
    (off, len): (u64, u64),
    x: u64,
    n: u64,
    pat: u8,
) -> String {
    let start = x / SECTOR * SECTOR;
    let end = (x + n.min(CACHE_BLOCK)).div_ceil(SECTOR) * SECTOR;
    let want = vec![pat; usize::try_from(end - start).expect("fits")];
    let who = |o: u64| last_write_before(plan, pos, o);
    let mut r = format!(
        "  expected {pat:#04x} in bytes {x}..{} (last write there before this read: {})",
        x + n,
        who(x)
    );
    let window = |v: Vec<u8>| {
        let a = usize::try_from(start - off).expect("fits");
        v[a..a + want.len()].to_vec()
    };
    for (what, got) in [
        (
            format!("the same read `read {off} {len}` again, new session"),
            qemuio::read_verbatim(&d.url(1), off, len).map(window),
        ),
        (
            "512-byte reads, new session".to_string(),
            qemuio::read_range(&d.url(1), start, end - start, SECTOR, d.dir.path()),
        ),
        (
            "backing file".to_string(),
            read_file_range(d.lun_path(1), start, end - start),
        ),
    ] {
        let line = match got {
            Ok(got) => {
                mismatch_report(&want, &got, start, who).unwrap_or_else(|| "matches (now)".into())
            }
            Err(e) => format!("cannot read: {e}"),
        };
        r.push_str(&format!("\n  {what} ({start}..{end}): {line}"));
    }
    r
}

/// Writes `plan[..upto]` as qemu-io command lines, one block per session (replay each block
/// with `qemu-io -f raw -t writeback URL < block`), to the reports dir; returns the path.
fn save_replay(plan: &[Planned], upto: usize) -> String {
    let mut text = String::new();
    for (n, first) in (0..upto).step_by(BATCH).enumerate() {
        text.push_str(&format!("# session {n}\n"));
        for p in &plan[first..(first + BATCH).min(upto)] {
            text.push_str(&format!("{}\n", p.cmd.command()));
        }
    }
    let worker = plan.first().map_or(0, |p| p.worker);
    let path = reports_dir().join(format!(
        "integrity-replay-{}-worker{worker}.txt",
        std::process::id()
    ));
    match std::fs::write(&path, text) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(cannot write {}: {e})", path.display()),
    }
}

/// Runs one batch; Err explains every failure.
fn run_one_batch(
    d: &Daemon,
    plan: &[Planned],
    first: usize,
    batch_no: usize,
) -> Result<Outcome, String> {
    let batch = &plan[first..(first + BATCH).min(plan.len())];
    let cmds: Vec<IoCmd> = batch.iter().map(|p| p.cmd.clone()).collect();
    let (run, failures) = qemuio::run_batch(&d.url(1), &cmds, QEMU_IO_TIMEOUT);
    if failures.is_empty() {
        let mut o = Outcome {
            commands: cmds.len(),
            sessions: 1,
            ..Outcome::default()
        };
        for c in &cmds {
            match c {
                IoCmd::Write { len, .. } => o.written += len,
                IoCmd::Read { len, .. } => o.read += len,
                IoCmd::Flush => o.flushes += 1,
            }
        }
        return Ok(o);
    }
    let mut msg = format!(
        "qemu-io session {batch_no} of worker {} (commands {first}..{}) failed:",
        batch[0].worker,
        first + batch.len()
    );
    for f in failures.iter().take(5) {
        match f.index {
            Some(i) => {
                let p = &batch[i];
                msg.push_str(&format!(
                    "\n* worker {} op {} (command {} of the session) `{}`: {}",
                    p.worker,
                    p.op,
                    i,
                    p.cmd.command(),
                    f.message
                ));
                if let (
                    Some((x, n)),
                    IoCmd::Read {
                        off,
                        len,
                        check: Some(c),
                    },
                ) = (f.pattern_mismatch, &p.cmd)
                {
                    msg.push('\n');
                    msg.push_str(&diagnose(d, plan, first + i, (*off, *len), x, n, c.pat));
                }
            }
            None => msg.push_str(&format!("\n* {}", f.message)),
        }
    }
    if failures.len() > 5 {
        msg.push_str(&format!("\n* ... and {} more", failures.len() - 5));
    }
    msg.push_str(&format!("\n{run}"));
    msg.push_str(&format!(
        "\nthis worker's sessions up to here, as qemu-io scripts (one session per block): {}",
        save_replay(plan, first + batch.len())
    ));
    Err(msg)
}

/// Runs every worker's plan, workers concurrently, each in batches of BATCH commands.
fn execute(d: &Daemon, plans: &[Vec<Planned>], deadline: Instant) -> Result<Outcome, String> {
    let results: Vec<Result<Outcome, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = plans
            .iter()
            .map(|plan| {
                s.spawn(move || {
                    let mut total = Outcome::default();
                    for (batch_no, first) in (0..plan.len()).step_by(BATCH).enumerate() {
                        if Instant::now() > deadline {
                            total.skipped_commands = plan.len() - first;
                            break;
                        }
                        let o = run_one_batch(d, plan, first, batch_no)?;
                        total.commands += o.commands;
                        total.sessions += o.sessions;
                        total.written += o.written;
                        total.read += o.read;
                        total.flushes += o.flushes;
                    }
                    Ok(total)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    let mut total = Outcome::default();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(o) => {
                total.commands += o.commands;
                total.sessions += o.sessions;
                total.written += o.written;
                total.read += o.read;
                total.flushes += o.flushes;
                total.skipped_commands += o.skipped_commands;
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(total)
    } else {
        Err(errors.join("\n\n"))
    }
}

// ---------------------------------------------------------------------------------------
// 1. mixed workload per cache mode and WCE

fn mixed_workload(test: &str, mode: &str, wce: bool, yaml: &str, profile: Profile) {
    let t0 = Instant::now();
    let seed = seed(test);
    let mut d = start(mode, wce, yaml);
    let mut rng = Rng(seed);
    let mut model = Model::new(LUN_SIZE);
    let n = num_ops();
    let plans: Vec<Vec<Planned>> = regions()
        .into_iter()
        .enumerate()
        .map(|(w, region)| {
            let mut r = rng.derive(w as u64);
            plan_worker(&mut r, &mut model, w, region, n.div_ceil(WORKERS), profile)
        })
        .collect();
    let o = match execute(&d, &plans, Instant::now() + WORKLOAD_BUDGET) {
        Ok(o) => o,
        Err(e) => fail(&d, test, seed, &e),
    };
    let took = t0.elapsed();
    if o.skipped_commands > 0 {
        eprintln!(
            "{test}: WARNING: time budget {WORKLOAD_BUDGET:?} reached, {} planned commands not \
             run; the model check below covers only what ran",
            o.skipped_commands
        );
        // The model assumed every planned write ran: only a complete run is comparable.
        fail(
            &d,
            test,
            seed,
            &format!(
                "workload did not finish within {WORKLOAD_BUDGET:?} ({} commands left): \
                 the target is far slower than expected",
                o.skipped_commands
            ),
        );
    }
    let stop = stop_cleanly(&mut d, test, seed);
    let data = read_backing(&d);
    if let Some(r) = model.compare(&data, 0) {
        fail(
            &d,
            test,
            seed,
            &format!("backing file after a clean stop differs from the model: {r}"),
        );
    }
    eprintln!(
        "{test}: OK: mode={mode} write_cache={wce}: {} commands ({} flushes) in {} qemu-io \
         sessions, {} MiB written, {} MiB read+verified; workload {:.1?}, stop {:.1?}, total \
         {:.1?}",
        o.commands,
        o.flushes,
        o.sessions,
        o.written / MIB,
        o.read / MIB,
        took,
        stop,
        t0.elapsed()
    );
}

#[test]
fn mixed_numa_wce1() {
    mixed_workload(
        "mixed_numa_wce1",
        "numa",
        true,
        &cache_yaml("numa", "16M", 0),
        MIXED,
    );
}

#[test]
fn mixed_numa_wce0() {
    mixed_workload(
        "mixed_numa_wce0",
        "numa",
        false,
        &cache_yaml("numa", "16M", 0),
        MIXED,
    );
}

#[test]
fn mixed_off_wce1() {
    mixed_workload(
        "mixed_off_wce1",
        "off",
        true,
        &cache_yaml("off", "16M", 0),
        MIXED,
    );
}

#[test]
fn mixed_off_wce0() {
    mixed_workload(
        "mixed_off_wce0",
        "off",
        false,
        &cache_yaml("off", "16M", 0),
        MIXED,
    );
}

#[test]
fn mixed_page_wce1() {
    mixed_workload(
        "mixed_page_wce1",
        "page",
        true,
        &cache_yaml("page", "16M", 0),
        MIXED,
    );
}

#[test]
fn mixed_page_wce0() {
    mixed_workload(
        "mixed_page_wce0",
        "page",
        false,
        &cache_yaml("page", "16M", 0),
        MIXED,
    );
}

/// A 2 MiB cache (32 blocks of 64 KiB) under a 64 MiB working set, read-heavy with repeated
/// reads and read-ahead: hits, misses, evictions and read-ahead fills mixed with writes.
#[test]
fn mixed_numa_small_cache_rereads() {
    mixed_workload(
        "mixed_numa_small_cache_rereads",
        "numa",
        true,
        &cache_yaml("numa", "2M", 4),
        READ_HEAVY,
    );
}

/// Deterministic reproduction of the stale reads the random workload found: with WCE=1 a
/// write stays dirty in the cache; a larger read that finds no room in its partition (2 MiB
/// cache = 2 blocks per partition) reads around the cache and must still see the dirty data.
#[test]
fn read_around_the_cache_sees_dirty_data() {
    let test = "read_around_the_cache_sees_dirty_data";
    let seed = 0;
    let d = start("numa", true, &cache_yaml("numa", "2M", 0));
    let mut cmds = Vec::new();
    for (i, (w_off, w_len, r_off, r_len)) in [
        (20 * MIB, CACHE_BLOCK, 20 * MIB, 4 * CACHE_BLOCK),
        (24 * MIB + 1536, 67072, 24 * MIB, MIB),
        (28 * MIB, 4096, 28 * MIB - 3 * CACHE_BLOCK, 8 * CACHE_BLOCK),
    ]
    .into_iter()
    .enumerate()
    {
        let pat = 0x41 + i as u8;
        cmds.push(IoCmd::Write {
            off: w_off,
            len: w_len,
            pat,
        });
        for (start, len, p) in [
            (r_off, w_off - r_off, 0),
            (w_off, w_len, pat),
            (w_off + w_len, r_off + r_len - w_off - w_len, 0),
        ] {
            if len > 0 {
                cmds.push(IoCmd::Read {
                    off: r_off,
                    len: r_len,
                    check: Some(Check {
                        start: start - r_off,
                        len,
                        pat: p,
                    }),
                });
            }
        }
    }
    let (run, failures) = qemuio::run_batch(&d.url(1), &cmds, QEMU_IO_TIMEOUT);
    if !failures.is_empty() {
        let list: Vec<String> = failures
            .iter()
            .map(|f| {
                let c = f.index.map(|i| cmds[i].command()).unwrap_or_default();
                format!("* `{c}`: {}", f.message)
            })
            .collect();
        fail(
            &d,
            test,
            seed,
            &format!(
                "a read larger than the cache partition's room returned the disk's old data \
                 instead of the acknowledged (dirty, WCE=1) write:\n{}\n{run}",
                list.join("\n")
            ),
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. crash: kill -9 of numatgtd

const CRASH_REGION: Region = Region {
    start: 3 * SECTOR,
    end: 8 * MIB,
};

/// Writes (with verified reads between) through ONE session that stays logged in; with WCE=1
/// two rounds each closed by `flush`, then a round of unflushed writes; with WCE=0 no flush
/// at all. Right after qemu-io reports the last command complete, numatgtd gets SIGKILL.
/// The backing file must then hold: WCE=1, every write before the last flush (a sector written
/// after it holds its flushed value or one of the later writes' patterns); WCE=0, every write.
fn crash(test: &str, mode: &str, wce: bool) {
    let t0 = Instant::now();
    let seed = seed(test);
    let yaml = cache_yaml(mode, "16M", 0);
    let mut d = start(mode, wce, &yaml);
    let mut rng = Rng(seed);
    let mut model = Model::new(LUN_SIZE);
    let mut session = match Session::open(&d.url(1), 60) {
        Ok(s) => s,
        Err(e) => fail(&d, test, seed, &format!("qemu-io session: {e}")),
    };
    let rounds = if wce { 3 } else { 1 };
    let per_round = if wce { 30 } else { 80 };
    let mut durable = model.clone();
    let mut unflushed: Vec<IoCmd> = Vec::new();
    for round in 0..rounds {
        let flushed = wce && round + 1 < rounds;
        let mut r = rng.derive(round);
        let mut cmds: Vec<IoCmd> = plan_worker(
            &mut r,
            &mut model,
            round as usize,
            CRASH_REGION,
            per_round,
            WRITES_AND_READS,
        )
        .into_iter()
        .map(|p| p.cmd)
        .collect();
        if flushed {
            cmds.push(IoCmd::Flush);
        }
        if let Err(e) = session.run(&cmds, Duration::from_secs(30)) {
            fail(&d, test, seed, &format!("round {round}: {e}"));
        }
        if flushed {
            durable = model.clone();
        } else {
            unflushed.extend(
                cmds.into_iter()
                    .filter(|c| matches!(c, IoCmd::Write { .. })),
            );
        }
    }
    let acked = Instant::now();
    let st = d.kill9();
    let kill_delay = acked.elapsed();
    let qemu_st = session.close(Duration::from_secs(1));
    eprintln!(
        "{test}: numatgtd SIGKILLed {kill_delay:?} after the last acknowledgement ({st:?}); \
         qemu-io then exited {qemu_st:?}"
    );
    let data = read_backing(&d);
    if !wce {
        if let Some(r) = model.compare(&data, 0) {
            fail(
                &d,
                test,
                seed,
                &format!(
                    "after kill -9 with write_cache=false, acknowledged writes are missing \
                     from the backing file: {r}"
                ),
            );
        }
        eprintln!(
            "{test}: OK: all {} acknowledged writes are on disk; total {:.1?}",
            unflushed.len(),
            t0.elapsed()
        );
        return;
    }
    // Sectors touched after the last flush: the flushed value or any later pattern is legal.
    let mut later: Vec<BTreeSet<u8>> = vec![BTreeSet::new(); (LUN_SIZE / SECTOR) as usize];
    for c in &unflushed {
        if let IoCmd::Write { off, len, pat } = *c {
            for s in off / SECTOR..(off + len) / SECTOR {
                later[s as usize].insert(pat);
            }
        }
    }
    let mut bad = Vec::new();
    let (mut reached, mut touched) = (0u64, 0u64);
    for (s, allowed) in later.iter().enumerate() {
        let off = s as u64 * SECTOR;
        let got = &data[s * SECTOR as usize..(s + 1) * SECTOR as usize];
        let flushed = durable.at(off);
        if allowed.is_empty() {
            if got.iter().any(|b| *b != flushed) {
                bad.push(format!(
                    "sector {s} (byte {off}): expected {flushed:#04x} (flushed; last write: \
                     {}), found {:#04x}..",
                    durable.last_writer(off),
                    got[got.iter().position(|b| *b != flushed).expect("differs")]
                ));
            }
            continue;
        }
        touched += 1;
        let first = got[0];
        let uniform = got.iter().all(|b| *b == first);
        if uniform && first == model.at(off) && first != flushed {
            reached += 1;
        }
        if !uniform || (first != flushed && !allowed.contains(&first)) {
            bad.push(format!(
                "sector {s} (byte {off}), written after the last flush: found {} but only \
                 {flushed:#04x} (flushed) or one of {allowed:02x?} are possible",
                if uniform {
                    format!("{first:#04x}")
                } else {
                    "a torn sector".into()
                }
            ));
        }
    }
    if !bad.is_empty() {
        let n = bad.len();
        bad.truncate(8);
        fail(
            &d,
            test,
            seed,
            &format!(
                "after kill -9 with write_cache=true, {n} sector(s) of the backing file are \
                 wrong:\n  {}",
                bad.join("\n  ")
            ),
        );
    }
    eprintln!(
        "{test}: OK: every write before the last SYNCHRONIZE CACHE is on disk; {reached} of \
         {touched} sectors written after it already held their newest data; total {:.1?}",
        t0.elapsed()
    );
}

#[test]
fn crash_numa_wce1_after_flush() {
    crash("crash_numa_wce1_after_flush", "numa", true);
}

#[test]
fn crash_numa_wce0_no_flush() {
    crash("crash_numa_wce0_no_flush", "numa", false);
}

#[test]
fn crash_off_wce1_after_flush() {
    crash("crash_off_wce1_after_flush", "off", true);
}

#[test]
fn crash_off_wce0_no_flush() {
    crash("crash_off_wce0_no_flush", "off", false);
}

#[test]
fn crash_page_wce1_after_flush() {
    crash("crash_page_wce1_after_flush", "page", true);
}

#[test]
fn crash_page_wce0_no_flush() {
    crash("crash_page_wce0_no_flush", "page", false);
}

// ---------------------------------------------------------------------------------------
// 3. two initiators on the same blocks

const HOT: Region = Region {
    start: MIB,
    end: 5 * MIB,
};

/// Writers A and B (two sessions) write the same ranges of HOT at the same time, A in order
/// with patterns 0x01..0x7f, B in reverse order with 0x80..0xfe, while two more sessions read
/// HOT (filling the cache mid-write). Afterwards, read through new sessions with large and
/// 4 KiB requests, every sector must hold A's or B's LAST write there (whole, not torn), the
/// reads must agree and repeat identically, and the backing file must equal them after stop.
fn overlap(test: &str, mode: &str, wce: bool, yaml: &str) {
    let t0 = Instant::now();
    let seed = seed(test);
    let mut d = start(mode, wce, yaml);
    let mut rng = Rng(seed);
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for _ in 0..50 {
        let r = pick_range(&mut rng, HOT, &ranges);
        ranges.push(r);
    }
    let n_sectors = (LUN_SIZE / SECTOR) as usize;
    let mut last_a: Vec<Option<u8>> = vec![None; n_sectors];
    let mut last_b: Vec<Option<u8>> = vec![None; n_sectors];
    let mut writes_a = Vec::new();
    let mut writes_b = Vec::new();
    for (k, &(off, len)) in ranges.iter().enumerate() {
        let pat = 0x01 + (k % 127) as u8;
        writes_a.push(IoCmd::Write { off, len, pat });
        for s in off / SECTOR..(off + len) / SECTOR {
            last_a[s as usize] = Some(pat);
        }
        if k == ranges.len() / 2 {
            writes_a.push(IoCmd::Flush);
        }
    }
    for (k, &(off, len)) in ranges.iter().rev().enumerate() {
        let pat = 0x80 + (k % 127) as u8;
        writes_b.push(IoCmd::Write { off, len, pat });
        for s in off / SECTOR..(off + len) / SECTOR {
            last_b[s as usize] = Some(pat);
        }
        if k == ranges.len() / 3 {
            writes_b.push(IoCmd::Flush);
        }
    }
    let readers: Vec<Vec<IoCmd>> = (0..2)
        .map(|_| {
            (0..60)
                .map(|_| {
                    let (off, len) = pick_range(&mut rng, HOT, &ranges);
                    IoCmd::Read {
                        off,
                        len,
                        check: None,
                    }
                })
                .collect()
        })
        .collect();
    let url = d.url(1);
    let sessions: Vec<(&str, &Vec<IoCmd>)> = vec![
        ("writer A", &writes_a),
        ("writer B", &writes_b),
        ("reader 1", &readers[0]),
        ("reader 2", &readers[1]),
    ];
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = sessions
            .iter()
            .map(|(name, cmds)| {
                let url = url.clone();
                s.spawn(move || {
                    let (run, failures) = qemuio::run_batch(&url, cmds, QEMU_IO_TIMEOUT);
                    if failures.is_empty() {
                        return None;
                    }
                    let mut m = format!("{name} failed:");
                    for f in failures.iter().take(5) {
                        let c = f.index.map(|i| cmds[i].command()).unwrap_or_default();
                        m.push_str(&format!("\n* #{:?} `{c}`: {}", f.index, f.message));
                    }
                    Some(format!("{m}\n{run}"))
                })
            })
            .collect();
        hs.into_iter()
            .filter_map(|h| h.join().expect("session thread panicked"))
            .collect()
    });
    if !errors.is_empty() {
        fail(&d, test, seed, &errors.join("\n\n"));
    }
    let tmp = d.dir.path().to_path_buf();
    let read1 =
        qemuio::read_all(&url, &tmp, "read1.img").unwrap_or_else(|e| fail(&d, test, seed, &e));
    // every sector: A's or B's last write, whole
    let (mut from_a, mut from_b) = (0u64, 0u64);
    let mut bad = Vec::new();
    for s in 0..n_sectors {
        let got = &read1[s * SECTOR as usize..(s + 1) * SECTOR as usize];
        let first = got[0];
        let uniform = got.iter().all(|b| *b == first);
        let allowed: Vec<u8> = match (last_a[s], last_b[s]) {
            (None, None) => vec![0],
            (a, b) => a.into_iter().chain(b).collect(),
        };
        if uniform && allowed.contains(&first) {
            if Some(first) == last_a[s] && first != 0 {
                from_a += 1;
            } else if first != 0 {
                from_b += 1;
            }
            continue;
        }
        bad.push(format!(
            "sector {s} (byte {}): found {}, but only {allowed:02x?} (the last write of A / B \
             there) is possible",
            s as u64 * SECTOR,
            if uniform {
                format!("{first:#04x}")
            } else {
                let mut v = got.to_vec();
                v.sort_unstable();
                v.dedup();
                format!("a torn sector holding {v:02x?}")
            }
        ));
    }
    if !bad.is_empty() {
        let n = bad.len();
        bad.truncate(8);
        fail(
            &d,
            test,
            seed,
            &format!(
                "a new session reads {n} sector(s) that neither writer left last:\n  {}",
                bad.join("\n  ")
            ),
        );
    }
    // small requests agree with large ones
    let read2 = qemuio::read_range(&url, HOT.start, HOT.len(), 4096, &tmp)
        .unwrap_or_else(|e| fail(&d, test, seed, &e));
    let hot = HOT.start as usize..HOT.end as usize;
    if let Some(r) = mismatch_report(&read1[hot.clone()], &read2, HOT.start, |_| {
        "(4 KiB reads vs the whole-LUN read just before)".into()
    }) {
        fail(
            &d,
            test,
            seed,
            &format!("reading HOT with 4 KiB requests disagrees with the large-request read: {r}"),
        );
    }
    // stable
    let read3 =
        qemuio::read_all(&url, &tmp, "read3.img").unwrap_or_else(|e| fail(&d, test, seed, &e));
    if let Some(r) = mismatch_report(&read1, &read3, 0, |_| "(first read vs re-read)".into()) {
        fail(
            &d,
            test,
            seed,
            &format!("a re-read of the LUN is not stable: {r}"),
        );
    }
    stop_cleanly(&mut d, test, seed);
    let data = read_backing(&d);
    if let Some(r) = mismatch_report(&read1, &data, 0, |_| "(what the initiator read)".into()) {
        fail(
            &d,
            test,
            seed,
            &format!(
                "the backing file after stop differs from what initiators read (a cached copy \
                 disagreed with the disk): expected = read through iSCSI, found = backing \
                 file: {r}"
            ),
        );
    }
    eprintln!(
        "{test}: OK: {} overlapping writes per writer + 120 concurrent reads; sectors last \
         written by A: {from_a}, by B: {from_b}; reads stable and equal to disk; total {:.1?}",
        ranges.len(),
        t0.elapsed()
    );
}

#[test]
fn overlap_numa_wce1() {
    overlap(
        "overlap_numa_wce1",
        "numa",
        true,
        &cache_yaml("numa", "16M", 0),
    );
}

#[test]
fn overlap_numa_wce0_small_cache() {
    overlap(
        "overlap_numa_wce0_small_cache",
        "numa",
        false,
        &cache_yaml("numa", "2M", 4),
    );
}

#[test]
fn overlap_off() {
    overlap("overlap_off", "off", true, &cache_yaml("off", "16M", 0));
}

#[test]
fn overlap_page() {
    overlap("overlap_page", "page", true, &cache_yaml("page", "16M", 0));
}

// ---------------------------------------------------------------------------------------
// 4. the checks detect corruption (negative test)

/// With `cache: off` (reads go to the disk), a few bytes changed in the backing file behind
/// the daemon's back must make the verified reads fail, with a diagnosis that points at the
/// changed bytes, and the final model comparison must fail too.
#[test]
fn corruption_is_detected() {
    let test = "corruption_is_detected";
    let seed = 0x5eed;
    let mut d = start("off", false, &cache_yaml("off", "16M", 0));
    let region = Region {
        start: 0,
        end: 8 * MIB,
    };
    let mut model = Model::new(LUN_SIZE);
    let mut rng = Rng(seed);
    let writes = plan_worker(
        &mut rng,
        &mut model,
        0,
        region,
        20,
        Profile {
            write: 100,
            flush: 0,
            reread: 0,
            repeat: 0,
        },
    );
    if let Err(e) = execute(
        &d,
        std::slice::from_ref(&writes),
        Instant::now() + WORKLOAD_BUDGET,
    ) {
        fail(&d, test, seed, &format!("the clean part failed: {e}"));
    }
    // corrupt 4 bytes in the middle of a written run
    let run = model
        .runs(region.start, region.len())
        .into_iter()
        .find(|r| r.pat != 0 && r.len >= 2 * SECTOR)
        .expect("some write of at least 1 KiB");
    let at = run.off + SECTOR + 7;
    let junk = [!run.pat; 4];
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.lun_path(1))
            .expect("open backing file");
        f.write_all_at(&junk, at).expect("corrupt backing file");
        f.sync_all().expect("fsync backing file");
    }
    // verified reads of every run of the region
    let mut plan = writes;
    let reads: Vec<Planned> = model
        .runs(region.start, region.len())
        .into_iter()
        .map(|r| Planned {
            worker: 0,
            op: 1000,
            cmd: IoCmd::Read {
                off: r.off,
                len: r.len,
                check: Some(Check {
                    start: 0,
                    len: r.len,
                    pat: r.pat,
                }),
            },
        })
        .collect();
    let first = plan.len();
    plan.extend(reads);
    let mut err = None;
    for b in (first..plan.len()).step_by(BATCH) {
        if let Err(e) = run_one_batch(&d, &plan, b, b) {
            err = Some(e);
            break;
        }
    }
    let err = err.unwrap_or_else(|| {
        fail(
            &d,
            test,
            seed,
            &format!("4 bytes corrupted at {at} were NOT detected by the verified reads"),
        )
    });
    let span = format!("bytes {at}..{}", at + 4);
    assert!(
        err.contains("Pattern verification failed") && err.contains(&span),
        "the failure must be a pattern mismatch whose diagnosis names {span}:\n{err}"
    );
    eprintln!("{test}: the workload check caught the corruption:\n{err}");
    stop_cleanly(&mut d, test, seed);
    let r = model
        .compare(&read_backing(&d), 0)
        .expect("the model comparison must catch the corruption");
    assert!(r.contains(&span), "model comparison must name {span}: {r}");
    eprintln!("{test}: the model comparison caught it too: {r}");
}
