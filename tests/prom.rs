//! A real Prometheus server under test, and the small pieces the metrics tests need around it.
//!
//! - [`Prometheus`]: Debian's `prometheus` started BY PID on a free 127.0.0.1 port, with its
//!   configuration and TSDB in its own temp dir (never `/var/lib/prometheus`, never port 9090,
//!   never the packaged service), scraping the given targets every second; queried through its
//!   HTTP API (`/api/v1/query`); SIGTERM (then SIGKILL) on drop, its log printed when a test
//!   fails.
//! - [`http_get`]: a plain HTTP/1.0 GET over `TcpStream` (bounded by a timeout).
//! - [`Exposition`]: a parser of the Prometheus text exposition format (0.0.4), for ground
//!   truth read from `/metrics` directly.
//! - [`promql_metric_names`], [`dashboard_queries`]: the metric names a PromQL expression
//!   uses, and every query of a Grafana dashboard (panels and template variables).
//! - [`StaticExporter`]: a directory served by `python3 -m http.server` (by PID), to test the
//!   harness against a fixed exposition file.
//! - [`promtool_check_metrics`]: `promtool check metrics` on an exposition.
//!
//! A missing `prometheus`, `promtool` or `python3` is a test FAILURE with the install hint.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tempfile::TempDir;

use crate::daemon::{free_port, send_signal};
use crate::tools;

/// How long Prometheus may take until `/-/ready` answers 200.
pub const PROM_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// SIGTERM grace before SIGKILL.
pub const PROM_STOP_GRACE: Duration = Duration::from_secs(10);
/// Timeout of one HTTP request.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// Seconds since the Unix epoch, with millisecond resolution (Prometheus' own resolution).
pub fn unix_now() -> f64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    (d.as_millis() as f64) / 1000.0
}

/// One `GET path` with HTTP/1.0 (the server closes the connection after the answer).
/// Returns the status code and the body, or a description of what went wrong.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(HTTP_TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(HTTP_TIMEOUT)))
        .map_err(|e| format!("socket timeouts: {e}"))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: */*\r\nUser-Agent: numatgt-tests\r\n\r\n"
    )
    .map_err(|e| format!("send GET {path} to {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read answer to GET {path} from {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path} from {addr}: no header end in {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("GET {path} from {addr}: bad status line in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Percent-encodes `s` for a URL query value (everything but unreserved characters).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One scrape job: `job_name` scraping `addr` at `/metrics`.
#[derive(Clone, Debug)]
pub struct ScrapeTarget {
    pub job: String,
    pub addr: SocketAddr,
}

impl ScrapeTarget {
    pub fn new(job: &str, addr: SocketAddr) -> ScrapeTarget {
        ScrapeTarget {
            job: job.to_string(),
            addr,
        }
    }
}

/// The Prometheus configuration the tests use: every target scraped every second.
pub fn scrape_config(targets: &[ScrapeTarget]) -> String {
    let mut y = String::from(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
    );
    for t in targets {
        y.push_str(&format!(
            "  - job_name: {}\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{}']\n",
            t.job, t.addr
        ));
    }
    y
}

/// One raw sample of a range vector: (Unix time in seconds, value).
pub type RawSample = (f64, f64);

/// One series of a query result: its labels (with `__name__` when kept) and its value(s).
#[derive(Clone, Debug)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    /// Instant vector: one sample; range vector (matrix): the raw samples, oldest first.
    pub samples: Vec<RawSample>,
}

impl Series {
    /// The label `name` (empty when absent).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }

    /// The (last) value.
    pub fn value(&self) -> f64 {
        self.samples.last().map_or(f64::NAN, |s| s.1)
    }
}

fn sample_of(v: &Value) -> Option<RawSample> {
    let a = v.as_array()?;
    let t = a.first()?.as_f64()?;
    let x = a.get(1)?.as_str()?;
    let x = match x {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => x.parse().ok()?,
    };
    Some((t, x))
}

/// The series of a `/api/v1/query` `data` object (vector, matrix or scalar).
pub fn series_of(data: &Value) -> Vec<Series> {
    let kind = data["resultType"].as_str().unwrap_or("");
    let result = &data["result"];
    match kind {
        "scalar" => sample_of(result)
            .map(|s| {
                vec![Series {
                    labels: BTreeMap::new(),
                    samples: vec![s],
                }]
            })
            .unwrap_or_default(),
        "vector" | "matrix" => result
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                let samples = if kind == "vector" {
                    sample_of(&s["value"]).into_iter().collect()
                } else {
                    s["values"]
                        .as_array()
                        .map(|a| a.iter().filter_map(sample_of).collect())
                        .unwrap_or_default()
                };
                Series { labels, samples }
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A Prometheus server started by this harness.
pub struct Prometheus {
    pub port: u16,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
    child: Option<Child>,
    /// Declared last so the files outlive the process on drop.
    pub dir: TempDir,
}

impl Prometheus {
    /// Starts `prometheus` scraping `targets` every second, on a free 127.0.0.1 port with its
    /// TSDB in a temp dir, and waits (bounded) until it is ready. Panics (fails the test) when
    /// the binary is missing.
    pub fn start(targets: &[ScrapeTarget]) -> Prometheus {
        let bin = tools::find_in_path("prometheus").unwrap_or_else(|| {
            panic!(
                "required tool `prometheus` not found in PATH: run `sudo tools/install-test-deps.sh` \
                 (Debian package `prometheus`; this test does not skip)"
            )
        });
        let dir = tempfile::Builder::new()
            .prefix("numatgt-prom.")
            .tempdir()
            .expect("create temp dir for prometheus");
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, scrape_config(targets)).expect("write prometheus.yml");
        let tsdb = dir.path().join("tsdb");
        std::fs::create_dir_all(&tsdb).expect("create tsdb dir");
        let log_path = dir.path().join("prometheus.log");
        let port = free_port();
        let log = File::create(&log_path).expect("create prometheus log");
        let log2 = log.try_clone().expect("clone log handle");
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--storage.tsdb.retention.time=1d")
            .arg("--web.console.templates=/nonexistent")
            .arg("--web.console.libraries=/nonexistent")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let mut p = Prometheus {
            port,
            config_path,
            log_path,
            child: Some(child),
            dir,
        };
        p.wait_ready();
        p
    }

    /// `127.0.0.1:PORT` of the web/API listener.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(Child::id)
            .expect("prometheus was started")
    }

    fn assert_alive(&mut self, ctx: &str) {
        let child = self.child.as_mut().expect("prometheus was started");
        if let Some(st) = child.try_wait().expect("try_wait on prometheus") {
            self.child = None;
            panic!("prometheus died {ctx}: {st}\n{}", self.log_tail(80));
        }
    }

    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            self.assert_alive("while starting");
            if let Ok((200, _)) = http_get(self.addr(), "/-/ready") {
                return;
            }
            assert!(
                start.elapsed() < PROM_READY_TIMEOUT,
                "prometheus not ready on {} within {PROM_READY_TIMEOUT:?}\n{}",
                self.addr(),
                self.log_tail(80)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs the instant query `expr` (at `time`, Unix seconds, or now) and returns the API's
    /// `data` object, or the API's error (`errorType: error`) / the transport error.
    pub fn try_query(&self, expr: &str, time: Option<f64>) -> Result<Value, String> {
        let mut path = format!("/api/v1/query?query={}", url_encode(expr));
        if let Some(t) = time {
            path.push_str(&format!("&time={t:.3}"));
        }
        let (code, body) = http_get(self.addr(), &path)?;
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {code}: answer is not JSON ({e}): {body:?}"))?;
        if v["status"] == "success" {
            Ok(v["data"].clone())
        } else {
            Err(format!(
                "HTTP {code}: {}: {}",
                v["errorType"].as_str().unwrap_or("?"),
                v["error"].as_str().unwrap_or("?")
            ))
        }
    }

    /// [`Prometheus::try_query`] that panics (with Prometheus' log) on any error and returns
    /// the result's series.
    pub fn query_at(&self, expr: &str, time: Option<f64>) -> Vec<Series> {
        match self.try_query(expr, time) {
            Ok(data) => series_of(&data),
            Err(e) => panic!("query {expr:?} failed: {e}\n{}", self.log_tail(40)),
        }
    }

    /// The series of the instant query `expr` now.
    pub fn query(&self, expr: &str) -> Vec<Series> {
        self.query_at(expr, None)
    }

    /// Waits (bounded by `timeout`) until every series of the selector `selector` holds a
    /// sample with a timestamp after `after` (Unix seconds), i.e. Prometheus scraped after
    /// that instant; returns the latest samples (one series per entry).
    pub fn wait_sample_after(&self, selector: &str, after: f64, timeout: Duration) -> Vec<Series> {
        let start = Instant::now();
        loop {
            let got = self.query(&format!("{selector}[30s]"));
            if !got.is_empty()
                && got
                    .iter()
                    .all(|s| s.samples.last().is_some_and(|l| l.0 > after))
            {
                return got;
            }
            assert!(
                start.elapsed() < timeout,
                "prometheus holds no sample of {selector} after t={after:.3} within {timeout:?} \
                 (got {got:?}); targets: {}\n{}",
                self.targets_summary(),
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (bounded) until every scrape job reports `up == 1`.
    pub fn wait_up(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let up = self.query("up");
            if !up.is_empty() && up.iter().all(|s| s.value() == 1.0) {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "scrape targets not up within {timeout:?}: {}\n{}",
                self.targets_summary(),
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `/api/v1/targets`, condensed: job, health and last error of every active target.
    pub fn targets_summary(&self) -> String {
        match http_get(self.addr(), "/api/v1/targets") {
            Ok((_, body)) => {
                let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                v["data"]["activeTargets"]
                    .as_array()
                    .map(|a| a.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(|t| {
                        format!(
                            "{} {} health={} lastError={:?}",
                            t["labels"]["job"].as_str().unwrap_or("?"),
                            t["scrapeUrl"].as_str().unwrap_or("?"),
                            t["health"].as_str().unwrap_or("?"),
                            t["lastError"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }
            Err(e) => format!("(targets unavailable: {e})"),
        }
    }

    /// The last `n` lines of Prometheus' log, framed.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(n);
        format!(
            "===== prometheus log {} (last {} lines) =====\n{}\n===== end of log =====",
            self.log_path.display(),
            lines.len() - from,
            lines[from..].join("\n")
        )
    }

    /// SIGTERM by PID, SIGKILL after [`PROM_STOP_GRACE`]. Returns true on a clean exit (0).
    pub fn stop(&mut self) -> bool {
        stop_child(&mut self.child, PROM_STOP_GRACE, "prometheus")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let clean = self.stop();
        if std::thread::panicking() {
            let _ = writeln!(
                std::io::stderr(),
                "harness: test failed; prometheus stopped (clean={clean})\n{}",
                self.log_tail(60)
            );
        }
    }
}

/// SIGTERM to a child we started, bounded wait, SIGKILL. True when it exited with status 0.
fn stop_child(child: &mut Option<Child>, grace: Duration, what: &str) -> bool {
    let Some(mut c) = child.take() else {
        return false;
    };
    if let Ok(Some(st)) = c.try_wait() {
        return st.success();
    }
    send_signal(c.id(), libc::SIGTERM);
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(st)) = c.try_wait() {
            return st.success();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "harness: {what} pid {} ignored SIGTERM for {grace:?}: SIGKILL",
        c.id()
    );
    let _ = c.kill();
    let _ = c.wait();
    false
}

/// A directory served over HTTP by `python3 -m http.server` on a free 127.0.0.1 port (by
/// PID): a stand-in exporter with a fixed exposition file.
pub struct StaticExporter {
    pub port: u16,
    child: Option<Child>,
    pub dir: TempDir,
}

impl StaticExporter {
    /// Serves `files` (name, contents) from a fresh temp dir; waits until it answers.
    pub fn start(files: &[(&str, &str)]) -> StaticExporter {
        let py = tools::require_tool("python3");
        let dir = tempfile::Builder::new()
            .prefix("numatgt-static.")
            .tempdir()
            .expect("temp dir for the static exporter");
        for (name, body) in files {
            std::fs::write(dir.path().join(name), body).expect("write static file");
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join(".server.log"))
            .expect("static server log");
        let log2 = log.try_clone().expect("clone log handle");
        let port = free_port();
        let child = Command::new(py)
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir.path())
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .expect("spawn python3 -m http.server");
        let mut s = StaticExporter {
            port,
            child: Some(child),
            dir,
        };
        let start = Instant::now();
        loop {
            if let Some(c) = s.child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                s.child = None;
                panic!("python3 -m http.server exited at start: {st}");
            }
            if http_get(s.addr(), "/").is_ok() {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "python3 -m http.server not answering on {}",
                s.addr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for StaticExporter {
    fn drop(&mut self) {
        stop_child(
            &mut self.child,
            Duration::from_secs(5),
            "python3 http.server",
        );
    }
}

/// One sample of an exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed text exposition (format 0.0.4).
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    /// `# TYPE` lines: family name -> type.
    pub types: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// Parses `text`; panics on a line that is not a comment, a blank or a sample.
    pub fn parse(text: &str) -> Exposition {
        let mut e = Exposition::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('#') {
                let mut w = rest.split_whitespace();
                if w.next() == Some("TYPE")
                    && let (Some(n), Some(t)) = (w.next(), w.next())
                {
                    e.types.insert(n.to_string(), t.to_string());
                }
                continue;
            }
            let s = parse_sample(line)
                .unwrap_or_else(|err| panic!("exposition line {}: {err}: {line:?}", i + 1));
            e.samples.push(s);
        }
        e
    }

    /// Sum of the samples named `name` whose labels include every pair of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The samples named `name` whose labels include every pair of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// True when `name` is exported: a sample of that name, a `# TYPE` family of that name,
    /// or `name` is `<family>_bucket|_sum|_count` of a histogram / summary family.
    pub fn exports(&self, name: &str) -> bool {
        if self.types.contains_key(name) || self.samples.iter().any(|s| s.name == name) {
            return true;
        }
        ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix).is_some_and(|base| {
                matches!(
                    self.types.get(base).map(String::as_str),
                    Some("histogram") | Some("summary")
                ) && (*suffix != "_bucket" || self.types[base] == "histogram")
            })
        })
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let end = loop {
            // skip separators
            while let Some(&(_, c)) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    chars.next();
                } else {
                    break;
                }
            }
            let Some(&(i, c)) = chars.peek() else {
                return Err("unterminated label set".into());
            };
            if c == '}' {
                break i + 1;
            }
            let mut key = String::new();
            while let Some(&(_, c)) = chars.peek() {
                if c == '=' {
                    break;
                }
                key.push(c);
                chars.next();
            }
            if chars.next().map(|x| x.1) != Some('=') || chars.next().map(|x| x.1) != Some('"') {
                return Err(format!("label {key}: expected =\""));
            }
            let mut val = String::new();
            loop {
                match chars.next() {
                    None => return Err("unterminated label value".into()),
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => val.push('\n'),
                        Some((_, c)) => val.push(c),
                        None => return Err("dangling escape".into()),
                    },
                    Some((_, c)) => val.push(c),
                }
            }
            labels.insert(key.trim().to_string(), val);
        };
        rest = &r[end..];
    }
    let v = rest.split_whitespace().next().ok_or("no value")?;
    let value = match v {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => v.parse().map_err(|e| format!("value {v:?}: {e}"))?,
    };
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// PromQL words that are not metric names when they stand alone.
const PROMQL_KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "start",
    "end",
];

/// The metric names a PromQL expression selects (bare identifiers that are not functions,
/// aggregations, keywords or label names, plus `__name__="…"` matchers). Label matchers,
/// strings, durations and numbers are skipped; so are the label lists after `by`, `without`,
/// `on`, `ignoring`, `group_left` and `group_right`.
pub fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let b: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_label_list = false;
    let is_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let is_part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < b.len() {
        let c = b[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&b, i);
        } else if c == '{' {
            // label matchers: only a __name__ matcher names a metric
            let end = find_close(&b, i, '{', '}');
            let inner: String = b[i + 1..end].iter().collect();
            if let Some(p) = inner.find("__name__") {
                let after = inner[p + 8..].trim_start();
                if let Some(v) = after.strip_prefix('=').map(str::trim_start)
                    && let Some(v) = v.strip_prefix('"')
                    && let Some(q) = v.find('"')
                {
                    names.insert(v[..q].to_string());
                }
            }
            i = end + 1;
        } else if c == '[' {
            i = find_close(&b, i, '[', ']') + 1;
        } else if c == '(' && skip_label_list {
            i = find_close(&b, i, '(', ')') + 1;
            skip_label_list = false;
        } else if c.is_ascii_digit()
            || (c == '.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            // a number (1e-9, 0x1f, 0.99) or a duration (5m)
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.') {
                if (b[i] == 'e' || b[i] == 'E') && matches!(b.get(i + 1), Some('+') | Some('-')) {
                    i += 1;
                }
                i += 1;
            }
        } else if is_start(c) {
            let s = i;
            while i < b.len() && is_part(b[i]) {
                i += 1;
            }
            let word: String = b[s..i].iter().collect();
            let mut j = i;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            let next = b.get(j).copied();
            let lower = word.to_ascii_lowercase();
            // `sum by (…) (…)`: an aggregation whose grouping comes first
            let rest: String = b[j..b.len().min(j + 8)].iter().collect();
            let grouping_follows = ["by", "without"].iter().any(|g| {
                rest.strip_prefix(g)
                    .is_some_and(|r| r.starts_with(|c: char| c == '(' || c.is_whitespace()))
            });
            if matches!(
                lower.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                skip_label_list = true;
            } else if next == Some('(')
                || grouping_follows
                || PROMQL_KEYWORDS.contains(&lower.as_str())
            {
                // a function or aggregation call, or an operator keyword
            } else {
                names.insert(word);
            }
        } else {
            if !c.is_whitespace() {
                skip_label_list = false;
            }
            i += 1;
        }
    }
    names
}

fn skip_string(b: &[char], open: usize) -> usize {
    let q = b[open];
    let mut i = open + 1;
    while i < b.len() {
        if b[i] == '\\' && q != '`' {
            i += 2;
            continue;
        }
        if b[i] == q {
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// Index of the bracket closing the one at `open` (strings inside skipped); the end of the
/// text when unbalanced.
fn find_close(b: &[char], open: usize, o: char, c: char) -> usize {
    let mut depth = 0;
    let mut i = open;
    while i < b.len() {
        let ch = b[i];
        if ch == '"' || ch == '\'' || ch == '`' {
            i = skip_string(b, i);
            continue;
        }
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
        i += 1;
    }
    b.len().saturating_sub(1)
}

/// One query of a dashboard: where it is (panel title / variable name) and its text.
#[derive(Clone, Debug)]
pub struct DashboardQuery {
    pub place: String,
    pub expr: String,
    /// A template variable's query (`label_values(…)`, `query_result(…)` or plain PromQL).
    pub is_variable: bool,
}

/// Every PromQL query of a Grafana dashboard: `targets[].expr` of every panel (rows'
/// collapsed panels included) and the `query` of every `query` template variable.
pub fn dashboard_queries(dash: &Value) -> Vec<DashboardQuery> {
    fn walk(panels: &Value, out: &mut Vec<DashboardQuery>) {
        for p in panels.as_array().map(|a| a.as_slice()).unwrap_or_default() {
            let title = p["title"].as_str().unwrap_or("(untitled)");
            for t in p["targets"]
                .as_array()
                .map(|a| a.as_slice())
                .unwrap_or_default()
            {
                if let Some(e) = t["expr"].as_str() {
                    out.push(DashboardQuery {
                        place: format!(
                            "panel {title:?} ref {}",
                            t["refId"].as_str().unwrap_or("?")
                        ),
                        expr: e.to_string(),
                        is_variable: false,
                    });
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    for v in dash["templating"]["list"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
    {
        if v["type"] != "query" {
            continue;
        }
        let q = match &v["query"] {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .get("query")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            _ => String::new(),
        };
        out.push(DashboardQuery {
            place: format!("variable {}", v["name"].as_str().unwrap_or("?")),
            expr: q,
            is_variable: true,
        });
    }
    out
}

/// The PromQL a template-variable query runs: the series selector of `label_values(SEL,
/// label)` / the expression of `query_result(EXPR)`; None for `label_values(label)` (no
/// selector) and `label_names()`/`metrics(…)`.
pub fn variable_promql(q: &str) -> Option<String> {
    let q = q.trim();
    let inner = |prefix: &str| -> Option<&str> {
        q.strip_prefix(prefix)?
            .trim_start()
            .strip_prefix('(')?
            .strip_suffix(')')
    };
    if let Some(args) = inner("label_values") {
        // the selector is everything before the last top-level comma
        let b: Vec<char> = args.chars().collect();
        let mut depth = 0i32;
        let mut last_comma = None;
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                '"' | '\'' | '`' => {
                    i = skip_string(&b, i);
                    continue;
                }
                '(' | '{' | '[' => depth += 1,
                ')' | '}' | ']' => depth -= 1,
                ',' if depth == 0 => last_comma = Some(i),
                _ => {}
            }
            i += 1;
        }
        return last_comma.map(|p| b[..p].iter().collect::<String>().trim().to_string());
    }
    if let Some(e) = inner("query_result") {
        return Some(e.trim().to_string());
    }
    if q.starts_with("label_names") || q.starts_with("metrics") {
        return None;
    }
    Some(q.to_string())
}

/// Substitutes Grafana's variables in `expr`: `$__rate_interval`, `$__interval`,
/// `$__range` → `1m`; every other `$var` / `${var}` / `[[var]]` → `value_of(var)`.
pub fn substitute_variables(expr: &str, value_of: &dyn Fn(&str) -> String) -> String {
    let b: Vec<char> = expr.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let is_part = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while i < b.len() {
        if b[i] == '$' {
            let (name, next) = if b.get(i + 1) == Some(&'{') {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .map_or(b.len(), |p| i + p);
                let inner: String = b[i + 2..end].iter().collect();
                // ${var:format}: the format is dropped
                let name = inner.split(':').next().unwrap_or("").to_string();
                (name, end + 1)
            } else {
                let mut j = i + 1;
                while j < b.len() && is_part(b[j]) {
                    j += 1;
                }
                (b[i + 1..j].iter().collect::<String>(), j)
            };
            match name.as_str() {
                "__rate_interval" | "__interval" | "__range" => out.push_str("1m"),
                "" => out.push('$'),
                n => out.push_str(&value_of(n)),
            }
            i = next;
        } else if b[i] == '[' && b.get(i + 1) == Some(&'[') {
            // [[var]] (Grafana's old syntax); a PromQL subquery never starts with "[["
            let mut j = i + 2;
            while j < b.len() && is_part(b[j]) {
                j += 1;
            }
            if j > i + 2 && b.get(j) == Some(&']') && b.get(j + 1) == Some(&']') {
                let name: String = b[i + 2..j].iter().collect();
                out.push_str(&value_of(&name));
                i = j + 2;
            } else {
                out.push('[');
                i += 1;
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Runs `promtool check metrics` on `exposition` (through a file on its stdin).
pub fn promtool_check_metrics(exposition: &str) -> tools::ToolRun {
    tools::find_in_path("promtool").unwrap_or_else(|| {
        panic!(
            "required tool `promtool` not found in PATH: run `sudo tools/install-test-deps.sh` \
             (Debian package `prometheus`; this test does not skip)"
        )
    });
    let dir = tempfile::Builder::new()
        .prefix("numatgt-promtool.")
        .tempdir()
        .expect("temp dir for promtool input");
    let f = dir.path().join("metrics.txt");
    std::fs::write(&f, exposition).expect("write exposition for promtool");
    tools::run(
        60,
        "sh",
        [
            "-c",
            "exec promtool check metrics < \"$1\"",
            "sh",
            f.to_str().expect("utf-8 temp path"),
        ],
    )
}

/// Reads a file of the workspace (`tools/grafana/…`), panicking with the path on error.
pub fn read_workspace_file(rel: &str) -> String {
    let p: PathBuf = crate::workspace_root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}
