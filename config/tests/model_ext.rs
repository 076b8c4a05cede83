//! The YAML fields that mirror what tgtd/tgtadm can express: CHAP accounts
//! and bindings, discovery auth, target driver/state, every iSCSI key, the
//! tgt LUN attributes and their SCSI length limits, with located errors and
//! round trips.

use config::{BsType, Config, ConfigError, Driver, SenseFormat, TargetState, parse};

fn ok(text: &str) -> Config {
    match parse(text, "t.yaml") {
        Ok(c) => {
            let y = c.to_yaml();
            assert_eq!(parse(&y, "dump.yaml").as_ref(), Ok(&c), "{y}");
            c
        }
        Err(e) => panic!("rejected: {e}\n{text}"),
    }
}

fn err(text: &str, path: &str, words: &str) -> ConfigError {
    let e = match parse(text, "t.yaml") {
        Ok(c) => panic!("accepted:\n{text}\n=> {c:?}"),
        Err(e) => e,
    };
    assert_eq!(e.path(), path, "{e}");
    assert!(e.to_string().contains(words), "{e} lacks {words:?}");
    assert!(e.line().is_some(), "{e}");
    e
}

const ACCOUNTS: &str = "\
accounts:
  - user: alice
    password: alice-secret-12
  - user: tgt
    password: tgt-secret-1234
";

fn target(extra: &str) -> String {
    let mut s = String::from(ACCOUNTS);
    s.push_str("targets:\n  - iqn: iqn.2026-11.org.example:t\n");
    for l in extra.lines() {
        s.push_str("    ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn lun(extra: &str) -> String {
    let mut s = target("luns:\n  - lun: 1\n    path: /d/a.img");
    for l in extra.lines() {
        s.push_str("        ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

#[test]
fn chap_accounts_and_bindings() {
    let c = ok(&format!(
        "{}discovery_auth:\n  incoming_users: [alice]\n  outgoing_user: tgt\n",
        target("incoming_users: [alice]\noutgoing_user: tgt\ndriver: iser\nstate: offline")
    ));
    assert_eq!(c.accounts.len(), 2);
    assert_eq!(c.account("alice").unwrap().password, "alice-secret-12");
    assert_eq!(c.discovery_auth.incoming_users, vec!["alice"]);
    assert_eq!(c.discovery_auth.outgoing_user.as_deref(), Some("tgt"));
    let t = &c.targets[0];
    assert_eq!(t.incoming_users, vec!["alice"]);
    assert_eq!(t.outgoing_user.as_deref(), Some("tgt"));
    assert_eq!((t.driver, t.state), (Driver::Iser, TargetState::Offline));
    assert!(c.warnings().is_empty());
    // A single string is a one-element list.
    let c = ok(&target("incoming_users: alice"));
    assert_eq!(c.targets[0].incoming_users, vec!["alice"]);
    // Defaults.
    let c = ok(&target(""));
    let t = &c.targets[0];
    assert!(t.incoming_users.is_empty() && t.outgoing_user.is_none());
    assert_eq!((t.driver, t.state), (Driver::Iscsi, TargetState::Ready));
}

#[test]
fn chap_rules() {
    err(
        &target("incoming_users: [alice, bob]"),
        "targets[0].incoming_users[1]",
        "no account \"bob\"",
    );
    err(
        &target("incoming_users: [alice, alice]"),
        "targets[0].incoming_users[1]",
        "listed twice",
    );
    err(
        &target("outgoing_user: nobody"),
        "targets[0].outgoing_user",
        "no account",
    );
    err(
        &target("outgoing_user: [tgt, alice]"),
        "targets[0].outgoing_user",
        "invalid type",
    );
    err(
        "discovery_auth:\n  incoming_users: [x]\n",
        "discovery_auth.incoming_users[0]",
        "no account \"x\"",
    );
    err(
        "accounts:\n  - user: a\n    password: aaaaaaaaaaaaa\n  - user: a\n    password: bbbbbbbbbbbbb\n",
        "accounts[1].user",
        "duplicate account \"a\"",
    );
    err(
        "accounts:\n  - user: a b\n    password: aaaaaaaaaaaaa\n",
        "accounts[0].user",
        "printable ASCII without spaces",
    );
    err(
        "accounts:\n  - user: a\n    password: \"\"\n",
        "accounts[0].password",
        "1..=255 bytes",
    );
    // Short secrets are accepted (tgtd does) with an advisory.
    let c = ok("accounts:\n  - user: a\n    password: short\n");
    let w = c.warnings();
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("RFC 7143") && w[0].contains("\"a\""), "{w:?}");
    // Secrets are not printed by Debug.
    assert!(!format!("{c:?}").contains("short"));
}

#[test]
fn target_words() {
    err(
        &target("driver: fc"),
        "targets[0].driver",
        "must be iscsi or iser",
    );
    err(
        &target("state: gone"),
        "targets[0].state",
        "must be ready or offline",
    );
    let c = ok(&target("driver: ISER\nstate: Offline"));
    assert_eq!(c.targets[0].driver, Driver::Iser);
}

#[test]
fn every_iscsi_key() {
    let c = ok(
        "iscsi:\n  DataPDUInOrder: No\n  DataSequenceInOrder: No\n  ErrorRecoveryLevel: 2\n  DefaultTime2Wait: 0\n  DefaultTime2Retain: 3600\n  MaxConnections: 4\n  MaxXmitDataSegmentLength: 8192\n  IFMarker: No\n  OFMarker: false\n",
    );
    let p = &c.iscsi;
    assert!(!p.data_pdu_in_order && !p.data_sequence_in_order);
    assert_eq!(p.error_recovery_level, 2);
    assert_eq!((p.default_time2wait, p.default_time2retain), (0, 3600));
    assert_eq!(p.max_connections, 4);
    assert_eq!(p.max_xmit_data_segment_length, Some(8192));
    let d = config::IscsiParams::default();
    assert!(d.data_pdu_in_order && d.data_sequence_in_order);
    assert_eq!(
        (
            d.error_recovery_level,
            d.default_time2wait,
            d.default_time2retain,
            d.max_connections
        ),
        (0, 2, 20, 1)
    );
    assert_eq!(d.max_xmit_data_segment_length, None);
    for (key, val, words) in [
        ("ErrorRecoveryLevel", "3", "0..=2"),
        ("DefaultTime2Wait", "3601", "0..=3600"),
        ("DefaultTime2Retain", "4000", "0..=3600"),
        ("MaxConnections", "0", "1..=65535"),
        ("MaxXmitDataSegmentLength", "100", "512..=16777215"),
        ("IFMarker", "Yes", "markers are not supported"),
        ("OFMarker", "true", "markers are not supported"),
    ] {
        err(
            &format!("iscsi:\n  {key}: {val}\n"),
            &format!("iscsi.{key}"),
            words,
        );
        err(
            &target(&format!("iscsi:\n  {key}: {val}")),
            &format!("targets[0].iscsi.{key}"),
            words,
        );
    }
    // Per-target overrides merge.
    let c = ok(&target(
        "iscsi:\n  MaxConnections: 2\n  DefaultTime2Wait: 9",
    ));
    let e = c.targets[0].effective_iscsi(&c.iscsi);
    assert_eq!((e.max_connections, e.default_time2wait), (2, 9));
    assert_eq!(e.default_time2retain, 20);
}

#[test]
fn lun_attributes() {
    let c = ok(&lun(
        "scsi_sn: SN-1\nscsi_id: ID-1\nsense_format: 1\nremovable: 1\nthin_provisioning: yes\nonline: 0\ndevice_type: disk\nbs_type: aio\nbsoflags: sync:direct\nlbppbe: 3\nla_lba: 7\noptimal_xfer_gran: 8\noptimal_xfer_len: 256",
    ));
    let l = &c.targets[0].luns[0];
    assert_eq!(l.serial.as_deref(), Some("SN-1"));
    assert_eq!(l.scsi_id.as_deref(), Some("ID-1"));
    assert_eq!(l.sense_format, SenseFormat::Descriptor);
    assert!(l.removable && l.thin_provisioning && !l.online);
    assert_eq!(l.bs_type, BsType::Aio);
    assert!(l.bsoflags.sync && l.bsoflags.direct);
    assert_eq!(l.bsoflags.as_string(), "sync:direct");
    assert_eq!((l.lbppbe, l.la_lba), (Some(3), Some(7)));
    assert_eq!(
        (l.optimal_xfer_gran, l.optimal_xfer_len),
        (Some(8), Some(256))
    );
    // Defaults.
    let c = ok(&lun(""));
    let l = &c.targets[0].luns[0];
    assert_eq!(l.sense_format, SenseFormat::Fixed);
    assert!(!l.removable && !l.thin_provisioning && l.online);
    assert_eq!(l.bs_type, BsType::Rdwr);
    assert_eq!(l.bsoflags, config::BsOflags::default());
    let c = ok(&lun("sense_format: descriptor\nbsoflags: direct"));
    assert_eq!(c.targets[0].luns[0].sense_format, SenseFormat::Descriptor);
}

#[test]
fn lun_attribute_rules() {
    let p = "targets[0].luns[0]";
    for (extra, field, words) in [
        (
            "device_type: printer",
            "device_type",
            "device type \"printer\" is not supported",
        ),
        (
            "device_type: osd",
            "device_type",
            "medium changers (changer) and local SCSI devices passed through (pt)",
        ),
        (
            "bs_type: rdwr\ndevice_type: pt",
            "bs_type",
            "a pt LUN is a local SCSI device (bs_type: sg for /dev/sgN",
        ),
        (
            "bs_type: glfs",
            "bs_type",
            "backing-store type \"glfs\" is not supported",
        ),
        (
            "bs_type: sg",
            "bs_type",
            "sg passes a local SCSI device through",
        ),
        ("bsopts: conf=/c", "bsopts", "bsopts is for bs_type: rbd"),
        ("bsoflags: fast", "bsoflags", "unknown flag \"fast\""),
        (
            "sense_format: 2",
            "sense_format",
            "must be 0/fixed or 1/descriptor",
        ),
        (
            "scsi_id: 0123456789012345678901234",
            "scsi_id",
            "1 to 24 printable ASCII",
        ),
        ("scsi_sn: \"\"", "serial", "1 to 36"),
        ("serial: \"caf\u{e9}\"", "serial", "printable ASCII"),
        ("vendor_id: NINECHARS", "vendor_id", "1 to 8"),
        ("product_id: SEVENTEEN-CHARSXX", "product_id", "1 to 16"),
        ("product_rev: \"12345\"", "product_rev", "1 to 4"),
        ("lbppbe: 16", "lbppbe", "0..=15"),
        ("la_lba: 16384", "la_lba", "0..=16383"),
        ("optimal_xfer_gran: 65536", "optimal_xfer_gran", "0..=65535"),
        (
            "optimal_xfer_len: 4294967296",
            "optimal_xfer_len",
            "0..=4294967295",
        ),
    ] {
        let path = if extra.starts_with("scsi_sn") {
            format!("{p}.serial")
        } else {
            format!("{p}.{field}")
        };
        let e = err(&lun(extra), &path, words);
        if !extra.starts_with("scsi_sn") {
            assert_eq!(e.line(), Some(11), "{e}");
        }
    }
    err(&lun("removable: 2"), "targets[0].luns[0].removable", "1/0");
    err(
        &lun("device_type: cd\nblock_size: 512"),
        "targets[0].luns[0].block_size",
        "a cd LUN has 2048-byte blocks (got 512)",
    );
    err(
        &lun("device_type: cd\nbs_type: null"),
        "targets[0].luns[0].bs_type",
        "a cd LUN is an image file",
    );
    err(
        &lun("device_type: tape\nbs_type: rdwr"),
        "targets[0].luns[0].bs_type",
        "a tape LUN is a tape image (ssc), not rdwr",
    );
    err(
        &lun("bs_type: ssc"),
        "targets[0].luns[0].bs_type",
        "ssc is a tape image: it needs device_type: tape",
    );
    err(
        &lun("device_type: tape\nblock_size: 512"),
        "targets[0].luns[0].block_size",
        "the initiator's choice",
    );
    err(
        &lun("device_type: changer\nbs_type: ssc"),
        "targets[0].luns[0].bs_type",
        "ssc is a tape image",
    );
    err(
        &lun("changer: [\"element_type=2,start_address=1,quantity=2\"]"),
        "targets[0].luns[0].changer",
        "only a medium changer",
    );
    err(
        &lun("device_type: changer\nchanger: [\"colour=red\"]"),
        "targets[0].luns[0].changer[0]",
        "unknown changer parameter",
    );
    err(
        &lun("device_type: tape\nsize: 1G"),
        "targets[0].luns[0].size",
        "made with tgtimg",
    );
}

#[test]
fn a_tape_drive_round_trips_with_its_defaults() {
    let c = ok(&lun("device_type: tape"));
    let l = &c.targets[0].luns[0];
    assert_eq!(
        (l.device_type, l.bs_type, l.block_size),
        (config::DeviceType::Tape, BsType::Ssc, 1)
    );
    assert_eq!(l.cache_mode(&c.cache), config::CacheMode::Off);
    // `ok` parsed its dump back to the same model
    let yaml = c.to_yaml();
    assert!(
        yaml.contains("device_type: tape") && !yaml.contains("bs_type"),
        "{yaml}"
    );
    assert!(!yaml.contains("    block_size"), "{yaml}");
}

#[test]
fn cd_luns_are_2048_byte_image_files_of_bs_type_mmc() {
    let c = ok(&lun("device_type: cd"));
    let l = &c.targets[0].luns[0];
    assert_eq!(
        (l.device_type, l.bs_type, l.block_size),
        (config::DeviceType::Cd, BsType::Mmc, 2048)
    );
    assert!(c.to_yaml().contains("device_type: cd"), "{}", c.to_yaml());
    let c = ok(&lun("device_type: CD\nbs_type: rdwr\nblock_size: 2048"));
    assert_eq!(c.targets[0].luns[0].bs_type, BsType::Rdwr);
    // tgt's `--bstype mmc` on a disk: a disk on the image file
    let c = ok(&lun("bs_type: mmc"));
    let l = &c.targets[0].luns[0];
    assert_eq!(
        (l.device_type, l.block_size),
        (config::DeviceType::Disk, 512)
    );
}

#[test]
fn rbd_luns() {
    let yaml = target(
        "luns:\n  - lun: 1\n    path: tank/disk1\n    bs_type: rbd\n    \
         bsopts: \"conf=/etc/ceph/ceph.conf;id=iscsi;rados_osd_op_timeout=5\"\n  \
         - lun: 2\n    path: img@snap\n    bs_type: rbd",
    );
    let c = ok(&yaml);
    let l = &c.targets[0].luns[0];
    assert_eq!(l.bs_type, BsType::Rbd);
    assert_eq!(l.path, std::path::Path::new("tank/disk1"));
    assert_eq!(
        l.bsopts.as_deref(),
        Some("conf=/etc/ceph/ceph.conf;id=iscsi;rados_osd_op_timeout=5")
    );
    assert_eq!(c.targets[0].luns[1].bsopts, None);
    let p = "targets[0].luns[0]";
    for (fields, field, words) in [
        ("path: a/b/c", "path", "bad image name"),
        ("path: /d/a.img", "path", "empty pool name"),
        (
            "path: rbd/x\n    bsopts: Bad-Key=1",
            "bsopts",
            "not an option name",
        ),
        ("path: rbd/x\n    size: 1G", "size", "rbd create"),
    ] {
        let text = target(&format!(
            "luns:\n  - lun: 1\n    bs_type: rbd\n    {fields}"
        ));
        err(&text, &format!("{p}.{field}"), words);
    }
}

#[test]
fn null_luns() {
    // YAML's null is tgt's null store here (quoted, any case, or `~`, the same)
    let yaml = target(
        "luns:\n  - lun: 1\n    path: floor\n    bs_type: null\n  \
         - lun: 2\n    path: nothing\n    bs_type: \"NULL\"\n    cache: numa\n  \
         - lun: 3\n    path: x\n    bs_type: ~\n  \
         - lun: 4\n    path: /d/a.img",
    );
    let c = ok(&yaml);
    let luns = &c.targets[0].luns;
    let types: Vec<BsType> = luns.iter().map(|l| l.bs_type).collect();
    assert_eq!(
        types,
        [BsType::Null, BsType::Null, BsType::Null, BsType::Rdwr]
    );
    assert_eq!(luns[0].path, std::path::Path::new("floor"), "only a name");
    // uncached unless asked: the global mode (numa) is for the file
    let modes: Vec<config::CacheMode> = luns.iter().map(|l| l.cache_mode(&c.cache)).collect();
    use config::CacheMode::{Numa, Off};
    assert_eq!(modes, [Off, Numa, Off, c.cache.mode]);
    assert!(c.to_yaml().contains("bs_type: 'null'") || c.to_yaml().contains("bs_type: \"null\""));
    let p = "targets[0].luns[0]";
    for (fields, field, words) in [
        ("size: 1G", "size", "a null LUN has no file to create"),
        ("bsopts: conf=/c", "bsopts", "bsopts is for bs_type: rbd"),
    ] {
        let text = target(&format!(
            "luns:\n  - lun: 1\n    path: floor\n    bs_type: null\n    {fields}"
        ));
        err(&text, &format!("{p}.{field}"), words);
    }
}
