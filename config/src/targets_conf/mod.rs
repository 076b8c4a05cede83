//! Import of tgt's `/etc/tgt/targets.conf` (the Config::General file that
//! `tgt-admin` reads) into a [`Config`]. Owns the mapping of tgt-admin's
//! semantics (LUN numbering, tids, target-level LUN defaults, CHAP accounts,
//! `params`, `mode_page`, `include`) onto the YAML model; the result passes
//! the same validation as a YAML file and its errors read
//! `FILE:LINE: directive: problem`. Reads the file and its includes; nothing
//! else.

mod glob;
mod interp;
mod locations;
mod luns;
mod syntax;

use std::path::Path;

pub(crate) use locations::Locations;
pub use luns::{ModePage, mode_page_wce};

use crate::error::ConfigError;
use crate::model::Config;
use crate::raw::RawConfig;
use crate::validate;

/// An imported (or loaded) configuration with the warnings about what was
/// accepted but has no effect, or is advised against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The configuration, validated as a YAML file would be.
    pub config: Config,
    /// One line each, `FILE:LINE: directive: what happened`.
    pub warnings: Vec<String>,
}

/// Reads and imports the targets.conf at `path` (and the files it includes).
pub fn import(path: &Path) -> Result<Imported, ConfigError> {
    let text = syntax::read_file(path).map_err(|m| {
        ConfigError::new(
            &path.display().to_string(),
            None,
            None,
            "",
            format!("cannot read: {m}"),
        )
    })?;
    import_str(&text, path)
}

/// Imports targets.conf `text`; `origin` is its file name, used in messages
/// and as the directory relative `include` patterns start from.
pub fn import_str(text: &str, origin: &Path) -> Result<Imported, ConfigError> {
    let mut reader = syntax::Reader::new();
    let nodes = reader.parse_text(text, origin)?;
    let mut interp = interp::Interp::new(&origin.display().to_string());
    let raw = interp.run(&nodes)?;
    let mut warnings = reader.warnings;
    warnings.append(&mut interp.warnings);
    let ignore = interp.ignore_errors();
    let config = validate_raw(raw, &mut interp.locations, ignore, &mut warnings)?;
    warnings.extend(config.warnings());
    Ok(Imported { config, warnings })
}

/// Validates like a YAML file. With `ignore-errors yes`, a LUN or target that
/// fails validation is dropped with a warning and the rest is validated again.
fn validate_raw(
    mut raw: RawConfig,
    locs: &mut Locations,
    ignore: bool,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    loop {
        let origin = locs.origin.clone();
        let ctx = validate::Ctx {
            text: "",
            file: &origin,
            conf: Some(locs),
        };
        let e = match validate::build(&ctx, raw.clone()) {
            Ok(c) => return Ok(c),
            Err(e) => e,
        };
        let hit = if ignore {
            locs.take_last_path()
                .and_then(|p| locations::element_of(&p))
        } else {
            None
        };
        let targets = raw.targets.get_or_insert_with(Vec::new);
        match hit {
            Some((i, Some(j))) if i < targets.len() => {
                let luns = targets[i].luns.get_or_insert_with(Vec::new);
                if j >= luns.len() {
                    return Err(e);
                }
                warnings.push(format!(
                    "{e} (LUN {} skipped: ignore-errors yes)",
                    luns[j].lun
                ));
                luns.remove(j);
                locs.remove_lun(i, j);
            }
            Some((i, None)) if i < targets.len() => {
                warnings.push(format!(
                    "{e} (target {} skipped: ignore-errors yes)",
                    targets[i].iqn
                ));
                targets.remove(i);
                locs.remove_target(i);
            }
            _ => return Err(e),
        }
    }
}

/// True when `text` looks like a targets.conf rather than YAML: its first
/// meaningful line is a `<block>`, an `include` or a known global directive.
pub fn looks_like_targets_conf(text: &str) -> bool {
    let Some(line) = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
    else {
        return false;
    };
    if line.starts_with('<') {
        return true;
    }
    let (name, _) = syntax::split_directive(line);
    let name = name.to_ascii_lowercase();
    !name.ends_with(':')
        && matches!(
            name.as_str(),
            "include"
                | "default-driver"
                | "ignore-errors"
                | "control-port"
                | "incomingdiscoveryuser"
                | "outgoingdiscoveryuser"
                | "isns"
                | "isnsserverip"
                | "isnsserverport"
                | "isnsaccesscontrol"
        )
}
