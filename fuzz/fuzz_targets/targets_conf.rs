//! tgt's targets.conf import: `config::targets_conf::import_str` on arbitrary text (the
//! Config::General syntax, `<target>`/`<backing-store>` blocks, directives, `include`,
//! the tgt-admin semantics and the validation a YAML file gets), plus
//! `looks_like_targets_conf`. Non-UTF-8 input is decoded lossily. The text's origin is
//! `fuzz.conf` in a directory of its own holding `inc.conf` (a valid target) and
//! `bad.conf` (a broken block), so relative includes find something.
//!
//! Input: the text.
//!
//! Checks: no panic; an error renders as `FILE...`; an error about the text itself names
//! a line of it (or the one just past its end), lines counted as `str::lines` does (the
//! importer's reading); warnings are not empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn origin() -> &'static PathBuf {
    static O: OnceLock<PathBuf> = OnceLock::new();
    O.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("numatgt-fuzz-tconf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("sandbox dir");
        std::fs::write(
            dir.join("inc.conf"),
            "<target iqn.2026-11.org.numatgt:inc>\n    backing-store /dev/null\n    initiator-address ALL\n</target>\n",
        )
        .expect("inc.conf");
        std::fs::write(dir.join("bad.conf"), "<target iqn.2026-11.org.numatgt:bad>\n  <x\n")
            .expect("bad.conf");
        dir.join("fuzz.conf")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let origin = origin();
    let name = origin.display().to_string();
    let _ = config::targets_conf::looks_like_targets_conf(&text);
    match config::targets_conf::import_str(&text, origin) {
        Ok(imp) => {
            let _ = format!("{:?}", imp.config);
            for w in &imp.warnings {
                assert!(!w.is_empty(), "empty warning");
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                !e.file().is_empty() && msg.starts_with(e.file()),
                "error without its source: {msg}"
            );
            if let Some(line) = e.line().filter(|_| e.file() == name) {
                let lines = text.lines().count();
                assert!(
                    line >= 1 && line <= lines + 1,
                    "error at line {line} of a {lines}-line text: {msg}"
                );
            }
        }
    }
});
