//! End-to-end tests of `config::parse`: the example file, defaults, every
//! validation rule with its message and location, `to_yaml` round trips, and
//! a property test that no input makes the parser panic.

use std::net::IpAddr;
use std::path::Path;

use config::{
    AddressRule, CacheMode, CacheSettings, CacheSize, Config, ConfigError, Digest, DirtyLimit,
    IscsiParams, RouterSettings, parse,
};
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
    assert_eq!((t.qos.iops, t.qos.bps), (Some(20000), Some(200 << 20)));
    let q = t.luns[0].effective_qos(t);
    assert_eq!(
        (q.iops, q.read_iops, q.bps),
        (Some(0), Some(5000), Some(200 << 20))
    );
    assert_eq!((q.write_bps, q.burst_ms), (Some(50 << 20), Some(500)));
    assert_eq!(q.burst_percent, Some(150));
    assert_eq!(t.luns[1].effective_qos(t), t.qos);
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
        ("cache:\n  blocksize: 4K\n", "cache"),
        ("router:\n  x: 1\n", "router"),
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
fn io_engine_and_busy_poll() {
    let c = parse("threads:\n  io_engine: IO_URING\n  busy_poll_us: 50\n", "t").unwrap();
    assert_eq!(c.threads.io_engine, config::IoEngine::Uring);
    assert_eq!(c.threads.busy_poll_us, 50);
    let back = parse(&c.to_yaml(), "dump.yaml").unwrap();
    assert_eq!(back, c, "{}", c.to_yaml());
    let d = parse("", "t").unwrap();
    assert_eq!(
        (d.threads.io_engine, d.threads.busy_poll_us),
        (config::IoEngine::Auto, 0)
    );
    check(
        "threads:\n  io_engine: aio\n",
        "threads.io_engine",
        "must be auto, io_uring or threads (got \"aio\")",
    );
    check(
        "threads:\n  busy_poll_us: 10001\n",
        "threads.busy_poll_us",
        "0..=10000 (got 10001)",
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
fn example_cache_and_router() {
    let c = parse(EXAMPLE, "numatgt.yaml").unwrap();
    assert_eq!(c.cache, CacheSettings::default());
    assert_eq!(c.router, RouterSettings::default());
    let t = &c.targets[0];
    assert_eq!(t.luns[0].cache, None);
    assert_eq!(t.luns[0].cache_mode(&c.cache), CacheMode::Numa);
    assert_eq!(t.luns[1].cache, Some(CacheMode::Page));
    assert_eq!(c.targets[1].luns[0].cache, Some(CacheMode::Off));
}

#[test]
fn cache_defaults() {
    let d = CacheSettings::default();
    assert_eq!(d.mode, CacheMode::Numa);
    assert_eq!(d.size_per_node, CacheSize::Auto);
    assert_eq!(d.block_size, 64 << 10);
    assert_eq!((d.group_blocks, d.partitions_per_node), (8, 16));
    assert!(d.huge_pages);
    assert_eq!(d.dirty_limit, DirtyLimit::Percent(25));
    assert_eq!(d.dirty_limit_bytes(256 << 20), 64 << 20);
    assert_eq!(d.read_ahead, 0);
    assert_eq!(d.memory, config::CacheMemory::Auto);
    assert_eq!(d.blocks_per_node(256 << 20), 4096);
    for (w, want) in [
        ("shared", config::CacheMemory::Shared),
        (" Private ", config::CacheMemory::Private),
        ("auto", config::CacheMemory::Auto),
    ] {
        let c = parse(&format!("cache:\n  memory: \"{w}\"\n"), "t").unwrap();
        assert_eq!(c.cache.memory, want);
    }
    let r = RouterSettings::default();
    assert_eq!(
        (r.min_forward_bytes, r.max_queue, r.enabled),
        (32 << 10, 64, true)
    );
    // An empty section is the defaults too.
    let c = parse("cache: {}\nrouter: {}\n", "t").unwrap();
    assert_eq!(c, Config::default());
    let c = parse("cache:\nrouter:\n", "t").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(Config::default().cache, d);
    assert_eq!(Config::default().router, r);
}

#[test]
fn cache_values() {
    let c = parse(
        "cache:\n  mode: PAGE\n  size_per_node: 256M\n  block_size: 1M\n  group_blocks: 1\n  partitions_per_node: 256\n  huge_pages: No\n  dirty_limit: 64M\n  read_ahead: 4\nrouter:\n  min_forward_bytes: 0\n  max_queue: 1\n  enabled: off\n",
        "t",
    )
    .unwrap();
    let k = c.cache;
    assert_eq!(k.mode, CacheMode::Page);
    assert_eq!(
        (k.size_per_node, k.block_size),
        (CacheSize::Bytes(256 << 20), 1 << 20)
    );
    assert_eq!((k.group_blocks, k.partitions_per_node), (1, 256));
    assert!(!k.huge_pages);
    assert_eq!(k.dirty_limit, DirtyLimit::Bytes(64 << 20));
    assert_eq!(k.read_ahead, 4);
    assert_eq!(c.router.min_forward_bytes, 0);
    assert_eq!(c.router.max_queue, 1);
    assert!(!c.router.enabled);
    // Plain integers and every mode word; percentages with blanks.
    for (m, want) in [
        ("numa", CacheMode::Numa),
        ("off", CacheMode::Off),
        (" Page ", CacheMode::Page),
    ] {
        let c = parse(
            &format!("cache:\n  mode: \"{m}\"\n  block_size: 4096\n  size_per_node: 65536\n  dirty_limit: 100 %\n  group_blocks: 4096\n"),
            "t",
        )
        .unwrap();
        assert_eq!(c.cache.mode, want);
        assert_eq!(
            (c.cache.block_size, c.cache.size_per_node),
            (4096, CacheSize::Bytes(65536))
        );
        assert_eq!(c.cache.dirty_limit, DirtyLimit::Percent(100));
        assert_eq!(c.cache.dirty_limit_bytes(65536), 65536);
    }
    // Unquoted `off` is a string in YAML 1.2.
    let c = parse("cache:\n  mode: off\n", "t").unwrap();
    assert_eq!(c.cache.mode, CacheMode::Off);
    let c = parse(
        "router:\n  min_forward_bytes: 16M\n  max_queue: 65535\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        (c.router.min_forward_bytes, c.router.max_queue),
        (16 << 20, 65535)
    );
    // Exactly 16 blocks, one per partition, dirty limit of one block.
    let c = parse(
        "cache:\n  size_per_node: 64K\n  block_size: 4K\n  partitions_per_node: 16\n  dirty_limit: 4K\n  read_ahead: 8\n",
        "t",
    )
    .unwrap();
    let bytes = c.cache.size_per_node.fixed().unwrap();
    assert_eq!(c.cache.blocks_per_node(bytes), 16);
    assert_eq!(c.cache.dirty_limit_bytes(bytes), 4096);
    // size_per_node need not be a multiple of the block: it is rounded down.
    let c = parse("cache:\n  size_per_node: 1048577\n", "t").unwrap();
    assert_eq!(c.cache.blocks_per_node(1048577), 16);
}

#[test]
fn cache_rules() {
    for (body, path, words) in [
        (
            "mode: fast",
            "cache.mode",
            "must be numa, off or page (got \"fast\")",
        ),
        ("mode: false", "cache.mode", "(got \"false\")"),
        ("mode: 1", "cache.mode", "(got \"1\")"),
        ("mode: \"\"", "cache.mode", "(got \"\")"),
        (
            "memory: anonymous",
            "cache.memory",
            "must be auto, shared or private (got anonymous)",
        ),
        ("memory: true", "cache.memory", "(got true)"),
        (
            "block_size: 2K",
            "cache.block_size",
            "must be a power of two from 4K to 1M (got 2048)",
        ),
        ("block_size: 2M", "cache.block_size", "(got 2097152)"),
        ("block_size: 48K", "cache.block_size", "power of two"),
        ("block_size: 0", "cache.block_size", "(got 0)"),
        (
            "block_size: -4096",
            "cache.block_size",
            "must be a size in bytes (got -4096)",
        ),
        ("block_size: 64Q", "cache.block_size", "unknown size suffix"),
        (
            "group_blocks: 0",
            "cache.group_blocks",
            "must be a power of two in 1..=4096 (got 0)",
        ),
        ("group_blocks: 3", "cache.group_blocks", "(got 3)"),
        ("group_blocks: 8192", "cache.group_blocks", "1..=4096"),
        (
            "partitions_per_node: 0",
            "cache.partitions_per_node",
            "must be in 1..=1024 (got 0)",
        ),
        (
            "partitions_per_node: 1025",
            "cache.partitions_per_node",
            "1..=1024",
        ),
        ("size_per_node: lots", "cache.size_per_node", "not a size"),
        (
            "size_per_node: 0",
            "cache.size_per_node",
            "holds 0 blocks of 64K, fewer than 16",
        ),
        (
            "size_per_node: 960K",
            "cache.size_per_node",
            "holds 15 blocks",
        ),
        ("huge_pages: maybe", "cache.huge_pages", "Yes/No"),
        (
            "dirty_limit: 0%",
            "cache.dirty_limit",
            "a percentage must be in 1%..=100% (got \"0%\")",
        ),
        ("dirty_limit: 101%", "cache.dirty_limit", "1%..=100%"),
        ("dirty_limit: x%", "cache.dirty_limit", "(got \"x%\")"),
        ("dirty_limit: 2.5%", "cache.dirty_limit", "(got \"2.5%\")"),
        (
            "dirty_limit: 32K",
            "cache.dirty_limit",
            "at least one cache block (65536) (32768 bytes)",
        ),
        (
            "dirty_limit: -1",
            "cache.dirty_limit",
            "must be a size in bytes (got -1)",
        ),
        ("dirty_limit: 0", "cache.dirty_limit", "(0 bytes)"),
        (
            "read_ahead: 1025",
            "cache.read_ahead",
            "must be in 0..=1024 (got 1025)",
        ),
        ("read_ahead: -1", "cache.read_ahead", ""),
    ] {
        let e = check(&format!("cache:\n  {body}\n"), path, words);
        assert_eq!(e.line(), Some(2), "{e}");
        // Our own checks point at the key; serde's type errors at the value.
        let col = if e.message().starts_with("invalid") {
            3 + body.find(": ").unwrap() + 2
        } else {
            3
        };
        assert_eq!(e.column(), Some(col), "{e}");
    }
    // Rules between values, reported at the key written (first of those involved).
    let e = check(
        "cache:\n  partitions_per_node: 64\n  size_per_node: 2M\n",
        "cache.size_per_node",
        "size_per_node 2M holds 32 blocks of 64K, fewer than 64",
    );
    assert_eq!(e.line(), Some(3));
    // With the default 256M per node, 1M blocks and 256 partitions just fit (boundary).
    let c = parse(
        "cache:\n  partitions_per_node: 256\n  block_size: 1M\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        c.cache
            .blocks_per_node(c.cache.resolve_size(1 << 30, 1 << 30)),
        256
    );
    check(
        "cache:\n  size_per_node: 1M\n  dirty_limit: 1%\n",
        "cache.dirty_limit",
        "1% of 1M is 10485 bytes",
    );
    check(
        "cache:\n  size_per_node: 64K\n  block_size: 4K\n  dirty_limit: 5%\n",
        "cache.dirty_limit",
        "5% of 64K is 3276 bytes",
    );
    check(
        "cache:\n  size_per_node: 64K\n  block_size: 4K\n  read_ahead: 9\n",
        "cache.read_ahead",
        "9 blocks is more than half of the 16 cache blocks per node",
    );
    // Flow style is located too.
    let e = check(
        "cache: { mode: numa, block_size: 3K }\n",
        "cache.block_size",
        "(got 3072)",
    );
    assert_eq!(e.line(), Some(1));
    // Wrong shape: the section is a mapping.
    let e = err("cache: off\n");
    assert!(e.to_string().starts_with("t.yaml:1:"), "{e}");
}

#[test]
fn router_rules() {
    for (body, path, words) in [
        (
            "min_forward_bytes: 17M",
            "router.min_forward_bytes",
            "must be in 0..=16777216 (got 17825792)",
        ),
        (
            "min_forward_bytes: -1",
            "router.min_forward_bytes",
            "must be a size in bytes (got -1)",
        ),
        (
            "min_forward_bytes: big",
            "router.min_forward_bytes",
            "not a size",
        ),
        (
            "max_queue: 0",
            "router.max_queue",
            "must be in 1..=65535 (got 0)",
        ),
        ("max_queue: 65536", "router.max_queue", "1..=65535"),
        ("enabled: sometimes", "router.enabled", "Yes/No"),
    ] {
        let e = check(&format!("router:\n  {body}\n"), path, words);
        let col = if e.message().starts_with("invalid") {
            3 + body.find(": ").unwrap() + 2
        } else {
            3
        };
        assert_eq!((e.line(), e.column()), (Some(2), Some(col)), "{e}");
    }
}

#[test]
fn lun_cache_override() {
    let c = parse(&one_lun("cache: off"), "t").unwrap();
    let l = &c.targets[0].luns[0];
    assert_eq!(l.cache, Some(CacheMode::Off));
    assert_eq!(l.cache_mode(&c.cache), CacheMode::Off);
    let c = parse(&format!("cache:\n  mode: page\n{}", one_lun("")), "t").unwrap();
    assert_eq!(c.targets[0].luns[0].cache, None);
    assert_eq!(c.targets[0].luns[0].cache_mode(&c.cache), CacheMode::Page);
    let c = parse(
        &format!("cache:\n  mode: off\n{}", one_lun("cache: NUMA")),
        "t",
    )
    .unwrap();
    assert_eq!(c.targets[0].luns[0].cache_mode(&c.cache), CacheMode::Numa);
    for (v, words) in [
        ("on", "must be numa, off or page (got \"on\")"),
        ("true", "(got \"true\")"),
        ("64K", "(got \"64K\")"),
    ] {
        let e = check(
            &one_lun(&format!("cache: {v}")),
            "targets[0].luns[0].cache",
            words,
        );
        assert_eq!((e.line(), e.column()), (Some(6), Some(9)), "{e}");
    }
    // A mapping is not a mode.
    let e = err(&one_lun("cache: { mode: off }"));
    assert_eq!(e.path(), "targets[0].luns[0].cache", "{e}");
}

#[test]
fn cache_round_trips() {
    let text = format!(
        "cache:\n  mode: off\n  size_per_node: 1536K\n  block_size: 4K\n  group_blocks: 2\n  partitions_per_node: 3\n  huge_pages: false\n  dirty_limit: 12345\n  read_ahead: 7\nrouter:\n  min_forward_bytes: 4097\n  max_queue: 9\n  enabled: false\n{}",
        one_lun("cache: page")
    );
    let c = parse(&text, "t").unwrap();
    assert_eq!(c.cache.dirty_limit, DirtyLimit::Bytes(12345));
    let y = c.to_yaml();
    assert_eq!(parse(&y, "dump.yaml").unwrap(), c, "{y}");
    assert!(y.contains("dirty_limit: 12345"), "{y}");
    let y = Config::default().to_yaml();
    assert!(y.contains("dirty_limit: 25%"), "{y}");
    assert!(y.contains("block_size: 64K"), "{y}");
    assert!(y.contains("mode: numa"), "{y}");
    assert!(y.contains("min_forward_bytes: 32K"), "{y}");
    let mut c = Config::default();
    c.cache.dirty_limit = DirtyLimit::Percent(100);
    assert_eq!(parse(&c.to_yaml(), "d").unwrap(), c);
    assert_eq!(DirtyLimit::Percent(7).to_string(), "7%");
    assert_eq!(DirtyLimit::Bytes(3 << 20).to_string(), "3M");
    assert_eq!(DirtyLimit::Percent(50).bytes(u64::MAX), u64::MAX / 2);
    for m in CacheMode::ALL {
        assert_eq!(CacheMode::parse(m.as_str()), Some(m));
        assert_eq!(m.to_string(), m.as_str());
    }
    assert_eq!(CacheMode::parse("nope"), None);
}

#[test]
fn demo_keeps_cache_defaults() {
    let c = Config::demo(Path::new("/var/lib/numatgt"), &[]);
    assert_eq!(c.cache, CacheSettings::default());
    assert_eq!(c.router, RouterSettings::default());
    assert_eq!(c.targets[0].luns[0].cache, None);
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
        "cache:",
        "router:",
        "mode: off",
        "cache: page",
        "block_size: 64K",
        "dirty_limit: 25%",
        "size_per_node: 1M",
        "max_queue: 0",
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
        "accounts:",
        "discovery_auth:",
        "user: u",
        "password: p",
        "incoming_users: [u]",
        "outgoing_user: u",
        "driver: iser",
        "state: offline",
        "scsi_sn: x",
        "scsi_id: y",
        "sense_format: 1",
        "removable: 1",
        "online: no",
        "bs_type: aio",
        "bsoflags: sync",
        "lbppbe: 3",
        "DataPDUInOrder: No",
        "MaxConnections: 2",
        "MaxXmitDataSegmentLength: 512",
        "qos:",
        "iops: 1000",
        "read_bps: 50M",
        "write_bps: 1048577",
        "burst: 0.5",
        "burst: 2",
        "burst_factor: 1.25",
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

#[test]
fn cache_size_auto() {
    // with a fixed size, an absolute dirty limit must fit in it
    check(
        "cache:\n  size_per_node: 256M\n  dirty_limit: 2G\n",
        "cache.dirty_limit",
        "at least one cache block (65536) and at most size_per_node (268435456) (2147483648 bytes)",
    );
    // the default, and the word `auto` in any case
    assert_eq!(
        parse("cache:\n  size_per_node: Auto\n", "t")
            .unwrap()
            .cache
            .size_per_node,
        CacheSize::Auto
    );
    assert_eq!(
        parse("{}\n", "t").unwrap().cache.size_per_node,
        CacheSize::Auto
    );
    // a quarter of the node's memory...
    assert_eq!(CacheSize::auto_bytes(64 << 30, 60 << 30, 65536), 16 << 30);
    // ...at most half of what is free...
    assert_eq!(CacheSize::auto_bytes(64 << 30, 8 << 30, 65536), 4 << 30);
    // ...at least 64 MiB, whole blocks
    assert_eq!(CacheSize::auto_bytes(128 << 20, 10 << 20, 65536), 64 << 20);
    assert_eq!(
        CacheSize::auto_bytes((1 << 30) + 4 * 65536 + 7, 4 << 30, 65536) % 65536,
        0
    );
    assert_eq!(
        CacheSize::Bytes(5 << 20).resolve(1 << 40, 1 << 40, 4096),
        5 << 20
    );
    // an absolute dirty limit with `auto` is kept inside the cache the daemon picks
    let c = parse("cache:\n  dirty_limit: 512M\n", "t").unwrap().cache;
    assert_eq!(c.dirty_limit_bytes(256 << 20), 256 << 20);
    assert_eq!(c.dirty_limit_bytes(1 << 30), 512 << 20);
    // round trip through YAML keeps `auto`
    let c = parse("{}\n", "t").unwrap();
    assert!(
        c.to_yaml().contains("size_per_node: auto"),
        "{}",
        c.to_yaml()
    );
    assert_eq!(parse(&c.to_yaml(), "t").unwrap(), c);
}

#[test]
fn metrics_section() {
    use config::MetricsAddress;
    let c = parse("{}\n", "t").unwrap();
    assert_eq!(c.metrics.address, MetricsAddress::Default);
    assert_eq!(
        c.metrics.address.addr(),
        Some(config::DEFAULT_METRICS_ADDR.parse().unwrap())
    );
    assert!(!c.metrics.session_info);
    let c = parse("metrics:\n  address: off\n", "t").unwrap();
    assert_eq!(c.metrics.address, MetricsAddress::Off);
    assert_eq!(c.metrics.address.addr(), None);
    let c = parse(
        "metrics:\n  address: \"[::1]:9999\"\n  session_info: yes\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        c.metrics.address,
        MetricsAddress::At("[::1]:9999".parse().unwrap())
    );
    assert!(c.metrics.session_info);
    // the dump round-trips
    let again = parse(&c.to_yaml(), "dump").unwrap();
    assert_eq!(again.metrics, c.metrics);
    let e = parse("metrics:\n  address: nowhere:1:2\n", "t").unwrap_err();
    assert!(e.to_string().contains("metrics.address"), "{e}");
    let e = parse("metrics:\n  port: 1\n", "t").unwrap_err();
    assert!(e.to_string().contains("port"), "{e}");
}

#[test]
fn limits_section() {
    let d = parse("", "t.yaml").expect("empty file");
    assert_eq!(d.limits, config::LimitsSettings::default());
    assert_eq!(
        (d.limits.max_sessions, d.limits.max_connections),
        (1024, 4096)
    );
    assert_eq!(
        (d.limits.login_timeout, d.limits.max_mgmt_clients),
        (15, 64)
    );
    let c = parse("limits:\n  max_sessions: 2\n  login_timeout: 3\n", "t.yaml").expect("limits");
    assert_eq!(c.limits.max_sessions, 2);
    assert_eq!(c.limits.login_timeout, 3);
    assert_eq!(
        c.limits.max_connections, 4096,
        "absent key keeps its default"
    );
    assert_eq!(parse(&c.to_yaml(), "t.yaml").expect("round trip"), c);
    for (key, bad, words) in [
        ("max_sessions", "0", "1..=65535 (got 0)"),
        ("max_sessions", "65536", "1..=65535"),
        ("max_connections", "0", "1..=1048576"),
        ("login_timeout", "0", "1..=3600"),
        ("login_timeout", "3601", "1..=3600"),
        ("max_mgmt_clients", "1025", "1..=1024"),
    ] {
        check(
            &format!("limits:\n  {key}: {bad}\n"),
            &format!("limits.{key}"),
            words,
        );
    }
    let e = err("limits:\n  max_session: 2\n");
    assert!(e.to_string().contains("max_session"), "{e}");
    // a target's own limit
    let t = parse(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    max_sessions: 3\n",
        "t.yaml",
    )
    .expect("target limit");
    assert_eq!(t.targets[0].max_sessions, Some(3));
    assert_eq!(parse(&t.to_yaml(), "t.yaml").expect("round trip"), t);
    check(
        "targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n    max_sessions: 0\n",
        "targets[0].max_sessions",
        "1..=65535",
    );
}
