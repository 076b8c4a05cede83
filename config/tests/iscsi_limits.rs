//! The configuration's numeric iSCSI keys follow `iscsi_proto::limits`: every such key the
//! file accepts is in the table, exactly its range is accepted, and the defaults are the
//! table's.

use config::{IscsiParams, parse};
use iscsi_proto::limits;

/// Numeric `iscsi:` keys that are numatgt's own, not RFC 7143 keys.
const LOCAL_KEYS: [&str; 3] = ["MaxQueueCmd", "NopInterval", "NopCount"];

/// The numeric keys of the `iscsi:` section, as `to_yaml` writes the defaults.
fn numeric_keys() -> Vec<(String, u64)> {
    let yaml = parse("", "t").unwrap().to_yaml();
    let section = yaml
        .split("\niscsi:\n")
        .nth(1)
        .expect("an iscsi: section")
        .lines()
        .take_while(|l| l.starts_with("  "));
    section
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(": ")?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn accepts(key: &str, v: u64) -> bool {
    // keep FirstBurstLength <= MaxBurstLength out of the way
    let other = match key {
        "MaxBurstLength" => "FirstBurstLength: 512",
        _ => "MaxBurstLength: 16777215",
    };
    parse(&format!("iscsi:\n  {other}\n  {key}: {v}\n"), "t.yaml").is_ok()
}

#[test]
fn every_numeric_iscsi_key_is_in_the_table() {
    let keys = numeric_keys();
    assert!(keys.len() >= 8, "{keys:?}");
    for (name, default) in keys {
        if LOCAL_KEYS.contains(&name.as_str()) {
            continue;
        }
        let k = limits::find(&name).unwrap_or_else(|| panic!("{name} not in iscsi_proto::limits"));
        assert_eq!(default, u64::from(k.target_default), "{name} default");
        assert!(accepts(&name, k.min.into()), "{name} min");
        assert!(accepts(&name, k.max.into()), "{name} max");
        assert!(!accepts(&name, u64::from(k.max) + 1), "{name} max+1");
        if k.min > 0 {
            assert!(!accepts(&name, u64::from(k.min) - 1), "{name} min-1");
        }
    }
    let d = IscsiParams::default();
    assert_eq!(
        d.max_recv_data_segment_length,
        limits::MAX_RECV_DATA_SEGMENT_LENGTH.target_default
    );
    assert_eq!(d.max_connections, limits::MAX_CONNECTIONS.target_default);
}
