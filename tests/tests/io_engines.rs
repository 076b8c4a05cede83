//! Backing-store I/O engines (issue 14): the same data through `--io-engine io_uring` (the
//! node's read ring for cache fills and uncached reads of an O_DIRECT store, the flusher's
//! write ring for write-back) and `--io-engine threads` (pread/pwrite on the I/O threads),
//! each with event threads that busy-poll (`--busy-poll 50`) and without. Cold reads go to
//! the backing file, writes come back through write-back at the clean stop, and the log
//! names the engine that ran.

use std::io::Write;
use std::time::Duration;

use tests::daemon::TargetKind;
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

const OLD: u8 = 0xa5;
const NEW: u8 = 0x5a;

fn engine_roundtrip(engine: &str, busy_poll: &str) {
    tools::require_tool("qemu-io");
    if TargetKind::from_env() != TargetKind::Numatgtd {
        eprintln!("tgtd has no I/O engine choice; nothing to run");
        return;
    }
    let spec = LunSpec::new(1, 512, 32 * MIB);
    let mut d =
        Daemon::start_with_args(&[spec], &["--io-engine", engine, "--busy-poll", busy_poll]);
    // the LUN's old contents, put in the file behind the daemon's back before any read: the
    // first reads miss the cache and are filled from the file
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.lun_path(1))
            .expect("open LUN file");
        f.write_all(&vec![OLD; 16 << 20])
            .expect("write old contents");
        f.sync_all().expect("sync");
    }
    let url = d.url(1);
    let r = tools::run(
        120,
        "qemu-io",
        [
            "-f".to_string(),
            "raw".into(),
            "-c".into(),
            format!("read -P {OLD:#x} 0 16M"),
            "-c".into(),
            format!("write -P {NEW:#x} 4M 2M"),
            "-c".into(),
            format!("read -P {NEW:#x} 4M 2M"),
            "-c".into(),
            format!("read -P {OLD:#x} 6M 10M"),
            url,
        ],
    );
    r.check(&format!(
        "qemu-io with --io-engine {engine} --busy-poll {busy_poll}"
    ));
    assert!(
        !r.stdout.contains("Pattern verification failed"),
        "--io-engine {engine}: pattern mismatch\n{r}"
    );
    let log = d.log();
    let ring_used = log.contains("reads: io_uring, one ring per event thread");
    assert_eq!(
        ring_used,
        engine == "io_uring",
        "--io-engine {engine}: the log does not say the right engine\n{}",
        d.log_tail(20)
    );
    let (status, _) = d.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "clean stop failed: {status:?}\n{}",
        d.log_tail(30)
    );
    let data = std::fs::read(d.lun_path(1)).expect("read backing file");
    for (i, b) in data[..16 << 20].iter().enumerate() {
        let want = if (4 << 20..6 << 20).contains(&i) {
            NEW
        } else {
            OLD
        };
        assert_eq!(*b, want, "--io-engine {engine}: backing file byte {i}");
    }
}

#[test]
fn io_uring_engine_keeps_data() {
    engine_roundtrip("io_uring", "0");
}

#[test]
fn io_uring_engine_with_busy_poll_keeps_data() {
    engine_roundtrip("io_uring", "50");
}

#[test]
fn thread_engine_with_busy_poll_keeps_data() {
    engine_roundtrip("threads", "50");
}

#[test]
fn bad_engine_and_busy_poll_are_refused() {
    if TargetKind::from_env() != TargetKind::Numatgtd {
        return;
    }
    let bin = tests::daemon::numatgtd_bin();
    for (args, words) in [
        (
            &["--io-engine", "aio"][..],
            "must be auto, io_uring or threads",
        ),
        (&["--busy-poll", "10001"][..], "10001"),
    ] {
        let out = std::process::Command::new(&bin)
            .args(args)
            .output()
            .expect("run numatgtd");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(words), "{args:?}: {err}");
    }
}
