//! numatgtd's metrics endpoint seen by a real Prometheus (Debian's `prometheus` 2.42, started
//! by PID on a free loopback port with its TSDB in a temp dir; never the packaged service),
//! `promtool check metrics` on a live exposition, and the shipped Grafana dashboard
//! (`tools/grafana/numatgt-dashboard.json`) and scrape config
//! (`tools/prometheus/numatgt-scrape.yml`) checked against a running numatgtd and Prometheus.
//!
//! A missing `prometheus` / `promtool` / `iscsi-perf` is a FAILURE with the install hint.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::daemon::require_numatgtd;
use tests::prom::{
    DashboardQuery, Exposition, Prometheus, ScrapeTarget, StaticExporter, dashboard_queries,
    http_get, promql_metric_names, promtool_check_metrics, read_workspace_file,
    substitute_variables, unix_now, variable_promql,
};
use tests::tools;
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const DASHBOARD: &str = "tools/grafana/numatgt-dashboard.json";
const SCRAPE_CONFIG: &str = "tools/prometheus/numatgt-scrape.yml";
const FIXTURE: &str = "tests/fixtures/numatgt-metrics.prom";

/// The load test measures rates: the other tests of this file wait while it runs.
static LOAD: Mutex<()> = Mutex::new(());

fn load_lock() -> std::sync::MutexGuard<'static, ()> {
    LOAD.lock().unwrap_or_else(|p| p.into_inner())
}

/// numatgtd with `luns` and two virtual NUMA nodes; its metrics server is on a free loopback
/// port (`--metrics`, chosen by the harness). Returns the daemon and the metrics address.
fn daemon_with_metrics(luns: &[LunSpec]) -> (Daemon, SocketAddr) {
    require_numatgtd("prometheus");
    let d = Daemon::start_with_args(luns, &["--numa-nodes", "2"]);
    let addr = SocketAddr::from(([127, 0, 0, 1], d.metrics_port));
    assert_eq!(d.metrics_url(), format!("http://{addr}"));
    (d, addr)
}

/// `GET /metrics` from `addr`, parsed; panics unless 200.
fn scrape(addr: SocketAddr) -> (String, Exposition) {
    let (code, body) =
        http_get(addr, "/metrics").unwrap_or_else(|e| panic!("GET /metrics from {addr}: {e}"));
    assert_eq!(code, 200, "GET /metrics from {addr}: HTTP {code}\n{body}");
    let e = Exposition::parse(&body);
    (body, e)
}

/// One iscsi-perf run: its final `iops average`, its output, and its window: the seconds
/// from when it started its clock to when it printed the average (from its line-buffered
/// output, read as it comes).
struct PerfRun {
    iops: u64,
    output: String,
    window: f64,
}

/// Runs `iscsi-perf -l` (sequential 4 KiB READ16s: 8 blocks of 512 bytes, 16 in flight) on
/// `url` for `secs` seconds, under `timeout` and `stdbuf -oL` so that every line arrives when
/// printed: the empty line after `will run for` is printed just before it starts its clock,
/// the `iops average` line when it computes the average. Panics unless it exits 0.
fn iscsi_perf(url: &str, secs: u64) -> PerfRun {
    use std::io::BufRead;
    tools::require_tool("iscsi-perf");
    tools::require_tool("stdbuf");
    let mut child = std::process::Command::new("timeout")
        .args([
            "-k",
            "5",
            &(secs + 30).to_string(),
            "stdbuf",
            "-oL",
            "iscsi-perf",
            "-l",
        ])
        .args(["-t", &secs.to_string(), "-b", "8", "-m", "16", url])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn timeout stdbuf iscsi-perf");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout pipe"));
    let mut output = String::new();
    let (mut timed_from, mut timed_to, mut armed) = (None, None, false);
    let mut line = String::new();
    // bounded: the pipe closes when iscsi-perf ends, at the latest when `timeout` kills it
    while out.read_line(&mut line).unwrap_or(0) > 0 {
        let now = Instant::now();
        if armed && timed_from.is_none() && line.trim().is_empty() {
            timed_from = Some(now);
        }
        if line.starts_with("will run for") {
            armed = true;
        }
        if line.contains("iops average") && !line.contains("iops current") {
            timed_to = Some(now);
        }
        output.push_str(&line);
        line.clear();
    }
    let st = child.wait().expect("wait for iscsi-perf");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(st.success(), "iscsi-perf failed: {st}\n{output}\n{err}");
    let at = output
        .rfind("iops average ")
        .unwrap_or_else(|| panic!("no `iops average` in iscsi-perf output:\n{output}"));
    let iops = output[at + "iops average ".len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad `iops average` in iscsi-perf output:\n{output}"));
    let (Some(timed_from), Some(timed_to)) = (timed_from, timed_to) else {
        panic!("iscsi-perf output without its start / final lines:\n{output}");
    };
    PerfRun {
        iops,
        output,
        window: timed_to.duration_since(timed_from).as_secs_f64(),
    }
}

fn rel_diff(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(1.0)
}

/// The node labels of the series of `expr`.
fn nodes_of(prom: &Prometheus, expr: &str) -> BTreeSet<String> {
    prom.query(expr)
        .iter()
        .map(|s| s.label("node").to_string())
        .collect()
}

/// The tokenizer that finds metric names in dashboard expressions.
#[test]
fn promql_metric_names_are_found() {
    let names = |e: &str| -> Vec<String> { promql_metric_names(e).into_iter().collect() };
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, op) (rate(numatgt_lun_io_duration_seconds_bucket{instance=~".*", lun=~"a|b"}[1m])))"#
        ),
        ["numatgt_lun_io_duration_seconds_bucket"]
    );
    assert_eq!(
        names(
            "sum(rate(a_total[5m])) / (sum(rate(a_total[5m])) + sum(rate(b_total[5m]))) > bool 1e-9"
        ),
        ["a_total", "b_total"]
    );
    assert_eq!(
        names("time() - process_start_time_seconds offset 5m"),
        ["process_start_time_seconds"]
    );
    assert_eq!(
        names(r#"x * on (node) group_left (thread) y or {__name__="z", a="b"}"#),
        ["x", "y", "z"]
    );
    assert_eq!(
        names(r#"count without (instance) (up{job="by"}) and inf_metric"#),
        ["inf_metric", "up"]
    );
    assert_eq!(
        variable_promql(r#"label_values(numatgt_lun_info{instance=~"$instance"}, target)"#)
            .as_deref(),
        Some(r#"numatgt_lun_info{instance=~"$instance"}"#)
    );
    assert_eq!(variable_promql("label_values(instance)"), None);
    let sub = substitute_variables(
        r#"rate(m{instance=~"$instance",t=~"${target}",l=~"[[lun]]"}[$__rate_interval])"#,
        &|_| ".*".to_string(),
    );
    assert_eq!(sub, r#"rate(m{instance=~".*",t=~".*",l=~".*"}[1m])"#);
}

/// The harness itself: Prometheus scrapes a fixed exposition served by `python3 -m
/// http.server`, the API answers with the file's numbers, and `promtool check metrics`
/// accepts the file (the fixture follows docs/metrics.md).
#[test]
fn harness_prometheus_scrapes_a_static_exposition() {
    let _g = load_lock();
    let fixture = read_workspace_file(FIXTURE);
    let lint = promtool_check_metrics(&fixture);
    lint.check("promtool check metrics on the fixture");
    assert!(
        lint.stdout.trim().is_empty() && lint.stderr.trim().is_empty(),
        "promtool reported problems on the fixture:\n{lint}"
    );
    let exp = Exposition::parse(&fixture);
    let srv = StaticExporter::start(&[("metrics", &fixture)]);
    let prom = Prometheus::start(&[ScrapeTarget::new("static", srv.addr())]);
    prom.wait_up(Duration::from_secs(20));
    let got = prom.query(&format!(
        "numatgt_lun_reads_completed_total{{target=\"{TEST_IQN}\",lun=\"1\"}}"
    ));
    assert_eq!(got.len(), 1, "one series expected: {got:?}");
    assert_eq!(
        got[0].value(),
        exp.sum("numatgt_lun_reads_completed_total", &[("lun", "1")])
    );
    assert_eq!(got[0].label("job"), "static");
    assert_eq!(got[0].label("instance"), srv.addr().to_string());
    // the measurement of the load test: increase() between two samples (window aligned on
    // them) is the exact counter difference, without extrapolation
    let sel = r#"numatgt_lun_reads_completed_total{job="static",lun="1"}"#.to_string();
    let t_a = unix_now();
    prom.wait_sample_after(&sel, t_a, Duration::from_secs(10));
    let v0 = exp.sum("numatgt_lun_reads_completed_total", &[("lun", "1")]);
    let bumped = fixture.replace(
        &format!("numatgt_lun_reads_completed_total{{target=\"{TEST_IQN}\",lun=\"1\"}} {v0}"),
        &format!(
            "numatgt_lun_reads_completed_total{{target=\"{TEST_IQN}\",lun=\"1\"}} {}",
            v0 + 1000.0
        ),
    );
    assert_ne!(bumped, fixture, "fixture line for LUN 1 reads");
    std::fs::write(srv.dir.path().join("metrics.tmp"), &bumped).expect("write new exposition");
    std::fs::rename(
        srv.dir.path().join("metrics.tmp"),
        srv.dir.path().join("metrics"),
    )
    .expect("replace exposition");
    let t_b = unix_now();
    let raw = prom.wait_sample_after(&sel, t_b + 1.0, Duration::from_secs(10));
    let samples = &raw[0].samples;
    let s0 = *samples
        .iter()
        .rev()
        .find(|s| s.1 == v0)
        .expect("a sample before the bump");
    let s1 = *samples
        .iter()
        .find(|s| s.1 == v0 + 1000.0)
        .expect("a sample after the bump");
    let w = ((s1.0 - s0.0) * 1000.0).round() as u64;
    let inc = prom.query_at(&format!("increase({sel}[{w}ms])"), Some(s1.0));
    assert_eq!(inc.len(), 1);
    assert!(
        (inc[0].value() - 1000.0).abs() < 1e-9,
        "increase over [{}, {}] = {} (samples {samples:?})",
        s0.0,
        s1.0,
        inc[0].value()
    );
    // an invalid expression is an API error, not a panic of the harness
    let bad = prom.try_query("sum(rate(x[1m]", None);
    assert!(bad.is_err(), "a broken expression must not parse: {bad:?}");
    // the shipped dashboard against the fixture
    check_dashboard(&exp, &prom);
}

/// The example scrape configuration is valid for this Prometheus.
#[test]
fn example_scrape_config_is_valid() {
    let p = tests::workspace_root().join(SCRAPE_CONFIG);
    tools::require_tool("promtool");
    tools::run(
        30,
        "promtool",
        ["check", "config", p.to_str().expect("utf-8 path")],
    )
    .check("promtool check config on the example scrape config");
}

/// Static shape of the dashboard: Grafana 10 schema, the data source as a template variable
/// used by every panel and query, the instance / target / lun variables from
/// label_values(…), unique panel ids, and the panels the issue asks for.
#[test]
fn dashboard_is_well_formed() {
    let dash: Value = serde_json::from_str(&read_workspace_file(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let schema = dash["schemaVersion"].as_u64().unwrap_or(0);
    assert!(
        (36..=39).contains(&schema),
        "schemaVersion {schema}: Grafana 10 writes 36..39"
    );
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let vars = dash["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("template variable {name} missing"))
    };
    let ds = var("DS_PROMETHEUS");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    for name in ["instance", "target", "lun"] {
        let v = var(name);
        assert_eq!(v["type"], "query", "{name}");
        assert_eq!(v["datasource"]["uid"], "${DS_PROMETHEUS}", "{name}");
        let q = v["query"]["query"].as_str().unwrap_or("");
        assert!(
            q.starts_with("label_values(") && q.trim_end().ends_with(&format!(", {name})")),
            "{name}: {q}"
        );
    }
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    let mut stack: Vec<&Value> = dash["panels"].as_array().expect("panels").iter().collect();
    while let Some(p) = stack.pop() {
        let id = p["id"].as_u64().expect("every panel has an id");
        assert!(ids.insert(id), "panel id {id} used twice");
        titles.push(p["title"].as_str().unwrap_or("").to_string());
        if p["type"] != "row" {
            assert_eq!(
                p["datasource"]["uid"], "${DS_PROMETHEUS}",
                "panel {:?}: data source must be the variable",
                p["title"]
            );
            let targets = p["targets"].as_array().expect("panel targets");
            assert!(!targets.is_empty(), "panel {:?} has no query", p["title"]);
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}");
            }
        }
        stack.extend(p["panels"].as_array().into_iter().flatten());
    }
    for want in [
        "Targets",
        "LUNs",
        "Sessions",
        "Capacity",
        "IOPS",
        "Throughput",
        "Cache hit ratio",
        "Average latency",
        "Latency p50 / p99",
        "Queue depth",
        "Busy",
        "Cache hit ratio per node",
        "Cached bytes per node",
        "Served bytes: local vs remote",
        "Router forwards (from → to)",
        "Logins",
        "Errors",
        "CPU",
        "Resident memory",
    ] {
        assert!(
            titles.iter().any(|t| t == want),
            "panel {want:?} missing; have {titles:?}"
        );
    }
    let exprs: Vec<String> = dashboard_queries(&dash)
        .into_iter()
        .map(|q| q.expr)
        .collect();
    assert!(
        exprs
            .iter()
            .any(|e| e.contains("histogram_quantile(0.99") && e.contains("_bucket")),
        "a p99 from the latency histogram"
    );
}

/// The queries of the ```promql blocks of docs/metrics.md (one per `# comment`).
fn docs_queries() -> Vec<DashboardQuery> {
    let doc = read_workspace_file("docs/metrics.md");
    let mut out: Vec<DashboardQuery> = Vec::new();
    let mut in_block = false;
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<DashboardQuery>| {
        if !cur.trim().is_empty() {
            out.push(DashboardQuery {
                place: format!("docs/metrics.md query {}", out.len() + 1),
                expr: cur.trim().to_string(),
                is_variable: false,
            });
        }
        cur.clear();
    };
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            if in_block {
                flush(&mut cur, &mut out);
            }
            in_block = line.trim() == "```promql";
        } else if in_block {
            if line.trim_start().starts_with('#') || line.trim().is_empty() {
                flush(&mut cur, &mut out);
            } else {
                cur.push_str(line);
                cur.push('\n');
            }
        }
    }
    out
}

/// Every metric name of every dashboard query is exported by `exp`, and every query (with
/// the template variables substituted) parses and evaluates on the real Prometheus.
fn check_dashboard(exp: &Exposition, prom: &Prometheus) {
    let dash: Value = serde_json::from_str(&read_workspace_file(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let mut queries = dashboard_queries(&dash);
    assert!(queries.len() > 20, "only {} queries found", queries.len());
    let docs = docs_queries();
    assert!(docs.len() >= 5, "docs/metrics.md useful queries: {docs:?}");
    queries.extend(docs);
    let mut missing = Vec::new();
    let mut failed = Vec::new();
    let mut names_seen = BTreeSet::new();
    for q in &queries {
        let promql = if q.is_variable {
            match variable_promql(&q.expr) {
                Some(p) => p,
                None => continue,
            }
        } else {
            q.expr.clone()
        };
        let names = promql_metric_names(&promql);
        assert!(
            !names.is_empty(),
            "{}: no metric name found in {promql:?}",
            q.place
        );
        for n in names {
            if !exp.exports(&n) {
                missing.push(format!("{}: {n}", q.place));
            }
            names_seen.insert(n);
        }
        for values in [".*", "1"] {
            let concrete = substitute_variables(&promql, &|_| values.to_string());
            if let Err(e) = prom.try_query(&concrete, None) {
                failed.push(format!("{}: {concrete}\n    -> {e}", q.place));
            }
        }
    }
    assert!(
        missing.is_empty() && failed.is_empty(),
        "dashboard metrics not exported by /metrics:\n{}\ndashboard expressions Prometheus \
         refused:\n{}",
        missing.join("\n"),
        failed.join("\n")
    );
    eprintln!(
        "dashboard: {} queries, {} metric names, all exported and accepted by Prometheus",
        queries.len(),
        names_seen.len()
    );
}

/// (a) Prometheus scraping numatgtd every second sees the reads iscsi-perf made.
///
/// What iscsi-perf reports: `iops average` = READs completed / time since it started its
/// clock, computed when that clock passes the run time (8 s; on busy shared cores the moment
/// can be some hundred ms late), after which the ≤ 16 READs in flight drain. Its output is
/// read line by line as printed (`stdbuf -oL`, `-l`), so the test knows when it started its
/// clock and when it computed the average: that is its window.
///
/// What Prometheus reports: `increase()` between two of its own samples that bracket the run
/// while the daemon is idle (the last scrape before iscsi-perf starts, the first after it
/// exits). The window starts and ends on samples, so `increase` does not extrapolate: it is
/// the exact counter difference, and must equal the difference of `/metrics` read directly
/// before and after (ground truth). Prometheus' read rate over iscsi-perf's window (its
/// increase over that window's length: all READs fall inside it but the ≤ 16 drained ones)
/// must agree with iscsi-perf's `iops average` within 5 %, and so must the byte rate with
/// `iops × 4096`; the count must lie between `iops × 8` and `(iops + 1) × window + 16` (with
/// 10 ms of slack on the window).
/// Then: the cache's hit/miss counters and the local/remote served bytes exist for every NUMA
/// node.
#[test]
fn prometheus_counts_the_reads_iscsi_perf_made() {
    const SECS: u64 = 8;
    const IO_BYTES: f64 = 4096.0;
    let _g = load_lock();
    tools::require_tool("iscsi-perf");
    let (mut d, maddr) = daemon_with_metrics(&[LunSpec::new(1, 512, 256 * MIB)]);
    let mut prom = Prometheus::start(&[ScrapeTarget::new("numatgt", maddr)]);
    prom.wait_up(Duration::from_secs(20));
    let lun = format!(r#"job="numatgt",target="{TEST_IQN}",lun="1""#);
    let reads = format!("numatgt_lun_reads_completed_total{{{lun}}}");
    let bytes = format!("numatgt_lun_read_bytes_total{{{lun}}}");
    let gt = |e: &Exposition, name: &str| e.sum(name, &[("target", TEST_IQN), ("lun", "1")]);

    // idle: ground truth, then a scrape after it
    let (_, before) = scrape(maddr);
    let t_gt0 = unix_now();
    prom.wait_sample_after(&reads, t_gt0, Duration::from_secs(10));
    let t_start = unix_now();
    let perf = iscsi_perf(&d.url(1), SECS);
    let (iops, run) = (perf.iops, &perf.output);
    let t_end = unix_now();
    let (_, after) = scrape(maddr);
    let t_gt1 = unix_now();
    prom.wait_sample_after(&reads, t_gt1, Duration::from_secs(10));
    d.assert_alive("after iscsi-perf");

    // Prometheus' raw samples around the run
    let span = (unix_now() - t_gt0).ceil() as u64 + 5;
    let raw = prom.query(&format!("{reads}[{span}s]"));
    assert_eq!(raw.len(), 1, "one series of {reads}: {raw:?}");
    let samples = &raw[0].samples;
    let s0 = *samples
        .iter()
        .rev()
        .find(|s| s.0 <= t_start && s.0 > t_gt0)
        .unwrap_or_else(|| panic!("no idle sample before the run: {samples:?}"));
    let s1 = *samples
        .iter()
        .find(|s| s.0 >= t_end)
        .unwrap_or_else(|| panic!("no sample after the run: {samples:?}"));
    let in_run = samples
        .iter()
        .filter(|s| s.0 > t_start && s.0 < t_end)
        .count();
    assert!(
        in_run as u64 >= SECS - 2,
        "only {in_run} scrapes during an {SECS} s run: {samples:?}"
    );
    assert_eq!(
        s0.1,
        gt(&before, "numatgt_lun_reads_completed_total"),
        "idle sample before"
    );
    assert_eq!(
        s1.1,
        gt(&after, "numatgt_lun_reads_completed_total"),
        "idle sample after"
    );

    let window_ms = ((s1.0 - s0.0) * 1000.0).round() as u64;
    let one = |expr: String| -> f64 {
        let r = prom.query_at(&expr, Some(s1.0));
        assert_eq!(r.len(), 1, "{expr}: {r:?}");
        r[0].value()
    };
    let p_reads = one(format!("increase({reads}[{window_ms}ms])"));
    let p_bytes = one(format!("increase({bytes}[{window_ms}ms])"));
    let p_rate = one(format!("rate({reads}[{window_ms}ms])"));
    let gt_reads = gt(&after, "numatgt_lun_reads_completed_total")
        - gt(&before, "numatgt_lun_reads_completed_total");
    let gt_bytes =
        gt(&after, "numatgt_lun_read_bytes_total") - gt(&before, "numatgt_lun_read_bytes_total");
    let window = perf.window;
    let wall = t_end - t_start;
    // upper bound: 10 ms of slack for reading its lines late (pipe, scheduling)
    let (lo, hi) = (
        iops as f64 * SECS as f64,
        (iops + 1) as f64 * (window + 0.010) + 16.0,
    );
    let p_run_rate = p_reads / window;
    let p_run_bytes = p_bytes / window;
    let perf_bytes_rate = iops as f64 * IO_BYTES;
    eprintln!(
        "iscsi-perf: {iops} reads/s ({perf_bytes_rate} B/s) over {window:.3} s, process ran \
         {wall:.3} s; \
         /metrics: +{gt_reads} reads, +{gt_bytes} bytes; prometheus over {window_ms} ms \
         ({in_run} scrapes in the run): increase {p_reads} reads, {p_bytes} bytes (rate over \
         the window {p_rate:.0}/s); over the run: {p_run_rate:.0} reads/s, {p_run_bytes:.0} B/s \
         ({:+.2} %); count bounds from iscsi-perf [{lo}, {hi:.0}]",
        (p_run_rate / iops as f64 - 1.0) * 100.0
    );
    assert!(
        rel_diff(p_reads, gt_reads) < 1e-9 && rel_diff(p_bytes, gt_bytes) < 1e-9,
        "prometheus' increase ({p_reads} reads, {p_bytes} bytes) differs from /metrics \
         (+{gt_reads}, +{gt_bytes})"
    );
    assert!(
        rel_diff(p_rate * window_ms as f64 / 1000.0, p_reads) < 1e-6,
        "rate × window ≠ increase"
    );
    assert!(
        gt_reads > 1000.0,
        "too few reads to compare: {gt_reads}\n{run}"
    );
    assert!(
        rel_diff(p_run_rate, iops as f64) <= 0.05,
        "read rate: prometheus {p_reads} reads / {window:.3} s = {p_run_rate:.0}/s vs \
         iscsi-perf {iops}/s\n{run}"
    );
    assert!(
        rel_diff(p_run_bytes, perf_bytes_rate) <= 0.05,
        "byte rate: prometheus {p_run_bytes:.0} B/s vs iscsi-perf {perf_bytes_rate} B/s\n{run}"
    );
    assert!(
        (lo..=hi).contains(&p_reads),
        "READs counted {p_reads} outside what iscsi-perf can have made [{lo}, {hi:.0}]\n{run}"
    );
    assert_eq!(
        gt_bytes,
        gt_reads * IO_BYTES,
        "every READ of iscsi-perf is 4096 bytes"
    );

    // per-node hit-ratio inputs and locality counters, for every node
    let numa_nodes: usize = after
        .matching("numatgt_build_info", &[])
        .next()
        .and_then(|s| s.labels.get("numa_nodes"))
        .and_then(|n| n.parse().ok())
        .expect("numatgt_build_info{numa_nodes} in /metrics");
    assert_eq!(numa_nodes, 2, "started with --numa-nodes 2");
    let all: BTreeSet<String> = (0..numa_nodes).map(|n| n.to_string()).collect();
    for expr in [
        r#"numatgt_cache_hits_total{job="numatgt"}"#,
        r#"numatgt_cache_misses_total{job="numatgt"}"#,
        r#"numatgt_served_bytes_total{job="numatgt",locality="local"}"#,
        r#"numatgt_served_bytes_total{job="numatgt",locality="remote"}"#,
    ] {
        assert_eq!(nodes_of(&prom, expr), all, "{expr}: one series per node");
    }
    let lookups = |e: &Exposition| {
        e.sum("numatgt_cache_hits_total", &[]) + e.sum("numatgt_cache_misses_total", &[])
    };
    let p_lookups = prom.query(
        r#"sum(numatgt_cache_hits_total{job="numatgt"}) + sum(numatgt_cache_misses_total{job="numatgt"})"#,
    );
    assert_eq!(p_lookups.len(), 1);
    assert_eq!(
        p_lookups[0].value(),
        lookups(&after),
        "lookups: prometheus vs /metrics"
    );
    assert!(
        lookups(&after) > lookups(&before),
        "the reads went through the cache"
    );
    let served = prom.query(r#"sum(numatgt_served_bytes_total{job="numatgt"})"#);
    assert!(served[0].value() > 0.0, "bytes served from cache blocks");

    assert!(prom.stop(), "prometheus stopped cleanly on SIGTERM");
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.is_some_and(|s| s.success()), "numatgtd stopped: {st:?}");
}

/// (b) `promtool check metrics` accepts numatgtd's exposition after reads, writes and a
/// failed login: no errors, no lint warnings.
#[test]
fn promtool_accepts_the_exposition() {
    let _g = load_lock();
    tools::require_tool("iscsi-perf");
    let (d, maddr) = daemon_with_metrics(&[LunSpec::new(1, 512, 64 * MIB)]);
    let _ = iscsi_perf(&d.url(1), 2);
    tools::run(
        30,
        "qemu-io",
        [
            "-f",
            "raw",
            "-c",
            "write -P 0x5a 0 1M",
            "-c",
            "flush",
            &d.url(1),
        ],
    )
    .check("qemu-io write");
    let wrong = format!("iscsi://127.0.0.1:{}/{TEST_IQN}-nonexistent/1", d.port);
    let _ = tools::run(30, "iscsi-inq", [wrong.as_str()]);
    let (text, exp) = scrape(maddr);
    assert!(
        exp.sum("numatgt_lun_writes_completed_total", &[]) > 0.0,
        "writes counted"
    );
    let lint = promtool_check_metrics(&text);
    lint.check("promtool check metrics on numatgtd's /metrics");
    assert!(
        lint.stdout.trim().is_empty() && lint.stderr.trim().is_empty(),
        "promtool lint problems in numatgtd's /metrics:\n{lint}"
    );
}

/// (c) The dashboard against a live numatgtd: every metric name is in its /metrics and every
/// expression is accepted by a Prometheus scraping it.
#[test]
fn dashboard_matches_a_live_numatgtd() {
    let _g = load_lock();
    tools::require_tool("iscsi-perf");
    let (d, maddr) = daemon_with_metrics(&[LunSpec::new(1, 512, 64 * MIB)]);
    // a QoS limit (far above what the load asks) so that the QoS row has its series
    tests::mgmt::update_lun1(&d, "qos_iops=10000000").check("tgtadm qos_iops");
    let prom = Prometheus::start(&[ScrapeTarget::new("numatgt", maddr)]);
    prom.wait_up(Duration::from_secs(20));
    let _ = iscsi_perf(&d.url(1), 2);
    let (_, exp) = scrape(maddr);
    prom.wait_sample_after(
        r#"numatgt_lun_reads_completed_total{job="numatgt"}"#,
        unix_now(),
        Duration::from_secs(10),
    );
    check_dashboard(&exp, &prom);
    let start = Instant::now();
    // with data: the stat queries return a value for this daemon
    for expr in [
        r#"sum(numatgt_targets{instance=~".*"})"#,
        r#"sum(numatgt_luns{instance=~".*"})"#,
        r#"sum(numatgt_lun_capacity_bytes{instance=~".*", target=~".*", lun=~".*"})"#,
    ] {
        let r = prom.query(expr);
        assert!(
            r.len() == 1 && r[0].value() > 0.0,
            "{expr}: {r:?} ({:?})",
            start.elapsed()
        );
    }
}
