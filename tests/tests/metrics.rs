//! numatgtd's metrics endpoint counts exactly what an initiator did (issue 12): a raw session
//! sends a known set of READs, WRITEs, a SYNCHRONIZE CACHE and a failing READ; `/metrics`
//! and Debian's `tgtadm --op stat` then show those numbers, before and after the session
//! ends. The HTTP server answers bad requests with errors and keeps serving; `--metrics off`
//! serves nothing, and an explicit address that is taken stops the start with a clear error.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use tests::daemon::{free_port, require_numatgtd};
use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

/// The samples of an exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn scrape(d: &Daemon) -> BTreeMap<String, f64> {
    let (code, body) = d
        .http_get("/metrics")
        .unwrap_or_else(|e| panic!("GET /metrics: {e}\n{}", d.log_tail(30)));
    assert_eq!(code, 200, "GET /metrics answered {code}: {body}");
    samples(&body)
}

fn lun1(m: &BTreeMap<String, f64>, name: &str, extra: &str) -> f64 {
    let key = format!("{name}{{target=\"{TEST_IQN}\",lun=\"1\"{extra}}}");
    *m.get(&key).unwrap_or_else(|| {
        panic!(
            "{key} not exported; have: {:#?}",
            m.keys().collect::<Vec<_>>()
        )
    })
}

fn read10(lba: u32, blocks: u16) -> [u8; 10] {
    let l = lba.to_be_bytes();
    let b = blocks.to_be_bytes();
    [0x28, 0, l[0], l[1], l[2], l[3], 0, b[0], b[1], 0]
}

fn write10(lba: u32, blocks: u16) -> [u8; 10] {
    let mut c = read10(lba, blocks);
    c[0] = 0x2A;
    c
}

#[test]
fn counters_match_what_the_initiator_did() {
    require_numatgtd("counters_match_what_the_initiator_did");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let before = scrape(&d);
    assert_eq!(lun1(&before, "numatgt_lun_reads_completed_total", ""), 0.0);
    assert_eq!(
        lun1(&before, "numatgt_lun_capacity_bytes", ""),
        (16 * MIB) as f64
    );
    // one target port group: LUN 1 is active/optimized, one series per ALUA state
    for (state, want) in [
        ("active_optimized", 1.0),
        ("active_non_optimized", 0.0),
        ("standby", 0.0),
        ("unavailable", 0.0),
        ("transitioning", 0.0),
    ] {
        let extra = format!(",state=\"{state}\"");
        assert_eq!(
            lun1(&before, "numatgt_lun_alua_state", &extra),
            want,
            "{state}"
        );
    }

    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:metrics-test");
    for i in 0..10u32 {
        let (st, _, data) = s.command(&read10(i * 8, 8), &[], 4096);
        assert_eq!((st, data.len()), (0, 4096));
    }
    for i in 0..5u32 {
        let (st, sense, _) = s.command(&write10(1000 + i * 2, 2), &[0xA5; 1024], 0);
        assert_eq!(st, 0, "WRITE: {sense:02x?}");
    }
    let (st, _, _) = s.command(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(st, 0, "SYNCHRONIZE CACHE");
    // a READ past the last block: CHECK CONDITION, ILLEGAL REQUEST
    let blocks = (16 * MIB / 512) as u32;
    let (st, _, _) = s.command(&read10(blocks, 1), &[], 512);
    assert_eq!(st, 2);

    let m = scrape(&d);
    assert_eq!(lun1(&m, "numatgt_lun_reads_completed_total", ""), 11.0);
    assert_eq!(lun1(&m, "numatgt_lun_read_bytes_total", ""), 40960.0);
    assert_eq!(lun1(&m, "numatgt_lun_writes_completed_total", ""), 5.0);
    assert_eq!(lun1(&m, "numatgt_lun_written_bytes_total", ""), 5120.0);
    assert_eq!(lun1(&m, "numatgt_lun_flush_requests_total", ""), 1.0);
    assert_eq!(lun1(&m, "numatgt_lun_io_now", ""), 0.0);
    assert_eq!(
        lun1(
            &m,
            "numatgt_lun_errors_total",
            ",sense_key=\"illegal_request\""
        ),
        1.0
    );
    assert_eq!(
        lun1(&m, "numatgt_lun_io_duration_seconds_count", ",op=\"read\""),
        11.0
    );
    assert_eq!(
        lun1(
            &m,
            "numatgt_lun_io_duration_seconds_bucket",
            ",op=\"read\",le=\"+Inf\""
        ),
        11.0
    );
    let rtime = lun1(&m, "numatgt_lun_read_time_seconds_total", "");
    assert!(rtime > 0.0 && rtime < 10.0, "read time {rtime}");
    let busy = lun1(&m, "numatgt_lun_io_time_seconds_total", "");
    assert!(busy > 0.0, "io_time {busy}");
    let sessions = format!("numatgt_sessions{{target=\"{TEST_IQN}\",transport=\"iscsi\"}}");
    assert_eq!(m.get(&sessions), Some(&1.0), "one session logged in");
    assert_eq!(m.get("numatgt_luns"), Some(&1.0));
    assert!(m.contains_key("numatgt_cache_hits_total{node=\"0\"}"));
    assert!(m.contains_key("process_resident_memory_bytes"));
    // no iSER connection over TCP: the iSER gauges are there, at zero
    assert_eq!(m.get("numatgt_iser_connections"), Some(&0.0));
    for kind in ["receive", "send", "staging"] {
        let k = format!("numatgt_iser_registered_bytes{{kind=\"{kind}\"}}");
        assert_eq!(m.get(&k), Some(&0.0), "{k}");
    }
    assert_eq!(
        m.get("numatgt_iser_posted_receives{queue=\"shared\"}"),
        Some(&0.0)
    );
    for (direction, path) in [("in", "direct"), ("in", "staged"), ("out", "staged")] {
        let k =
            format!("numatgt_iser_data_bytes_total{{direction=\"{direction}\",path=\"{path}\"}}");
        assert_eq!(m.get(&k), Some(&0.0), "{k}");
    }
    for call in ["cq_event", "cq_arm", "post_send"] {
        let k = format!("numatgt_iser_verbs_calls_total{{call=\"{call}\"}}");
        assert_eq!(m.get(&k), Some(&0.0), "{k}");
    }
    for queue in ["send", "receive"] {
        let k = format!("numatgt_iser_completions_total{{queue=\"{queue}\"}}");
        assert_eq!(m.get(&k), Some(&0.0), "{k}");
    }
    assert!(
        m.keys()
            .any(|k| k.starts_with("numatgt_build_info{version=")),
        "build info"
    );

    // Debian's tgtadm sees the same numbers in tgtd's layout
    let stat = d.tgtadm(&[
        "--lld", "iscsi", "--op", "stat", "--mode", "target", "--tid", "1",
    ]);
    assert!(stat.status.success(), "tgtadm --op stat: {stat}");
    let row: Vec<u64> = stat
        .stdout
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect::<Vec<u64>>()
        })
        .find(|v| v.len() == 12 && v[1] == 1)
        .unwrap_or_else(|| panic!("no row for LUN 1 in\n{}", stat.stdout));
    // tid lun sid rd_subm(bytes,cmds) rd_done(bytes,cmds) wr_subm wr_done errs
    assert_eq!(row[0], 1);
    // the refused READ moved nothing
    assert_eq!((row[3], row[4]), (40960, 11), "rd_subm");
    assert_eq!((row[5], row[6]), (40960, 11), "rd_done");
    assert_eq!((row[7], row[8]), (5120, 5), "wr_subm");
    assert_eq!((row[9], row[10]), (5120, 5), "wr_done");
    assert!(row[11] >= 1, "errs");

    drop(s);
    // the session's counts stay after it ends; nothing is in flight
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let m = loop {
        let m = scrape(&d);
        if m.get(&sessions) == Some(&0.0) || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(m.get(&sessions), Some(&0.0), "the session ended");
    assert_eq!(lun1(&m, "numatgt_lun_reads_completed_total", ""), 11.0);
    assert_eq!(lun1(&m, "numatgt_lun_written_bytes_total", ""), 5120.0);
    assert_eq!(lun1(&m, "numatgt_lun_io_now", ""), 0.0);
    d.assert_alive("after the scrapes");
}

#[test]
fn bad_http_requests_get_errors_and_the_server_goes_on() {
    require_numatgtd("bad_http_requests_get_errors_and_the_server_goes_on");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let (code, body) = d.http_get("/").expect("GET /");
    assert_eq!(code, 200);
    assert!(
        body.contains("<html") || body.contains("<!doctype html"),
        "{body}"
    );
    assert_eq!(d.http_get("/nothing-here").expect("GET 404").0, 404);
    assert_eq!(d.http_get("/metrics?x=1").expect("GET with query").0, 200);
    // garbage, a bad method, a huge header, a connection dropped half way
    let addr = ("127.0.0.1", d.metrics_port);
    for junk in [
        b"\x00\x01\x02garbage\r\n\r\n".to_vec(),
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
        format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(100_000)
        )
        .into_bytes(),
        b"GET /metr".to_vec(),
    ] {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(&junk);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut s, &mut sink);
            let head = String::from_utf8_lossy(&sink[..sink.len().min(40)]).into_owned();
            assert!(
                sink.is_empty() || head.starts_with("HTTP/1."),
                "answer to junk: {head:?}"
            );
            if junk.starts_with(b"POST") {
                assert!(head.contains(" 405"), "POST answered {head:?}");
            }
        }
    }
    let (code, body) = d.http_get("/metrics").expect("GET /metrics after junk");
    assert_eq!(code, 200);
    assert!(body.contains("numatgt_build_info"));
    d.assert_alive("after bad HTTP requests");
}

#[test]
fn metrics_off_and_a_taken_address() {
    require_numatgtd("metrics_off_and_a_taken_address");
    let mut d = Daemon::start_with_args(&[LunSpec::new(1, 512, 16 * MIB)], &["--metrics", "off"]);
    assert!(
        d.http_get("/metrics").is_err(),
        "--metrics off still serves on the test's port"
    );
    assert!(d.log().contains("metrics server off"), "{}", d.log_tail(20));
    d.assert_alive("metrics off");
    drop(d);

    // an explicit address that another socket holds: numatgtd refuses to start
    let port = free_port();
    let _holder = std::net::TcpListener::bind(("127.0.0.1", port)).expect("hold a port");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(tests::daemon::numatgtd_bin())
        .args([
            "-f",
            "-C",
            &tests::daemon::random_control_port().to_string(),
        ])
        .args(["--iscsi", &format!("portal=127.0.0.1:{}", free_port())])
        .arg("--state-dir")
        .arg(dir.path())
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .env("TGT_IPC_SOCKET", dir.path().join("sock"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run numatgtd");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started although the metrics port is taken"
    );
    assert!(
        err.contains(&format!("cannot serve metrics on 127.0.0.1:{port}")),
        "unclear error: {err}"
    );
    // a bad address is refused by the command line parser
    let out = std::process::Command::new(tests::daemon::numatgtd_bin())
        .args(["--metrics", "nowhere"])
        .output()
        .expect("run numatgtd");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere"));
}

#[test]
fn protocol_events_are_counted_per_target() {
    require_numatgtd("protocol_events_are_counted_per_target");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let login = |m: &BTreeMap<String, f64>, target: &str, result: &str| {
        m.get(&format!(
            "numatgt_logins_total{{target=\"{target}\",result=\"{result}\"}}"
        ))
        .copied()
        .unwrap_or(-1.0)
    };
    let m = scrape(&d);
    assert_eq!(
        login(&m, TEST_IQN, "success"),
        0.0,
        "series exist before any login"
    );
    assert_eq!(login(&m, "", "not_found"), 0.0);

    // a login to a target that does not exist: counted under "" (no label from the initiator)
    let err = tests::pdu::login_normal(d.addr(), "iqn.2026-11.org.numatgt:probe", "iqn.nope:x")
        .err()
        .expect("login to an unknown target must fail");
    assert!(err.contains("class 0x2"), "{err}");
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:metrics-tmf");
    assert_eq!(s.task_management(5, 0), 0, "LOGICAL UNIT RESET");
    let m = scrape(&d);
    assert_eq!(login(&m, "", "not_found"), 1.0, "{m:#?}");
    assert_eq!(login(&m, TEST_IQN, "success"), 1.0);
    assert_eq!(
        m.get(&format!(
            "numatgt_task_management_total{{target=\"{TEST_IQN}\",function=\"lun_reset\"}}"
        )),
        Some(&1.0)
    );
    assert!(
        !m.keys().any(|k| k.contains("iqn.nope")),
        "an unknown target name became a label"
    );
    d.assert_alive("after protocol events");
}
