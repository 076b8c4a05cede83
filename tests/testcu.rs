//! Parsing `iscsi-test-cu` (CUnit, verbose mode) output into per-test outcomes. CUnit counts
//! `[SKIPPED]` tests as passed, so pass / skip / fail are told apart here from the per-test
//! lines: `  Test: NAME ...passed`, `  Test: NAME ...    [SKIPPED] why\npassed`,
//! `  Test: NAME ...FAILED\n    1. file.c:98  - CU_ASSERT...`.

use std::fmt;
use std::fmt::Write as _;

use crate::Daemon;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Skip,
    Fail,
    /// No verdict (the tool crashed or was killed mid-test): counted as a failure.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct TestCase {
    pub suite: String,
    pub name: String,
    pub outcome: Outcome,
    /// Skip reason / failure details as printed.
    pub detail: String,
}

impl TestCase {
    /// The detail text on one line, cut to at most `max` characters.
    pub fn short_detail(&self, max: usize) -> String {
        let one_line = self.detail.replace('\n', " | ");
        match one_line.char_indices().nth(max) {
            Some((i, _)) => format!("{} ...", &one_line[..i]),
            None => one_line,
        }
    }
}

/// Per-suite counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub pass: usize,
    pub skip: usize,
    pub fail: usize,
}

impl Counts {
    pub fn of(cases: &[TestCase]) -> Counts {
        let mut c = Counts::default();
        for t in cases {
            match t.outcome {
                Outcome::Pass => c.pass += 1,
                Outcome::Skip => c.skip += 1,
                Outcome::Fail | Outcome::Unknown => c.fail += 1,
            }
        }
        c
    }
    pub fn total(&self) -> usize {
        self.pass + self.skip + self.fail
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pass / {} skip / {} fail",
            self.pass, self.skip, self.fail
        )
    }
}

/// The verdict of one test from the text CUnit printed after `Test: NAME ...`. CUnit writes
/// `passed` or `FAILED` at the start of a line (or right after the `...`); libiscsi's own
/// messages are indented (`    [SKIPPED] why`, `    [FAILED] why`). The test was skipped when a
/// `[SKIPPED]` message came BEFORE its verdict; messages after the verdict come from
/// teardown / suite cleanup and do not belong to the test.
fn verdict(block: &str) -> Outcome {
    let mut skipped = false;
    for line in block.lines() {
        if line.starts_with("passed") {
            return if skipped {
                Outcome::Skip
            } else {
                Outcome::Pass
            };
        }
        if line.starts_with("FAILED") {
            return Outcome::Fail;
        }
        skipped |= line.contains("[SKIPPED]");
    }
    Outcome::Unknown
}

/// Parses the whole stdout of one or more suites.
pub fn parse(output: &str) -> Vec<TestCase> {
    let mut cases = Vec::new();
    let mut suite = String::new();
    let mut cur: Option<(String, String)> = None; // (name, text after "Test: NAME ...")
    let finish = |cur: &mut Option<(String, String)>, suite: &str, cases: &mut Vec<TestCase>| {
        if let Some((name, text)) = cur.take() {
            cases.push(TestCase {
                suite: suite.to_string(),
                name,
                outcome: verdict(&text),
                detail: text.trim().to_string(),
            });
        }
    };
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix("Suite: ") {
            finish(&mut cur, &suite, &mut cases);
            suite = rest.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("  Test: ") {
            finish(&mut cur, &suite, &mut cases);
            let (name, after) = match rest.find(" ...") {
                Some(i) => (&rest[..i], &rest[i + 4..]),
                None => (rest, ""),
            };
            cur = Some((name.trim().to_string(), format!("{after}\n")));
        } else if line.starts_with("Run Summary:") {
            finish(&mut cur, &suite, &mut cases);
        } else if let Some((_, text)) = cur.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    finish(&mut cur, &suite, &mut cases);
    cases
}

/// Per-suite timeout: the whole selection takes seconds against a healthy target.
pub const SUITE_TIMEOUT_S: u64 = 180;

/// One suite's run: its counts, exit status, cases and what is wrong with it.
pub struct SuiteResult {
    pub suite: String,
    pub counts: Counts,
    pub exit: String,
    pub cases: Vec<TestCase>,
    pub problems: Vec<String>,
}

/// `iscsi-test-cu -d -t SUITE` against LUN 1 of `d` (its logs in target/test-reports/).
pub fn run_suite(d: &mut Daemon, suite: &str, report_name: &str, two_urls: bool) -> SuiteResult {
    run_suite_with(d, suite, report_name, &[], two_urls)
}

/// [`run_suite`] with extra iscsi-test-cu flags (`-S`: allow SANITIZE), with one URL or two.
pub fn run_suite_with(
    d: &mut Daemon,
    suite: &str,
    report_name: &str,
    flags: &[&str],
    two_urls: bool,
) -> SuiteResult {
    let url = d.url(1);
    // two URLs to the same LUN: the suites that need a second I_T nexus (reservations,
    // multipath) use it, the others ignore it; with one URL a test that needs a second
    // nexus logs one in for itself
    let urls = if two_urls {
        vec![url.clone(), url]
    } else {
        vec![url]
    };
    run_suite_urls(d, suite, report_name, flags, &urls)
}

/// [`run_suite_with`] against `urls` (the second one, when given, is the path the suites
/// that need a second I_T nexus use: another gateway of the same LU, say); `d` serves the
/// first.
pub fn run_suite_urls(
    d: &mut Daemon,
    suite: &str,
    report_name: &str,
    flags: &[&str],
    urls: &[String],
) -> SuiteResult {
    let url = urls.first().cloned().unwrap_or_else(|| d.url(1));
    let mut args: Vec<&str> = vec!["-d"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["-t", suite]);
    args.extend(urls.iter().map(String::as_str));
    let r = crate::tools::run_no_sigpipe(SUITE_TIMEOUT_S, "iscsi-test-cu", &args);
    let log = crate::reports_dir().join(format!("{report_name}-{suite}.log"));
    std::fs::write(&log, format!("{r}")).expect("write suite log");
    let cases = parse(&r.stdout);
    let counts = Counts::of(&cases);
    let mut problems = Vec::new();
    if r.timed_out() {
        problems.push(format!("timed out after {SUITE_TIMEOUT_S}s"));
    }
    if cases.is_empty() {
        problems.push("no test results parsed".into());
    }
    if counts.fail > 0 {
        let names: Vec<String> = cases
            .iter()
            .filter(|t| matches!(t.outcome, Outcome::Fail | Outcome::Unknown))
            .map(|t| format!("{}.{}: {}", t.suite, t.name, t.short_detail(600)))
            .collect();
        problems.push(format!("failed: {}", names.join("; ")));
        // a SCSI-verbose rerun for whoever fixes it
        let mut vargs: Vec<&str> = vec!["-d", "-V"];
        vargs.extend_from_slice(flags);
        vargs.extend_from_slice(&["-t", suite, url.as_str()]);
        let v = crate::tools::run(SUITE_TIMEOUT_S, "iscsi-test-cu", &vargs);
        let vlog = crate::reports_dir().join(format!("{report_name}-{suite}.verbose.log"));
        std::fs::write(&vlog, format!("{v}")).expect("write verbose suite log");
        problems.push(format!("verbose log: {}", vlog.display()));
    }
    if counts.pass == 0 {
        problems.push("no test passed cleanly (all skipped?)".into());
    }
    // CUnit's exit status must agree with the parsed failures
    if (counts.fail == 0) != r.status.success() && !r.timed_out() {
        problems.push(format!(
            "exit status {} disagrees with parsed counts {counts}",
            r.status
        ));
    }
    d.assert_alive(&format!("after iscsi-test-cu {suite}"));
    SuiteResult {
        suite: suite.to_string(),
        counts,
        exit: r.status.code().map_or("signal".into(), |c| c.to_string()),
        cases,
        problems,
    }
}

/// The per-suite table (pass / skip / fail, exit status) and every skip's reason.
pub fn table(results: &[SuiteResult], kind: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "iscsi-test-cu -d per suite, target {kind}:");
    let _ = writeln!(
        t,
        "{:<24} {:>5} {:>5} {:>5} {:>5}  exit",
        "suite", "pass", "skip", "fail", "total"
    );
    let mut sum = Counts::default();
    for r in results {
        let _ = writeln!(
            t,
            "{:<24} {:>5} {:>5} {:>5} {:>5}  {}",
            r.suite,
            r.counts.pass,
            r.counts.skip,
            r.counts.fail,
            r.counts.total(),
            r.exit
        );
        sum.pass += r.counts.pass;
        sum.skip += r.counts.skip;
        sum.fail += r.counts.fail;
    }
    let _ = writeln!(
        t,
        "{:<24} {:>5} {:>5} {:>5} {:>5}",
        "TOTAL",
        sum.pass,
        sum.skip,
        sum.fail,
        sum.total()
    );
    for r in results {
        for c in r.cases.iter().filter(|c| c.outcome == Outcome::Skip) {
            let why = c
                .detail
                .lines()
                .find(|l| l.contains("[SKIPPED]"))
                .unwrap_or("")
                .trim();
            let _ = writeln!(t, "  skip {}.{}: {why}", c.suite, c.name);
        }
    }
    t
}

/// Writes the table of `results` to target/test-reports/REPORT.txt, prints it, and fails
/// the test with every suite's problems, if any.
pub fn assert_clean(results: &[SuiteResult], kind: &str, report: &str) {
    let t = table(results, kind);
    let path = crate::reports_dir().join(format!("{report}.txt"));
    std::fs::write(&path, &t).expect("write suite table");
    eprintln!("{t}(also in {})", path.display());
    let problems: Vec<String> = results
        .iter()
        .flat_map(|r| r.problems.iter().map(move |p| format!("{}: {p}", r.suite)))
        .collect();
    assert!(
        problems.is_empty(),
        "iscsi-test-cu problems:\n{}\n{t}",
        problems.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
Suite: Inquiry
  Test: Standard ...passed
  Test: BlockLimits ...    [SKIPPED] Logical unit is fully provisioned. Skipping test
passed
  Test: Simple ...passed    [SKIPPED] PERSISTENT RESERVE IN is not implemented.

  Test: Noisy ...    [FAILED] something odd
passed
  Test: Broken ...FAILED
    1. test_x.c:98  - CU_ASSERT_NOT_EQUAL(ret,0) passed
  Test: Crashed ...
Run Summary:    Type  Total    Ran Passed Failed Inactive
";

    #[test]
    fn parses_pass_skip_fail_unknown() {
        let c = parse(SAMPLE);
        let got: Vec<(&str, Outcome)> = c.iter().map(|t| (t.name.as_str(), t.outcome)).collect();
        assert_eq!(
            got,
            vec![
                ("Standard", Outcome::Pass),
                ("BlockLimits", Outcome::Skip),
                ("Simple", Outcome::Pass),
                ("Noisy", Outcome::Pass),
                ("Broken", Outcome::Fail),
                ("Crashed", Outcome::Unknown),
            ]
        );
        assert!(c.iter().all(|t| t.suite == "Inquiry"));
        assert_eq!(
            Counts::of(&c),
            Counts {
                pass: 3,
                skip: 1,
                fail: 2
            }
        );
    }
}
