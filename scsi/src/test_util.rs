//! Test helpers shared by the unit tests of every module.

use crate::{Action, CmdCtx, Completion, LogicalUnit, LuParams, Nexus, NexusId, Outcome};

pub fn params() -> LuParams {
    LuParams {
        lun: 1,
        block_size: 512,
        num_blocks: 2048,
        vendor_id: "NUMATGT".into(),
        product_id: "VIRTUAL-DISK".into(),
        product_rev: "0001".into(),
        serial: "SER12345".into(),
        naa_id: 0x1234_5678_9abc_def0,
        write_cache: true,
        write_through: false,
        readonly: false,
        target_name: "iqn.2026-11.org.numatgt:t1".into(),
        rel_port_id: 1,
        tpg: 7,
        device_type: crate::DeviceType::Disk,
    }
}

pub fn lu() -> LogicalUnit {
    LogicalUnit::new(params())
}

pub fn lu_with(f: impl FnOnce(&mut LuParams)) -> LogicalUnit {
    let mut p = params();
    f(&mut p);
    LogicalUnit::new(p)
}

/// Executes a command from one fixed I_T nexus (not announced, so without unit attention).
pub fn exec(lu: &LogicalUnit, cdb: &[u8], data_out: &[u8]) -> Action {
    let n = Nexus::iscsi(
        NexusId(1),
        "iqn.2026-11.test:unit",
        1,
        &lu.params().target_name,
        1,
    );
    let cmd = CmdCtx {
        cdb,
        data_out,
        landed: 0,
        luns: &[0, 1, 300],
    };
    match lu.execute_nexus(&n, &cmd) {
        Outcome::Action(a) => a,
        Outcome::PersistentReserveOut(p) => Action::Complete(p.completion),
    }
}

/// Executes a command expected to complete without I/O.
pub fn complete(lu: &LogicalUnit, cdb: &[u8]) -> Completion {
    complete_out(lu, cdb, &[])
}

pub fn complete_out(lu: &LogicalUnit, cdb: &[u8], data_out: &[u8]) -> Completion {
    match exec(lu, cdb, data_out) {
        Action::Complete(c) => c,
        other => panic!("expected a completion, got {other:?}"),
    }
}

/// (key, asc, ascq) of a CHECK CONDITION completion.
pub fn check(c: &Completion) -> (u8, u8, u8) {
    assert_eq!(c.status, crate::status::CHECK_CONDITION, "{c:?}");
    crate::sense::parse_key_asc(&c.sense).expect("well-formed sense")
}
