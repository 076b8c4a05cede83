//! Multi-initiator behaviour through the public API: unit attentions per I_T nexus, SPC-2
//! RESERVE / RELEASE, persistent reservations (every PR IN / PR OUT service action, the
//! access rule of every reservation type), APTPL persistence, and a property test that
//! random PERSISTENT RESERVE OUT commands never panic and keep the state consistent.

use proptest::prelude::*;
use scsi::sense::parse_key_asc;
use scsi::{
    Action, CmdCtx, Completion, LogicalUnit, LuParams, Nexus, NexusId, Outcome, PersistRequest,
    PrOutcome, PrType, Spc2Holder, status,
};

const TARGET: &str = "iqn.2026-11.org.numatgt:t1";

fn new_lu() -> LogicalUnit {
    LogicalUnit::new(LuParams {
        lun: 0,
        block_size: 512,
        num_blocks: 2048,
        vendor_id: "NUMATGT".into(),
        product_id: "VIRTUAL-DISK".into(),
        product_rev: "0001".into(),
        serial: "abc".into(),
        naa_id: 42,
        write_cache: true,
        write_through: false,
        readonly: false,
        target_name: TARGET.into(),
        rel_port_id: 1,
        tpg: 1,
        device_type: scsi::DeviceType::Disk,
    })
}

fn nexus(i: u64) -> Nexus {
    Nexus::iscsi(
        NexusId(i),
        &format!("iqn.2026-11.test:init{i}"),
        0x23d000000 + i,
        TARGET,
        1,
    )
}

/// An LU with nexuses 1..=n added and their power-on unit attentions cleared.
fn lu_with(n: u64) -> (LogicalUnit, Vec<Nexus>) {
    let lu = new_lu();
    let ns: Vec<Nexus> = (1..=n).map(nexus).collect();
    for x in &ns {
        lu.nexus_added(x);
        assert_eq!(ua(&run(&lu, x, &TUR, &[])), (0x29, 0x00));
    }
    (lu, ns)
}

const TUR: [u8; 6] = [0; 6];
const READ10: [u8; 10] = [0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0];
const WRITE10: [u8; 10] = [0x2A, 0, 0, 0, 0, 1, 0, 0, 1, 0];
const MODE_SENSE6: [u8; 6] = [0x1A, 0, 0x3F, 0, 255, 0];
const INQUIRY: [u8; 6] = [0x12, 0, 0, 0, 96, 0];
const REPORT_LUNS: [u8; 12] = [0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
const REQUEST_SENSE: [u8; 6] = [0x03, 0, 0, 0, 252, 0];
const RESERVE6: [u8; 6] = [0x16, 0, 0, 0, 0, 0];
const RELEASE6: [u8; 6] = [0x17, 0, 0, 0, 0, 0];

fn run_outcome(lu: &LogicalUnit, n: &Nexus, cdb: &[u8], data: &[u8]) -> Outcome {
    lu.execute_nexus(
        n,
        &CmdCtx {
            cdb,
            data_out: data,
            landed: 0,
            luns: &[0],
        },
    )
}

/// The completion (for data commands: GOOD when the LU let the I/O through).
fn run(lu: &LogicalUnit, n: &Nexus, cdb: &[u8], data: &[u8]) -> Completion {
    match run_outcome(lu, n, cdb, data) {
        Outcome::Action(Action::Complete(c)) => c,
        Outcome::Action(_) => Completion::good(),
        Outcome::PersistentReserveOut(p) => p.completion,
    }
}

fn ua(c: &Completion) -> (u8, u8) {
    let (k, asc, ascq) = check(c);
    assert_eq!(k, 6, "{c:?}");
    (asc, ascq)
}

fn check(c: &Completion) -> (u8, u8, u8) {
    assert_eq!(c.status, status::CHECK_CONDITION, "{c:?}");
    parse_key_asc(&c.sense).expect("sense")
}

fn good(c: &Completion) {
    assert_eq!(c.status, status::GOOD, "{c:?}");
}

fn conflict(c: &Completion) {
    assert_eq!(c.status, status::RESERVATION_CONFLICT, "{c:?}");
}

fn prout_cdb(sa: u8, ty: u8, len: u32) -> [u8; 10] {
    let l = len.to_be_bytes();
    [0x5F, sa, ty, 0, 0, l[0], l[1], l[2], l[3], 0]
}

fn params(rk: u64, sark: u64, flags: u8) -> Vec<u8> {
    let mut p = vec![0; 24];
    p[..8].copy_from_slice(&rk.to_be_bytes());
    p[8..16].copy_from_slice(&sark.to_be_bytes());
    p[20] = flags;
    p
}

fn prout_full(
    lu: &LogicalUnit,
    n: &Nexus,
    sa: u8,
    ty: u8,
    rk: u64,
    sark: u64,
    flags: u8,
) -> Outcome {
    run_outcome(lu, n, &prout_cdb(sa, ty, 24), &params(rk, sark, flags))
}

fn prout(lu: &LogicalUnit, n: &Nexus, sa: u8, ty: u8, rk: u64, sark: u64) -> Completion {
    run(lu, n, &prout_cdb(sa, ty, 24), &params(rk, sark, 0))
}

const REGISTER: u8 = 0;
const RESERVE: u8 = 1;
const RELEASE: u8 = 2;
const CLEAR: u8 = 3;
const PREEMPT: u8 = 4;
const PREEMPT_AND_ABORT: u8 = 5;
const REGISTER_AND_IGNORE: u8 = 6;
const REGISTER_AND_MOVE: u8 = 7;

fn prin(lu: &LogicalUnit, n: &Nexus, sa: u8, alloc: u16) -> Completion {
    let a = alloc.to_be_bytes();
    run(lu, n, &[0x5E, sa, 0, 0, 0, 0, 0, a[0], a[1], 0], &[])
}

fn generation(lu: &LogicalUnit, n: &Nexus) -> u32 {
    let d = prin(lu, n, 0, 8).data;
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

fn keys(lu: &LogicalUnit, n: &Nexus) -> Vec<u64> {
    let c = prin(lu, n, 0, 4096);
    good(&c);
    c.data[8..]
        .chunks(8)
        .map(|k| u64::from_be_bytes(k.try_into().unwrap()))
        .collect()
}

/// (key, type) of the reservation, if any.
fn reservation(lu: &LogicalUnit, n: &Nexus) -> Option<(u64, u8)> {
    let c = prin(lu, n, 1, 4096);
    good(&c);
    (c.data.len() > 8).then(|| {
        (
            u64::from_be_bytes(c.data[8..16].try_into().unwrap()),
            c.data[21] & 0x0F,
        )
    })
}

// ---------------------------------------------------------------- unit attentions

#[test]
fn power_on_ua_per_nexus_and_exempt_commands() {
    let lu = new_lu();
    let (a, b) = (nexus(1), nexus(2));
    lu.nexus_added(&a);
    lu.nexus_added(&b);
    // INQUIRY and REPORT LUNS pass and keep the condition
    good(&run(&lu, &a, &INQUIRY, &[]));
    good(&run(&lu, &a, &REPORT_LUNS, &[]));
    // REQUEST SENSE reports it as data and clears it
    let rs = run(&lu, &a, &REQUEST_SENSE, &[]);
    good(&rs);
    assert_eq!(parse_key_asc(&rs.data), Some((6, 0x29, 0x00)));
    good(&run(&lu, &a, &TUR, &[]));
    let rs = run(&lu, &a, &REQUEST_SENSE, &[]);
    assert_eq!(parse_key_asc(&rs.data), Some((0, 0, 0)));
    // b still has its own
    assert_eq!(ua(&run(&lu, &b, &READ10, &[])), (0x29, 0x00));
    assert!(matches!(
        run_outcome(&lu, &b, &READ10, &[]),
        Outcome::Action(Action::Read { .. })
    ));
}

#[test]
fn legacy_execute_has_no_power_on_ua_and_no_reservations() {
    let lu = new_lu();
    let legacy = |cdb: &[u8], data: &[u8]| match lu.execute(&CmdCtx {
        cdb,
        data_out: data,
        landed: 0,
        luns: &[0],
    }) {
        Action::Complete(c) => c,
        a => panic!("{a:?}"),
    };
    good(&legacy(&TUR, &[]));
    for cdb in [
        &RESERVE6[..],
        &RELEASE6[..],
        &prout_cdb(REGISTER, 0, 24)[..],
        &[0x5E, 0, 0, 0, 0, 0, 0, 0, 8, 0][..],
    ] {
        assert_eq!(check(&legacy(cdb, &params(0, 1, 0))), (5, 0x20, 0));
    }
}

#[test]
fn resets_and_ordering() {
    let (lu, ns) = lu_with(2);
    let (a, b) = (&ns[0], &ns[1]);
    lu.capacity_changed();
    lu.luns_changed();
    lu.capacity_changed();
    assert_eq!(ua(&run(&lu, a, &TUR, &[])), (0x2A, 0x09));
    assert_eq!(ua(&run(&lu, a, &TUR, &[])), (0x3F, 0x0E));
    good(&run(&lu, a, &TUR, &[]));
    // REPORT LUNS clears REPORTED LUNS DATA HAS CHANGED
    good(&run(&lu, b, &REPORT_LUNS, &[]));
    assert_eq!(ua(&run(&lu, b, &TUR, &[])), (0x2A, 0x09));
    good(&run(&lu, b, &TUR, &[]));
    // a reset supersedes older conditions and reaches the issuer too
    lu.capacity_changed();
    lu.logical_unit_reset();
    for n in [a, b] {
        assert_eq!(ua(&run(&lu, n, &TUR, &[])), (0x29, 0x03));
        good(&run(&lu, n, &TUR, &[]));
    }
    lu.target_reset();
    lu.luns_changed();
    assert_eq!(ua(&run(&lu, a, &TUR, &[])), (0x29, 0x00));
    assert_eq!(ua(&run(&lu, a, &TUR, &[])), (0x3F, 0x0E));
}

#[test]
fn relogin_reports_nexus_loss() {
    let (lu, ns) = lu_with(1);
    lu.nexus_removed(ns[0].id);
    let again = Nexus::iscsi(NexusId(9), "IQN.2026-11.test:init1", 0x23d000001, TARGET, 1);
    lu.nexus_added(&again);
    assert_eq!(ua(&run(&lu, &again, &TUR, &[])), (0x29, 0x07));
}

#[test]
fn mode_select_tells_other_nexuses() {
    let (lu, ns) = lu_with(2);
    // MODE SELECT(6) of the caching page with WCE = 0
    let mut list = vec![0u8; 4];
    list.extend_from_slice(&[0x08, 0x12]);
    list.extend_from_slice(&[0; 18]);
    let cdb = [0x15, 0x10, 0, 0, list.len() as u8, 0];
    good(&run(&lu, &ns[0], &cdb, &list));
    assert!(!lu.write_cache_enabled());
    good(&run(&lu, &ns[0], &TUR, &[]));
    assert_eq!(ua(&run(&lu, &ns[1], &TUR, &[])), (0x2A, 0x01));
    // a LUN reset restores the defaults
    lu.logical_unit_reset();
    assert!(lu.write_cache_enabled());
}

// ---------------------------------------------------------------- SPC-2

#[test]
fn reserve6_two_initiators() {
    let (lu, ns) = lu_with(2);
    let (a, b) = (&ns[0], &ns[1]);
    good(&run(&lu, a, &RESERVE6, &[]));
    good(&run(&lu, a, &RESERVE6, &[]));
    conflict(&run(&lu, b, &RESERVE6, &[]));
    good(&run(&lu, b, &RELEASE6, &[])); // no-op
    good(&run(&lu, a, &MODE_SENSE6, &[]));
    conflict(&run(&lu, b, &MODE_SENSE6, &[]));
    conflict(&run(&lu, b, &TUR, &[]));
    conflict(&run(&lu, b, &WRITE10, &[]));
    good(&run(&lu, b, &INQUIRY, &[]));
    good(&run(&lu, b, &REPORT_LUNS, &[]));
    // PR commands conflict for everyone while an SPC-2 reservation exists
    conflict(&prin(&lu, a, 0, 100));
    conflict(&prout(&lu, a, REGISTER, 0, 0, 5));
    good(&run(&lu, a, &RELEASE6, &[]));
    good(&run(&lu, b, &[0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]));
    good(&run(&lu, b, &[0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]));
    // third-party reservations are not supported
    assert_eq!(check(&run(&lu, a, &[0x16, 0x10, 0, 0, 0, 0], &[])).1, 0x24);
}

#[test]
fn reserve6_released_by_nexus_loss_and_resets() {
    let (lu, ns) = lu_with(2);
    let (a, b) = (&ns[0], &ns[1]);
    good(&run(&lu, a, &RESERVE6, &[]));
    lu.nexus_removed(a.id);
    good(&run(&lu, b, &RESERVE6, &[]));
    lu.logical_unit_reset();
    assert_eq!(ua(&run(&lu, b, &TUR, &[])), (0x29, 0x03));
    lu.nexus_added(a);
    assert_eq!(ua(&run(&lu, a, &TUR, &[])), (0x29, 0x07));
    good(&run(&lu, a, &RESERVE6, &[]));
    lu.target_reset();
    assert_eq!(ua(&run(&lu, b, &TUR, &[])), (0x29, 0x00));
    good(&run(&lu, b, &RESERVE6, &[]));
}

#[test]
fn reserve_release_conflict_with_registrations() {
    let (lu, ns) = lu_with(2);
    good(&prout(&lu, &ns[0], REGISTER, 0, 0, 0xA));
    conflict(&run(&lu, &ns[0], &RESERVE6, &[]));
    conflict(&run(&lu, &ns[1], &RELEASE6, &[]));
    good(&prout(&lu, &ns[0], REGISTER, 0, 0xA, 0));
    good(&run(&lu, &ns[1], &RESERVE6, &[]));
}

// ---------------------------------------------------------------- PR OUT

#[test]
fn register_service_actions() {
    let (lu, ns) = lu_with(2);
    let (a, b) = (&ns[0], &ns[1]);
    assert_eq!(generation(&lu, a), 0);
    // unregistered with a nonzero key: conflict; SARK 0: nothing happens
    conflict(&prout(&lu, a, REGISTER, 0, 5, 6));
    good(&prout(&lu, a, REGISTER, 0, 0, 0));
    assert_eq!(generation(&lu, a), 0);
    good(&prout(&lu, a, REGISTER, 0, 0, 0xA));
    assert_eq!(generation(&lu, a), 1);
    // registered: wrong key conflicts, right key changes it
    conflict(&prout(&lu, a, REGISTER, 0, 0xB, 0xC));
    good(&prout(&lu, a, REGISTER, 0, 0xA, 0xC));
    good(&prout(&lu, b, REGISTER_AND_IGNORE, 0, 0x77, 0xB));
    good(&prout(&lu, b, REGISTER_AND_IGNORE, 0, 0x99, 0xD));
    assert_eq!(keys(&lu, a), vec![0xC, 0xD]);
    assert_eq!(generation(&lu, a), 4);
    // unregister
    good(&prout(&lu, b, REGISTER, 0, 0xD, 0));
    assert_eq!(keys(&lu, a), vec![0xC]);
    // non-registrants may not RESERVE, RELEASE, CLEAR, PREEMPT
    for sa in [
        RESERVE,
        RELEASE,
        CLEAR,
        PREEMPT,
        PREEMPT_AND_ABORT,
        REGISTER_AND_MOVE,
    ] {
        conflict(&prout(&lu, b, sa, 1, 0, 0xC));
    }
    // registrant with the wrong key neither
    conflict(&prout(&lu, a, RESERVE, 1, 0xD, 0));
}

#[test]
fn parameter_list_checks() {
    let (lu, ns) = lu_with(1);
    let a = &ns[0];
    // SPEC_I_PT is not supported
    assert_eq!(
        check(&run(
            &lu,
            a,
            &prout_cdb(REGISTER, 0, 24),
            &params(0, 1, 0x08)
        )),
        (5, 0x26, 0)
    );
    // ALL_TG_PT on a single port: that port's nexus alone
    good(&run(
        &lu,
        a,
        &prout_cdb(REGISTER, 0, 24),
        &params(0, 1, 0x04),
    ));
    assert_eq!(keys(&lu, a), vec![1]);
    good(&prout(&lu, a, REGISTER, 0, 1, 0));
    // length must be 24
    assert_eq!(
        check(&run(&lu, a, &prout_cdb(REGISTER, 0, 23), &params(0, 1, 0))),
        (5, 0x1A, 0)
    );
    assert_eq!(
        check(&run(&lu, a, &prout_cdb(REGISTER, 0, 24), &[0; 10])),
        (5, 0x1A, 0)
    );
    let mut long = params(0, 1, 0);
    long.extend_from_slice(&[0; 4]);
    assert_eq!(
        check(&run(&lu, a, &prout_cdb(REGISTER, 0, 28), &long)),
        (5, 0x1A, 0)
    );
    good(&prout(&lu, a, REGISTER, 0, 0, 1));
    // scope and type
    assert_eq!(check(&prout(&lu, a, RESERVE, 0x11, 1, 0)), (5, 0x24, 0));
    assert_eq!(check(&prout(&lu, a, RESERVE, 2, 1, 0)), (5, 0x24, 0));
    // service actions past 7 and PR IN past 3
    assert_eq!(check(&prout(&lu, a, 8, 1, 1, 0)), (5, 0x24, 0));
    for sa in 4..0x20 {
        assert_eq!(check(&prin(&lu, a, sa, 100)), (5, 0x24, 0), "sa {sa}");
    }
}

/// Who may read and write under each type (SPC-4 table 53 / SBC-3 table 13): the holder,
/// another registrant, a non-registrant.
#[test]
fn access_rules_of_every_type() {
    // (type, registrant read, registrant write, other read, other write)
    let table: &[(PrType, bool, bool, bool, bool)] = &[
        (PrType::WriteExclusive, true, false, true, false),
        (PrType::ExclusiveAccess, false, false, false, false),
        (
            PrType::WriteExclusiveRegistrantsOnly,
            true,
            true,
            true,
            false,
        ),
        (
            PrType::ExclusiveAccessRegistrantsOnly,
            true,
            true,
            false,
            false,
        ),
        (
            PrType::WriteExclusiveAllRegistrants,
            true,
            true,
            true,
            false,
        ),
        (
            PrType::ExclusiveAccessAllRegistrants,
            true,
            true,
            false,
            false,
        ),
    ];
    for &(ty, reg_r, reg_w, oth_r, oth_w) in table {
        let (lu, ns) = lu_with(3);
        let (h, r, o) = (&ns[0], &ns[1], &ns[2]);
        good(&prout(&lu, h, REGISTER, 0, 0, 0x1));
        good(&prout(&lu, r, REGISTER, 0, 0, 0x2));
        good(&prout(&lu, h, RESERVE, ty.code(), 0x1, 0));
        let expect_key = if ty.all_registrants() { 0 } else { 1 };
        assert_eq!(reservation(&lu, o), Some((expect_key, ty.code())));
        let allowed = |n: &Nexus, cdb: &[u8], data: &[u8]| {
            let c = run(&lu, n, cdb, data);
            match c.status {
                status::GOOD => true,
                status::RESERVATION_CONFLICT => false,
                _ => panic!("{c:?}"),
            }
        };
        let w = vec![0u8; 512];
        assert!(
            allowed(h, &READ10, &[]) && allowed(h, &WRITE10, &w),
            "{ty:?}"
        );
        assert_eq!(allowed(r, &READ10, &[]), reg_r, "{ty:?} registrant read");
        assert_eq!(allowed(r, &WRITE10, &w), reg_w, "{ty:?} registrant write");
        assert_eq!(allowed(o, &READ10, &[]), oth_r, "{ty:?} other read");
        assert_eq!(allowed(o, &WRITE10, &w), oth_w, "{ty:?} other write");
        assert_eq!(
            allowed(o, &MODE_SENSE6, &[]),
            oth_r,
            "{ty:?} other mode sense"
        );
        // always allowed
        for n in [r, o] {
            for cdb in [
                &TUR[..],
                &INQUIRY[..],
                &REPORT_LUNS[..],
                &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
            ] {
                assert!(allowed(n, cdb, &[]), "{ty:?} {cdb:02x?}");
            }
            good(&prin(&lu, n, 0, 100));
        }
        // unregistering the holder releases (all-registrants: once the last one goes)
        good(&prout(&lu, h, REGISTER, 0, 0x1, 0));
        if ty.all_registrants() {
            assert_eq!(reservation(&lu, o), Some((0, ty.code())));
            good(&prout(&lu, r, REGISTER, 0, 0x2, 0));
        }
        assert_eq!(reservation(&lu, o), None, "{ty:?}");
        assert!(allowed(o, &WRITE10, &w));
        if ty.registrants_only() {
            assert_eq!(ua(&run(&lu, r, &TUR, &[])), (0x2A, 0x04), "{ty:?}");
        }
    }
}

#[test]
fn reserve_and_release_rules() {
    let (lu, ns) = lu_with(3);
    let (a, b, c) = (&ns[0], &ns[1], &ns[2]);
    good(&prout(&lu, a, REGISTER, 0, 0, 0xA));
    good(&prout(&lu, b, REGISTER, 0, 0, 0xB));
    good(&prout(&lu, c, REGISTER, 0, 0, 0xC));
    let g0 = generation(&lu, a);
    good(&prout(&lu, a, RESERVE, 6, 0xA, 0));
    good(&prout(&lu, a, RESERVE, 6, 0xA, 0)); // same type again
    conflict(&prout(&lu, a, RESERVE, 1, 0xA, 0)); // holder, other type
    conflict(&prout(&lu, b, RESERVE, 6, 0xB, 0));
    assert_eq!(generation(&lu, a), g0, "RESERVE does not bump PRgeneration");
    good(&prout(&lu, b, RELEASE, 6, 0xB, 0)); // not the holder: nothing
    assert_eq!(reservation(&lu, b), Some((0xA, 6)));
    assert_eq!(check(&prout(&lu, a, RELEASE, 3, 0xA, 0)), (5, 0x26, 0x04));
    good(&prout(&lu, a, RELEASE, 6, 0xA, 0));
    assert_eq!(reservation(&lu, a), None);
    for n in [b, c] {
        assert_eq!(ua(&run(&lu, n, &TUR, &[])), (0x2A, 0x04));
    }
    good(&run(&lu, a, &TUR, &[]));
    good(&prout(&lu, a, RELEASE, 6, 0xA, 0)); // no reservation: GOOD
    // WE release: no unit attention
    good(&prout(&lu, a, RESERVE, 1, 0xA, 0));
    good(&prout(&lu, a, RELEASE, 1, 0xA, 0));
    good(&run(&lu, b, &TUR, &[]));
}

#[test]
fn clear() {
    let (lu, ns) = lu_with(3);
    let (a, b, c) = (&ns[0], &ns[1], &ns[2]);
    good(&prout(&lu, a, REGISTER, 0, 0, 0xA));
    good(&prout(&lu, b, REGISTER, 0, 0, 0xB));
    good(&prout(&lu, b, RESERVE, 3, 0xB, 0));
    conflict(&prout(&lu, c, CLEAR, 0, 0, 0));
    let g0 = generation(&lu, a);
    good(&prout(&lu, a, CLEAR, 0, 0xA, 0));
    assert_eq!(generation(&lu, a), g0 + 1);
    assert!(keys(&lu, a).is_empty());
    assert_eq!(reservation(&lu, a), None);
    assert_eq!(ua(&run(&lu, b, &TUR, &[])), (0x2A, 0x03));
    good(&run(&lu, a, &TUR, &[]));
    good(&run(&lu, c, &TUR, &[]));
}

#[test]
fn preempt_variants() {
    let (lu, ns) = lu_with(3);
    let (a, b, c) = (&ns[0], &ns[1], &ns[2]);
    good(&prout(&lu, a, REGISTER, 0, 0, 0xA));
    good(&prout(&lu, b, REGISTER, 0, 0, 0xB));
    good(&prout(&lu, c, REGISTER, 0, 0, 0xC));
    // no reservation: remove registrations only
    assert_eq!(check(&prout(&lu, a, PREEMPT, 1, 0xA, 0)), (5, 0x26, 0));
    conflict(&prout(&lu, a, PREEMPT, 1, 0xA, 0x99));
    good(&prout(&lu, a, PREEMPT, 1, 0xA, 0xC));
    assert_eq!(keys(&lu, a), vec![0xA, 0xB]);
    assert_eq!(ua(&run(&lu, c, &TUR, &[])), (0x2A, 0x05));
    conflict(&run(&lu, c, &prout_cdb(RESERVE, 1, 24), &params(0xC, 0, 0)));
    // preempt the holder: the reservation moves, with the new type
    good(&prout(&lu, b, RESERVE, 1, 0xB, 0));
    good(&prout(&lu, c, REGISTER, 0, 0, 0xC));
    let out = prout_full(&lu, a, PREEMPT_AND_ABORT, 3, 0xA, 0xB, 0);
    let Outcome::PersistentReserveOut(PrOutcome {
        abort,
        completion,
        persist,
        ..
    }) = out
    else {
        panic!("{out:?}")
    };
    good(&completion);
    assert_eq!(abort, vec![b.id]);
    assert_eq!(persist, None);
    assert_eq!(reservation(&lu, a), Some((0xA, 3)));
    assert_eq!(ua(&run(&lu, b, &TUR, &[])), (0x2A, 0x05));
    // type changed: the remaining registrant hears the reservation was released
    assert_eq!(ua(&run(&lu, c, &TUR, &[])), (0x2A, 0x04));
    // all-registrants with SARK 0: everyone else is preempted
    good(&prout(&lu, a, RELEASE, 3, 0xA, 0));
    good(&prout(&lu, b, REGISTER, 0, 0, 0xB));
    good(&prout(&lu, b, RESERVE, 8, 0xB, 0));
    good(&prout(&lu, a, PREEMPT, 1, 0xA, 0));
    assert_eq!(keys(&lu, a), vec![0xA]);
    assert_eq!(reservation(&lu, a), Some((0xA, 1)));
}

#[test]
fn register_and_move() {
    let (lu, ns) = lu_with(2);
    let (a, b) = (&ns[0], &ns[1]);
    good(&prout(&lu, a, REGISTER, 0, 0, 0xA));
    let tid = |name: &str| {
        let mut t = vec![0x45, 0, 0, 0];
        t.extend_from_slice(name.as_bytes());
        t.push(0);
        while t.len() % 4 != 0 {
            t.push(0);
        }
        let l = (t.len() - 4) as u16;
        t[2..4].copy_from_slice(&l.to_be_bytes());
        t
    };
    let list = |rk: u64, sark: u64, unreg: bool, port: u16, t: &[u8]| {
        let mut p = vec![0; 24];
        p[..8].copy_from_slice(&rk.to_be_bytes());
        p[8..16].copy_from_slice(&sark.to_be_bytes());
        p[17] = if unreg { 2 } else { 0 };
        p[18..20].copy_from_slice(&port.to_be_bytes());
        p[20..24].copy_from_slice(&(t.len() as u32).to_be_bytes());
        p.extend_from_slice(t);
        p
    };
    let t = tid(b.initiator_port_name());
    let mv = |p: &[u8]| run(&lu, a, &prout_cdb(REGISTER_AND_MOVE, 1, p.len() as u32), p);
    // no reservation yet
    conflict(&mv(&list(0xA, 0xB, false, 1, &t)));
    good(&prout(&lu, a, RESERVE, 1, 0xA, 0));
    assert_eq!(check(&mv(&list(0xA, 0, false, 1, &t))), (5, 0x26, 0));
    assert_eq!(check(&mv(&list(0xA, 0xB, false, 2, &t))), (5, 0x26, 0));
    assert_eq!(
        check(&mv(&list(
            0xA,
            0xB,
            false,
            1,
            &tid(a.initiator_port_name())
        ))),
        (5, 0x26, 0)
    );
    let mut short = list(0xA, 0xB, false, 1, &t);
    short.truncate(30);
    assert_eq!(check(&mv(&short)), (5, 0x1A, 0));
    good(&mv(&list(0xA, 0xB, true, 1, &t)));
    assert_eq!(keys(&lu, a), vec![0xB]);
    assert_eq!(reservation(&lu, a), Some((0xB, 1)));
    conflict(&run(&lu, a, &WRITE10, &[0; 512]));
    good(&run(&lu, b, &WRITE10, &[0; 512]));
}

// ---------------------------------------------------------------- PR IN

#[test]
fn prin_data() {
    let (lu, ns) = lu_with(2);
    let a = &ns[0];
    good(&prout(&lu, a, REGISTER, 0, 0, 0x1122334455667788));
    good(&prout(&lu, &ns[1], REGISTER, 0, 0, 0x99));
    // truncated READ KEYS keeps the full ADDITIONAL LENGTH
    let c = prin(&lu, a, 0, 12);
    assert_eq!(c.data.len(), 12);
    assert_eq!(&c.data[4..8], &[0, 0, 0, 16]);
    let caps = prin(&lu, a, 2, 8).data;
    assert_eq!(caps, vec![0, 8, 0x05, 0x90, 0xEA, 0x01, 0, 0]);
    let full = prin(&lu, a, 3, 4096).data;
    let add = u32::from_be_bytes(full[4..8].try_into().unwrap()) as usize;
    assert_eq!(full.len(), 8 + add);
    let tid_len = u32::from_be_bytes(full[28..32].try_into().unwrap()) as usize;
    let name = &full[36..36 + a.initiator_port_name().len()];
    assert_eq!(name, a.initiator_port_name().as_bytes());
    assert_eq!(full.len(), 8 + 2 * 24 + tid_len + (add - 48 - tid_len));
}

#[test]
fn report_supported_opcodes_lists_reservation_commands() {
    let lu = new_lu();
    let n = nexus(1);
    let one = |op: u8, sa: u16, opts: u8| {
        let s = sa.to_be_bytes();
        run(
            &lu,
            &n,
            &[0xA3, 0x0C, opts, op, s[0], s[1], 0, 0, 1, 0, 0, 0],
            &[],
        )
    };
    for sa in 0..8 {
        assert_eq!(one(0x5F, sa, 2).data[1] & 7, 3, "PR OUT sa {sa}");
    }
    for sa in 0..4 {
        assert_eq!(one(0x5E, sa, 2).data[1] & 7, 3, "PR IN sa {sa}");
    }
    assert_eq!(one(0x5E, 4, 2).data[1] & 7, 1);
    for op in [0x16, 0x17, 0x56, 0x57] {
        assert_eq!(one(op, 0, 1).data[1] & 7, 3, "{op:02x}");
    }
}

// ---------------------------------------------------------------- APTPL

#[test]
fn aptpl_persist_and_restore() {
    let (lu, ns) = lu_with(2);
    let (a, b) = (&ns[0], &ns[1]);
    // without APTPL nothing is persisted
    let out = prout_full(&lu, a, REGISTER, 0, 0, 0xA, 0);
    assert!(matches!(out, Outcome::Action(_)), "{out:?}");
    let out = prout_full(&lu, b, REGISTER, 0, 0, 0xB, 0x01);
    let Outcome::PersistentReserveOut(p1) = out else {
        panic!("{out:?}")
    };
    good(&p1.completion);
    let req1 = p1.persist.expect("persist request");
    assert_eq!(prin(&lu, a, 2, 8).data[3] & 1, 1, "PTPL_A");
    let Outcome::PersistentReserveOut(p2) = prout_full(&lu, b, RESERVE, 5, 0xB, 0, 0) else {
        panic!()
    };
    let req2 = p2.persist.expect("RESERVE is persisted too");
    assert!(req2.seq > req1.seq);
    // a new LU (restart) restores the state
    let lu2 = new_lu();
    lu2.restore_pr_state(&req2.bytes).expect("valid state");
    let c = nexus(1);
    lu2.nexus_added(&c);
    run(&lu2, &c, &TUR, &[]);
    assert_eq!(keys(&lu2, &c), vec![0xA, 0xB]);
    assert_eq!(reservation(&lu2, &c), Some((0xB, 5)));
    assert_eq!(generation(&lu2, &c), generation(&lu, a));
    assert_eq!(lu2.pr_state_bytes(), req2);
    // registrant a may write, b holds; non-registrant nexus 3 may not
    let n3 = nexus(3);
    lu2.nexus_added(&n3);
    run(&lu2, &n3, &TUR, &[]);
    conflict(&run(&lu2, &n3, &WRITE10, &[0; 512]));
    // APTPL off again: the state to store no longer survives a restart
    let Outcome::PersistentReserveOut(p3) = prout_full(&lu, a, REGISTER, 0, 0xA, 0xA, 0) else {
        panic!()
    };
    let req3 = p3.persist.expect("turning APTPL off is persisted");
    let lu3 = new_lu();
    lu3.restore_pr_state(&req3.bytes).unwrap();
    run(&lu3, &c, &TUR, &[]);
    assert!(keys(&lu3, &c).is_empty());
    // and further changes need no persistence
    assert!(matches!(
        prout_full(&lu, a, REGISTER, 0, 0xA, 0xAA, 0),
        Outcome::Action(_)
    ));
}

#[test]
fn restore_rejects_bad_bytes() {
    let (lu, ns) = lu_with(1);
    let Outcome::PersistentReserveOut(p) = prout_full(&lu, &ns[0], REGISTER, 0, 0, 0xA, 1) else {
        panic!()
    };
    let bytes = p.persist.unwrap().bytes;
    let fresh = lu_with(0).0;
    for n in [0, 3, 10, bytes.len() - 1] {
        assert!(fresh.restore_pr_state(&bytes[..n]).is_err(), "{n}");
    }
    let mut bad = bytes.clone();
    bad[12] ^= 1;
    assert!(fresh.restore_pr_state(&bad).is_err());
    assert!(
        fresh
            .restore_pr_state(b"garbage garbage garbage garbage")
            .is_err()
    );
    let e = fresh.restore_pr_state(&[]).unwrap_err();
    assert!(!e.to_string().is_empty());
    // nothing was restored
    let n = nexus(1);
    assert!(keys(&fresh, &n).is_empty());
}

// ---------------------------------------------------------------- property tests

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random PR OUT CDBs and parameter lists never panic and always complete with GOOD,
    /// RESERVATION CONFLICT or CHECK CONDITION.
    #[test]
    fn random_prout_never_panics(
        ops in proptest::collection::vec(
            (0u64..3, 0u8..10, any::<u8>(), 0u32..64, proptest::collection::vec(any::<u8>(), 0..64), 0u64..4, 0u64..4, any::<u8>()),
            1..24,
        )
    ) {
        let (lu, ns) = lu_with(3);
        for (who, sa, ty, len, raw, rk, sark, flags) in ops {
            let n = &ns[who as usize];
            // half structured (plausible keys), half raw bytes
            let data = if raw.len() % 2 == 0 { params(rk, sark, flags & 0x0F) } else { raw };
            let c = run(&lu, n, &prout_cdb(sa, ty, if len == 0 { 24 } else { len }), &data);
            prop_assert!(matches!(c.status, status::GOOD | status::RESERVATION_CONFLICT | status::CHECK_CONDITION));
            // PR IN stays well-formed
            for sa in 0..4 {
                let d = prin(&lu, n, sa, 4096);
                if d.status == status::GOOD && sa != 2 {
                    let add = u32::from_be_bytes(d.data[4..8].try_into().unwrap()) as usize;
                    prop_assert_eq!(d.data.len(), 8 + add);
                }
            }
            // a reservation always has a registered holder
            if let Some((key, _)) = reservation(&lu, n) {
                prop_assert!(key == 0 || keys(&lu, n).contains(&key));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random CDBs from three nexuses while registrations, a persistent or an SPC-2
    /// reservation and unit attentions exist: never a panic, only GOOD / CHECK CONDITION
    /// (with parseable sense) / RESERVATION CONFLICT or an I/O action.
    #[test]
    fn random_commands_under_reservations(
        setup in 0u8..3,
        cmds in proptest::collection::vec(
            (0u64..3, proptest::collection::vec(any::<u8>(), 0..17), proptest::collection::vec(any::<u8>(), 0..40)),
            1..32,
        )
    ) {
        let (lu, ns) = lu_with(3);
        match setup {
            0 => {
                run(&lu, &ns[0], &prout_cdb(REGISTER, 0, 24), &params(0, 1, 0));
                run(&lu, &ns[1], &prout_cdb(REGISTER, 0, 24), &params(0, 2, 0));
                run(&lu, &ns[0], &prout_cdb(RESERVE, 3, 24), &params(1, 0, 0));
            }
            1 => {
                run(&lu, &ns[2], &RESERVE6, &[]);
            }
            _ => lu.luns_changed(),
        }
        for (who, mut cdb, data) in cmds {
            if let Some(op) = cdb.first_mut() {
                // bias towards implemented opcodes
                const OPS: [u8; 12] = [0x00, 0x03, 0x12, 0x16, 0x17, 0x1A, 0x28, 0x2A, 0x56, 0x5E, 0x5F, 0xA0];
                if *op & 1 == 0 {
                    *op = OPS[usize::from(*op >> 1) % OPS.len()];
                }
            }
            match run_outcome(&lu, &ns[who as usize], &cdb, &data) {
                Outcome::Action(Action::Complete(c)) | Outcome::PersistentReserveOut(PrOutcome { completion: c, .. }) => {
                    prop_assert!(matches!(c.status, status::GOOD | status::CHECK_CONDITION | status::RESERVATION_CONFLICT));
                    if c.status == status::CHECK_CONDITION {
                        prop_assert!(parse_key_asc(&c.sense).is_some());
                    }
                }
                Outcome::Action(_) => {}
            }
        }
    }
}

// ---------------------------------------------------------------- shared by gateways

/// A nexus of initiator `i` through the gateway with relative target port `rp`.
fn nexus_at(i: u64, id: u64, rp: u16) -> Nexus {
    let n = Nexus::iscsi(
        NexusId(id),
        &format!("iqn.2026-11.test:init{i}"),
        0x23d000000 + i,
        TARGET,
        1,
    );
    n.at_relative_port(rp)
}

/// Runs a PR OUT on `from` (a gateway) and hands its stored state and its effects on other
/// nexuses to `to` (the other gateway), as the server does through the cluster.
fn shared_prout(
    from: &LogicalUnit,
    to: &LogicalUnit,
    n: &Nexus,
    sa: u8,
    ty: u8,
    rk: u64,
    sark: u64,
) -> PrOutcome {
    let out = prout_full(from, n, sa, ty, rk, sark, 0);
    let Outcome::PersistentReserveOut(p) = out else {
        panic!("a shared LU reports every change: {out:?}")
    };
    let req = p.persist.clone().expect("shared: stored without APTPL");
    to.adopt_pr_state(&req.bytes).expect("valid state");
    p
}

/// One logical unit's copies on gateways A (relative port 1) and B (port 2), sharing
/// reservations: initiator 1 through A (`x_a`) and through B (`x_b`), two nexuses;
/// initiator 2 through B only (`y_b`); their power-on attentions cleared.
fn two_gateways() -> (LogicalUnit, LogicalUnit, Nexus, Nexus, Nexus) {
    let (a, b) = (new_lu(), new_lu());
    a.set_shared_pr(true);
    b.set_shared_pr(true);
    let (x_a, x_b, y_b) = (nexus_at(1, 1, 1), nexus_at(1, 2, 2), nexus_at(2, 3, 2));
    a.nexus_added(&x_a);
    b.nexus_added(&x_b);
    b.nexus_added(&y_b);
    for (lu, n) in [(&a, &x_a), (&b, &x_b), (&b, &y_b)] {
        run(lu, n, &TUR, &[]);
    }
    (a, b, x_a, x_b, y_b)
}

#[test]
fn two_gateways_share_reservations_and_tell_each_other() {
    let (a, b, x_a, x_b, y_b) = two_gateways();
    // x registers through A and takes WRITE EXCLUSIVE - REGISTRANTS ONLY
    let p = shared_prout(&a, &b, &x_a, REGISTER, 0, 0, 0xA);
    good(&p.completion);
    let p = shared_prout(&a, &b, &x_a, RESERVE, 5, 0xA, 0);
    good(&p.completion);
    assert_eq!(keys(&b, &y_b), vec![0xA], "B sees A's registration");
    assert_eq!(reservation(&b, &y_b), Some((0xA, 5)));
    assert_eq!(generation(&b, &y_b), generation(&a, &x_a));
    // READ FULL STATUS on B names the port the registration came through (A's, 1)
    let full = prin(&b, &y_b, 3, 4096).data;
    assert_eq!(u16::from_be_bytes([full[8 + 18], full[8 + 19]]), 1);
    // through B neither y nor x itself (a different nexus, not registered) may write
    conflict(&run(&b, &y_b, &WRITE10, &[0; 512]));
    conflict(&run(&b, &x_b, &WRITE10, &[0; 512]));
    good(&run(&a, &x_a, &WRITE10, &[0; 512]));
    // y registers through B; A learns it; x preempts and aborts y from A
    let p = shared_prout(&b, &a, &y_b, REGISTER, 0, 0, 0xB);
    assert!(p.peer_events.len() > 4);
    assert_eq!(keys(&a, &x_a), vec![0xA, 0xB]);
    let p = shared_prout(&a, &b, &x_a, PREEMPT_AND_ABORT, 5, 0xA, 0xB);
    good(&p.completion);
    assert!(p.abort.is_empty(), "y has no nexus on A");
    let applied = b.apply_peer_pr_events(&p.peer_events).expect("events");
    assert_eq!(
        applied.abort,
        vec![NexusId(3)],
        "y's nexus on B has its tasks aborted"
    );
    assert!(!applied.reset);
    assert_eq!(ua(&run(&b, &y_b, &TUR, &[])), (0x2A, 0x05));
    assert_eq!(keys(&b, &y_b), vec![0xA]);
    // a LOGICAL UNIT RESET through A: B's nexuses get the reset's unit attention, the
    // reservations stay
    let applied = b
        .apply_peer_pr_events(&LogicalUnit::peer_reset_event(false))
        .expect("reset event");
    assert!(applied.reset && applied.abort.is_empty());
    assert_eq!(ua(&run(&b, &y_b, &TUR, &[])), (0x29, 0x03));
    assert_eq!(ua(&run(&b, &x_b, &TUR, &[])), (0x29, 0x03));
    assert_eq!(keys(&b, &y_b), vec![0xA]);
    // an older state never replaces a newer one
    let newest = b.pr_state_bytes();
    let old = {
        let lu = new_lu();
        lu.set_shared_pr(true);
        let n = nexus_at(9, 9, 1);
        lu.nexus_added(&n);
        run(&lu, &n, &TUR, &[]);
        let Outcome::PersistentReserveOut(p) = prout_full(&lu, &n, REGISTER, 0, 0, 0x9, 0) else {
            panic!()
        };
        p.persist.expect("stored").bytes
    };
    b.adopt_pr_state(&old).expect("valid");
    assert_eq!(b.pr_state_bytes(), newest);
    assert!(b.adopt_pr_state(b"NTPR junk").is_err());
    assert!(b.apply_peer_pr_events(b"garbage").is_err());
}

/// A shared logical unit's RESERVE / RELEASE: the change is stored like a PR OUT's;
/// another gateway that took the state refuses the other nexuses; the releases that nexus
/// loss, resets and a restarted gateway make come out as states to store.
#[test]
fn two_gateways_share_the_spc2_reservation() {
    let (a, b, x_a, x_b, y_b) = two_gateways();
    let reserve = |lu: &LogicalUnit, n: &Nexus| -> PersistRequest {
        let out = run_outcome(lu, n, &RESERVE6, &[]);
        let Outcome::PersistentReserveOut(p) = out else {
            panic!("a shared LU stores a RESERVE: {out:?}")
        };
        good(&p.completion);
        p.persist.expect("stored")
    };
    let req = reserve(&a, &x_a);
    let state = req.bytes;
    assert!(a.spc2_held_by(&x_a) && !a.spc2_held_by(&x_b));
    // a second RESERVE by the holder changes nothing: nothing to store
    assert!(matches!(
        run_outcome(&a, &x_a, &RESERVE6, &[]),
        Outcome::Action(Action::Complete(_))
    ));
    b.adopt_pr_state(&state).expect("valid");
    // through B, the same initiator is another nexus: refused, as is y
    conflict(&run(&b, &x_b, &WRITE10, &[0; 512]));
    conflict(&run(&b, &y_b, &RESERVE6, &[]));
    conflict(&run(
        &b,
        &y_b,
        &prout_cdb(REGISTER, 0, 24),
        &params(0, 7, 0),
    ));
    good(&run(&b, &y_b, &INQUIRY, &[]));
    // RELEASE by a nexus that does not hold it: GOOD, nothing stored
    good(&run(&b, &y_b, &RELEASE6, &[]));
    assert!(b.spc2_held_by(&x_a));
    // x's nexus on A is lost: A releases, and the state without it is what to store
    assert!(a.nexus_removed(x_a.id));
    let after = a.pr_state_bytes().bytes;
    let stored = b
        .release_spc2_in(&state, Spc2Holder::Nexus(&x_a))
        .expect("valid")
        .expect("x held it");
    assert!(!b.spc2_held_by(&x_a));
    assert_eq!(
        stored.seq,
        req.seq + 1,
        "the cluster's copy moves on by one"
    );
    assert_ne!(stored.bytes, after);
    good(&run(&b, &y_b, &WRITE10, &[0; 512]));
    // y reserves through B; another nexus's loss releases nothing
    let state = reserve(&b, &y_b).bytes;
    assert_eq!(b.release_spc2_in(&state, Spc2Holder::Nexus(&x_b)), Ok(None));
    assert!(
        b.spc2_held_by(&y_b),
        "the copy is the cluster's state again"
    );
    // a restarted gateway A (port 1) releases what went through its port only
    assert_eq!(
        b.release_spc2_in(&state, Spc2Holder::ThroughPort(1)),
        Ok(None)
    );
    assert!(
        b.release_spc2_in(&state, Spc2Holder::ThroughPort(2))
            .expect("valid")
            .is_some()
    );
    // a reset releases whoever holds it
    assert!(
        a.release_spc2_in(&state, Spc2Holder::Any)
            .expect("valid")
            .is_some()
    );
    assert!(b.release_spc2_in(b"junk", Spc2Holder::Any).is_err());
    // y's RELEASE through B is stored too
    b.set_pr_state(&state).expect("valid");
    let out = run_outcome(&b, &y_b, &RELEASE6, &[]);
    let Outcome::PersistentReserveOut(p) = out else {
        panic!("a shared LU stores a RELEASE: {out:?}")
    };
    good(&p.completion);
    assert!(!b.spc2_held_by(&y_b));
}

/// A local logical unit: RESERVE and RELEASE store nothing; a restored APTPL state never
/// brings an SPC-2 reservation back.
#[test]
fn local_spc2_reservations_store_nothing_and_never_survive_a_restart() {
    let lu = new_lu();
    let x = nexus_at(1, 1, 0);
    lu.nexus_added(&x);
    run(&lu, &x, &TUR, &[]);
    assert!(matches!(
        run_outcome(&lu, &x, &RESERVE6, &[]),
        Outcome::Action(Action::Complete(_))
    ));
    assert!(lu.spc2_held_by(&x));
    let saved = lu.pr_state_bytes().bytes;
    let again = new_lu();
    again.restore_pr_state(&saved).expect("valid");
    assert!(!again.spc2_held_by(&x));
}

#[test]
fn version_1_state_files_still_restore() {
    // a state written before relative ports were stored: version 1, one registration of
    // initiator 1 (with APTPL), made by hand
    let mut v1 = Vec::new();
    v1.extend_from_slice(b"NTPR");
    v1.extend_from_slice(&1u16.to_be_bytes());
    v1.extend_from_slice(&1u16.to_be_bytes()); // APTPL
    v1.extend_from_slice(&3u32.to_be_bytes()); // generation
    v1.extend_from_slice(&4u64.to_be_bytes()); // seq
    v1.extend_from_slice(&1u32.to_be_bytes());
    v1.extend_from_slice(&0x77u64.to_be_bytes());
    let n = nexus(1);
    for s in [n.initiator_port_name(), n.target_port_name()] {
        v1.extend_from_slice(&(s.len() as u16).to_be_bytes());
        v1.extend_from_slice(s.as_bytes());
    }
    let crc = !v1.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
        c
    });
    v1.extend_from_slice(&crc.to_be_bytes());
    let lu = new_lu();
    lu.restore_pr_state(&v1).expect("version 1 is read");
    lu.nexus_added(&n);
    run(&lu, &n, &TUR, &[]);
    assert_eq!(keys(&lu, &n), vec![0x77]);
    assert_eq!(generation(&lu, &n), 3);
}

#[test]
fn a_stale_shared_copy_admits_no_media_access() {
    let (lu, ns) = lu_with(1);
    lu.set_shared_pr(true);
    let n = &ns[0];
    lu.set_pr_unknown(true);
    for cdb in [&READ10[..], &WRITE10[..], &MODE_SENSE6[..]] {
        let data: &[u8] = if cdb[0] == 0x2A { &[0; 512] } else { &[] };
        assert_eq!(
            check(&run(&lu, n, cdb, data)),
            (0x02, 0x04, 0x0A),
            "{cdb:02x?} waits"
        );
    }
    assert_eq!(
        check(&prin(&lu, n, 0, 8)),
        (0x02, 0x04, 0x0A),
        "no stale keys reported"
    );
    good(&run(&lu, n, &INQUIRY, &[]));
    good(&run(&lu, n, &TUR, &[]));
    lu.set_pr_unknown(false);
    good(&prin(&lu, n, 0, 8));
    let c = run(&lu, n, &WRITE10, &[0; 512]);
    assert_eq!(c.status, status::GOOD, "{c:?}");
}

/// A nexus of initiator `i` through gateway `group` (its TPGT and relative port), as the
/// server makes them for a target several gateways serve.
fn nexus_through(i: u64, id: u64, group: u16) -> Nexus {
    Nexus::iscsi(
        NexusId(id),
        &format!("iqn.2026-11.test:init{i}"),
        0x23d000000 + i,
        TARGET,
        group,
    )
    .at_relative_port(group)
}

#[test]
fn all_tg_pt_registers_the_initiator_through_every_gateway() {
    let groups = vec![
        scsi::PortGroup {
            id: 1,
            state: scsi::AccessState::ActiveOptimized,
            rel_ports: vec![1],
            preferred: false,
        },
        scsi::PortGroup {
            id: 2,
            state: scsi::AccessState::ActiveNonOptimized,
            rel_ports: vec![2],
            preferred: false,
        },
    ];
    let (a, b) = (new_lu(), new_lu());
    for lu in [&a, &b] {
        lu.set_shared_pr(true);
        lu.set_port_groups(groups.clone()).expect("groups");
    }
    let (x_a, x_b, y_b) = (
        nexus_through(1, 1, 1),
        nexus_through(1, 2, 2),
        nexus_through(2, 3, 2),
    );
    a.nexus_added(&x_a);
    b.nexus_added(&x_b);
    b.nexus_added(&y_b);
    for (lu, n) in [(&a, &x_a), (&b, &x_b), (&b, &y_b)] {
        run(lu, n, &TUR, &[]);
    }
    // REPORT CAPABILITIES says ALL_TG_PT is supported
    let caps = prin(&a, &x_a, 2, 8);
    assert_eq!(caps.data[2] & 0x04, 0x04, "ATP_C");
    // x registers through A for all target ports: its nexus through B is registered too
    let out = prout_full(&a, &x_a, REGISTER, 0, 0, 0xA, 0x04);
    let Outcome::PersistentReserveOut(p) = out else {
        panic!("{out:?}")
    };
    good(&p.completion);
    b.adopt_pr_state(&p.persist.expect("stored").bytes)
        .expect("state");
    assert_eq!(keys(&b, &y_b), vec![0xA, 0xA], "two I_T nexuses, one key");
    // x reserves WRITE EXCLUSIVE - REGISTRANTS ONLY through B (registered there already)
    let p = shared_prout(&b, &a, &x_b, RESERVE, 5, 0xA, 0);
    good(&p.completion);
    good(&run(&b, &x_b, &WRITE10, &[0; 512]));
    good(&run(&a, &x_a, &WRITE10, &[0; 512]));
    conflict(&run(&b, &y_b, &WRITE10, &[0; 512]));
    // READ FULL STATUS names both relative ports
    let full = prin(&a, &x_a, 3, 4096).data;
    let mut at = 8;
    let mut ports = Vec::new();
    while at + 24 <= full.len() {
        ports.push(u16::from_be_bytes([full[at + 18], full[at + 19]]));
        let tid_len =
            u32::from_be_bytes([full[at + 20], full[at + 21], full[at + 22], full[at + 23]]);
        at += 24 + tid_len as usize;
    }
    assert_eq!(ports, vec![1, 2]);
    // an already registered nexus ignores ALL_TG_PT: a key change is its own
    let out = prout_full(&b, &x_b, REGISTER, 0, 0xA, 0xB, 0x04);
    let Outcome::PersistentReserveOut(p) = out else {
        panic!("{out:?}")
    };
    good(&p.completion);
    a.adopt_pr_state(&p.persist.expect("stored").bytes)
        .expect("state");
    assert_eq!(keys(&a, &x_a), vec![0xA, 0xB]);
}
