//! Import of tgt's targets.conf: every directive, tgt-admin's LUN and tid
//! numbering, includes (globs, relative paths, cycles), located errors,
//! `ignore-errors`, the YAML round trip of imported configurations, format
//! detection by `config::load`, and a property test that no text panics.

use std::path::{Path, PathBuf};

use config::targets_conf::{import, import_str, looks_like_targets_conf};
use config::{
    AddressRule, BsType, Config, Digest, Driver, Imported, SenseFormat, TargetState, parse,
};
use proptest::prelude::*;

fn imp(text: &str) -> Imported {
    match import_str(text, Path::new("/etc/tgt/targets.conf")) {
        Ok(i) => i,
        Err(e) => panic!("rejected: {e}\n{text}"),
    }
}

fn imp_err(text: &str) -> String {
    match import_str(text, Path::new("/etc/tgt/targets.conf")) {
        Ok(i) => panic!("accepted:\n{text}\n=> {i:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn rbd_backing_stores_as_tgt_admin_spells_them() {
    let i = imp("\
<target iqn.2026-11.org.example:r>
    <backing-store tank/disk1>
        bs-type rbd
        bsopts \"conf=/etc/ceph/ceph.conf;id=iscsi;cache=off\"
    </backing-store>
    <backing-store disk2@gold>
        bs-type rbd
    </backing-store>
</target>
");
    let t = &i.config.targets[0];
    let a = t
        .luns
        .iter()
        .find(|l| l.path == Path::new("tank/disk1"))
        .expect("disk1");
    assert_eq!(a.bs_type, BsType::Rbd);
    assert_eq!(
        a.bsopts.as_deref(),
        Some("conf=/etc/ceph/ceph.conf;id=iscsi")
    );
    assert_eq!(a.cache, Some(config::CacheMode::Off));
    let b = t
        .luns
        .iter()
        .find(|l| l.path == Path::new("disk2@gold"))
        .expect("disk2");
    assert_eq!((b.bs_type, b.bsopts.as_deref()), (BsType::Rbd, None));
    assert!(
        i.warnings.iter().all(|w| !w.contains("bsopts")),
        "{:?}",
        i.warnings
    );
}

/// numatgt's ALUA directives (issue 26), as tgtadm names them: the group, peers and
/// non-owner state of a gateway; errors located at their line.
#[test]
fn alua_directives_set_the_gateway_group() {
    let i = imp("\
<target iqn.2026-11.org.example:g>
    backing-store /srv/shared.img
    alua_group 2
    alua-peers 1,3:7
    ALUA_NON_OWNER_STATE standby
</target>
");
    let a = i.config.targets[0].alua.clone().expect("alua");
    assert_eq!((a.group, a.relative_port), (2, 2));
    let peers: Vec<(u16, u16)> = a.peers.iter().map(|p| (p.group, p.relative_port)).collect();
    assert_eq!(peers, vec![(1, 1), (3, 7)]);
    assert_eq!(a.non_owner_state, Some(config::NonOwnerState::Standby));
    round_trips(&i.config);
    let e = imp_err(
        "\
<target iqn.2026-11.org.example:g>
    alua_group 1
    alua_peers 1
</target>
",
    );
    assert!(e.contains(":3:") && e.contains("already used"), "{e}");
    let e = imp_err(
        "\
<target iqn.2026-11.org.example:g>
    alua_group two
</target>
",
    );
    assert!(e.contains(":2:") && e.contains("not a number"), "{e}");
}

fn luns(c: &Config, t: usize) -> Vec<(u64, String)> {
    c.targets[t]
        .luns
        .iter()
        .map(|l| (l.lun, l.path.display().to_string()))
        .collect()
}

fn round_trips(c: &Config) {
    let y = c.to_yaml();
    assert_eq!(parse(&y, "dump.yaml").as_ref(), Ok(c), "{y}");
}

#[test]
fn minimal_debian_style_target() {
    let i = imp(
        "<target iqn.2026-11.org.example:disk1>\n    backing-store /srv/disk1.img\n</target>\n",
    );
    let c = &i.config;
    assert_eq!(c.targets.len(), 1);
    let t = &c.targets[0];
    assert_eq!(t.iqn, "iqn.2026-11.org.example:disk1");
    assert_eq!(t.tid, Some(1));
    assert_eq!(t.driver, Driver::Iscsi);
    assert!(t.allow_addresses.is_empty() && t.allow_initiators.is_empty());
    assert_eq!(luns(c, 0), vec![(1, "/srv/disk1.img".into())]);
    let l = &t.luns[0];
    assert!(l.write_cache && !l.readonly && l.online);
    assert_eq!(l.block_size, 512);
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    round_trips(c);
}

#[test]
fn lun_numbering_like_tgt_admin() {
    // Backing-stores sorted by path from 1, skipping LUNs reserved by `lun`,
    // then direct-stores sorted by path.
    let i = imp("\
<target iqn.2026-11.org.example:t>
    direct-store /dev/sdb
    backing-store /srv/c.img
    <backing-store /srv/a.img>
        lun 2
    </backing-store>
    backing-store /srv/b.img
    <direct-store /dev/sda>
        lun 10
    </direct-store>
</target>
");
    assert_eq!(
        luns(&i.config, 0),
        vec![
            (1, "/srv/b.img".into()),
            (2, "/srv/a.img".into()),
            (3, "/srv/c.img".into()),
            (4, "/dev/sdb".into()),
            (10, "/dev/sda".into()),
        ]
    );
    // direct-store is accepted with a note about sg_inq.
    assert_eq!(
        i.warnings.iter().filter(|w| w.contains("sg_inq")).count(),
        2,
        "{:?}",
        i.warnings
    );
    round_trips(&i.config);
}

#[test]
fn lun_numbering_conflicts() {
    let e = imp_err(
        "\
<target iqn.2026-11.org.example:t>
    <backing-store /srv/a.img>
        lun 1
    </backing-store>
    <backing-store /srv/b.img>
        lun 1
    </backing-store>
</target>
",
    );
    assert!(e.starts_with("/etc/tgt/targets.conf:6: backing-store: LUN 1 is already used by backing-store /srv/a.img (line 2)"), "{e}");
    // A target-level `lun` applies to every LUN (tgt-admin), so two stores clash.
    let e = imp_err(
        "<target iqn.2026-11.org.example:t>\nlun 5\nbacking-store /a\nbacking-store /b\n</target>\n",
    );
    assert!(e.contains("LUN 5 is already used"), "{e}");
    let i = imp("<target iqn.2026-11.org.example:t>\nlun 5\nbacking-store /a\n</target>\n");
    assert_eq!(luns(&i.config, 0), vec![(5, "/a".into())]);
    // The same path twice is one LUN.
    let i =
        imp("<target iqn.2026-11.org.example:t>\nbacking-store /a\nbacking-store /a\n</target>\n");
    assert_eq!(luns(&i.config, 0), vec![(1, "/a".into())]);
    assert!(
        i.warnings[0].contains("already listed at line 2"),
        "{:?}",
        i.warnings
    );
}

#[test]
fn tids_like_tgt_admin() {
    // Sorted by name; controller_tid fixes one; the next continues from it.
    let i = imp("\
<target iqn.2026-11.org.example:c>
</target>
<target iqn.2026-11.org.example:a>
    controller_tid 7
</target>
<target iqn.2026-11.org.example:b>
</target>
");
    let tid = |n: &str| i.config.target(n).and_then(|t| t.tid);
    assert_eq!(tid("iqn.2026-11.org.example:a"), Some(7));
    assert_eq!(tid("iqn.2026-11.org.example:b"), Some(8));
    assert_eq!(tid("iqn.2026-11.org.example:c"), Some(9));
    // File order is kept in the model.
    assert_eq!(i.config.targets[0].iqn, "iqn.2026-11.org.example:c");
    let e = imp_err(
        "<target iqn.2026-11.org.example:a>\n</target>\n<target iqn.2026-11.org.example:b>\ncontroller_tid 1\n</target>\n",
    );
    assert!(e.contains(":3: target: tid 1 is already used"), "{e}");
}

#[test]
fn every_target_directive() {
    let i = imp("\
default-driver iser
incomingdiscoveryuser disc discsecret12
outgoingdiscoveryuser discout discoutsecret
<target iqn.2026-11.org.example:t1>
    backing-store /srv/t1.img
    driver iscsi
    initiator-address 192.168.1.0/24
    initiator-address 10.0.0.5
    initiator-name iqn.1993-08.org.debian:01:host1
    incominguser alice alicesecret12
    incominguser bob bobsecret1234
    outgoinguser tgt tgtsecret1234
    outgoinguser other othersecret1
    MaxRecvDataSegmentLength 65536
    MaxXmitDataSegmentLength 32768
    HeaderDigest CRC32C,None
    DataDigest None
    InitialR2T No
    ImmediateData No
    FirstBurstLength 32768
    MaxBurstLength 131072
    MaxOutstandingR2T 4
    DataPDUInOrder Yes
    DataSequenceInOrder Yes
    ErrorRecoveryLevel 0
    IFMarker No
    OFMarker No
    IFMarkInt 2048
    DefaultTime2Wait 5
    DefaultTime2Retain 30
    MaxConnections 1
    nop_interval 10
    nop_count 3
    state offline
</target>
<target iqn.2026-11.org.example:t2>
    backing-store /srv/t2.img
</target>
");
    let c = &i.config;
    let t = &c.targets[0];
    assert_eq!(t.driver, Driver::Iscsi);
    assert_eq!(c.targets[1].driver, Driver::Iser);
    assert_eq!(t.state, TargetState::Offline);
    assert_eq!(
        t.allow_addresses,
        vec![
            AddressRule::parse("192.168.1.0/24").unwrap(),
            AddressRule::parse("10.0.0.5").unwrap()
        ]
    );
    assert_eq!(t.allow_initiators, vec!["iqn.1993-08.org.debian:01:host1"]);
    assert_eq!(t.incoming_users, vec!["alice", "bob"]);
    assert_eq!(t.outgoing_user.as_deref(), Some("tgt"));
    assert!(
        i.warnings
            .iter()
            .any(|w| w.contains("only one outgoinguser")),
        "{:?}",
        i.warnings
    );
    assert!(
        i.warnings.iter().any(|w| w.contains("IFMarkInt: ignored")),
        "{:?}",
        i.warnings
    );
    let users: Vec<&str> = c.accounts.iter().map(|a| a.user.as_str()).collect();
    assert_eq!(users, vec!["disc", "discout", "alice", "bob", "tgt"]);
    assert_eq!(
        c.account("alice").map(|a| a.password.as_str()),
        Some("alicesecret12")
    );
    assert_eq!(c.discovery_auth.incoming_users, vec!["disc"]);
    assert_eq!(c.discovery_auth.outgoing_user.as_deref(), Some("discout"));
    let p = t.effective_iscsi(&c.iscsi);
    assert_eq!(p.max_recv_data_segment_length, 65536);
    assert_eq!(p.max_xmit_data_segment_length, Some(32768));
    assert_eq!(p.header_digest, vec![Digest::Crc32c, Digest::None]);
    assert_eq!(p.data_digest, vec![Digest::None]);
    assert!(!p.initial_r2t && !p.immediate_data);
    assert_eq!((p.first_burst_length, p.max_burst_length), (32768, 131072));
    assert_eq!(p.max_outstanding_r2t, 4);
    assert!(p.data_pdu_in_order && p.data_sequence_in_order);
    assert_eq!(p.error_recovery_level, 0);
    assert_eq!((p.default_time2wait, p.default_time2retain), (5, 30));
    assert_eq!(p.max_connections, 1);
    assert_eq!((p.nop_interval, p.nop_count), (10, 3));
    // The second target has no overrides.
    assert_eq!(c.targets[1].effective_iscsi(&c.iscsi), c.iscsi);
    round_trips(c);
}

#[test]
fn every_lun_directive_and_target_defaults() {
    let i = imp("\
<target iqn.2026-11.org.example:t>
    # Target-level LUN directives are defaults for every LUN.
    vendor_id ACME
    product_id Disk
    write-cache off
    readonly 1
    block-size 4096
    bsoflags direct
    params thin_provisioning=1,scsi_sn=sn-${tid}-${lun}
    <backing-store /srv/a.img>
        vendor_id OTHER
        product_rev 0042
        scsi_id id-a
        scsi_sn ignored-by-target-params
        sense_format 1
        removable 1
        online 0
        readonly 0
        write-cache on
        device-type disk
        bs-type aio
        bsopts conf=/x;cache=page
        bsoflags sync:direct
        allow-in-use yes
        lbppbe 3
        la_lba 0
        optimal_xfer_gran 8
        optimal_xfer_len 256
        path /srv/a2.img
    </backing-store>
    backing-store /srv/b.img
</target>
");
    let t = &i.config.targets[0];
    let a = &t.luns[0];
    assert_eq!(a.path, PathBuf::from("/srv/a2.img"));
    assert_eq!(a.vendor_id.as_deref(), Some("OTHER"));
    assert_eq!(a.product_id.as_deref(), Some("Disk"));
    assert_eq!(a.product_rev.as_deref(), Some("0042"));
    assert_eq!(a.scsi_id.as_deref(), Some("id-a"));
    // Target-level params run last (tgt-admin's command order).
    assert_eq!(a.serial.as_deref(), Some("sn-1-1"));
    assert!(a.thin_provisioning);
    assert_eq!(a.sense_format, SenseFormat::Descriptor);
    assert!(a.removable && !a.online && !a.readonly && a.write_cache);
    assert_eq!(a.block_size, 4096);
    assert_eq!(a.bs_type, BsType::Aio);
    assert!(a.bsoflags.direct && a.bsoflags.sync);
    // tgt's bsopts carry numatgt's per-LUN cache mode
    assert_eq!(a.cache, Some(config::CacheMode::Page));
    assert_eq!((a.lbppbe, a.la_lba), (Some(3), Some(0)));
    assert_eq!(
        (a.optimal_xfer_gran, a.optimal_xfer_len),
        (Some(8), Some(256))
    );
    let b = &t.luns[1];
    assert_eq!(b.lun, 2);
    assert_eq!(b.vendor_id.as_deref(), Some("ACME"));
    assert!(!b.write_cache && b.readonly);
    assert_eq!(b.serial.as_deref(), Some("sn-1-2"));
    assert!(b.bsoflags.direct && !b.bsoflags.sync);
    assert_eq!(b.bs_type, BsType::Rdwr);
    assert_eq!(b.cache, None);
    for w in [
        "bsopts: bsopts conf=/x ignored: numatgt reads only cache=numa|off|page",
        "allow-in-use: allow-in-use is ignored",
    ] {
        assert!(
            i.warnings.iter().any(|x| x.contains(w)),
            "{w}: {:?}",
            i.warnings
        );
    }
    round_trips(&i.config);
}

#[test]
fn mode_pages() {
    let i = imp("\
<target iqn.2026-11.org.example:t>
    <backing-store /a>
        mode_page 8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0
    </backing-store>
    <backing-store /b>
        write-cache off
        params mode_page=8:0:18:0x14:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0
        mode_page 0x0a:0:10:2:0:0:0:0:0:0:0:0:0
    </backing-store>
</target>
");
    let t = &i.config.targets[0];
    assert!(!t.luns[0].write_cache);
    assert!(
        t.luns[1].write_cache,
        "params mode_page runs after write-cache"
    );
    assert!(
        i.warnings
            .iter()
            .any(|w| w.contains("mode page 10:0 is not configurable")),
        "{:?}",
        i.warnings
    );
    assert!(
        imp_err("<target iqn.2026-11.org.example:t>\nbacking-store /a\nmode_page 8\n</target>\n")
            .contains(":3: mode_page: expected PAGE:SUBPAGE")
    );
}

#[test]
fn global_directives_and_case() {
    let i = imp("\
ignore-errors no
control-port 2
iSNSServerIP 192.0.2.1
iSNSServerPort 3205
iSNSAccessControl Off
iSNS On
<TARGET iqn.2026-11.org.example:t>
    Backing-Store /a
    maxrecvdatasegmentlength = 8192
    write_cache off
    Block_Size=4096
</target>
");
    let t = &i.config.targets[0];
    assert_eq!(
        t.effective_iscsi(&i.config.iscsi)
            .max_recv_data_segment_length,
        8192
    );
    assert!(!t.luns[0].write_cache);
    assert_eq!(t.luns[0].block_size, 4096);
    assert_eq!(
        i.warnings.iter().filter(|w| w.contains("iSNS")).count(),
        4,
        "{:?}",
        i.warnings
    );
    assert!(
        i.warnings
            .iter()
            .any(|w| w.contains("control-port: ignored")),
        "{:?}",
        i.warnings
    );
    let i = imp(
        "Default_Driver iser\n<Target iqn.2026-11.org.example:t>\nController-Tid 4\nInitiator_Address 10.0.0.1\nNOP_INTERVAL 5\n</Target>\n",
    );
    let t = &i.config.targets[0];
    assert_eq!((t.driver, t.tid), (Driver::Iser, Some(4)));
    assert_eq!(t.allow_addresses.len(), 1);
    assert_eq!(t.effective_iscsi(&i.config.iscsi).nop_interval, 5);
    let e = imp_err("default-driver iscsi\ndefault-driver iser\n");
    assert!(
        e.starts_with("/etc/tgt/targets.conf:2: default-driver: multiple"),
        "{e}"
    );
    assert!(imp_err("default-driver fc\n").contains("must be iscsi or iser"));
    assert!(
        imp_err("backing-store /a\n")
            .contains(":1: backing-store: belongs inside a <target> block")
    );
}

#[test]
fn located_errors() {
    let cases = [
        (
            "<target iqn.2026-11.org.example:t>\nbogus 1\n</target>\n",
            ":2: bogus: unknown directive",
        ),
        ("frobnicate yes\n", ":1: frobnicate: unknown directive"),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nblock-size 1000\n</target>\n",
            ":3: block-size: must be 512 or 4096 (got 1000)",
        ),
        (
            "<target iqn.2026-11.org.example:t>\n<backing-store /a>\ndevice-type osd\n</backing-store>\n</target>\n",
            ":3: device-type: device type \"osd\" is not supported",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nbs-type glfs\n</target>\n",
            ":3: bs-type: backing-store type \"glfs\" is not supported",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nbs-type rbd\n</target>\n",
            "empty pool name",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nvendor_id TOOLONGVENDOR\n</target>\n",
            ":3: vendor_id: must be 1 to 8 printable ASCII",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nproduct_rev 12345\n</target>\n",
            ":3: product_rev: must be 1 to 4",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store relative.img\n</target>\n",
            ":2: backing-store: must be an absolute path",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nMaxBurstLength 100\n</target>\n",
            ":2: MaxBurstLength: must be in 512..=16777215",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nMaxBurstLength lots\n</target>\n",
            ":2: MaxBurstLength: expected a number",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nIFMarker Yes\n</target>\n",
            ":2: IFMarker: markers are not supported",
        ),
        (
            "<target iqn.2026-11.org.example:t>\ninitiator-address 10.1.0.0/8\n</target>\n",
            ":2: initiator-address: \"10.1.0.0/8\": host bits are set",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nincominguser onlyuser\n</target>\n",
            ":2: incominguser: expected USER PASSWORD",
        ),
        ("<target Bad_Name>\n</target>\n", ":1: target: "),
        (
            "<target iqn.2026-11.org.example:t>\n</target>\n<target iqn.2026-11.org.example:t>\n</target>\n",
            ":3: target: duplicate target",
        ),
        (
            "<target iqn.2026-11.org.example:t>\ndriver fc\n</target>\n",
            ":2: driver: must be iscsi or iser",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nwrite-cache maybe\n</target>\n",
            ":3: write-cache: must be on or off",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nremovable perhaps\n</target>\n",
            ":3: removable: must be 0 or 1",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nparams colour=blue\n</target>\n",
            ":3: params: unknown parameter \"colour\"",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nsense_format 2\n</target>\n",
            ":3: sense_format: must be 0/fixed or 1/descriptor",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store /a\nvendor_id A\nvendor_id B\n</target>\n",
            ":4: vendor_id: multiple vendor_id definitions",
        ),
        (
            "<target iqn.2026-11.org.example:t>\n<backing-store /a>\nMaxBurstLength 512\n</backing-store>\n</target>\n",
            ":3: MaxBurstLength: is a target-level directive",
        ),
        (
            "<target iqn.2026-11.org.example:t>\nbacking-store\n</target>\n",
            ":2: backing-store: missing value",
        ),
        (
            "<target iqn.2026-11.org.example:t>\n<lun 1>\n</lun>\n</target>\n",
            ":2: lun: unknown block <lun>",
        ),
    ];
    for (text, want) in cases {
        let e = imp_err(text);
        assert!(e.starts_with("/etc/tgt/targets.conf:"), "{e}");
        assert!(e.contains(want), "{e:?} lacks {want:?}");
    }
}

#[test]
fn ignore_errors_skips_what_is_bad() {
    let i = imp("\
<target iqn.2026-11.org.example:good>
    backing-store /a
    bogus 1
    <backing-store /b>
        block-size 1000
    </backing-store>
</target>
<target Bad_Name>
    backing-store /c
</target>
ignore-errors yes
");
    let c = &i.config;
    assert_eq!(c.targets.len(), 1);
    assert_eq!(luns(c, 0), vec![(1, "/a".into())]);
    let w = i.warnings.join("\n");
    assert!(
        w.contains(":3: bogus: unknown directive (skipped: ignore-errors yes)"),
        "{w}"
    );
    assert!(
        w.contains(":5: block-size: must be 512 or 4096 (got 1000) (LUN 2 skipped"),
        "{w}"
    );
    assert!(w.contains("(target Bad_Name skipped"), "{w}");
    round_trips(c);
}

#[test]
fn chap_secret_advice_is_a_warning() {
    let i = imp("<target iqn.2026-11.org.example:t>\nincominguser u short\n</target>\n");
    assert_eq!(
        i.config.account("u").map(|a| a.password.as_str()),
        Some("short")
    );
    assert!(
        i.warnings.iter().any(|w| w.contains("RFC 7143")),
        "{:?}",
        i.warnings
    );
    // The same user with another secret keeps the first (tgt-admin creates it once).
    let i = imp(
        "<target iqn.2026-11.org.example:a>\nincominguser u secret-one-12\n</target>\n<target iqn.2026-11.org.example:b>\nincominguser u secret-two-12\n</target>\n",
    );
    assert_eq!(
        i.config.account("u").map(|a| a.password.as_str()),
        Some("secret-one-12")
    );
    assert!(
        i.warnings.iter().any(|w| w.contains("another password")),
        "{:?}",
        i.warnings
    );
}

#[test]
fn comments_continuations_quotes() {
    let i = imp("\
# a comment
/* a C comment
   <target iqn.2026-11.org.example:nope>
*/
<target iqn.2026-11.org.example:t>   # trailing comment
    backing-store \\
        /srv/a.img
    vendor_id \"AC ME\"
    product_id x\\#1
</target>
");
    let l = &i.config.targets[0].luns[0];
    assert_eq!(l.path, PathBuf::from("/srv/a.img"));
    assert_eq!(l.vendor_id.as_deref(), Some("AC ME"));
    assert_eq!(l.product_id.as_deref(), Some("x#1"));
    assert_eq!(i.config.targets.len(), 1);
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn includes_with_globs_relative_paths_and_cycles() {
    let d = tempfile::tempdir().unwrap();
    let main = write(
        d.path(),
        "targets.conf",
        "default-driver iscsi\ninclude conf.d/*.conf\ninclude extra/one.conf\n",
    );
    write(
        d.path(),
        "conf.d/b.conf",
        "<target iqn.2026-11.org.example:b>\nbacking-store /b\n</target>\n",
    );
    write(
        d.path(),
        "conf.d/a.conf",
        "<target iqn.2026-11.org.example:a>\nbacking-store /a\n</target>\n",
    );
    write(d.path(), "conf.d/skip.txt", "garbage\n");
    write(
        d.path(),
        "extra/one.conf",
        "<target iqn.2026-11.org.example:c>\n<<include ../inner.conf>>\n</target>\n",
    );
    write(d.path(), "inner.conf", "backing-store /c\n");
    let i = import(&main).unwrap();
    let names: Vec<&str> = i.config.targets.iter().map(|t| t.iqn.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "iqn.2026-11.org.example:a",
            "iqn.2026-11.org.example:b",
            "iqn.2026-11.org.example:c"
        ]
    );
    assert_eq!(luns(&i.config, 2), vec![(1, "/c".into())]);
    // Errors in an included file name that file.
    write(
        d.path(),
        "conf.d/z.conf",
        "<target iqn.2026-11.org.example:z>\nnonsense 1\n</target>\n",
    );
    let e = import(&main).unwrap_err().to_string();
    assert!(
        e.contains("conf.d/z.conf:2: nonsense: unknown directive"),
        "{e}"
    );
    std::fs::remove_file(d.path().join("conf.d/z.conf")).unwrap();
    // A cycle is an error.
    write(d.path(), "inner.conf", "include extra/one.conf\n");
    write(d.path(), "extra/one.conf", "include ../inner.conf\n");
    let e = import(&main).unwrap_err().to_string();
    assert!(e.contains("include cycle"), "{e}");
    // Reading the same file twice (no cycle) is skipped with a warning.
    write(d.path(), "extra/one.conf", "include ../conf.d/a.conf\n");
    let i = import(&main).unwrap();
    assert_eq!(i.config.targets.len(), 2);
    assert!(
        i.warnings.iter().any(|w| w.contains("already read")),
        "{:?}",
        i.warnings
    );
    // A missing plain include is an error at its line.
    let e = import_str("\n\ninclude nothere.conf\n", &main)
        .unwrap_err()
        .to_string();
    assert!(e.contains("targets.conf:3: include: cannot read"), "{e}");
}

#[test]
fn load_picks_the_format() {
    let d = tempfile::tempdir().unwrap();
    let conf = "<target iqn.2026-11.org.example:t>\nbacking-store /a\n</target>\n";
    let p = write(d.path(), "targets.conf", conf);
    assert_eq!(config::load(&p).unwrap().config.targets.len(), 1);
    let p = write(d.path(), "my-targets", conf);
    assert_eq!(config::load(&p).unwrap().config.targets.len(), 1);
    let y = Config::demo(Path::new("/var/lib/numatgt"), &[]).to_yaml();
    let p = write(d.path(), "numatgt.yaml", &y);
    let l = config::load(&p).unwrap();
    assert_eq!(l.config, Config::demo(Path::new("/var/lib/numatgt"), &[]));
    let p = write(d.path(), "bad.yaml", "targets: [\n");
    assert!(
        config::load(&p)
            .unwrap_err()
            .to_string()
            .starts_with(&p.display().to_string())
    );
    assert!(config::load(&d.path().join("missing.yaml")).is_err());
    assert!(looks_like_targets_conf(
        "# x\ninclude /etc/tgt/conf.d/*.conf\n"
    ));
    assert!(looks_like_targets_conf("default-driver iscsi\n"));
    assert!(!looks_like_targets_conf("targets: []\n"));
    assert!(!looks_like_targets_conf(""));
}

fn confish() -> impl Strategy<Value = String> {
    let atom = prop::sample::select(vec![
        "<target iqn.2026-11.org.example:t>",
        "<target iqn.2026-11.org.example:u>",
        "</target>",
        "<backing-store /a>",
        "</backing-store>",
        "<direct-store /dev/sda>",
        "</direct-store>",
        "backing-store /b",
        "backing-store /c",
        "direct-store /d",
        "lun 1",
        "lun 2",
        "lun 0",
        "controller_tid 3",
        "write-cache off",
        "readonly 1",
        "block-size 4096",
        "vendor_id X",
        "params scsi_sn=${tid}-${lun}",
        "mode_page 8:0:18:0x10",
        "incominguser u secret",
        "outgoinguser o secret",
        "initiator-address 10.0.0.0/8",
        "initiator-name iqn.1993-08.org.debian:01:x",
        "MaxBurstLength 512",
        "FirstBurstLength 65536",
        "HeaderDigest CRC32C",
        "ignore-errors yes",
        "default-driver iser",
        "bs-type rbd",
        "device-type cd",
        "qos_iops 1000",
        "qos_bps 50M",
        "qos_burst 0.5",
        "qos_burst_factor 1.25",
        "params qos_read_iops=7",
        "include /nonexistent/*.conf",
        "#",
        "\\",
        "=",
        " ",
        "\n",
        "\n",
        "<",
        ">",
        "/*",
        "*/",
        "\"",
    ]);
    prop::collection::vec(atom, 0..40).prop_map(|v| v.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_text(s in "(.|\\n){0,300}") {
        let _ = import_str(&s, Path::new("/nonexistent/p.conf"));
    }

    #[test]
    fn imported_configs_round_trip(s in confish()) {
        match import_str(&s, Path::new("/nonexistent/p.conf")) {
            Ok(i) => {
                let y = i.config.to_yaml();
                prop_assert_eq!(parse(&y, "dump").ok(), Some(i.config));
            }
            Err(e) => prop_assert!(e.to_string().starts_with("/nonexistent/p.conf"), "{}", e),
        }
    }
}

#[test]
fn example_file_imports() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/targets.conf");
    let i = import(&path).unwrap();
    let c = &i.config;
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    let db = c.target("iqn.2026-11.org.example:db").unwrap();
    assert_eq!(db.tid, Some(1));
    assert_eq!(
        luns(c, 0),
        vec![
            (1, "/srv/iscsi/db-a.img".into()),
            (2, "/srv/iscsi/db-b.img".into())
        ]
    );
    assert!(
        db.luns
            .iter()
            .all(|l| !l.write_cache && l.vendor_id.as_deref() == Some("EXAMPLE"))
    );
    assert_eq!(db.incoming_users, vec!["dbhost"]);
    assert_eq!(db.outgoing_user.as_deref(), Some("dbtarget"));
    assert!(db.luns.iter().all(|l| {
        let q = l.effective_qos(db);
        (q.iops, q.burst_ms, q.burst_percent_or_default()) == (Some(5000), Some(2000), 200)
    }));
    let s = c.target("iqn.2026-11.org.example:scratch").unwrap();
    assert_eq!(s.tid, Some(10));
    let l = &s.luns[0];
    assert_eq!((l.lun, l.block_size), (3, 4096));
    assert_eq!(l.scsi_id.as_deref(), Some("scratch-10-3"));
    assert!(l.thin_provisioning && l.bsoflags.direct);
    assert_eq!(l.qos.write_bps, Some(100 << 20));
    assert_eq!(c.discovery_auth.incoming_users, vec!["discover"]);
    round_trips(c);
}

#[test]
fn remaining_directives() {
    let i = imp("\
<target iqn.2026-11.org.example:t>
    MaxQueueCmd 64
    OFMarkInt 2048
    <backing-store /a>
        rotation_rate 1
        params online=0,readonly=yes,rotation_rate=7200
    </backing-store>
</target>
<target iqn.2026-11.org.example:t>
</target>
ignore-errors yes
");
    let t = &i.config.targets[0];
    assert_eq!(t.effective_iscsi(&i.config.iscsi).max_queued_commands, 64);
    assert!(!t.luns[0].online && t.luns[0].readonly);
    let w = i.warnings.join("\n");
    assert!(w.contains("OFMarkInt: ignored"), "{w}");
    assert_eq!(w.matches("rotation_rate is ignored").count(), 2, "{w}");
    assert!(w.contains(":6: params: rotation_rate is ignored"), "{w}");
    assert!(w.contains(":9: target: duplicate target"), "{w}");
    assert_eq!(i.config.targets.len(), 1);
}

#[test]
fn null_backing_stores_as_tgt_admin_spells_them() {
    let i = imp("\
<target iqn.2026-11.org.example:n>
    <backing-store /dev/null>
        bs-type null
    </backing-store>
    <backing-store floor>
        bs-type null
        bsopts cache=numa
    </backing-store>
</target>
");
    let t = &i.config.targets[0];
    let by_path = |p: &str| {
        t.luns
            .iter()
            .find(|l| l.path == Path::new(p))
            .unwrap_or_else(|| panic!("{p}"))
    };
    let (a, b) = (by_path("/dev/null"), by_path("floor"));
    assert_eq!((a.bs_type, b.bs_type), (BsType::Null, BsType::Null));
    assert_eq!((a.cache, b.cache), (None, Some(config::CacheMode::Numa)));
    round_trips(&i.config);
}

#[test]
fn a_virtual_tape_library_as_debians_l700_example_writes_it() {
    let i = imp("\
<target iqn.2008-09.com.example:server.tape>
    <backing-store /srv/tapes/notape1>
        lun 1
        device-type tape
        removable 1
        vendor_id \"HP\"
        product_id \"LTO3 ULTRIUM\"
    </backing-store>
    <backing-store /srv/smc>
        lun 4
        device-type changer
        removable 1
        vendor_id \"STK\"
        product_id \"L700\"
        params element_type=1,start_address=1,quantity=1,media_home=/srv/tapes
        params element_type=2,start_address=1000,quantity=216,media_home=/srv/tapes
        params element_type=4,start_address=500,quantity=3,media_home=/srv/tapes
        params element_type=4,address=500,tid=1,lun=1
    </backing-store>
</target>
");
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    let l = &i.config.targets[0].luns;
    assert_eq!(
        (l[0].device_type, l[0].bs_type),
        (config::DeviceType::Tape, BsType::Ssc)
    );
    assert_eq!(
        (l[1].lun, l[1].device_type, l[1].bs_type),
        (4, config::DeviceType::Changer, BsType::Smc)
    );
    assert_eq!(
        l[1].changer,
        vec![
            "element_type=1,start_address=1,quantity=1,media_home=/srv/tapes",
            "element_type=2,start_address=1000,quantity=216,media_home=/srv/tapes",
            "element_type=4,start_address=500,quantity=3,media_home=/srv/tapes",
            "element_type=4,address=500,tid=1,lun=1",
        ]
    );
    round_trips(&i.config);
    // an element key beside another LUN parameter in one line is an error
    let e = imp_err(
        "\
<target iqn.2008-09.com.example:t>
    <backing-store /srv/smc>
        device-type changer
        params element_type=2,start_address=1,quantity=2,vendor_id=X
    </backing-store>
</target>
",
    );
    assert!(e.contains("unknown parameter"), "{e}");
}

#[test]
fn passthrough_devices_as_tgt_admin_writes_them() {
    let i = imp("\
<target iqn.2008-09.com.example:server.pt>
    <backing-store /dev/sg3>
        lun 1
        bs-type sg
        device-type pt
    </backing-store>
    <backing-store /dev/bsg/4:0:0:0>
        lun 2
        bs-type bsg
        device-type pt
    </backing-store>
</target>
");
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    let l = &i.config.targets[0].luns;
    assert_eq!(
        (l[0].device_type, l[0].bs_type, l[0].path.as_path()),
        (
            config::DeviceType::Passthrough,
            BsType::Sg,
            Path::new("/dev/sg3")
        )
    );
    assert_eq!(
        (l[1].device_type, l[1].bs_type),
        (config::DeviceType::Passthrough, BsType::Bsg)
    );
    assert_eq!(
        l[0].cache_mode(&config::CacheSettings::default()),
        config::CacheMode::Off
    );
    round_trips(&i.config);
    // sg on a disk is an error naming bs-type, as tgtd refuses it
    let e = imp_err(
        "\
<target iqn.2008-09.com.example:t>
    <backing-store /dev/sg3>
        bs-type sg
    </backing-store>
</target>
",
    );
    assert!(
        e.contains("bs-type") && e.contains("device_type: pt"),
        "{e}"
    );
}
