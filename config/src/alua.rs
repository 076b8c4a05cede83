//! A target's ALUA settings: this gateway's target port group and relative target port, the
//! other gateways exporting the same target (their groups and ports), the state a LUN has on
//! the gateways that do not own it, and each LUN's owner group. The YAML form, its
//! validation and its model.

use serde::{Deserialize, Serialize};

/// Lowest and highest target port group / relative target port identifier (0 is reserved).
pub const ID_RANGE: (u64, u64) = (1, 65535);
/// Most peer gateways of one target.
pub const MAX_PEERS: usize = 31;

/// ALUA settings of one target (YAML `alua:`). Without them a target is one group, its
/// port group 1, relative port 1, active/optimized for every LUN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AluaConfig {
    /// This gateway's target port group (also its iSCSI target portal group tag).
    pub group: u16,
    /// This gateway's relative target port identifier (default: `group`).
    pub relative_port: u16,
    /// The other gateways exporting the same target.
    pub peers: Vec<AluaPeer>,
    /// The access state of a LUN on the gateways that do not own it; `None`: by the LUN's
    /// kind ([`AluaConfig::non_owner_for`]).
    pub non_owner_state: Option<NonOwnerState>,
}

impl Default for AluaConfig {
    fn default() -> Self {
        AluaConfig {
            group: 1,
            relative_port: 1,
            peers: Vec::new(),
            non_owner_state: None,
        }
    }
}

impl AluaConfig {
    /// Every group of the target, this gateway's first, each with its relative port.
    pub fn groups(&self) -> Vec<AluaPeer> {
        let mut v = vec![AluaPeer {
            group: self.group,
            relative_port: self.relative_port,
        }];
        v.extend(self.peers.iter().copied());
        v
    }

    /// The group that owns a LUN whose `alua_owner` is `owner`: that group, or (unset) the
    /// lowest group of the target, which every gateway computes alike.
    pub fn owner_of(&self, owner: Option<u16>) -> u16 {
        owner.unwrap_or_else(|| {
            self.groups()
                .iter()
                .map(|g| g.group)
                .min()
                .unwrap_or(self.group)
        })
    }

    /// The non-owner state of a LUN: as configured, else standby for a LUN whose owner
    /// moves through a lock (`arbitrated`: RBD; taken over on SET TARGET PORT GROUPS, so
    /// probes of the other paths do not move it) and active/non-optimized for the others.
    pub fn non_owner_for(&self, arbitrated: bool) -> NonOwnerState {
        self.non_owner_state.unwrap_or(if arbitrated {
            NonOwnerState::Standby
        } else {
            NonOwnerState::ActiveNonOptimized
        })
    }

    /// Whether `group` is one of the target's groups.
    pub fn has_group(&self, group: u16) -> bool {
        self.groups().iter().any(|g| g.group == group)
    }
}

/// Another gateway's target port group and relative target port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AluaPeer {
    /// Its target port group.
    pub group: u16,
    /// Its relative target port identifier.
    pub relative_port: u16,
}

/// The access state of a LUN on a gateway that does not own it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonOwnerState {
    /// Active/non-optimized: commands are served (write-through, uncached), an initiator
    /// uses the path when the owner's paths fail.
    ActiveNonOptimized,
    /// Standby: only INQUIRY, REPORT LUNS, mode and reservation commands and the like.
    Standby,
}

impl NonOwnerState {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NonOwnerState::ActiveNonOptimized => "active-non-optimized",
            NonOwnerState::Standby => "standby",
        }
    }

    /// Parses [`NonOwnerState::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "active-non-optimized" | "ano" => Some(NonOwnerState::ActiveNonOptimized),
            "standby" => Some(NonOwnerState::Standby),
            _ => None,
        }
    }
}

/// The target-level names under which tgtadm (`--mode target --op update --name N --value
/// V`) and targets.conf set a target's ALUA settings, in the order they are best given.
pub const TGTADM_NAMES: [&str; 4] = [
    "alua_group",
    "alua_relative_port",
    "alua_peers",
    "alua_non_owner_state",
];

impl AluaConfig {
    /// These settings with one tgtadm-style setting changed (`name` one of
    /// [`TGTADM_NAMES`], `_` and `-` alike, any case), validated as the YAML section is;
    /// `Err` says what is wrong, in words for the admin.
    ///
    /// - `alua_group N`: this gateway's target port group; the relative port follows it
    ///   when it was the group's number (its default), as in YAML.
    /// - `alua_relative_port N`: this gateway's relative target port.
    /// - `alua_peers G[:P],G[:P],...`: the other gateways (`P` defaults to `G`); `none` or
    ///   an empty value: no peers.
    /// - `alua_non_owner_state active-non-optimized|standby|auto`: `auto` is the default
    ///   by LUN kind.
    pub fn with_setting(&self, name: &str, value: &str) -> Result<AluaConfig, String> {
        let key = name.trim().to_ascii_lowercase().replace('-', "_");
        let Some(field) = key
            .strip_prefix("alua_")
            .filter(|_| TGTADM_NAMES.contains(&key.as_str()))
        else {
            return Err(format!(
                "{name}: not an ALUA setting (one of {})",
                TGTADM_NAMES.join(", ")
            ));
        };
        let mut raw = RawAlua::from_model(self);
        if field == "group" && self.relative_port == self.group {
            raw.relative_port = None; // it follows the group, as in YAML
        }
        set_raw(&mut raw, field, value)?;
        raw.validate(|field, msg| format!("alua {field}: {msg}"))
    }
}

/// Sets `field` (`group`, `relative_port`, `peers` as `G[:P],...` or `none`,
/// `non_owner_state` with `auto` for the default) of a YAML `alua:` section from its text
/// form, for tgtadm and targets.conf; the section is validated as a whole afterwards.
pub(crate) fn set_raw(raw: &mut RawAlua, field: &str, value: &str) -> Result<(), String> {
    let value = value.trim();
    let number = |what: &str, v: &str| -> Result<u64, String> {
        v.trim()
            .parse::<u64>()
            .map_err(|_| format!("alua {what}: not a number: {v:?}"))
    };
    match field {
        "group" => raw.group = Some(number("group", value)?),
        "relative_port" => raw.relative_port = Some(number("relative_port", value)?),
        "peers" => {
            let mut peers = Vec::new();
            if !(value.is_empty() || value.eq_ignore_ascii_case("none")) {
                for item in value.split(',') {
                    let (g, p) = match item.split_once(':') {
                        Some((g, p)) => (g, Some(p)),
                        None => (item, None),
                    };
                    peers.push(RawAluaPeer {
                        group: number("peers: group", g)?,
                        relative_port: p.map(|p| number("peers: relative port", p)).transpose()?,
                    });
                }
            }
            raw.peers = (!peers.is_empty()).then_some(peers);
        }
        "non_owner_state" => {
            raw.non_owner_state = match value.to_ascii_lowercase().as_str() {
                "auto" | "default" => None,
                _ => Some(value.to_string()),
            };
        }
        other => return Err(format!("alua {other}: no such setting")),
    }
    Ok(())
}

/// YAML `alua:` of a target.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAlua {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_port: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<Vec<RawAluaPeer>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_owner_state: Option<String>,
}

/// One entry of `alua.peers`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAluaPeer {
    pub group: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_port: Option<u64>,
}

impl RawAlua {
    /// The YAML form of `a`.
    pub(crate) fn from_model(a: &AluaConfig) -> RawAlua {
        RawAlua {
            group: Some(a.group.into()),
            relative_port: Some(a.relative_port.into()),
            peers: (!a.peers.is_empty()).then(|| {
                a.peers
                    .iter()
                    .map(|p| RawAluaPeer {
                        group: p.group.into(),
                        relative_port: Some(p.relative_port.into()),
                    })
                    .collect()
            }),
            non_owner_state: a.non_owner_state.map(|s| s.as_str().to_string()),
        }
    }

    /// Validates the section; `err(field, message)` builds the error for a field below
    /// `alua`.
    pub(crate) fn validate<E>(&self, err: impl Fn(&str, String) -> E) -> Result<AluaConfig, E> {
        let id = |field: &str, v: u64| -> Result<u16, E> {
            if (ID_RANGE.0..=ID_RANGE.1).contains(&v) {
                Ok(v as u16)
            } else {
                Err(err(
                    field,
                    format!("must be in {}..={} (got {v})", ID_RANGE.0, ID_RANGE.1),
                ))
            }
        };
        let group = id("group", self.group.unwrap_or(1))?;
        let relative_port = match self.relative_port {
            Some(v) => id("relative_port", v)?,
            None => group,
        };
        let non_owner_state = match &self.non_owner_state {
            Some(s) => Some(NonOwnerState::parse(s).ok_or_else(|| {
                err(
                    "non_owner_state",
                    format!("must be active-non-optimized or standby (got {s:?})"),
                )
            })?),
            None => None,
        };
        let raw_peers = self.peers.as_deref().unwrap_or_default();
        if raw_peers.len() > MAX_PEERS {
            return Err(err(
                "peers",
                format!("at most {MAX_PEERS} peers (got {})", raw_peers.len()),
            ));
        }
        let mut a = AluaConfig {
            group,
            relative_port,
            peers: Vec::with_capacity(raw_peers.len()),
            non_owner_state,
        };
        for (i, p) in raw_peers.iter().enumerate() {
            let g = id(&format!("peers[{i}].group"), p.group)?;
            let port = match p.relative_port {
                Some(v) => id(&format!("peers[{i}].relative_port"), v)?,
                None => g,
            };
            if a.has_group(g) {
                return Err(err(
                    &format!("peers[{i}].group"),
                    format!("target port group {g} is already used by this gateway or a peer"),
                ));
            }
            if a.groups().iter().any(|x| x.relative_port == port) {
                return Err(err(
                    &format!("peers[{i}].relative_port"),
                    format!(
                        "relative target port {port} is already used by this gateway or a peer"
                    ),
                ));
            }
            a.peers.push(AluaPeer {
                group: g,
                relative_port: port,
            });
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: RawAlua) -> Result<AluaConfig, String> {
        raw.validate(|f, m| format!("{f}: {m}"))
    }

    #[test]
    fn defaults_and_owner() {
        let a = check(RawAlua::default()).expect("valid");
        assert_eq!(a, AluaConfig::default());
        let a = check(RawAlua {
            group: Some(2),
            peers: Some(vec![RawAluaPeer {
                group: 1,
                relative_port: None,
            }]),
            ..RawAlua::default()
        })
        .expect("valid");
        assert_eq!((a.relative_port, a.peers[0].relative_port), (2, 1));
        assert_eq!(a.owner_of(None), 1, "lowest group owns by default");
        assert_eq!(a.owner_of(Some(2)), 2);
        let back = check(RawAlua::from_model(&a)).expect("round trip");
        assert_eq!(back, a);
    }

    #[test]
    fn clashes_and_ranges_are_refused() {
        let peer = |g, p| RawAluaPeer {
            group: g,
            relative_port: p,
        };
        let e = check(RawAlua {
            peers: Some(vec![peer(1, Some(5))]),
            ..RawAlua::default()
        })
        .expect_err("same group");
        assert!(e.starts_with("peers[0].group"), "{e}");
        let e = check(RawAlua {
            peers: Some(vec![peer(2, Some(1))]),
            ..RawAlua::default()
        })
        .expect_err("same port");
        assert!(e.starts_with("peers[0].relative_port"), "{e}");
        let e = check(RawAlua {
            group: Some(0),
            ..RawAlua::default()
        })
        .expect_err("group 0");
        assert!(e.contains("1..=65535"), "{e}");
        let e = check(RawAlua {
            non_owner_state: Some("optimized".into()),
            ..RawAlua::default()
        })
        .expect_err("bad state");
        assert!(e.starts_with("non_owner_state"), "{e}");
    }

    #[test]
    fn tgtadm_settings_build_what_yaml_builds() {
        let a = AluaConfig::default()
            .with_setting("alua_group", "2")
            .and_then(|a| a.with_setting("ALUA-PEERS", "1, 3:7"))
            .and_then(|a| a.with_setting("alua_non_owner_state", "standby"))
            .expect("valid");
        assert_eq!(a.group, 2);
        assert_eq!(a.relative_port, 2, "the port follows a defaulted group");
        assert_eq!(
            a.peers,
            vec![
                AluaPeer {
                    group: 1,
                    relative_port: 1
                },
                AluaPeer {
                    group: 3,
                    relative_port: 7
                }
            ]
        );
        assert_eq!(a.non_owner_state, Some(NonOwnerState::Standby));
        let b = a.with_setting("alua_relative_port", "9").expect("port");
        let c = b.with_setting("alua_group", "4").expect("group");
        assert_eq!(
            (c.group, c.relative_port),
            (4, 9),
            "a port of its own stays"
        );
        let none = c.with_setting("alua_peers", "none").expect("no peers");
        assert!(none.peers.is_empty());
        let auto = c
            .with_setting("alua_non_owner_state", "auto")
            .expect("auto");
        assert_eq!(auto.non_owner_state, None);
        for (name, value, want) in [
            ("alua_group", "0", "1..=65535"),
            ("alua_group", "x", "not a number"),
            ("alua_peers", "2", "already used"),
            ("alua_peers", "5:2", "already used"),
            (
                "alua_non_owner_state",
                "optimized",
                "active-non-optimized or standby",
            ),
            ("alua_owner", "1", "not an ALUA setting"),
        ] {
            let e = a.with_setting(name, value).expect_err(name);
            assert!(e.contains(want), "{name}={value}: {e}");
        }
    }
}
