//! numatgt's configuration: the YAML file format, its validation and the
//! model the daemon runs from.
//!
//! [`parse`] takes the text of a configuration file (the caller reads the
//! file) and the file's name for messages, and returns a validated [`Config`]
//! or the first problem as a [`ConfigError`] that names the file, line,
//! column and field path:
//!
//! ```text
//! demo.yaml:14:9: targets[0].luns[1].block_size: must be 512 or 4096 (got 1000)
//! ```
//!
//! [`targets_conf`] imports tgt's `/etc/tgt/targets.conf` into the same model,
//! [`load`] reads a file in either format, and [`diff`] compares two
//! configurations for a reload.
//!
//! The only I/O is reading configuration files ([`load`], the targets.conf
//! importer and its includes); [`parse`] reads nothing. Nothing is started, no
//! clock or network is used. See `docs/configuration.md` for the file formats.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod alua;
mod auth;
mod diff;
mod error;
mod kinds;
mod locate;
mod model;
mod names;
mod net;
mod qos;
mod raw;
mod size;
pub mod targets_conf;
mod validate;
mod validate_auth;

pub use alua::{AluaConfig, AluaPeer, NonOwnerState};
pub use auth::{CHAP_FIELD_MAX, CHAP_SECRET_RECOMMENDED_MIN};
pub use diff::{ConfigDiff, TargetChange, diff};
pub use error::ConfigError;
pub use model::{
    AUTO_CACHE_MIN, Account, AddressRule, BsOflags, BsType, CacheMemory, CacheMode, CacheSettings,
    CacheSize, Config, DEFAULT_METRICS_ADDR, DEFAULT_PORTAL, DEMO_IMAGE, DEMO_IQN, DEMO_PORTAL,
    DEMO_SIZE, DeviceType, Digest, DirtyLimit, DiscoveryAuth, Driver, IoEngine, IscsiParams,
    IscsiParamsOverride, LimitsSettings, LunConfig, MetricsAddress, MetricsSettings, NumaConfig,
    PortalConfig, RouterSettings, SenseFormat, TargetConfig, TargetState, ThreadConfig,
};
pub use names::{MAX_NAME_LEN, validate_iscsi_name};
pub use net::{ISCSI_PORT, parse_portal_addr};
pub use qos::{DEFAULT_BURST_PERCENT, QOS_PARAMS, Qos, qos_params, set_qos_param};
pub use size::{format_size, parse_size};
pub use targets_conf::Imported;
pub use validate::CHANGER_KEYS;
pub use validate::limits;

/// Parses and validates a configuration file's text. `source` is the file
/// name used in error messages. An empty (or comments-only) text is the
/// default configuration: portal `0.0.0.0:3260`, no targets.
pub fn parse(text: &str, source: &str) -> Result<Config, ConfigError> {
    parse_yaml(text, source)
}

/// Reads the configuration file at `path`: tgt's targets.conf syntax when the
/// name ends in `.conf` or the text looks like it (its first meaningful line
/// is a `<target ...>` block, an `include` or another targets.conf global
/// directive), YAML otherwise. The warnings are the importer's plus
/// [`Config::warnings`].
pub fn load(path: &std::path::Path) -> Result<Imported, ConfigError> {
    let name = path.display().to_string();
    let is_conf = path.extension().is_some_and(|e| e == "conf");
    if is_conf {
        return targets_conf::import(path);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&name, None, None, "", format!("cannot read: {e}")))?;
    if targets_conf::looks_like_targets_conf(&text) {
        return targets_conf::import_str(&text, path);
    }
    let config = parse_yaml(&text, &name)?;
    let warnings = config.warnings();
    Ok(Imported { config, warnings })
}

fn parse_yaml(text: &str, source: &str) -> Result<Config, ConfigError> {
    let raw: Option<raw::RawConfig> =
        serde_yaml::from_str(text).map_err(|e| ConfigError::from_yaml(text, source, &e))?;
    let ctx = validate::Ctx {
        text,
        file: source,
        conf: None,
    };
    validate::build(&ctx, raw.unwrap_or_default())
}
