//! End-to-end tests of `config::parse`: the example file, defaults, every
//! validation rule with its message and location, `to_yaml` round trips, and
//! a property test that no input makes the parser panic.

use std::net::IpAddr;
use std::path::Path;

use config::{AddressRule, Config, ConfigError, Digest, IscsiParams, parse};
use proptest::prelude::*;

const EXAMPLE: &str = include_str!("../examples/numatgt.yaml");

fn err(text: &str) -> ConfigError {
    match parse(text, "t.yaml") {
        Ok(c) => panic!("accepted:\n{text}\n=> {c:?}"),
        Err(e) => e,
    }
}

/// Asserts the error names `path` and contains `words`, and returns it.
fn check(text: &str, path: &str, words: &str) -> ConfigError {
    let e = err(text);
    assert_eq!(e.path(), path, "{e}");
    assert!(e.to_string().contains(words), "{e} lacks {words:?}");
    assert!(e.to_string().starts_with("t.yaml"), "{e}");
    e
}

/// A minimal target with one LUN, with `lun_extra` lines added to the LUN.
fn one_lun(lun_extra: &str) -> String {
    let mut s = String::from(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    luns:\n      - lun: 1\n        path: /d/a.img\n",
    );
    for l in lun_extra.lines() {
        s.push_str("        ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn example_parses() {
    let c = parse(EXAMPLE, "numatgt.yaml").unwrap();
    assert_eq!(c.portals.len(), 2);
    assert_eq!(c.portals[0].addr, "127.0.0.1:3260".parse().unwrap());
    assert_eq!(c.portals[0].nop_interval, Some(10));
    assert_eq!(c.portals[1].addr, "[::1]:3260".parse().unwrap());
    assert_eq!(c.numa.nodes, None);
    assert_eq!(c.threads.event_threads, None);
    assert_eq!(c.threads.io_threads, Some(4));
    assert_eq!(c.iscsi, IscsiParams::default());
    assert_eq!(c.targets.len(), 2);
    let t = &c.targets[0];
    assert_eq!(t.tid, Some(1));
    assert_eq!(t.alias.as_deref(), Some("first disk"));
    assert!(t.allow_initiators.is_empty() && t.allow_addresses.is_empty());
    let eff = t.effective_iscsi(&c.iscsi);
    assert_eq!(eff.max_recv_data_segment_length, 65536);
    assert_eq!(eff.max_burst_length, 262144);
    assert_eq!(t.luns[0].create_size, Some(1 << 30));
    assert_eq!(t.luns[0].product_rev.as_deref(), Some("0001"));
    assert_eq!(t.luns[1].block_size, 4096);
    assert_eq!(t.luns[1].create_size, Some(64 << 20));
    assert!(t.luns[1].write_cache);
    let r = &c.targets[1];
    assert_eq!(r.allow_initiators.len(), 2);
    assert!(r.allows("iqn.1993-08.org.debian:01:host1", ip("192.168.10.7")));
    assert!(r.allows("iqn.1993-08.org.debian:01:host1", ip("fd00::7")));
    assert!(!r.allows("iqn.1993-08.org.debian:01:host1", ip("192.168.11.7")));
    assert!(!r.allows("iqn.1993-08.org.debian:01:host2", ip("192.168.10.7")));
    assert!(r.luns[0].readonly && !r.luns[0].write_cache);
    assert_eq!(r.luns[0].lun, 0);
}

#[test]
fn defaults() {
    for text in ["", "# nothing\n", "---\n", "targets: []\n"] {
        let c = parse(text, "t.yaml").unwrap();
        assert_eq!(c, Config::default());
    }
    let c = Config::default();
    assert_eq!(c.portals.len(), 1);
    assert_eq!(c.portals[0].addr, "0.0.0.0:3260".parse().unwrap());
    let p = &c.iscsi;
    assert_eq!(
        (
            p.max_recv_data_segment_length,
            p.max_burst_length,
            p.first_burst_length
        ),
        (262144, 262144, 65536)
    );
    assert!(p.immediate_data && p.initial_r2t);
    assert_eq!((p.max_outstanding_r2t, p.max_queued_commands), (1, 128));
    assert_eq!(p.header_digest, vec![Digest::None, Digest::Crc32c]);
    let c = parse(&one_lun(""), "t.yaml").unwrap();
    let l = &c.targets[0].luns[0];
    assert_eq!(
        (l.block_size, l.write_cache, l.readonly, l.create_size),
        (512, true, false, None)
    );
}

#[test]
fn error_location_and_shape() {
    let text = "\
portals:
  - address: 127.0.0.1:3260
targets:
  - iqn: iqn.2026-11.org.numatgt:a
    luns:
      - lun: 1
        path: /d/a.img
      - lun: 2
        path: /d/b.img
        block_size: 1000
";
    let e = parse(text, "demo.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "demo.yaml:10:9: targets[0].luns[1].block_size: must be 512 or 4096 (got 1000)"
    );
    assert_eq!(
        (e.file(), e.line(), e.column()),
        ("demo.yaml", Some(10), Some(9))
    );
    assert_eq!(e.message(), "must be 512 or 4096 (got 1000)");
    let _: &dyn std::error::Error = &e;
}

#[test]
fn serde_errors_are_located() {
    // Unknown field.
    let e = err(&one_lun("bogus: 1"));
    assert_eq!(e.line(), Some(6), "{e}");
    assert_eq!(e.path(), "targets[0].luns[0]");
    assert!(e.message().contains("unknown field `bogus`"), "{e}");
    assert!(e.to_string().starts_with("t.yaml:6:"), "{e}");
    // Unknown top-level field.
    let e = err("portal: x\n");
    assert!(e.to_string().contains("unknown field `portal`"), "{e}");
    assert!(e.to_string().starts_with("t.yaml:1:"), "{e}");
    // Wrong type.
    let e = err(&one_lun("block_size: big"));
    assert_eq!(e.path(), "targets[0].luns[0].block_size");
    assert_eq!(e.line(), Some(6));
    // Missing field.
    let e = err("targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    luns:\n      - lun: 1\n");
    assert!(e.message().contains("missing field `path`"), "{e}");
    // Syntax error: no path, but a position.
    let e = err("targets: [\n");
    assert_eq!(e.path(), "");
    assert!(e.line().is_some(), "{e}");
    assert!(e.to_string().starts_with("t.yaml:"), "{e}");
    // Negative number.
    let e = err(&one_lun("block_size: -512"));
    assert_eq!(e.path(), "targets[0].luns[0].block_size");
}

#[test]
fn unknown_fields_everywhere() {
    for (text, path) in [
        ("portals:\n  - address: 1.2.3.4:1\n    x: 1\n", "portals[0]"),
        ("numa:\n  x: 1\n", "numa"),
        ("threads:\n  x: 1\n", "threads"),
        ("iscsi:\n  MaxRecvDataSegmentlength: 512\n", "iscsi"),
        (
            "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    x: 1\n",
            "targets[0]",
        ),
        (
            "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    allow:\n      x: 1\n",
            "targets[0].allow",
        ),
        (
            "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    iscsi:\n      x: 1\n",
            "targets[0].iscsi",
        ),
    ] {
        let e = err(text);
        assert_eq!(e.path(), path, "{e}");
        assert!(e.message().contains("unknown field"), "{e}");
        assert!(e.line().is_some(), "{e}");
    }
}

#[test]
fn portal_rules() {
    check(
        "portals:\n  - address: nowhere\n",
        "portals[0].address",
        "not a portal address",
    );
    let e = check(
        "portals:\n  - address: 127.0.0.1:3260\n  - address: 127.0.0.1:3260\n",
        "portals[1].address",
        "duplicates portals[0]",
    );
    assert_eq!(e.line(), Some(3));
    check(
        "portals:\n  - address: 0.0.0.0:3260\n  - address: 10.0.0.1:3260\n",
        "portals[1].address",
        "wildcard",
    );
    check("portals: []\n", "portals", "at least one portal");
    check(
        "portals:\n  - address: 1.2.3.4:1\n    nop_interval: 100000\n",
        "portals[0].nop_interval",
        "0..=86400",
    );
    check(
        "portals:\n  - address: 1.2.3.4:1\n    nop_count: 70000\n",
        "portals[0].nop_count",
        "0..=65535",
    );
    // Fine: different ports, port 0 twice, v4 + v6 wildcard, bare IP.
    let c = parse(
        "portals:\n  - address: 127.0.0.1:0\n  - address: 127.0.0.1:0\n  - address: 0.0.0.0:3260\n  - address: \"[::]:3260\"\n  - address: 10.0.0.1:3261\n",
        "t.yaml",
    )
    .unwrap();
    assert_eq!(c.portals.len(), 5);
    let c = parse("portals:\n  - address: 10.0.0.1\n", "t").unwrap();
    assert_eq!(c.portals[0].addr, "10.0.0.1:3260".parse().unwrap());
}

#[test]
fn numa_and_threads() {
    let c = parse(
        "numa:\n  nodes: 2\nthreads:\n  event_threads: 8\n  io_threads: 2\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.numa.nodes, Some(2));
    assert_eq!(c.threads.event_threads, Some(8));
    assert_eq!(c.threads.io_threads, Some(2));
    let c = parse(
        "numa:\n  nodes: AUTO\nthreads:\n  event_threads: auto\n",
        "t",
    )
    .unwrap();
    assert_eq!((c.numa.nodes, c.threads.event_threads), (None, None));
    check(
        "numa:\n  nodes: 0\n",
        "numa.nodes",
        "must be auto or a number in 1..=256 (got 0)",
    );
    check("numa:\n  nodes: 257\n", "numa.nodes", "1..=256");
    check("numa:\n  nodes: many\n", "numa.nodes", "\"many\"");
    check("numa:\n  nodes: -1\n", "numa.nodes", "(got -1)");
    check(
        "threads:\n  event_threads: 0\n",
        "threads.event_threads",
        "1..=4096",
    );
    check(
        "threads:\n  io_threads: 0\n",
        "threads.io_threads",
        "1..=256 (got 0)",
    );
    check(
        "threads:\n  io_threads: 257\n",
        "threads.io_threads",
        "1..=256",
    );
}

#[test]
fn iscsi_ranges() {
    for (key, bad, words) in [
        (
            "MaxRecvDataSegmentLength",
            "511",
            "512..=16777215 (got 511)",
        ),
        ("MaxRecvDataSegmentLength", "16777216", "512..=16777215"),
        ("MaxBurstLength", "100", "512..=16777215"),
        ("FirstBurstLength", "16777216", "512..=16777215"),
        ("MaxOutstandingR2T", "0", "1..=65535"),
        ("MaxOutstandingR2T", "65536", "1..=65535"),
        ("MaxQueueCmd", "0", "1..=2048"),
        ("MaxQueueCmd", "2049", "1..=2048"),
        ("NopInterval", "86401", "0..=86400"),
        (
            "HeaderDigest",
            "[None, MD5]",
            "must be None or CRC32C (got \"MD5\")",
        ),
        ("DataDigest", "[]", "at least one"),
        ("ImmediateData", "maybe", "Yes/No"),
    ] {
        let first = if key == "MaxBurstLength" {
            "MaxQueueCmd: 1"
        } else {
            "MaxBurstLength: 262144"
        };
        let text = format!("iscsi:\n  {first}\n  {key}: {bad}\n");
        let e = err(&text);
        assert!(e.path().starts_with(&format!("iscsi.{key}")), "{e}");
        assert!(e.to_string().contains(words), "{e} lacks {words}");
        assert_eq!(e.line(), Some(3), "{e}");
    }
    let e = check(
        "iscsi:\n  FirstBurstLength: 262144\n  MaxBurstLength: 65536\n",
        "iscsi.FirstBurstLength",
        "FirstBurstLength (262144) must not exceed MaxBurstLength (65536)",
    );
    assert_eq!(e.line(), Some(2));
    check(
        "iscsi:\n  MaxBurstLength: 4096\n",
        "iscsi.MaxBurstLength",
        "must not exceed",
    );
    let c = parse(
        "iscsi:\n  ImmediateData: No\n  InitialR2T: yes\n  HeaderDigest: CRC32C,None\n  DataDigest: [crc32c]\n",
        "t",
    )
    .unwrap();
    assert!(!c.iscsi.immediate_data && c.iscsi.initial_r2t);
    assert_eq!(c.iscsi.header_digest, vec![Digest::Crc32c, Digest::None]);
    assert_eq!(c.iscsi.data_digest, vec![Digest::Crc32c]);
}

#[test]
fn target_iscsi_overrides() {
    let base = "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    iscsi: ";
    let c = parse(
        &format!("{base}{{ MaxBurstLength: 131072, DataDigest: [CRC32C] }}\n"),
        "t",
    )
    .unwrap();
    let o = c.targets[0].iscsi.as_ref().unwrap();
    assert_eq!(o.max_burst_length, Some(131072));
    assert_eq!(o.first_burst_length, None);
    let e = check(
        &format!("{base}{{ MaxBurstLength: 4096 }}\n"),
        "targets[0].iscsi.MaxBurstLength",
        "FirstBurstLength (65536) must not exceed MaxBurstLength (4096)",
    );
    assert_eq!((e.line(), e.column()), (Some(3), Some(14)));
    check(
        &format!("{base}{{ MaxQueueCmd: 0 }}\n"),
        "targets[0].iscsi.MaxQueueCmd",
        "1..=2048",
    );
}

#[test]
fn target_names() {
    let t = |iqn: &str| format!("targets:\n  - iqn: \"{iqn}\"\n");
    for bad in [
        "iqn.2026-11.org.Numatgt:a",
        "iqn.2026-13.org.numatgt:a",
        "iqn.2026-11.org.numatgt:a b",
        "eui.123",
        "naa.1234",
        "target1",
        "",
    ] {
        let e = check(&t(bad), "targets[0].iqn", "");
        assert_eq!(e.line(), Some(2), "{e}");
    }
    let long = format!("iqn.2026-11.org.numatgt:{}", "x".repeat(200));
    check(&t(&long), "targets[0].iqn", "maximum is 223");
    for good in [
        "eui.02004567A425678D",
        "naa.52004567BA64678D",
        "iqn.2026-11.org.numatgt",
    ] {
        parse(&t(good), "t").unwrap();
    }
    let e = check(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n  - iqn: iqn.2026-11.org.numatgt:b\n  - iqn: iqn.2026-11.org.numatgt:a\n",
        "targets[2].iqn",
        "already used by targets[0]",
    );
    assert_eq!(e.line(), Some(4));
    check(
        "targets:\n  - iqn: eui.02004567A425678D\n  - iqn: eui.02004567a425678d\n",
        "targets[1].iqn",
        "duplicate target name",
    );
}

#[test]
fn tids_and_alias() {
    check(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    tid: 3\n  - iqn: iqn.2026-11.org.numatgt:b\n    tid: 3\n",
        "targets[1].tid",
        "duplicate tid 3, already used by targets[0]",
    );
    check(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    tid: 0\n",
        "targets[0].tid",
        "1..=2147483647",
    );
    check(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    alias: \"\"\n",
        "targets[0].alias",
        "1..=255",
    );
}

#[test]
fn acl_rules() {
    let t =
        |allow: &str| format!("targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    allow:\n{allow}");
    let e = check(
        &t("      addresses:\n        - 10.0.0.0/8\n        - 10.0.0.0/33\n"),
        "targets[0].allow.addresses[1]",
        "prefix length must be 0..=32",
    );
    assert_eq!(e.line(), Some(6));
    check(
        &t("      addresses: [\"::/129\"]\n"),
        "targets[0].allow.addresses[0]",
        "0..=128",
    );
    check(
        &t("      addresses: [somehost]\n"),
        "targets[0].allow.addresses[0]",
        "not an IP",
    );
    check(
        &t("      addresses: []\n"),
        "targets[0].allow.addresses",
        "empty list",
    );
    check(
        &t("      initiators: [bad_name]\n"),
        "targets[0].allow.initiators[0]",
        "iSCSI name",
    );
    check(
        &t("      initiators: iqn.x\n"),
        "targets[0].allow.initiators",
        "bad date",
    );
    let c = parse(&t("      initiators: ALL\n      addresses: all\n"), "t").unwrap();
    assert!(c.targets[0].allow_initiators.is_empty());
    assert!(c.targets[0].allow_addresses.is_empty());
    let c = parse(
        &t("      initiators: [iqn.1993-08.org.debian:01:a]\n      addresses: [\"::ffff:10.0.0.0/104\", 127.0.0.1]\n"),
        "t",
    )
    .unwrap();
    let tc = &c.targets[0];
    assert_eq!(
        tc.allow_addresses[1],
        AddressRule::parse("127.0.0.1").unwrap()
    );
    assert!(tc.allows("iqn.1993-08.org.debian:01:a", ip("10.2.3.4")));
    assert!(tc.allows("iqn.1993-08.org.debian:01:a", ip("::ffff:127.0.0.1")));
    assert!(!tc.allows("iqn.1993-08.org.debian:01:a", ip("11.2.3.4")));
    assert!(!tc.allows("iqn.1993-08.org.debian:01:b", ip("10.2.3.4")));
}

#[test]
fn lun_rules() {
    check(
        &one_lun("block_size: 1000"),
        "targets[0].luns[0].block_size",
        "must be 512 or 4096 (got 1000)",
    );
    let mut big = one_lun("");
    big = big.replace("lun: 1", "lun: 16384");
    check(&big, "targets[0].luns[0].lun", "0..=16383 (got 16384)");
    let rel = one_lun("").replace("/d/a.img", "d/a.img");
    check(&rel, "targets[0].luns[0].path", "must be an absolute path");
    let empty = one_lun("").replace("/d/a.img", "\"\"");
    check(&empty, "targets[0].luns[0].path", "must not be empty");
    check(
        &one_lun("size: 1000"),
        "targets[0].luns[0].size",
        "not a multiple of the block size 512",
    );
    check(
        &one_lun("size: 6K\nblock_size: 4096"),
        "targets[0].luns[0].size",
        "block size 4096",
    );
    check(
        &one_lun("size: 0"),
        "targets[0].luns[0].size",
        "greater than 0",
    );
    check(
        &one_lun("size: 1Q"),
        "targets[0].luns[0].size",
        "unknown size suffix",
    );
    check(&one_lun("size: -1"), "targets[0].luns[0].size", "positive");
    check(
        &one_lun("size: 99999999T"),
        "targets[0].luns[0].size",
        "64 bits",
    );
    check(
        &one_lun("vendor_id: TOOLONGVENDOR"),
        "targets[0].luns[0].vendor_id",
        "1 to 8 printable",
    );
    check(
        &one_lun("product_id: \"12345678901234567\""),
        "targets[0].luns[0].product_id",
        "1 to 16",
    );
    check(
        &one_lun("product_rev: \"12345\""),
        "targets[0].luns[0].product_rev",
        "1 to 4",
    );
    check(
        &one_lun(&format!("serial: \"{}\"", "s".repeat(37))),
        "targets[0].luns[0].serial",
        "1 to 36",
    );
    check(
        &one_lun("serial: \"tab\\there\""),
        "targets[0].luns[0].serial",
        "printable",
    );
    check(
        &one_lun("vendor_id: \"\u{e9}t\u{e9}\""),
        "targets[0].luns[0].vendor_id",
        "ASCII",
    );
    check(
        &one_lun("write_cache: sometimes"),
        "targets[0].luns[0].write_cache",
        "Yes/No",
    );
    let c = parse(
        &one_lun("size: 8192\nwrite_cache: No\nreadonly: yes\nblock_size: 4096\nserial: \"36\""),
        "t",
    )
    .unwrap();
    let l = &c.targets[0].luns[0];
    assert_eq!(
        (l.create_size, l.write_cache, l.readonly, l.block_size),
        (Some(8192), false, true, 4096)
    );
}

#[test]
fn lun_size_multiple_of_4096() {
    let c = parse(&one_lun("size: 8K\nblock_size: 4096"), "t").unwrap();
    assert_eq!(c.targets[0].luns[0].create_size, Some(8192));
}

#[test]
fn duplicate_luns_and_files() {
    let text = "\
targets:
  - iqn: iqn.2026-11.org.numatgt:a
    luns:
      - lun: 1
        path: /d/a.img
      - lun: 1
        path: /d/b.img
";
    let e = check(
        text,
        "targets[0].luns[1].lun",
        "LUN 1 is already used by targets[0].luns[0]",
    );
    assert_eq!((e.line(), e.column()), (Some(6), Some(9)));
    let text = "\
targets:
  - iqn: iqn.2026-11.org.numatgt:a
    luns:
      - lun: 1
        path: /d/a.img
  - iqn: iqn.2026-11.org.numatgt:b
    luns:
      - lun: 1
        path: /d/a.img
";
    let e = check(
        text,
        "targets[1].luns[0].path",
        "already the backing file of targets[0].luns[0]",
    );
    assert_eq!(e.line(), Some(9));
    let shared_ro = text.replace("path: /d/a.img", "path: /d/a.img\n        readonly: true");
    parse(&shared_ro, "t").unwrap();
}

#[test]
fn demo_round_trips() {
    let c = Config::demo(Path::new("/var/lib/numatgt"), &[]);
    let y = c.to_yaml();
    assert_eq!(parse(&y, "dump.yaml").unwrap(), c, "{y}");
    assert!(y.contains("iqn.2026-11.org.numatgt:demo"));
    assert!(y.contains("1G"));
}

#[test]
fn example_round_trips() {
    let c = parse(EXAMPLE, "numatgt.yaml").unwrap();
    let y = c.to_yaml();
    assert_eq!(parse(&y, "dump.yaml").unwrap(), c, "{y}");
    let c = Config::default();
    assert_eq!(parse(&c.to_yaml(), "d").unwrap(), c);
}

#[test]
fn tgtd_portal_option() {
    let p =
        config::PortalConfig::from_tgtd_option("portal=127.0.0.1:3261,nop_interval=5,nop_count=2")
            .unwrap();
    assert_eq!(p.addr, "127.0.0.1:3261".parse().unwrap());
    assert_eq!((p.nop_interval, p.nop_count), (Some(5), Some(2)));
    let p = config::PortalConfig::from_tgtd_option("portal=[::1]:3262").unwrap();
    assert_eq!(p.addr, "[::1]:3262".parse().unwrap());
    assert_eq!(p.nop_interval, None);
    let e = config::PortalConfig::from_tgtd_option("portal=x").unwrap_err();
    assert!(e.to_string().starts_with("--iscsi: portal:"), "{e}");
    assert!(config::PortalConfig::from_tgtd_option("nop_count=1").is_err());
    assert!(config::PortalConfig::from_tgtd_option("portal=1.2.3.4:1,bogus=1").is_err());
    assert!(config::PortalConfig::from_tgtd_option("portal=1.2.3.4:1,nop_count=x").is_err());
}

/// Builds syntactically plausible YAML from config-ish fragments.
fn yamlish() -> impl Strategy<Value = String> {
    let atom = prop::sample::select(vec![
        "portals:",
        "targets:",
        "luns:",
        "iscsi:",
        "allow:",
        "numa:",
        "threads:",
        "- ",
        "  ",
        "    ",
        "iqn: iqn.2026-11.org.numatgt:a",
        "lun: 1",
        "path: /x",
        "size: 1G",
        "block_size: 4096",
        "address: 127.0.0.1:3260",
        "nodes: auto",
        "MaxBurstLength: 512",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "'",
        "&a",
        "*a",
        "!!str",
        "<<: *a",
        "\n",
        "# c",
        "ALL",
        "-1",
        "99999999999999999999",
        "~",
        "\t",
        "---",
        "...",
        "|",
        ">",
    ]);
    prop::collection::vec(atom, 0..60).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_bytes(s in ".{0,300}") {
        let _ = parse(&s, "p.yaml");
    }

    #[test]
    fn never_panics_on_yamlish(s in yamlish()) {
        if let Err(e) = parse(&s, "p.yaml") {
            prop_assert!(e.to_string().starts_with("p.yaml"));
        }
    }

    #[test]
    fn parsed_configs_round_trip(s in yamlish()) {
        if let Ok(c) = parse(&s, "p.yaml") {
            let y = c.to_yaml();
            prop_assert_eq!(parse(&y, "dump").ok(), Some(c));
        }
    }

    #[test]
    fn sizes_round_trip(n in any::<u64>()) {
        prop_assert_eq!(config::parse_size(&config::format_size(n)), Ok(n));
    }
}
