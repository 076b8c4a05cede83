//! Per-LUN QoS limits (issue 30) end to end: the YAML `qos:` sections of targets and LUNs
//! with their located errors and `to_yaml` round trip, the targets.conf `qos_*`
//! directives, and that both mean what tgtadm's `qos_*` parameters mean.

use std::path::Path;

use config::targets_conf::import_str;
use config::{Qos, parse, set_qos_param};

/// A target with `target_qos` lines (each at the target's level) and one LUN with
/// `lun_qos` lines.
fn yaml(target_qos: &str, lun_qos: &str) -> String {
    let mut s = String::from("targets:\n  - iqn: iqn.2026-11.org.numatgt:a\n");
    if !target_qos.is_empty() {
        s.push_str("    qos:\n");
        for l in target_qos.lines() {
            s.push_str(&format!("      {l}\n"));
        }
    }
    s.push_str("    luns:\n      - lun: 1\n        path: /d/a.img\n");
    if !lun_qos.is_empty() {
        s.push_str("        qos:\n");
        for l in lun_qos.lines() {
            s.push_str(&format!("          {l}\n"));
        }
    }
    s
}

fn tgtadm(pairs: &[(&str, &str)]) -> Qos {
    let mut q = Qos::default();
    for (k, v) in pairs {
        assert_eq!(set_qos_param(&mut q, k, v), Ok(true), "{k}={v}");
    }
    q
}

#[test]
fn yaml_sections_and_the_effective_limits() {
    let text = yaml(
        "iops: 1000\nbps: 50M\nburst: 0.5\nburst_factor: 1.5",
        "read_iops: 300\niops: 0\nwrite_bps: \"1G\"\nburst: 2",
    );
    let c = parse(&text, "t.yaml").unwrap_or_else(|e| panic!("{e}"));
    let t = &c.targets[0];
    let l = &t.luns[0];
    assert_eq!(
        t.qos,
        tgtadm(&[
            ("qos_iops", "1000"),
            ("qos_bps", "50M"),
            ("qos_burst", "0.5"),
            ("qos_burst_factor", "1.5"),
        ])
    );
    assert_eq!(
        l.qos,
        tgtadm(&[
            ("qos_read_iops", "300"),
            ("qos_iops", "0"),
            ("qos_write_bps", "1G"),
            ("qos_burst", "2"),
        ])
    );
    let e = l.effective_qos(t);
    assert_eq!(
        e.iops,
        Some(0),
        "the LUN's explicit 0 wins over the target's limit"
    );
    assert_eq!(e.read_iops, Some(300));
    assert_eq!(e.bps, Some(50 << 20), "from the target");
    assert_eq!(e.write_bps, Some(1 << 30));
    assert_eq!((e.burst_ms, e.burst_percent), (Some(2000), Some(150)));
    assert!(!e.is_unlimited());
    assert_eq!(c, parse(&c.to_yaml(), "dump").unwrap(), "{}", c.to_yaml());
    // flow style, integers for bps
    let c = parse(
        &yaml("", "").replace(
            "path: /d/a.img\n",
            "path: /d/a.img\n        qos: { bps: 1048576 }\n",
        ),
        "t.yaml",
    )
    .unwrap();
    assert_eq!(c.targets[0].luns[0].qos.bps, Some(1 << 20));
}

#[test]
fn unset_is_no_limit_and_is_not_written() {
    let c = parse(&yaml("", ""), "t.yaml").unwrap();
    let t = &c.targets[0];
    assert_eq!((t.qos, t.luns[0].qos), (Qos::default(), Qos::default()));
    assert!(t.luns[0].effective_qos(t).is_unlimited());
    assert!(!c.to_yaml().contains("qos"), "{}", c.to_yaml());
    // an empty section, or none, sets nothing
    for section in ["{}", "~"] {
        let c = parse(&yaml(section, ""), "t.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.targets[0].qos, Qos::default(), "{section}");
    }
}

#[test]
fn dumps_write_numbers_and_sizes() {
    let text = yaml(
        "write_iops: 7\nread_bps: 1048577\nbps: 3G\nburst: 0.001\nburst_factor: 2.25",
        "",
    );
    let c = parse(&text, "t.yaml").unwrap();
    let y = c.to_yaml();
    for want in [
        "write_iops: 7\n",
        "read_bps: 1048577\n",
        "bps: 3G\n",
        "burst: 0.001\n",
        "burst_factor: 2.25\n",
    ] {
        assert!(y.contains(want), "{want:?} not in\n{y}");
    }
    assert_eq!(parse(&y, "dump").unwrap(), c);
}

#[test]
fn yaml_errors_are_located() {
    for (t, l, path, line, words) in [
        (
            "iops: 100000001",
            "",
            "targets[0].qos.iops",
            4,
            "to 100000000",
        ),
        ("iops: -1", "", "targets[0].qos.iops", 4, "whole number"),
        ("iops: 1.5", "", "targets[0].qos.iops", 4, "whole number"),
        (
            "",
            "bps: 1.5M",
            "targets[0].luns[0].qos.bps",
            7,
            "bytes per second",
        ),
        (
            "",
            "read_bps: 2000T",
            "targets[0].luns[0].qos.read_bps",
            7,
            "at most",
        ),
        (
            "",
            "burst: 3601",
            "targets[0].luns[0].qos.burst",
            7,
            "to 3600",
        ),
        (
            "",
            "burst: 0.0001",
            "targets[0].luns[0].qos.burst",
            7,
            "3 decimals",
        ),
        (
            "",
            "iops: 1\nburst_factor: 1",
            "targets[0].luns[0].qos.burst_factor",
            8,
            "above 1",
        ),
        (
            "burst_factor: 101",
            "",
            "targets[0].qos.burst_factor",
            4,
            "at most 100",
        ),
        (
            "write_iops: yes",
            "",
            "targets[0].qos.write_iops",
            4,
            "whole number",
        ),
    ] {
        let text = yaml(t, l);
        let e = parse(&text, "t.yaml").expect_err(&text);
        assert_eq!(e.path(), path, "{e}");
        assert_eq!(e.line(), Some(line), "{e}\n{text}");
        assert!(e.column().is_some(), "{e}");
        assert!(e.message().contains(words), "{e}");
        assert!(e.to_string().starts_with(&format!("t.yaml:{line}:")), "{e}");
    }
    // unknown keys: serde's message, at the section
    for (t, l, path) in [
        ("iopz: 1", "", "targets[0].qos"),
        ("", "bandwidth: 1", "targets[0].luns[0].qos"),
    ] {
        let e = parse(&yaml(t, l), "t.yaml").expect_err(path);
        assert_eq!(e.path(), path, "{e}");
        assert!(e.message().contains("unknown field"), "{e}");
        assert!(e.line().is_some(), "{e}");
    }
    // a list is not a value
    let e = parse(&yaml("iops: [1]", ""), "t.yaml").unwrap_err();
    assert!(e.path().starts_with("targets[0].qos"), "{e}");
}

fn conf(text: &str) -> config::Imported {
    import_str(text, Path::new("/etc/tgt/targets.conf")).unwrap_or_else(|e| panic!("{e}"))
}

fn conf_err(text: &str) -> String {
    match import_str(text, Path::new("/etc/tgt/targets.conf")) {
        Ok(i) => panic!("accepted:\n{text}\n=> {i:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn targets_conf_directives() {
    let i = conf(
        "\
<target iqn.2026-11.org.example:q>
    qos_iops 1000
    QOS-BPS 50M
    qos_burst 0.5
    <backing-store /srv/a.img>
        qos_read_iops 200
        qos_iops 0
    </backing-store>
    <backing-store /srv/b.img>
        qos_burst_factor 3
        params qos_write_bps=1G,readonly=1
    </backing-store>
    backing-store /srv/c.img
</target>
",
    );
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    let t = &i.config.targets[0];
    assert_eq!(
        t.qos,
        tgtadm(&[
            ("qos_iops", "1000"),
            ("qos_bps", "50M"),
            ("qos_burst", "0.5")
        ])
    );
    let a = t.lun(1).unwrap();
    let b = t.lun(2).unwrap();
    let c = t.lun(3).unwrap();
    assert_eq!(
        a.qos,
        tgtadm(&[("qos_read_iops", "200"), ("qos_iops", "0")])
    );
    assert_eq!(
        b.qos,
        tgtadm(&[("qos_burst_factor", "3"), ("qos_write_bps", "1G")])
    );
    assert!(b.readonly);
    assert_eq!(
        c.qos,
        Qos::default(),
        "the target's default is not copied into LUNs"
    );
    assert_eq!(c.effective_qos(t), t.qos);
    assert_eq!(a.effective_qos(t).iops, Some(0));
    assert_eq!(b.effective_qos(t).burst_percent, Some(300));
    let y = i.config.to_yaml();
    assert_eq!(parse(&y, "dump").unwrap(), i.config, "{y}");
}

#[test]
fn targets_conf_errors_name_the_line() {
    for (text, want) in [
        (
            "<target iqn.2026-11.org.example:q>\n    backing-store /a\n    qos_iops lots\n</target>\n",
            "/etc/tgt/targets.conf:3: qos_iops: must be a whole number",
        ),
        (
            "<target iqn.2026-11.org.example:q>\n    <backing-store /a>\n        qos_burst 0.0001\n    </backing-store>\n</target>\n",
            "/etc/tgt/targets.conf:3: qos_burst: must be seconds",
        ),
        (
            "<target iqn.2026-11.org.example:q>\n    <backing-store /a>\n        params qos_burst_factor=1\n    </backing-store>\n</target>\n",
            "/etc/tgt/targets.conf:3: params: must be a multiple",
        ),
        (
            "<target iqn.2026-11.org.example:q>\n    qos_iops 1\n    qos_iops 2\n</target>\n",
            "/etc/tgt/targets.conf:3: qos_iops: multiple qos_iops definitions",
        ),
        (
            "qos_iops 1\n",
            "/etc/tgt/targets.conf:1: qos_iops: belongs inside a <target> block",
        ),
        (
            "<target iqn.2026-11.org.example:q>\n    qos_bps\n</target>\n",
            "/etc/tgt/targets.conf:2: qos_bps: missing value",
        ),
    ] {
        let e = conf_err(text);
        assert!(e.starts_with(want), "{e}\nwanted {want}");
    }
    // with ignore-errors the bad directive is dropped, the rest kept
    let i = conf(
        "ignore-errors yes\n<target iqn.2026-11.org.example:q>\n    qos_iops x\n    qos_bps 1M\n    backing-store /a\n</target>\n",
    );
    let t = &i.config.targets[0];
    assert_eq!((t.qos.iops, t.qos.bps), (None, Some(1 << 20)));
    assert!(
        i.warnings.iter().any(|w| w.contains(":3: qos_iops:")),
        "{:?}",
        i.warnings
    );
}
