//! Quality of service limits of a LUN: I/Os and bytes per second, in total and per
//! direction, with an optional burst above them. Owns the model ([`Qos`]), how a LUN's
//! settings fall back on its target's ([`Qos::over`]), the YAML `qos:` section and its
//! validation, and tgtadm's `qos_*` parameters ([`set_qos_param`], [`qos_params`]), which
//! targets.conf spells the same way. Only the configuration: holding I/O to the limits is
//! the daemon's.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::validate::limits;

/// The burst rate, as a percentage of each limit, when a burst is set without a factor.
pub const DEFAULT_BURST_PERCENT: u32 = 200;

/// A LUN's QoS limits as configured. `None` = not set here: a LUN's unset field takes its
/// target's ([`Qos::over`]), and a field unset on both means no limit. `Some(0)` is an
/// explicit "no limit" (it also overrides a target's limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Qos {
    /// Commands per second, reads and writes together.
    pub iops: Option<u64>,
    /// Read commands per second.
    pub read_iops: Option<u64>,
    /// Write commands per second.
    pub write_iops: Option<u64>,
    /// Bytes per second, read and written together.
    pub bps: Option<u64>,
    /// Bytes read per second.
    pub read_bps: Option<u64>,
    /// Bytes written per second.
    pub write_bps: Option<u64>,
    /// How long the burst rate may be kept, in milliseconds (0 = no burst).
    pub burst_ms: Option<u64>,
    /// The burst rate as a percentage of each limit (200 = twice the limit), 101..=10000;
    /// [`DEFAULT_BURST_PERCENT`] when a burst is set without it.
    pub burst_percent: Option<u32>,
    /// Per initiator (each I_T nexus on its own, within the LUN's limits): commands per
    /// second, reads and writes together.
    pub initiator_iops: Option<u64>,
    /// Per initiator: read commands per second.
    pub initiator_read_iops: Option<u64>,
    /// Per initiator: write commands per second.
    pub initiator_write_iops: Option<u64>,
    /// Per initiator: bytes per second, read and written together.
    pub initiator_bps: Option<u64>,
    /// Per initiator: bytes read per second.
    pub initiator_read_bps: Option<u64>,
    /// Per initiator: bytes written per second.
    pub initiator_write_bps: Option<u64>,
}

impl Qos {
    /// These settings with every unset field taken from `default` (a LUN's over its
    /// target's).
    pub fn over(&self, default: &Qos) -> Qos {
        Qos {
            iops: self.iops.or(default.iops),
            read_iops: self.read_iops.or(default.read_iops),
            write_iops: self.write_iops.or(default.write_iops),
            bps: self.bps.or(default.bps),
            read_bps: self.read_bps.or(default.read_bps),
            write_bps: self.write_bps.or(default.write_bps),
            burst_ms: self.burst_ms.or(default.burst_ms),
            burst_percent: self.burst_percent.or(default.burst_percent),
            initiator_iops: self.initiator_iops.or(default.initiator_iops),
            initiator_read_iops: self.initiator_read_iops.or(default.initiator_read_iops),
            initiator_write_iops: self.initiator_write_iops.or(default.initiator_write_iops),
            initiator_bps: self.initiator_bps.or(default.initiator_bps),
            initiator_read_bps: self.initiator_read_bps.or(default.initiator_read_bps),
            initiator_write_bps: self.initiator_write_bps.or(default.initiator_write_bps),
        }
    }

    /// True when no rate is limited (every IOPS and bytes-per-second field, the LUN's and
    /// the per-initiator ones, unset or 0); the burst settings alone limit nothing.
    pub fn is_unlimited(&self) -> bool {
        self.lun_rates()
            .iter()
            .chain(&self.initiator_rates())
            .all(|&v| v == 0)
    }

    /// The LUN's rates (0: none): iops, read_iops, write_iops, bps, read_bps, write_bps.
    pub fn lun_rates(&self) -> [u64; 6] {
        [
            self.iops,
            self.read_iops,
            self.write_iops,
            self.bps,
            self.read_bps,
            self.write_bps,
        ]
        .map(|v| v.unwrap_or(0))
    }

    /// Each initiator's rates (0: none), in the order of [`Qos::lun_rates`].
    pub fn initiator_rates(&self) -> [u64; 6] {
        [
            self.initiator_iops,
            self.initiator_read_iops,
            self.initiator_write_iops,
            self.initiator_bps,
            self.initiator_read_bps,
            self.initiator_write_bps,
        ]
        .map(|v| v.unwrap_or(0))
    }

    /// The burst rate as a percentage of each limit: the configured one, or
    /// [`DEFAULT_BURST_PERCENT`] (200) when unset.
    pub fn burst_percent_or_default(&self) -> u32 {
        self.burst_percent.unwrap_or(DEFAULT_BURST_PERCENT)
    }
}

/// tgtadm's `--params` names of the QoS settings (also targets.conf's directives), in
/// this order: `qos_iops`, `qos_read_iops`, `qos_write_iops`, `qos_bps`, `qos_read_bps`,
/// `qos_write_bps`, `qos_burst`, `qos_burst_factor`, then the same rates per initiator:
/// `qos_initiator_iops` … `qos_initiator_write_bps`.
pub const QOS_PARAMS: &[&str] = &[
    "qos_iops",
    "qos_read_iops",
    "qos_write_iops",
    "qos_bps",
    "qos_read_bps",
    "qos_write_bps",
    "qos_burst",
    "qos_burst_factor",
    "qos_initiator_iops",
    "qos_initiator_read_iops",
    "qos_initiator_write_iops",
    "qos_initiator_bps",
    "qos_initiator_read_bps",
    "qos_initiator_write_bps",
];

/// Sets the field of `q` named by the tgtadm-style `key` (one of [`QOS_PARAMS`]; any
/// case, `-` taken as `_`, blanks around key and value ignored) from its text `value`.
/// Returns `Ok(false)` (and leaves `q` alone) when `key` is not a QoS key, and `Err` with
/// the problem in words (without the key: the caller names it) when the value is bad.
///
/// - `qos_iops`, `qos_read_iops`, `qos_write_iops`: a decimal whole number of commands per
///   second, at most 100000000; 0 = no limit.
/// - `qos_bps`, `qos_read_bps`, `qos_write_bps`: bytes per second, a decimal number with an
///   optional `K`, `M`, `G` or `T` suffix that is binary as everywhere in the configuration
///   ([`crate::parse_size`]: `50M` = 50 × 1048576), at most 2^50 (`1024T`); 0 = no limit.
/// - `qos_burst`: how long the burst rate may be kept, in seconds, at most 3600, with up
///   to three decimals (`0.5`); 0 = no burst.
/// - `qos_burst_factor`: the burst rate as a multiple of each limit, above 1 and at most
///   100, with up to two decimals (`1.5`, `2`).
pub fn set_qos_param(q: &mut Qos, key: &str, value: &str) -> Result<bool, String> {
    let Some(f) = Field::by_param(key) else {
        return Ok(false);
    };
    f.set(q, f.parse(value)?);
    Ok(true)
}

/// The tgtadm `key=value` pairs that give `q` back through [`set_qos_param`] (for a `Qos`
/// within the limits), set fields only, in [`QOS_PARAMS`] order: rates as plain decimal
/// numbers, the burst in seconds (`0.5`), the factor as a decimal (`1.5`). For dumps and
/// `tgtadm --op show`.
pub fn qos_params(q: &Qos) -> Vec<(&'static str, String)> {
    FIELDS
        .iter()
        .filter_map(|&f| f.get(q).map(|v| (f.param(), f.format_param(v))))
        .collect()
}

/// What a field's value is, which decides how it is read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Commands per second.
    Iops,
    /// Bytes per second (size suffixes).
    Bps,
    /// Seconds with up to three decimals, kept as milliseconds.
    Burst,
    /// A multiple with up to two decimals, kept as a percentage.
    Factor,
}

/// One field of [`Qos`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Iops,
    ReadIops,
    WriteIops,
    Bps,
    ReadBps,
    WriteBps,
    Burst,
    BurstFactor,
    InitiatorIops,
    InitiatorReadIops,
    InitiatorWriteIops,
    InitiatorBps,
    InitiatorReadBps,
    InitiatorWriteBps,
}

/// Every field, in the order of [`QOS_PARAMS`] (and of the YAML keys).
const FIELDS: [Field; 14] = [
    Field::Iops,
    Field::ReadIops,
    Field::WriteIops,
    Field::Bps,
    Field::ReadBps,
    Field::WriteBps,
    Field::Burst,
    Field::BurstFactor,
    Field::InitiatorIops,
    Field::InitiatorReadIops,
    Field::InitiatorWriteIops,
    Field::InitiatorBps,
    Field::InitiatorReadBps,
    Field::InitiatorWriteBps,
];

impl Field {
    fn index(self) -> usize {
        self as usize
    }

    /// The tgtadm parameter name.
    fn param(self) -> &'static str {
        QOS_PARAMS[self.index()]
    }

    /// The YAML key inside `qos:`.
    fn yaml(self) -> &'static str {
        &self.param()["qos_".len()..]
    }

    fn by_param(key: &str) -> Option<Field> {
        let k = key.trim().to_ascii_lowercase().replace('-', "_");
        FIELDS.into_iter().find(|f| f.param() == k)
    }

    fn kind(self) -> Kind {
        match self {
            Field::Iops
            | Field::ReadIops
            | Field::WriteIops
            | Field::InitiatorIops
            | Field::InitiatorReadIops
            | Field::InitiatorWriteIops => Kind::Iops,
            Field::Bps
            | Field::ReadBps
            | Field::WriteBps
            | Field::InitiatorBps
            | Field::InitiatorReadBps
            | Field::InitiatorWriteBps => Kind::Bps,
            Field::Burst => Kind::Burst,
            Field::BurstFactor => Kind::Factor,
        }
    }

    fn get(self, q: &Qos) -> Option<u64> {
        match self {
            Field::Iops => q.iops,
            Field::ReadIops => q.read_iops,
            Field::WriteIops => q.write_iops,
            Field::Bps => q.bps,
            Field::ReadBps => q.read_bps,
            Field::WriteBps => q.write_bps,
            Field::Burst => q.burst_ms,
            Field::BurstFactor => q.burst_percent.map(u64::from),
            Field::InitiatorIops => q.initiator_iops,
            Field::InitiatorReadIops => q.initiator_read_iops,
            Field::InitiatorWriteIops => q.initiator_write_iops,
            Field::InitiatorBps => q.initiator_bps,
            Field::InitiatorReadBps => q.initiator_read_bps,
            Field::InitiatorWriteBps => q.initiator_write_bps,
        }
    }

    /// Stores `v` (a value [`Field::parse`] gave).
    fn set(self, q: &mut Qos, v: u64) {
        let slot = match self {
            Field::Iops => &mut q.iops,
            Field::ReadIops => &mut q.read_iops,
            Field::WriteIops => &mut q.write_iops,
            Field::Bps => &mut q.bps,
            Field::ReadBps => &mut q.read_bps,
            Field::WriteBps => &mut q.write_bps,
            Field::Burst => &mut q.burst_ms,
            Field::InitiatorIops => &mut q.initiator_iops,
            Field::InitiatorReadIops => &mut q.initiator_read_iops,
            Field::InitiatorWriteIops => &mut q.initiator_write_iops,
            Field::InitiatorBps => &mut q.initiator_bps,
            Field::InitiatorReadBps => &mut q.initiator_read_bps,
            Field::InitiatorWriteBps => &mut q.initiator_write_bps,
            Field::BurstFactor => {
                q.burst_percent = Some(u32::try_from(v).unwrap_or(u32::MAX));
                return;
            }
        };
        *slot = Some(v);
    }

    /// Reads a value as tgtadm and YAML write it, checked against its bounds.
    fn parse(self, text: &str) -> Result<u64, String> {
        let t = text.trim();
        match self.kind() {
            Kind::Iops => {
                let (_, hi) = limits::QOS_IOPS;
                whole(t).filter(|&v| v <= hi).ok_or_else(|| {
                    format!(
                        "must be a whole number of commands per second, 0 (no limit) to {hi} \
                         (got {text:?})"
                    )
                })
            }
            Kind::Bps => {
                let (_, hi) = limits::QOS_BPS;
                let v = crate::size::parse_size(t).map_err(|_| {
                    format!(
                        "must be bytes per second: a whole number with an optional K, M, G or T \
                         suffix (binary, K = 1024), 0 = no limit (got {text:?})"
                    )
                })?;
                if v > hi {
                    return Err(format!(
                        "must be at most {hi} bytes per second (1024T) (got {text:?})"
                    ));
                }
                Ok(v)
            }
            Kind::Burst => {
                let (_, hi) = limits::QOS_BURST_MS;
                fixed(t, 3).filter(|&v| v <= hi).ok_or_else(|| {
                    format!(
                        "must be seconds, 0 (no burst) to {}, with at most 3 decimals \
                         (got {text:?})",
                        hi / 1000
                    )
                })
            }
            Kind::Factor => {
                let (lo, hi) = limits::QOS_BURST_PERCENT;
                fixed(t, 2)
                    .filter(|v| (lo..=hi).contains(v))
                    .ok_or_else(|| {
                        format!(
                            "must be a multiple of the limits above 1 and at most {}, with at \
                             most 2 decimals, e.g. 1.5 or 2 (got {text:?})",
                            hi / 100
                        )
                    })
            }
        }
    }

    /// The tgtadm text of `v`: rates as plain numbers.
    fn format_param(self, v: u64) -> String {
        match self.kind() {
            Kind::Iops | Kind::Bps => v.to_string(),
            Kind::Burst => format_fixed(v, 3),
            Kind::Factor => format_fixed(v, 2),
        }
    }

    /// The YAML text of `v`: byte rates in the short size form (`50M`).
    fn format_yaml(self, v: u64) -> String {
        match self.kind() {
            Kind::Bps => crate::size::format_size(v),
            _ => self.format_param(v),
        }
    }
}

/// A decimal whole number (digits only).
fn whole(t: &str) -> Option<u64> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// A decimal number with at most `decimals` decimals (more are allowed when they are
/// zeros), as a whole number of 10^-`decimals` units: `fixed("1.5", 2)` = 150.
fn fixed(t: &str, decimals: u32) -> Option<u64> {
    let (int, frac) = match t.split_once('.') {
        Some((_, "")) => return None,
        Some((i, f)) => (i, f),
        None => (t, ""),
    };
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac = frac.trim_end_matches('0');
    let digits = u32::try_from(frac.len()).ok().filter(|&n| n <= decimals)?;
    let f: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    whole(int)?
        .checked_mul(10u64.pow(decimals))?
        .checked_add(f * 10u64.pow(decimals - digits))
}

/// The shortest text [`fixed`] reads back as `v`: `format_fixed(150, 2)` = `1.5`.
fn format_fixed(v: u64, decimals: u32) -> String {
    let scale = 10u64.pow(decimals);
    let (int, frac) = (v / scale, v % scale);
    if frac == 0 {
        return int.to_string();
    }
    let width = decimals as usize;
    let frac = format!("{frac:0width$}");
    format!("{int}.{}", frac.trim_end_matches('0'))
}

/// YAML `qos:` of a target or a LUN.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQos {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bps: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bps: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bps: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_factor: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator_iops: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator_read_iops: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator_write_iops: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator_bps: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator_read_bps: Option<QosValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator_write_bps: Option<QosValue>,
}

impl RawQos {
    fn slot(&mut self, f: Field) -> &mut Option<QosValue> {
        match f {
            Field::Iops => &mut self.iops,
            Field::ReadIops => &mut self.read_iops,
            Field::WriteIops => &mut self.write_iops,
            Field::Bps => &mut self.bps,
            Field::ReadBps => &mut self.read_bps,
            Field::WriteBps => &mut self.write_bps,
            Field::Burst => &mut self.burst,
            Field::BurstFactor => &mut self.burst_factor,
            Field::InitiatorIops => &mut self.initiator_iops,
            Field::InitiatorReadIops => &mut self.initiator_read_iops,
            Field::InitiatorWriteIops => &mut self.initiator_write_iops,
            Field::InitiatorBps => &mut self.initiator_bps,
            Field::InitiatorReadBps => &mut self.initiator_read_bps,
            Field::InitiatorWriteBps => &mut self.initiator_write_bps,
        }
    }

    /// The YAML form of `q`; `None` when nothing is set.
    pub(crate) fn from_model(q: &Qos) -> Option<RawQos> {
        if *q == Qos::default() {
            return None;
        }
        let mut raw = RawQos::default();
        for f in FIELDS {
            *raw.slot(f) = f.get(q).map(|v| QosValue(f.format_yaml(v)));
        }
        Some(raw)
    }

    /// Validates the section; `err(key, message)` builds the error for a key below `qos`.
    pub(crate) fn validate<E>(&self, err: impl Fn(&str, String) -> E) -> Result<Qos, E> {
        let mut raw = self.clone();
        let mut q = Qos::default();
        for f in FIELDS {
            if let Some(v) = raw.slot(f).take() {
                let n = f.parse(&v.0).map_err(|m| err(f.yaml(), m))?;
                f.set(&mut q, n);
            }
        }
        Ok(q)
    }

    /// For targets.conf: sets the key named by the tgtadm-style `key` after checking
    /// `value` as [`set_qos_param`] does, keeping the text. `Ok(Some(yaml_key))` when it
    /// was a QoS key, `Ok(None)` when not.
    pub(crate) fn set_param(
        &mut self,
        key: &str,
        value: &str,
    ) -> Result<Option<&'static str>, String> {
        let Some(f) = Field::by_param(key) else {
            return Ok(None);
        };
        f.parse(value)?;
        *self.slot(f) = Some(QosValue(value.trim().to_string()));
        Ok(Some(f.yaml()))
    }
}

/// The canonical name (one of [`QOS_PARAMS`]) of a tgtadm-style QoS key, or `None`.
pub(crate) fn param_name(key: &str) -> Option<&'static str> {
    Field::by_param(key).map(Field::param)
}

/// A value of `qos:` as text: any YAML scalar is taken (a number, `50M`, `0.5`), so that
/// the checks and messages are [`set_qos_param`]'s. Written back as a YAML number when it
/// is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QosValue(pub String);

impl<'de> Deserialize<'de> for QosValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = QosValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<QosValue, E> {
                Ok(QosValue(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<QosValue, E> {
                Ok(QosValue(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<QosValue, E> {
                // the shortest text that reads back as `v`: `0.5`, `1.25`
                Ok(QosValue(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<QosValue, E> {
                Ok(QosValue(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<QosValue, E> {
                Ok(QosValue(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for QosValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0.as_str();
        if let Some(v) = whole(t) {
            return s.serialize_u64(v);
        }
        let decimal = t.split_once('.').is_some_and(|(i, f)| {
            !i.is_empty()
                && !f.is_empty()
                && i.len() <= 6
                && f.len() <= 3
                && (i.bytes().chain(f.bytes())).all(|b| b.is_ascii_digit())
        });
        match t.parse::<f64>() {
            Ok(v) if decimal => s.serialize_f64(v),
            _ => s.serialize_str(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn over_takes_unset_fields_from_the_default() {
        let target = Qos {
            iops: Some(1000),
            bps: Some(50 << 20),
            burst_ms: Some(500),
            ..Qos::default()
        };
        let lun = Qos {
            iops: Some(0),
            read_iops: Some(300),
            ..Qos::default()
        };
        let e = lun.over(&target);
        assert_eq!(
            e,
            Qos {
                iops: Some(0),
                read_iops: Some(300),
                bps: Some(50 << 20),
                burst_ms: Some(500),
                ..Qos::default()
            }
        );
        assert_eq!(Qos::default().over(&target), target);
        assert_eq!(target.over(&Qos::default()), target);
    }

    #[test]
    fn unlimited_and_burst_default() {
        assert!(Qos::default().is_unlimited());
        let zeros = Qos {
            iops: Some(0),
            write_bps: Some(0),
            burst_ms: Some(1000),
            burst_percent: Some(300),
            ..Qos::default()
        };
        assert!(
            zeros.is_unlimited(),
            "0 is no limit, a burst limits nothing"
        );
        for &f in &FIELDS[..6] {
            let mut q = Qos::default();
            f.set(&mut q, 1);
            assert!(!q.is_unlimited(), "{f:?}");
        }
        assert_eq!(Qos::default().burst_percent_or_default(), 200);
        assert_eq!(zeros.burst_percent_or_default(), 300);
    }

    #[test]
    fn params_set_the_fields() {
        let mut q = Qos::default();
        for (k, v) in [
            ("qos_iops", "1000"),
            ("QOS-READ-IOPS", " 400 "),
            ("qos_write_iops", "0"),
            ("qos_bps", "50M"),
            ("qos_read_bps", "1048576"),
            ("qos_write_bps", "2G"),
            ("qos_burst", "0.5"),
            ("qos_burst_factor", "1.5"),
        ] {
            assert_eq!(set_qos_param(&mut q, k, v), Ok(true), "{k}={v}");
        }
        assert_eq!(
            q,
            Qos {
                iops: Some(1000),
                read_iops: Some(400),
                write_iops: Some(0),
                bps: Some(50 << 20),
                read_bps: Some(1 << 20),
                write_bps: Some(2 << 30),
                burst_ms: Some(500),
                burst_percent: Some(150),
                ..Qos::default()
            }
        );
        assert_eq!(
            qos_params(&q),
            vec![
                ("qos_iops", "1000".to_string()),
                ("qos_read_iops", "400".into()),
                ("qos_write_iops", "0".into()),
                ("qos_bps", "52428800".into()),
                ("qos_read_bps", "1048576".into()),
                ("qos_write_bps", "2147483648".into()),
                ("qos_burst", "0.5".into()),
                ("qos_burst_factor", "1.5".into()),
            ]
        );
        let before = q;
        assert_eq!(set_qos_param(&mut q, "readonly", "1"), Ok(false));
        assert_eq!(set_qos_param(&mut q, "qos", "1"), Ok(false));
        assert_eq!(q, before);
        assert!(qos_params(&Qos::default()).is_empty());
        let mut q = Qos::default();
        for (v, ms) in [("2", 2000), ("0", 0), ("0.001", 1), ("3600", 3_600_000)] {
            set_qos_param(&mut q, "qos_burst", v).unwrap();
            assert_eq!(q.burst_ms, Some(ms), "{v}");
        }
        for (v, p) in [("2", 200), ("1.01", 101), ("100", 10_000), ("2.50", 250)] {
            set_qos_param(&mut q, "qos_burst_factor", v).unwrap();
            assert_eq!(q.burst_percent, Some(p), "{v}");
        }
        set_qos_param(&mut q, "qos_bps", "1024T").unwrap();
        assert_eq!(q.bps, Some(1 << 50));
    }

    #[test]
    fn bad_values_are_refused_and_change_nothing() {
        for (k, v, words) in [
            ("qos_iops", "", "whole number"),
            ("qos_iops", "-1", "whole number"),
            ("qos_iops", "1.5", "whole number"),
            ("qos_iops", "1K", "whole number"),
            ("qos_iops", "+5", "whole number"),
            ("qos_iops", "100000001", "to 100000000"),
            ("qos_iops", "99999999999999999999999", "whole number"),
            ("qos_bps", "x", "bytes per second"),
            ("qos_bps", "1.5M", "bytes per second"),
            ("qos_bps", "1025T", "at most 1125899906842624"),
            ("qos_read_bps", "-1", "bytes per second"),
            ("qos_burst", "3600.001", "0 (no burst) to 3600"),
            ("qos_burst", "0.0005", "3 decimals"),
            ("qos_burst", "1.", "seconds"),
            ("qos_burst", ".5", "seconds"),
            ("qos_burst", "1e3", "seconds"),
            ("qos_burst", "-1", "seconds"),
            ("qos_burst_factor", "1", "above 1"),
            ("qos_burst_factor", "0.5", "above 1"),
            ("qos_burst_factor", "100.01", "at most 100"),
            ("qos_burst_factor", "1.005", "2 decimals"),
            ("qos_burst_factor", "two", "e.g. 1.5"),
        ] {
            let mut q = Qos::default();
            let e = set_qos_param(&mut q, k, v).expect_err(v);
            assert!(e.contains(words), "{k}={v}: {e}");
            assert!(e.contains(&format!("{v:?}")), "{k}={v}: {e}");
            assert_eq!(q, Qos::default());
        }
    }

    #[test]
    fn fixed_point_text() {
        assert_eq!(fixed("1.50", 2), Some(150));
        assert_eq!(fixed("1.500", 2), Some(150));
        assert_eq!(fixed("007", 3), Some(7000));
        assert_eq!(fixed("1.5.1", 2), None);
        assert_eq!(fixed("", 2), None);
        assert_eq!(fixed("18446744073709551615", 1), None);
        assert_eq!(format_fixed(150, 2), "1.5");
        assert_eq!(format_fixed(101, 2), "1.01");
        assert_eq!(format_fixed(1, 3), "0.001");
        assert_eq!(format_fixed(3_600_000, 3), "3600");
    }

    #[test]
    fn yaml_section_validates_with_the_same_rules() {
        let raw: RawQos =
            serde_yaml::from_str("{iops: 1000, bps: 50M, burst: 0.25, burst_factor: 3}").unwrap();
        let q = raw.validate(|k, m| format!("{k}: {m}")).unwrap();
        assert_eq!(
            q,
            Qos {
                iops: Some(1000),
                bps: Some(50 << 20),
                burst_ms: Some(250),
                burst_percent: Some(300),
                ..Qos::default()
            }
        );
        let raw: RawQos = serde_yaml::from_str("{write_iops: true}").unwrap();
        let e = raw.validate(|k, m| format!("{k}: {m}")).unwrap_err();
        assert!(e.starts_with("write_iops: must be a whole number"), "{e}");
        assert!(serde_yaml::from_str::<RawQos>("{iopz: 1}").is_err());
        let mut raw = RawQos::default();
        assert_eq!(raw.set_param("QOS_BURST", " 1.5 "), Ok(Some("burst")));
        assert_eq!(raw.set_param("lun", "1"), Ok(None));
        assert!(raw.set_param("qos_iops", "x").is_err());
        assert_eq!(raw.iops, None);
        assert_eq!(raw.burst, Some(QosValue("1.5".into())));
        assert_eq!(param_name("Qos-Burst-Factor"), Some("qos_burst_factor"));
    }

    fn any_qos() -> impl Strategy<Value = Qos> {
        let iops = || proptest::option::of(0..=limits::QOS_IOPS.1);
        let bps = || {
            proptest::option::of(prop_oneof![
                0..=limits::QOS_BPS.1,
                (0u64..=1 << 20).prop_map(|k| k << 30),
                (0u64..=1 << 30).prop_map(|k| k << 20),
            ])
        };
        (
            (iops(), iops(), iops()),
            (bps(), bps(), bps()),
            proptest::option::of(0..=limits::QOS_BURST_MS.1),
            proptest::option::of(limits::QOS_BURST_PERCENT.0..=limits::QOS_BURST_PERCENT.1),
            (iops(), iops(), iops()),
            (bps(), bps(), bps()),
        )
            .prop_map(
                |((i, ri, wi), (b, rb, wb), burst, pct, (ii, iri, iwi), (ib, irb, iwb))| Qos {
                    iops: i,
                    read_iops: ri,
                    write_iops: wi,
                    bps: b,
                    read_bps: rb,
                    write_bps: wb,
                    burst_ms: burst,
                    burst_percent: pct.map(|p| p as u32),
                    initiator_iops: ii,
                    initiator_read_iops: iri,
                    initiator_write_iops: iwi,
                    initiator_bps: ib,
                    initiator_read_bps: irb,
                    initiator_write_bps: iwb,
                },
            )
    }

    proptest! {
        #[test]
        fn params_round_trip(q in any_qos()) {
            let mut back = Qos::default();
            for (k, v) in qos_params(&q) {
                prop_assert_eq!(set_qos_param(&mut back, k, &v), Ok(true));
            }
            prop_assert_eq!(back, q);
        }

        #[test]
        fn yaml_round_trips(q in any_qos()) {
            let raw = RawQos::from_model(&q);
            prop_assert_eq!(raw.is_none(), q == Qos::default());
            let text = serde_yaml::to_string(&raw.unwrap_or_default()).unwrap();
            let back: RawQos = serde_yaml::from_str(&text).unwrap();
            prop_assert_eq!(back.validate(|k, m| format!("{k}: {m}")), Ok(q), "{}", text);
        }

        #[test]
        fn never_panics(k in prop::sample::select(QOS_PARAMS.to_vec()), v in ".{0,24}") {
            let mut q = Qos::default();
            let _ = set_qos_param(&mut q, k, &v);
        }
    }
}
