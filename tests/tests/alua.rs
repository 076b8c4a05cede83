//! ALUA across gateways (issue 16): two numatgtd daemons export the same target and LUN
//! from one backing file, each as its own target port group. Checked through raw iSCSI
//! sessions: INQUIRY TPGS, VPD 83h port and group designators, REPORT TARGET PORT GROUPS on
//! both gateways, the NOT READY answers of a standby port, ASYMMETRIC ACCESS STATE CHANGED
//! after an ownership move through Debian's tgtadm, and cache coherence across moves: the
//! old owner writes its dirty blocks back before it gives the LUN up, the new owner drops
//! what it had cached before, so no gateway ever serves a block another one changed.

use std::path::Path;

use tests::alua::rtpg;
use tests::cdb::{SYNC10, cdb10, sense_of};
use tests::daemon::{TargetKind, create_sparse, require_numatgtd};
use tests::mgmt::{new_lun, new_open_target, numatgtadm_bin, restart_from_dump};
use tests::pdu::ScsiSession;
use tests::{Daemon, TEST_IQN, tools};

const BS: usize = 512;
const BLOCKS: u16 = 64;

/// The YAML of gateway `group` (the other one is `peer`) over `path`.
fn gateway_yaml(port: u16, path: &Path, group: u16, peer: u16, non_owner: &str) -> String {
    format!(
        "portals:\n  - address: 127.0.0.1:{port}\n\
         targets:\n  - iqn: {TEST_IQN}\n    alua:\n      group: {group}\n      \
         non_owner_state: {non_owner}\n      peers:\n        - group: {peer}\n    luns:\n      \
         - lun: 1\n        path: {}\n        write_cache: true\n",
        path.display()
    )
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..usize::from(BLOCKS) * BS)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(s: &mut ScsiSession) -> (u8, Vec<u8>, Vec<u8>) {
    s.command(&cdb10(0x28, 0, BLOCKS), &[], u32::from(BLOCKS) * BS as u32)
}

fn write(s: &mut ScsiSession, data: &[u8]) {
    let (st, sense, _) = s.command(&cdb10(0x2a, 0, BLOCKS), data, 0);
    assert_eq!(st, 0, "WRITE: sense {:?}", sense_of(&sense));
}

fn sync(s: &mut ScsiSession) {
    let (st, sense, _) = s.command(&SYNC10, &[], 0);
    assert_eq!(st, 0, "SYNCHRONIZE CACHE: sense {:?}", sense_of(&sense));
}

/// (NAA designator, relative target port, target port group) from VPD page 83h.
fn vpd83(s: &mut ScsiSession) -> (Vec<u8>, u16, u16) {
    let (st, _, d) = s.command(&[0x12, 1, 0x83, 1, 0, 0], &[], 256);
    assert_eq!(st, 0);
    let (mut naa, mut port, mut tpg) = (Vec::new(), 0, 0);
    let mut i = 4;
    while i + 4 <= d.len() {
        let len = usize::from(d[i + 3]);
        let v = &d[i + 4..i + 4 + len];
        match d[i + 1] & 0x0F {
            3 => naa = v.to_vec(),
            4 => port = u16::from_be_bytes([v[2], v[3]]),
            5 => tpg = u16::from_be_bytes([v[2], v[3]]),
            _ => {}
        }
        i += 4 + len;
    }
    (naa, port, tpg)
}

/// LUN 1's state on `d` as `numatgt_lun_alua_state` says it: one series per ALUA state,
/// exactly one of them 1.
fn alua_state_metric(d: &Daemon) -> String {
    let (code, body) = d.http_get("/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "GET /metrics: {body}");
    let prefix = format!("numatgt_lun_alua_state{{target=\"{TEST_IQN}\",lun=\"1\",state=\"");
    let series: Vec<(&str, &str)> = body
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix)?.split_once("\"} "))
        .collect();
    let states: Vec<&str> = series.iter().map(|s| s.0).collect();
    assert_eq!(
        states,
        [
            "active_optimized",
            "active_non_optimized",
            "standby",
            "unavailable",
            "transitioning"
        ],
        "one series per state"
    );
    let on: Vec<&str> = series.iter().filter(|s| s.1 == "1").map(|s| s.0).collect();
    assert!(
        on.len() == 1 && series.iter().all(|s| matches!(s.1, "0" | "1")),
        "exactly one state is 1: {series:?}"
    );
    on[0].to_string()
}

/// `tgtadm --op update --params alua_owner=GROUP` on LUN 1 of target 1.
fn update_owner(d: &Daemon, group: u16) -> tests::tools::ToolRun {
    tests::mgmt::update_lun1(d, &format!("alua_owner={group}"))
}

fn set_owner(d: &Daemon, group: u16) {
    let r = update_owner(d, group);
    assert!(
        r.status.success(),
        "{}: {}{}",
        r.cmdline,
        r.stdout,
        r.stderr
    );
}

/// Ownership of LUN 1 moved from gateway A (group 1) to B (group 2) with tgtadm, the old
/// owner first: both sessions get ASYMMETRIC ACCESS STATE CHANGED, then both gateways
/// report group 2 active/optimized and group 1 standby.
fn move_to_b(a: &Daemon, b: &Daemon, sa: &mut ScsiSession, sb: &mut ScsiSession) {
    set_owner(a, 2);
    set_owner(b, 2);
    expect_state_changed(sa, "A after giving the LUN up");
    expect_state_changed(sb, "B after taking the LUN over");
    let moved = vec![(1, 0x2, vec![1]), (2, 0x0, vec![2])];
    assert_eq!(rtpg(sa), moved);
    assert_eq!(rtpg(sb), moved);
}

/// The next command on `s` reports ASYMMETRIC ACCESS STATE CHANGED, once.
fn expect_state_changed(s: &mut ScsiSession, who: &str) {
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!((st, sense_of(&sense)), (2, Some((6, 0x2A, 0x06))), "{who}");
}

#[test]
fn standby_gateways_move_ownership_coherently() {
    require_numatgtd("standby_gateways_move_ownership_coherently");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("shared.img");
    create_sparse(&file, 16 << 20);
    let a = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &file, 1, 2, "standby"));
    let b = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &file, 2, 1, "standby"));
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:alua-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:alua-b");

    // identity: one LU (same NAA), two ports in two groups; implicit ALUA only
    let (st, _, inq) = sa.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!((st, inq[5] & 0x30), (0, 0x10), "TPGS = 01b");
    let (naa_a, port_a, tpg_a) = vpd83(&mut sa);
    let (naa_b, port_b, tpg_b) = vpd83(&mut sb);
    assert!(!naa_a.is_empty());
    assert_eq!(naa_a, naa_b, "both gateways report the same LU");
    assert_eq!((port_a, tpg_a, port_b, tpg_b), (1, 1, 2, 2));
    let both = vec![(1, 0x0, vec![1]), (2, 0x2, vec![2])];
    assert_eq!(
        rtpg(&mut sa),
        both,
        "A: group 1 active/optimized, 2 standby"
    );
    assert_eq!(rtpg(&mut sb), both, "B reports the same");
    assert_eq!(
        (alua_state_metric(&a), alua_state_metric(&b)),
        ("active_optimized".into(), "standby".into()),
        "the metrics say the same"
    );

    // B is in standby: medium access is NOT READY / TARGET PORT IN STANDBY STATE
    let (st, sense, _) = read(&mut sb);
    assert_eq!((st, sense_of(&sense)), (2, Some((2, 0x04, 0x0B))));
    let (st, sense, _) = sb.command(&[0; 6], &[], 0);
    assert_eq!((st, sense_of(&sense)), (2, Some((2, 0x04, 0x0B))));

    // A owns the LUN and caches it: P1 written back, acknowledged, kept dirty
    let p1 = pattern(1);
    write(&mut sa, &p1);
    assert_eq!(read(&mut sa).2, p1);

    // move to B: A writes back and drops its blocks, B takes over
    move_to_b(&a, &b, &mut sa, &mut sb);
    assert_eq!(
        (alua_state_metric(&a), alua_state_metric(&b)),
        ("standby".into(), "active_optimized".into()),
        "the metrics follow the move"
    );
    let (st, _, got) = read(&mut sb);
    assert_eq!(st, 0);
    assert!(
        got == p1,
        "B reads what A wrote (A wrote its dirty blocks back)"
    );
    let (st, sense, _) = read(&mut sa);
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((2, 0x04, 0x0B))),
        "A is standby now"
    );

    // B writes P2 into its cache; moving back, A must not serve its old copy of P1
    let p2 = pattern(2);
    write(&mut sb, &p2);
    set_owner(&b, 1);
    set_owner(&a, 1);
    expect_state_changed(&mut sa, "A after taking the LUN back");
    let (st, _, got) = read(&mut sa);
    assert_eq!(st, 0);
    assert!(
        got == p2,
        "A serves B's data, not the copy it cached before"
    );
    sync(&mut sa);

    // a bad owner is refused and changes nothing
    let r = update_owner(&a, 9);
    assert!(!r.status.success(), "alua_owner=9 accepted: {}", r.stdout);
    assert_eq!(rtpg(&mut sa), both);

    // tgtadm show names the owner and this gateway's state
    let show = a.tgtadm(&["--lld", "iscsi", "--mode", "target", "--op", "show"]);
    assert!(
        show.stdout
            .contains("ALUA: owner group 1, this gateway group 1: active-optimized"),
        "{}",
        show.stdout
    );
}

#[test]
fn active_non_optimized_gateways_serve_coherently_without_cache() {
    require_numatgtd("active_non_optimized_gateways_serve_coherently_without_cache");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("shared.img");
    create_sparse(&file, 16 << 20);
    let ano = "active-non-optimized";
    let a = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &file, 1, 2, ano));
    let b = Daemon::start_numatgtd_yaml(&|p| gateway_yaml(p, &file, 2, 1, ano));
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:ano-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:ano-b");
    assert_eq!(
        rtpg(&mut sb),
        vec![(1, 0x0, vec![1]), (2, 0x1, vec![2])],
        "group 2 active/non-optimized"
    );
    assert_eq!(alua_state_metric(&b), "active_non_optimized");
    assert!(
        a.log().contains("the NUMA cache is off for this LUN"),
        "the owner says why it does not cache:\n{}",
        a.log_tail(30)
    );
    // both paths serve I/O, and each sees the other's writes at once (no gateway caches)
    for round in 0..4u8 {
        let (w, r) = if round % 2 == 0 {
            (&mut sa, &mut sb)
        } else {
            (&mut sb, &mut sa)
        };
        let p = pattern(10 + round);
        write(w, &p);
        let (st, _, got) = read(r);
        assert_eq!(st, 0);
        assert!(
            got == p,
            "round {round}: the other gateway reads the new data"
        );
    }
}

/// `tgtadm --mode target --op update --tid TID --name NAME --value VALUE` on `d`.
fn update_target(d: &Daemon, tid: &str, name: &str, value: &str) -> tools::ToolRun {
    d.tgtadm(&[
        "--lld", "iscsi", "--mode", "target", "--op", "update", "--tid", tid, "--name", name,
        "--value", value,
    ])
}

/// A gateway made as a tgtd user makes one: numatgtd started like tgtd, then with
/// Debian's tgtadm only: target 1 open to all, its ALUA group `group`, peer `peer` and
/// standby non-owners, then LUN 1 on `file`.
fn tgtadm_gateway(file: &Path, group: u16, peer: u16) -> Daemon {
    let d = Daemon::start_like_tgtd_env(TargetKind::Numatgtd, &[], &[]);
    new_open_target(&d, "1", TEST_IQN);
    for (name, value) in [
        ("alua_group", group.to_string()),
        ("alua_peers", peer.to_string()),
        ("alua_non_owner_state", "standby".to_string()),
    ] {
        update_target(&d, "1", name, &value).check(name);
    }
    new_lun(&d, "1", "1", file, &[]).check("LUN 1");
    d
}

/// Two gateways set up with Debian's tgtadm alone (no YAML; issue 26): the groups and
/// peers given with `--op update --mode target --name alua_*` before the LUN, reported by
/// INQUIRY and REPORT TARGET PORT GROUPS on both and shown by `--op show`; ownership
/// moves as with YAML gateways. Refused clearly: a change once the target has a LUN, a
/// clash of groups, an unknown value. `numatgtadm --dump` keeps the settings and a
/// daemon started from the dump reports the same groups.
#[test]
fn alua_groups_made_with_tgtadm_alone() {
    require_numatgtd("alua_groups_made_with_tgtadm_alone");
    tools::require_tool("tgtadm");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("shared.img");
    create_sparse(&file, 16 << 20);
    let a = tgtadm_gateway(&file, 1, 2);
    let b = tgtadm_gateway(&file, 2, 1);
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:alua-tgtadm-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:alua-tgtadm-b");
    let (st, _, inq) = sa.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!((st, inq[5] & 0x30), (0, 0x10), "TPGS = 01b");
    let (naa_a, port_a, tpg_a) = vpd83(&mut sa);
    let (naa_b, port_b, tpg_b) = vpd83(&mut sb);
    assert_eq!(naa_a, naa_b, "both gateways report the same LU");
    assert_eq!((port_a, tpg_a, port_b, tpg_b), (1, 1, 2, 2));
    let both = vec![(1, 0x0, vec![1]), (2, 0x2, vec![2])];
    assert_eq!(rtpg(&mut sa), both, "A: group 1 owns, 2 standby");
    assert_eq!(rtpg(&mut sb), both, "B reports the same");
    let (st, sense, _) = read(&mut sb);
    assert_eq!(
        (st, sense_of(&sense)),
        (2, Some((2, 0x04, 0x0B))),
        "B is standby"
    );

    // shown: the target's line and its parameters
    let show = b.tgtadm(&["--lld", "iscsi", "--mode", "target", "--op", "show"]);
    assert!(
        show.stdout
            .contains("ALUA: group 2, relative port 2, peers 1:1, non-owner state standby"),
        "{}",
        show.stdout
    );
    let params = b.tgtadm(&[
        "--lld", "iscsi", "--mode", "target", "--op", "show", "--tid", "1",
    ]);
    for want in [
        "alua_group=2",
        "alua_peers=1:1",
        "alua_non_owner_state=standby",
    ] {
        assert!(params.stdout.contains(want), "{want}: {}", params.stdout);
    }

    // moves as YAML gateways do
    move_to_b(&a, &b, &mut sa, &mut sb);
    let p = pattern(3);
    write(&mut sb, &p);
    sync(&mut sb);
    set_owner(&b, 1);
    set_owner(&a, 1);
    expect_state_changed(&mut sa, "A after taking the LUN back");
    let (st, _, got) = read(&mut sa);
    assert_eq!(st, 0);
    assert!(got == p, "A reads what B wrote");

    // refused: a target with a LUN, a clash, a bad value; nothing changes
    let r = update_target(&a, "1", "alua_group", "3");
    assert!(!r.status.success(), "alua_group changed under a LUN: {r}");
    assert!(
        r.stderr.contains("this logical unit is still active"),
        "{r}"
    );
    assert!(
        a.log().contains("set them before adding any"),
        "{}",
        a.log_tail(5)
    );
    new_open_target(&a, "2", "iqn.2026-11.test:alua-second");
    let r = update_target(&a, "2", "alua_peers", "1");
    assert!(!r.status.success(), "a peer in this gateway's group: {r}");
    assert!(
        a.log().contains("already used by this gateway"),
        "{}",
        a.log_tail(5)
    );
    let r = update_target(&a, "2", "alua_non_owner_state", "optimized");
    assert!(!r.status.success(), "a bad state: {r}");
    update_target(&a, "2", "alua-group", "7").check("_ and - alike");
    let params = a.tgtadm(&[
        "--lld", "iscsi", "--mode", "target", "--op", "show", "--tid", "2",
    ]);
    assert!(
        params.stdout.contains("alua_group=7") && params.stdout.contains("alua_relative_port=7"),
        "{}",
        params.stdout
    );
    assert_eq!(rtpg(&mut sa), both, "target 1 unchanged");
    drop(sb);
    drop(b);

    // kept by the dump: a daemon started from it reports the same groups
    drop(sa);
    let dumped = a.admin_tool(&numatgtadm_bin(), &["--dump"]);
    dumped.check("numatgtadm --dump");
    assert!(dumped.stdout.contains("alua:"), "{dumped}");
    let c = restart_from_dump(a, &dumped.stdout);
    let mut sc = ScsiSession::open(&c, "iqn.2026-11.test:alua-tgtadm-c");
    let _ = sc.command(&[0; 6], &[], 0);
    assert_eq!(rtpg(&mut sc), both, "restarted from the dump");
    assert_eq!(vpd83(&mut sc).1, 1, "relative port 1");
    let params = c.tgtadm(&[
        "--lld", "iscsi", "--mode", "target", "--op", "show", "--tid", "1",
    ]);
    assert!(
        params.stdout.contains("alua_peers=2:2"),
        "{}",
        params.stdout
    );
}
