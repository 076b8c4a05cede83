//! The shipped Prometheus alert rules (`tools/prometheus/numatgt-alerts.yml`, issue 28):
//! `promtool check rules` accepts them, their unit tests
//! (`tools/prometheus/numatgt-alerts.test.yml`) pass under `promtool test rules`, every alert
//! has a case where it fires and one where it does not, and every series they select is one
//! that a running numatgtd exports — metric names, label names and label values, read from a
//! real scrape of a daemon with a file LUN and an RBD LUN (on the project's throw-away Ceph
//! cluster) — so the rules cannot drift from the exporter.
//!
//! A missing `promtool` or Ceph is a FAILURE with the install hint.

use std::collections::{BTreeMap, BTreeSet};

use tests::cdb::cdb10;
use tests::ceph::Cluster;
use tests::daemon::{create_sparse, require_numatgtd};
use tests::pdu::ScsiSession;
use tests::prom::{Exposition, promql_metric_names, read_workspace_file};
use tests::{Daemon, MIB, TEST_IQN, tools};

const RULES: &str = "tools/prometheus/numatgt-alerts.yml";
const RULE_TESTS: &str = "tools/prometheus/numatgt-alerts.test.yml";
const SCRAPE_CONFIG: &str = "tools/prometheus/numatgt-scrape.yml";

/// Labels Prometheus gives every series of a scrape (not numatgtd's).
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// Labels whose values a daemon exports only once they happened: a sense key's series
/// appears with its first error. Their values are not looked for in the scrape.
const VALUES_AS_THEY_HAPPEN: [&str; 1] = ["sense_key"];

/// One alerting rule, as read from the rules file.
#[derive(Debug, Default)]
struct Rule {
    alert: String,
    expr: String,
    keys: BTreeMap<String, String>,
}

/// Indentation of `line`.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The alerting rules of `text`, a Prometheus rule file written as ours is: each rule a
/// list item starting `- alert: NAME`, its keys (`expr`, `for`, `labels`, `annotations` and
/// theirs) one per line, `expr` inline or a block scalar (`|`, `>-`, …) on the lines below.
/// Nested keys are recorded by their own name (`severity`, `summary`, `description`).
fn parse_rules(text: &str) -> Vec<Rule> {
    let lines: Vec<&str> = text.lines().collect();
    let mut rules: Vec<Rule> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        i += 1;
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(name) = t.strip_prefix("- alert:") {
            rules.push(Rule {
                alert: name.trim().to_string(),
                ..Rule::default()
            });
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            continue;
        };
        if t.starts_with("- ") {
            // the next list item of the group that is not an alert (a recording rule)
            continue;
        }
        let Some((key, value)) = t.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let block = value.starts_with('|') || value.starts_with('>');
        let text = if block {
            // the block scalar: every following line indented deeper (or blank)
            let mut body = Vec::new();
            while i < lines.len() && (lines[i].trim().is_empty() || indent(lines[i]) > indent(line))
            {
                body.push(lines[i].trim());
                i += 1;
            }
            body.join("\n").trim().to_string()
        } else {
            value.trim_matches('"').to_string()
        };
        if key == "expr" {
            rule.expr = text;
        } else {
            rule.keys.insert(key.to_string(), text);
        }
    }
    rules
}

/// Per alert name of the unit tests: (cases where it fires, cases where it does not).
fn unit_test_cases(text: &str) -> BTreeMap<String, (usize, usize)> {
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim().trim_start_matches("- "))
        .collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(name) = l.strip_prefix("alertname:") else {
            continue;
        };
        let exp = lines[i + 1..]
            .iter()
            .find(|l| l.starts_with("exp_alerts:"))
            .unwrap_or_else(|| panic!("{RULE_TESTS}: no exp_alerts after alertname {name}"));
        let c = cases.entry(name.trim().to_string()).or_default();
        if exp.trim_end() == "exp_alerts: []" {
            c.1 += 1;
        } else {
            c.0 += 1;
        }
    }
    cases
}

/// A label matcher of a selector: label, operator (`=`, `!=`, `=~`, `!~`), value.
type Matcher = (String, String, String);

/// The selectors `name{matchers}` of a PromQL expression (selectors without braces have no
/// matchers to check; their names are found by `promql_metric_names`).
fn selectors(expr: &str) -> Vec<(String, Vec<Matcher>)> {
    let b: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let is_part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < b.len() {
        if b[i] == '"' {
            i = string_end(&b, i);
        } else if is_part(b[i]) {
            let start = i;
            while i < b.len() && is_part(b[i]) {
                i += 1;
            }
            if b.get(i) == Some(&'{') {
                let name: String = b[start..i].iter().collect();
                let mut matchers = Vec::new();
                i += 1;
                while i < b.len() && b[i] != '}' {
                    if b[i] == ',' || b[i].is_whitespace() {
                        i += 1;
                        continue;
                    }
                    let l0 = i;
                    while i < b.len() && is_part(b[i]) {
                        i += 1;
                    }
                    let label: String = b[l0..i].iter().collect();
                    while i < b.len() && b[i].is_whitespace() {
                        i += 1;
                    }
                    let o0 = i;
                    while i < b.len() && matches!(b[i], '=' | '!' | '~') {
                        i += 1;
                    }
                    let op: String = b[o0..i].iter().collect();
                    while i < b.len() && b[i].is_whitespace() {
                        i += 1;
                    }
                    assert_eq!(
                        b.get(i),
                        Some(&'"'),
                        "matcher {label}{op} of {name}: a quoted value expected in {expr}"
                    );
                    let end = string_end(&b, i);
                    let value: String = b[i + 1..end - 1].iter().collect();
                    matchers.push((label, op, value));
                    i = end;
                }
                out.push((name, matchers));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Index just past the string that starts at `open` (a double quote).
fn string_end(b: &[char], open: usize) -> usize {
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The job name of the example scrape configuration.
fn scrape_job() -> String {
    let text = read_workspace_file(SCRAPE_CONFIG);
    let jobs: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- job_name:"))
        .map(str::trim)
        .collect();
    assert_eq!(jobs.len(), 1, "{SCRAPE_CONFIG}: one job expected: {jobs:?}");
    jobs[0].to_string()
}

fn rules() -> Vec<Rule> {
    let rules = parse_rules(&read_workspace_file(RULES));
    assert!(
        rules.len() >= 10,
        "{RULES}: only {} alerts read",
        rules.len()
    );
    rules
}

/// `promtool check rules` accepts the file (and finds as many rules as read here), and
/// `promtool test rules` passes every unit test.
#[test]
fn promtool_checks_and_tests_the_rules() {
    tools::require_tool("promtool");
    let root = tests::workspace_root();
    let rules_path = root.join(RULES);
    let check = tools::run(
        60,
        "promtool",
        ["check", "rules", rules_path.to_str().expect("utf-8 path")],
    );
    check.check("promtool check rules");
    let n = rules().len();
    assert!(
        check.stdout.contains(&format!("SUCCESS: {n} rules found")),
        "promtool counts other rules than the {n} alerts read here:\n{check}"
    );
    let tests_path = root.join(RULE_TESTS);
    let run = tools::run(
        120,
        "promtool",
        ["test", "rules", tests_path.to_str().expect("utf-8 path")],
    );
    run.check("promtool test rules");
    assert!(run.stdout.contains("SUCCESS"), "{run}");
    eprintln!("{}{}", check.stdout, run.stdout);
}

/// Every alert has what an alert needs (`for`, a severity, a summary and a description)
/// and unit tests where it fires and where it does not; the unit tests name no other alert.
#[test]
fn every_alert_is_complete_and_tested_both_ways() {
    let rules = rules();
    let cases = unit_test_cases(&read_workspace_file(RULE_TESTS));
    let mut problems = Vec::new();
    let names: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    assert_eq!(names.len(), rules.len(), "an alert name used twice");
    for r in &rules {
        if r.expr.is_empty() {
            problems.push(format!("{}: no expr", r.alert));
        }
        for key in ["for", "summary", "description"] {
            if r.keys.get(key).is_none_or(|v| v.is_empty()) {
                problems.push(format!("{}: no {key}", r.alert));
            }
        }
        match r.keys.get("severity").map(String::as_str) {
            Some("critical" | "warning") => {}
            s => problems.push(format!("{}: severity {s:?}", r.alert)),
        }
        match cases.get(&r.alert) {
            Some(&(firing, quiet)) if firing > 0 && quiet > 0 => {}
            c => problems.push(format!(
                "{}: unit tests (firing, quiet) = {c:?}, want both",
                r.alert
            )),
        }
    }
    for name in cases.keys() {
        if !names.contains(name.as_str()) {
            problems.push(format!("{RULE_TESTS} tests {name}, which is no alert"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The YAML of a daemon with LUN 1 on `file` and LUN 2 on the image `rbd/alerts` of `c`.
fn daemon_yaml(port: u16, file: &std::path::Path, c: &Cluster) -> String {
    format!(
        "portals:\n  - address: 127.0.0.1:{port}\ncache:\n  size_per_node: 64M\n\
         targets:\n  - iqn: {TEST_IQN}\n    luns:\n      - lun: 1\n        path: {}\n      \
         - lun: 2\n        bs_type: rbd\n        path: rbd/alerts\n        bsopts: \"{}\"\n",
        file.display(),
        c.bsopts("")
    )
}

/// Every series the alert expressions select is in a scrape of a running numatgtd: the
/// metric names, the label names of their matchers, and the label values they ask for
/// (those of `=` and of `=~` alternatives of plain words). `up` is Prometheus' own series
/// of a scrape: its job must be the example scrape configuration's.
#[test]
fn alert_expressions_select_what_numatgtd_exports() {
    require_numatgtd("alert_expressions_select_what_numatgtd_exports");
    let cluster = Cluster::start();
    cluster.create_image("alerts", 16 * MIB);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("lun1.img");
    create_sparse(&file, 16 * MIB);
    let d = Daemon::start_numatgtd_yaml(&|p| daemon_yaml(p, &file, &cluster));

    // a command that fails, so that the error counter has a series: READ past the end
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:alert-rules");
    s.lun = 1;
    for _ in 0..2 {
        let (st, _, _) = s.command(&cdb10(0x28, 1 << 30, 1), &[], 512);
        assert_eq!(st, 2, "READ past the end of LUN 1 ends in CHECK CONDITION");
    }
    drop(s);

    let (code, body) = d
        .http_get("/metrics")
        .unwrap_or_else(|e| panic!("GET /metrics: {e}\n{}", d.log_tail(30)));
    assert_eq!(code, 200, "GET /metrics: {body}");
    let exp = Exposition::parse(&body);
    let job = scrape_job();

    let mut problems = Vec::new();
    let mut checked = BTreeSet::new();
    for r in rules() {
        let names = promql_metric_names(&r.expr);
        assert!(!names.is_empty(), "{}: no metric in {:?}", r.alert, r.expr);
        for n in &names {
            if n == "up" {
                continue;
            }
            checked.insert(n.clone());
            if !exp.exports(n) {
                problems.push(format!("{}: {n} is not exported", r.alert));
            }
        }
        for (name, matchers) in selectors(&r.expr) {
            if name == "up" {
                let want = ("job".to_string(), "=".to_string(), job.clone());
                if !matchers.contains(&want) {
                    problems.push(format!(
                        "{}: up must select job=\"{job}\" (the job of {SCRAPE_CONFIG}): {matchers:?}",
                        r.alert
                    ));
                }
                continue;
            }
            let samples: Vec<_> = exp.samples.iter().filter(|s| s.name == name).collect();
            for (label, op, value) in matchers {
                if TARGET_LABELS.contains(&label.as_str()) {
                    continue;
                }
                let values: BTreeSet<&str> = samples
                    .iter()
                    .filter_map(|s| s.labels.get(&label).map(String::as_str))
                    .collect();
                if values.is_empty() {
                    problems.push(format!("{}: {name} has no label {label}", r.alert));
                    continue;
                }
                let plain = value.split('|').all(|v| {
                    !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                if !matches!(op.as_str(), "=" | "=~")
                    || !plain
                    || VALUES_AS_THEY_HAPPEN.contains(&label.as_str())
                {
                    continue;
                }
                for v in value.split('|') {
                    if !values.contains(v) {
                        problems.push(format!(
                            "{}: {name}{{{label}=\"{v}\"}} is not exported (values: {values:?})",
                            r.alert
                        ));
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "alert rules and numatgtd's /metrics disagree:\n{}\n--- /metrics:\n{body}",
        problems.join("\n")
    );
    for must in [
        "numatgt_lun_errors_total",
        "numatgt_lun_rbd_op_errors_total",
        "numatgt_lun_alua_state",
        "numatgt_cache_dirty_limit_bytes",
    ] {
        assert!(checked.contains(must), "the rules no longer use {must}?");
    }
    // the dirty limit the backlog alert divides by: the default 25 % of the node's cache
    for s in exp
        .samples
        .iter()
        .filter(|s| s.name == "numatgt_cache_dirty_limit_bytes")
    {
        let node = s.labels.get("node").cloned().unwrap_or_default();
        let cap = exp.sum("numatgt_cache_capacity_bytes", &[("node", node.as_str())]);
        assert_eq!(s.value, (64 * MIB / 4) as f64, "node {node}'s dirty limit");
        assert!(
            s.value <= cap,
            "node {node}: dirty limit {} over the cache's {cap}",
            s.value
        );
    }
    eprintln!(
        "alert rules: {} metric names, all exported by numatgtd: {checked:?}",
        checked.len()
    );
}

/// The readers above, on a small example of each shape.
#[test]
fn rule_file_readers_read_what_they_must() {
    let text = "groups:\n  - name: g\n    rules:\n      # a comment\n      - alert: A\n        \
                expr: up{job=\"x\"} == 0\n        for: 2m\n        labels:\n          \
                severity: critical\n        annotations:\n          summary: \"s\"\n          \
                description: >-\n            one\n            two\n      - alert: B\n        \
                expr: |\n          rate(m_total{a=~\"p|q\", b!=\"r\"}[5m])\n          > 0\n        \
                for: 1m\n";
    let r = parse_rules(text);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].alert.as_str(), r[0].expr.as_str()),
        ("A", "up{job=\"x\"} == 0")
    );
    assert_eq!(r[0].keys["severity"], "critical");
    assert_eq!(r[0].keys["description"], "one\ntwo");
    assert_eq!(r[1].expr, "rate(m_total{a=~\"p|q\", b!=\"r\"}[5m])\n> 0");
    assert_eq!(
        selectors(&r[1].expr),
        vec![(
            "m_total".to_string(),
            vec![
                ("a".into(), "=~".into(), "p|q".into()),
                ("b".into(), "!=".into(), "r".into())
            ]
        )]
    );
    let cases = unit_test_cases(
        "      - alertname: A\n        exp_alerts: []\n      - alertname: A\n        \
         exp_alerts:\n          - exp_labels: {}\n",
    );
    assert_eq!(cases["A"], (1, 1));
}
