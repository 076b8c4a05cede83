//! The built-in status page (issue 12): numatgtd's metrics server answers `GET /` with one
//! self-contained HTML file that fetches `/metrics` every 2 s and shows the numbers itself.
//! Headless Chromium renders it while real initiators (iscsi-perf reading, `qemu-img bench`
//! writing) drive a LUN; the numbers the page shows (the `data-value` of elements with stable
//! ids) are compared with `/metrics` fetched before and after the rendering: counters lie
//! between the two, gauges are equal, rates are positive and bounded by the counters' growth,
//! and there is no error banner. Idle, the page's counters equal `/metrics` exactly; with
//! `/metrics` failing, the banner shows.
//!
//! Chromium runs with `--virtual-time-budget`: its timers jump ahead, while the clock stops as
//! long as a fetch is pending. A small proxy in this test delays `/metrics` by the page's
//! 2 s interval, so that the page's clock follows the wall clock and its rates are real ones.
//! With `STATUS_PAGE_SCREENSHOT=FILE.png`, a screenshot of the live page is saved as well
//! (a separate, best-effort rendering: headless Chromium sometimes never ends a
//! `--screenshot` run under virtual time, so the checked rendering takes none).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tests::daemon::{require_numatgtd, send_signal};
use tests::{Daemon, LunSpec, MIB, TEST_IQN, tools};

// ---------------------------------------------------------------- HTTP and the exposition

/// A response: status code, headers (lower-case names), body.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

/// `GET path` on `addr` (HTTP/1.0, so the body ends with the connection), bounded in time.
fn http_get(addr: SocketAddr, path: &str) -> Result<Response, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| s.set_write_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| format!("socket timeouts: {e}"))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| format!("send request to {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read response from {addr}: {e}"))?;
    let raw = String::from_utf8(raw).map_err(|e| format!("response is not UTF-8: {e}"))?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {raw:?}"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        return Err("chunked answer to an HTTP/1.0 request".into());
    }
    Ok(Response {
        status,
        headers,
        body: body.to_string(),
    })
}

/// One sample of the text exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the Prometheus text format (comments skipped; label values unescaped); panics on
/// a line it cannot read.
fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| -> ! { panic!("/metrics line {line:?}: {what}") };
        let name_end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(line.len());
        let name = &line[..name_end];
        let mut rest = line[name_end..].trim_start();
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            loop {
                while chars.peek().is_some_and(|(_, c)| *c == ' ' || *c == ',') {
                    chars.next();
                }
                match chars.peek() {
                    Some(&(i, '}')) => {
                        rest = &r[i + 1..];
                        break;
                    }
                    None => bad("unterminated label list"),
                    _ => {}
                }
                let mut key = String::new();
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                }
                let key = key.trim().to_string();
                if chars.next().map(|(_, c)| c) != Some('"') {
                    bad("unquoted label value");
                }
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c)) => value.push(c),
                            None => bad("unterminated escape"),
                        },
                        Some((_, c)) => value.push(c),
                        None => bad("unterminated label value"),
                    }
                }
                labels.insert(key, value);
            }
        }
        let v = rest
            .split_whitespace()
            .next()
            .unwrap_or_else(|| bad("no value"));
        let value = match v {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            _ => v.parse().unwrap_or_else(|_| bad("bad value")),
        };
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    out
}

/// The metrics at one moment.
struct Scrape(Vec<Sample>);

type Labels = BTreeMap<String, String>;

impl Scrape {
    fn take(addr: SocketAddr) -> Scrape {
        let r = http_get(addr, "/metrics").unwrap_or_else(|e| panic!("GET /metrics: {e}"));
        assert_eq!(r.status, 200, "GET /metrics: {}", r.body);
        Scrape(parse_exposition(&r.body))
    }

    /// Sum of the samples of `name` whose labels pass `f`; None when there is none.
    fn sum(&self, name: &str, f: impl Fn(&Labels) -> bool) -> Option<f64> {
        let v: Vec<f64> = self
            .0
            .iter()
            .filter(|s| s.name == name && f(&s.labels))
            .map(|s| s.value)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }

    fn all(&self, name: &str) -> Option<f64> {
        self.sum(name, |_| true)
    }

    fn label_sets(&self, name: &str) -> Vec<Labels> {
        let mut v: Vec<Labels> = self
            .0
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.labels.clone())
            .collect();
        v.dedup();
        v
    }
}

// ---------------------------------------------------------------- the rendered page

/// A label value as the page puts it into ids: every character outside [A-Za-z0-9-] becomes
/// `_xx` (two lowercase hex digits), `_uXXXX_` above U+00FF.
fn id_part(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' => c.to_string(),
            c if (c as u32) < 256 => format!("_{:02x}", c as u32),
            c => format!("_u{:x}_", c as u32),
        })
        .collect()
}

/// The DOM Chromium printed after the page's scripts ran.
struct Dom(String);

impl Dom {
    /// The start tag of the element with id `id` (exactly one must exist).
    fn tag(&self, id: &str) -> &str {
        let needle = format!(" id=\"{id}\"");
        let n = self.0.matches(needle.as_str()).count();
        assert_eq!(n, 1, "{n} elements with id {id:?} in the page");
        let at = self.0.find(needle.as_str()).unwrap_or(0);
        let start = self.0[..at].rfind('<').expect("tag start");
        let end = at + self.0[at..].find('>').expect("tag end");
        &self.0[start..end]
    }

    /// The `data-value` of element `id` (entities undone); "" while the page has none.
    fn raw(&self, id: &str) -> String {
        let tag = self.tag(id);
        let v = tag
            .split_once(" data-value=\"")
            .and_then(|(_, v)| v.split_once('"'))
            .map(|(v, _)| v)
            .unwrap_or_else(|| panic!("element {id} has no data-value: {tag}"));
        v.replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    }

    /// The number in element `id`'s data-value; None when it is empty.
    fn num(&self, id: &str) -> Option<f64> {
        let r = self.raw(id);
        (!r.is_empty()).then(|| {
            r.parse()
                .unwrap_or_else(|_| panic!("data-value of {id} is not a number: {r:?}"))
        })
    }

    fn has(&self, id: &str) -> bool {
        self.0.contains(&format!(" id=\"{id}\""))
    }
}

/// Chromium, or a test failure that says how to install it.
fn require_chromium() -> PathBuf {
    tools::find_in_path("chromium")
        .or_else(|| tools::find_in_path("chromium-browser"))
        .unwrap_or_else(|| {
            panic!(
                "headless Chromium (`chromium`) is needed to render the status page: run \
                 `sudo tools/install-test-deps.sh` (Debian package chromium); this test does not skip"
            )
        })
}

/// Renders `url` in headless Chromium for `budget_ms` of virtual time and returns the DOM
/// (and saves a 1280x900 screenshot to `png` when given), with a fresh profile under `dir`.
/// Headless Chromium is known to hang now and then at the end of a virtual-time run: a run
/// that times out is tried once more before the test fails.
fn render(
    chromium: &Path,
    dir: &Path,
    url: &str,
    budget_ms: u32,
    png: Option<&Path>,
) -> Result<Dom, String> {
    let mut timed_out = Vec::new();
    for _ in 0..2 {
        let profile = tempfile::Builder::new()
            .prefix("chromium-profile.")
            .tempdir_in(dir)
            .expect("chromium profile dir");
        let mut args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--virtual-time-budget={budget_ms}"));
        if let Some(p) = png {
            args.push(format!("--screenshot={}", p.display()));
        }
        args.push("--dump-dom".into());
        args.push(url.into());
        let run = tools::run(45, &chromium.to_string_lossy(), &args);
        if run.timed_out() {
            eprintln!("chromium timed out rendering {url}; trying again");
            timed_out.push(run);
            continue;
        }
        run.check("chromium --dump-dom");
        assert!(
            run.stdout.contains("id=\"scrapes\""),
            "Chromium printed no status page for {url}\n{run}"
        );
        return Ok(Dom(run.stdout));
    }
    Err(format!(
        "Chromium never finished rendering {url}:\n{}",
        timed_out
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

// ---------------------------------------------------------------- a proxy that slows /metrics

/// Serves the daemon's `/` and `/metrics` on another port, each `/metrics` answer held back
/// by `delay_ms` (or a 503 while `broken`). One thread per connection, one request each.
struct SlowProxy {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    broken: Arc<AtomicBool>,
    /// What it served, for failure messages: "+ms PATH -> STATUS".
    log: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SlowProxy {
    fn start(upstream: SocketAddr) -> SlowProxy {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = l.local_addr().expect("proxy address");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let broken = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (d, b, st, lg) = (delay_ms.clone(), broken.clone(), stop.clone(), log.clone());
        let t0 = Instant::now();
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (d, b, lg) = (
                    d.load(Ordering::SeqCst),
                    b.load(Ordering::SeqCst),
                    lg.clone(),
                );
                std::thread::spawn(move || {
                    let what = Self::serve(conn, upstream, d, b);
                    let line = format!("+{}ms {what}", t0.elapsed().as_millis());
                    lg.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                });
            }
        });
        SlowProxy {
            addr,
            delay_ms,
            broken,
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// Answers one request; returns "PATH -> STATUS LINE" (or why there was none).
    fn serve(mut c: TcpStream, upstream: SocketAddr, delay_ms: u64, broken: bool) -> String {
        let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 65536 {
            match c.read(&mut buf) {
                Ok(0) => return "connection closed without a request".into(),
                Err(e) => return format!("no request: {e}"),
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
        let req = String::from_utf8_lossy(&req);
        let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
        let answer = if path.starts_with("/metrics") && broken {
            "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".to_string()
        } else {
            if path.starts_with("/metrics") {
                std::thread::sleep(Duration::from_millis(delay_ms));
            }
            match http_get(upstream, &path) {
                Ok(r) => {
                    let ct = r
                        .headers
                        .iter()
                        .find(|(k, _)| k == "content-type")
                        .map_or("text/plain", |(_, v)| v.as_str());
                    format!(
                        "HTTP/1.0 {} {}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n{}",
                        r.status,
                        if r.status == 200 { "OK" } else { "Not OK" },
                        r.body.len(),
                        r.body
                    )
                }
                Err(e) => format!(
                    "HTTP/1.0 502 Bad Gateway\r\nContent-Length: {}\r\n\r\n{e}",
                    e.len()
                ),
            }
        };
        // HTTP/1.0: the answer ends with the connection; end it gracefully (FIN after the
        // data, then wait for the browser's close) rather than with a reset
        let _ = c.write_all(answer.as_bytes());
        let _ = c.shutdown(Shutdown::Write);
        let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
        while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
        format!("{path} -> {}", answer.lines().next().unwrap_or(""))
    }

    fn served(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------- load

/// A tool running in the background under `timeout`, stopped by PID on drop.
struct Load {
    what: &'static str,
    child: Child,
}

impl Load {
    fn start(what: &'static str, prog: &Path, args: &[&str]) -> Load {
        let child = Command::new("timeout")
            .args(["-k", "5", "120"])
            .arg(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Load { what, child }
    }

    fn assert_running(&mut self) {
        let st = self.child.try_wait().expect("try_wait");
        assert!(st.is_none(), "{} stopped early: {st:?}", self.what);
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            send_signal(self.child.id(), libc::SIGTERM);
        }
        let t = Instant::now();
        while let Ok(None) = self.child.try_wait() {
            if t.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---------------------------------------------------------------- comparisons

/// What the page must show for one id, from the scrapes before and after its rendering.
fn check_between(
    dom: &Dom,
    id: &str,
    before: Option<f64>,
    after: Option<f64>,
    errs: &mut Vec<String>,
) {
    let page = dom.num(id);
    match (before, after, page) {
        (_, None, None) => {}
        (b, Some(a), Some(p)) if b.unwrap_or(0.0) <= p && p <= a => {}
        _ => errs.push(format!(
            "{id}: page {page:?}, /metrics before {before:?}, after {after:?}"
        )),
    }
}

fn check_equal(dom: &Dom, id: &str, want: Option<f64>, errs: &mut Vec<String>) {
    let page = dom.num(id);
    if page != want {
        errs.push(format!("{id}: page {page:?}, /metrics {want:?}"));
    }
}

/// Every number the page takes straight from /metrics lies between `b` and `a` (equal when
/// `b` and `a` agree); returns the mismatches.
fn compare(dom: &Dom, b: &Scrape, a: &Scrape) -> Vec<String> {
    let mut errs = Vec::new();
    let mut between = |id: &str, name: &str, f: &dyn Fn(&Labels) -> bool| {
        check_between(dom, id, b.sum(name, f), a.sum(name, f), &mut errs);
    };
    let any = |_: &Labels| true;
    for (id, name) in [
        ("total-reads-completed", "numatgt_lun_reads_completed_total"),
        (
            "total-writes-completed",
            "numatgt_lun_writes_completed_total",
        ),
        ("total-read-bytes", "numatgt_lun_read_bytes_total"),
        ("total-written-bytes", "numatgt_lun_written_bytes_total"),
        ("total-errors", "numatgt_lun_errors_total"),
        ("total-cache-hits", "numatgt_cache_hits_total"),
        ("total-cache-misses", "numatgt_cache_misses_total"),
        ("auth-failures", "numatgt_auth_failures_total"),
        ("pdus-rejected", "numatgt_pdus_rejected_total"),
        ("digest-errors", "numatgt_digest_errors_total"),
        ("task-management", "numatgt_task_management_total"),
        ("process-cpu-seconds", "process_cpu_seconds_total"),
    ] {
        between(id, name, &any);
    }
    between("logins-success", "numatgt_logins_total", &|l| {
        l.get("result").is_some_and(|r| r == "success")
    });
    for lun in a.label_sets("numatgt_lun_capacity_bytes") {
        let p = format!("lun-{}-{}-", id_part(&lun["target"]), id_part(&lun["lun"]));
        let this =
            |l: &Labels| l.get("target") == lun.get("target") && l.get("lun") == lun.get("lun");
        for (id, name) in [
            ("reads", "numatgt_lun_reads_completed_total"),
            ("writes", "numatgt_lun_writes_completed_total"),
            ("read-bytes", "numatgt_lun_read_bytes_total"),
            ("written-bytes", "numatgt_lun_written_bytes_total"),
            ("errors", "numatgt_lun_errors_total"),
        ] {
            between(&format!("{p}{id}"), name, &this);
        }
        between(&format!("{p}capacity"), "numatgt_lun_capacity_bytes", &this);
    }
    for node in a.label_sets("numatgt_cache_capacity_bytes") {
        let p = format!("node-{}-", id_part(&node["node"]));
        let this = |l: &Labels| l.get("node") == node.get("node");
        for (id, name) in [
            ("hits", "numatgt_cache_hits_total"),
            ("misses", "numatgt_cache_misses_total"),
            ("evictions", "numatgt_cache_evictions_total"),
            ("writeback", "numatgt_cache_writeback_bytes_total"),
            ("capacity", "numatgt_cache_capacity_bytes"),
        ] {
            between(&format!("{p}{id}"), name, &this);
        }
        for loc in ["local", "remote"] {
            between(
                &format!("{p}served-{loc}"),
                "numatgt_served_bytes_total",
                &|l: &Labels| this(l) && l.get("locality").is_some_and(|x| x == loc),
            );
        }
    }
    for f in a.label_sets("numatgt_router_forwards_total") {
        let id = format!("fwd-{}-{}", id_part(&f["from"]), id_part(&f["to"]));
        between(&id, "numatgt_router_forwards_total", &|l: &Labels| *l == f);
    }
    // gauges that do not move while the test holds the configuration and the sessions
    for (id, name) in [
        ("targets", "numatgt_targets"),
        ("luns", "numatgt_luns"),
        ("sessions", "numatgt_sessions"),
        ("connections", "numatgt_connections"),
        ("total-sessions", "numatgt_sessions"),
        ("capacity", "numatgt_lun_capacity_bytes"),
    ] {
        let (vb, va) = (b.all(name), a.all(name));
        if vb != va {
            errs.push(format!(
                "{name} changed during the rendering: {vb:?} -> {va:?}"
            ));
        }
        check_equal(dom, id, va, &mut errs);
    }
    let info = a.label_sets("numatgt_build_info");
    let info = info.first().expect("numatgt_build_info in /metrics");
    if dom.raw("version") != info["version"] {
        errs.push(format!(
            "version: page {:?}, /metrics {:?}",
            dom.raw("version"),
            info["version"]
        ));
    }
    check_equal(
        dom,
        "numa-nodes",
        info["numa_nodes"].parse().ok(),
        &mut errs,
    );
    errs
}

fn assert_no_banner(dom: &Dom) {
    let tag = dom.tag("error-banner");
    assert!(
        tag.contains(" hidden"),
        "the page shows an error banner: {tag} …"
    );
}

/// Polls /metrics until `numatgt_sessions` sums to `n` (bounded).
fn wait_sessions(addr: SocketAddr, n: f64, d: &Daemon) {
    let t = Instant::now();
    loop {
        let s = Scrape::take(addr).all("numatgt_sessions").unwrap_or(0.0);
        if s == n {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "numatgt_sessions stayed {s}, expected {n}\n{}",
            d.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn status_page_shows_the_live_metrics() {
    require_numatgtd("status_page");
    let chromium = require_chromium();
    let perf = tools::require_tool("iscsi-perf");
    let qemu_img = tools::require_tool("qemu-img");
    let d = Daemon::start(&[LunSpec::new(1, 512, 64 * MIB).with_cache("numa")]);
    let maddr = SocketAddr::from(([127, 0, 0, 1], d.metrics_port));
    let page = http_get(maddr, "/").unwrap_or_else(|e| panic!("GET /: {e}"));
    assert_eq!(page.status, 200, "GET / answered {}", page.status);
    let ct = page.headers.iter().find(|(k, _)| k == "content-type");
    assert!(
        ct.is_some_and(|(_, v)| v.starts_with("text/html")),
        "GET / has Content-Type {ct:?}"
    );
    assert!(
        page.body.contains("id=\"error-banner\""),
        "GET / is not the status page"
    );

    // the writes are held to a QoS limit: the LUN's row shows it and what it holds back
    tests::mgmt::update_lun1(&d, "qos_write_iops=300").check("tgtadm qos_write_iops=300");

    // live: random 4 KiB reads and 64 KiB writes, each in its own session
    let url = d.url(1);
    let mut reads = Load::start("iscsi-perf", &perf, &["-m", "4", "-b", "8", "-r", &url]);
    let mut writes = Load::start(
        "qemu-img bench",
        &qemu_img,
        &[
            "bench",
            "-f",
            "raw",
            "-w",
            "-c",
            "100000000",
            "-d",
            "4",
            "-s",
            "65536",
            "-S",
            "65536",
            &url,
        ],
    );
    wait_sessions(maddr, 2.0, &d);
    let proxy = SlowProxy::start(maddr);
    proxy.delay_ms.store(2000, Ordering::SeqCst);
    let before = Scrape::take(maddr);
    let t0 = Instant::now();
    let dom = render(&chromium, d.dir.path(), &proxy.url(), 7000, None)
        .unwrap_or_else(|e| panic!("{e}\nthe proxy served:\n{}", proxy.served()));
    let after = Scrape::take(maddr);
    let took = t0.elapsed();
    if let Some(png) = std::env::var_os("STATUS_PAGE_SCREENSHOT") {
        let png = PathBuf::from(png);
        match render(&chromium, d.dir.path(), &proxy.url(), 21000, Some(&png)) {
            Ok(_) => eprintln!("status page screenshot: {}", png.display()),
            Err(e) => eprintln!("no status page screenshot: {e}"),
        }
    }
    reads.assert_running();
    writes.assert_running();
    drop(reads);
    drop(writes);

    assert_no_banner(&dom);
    let scrapes = dom.num("scrapes").unwrap_or(0.0);
    assert!(
        scrapes >= 3.0,
        "the page scraped /metrics {scrapes} times in 7 s of virtual time"
    );
    let errs = compare(&dom, &before, &after);
    assert!(
        errs.is_empty(),
        "page vs /metrics during I/O:\n{}",
        errs.join("\n")
    );
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as f64;
    let upd = dom.num("last-update").expect("last-update has a time");
    assert!(
        (upd - now_ms).abs() < 60_000.0,
        "last-update {upd} vs now {now_ms}"
    );

    // rates: positive during I/O, and no more than the counters grew over the whole rendering
    // (the page's interval is one 2 s tick, the rendering lasted several)
    let p = format!("lun-{}-1-", id_part(TEST_IQN));
    let growth = |name: &str| after.all(name).unwrap_or(0.0) - before.all(name).unwrap_or(0.0);
    for (id, name) in [
        ("read-iops", "numatgt_lun_reads_completed_total"),
        ("write-iops", "numatgt_lun_writes_completed_total"),
        ("read-bps", "numatgt_lun_read_bytes_total"),
        ("write-bps", "numatgt_lun_written_bytes_total"),
    ] {
        for id in [id.to_string(), format!("{p}{id}")] {
            let r = dom
                .num(&id)
                .unwrap_or_else(|| panic!("{id} has no rate after {scrapes} scrapes"));
            assert!(
                r > 0.0 && r * 1.5 <= growth(name),
                "{id} = {r}/s, but {name} grew by {} in {took:?}",
                growth(name)
            );
        }
    }
    let lat = |id: &str| {
        dom.num(id)
            .unwrap_or_else(|| panic!("{id} has no latency during I/O"))
    };
    let (avg, p50, p99) = (lat("lat-avg"), lat("lat-p50"), lat("lat-p99"));
    assert!(avg > 0.0 && avg < 5.0, "lat-avg {avg}");
    assert!(
        p50 > 0.0 && p50 <= p99 && p99 <= 5.0,
        "p50 {p50}, p99 {p99}"
    );
    assert!(lat(&format!("{p}avg-latency")) > 0.0);
    assert_eq!(dom.num(&format!("{p}qos")), Some(1.0), "the LUN's QoS cell");
    assert!(
        dom.0.contains("write 300/s"),
        "the write limit is not shown"
    );
    let held = dom.num(&format!("{p}qos-held")).unwrap_or(0.0);
    assert!(
        held > 0.0 && held * 1.5 <= growth("numatgt_lun_qos_throttled_commands_total"),
        "held back {held}/s"
    );

    // idle: the page's counters are exactly those of /metrics
    wait_sessions(maddr, 0.0, &d);
    let before = Scrape::take(maddr);
    let dom = render(
        &chromium,
        d.dir.path(),
        &format!("http://{maddr}/"),
        3000,
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let after = Scrape::take(maddr);
    assert_no_banner(&dom);
    let errs = compare(&dom, &before, &after);
    assert!(
        errs.is_empty(),
        "page vs /metrics at rest:\n{}",
        errs.join("\n")
    );
    for id in [
        "total-reads-completed",
        "total-writes-completed",
        "total-read-bytes",
        "total-written-bytes",
    ] {
        assert!(
            dom.num(id).unwrap_or(0.0) > 0.0,
            "{id} is zero after the I/O"
        );
    }
    assert_eq!(dom.num("sessions"), Some(0.0));

    // /metrics failing: the banner says so
    proxy.delay_ms.store(0, Ordering::SeqCst);
    proxy.broken.store(true, Ordering::SeqCst);
    let dom = render(&chromium, d.dir.path(), &proxy.url(), 3000, None)
        .unwrap_or_else(|e| panic!("{e}\nthe proxy served:\n{}", proxy.served()));
    let tag = dom.tag("error-banner");
    assert!(
        !tag.contains(" hidden"),
        "no error banner while /metrics answers 503: {tag}"
    );
    assert!(
        dom.0.contains("HTTP 503"),
        "the banner does not say what failed"
    );
    assert!(dom.has("scrapes") && dom.num("scrapes") == Some(0.0));
}

/// The test's own reader of the exposition and of the page's ids.
#[test]
fn exposition_reader_and_id_escaping() {
    let s = parse_exposition(
        "# HELP a_total x\n# TYPE a_total counter\na_total{target=\"iqn.x:\\\"q\\\"\\\\\",lun=\"1\"} 12\n\
         b {} +Inf\nc NaN\nd{le=\"0.5\",} 1e3 1700000000\n",
    );
    assert_eq!(s.len(), 4, "{s:?}");
    assert_eq!(s[0].labels["target"], "iqn.x:\"q\"\\");
    assert_eq!(s[0].labels["lun"], "1");
    assert_eq!(s[0].value, 12.0);
    assert!(s[1].labels.is_empty() && s[1].value == f64::INFINITY);
    assert!(s[2].value.is_nan());
    assert_eq!((s[3].labels["le"].as_str(), s[3].value), ("0.5", 1000.0));
    assert_eq!(
        id_part("iqn.2026-11.org.numatgt:test"),
        "iqn_2e2026-11_2eorg_2enumatgt_3atest"
    );
    assert_eq!(id_part("a_b é€"), "a_5fb_20_e9_u20ac_");
}
