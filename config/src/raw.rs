//! The YAML file as serde sees it: structures that mirror the file format
//! one-to-one (`deny_unknown_fields` everywhere, tgtd's key names in `iscsi`),
//! with loose scalar types so that range and format checks happen in
//! [`crate::validate`] with our own messages. Also the reverse mapping used by
//! [`crate::Config::to_yaml`].

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::model::{
    BsOflags, BsType, CacheSettings, Config, DeviceType, Digest, DirtyLimit, DiscoveryAuth,
    IoEngine, IscsiParams, IscsiParamsOverride, LunConfig, MetricsAddress, PortalConfig,
    RouterSettings, SenseFormat, TargetConfig,
};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub portals: Option<Vec<RawPortal>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iser_portals: Option<Vec<RawPortal>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<RawNuma>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<RawThreads>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iscsi: Option<RawIscsi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<RawCache>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RawRouter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<RawMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<RawAccount>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_auth: Option<RawAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<RawTarget>>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccount {
    pub user: String,
    pub password: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming_users: Option<List>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outgoing_user: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCache {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_per_node: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_blocks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_per_node: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub huge_pages: Option<YesNo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirty_limit: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_ahead: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_restart: Option<YesNo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Word>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_forward_bytes: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<YesNo>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_info: Option<YesNo>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mgmt_clients: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPortal {
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nop_interval: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nop_count: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNuma {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Scalar>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawThreads {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_threads: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_engine: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_poll_us: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIscsi {
    #[serde(
        rename = "MaxRecvDataSegmentLength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_recv_data_segment_length: Option<u64>,
    #[serde(
        rename = "MaxBurstLength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_burst_length: Option<u64>,
    #[serde(
        rename = "FirstBurstLength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub first_burst_length: Option<u64>,
    #[serde(
        rename = "ImmediateData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub immediate_data: Option<YesNo>,
    #[serde(
        rename = "InitialR2T",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub initial_r2t: Option<YesNo>,
    #[serde(
        rename = "MaxOutstandingR2T",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_outstanding_r2t: Option<u64>,
    #[serde(
        rename = "HeaderDigest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub header_digest: Option<List>,
    #[serde(
        rename = "DataDigest",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub data_digest: Option<List>,
    #[serde(
        rename = "MaxQueueCmd",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_queued_commands: Option<u64>,
    #[serde(
        rename = "NopInterval",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nop_interval: Option<u64>,
    #[serde(rename = "NopCount", default, skip_serializing_if = "Option::is_none")]
    pub nop_count: Option<u64>,
    #[serde(
        rename = "DataPDUInOrder",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub data_pdu_in_order: Option<YesNo>,
    #[serde(
        rename = "DataSequenceInOrder",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub data_sequence_in_order: Option<YesNo>,
    #[serde(
        rename = "ErrorRecoveryLevel",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub error_recovery_level: Option<u64>,
    #[serde(
        rename = "DefaultTime2Wait",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub default_time2wait: Option<u64>,
    #[serde(
        rename = "DefaultTime2Retain",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub default_time2retain: Option<u64>,
    #[serde(
        rename = "MaxConnections",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_connections: Option<u64>,
    #[serde(
        rename = "MaxXmitDataSegmentLength",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_xmit_data_segment_length: Option<u64>,
    /// Accepted only as `No` (markers were removed from iSCSI); not stored.
    #[serde(rename = "IFMarker", default, skip_serializing_if = "Option::is_none")]
    pub if_marker: Option<YesNo>,
    /// Accepted only as `No`; not stored.
    #[serde(rename = "OFMarker", default, skip_serializing_if = "Option::is_none")]
    pub of_marker: Option<YesNo>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTarget {
    pub iqn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<RawAllow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iscsi: Option<RawIscsi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incoming_users: Option<List>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outgoing_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<crate::qos::RawQos>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub luns: Option<Vec<RawLun>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alua: Option<crate::alua::RawAlua>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAllow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiators: Option<List>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<List>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLun {
    pub lun: u64,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_cache: Option<YesNo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly: Option<YesNo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_rev: Option<String>,
    #[serde(default, alias = "scsi_sn", skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scsi_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sense_format: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removable: Option<YesNo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thin_provisioning: Option<YesNo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online: Option<YesNo>,
    /// Only `disk` is accepted; not stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<Word>,
    #[serde(
        default,
        deserialize_with = "null_store_word",
        skip_serializing_if = "Option::is_none"
    )]
    pub bs_type: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bsoflags: Option<Word>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bsopts: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lbppbe: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub la_lba: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimal_xfer_gran: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimal_xfer_len: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alua_owner: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<crate::qos::RawQos>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changer: Vec<String>,
}

/// A scalar that may be written as a number or a word (`auto`, `1G`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scalar {
    Int(i128),
    Text(String),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a word")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v.into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Scalar {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scalar::Int(v) => match u64::try_from(*v) {
                Ok(u) => s.serialize_u64(u),
                Err(_) => s.serialize_str(&v.to_string()),
            },
            Scalar::Text(t) => s.serialize_str(t),
        }
    }
}

/// A word of a closed set (`numa`, `off`, `page`): any YAML scalar is taken
/// as its text, so that `false`, `1` or `1.5` reach validation and get our
/// message instead of serde's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word(pub String);

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Word;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a word")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Word, E> {
                Ok(Word(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Word, E> {
                Ok(Word(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Word, E> {
                Ok(Word(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Word, E> {
                Ok(Word(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Word, E> {
                Ok(Word(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Word, E> {
                Ok(Word(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Word {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// `bs_type: null` names tgt's null store, not YAML's "nothing": the key given with YAML's
/// null (`null`, `~`, or no value) is the word `null`. A missing key stays `None` (rdwr).
fn null_store_word<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Word>, D::Error> {
    let w = Option::<Word>::deserialize(d)?;
    Ok(Some(w.unwrap_or_else(|| Word("null".into()))))
}

/// A boolean that also accepts tgtd's `Yes`/`No` (and `on`/`off`), any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct YesNo(pub bool);

impl<'de> Deserialize<'de> for YesNo {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = YesNo;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true/false, Yes/No or 1/0")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<YesNo, E> {
                Ok(YesNo(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<YesNo, E> {
                match v {
                    0 => Ok(YesNo(false)),
                    1 => Ok(YesNo(true)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<YesNo, E> {
                match v.trim().to_ascii_lowercase().as_str() {
                    "yes" | "on" | "true" | "1" => Ok(YesNo(true)),
                    "no" | "off" | "false" | "0" => Ok(YesNo(false)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for YesNo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(self.0)
    }
}

/// A list of words: a YAML sequence, or one string (`ALL`, `None,CRC32C`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct List {
    pub items: Vec<String>,
    /// Written as one string rather than a sequence.
    pub single: bool,
}

impl<'de> Deserialize<'de> for List {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = List;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings or one string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<List, E> {
                Ok(List {
                    items: vec![v.to_string()],
                    single: true,
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<List, A::Error> {
                let mut items = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    items.push(s);
                }
                Ok(List {
                    items,
                    single: false,
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for List {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.items.serialize(s)
    }
}

fn list(items: impl IntoIterator<Item = String>) -> List {
    List {
        items: items.into_iter().collect(),
        single: false,
    }
}

fn digests(d: &[Digest]) -> List {
    list(d.iter().map(|d| d.as_str().to_string()))
}

fn raw_iscsi(p: &IscsiParams) -> RawIscsi {
    raw_override(&IscsiParamsOverride {
        max_recv_data_segment_length: Some(p.max_recv_data_segment_length),
        max_burst_length: Some(p.max_burst_length),
        first_burst_length: Some(p.first_burst_length),
        immediate_data: Some(p.immediate_data),
        initial_r2t: Some(p.initial_r2t),
        max_outstanding_r2t: Some(p.max_outstanding_r2t),
        header_digest: Some(p.header_digest.clone()),
        data_digest: Some(p.data_digest.clone()),
        max_queued_commands: Some(p.max_queued_commands),
        nop_interval: Some(p.nop_interval),
        nop_count: Some(p.nop_count),
        data_pdu_in_order: Some(p.data_pdu_in_order),
        data_sequence_in_order: Some(p.data_sequence_in_order),
        error_recovery_level: Some(p.error_recovery_level),
        default_time2wait: Some(p.default_time2wait),
        default_time2retain: Some(p.default_time2retain),
        max_connections: Some(p.max_connections),
        max_xmit_data_segment_length: p.max_xmit_data_segment_length,
    })
}

fn raw_override(o: &IscsiParamsOverride) -> RawIscsi {
    RawIscsi {
        max_recv_data_segment_length: o.max_recv_data_segment_length.map(u64::from),
        max_burst_length: o.max_burst_length.map(u64::from),
        first_burst_length: o.first_burst_length.map(u64::from),
        immediate_data: o.immediate_data.map(YesNo),
        initial_r2t: o.initial_r2t.map(YesNo),
        max_outstanding_r2t: o.max_outstanding_r2t.map(u64::from),
        header_digest: o.header_digest.as_deref().map(digests),
        data_digest: o.data_digest.as_deref().map(digests),
        max_queued_commands: o.max_queued_commands.map(u64::from),
        nop_interval: o.nop_interval.map(u64::from),
        nop_count: o.nop_count.map(u64::from),
        data_pdu_in_order: o.data_pdu_in_order.map(YesNo),
        data_sequence_in_order: o.data_sequence_in_order.map(YesNo),
        error_recovery_level: o.error_recovery_level.map(u64::from),
        default_time2wait: o.default_time2wait.map(u64::from),
        default_time2retain: o.default_time2retain.map(u64::from),
        max_connections: o.max_connections.map(u64::from),
        max_xmit_data_segment_length: o.max_xmit_data_segment_length.map(u64::from),
        if_marker: None,
        of_marker: None,
    }
}

fn raw_portal(p: &PortalConfig) -> RawPortal {
    RawPortal {
        address: p.addr.to_string(),
        nop_interval: p.nop_interval.map(u64::from),
        nop_count: p.nop_count.map(u64::from),
    }
}

fn raw_lun(l: &LunConfig) -> RawLun {
    RawLun {
        lun: l.lun,
        path: l.path.to_string_lossy().into_owned(),
        size: l
            .create_size
            .map(|s| Scalar::Text(crate::size::format_size(s))),
        // a tape drive's block size is the initiator's
        block_size: (!matches!(
            l.device_type,
            DeviceType::Tape | DeviceType::Changer | DeviceType::Passthrough
        ))
        .then(|| l.block_size.into()),
        write_cache: Some(YesNo(l.write_cache)),
        readonly: Some(YesNo(l.readonly)),
        vendor_id: l.vendor_id.clone(),
        product_id: l.product_id.clone(),
        product_rev: l.product_rev.clone(),
        serial: l.serial.clone(),
        cache: l.cache.map(|m| Word(m.as_str().to_string())),
        scsi_id: l.scsi_id.clone(),
        sense_format: (l.sense_format != SenseFormat::Fixed).then(|| word(l.sense_format.as_str())),
        removable: l.removable.then_some(YesNo(true)),
        thin_provisioning: l.thin_provisioning.then_some(YesNo(true)),
        online: (!l.online).then_some(YesNo(false)),
        device_type: (l.device_type != DeviceType::Disk).then(|| word(l.device_type.as_str())),
        // the default is the device type's: rdwr for a disk, mmc for a cd, ssc for a tape
        bs_type: (l.bs_type != BsType::default_for(l.device_type))
            .then(|| word(l.bs_type.as_str())),
        bsoflags: (l.bsoflags != BsOflags::default()).then(|| Word(l.bsoflags.as_string())),
        bsopts: l.bsopts.clone(),
        lbppbe: l.lbppbe.map(u64::from),
        la_lba: l.la_lba.map(u64::from),
        optimal_xfer_gran: l.optimal_xfer_gran.map(u64::from),
        optimal_xfer_len: l.optimal_xfer_len.map(u64::from),
        alua_owner: l.alua_owner.map(u64::from),
        qos: crate::qos::RawQos::from_model(&l.qos),
        changer: l.changer.clone(),
    }
}

fn word(s: &str) -> Word {
    Word(s.to_string())
}

/// A size in its short form (`64K`), or a plain number when it has no unit,
/// so that YAML shows `12345` rather than `'12345'`.
fn size_scalar(bytes: u64) -> Scalar {
    let t = crate::size::format_size(bytes);
    if t.bytes().all(|b| b.is_ascii_digit()) {
        Scalar::Int(bytes.into())
    } else {
        Scalar::Text(t)
    }
}

fn raw_cache(c: &CacheSettings) -> RawCache {
    RawCache {
        mode: Some(Word(c.mode.as_str().to_string())),
        size_per_node: Some(match c.size_per_node {
            crate::model::CacheSize::Auto => Scalar::Text("auto".into()),
            crate::model::CacheSize::Bytes(b) => size_scalar(b),
        }),
        block_size: Some(size_scalar(c.block_size.into())),
        group_blocks: Some(c.group_blocks.into()),
        partitions_per_node: Some(c.partitions_per_node.into()),
        huge_pages: Some(YesNo(c.huge_pages)),
        dirty_limit: Some(match c.dirty_limit {
            DirtyLimit::Percent(p) => Scalar::Text(format!("{p}%")),
            DirtyLimit::Bytes(b) => size_scalar(b),
        }),
        read_ahead: Some(c.read_ahead.into()),
        warm_restart: Some(YesNo(c.warm_restart)),
        memory: Some(Word(c.memory.as_str().to_string())),
    }
}

fn raw_router(r: &RouterSettings) -> RawRouter {
    RawRouter {
        min_forward_bytes: Some(size_scalar(r.min_forward_bytes)),
        max_queue: Some(r.max_queue.into()),
        enabled: Some(YesNo(r.enabled)),
    }
}

fn raw_target(t: &TargetConfig) -> RawTarget {
    let all = || list(["ALL".to_string()]);
    RawTarget {
        iqn: t.iqn.clone(),
        tid: t.tid.map(u64::from),
        alias: t.alias.clone(),
        allow: Some(RawAllow {
            initiators: Some(if t.allow_initiators.is_empty() {
                all()
            } else {
                list(t.allow_initiators.iter().cloned())
            }),
            addresses: Some(if t.allow_addresses.is_empty() {
                all()
            } else {
                list(t.allow_addresses.iter().map(|a| a.to_string()))
            }),
        }),
        iscsi: t.iscsi.as_ref().map(raw_override),
        driver: Some(word(t.driver.as_str())),
        state: Some(word(t.state.as_str())),
        incoming_users: (!t.incoming_users.is_empty())
            .then(|| list(t.incoming_users.iter().cloned())),
        outgoing_user: t.outgoing_user.clone(),
        max_sessions: t.max_sessions.map(u64::from),
        qos: crate::qos::RawQos::from_model(&t.qos),
        luns: Some(t.luns.iter().map(raw_lun).collect()),
        alua: t.alua.as_ref().map(crate::alua::RawAlua::from_model),
    }
}

fn raw_auth(a: &DiscoveryAuth) -> RawAuth {
    RawAuth {
        incoming_users: (!a.incoming_users.is_empty())
            .then(|| list(a.incoming_users.iter().cloned())),
        outgoing_user: a.outgoing_user.clone(),
    }
}

fn auto_or(n: Option<usize>) -> Scalar {
    match n {
        Some(n) => Scalar::Int(n as i128),
        None => Scalar::Text("auto".into()),
    }
}

pub(crate) fn to_yaml(c: &Config) -> String {
    let raw = RawConfig {
        portals: Some(c.portals.iter().map(raw_portal).collect()),
        iser_portals: c
            .iser_portals
            .as_ref()
            .map(|l| l.iter().map(raw_portal).collect()),
        numa: Some(RawNuma {
            nodes: Some(auto_or(c.numa.nodes)),
        }),
        threads: Some(RawThreads {
            event_threads: Some(auto_or(c.threads.event_threads)),
            io_threads: c.threads.io_threads.map(|n| n as u64),
            io_engine: (c.threads.io_engine != IoEngine::Auto)
                .then(|| Word(c.threads.io_engine.as_str().to_string())),
            busy_poll_us: (c.threads.busy_poll_us != 0)
                .then_some(u64::from(c.threads.busy_poll_us)),
        }),
        iscsi: Some(raw_iscsi(&c.iscsi)),
        cache: Some(raw_cache(&c.cache)),
        router: Some(raw_router(&c.router)),
        metrics: Some(RawMetrics {
            address: match c.metrics.address {
                MetricsAddress::Default => None,
                MetricsAddress::Off => Some("off".into()),
                MetricsAddress::At(a) => Some(a.to_string()),
            },
            session_info: c.metrics.session_info.then_some(YesNo(true)),
        }),
        limits: Some(RawLimits {
            max_sessions: Some(c.limits.max_sessions.into()),
            max_connections: Some(c.limits.max_connections.into()),
            login_timeout: Some(c.limits.login_timeout.into()),
            max_mgmt_clients: Some(c.limits.max_mgmt_clients.into()),
        }),
        accounts: (!c.accounts.is_empty()).then(|| {
            c.accounts
                .iter()
                .map(|a| RawAccount {
                    user: a.user.clone(),
                    password: a.password.clone(),
                })
                .collect()
        }),
        discovery_auth: (c.discovery_auth != DiscoveryAuth::default())
            .then(|| raw_auth(&c.discovery_auth)),
        targets: Some(c.targets.iter().map(raw_target).collect()),
    };
    // Serialising these plain structures cannot fail; keep a readable fallback anyway.
    serde_yaml::to_string(&raw)
        .unwrap_or_else(|e| format!("# cannot serialise configuration: {e}\n"))
}
