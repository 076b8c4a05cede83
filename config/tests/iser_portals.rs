//! `iser_portals:`: the same syntax and checks as `portals:`, absent = tgtd's default
//! (iSER on 0.0.0.0:3260 when the host has an RDMA device), `[]` = iSER off; the YAML round
//! trip keeps all three forms; targets.conf `driver iser` reaches the model.

use config::{ConfigError, Driver, PortalConfig, parse};

fn err(text: &str) -> ConfigError {
    match parse(text, "t.yaml") {
        Ok(c) => panic!("accepted:\n{text}\n=> {c:?}"),
        Err(e) => e,
    }
}

fn check(text: &str, path: &str, words: &str) {
    let e = err(text);
    assert_eq!(e.path(), path, "{e}");
    assert!(e.to_string().contains(words), "{e} lacks {words:?}");
}

#[test]
fn absent_is_the_default() {
    let c = parse("portals:\n  - address: 127.0.0.1:3260\n", "t.yaml").expect("parse");
    assert_eq!(c.iser_portals, None);
    assert_eq!(
        c.iser_listen(true),
        vec![PortalConfig::new("0.0.0.0:3260".parse().expect("addr"))]
    );
    assert!(c.iser_listen(false).is_empty());
    assert_eq!(parse("", "t.yaml").expect("empty").iser_portals, None);
}

#[test]
fn explicit_list_and_empty_list() {
    let c = parse(
        "iser_portals:\n  - address: 10.0.0.1:3260\n    nop_interval: 5\n    nop_count: 2\n  - address: \"[::1]:3261\"\n  - address: 10.0.0.2\n",
        "t.yaml",
    )
    .expect("parse");
    let l = c.iser_portals.clone().expect("some");
    assert_eq!(l.len(), 3);
    assert_eq!(l[0].addr, "10.0.0.1:3260".parse().expect("addr"));
    assert_eq!((l[0].nop_interval, l[0].nop_count), (Some(5), Some(2)));
    assert_eq!(l[1].addr, "[::1]:3261".parse().expect("addr"));
    assert_eq!(l[2].addr, "10.0.0.2:3260".parse().expect("addr"));
    // the rdma device decides nothing when the list is given
    assert_eq!(c.iser_listen(false), l);
    // TCP portals keep their default
    assert_eq!(c.portals[0].addr, "0.0.0.0:3260".parse().expect("addr"));

    let off = parse("iser_portals: []\n", "t.yaml").expect("parse");
    assert_eq!(off.iser_portals, Some(Vec::new()));
    assert!(off.iser_listen(true).is_empty());
}

#[test]
fn same_address_as_a_tcp_portal_is_fine() {
    let c = parse(
        "portals:\n  - address: 0.0.0.0:3260\niser_portals:\n  - address: 0.0.0.0:3260\n",
        "t.yaml",
    )
    .expect("parse");
    assert_eq!(c.iser_portals.map(|l| l.len()), Some(1));
}

#[test]
fn bad_entries_are_located() {
    check(
        "iser_portals:\n  - address: nowhere\n",
        "iser_portals[0].address",
        "nowhere",
    );
    check(
        "iser_portals:\n  - address: 10.0.0.1:3260\n  - address: 10.0.0.1:3260\n",
        "iser_portals[1].address",
        "duplicates iser_portals[0]",
    );
    check(
        "iser_portals:\n  - address: 0.0.0.0:3260\n  - address: 10.0.0.1:3260\n",
        "iser_portals[1].address",
        "wildcard",
    );
    check(
        "iser_portals:\n  - address: 1.2.3.4:1\n    nop_count: 70000\n",
        "iser_portals[0].nop_count",
        "",
    );
    check(
        "iser_portals:\n  - address: 1.2.3.4:1\n    bogus: 1\n",
        "iser_portals[0]",
        "bogus",
    );
}

#[test]
fn yaml_round_trip_keeps_all_three_forms() {
    for text in [
        "",
        "iser_portals: []\n",
        "iser_portals:\n  - address: 10.0.0.1:3262\n    nop_interval: 7\n",
    ] {
        let c = parse(text, "t.yaml").expect("parse");
        let back = parse(&c.to_yaml(), "again.yaml").expect("reparse");
        assert_eq!(back, c, "{}", c.to_yaml());
    }
}

#[test]
fn targets_conf_driver_iser_reaches_the_model() {
    let text = "<target iqn.2026-11.org.numatgt:r>\n    driver iser\n    backing-store /d/r.img\n</target>\n<target iqn.2026-11.org.numatgt:t>\n    backing-store /d/t.img\n</target>\n";
    let imp = config::targets_conf::import_str(text, std::path::Path::new("/etc/tgt/targets.conf"))
        .expect("import");
    let c = imp.config;
    let r = c.target("iqn.2026-11.org.numatgt:r").expect("r");
    let t = c.target("iqn.2026-11.org.numatgt:t").expect("t");
    assert_eq!((r.driver, t.driver), (Driver::Iser, Driver::Iscsi));
    // targets.conf has no portal syntax: iSER keeps tgtd's default
    assert_eq!(c.iser_portals, None);
}
