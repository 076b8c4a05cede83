//! numatgtd's metrics endpoint seen by a real Prometheus (Debian's `prometheus` 2.42, started
//! by PID on a free loopback port with its TSDB in a temp dir; never the packaged service),
//! `promtool check metrics` on a live exposition, and the shipped Grafana dashboard
//! (`tools/grafana/numatgt-dashboard.json`) and scrape config
//! (`tools/prometheus/numatgt-scrape.yml`) checked against a running numatgtd and Prometheus.
//!
//! A missing `prometheus` / `promtool` / `iscsi-perf` is a FAILURE with the install hint.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tests::TEST_IQN;
use tests::prom::{
    Exposition, Prometheus, ScrapeTarget, StaticExporter, dashboard_queries, promql_metric_names,
    promtool_check_metrics, read_workspace_file, substitute_variables, variable_promql,
};
use tests::tools;

const DASHBOARD: &str = "tools/grafana/numatgt-dashboard.json";
const SCRAPE_CONFIG: &str = "tools/prometheus/numatgt-scrape.yml";
const FIXTURE: &str = "tests/fixtures/numatgt-metrics.prom";

/// The load test measures rates: the other tests of this file wait while it runs.
static LOAD: Mutex<()> = Mutex::new(());

fn load_lock() -> std::sync::MutexGuard<'static, ()> {
    LOAD.lock().unwrap_or_else(|p| p.into_inner())
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

/// Every metric name of every dashboard query is exported by `exp`, and every query (with
/// the template variables substituted) parses and evaluates on the real Prometheus.
fn check_dashboard(exp: &Exposition, prom: &Prometheus) {
    let dash: Value = serde_json::from_str(&read_workspace_file(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let queries = dashboard_queries(&dash);
    assert!(queries.len() > 20, "only {} queries found", queries.len());
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
        missing.is_empty(),
        "dashboard metrics not exported by /metrics:\n{}",
        missing.join("\n")
    );
    assert!(
        failed.is_empty(),
        "dashboard expressions Prometheus refused:\n{}",
        failed.join("\n")
    );
    eprintln!(
        "dashboard: {} queries, {} metric names, all exported and accepted by Prometheus",
        queries.len(),
        names_seen.len()
    );
}
