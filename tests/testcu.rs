//! Parsing `iscsi-test-cu` (CUnit, verbose mode) output into per-test outcomes. CUnit counts
//! `[SKIPPED]` tests as passed, so pass / skip / fail are told apart here from the per-test
//! lines: `  Test: NAME ...passed`, `  Test: NAME ...    [SKIPPED] why\npassed`,
//! `  Test: NAME ...FAILED\n    1. file.c:98  - CU_ASSERT...`.

use std::fmt;

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
