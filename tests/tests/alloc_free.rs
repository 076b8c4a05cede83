//! The per-I/O path of numatgtd allocates nothing in its steady state: numatgtd counts every
//! heap allocation its event threads make (`alloc report:` on SIGUSR1), and these tests drive
//! real initiators through a warm-up, take a snapshot, run a bounded workload on the same
//! session and take another. Between the two snapshots the event threads must not have
//! allocated at all, while the cache counters show the workload was served.
//!
//! (a) iscsi-perf, 4 KiB random reads at queue depth 8 over a cached LUN: cache hits sent
//!     zero-copy from pinned blocks.
//! (b) qemu-io, one session: 4 KiB and 128 KiB writes into the write-back cache (WCE=1;
//!     immediate data, and R2T-solicited Data-Out), each read back and checked.
//! (c) iscsi-perf random reads over a LUN sixteen times larger than the cache: misses, read
//!     on I/O workers into the cache (evicting) or, when the full cache does not admit them,
//!     straight from the disk; results handed back to the event thread.
//! (d) qemu-io writes with the write cache off (WCE=0): write-through on I/O workers, each
//!     durable before status, the write buffer handed back to the connection.

use std::process::{Command, Stdio};
use std::time::Duration;

use tests::daemon::{require_numatgtd, send_signal};
use tests::qemuio::{IoCmd, Session};
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    allocs: u64,
    bytes: u64,
    hits: u64,
    misses: u64,
    /// Read misses not admitted into the full cache (served straight from the disk).
    bypassed: u64,
}

fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// SIGUSR1 (the cache report), then the alloc report logged with it.
fn snapshot(d: &Daemon) -> Snapshot {
    let c = d.cache_report();
    let log = d.log();
    let alloc_line = log
        .lines()
        .rev()
        .find(|l| l.contains("alloc report:"))
        .expect("alloc report line");
    Snapshot {
        allocs: field(alloc_line, "event_thread_allocs").expect("event_thread_allocs"),
        bytes: field(alloc_line, "event_thread_alloc_bytes").expect("event_thread_alloc_bytes"),
        hits: c.hits,
        misses: c.misses,
        bypassed: c.bypassed,
    }
}

fn assert_no_allocations(d: &Daemon, what: &str, a: Snapshot, b: Snapshot, min_hits: u64) {
    assert_no_allocations_served(d, what, a, b, min_hits, 0);
}

fn assert_no_allocations_served(
    d: &Daemon,
    what: &str,
    a: Snapshot,
    b: Snapshot,
    min_hits: u64,
    min_misses: u64,
) {
    // a miss is served either through the cache (filled on an I/O worker) or, when the
    // full cache does not admit it, straight from the disk: both paths must stay
    // allocation-free on the event threads, and both must have run
    let misses = b.misses - a.misses;
    let bypassed = b.bypassed - a.bypassed;
    assert!(
        misses + bypassed >= min_misses && (min_misses == 0 || misses > 0),
        "{what}: only {misses} cache misses and {bypassed} bypassed reads in the window \
         (want >= {min_misses}, some of each kind)\n{}",
        d.log_tail(30)
    );
    let hits = b.hits - a.hits;
    eprintln!(
        "{what}: {hits} cache hits, {} misses, {bypassed} bypassed, {} event-thread allocations ({} bytes) in the window",
        b.misses - a.misses,
        b.allocs - a.allocs,
        b.bytes - a.bytes
    );
    assert!(
        hits >= min_hits,
        "{what}: only {hits} cache hits in the window (want >= {min_hits})\n{}",
        d.log_tail(30)
    );
    assert_eq!(
        b.allocs - a.allocs,
        0,
        "{what}: event threads allocated {} times ({} bytes) during steady-state I/O; \
         where (the last of numatgtd's traces):\n{}",
        b.allocs - a.allocs,
        b.bytes - a.bytes,
        last_traces(&d.log(), 3)
    );
}

/// numatgtd's own account (`NUMATGT_ALLOC_TRACE`) of its last `n` event-thread allocations.
fn last_traces(log: &str, n: usize) -> String {
    let starts: Vec<usize> = log
        .match_indices("event-thread allocation of ")
        .map(|(i, _)| i)
        .collect();
    match starts.get(starts.len().saturating_sub(n)) {
        Some(&i) => log[i..].to_string(),
        None => "(none traced)".to_string(),
    }
}

/// numatgtd with its cache and allocation tracing: every event-thread allocation is logged
/// with its backtrace, for the failure message.
fn start_traced(luns: &[LunSpec], global_yaml: &str) -> Daemon {
    Daemon::start_with_yaml_env(luns, global_yaml, &[], &[("NUMATGT_ALLOC_TRACE", "1")])
}

#[test]
fn cached_random_reads_allocate_nothing() {
    require_numatgtd("alloc_free");
    let perf = tools::require_tool("iscsi-perf");
    let d = start_traced(&[LunSpec::new(1, 512, 16 * MIB).with_cache("numa")], "");
    // warm the whole LUN into the cache in one session
    let cmds: Vec<IoCmd> = (0..16u64)
        .map(|i| IoCmd::Read {
            off: i * MIB,
            len: MIB,
            check: None,
        })
        .collect();
    let (run, failures) = tests::qemuio::run_batch(&d.url(1), &cmds, 60);
    run.check("warm-up reads");
    assert!(failures.is_empty(), "warm-up: {failures:?}");

    let mut load = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(perf)
        .args(["-m", "8", "-b", "8", "-r", &d.url(1)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iscsi-perf");
    // the session's own setup (login, first commands) is not steady state
    std::thread::sleep(Duration::from_millis(1500));
    let a = snapshot(&d);
    std::thread::sleep(Duration::from_millis(2000));
    let b = snapshot(&d);
    let running = load.try_wait().expect("try_wait").is_none();
    send_signal(load.id(), libc::SIGTERM);
    let _ = load.wait();
    assert!(running, "iscsi-perf stopped early\n{}", d.log_tail(30));
    assert_no_allocations(&d, "iscsi-perf 4K random read QD8", a, b, 1000);
}

#[test]
fn write_back_writes_and_reads_allocate_nothing() {
    require_numatgtd("alloc_free");
    let d = start_traced(
        &[LunSpec::new(1, 512, 16 * MIB)
            .with_cache("numa")
            .with_write_cache(true)],
        "",
    );
    let mut s = Session::open(&d.url(1), 120).unwrap_or_else(|e| panic!("qemu-io: {e}"));
    let k = 1024u64;
    // a deterministic mix inside the first 8 MiB: 4 KiB writes (immediate data) and 128 KiB
    // writes (beyond FirstBurstLength: the rest is solicited by R2Ts), each read back
    let round = |seed: u64| -> Vec<IoCmd> {
        let mut v = Vec::new();
        for i in 0..64u64 {
            let x = (i * 7 + seed * 13) % 64;
            let (off, len) = if i % 4 == 0 {
                (x * 128 * k, 128 * k)
            } else {
                (x * 128 * k + (i % 32) * 4 * k, 4 * k)
            };
            let pat = ((i + seed) % 251) as u8;
            v.push(IoCmd::Write { off, len, pat });
            v.push(IoCmd::Read {
                off,
                len,
                check: Some(tests::qemuio::Check { start: 0, len, pat }),
            });
        }
        v
    };
    // warm-up: touch every block of the working set and let buffers reach their sizes
    for seed in 0..3 {
        s.run(&round(seed), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("warm-up: {e}"));
    }
    let a = snapshot(&d);
    for seed in 3..8 {
        s.run(&round(seed), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("steady state: {e}"));
    }
    let b = snapshot(&d);
    let _ = s.close(Duration::from_secs(5));
    assert_no_allocations(&d, "qemu-io write-back writes + reads", a, b, 300);
}

/// iscsi-perf 4 KiB random reads for ~2 s after a 1.5 s start, between two snapshots.
fn perf_window(d: &Daemon, url: &str) -> (Snapshot, Snapshot) {
    let perf = tools::require_tool("iscsi-perf");
    let mut load = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(perf)
        .args(["-m", "8", "-b", "8", "-r", url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn iscsi-perf");
    std::thread::sleep(Duration::from_millis(1500));
    let a = snapshot(d);
    std::thread::sleep(Duration::from_millis(2000));
    let b = snapshot(d);
    let running = load.try_wait().expect("try_wait").is_none();
    send_signal(load.id(), libc::SIGTERM);
    let _ = load.wait();
    assert!(running, "iscsi-perf stopped early\n{}", d.log_tail(30));
    (a, b)
}

#[test]
fn cache_misses_allocate_nothing_on_event_threads() {
    require_numatgtd("alloc_free");
    // 8 MiB of cache per node in front of a 128 MiB LUN: most random reads miss and evict
    let d = start_traced(
        &[LunSpec::new(1, 512, 128 * MIB).with_cache("numa")],
        "cache:\n  mode: numa\n  size_per_node: 8M\n  block_size: 64K\n",
    );
    let (a, b) = perf_window(&d, &d.url(1));
    assert_no_allocations_served(
        &d,
        "iscsi-perf 4K random read QD8, cache misses",
        a,
        b,
        0,
        500,
    );
}

#[test]
fn write_through_writes_allocate_nothing_on_event_threads() {
    require_numatgtd("alloc_free");
    let d = start_traced(
        &[LunSpec::new(1, 512, 16 * MIB)
            .with_cache("numa")
            .with_write_cache(false)],
        "",
    );
    let mut s = Session::open(&d.url(1), 120).unwrap_or_else(|e| panic!("qemu-io: {e}"));
    let k = 1024u64;
    let round = |seed: u64| -> Vec<IoCmd> {
        (0..48u64)
            .map(|i| {
                let x = (i * 5 + seed * 11) % 64;
                let len = if i % 3 == 0 { 128 * k } else { 4 * k };
                IoCmd::Write {
                    off: x * 128 * k,
                    len,
                    pat: ((i + seed) % 251) as u8,
                }
            })
            .collect()
    };
    for seed in 0..2 {
        s.run(&round(seed), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("warm-up: {e}"));
    }
    let a = snapshot(&d);
    for seed in 2..6 {
        s.run(&round(seed), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("steady state: {e}"));
    }
    let b = snapshot(&d);
    let _ = s.close(Duration::from_secs(5));
    // write-through: no hits needed, the writes themselves are the workload (192 of them)
    assert_no_allocations(&d, "qemu-io write-through writes (WCE=0)", a, b, 0);
}
