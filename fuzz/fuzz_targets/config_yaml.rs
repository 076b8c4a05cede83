//! Configuration parsing: `config::parse` on arbitrary text (YAML syntax errors, wrong
//! types, out-of-range values, error location). Non-UTF-8 input is decoded lossily.
//!
//! Checks: no panic; an error renders and names the source; a located error points at a
//! line of the text (or just past its end), lines counted as YAML does (LF, CR LF, a lone
//! CR, NEL, LS and PS all end a line).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match config::parse(&text, "fuzz.yaml") {
        Ok(cfg) => {
            let _ = format!("{cfg:?}");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("fuzz.yaml"),
                "error without its source: {msg}"
            );
            if let Some(line) = e.line() {
                let lines = yaml_lines(&text);
                assert!(
                    line >= 1 && line <= lines + 1,
                    "error at line {line} of a {lines}-line text: {msg}"
                );
            }
        }
    }
});

/// Line count with YAML 1.1's line breaks (what libyaml reports positions in).
fn yaml_lines(text: &str) -> usize {
    let mut n = 1;
    let mut prev_cr = false;
    for c in text.chars() {
        match c {
            '\n' if prev_cr => {}
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => n += 1,
            _ => {}
        }
        prev_cr = c == '\r';
    }
    n
}
