//! Public-API tests: sense formats, I/O error mapping, Send + Sync, and property tests that
//! `execute` never panics and every CHECK CONDITION carries well-formed sense.

use proptest::prelude::*;
use scsi::sense::{Sense, parse_key_asc};
use scsi::{
    Action, CmdCtx, Completion, LogicalUnit, LuParams, Nexus, NexusId, Outcome, execute_unmapped,
    io_error_completion, status,
};

fn params(block_size: u32, num_blocks: u64, readonly: bool) -> LuParams {
    LuParams {
        lun: 0,
        block_size,
        num_blocks,
        vendor_id: "NUMATGT".into(),
        product_id: "VIRTUAL-DISK".into(),
        product_rev: "0001".into(),
        serial: "abc".into(),
        naa_id: 42,
        write_cache: true,
        write_through: false,
        readonly,
        target_name: "iqn.2026-11.org.numatgt:demo".into(),
        rel_port_id: 1,
        tpg: 1,
        device_type: scsi::DeviceType::Disk,
    }
}

/// Checks fixed (70h) or descriptor (72h) sense data is self-consistent.
fn well_formed(s: &[u8]) -> bool {
    match s.first() {
        Some(0x70) | Some(0xF0) => {
            s.len() == 18 && usize::from(s[7]) + 8 == s.len() && s[2] & 0xF0 == 0
        }
        Some(0x72) => {
            if s.len() < 8 || usize::from(s[7]) + 8 != s.len() || s[1] & 0xF0 != 0 {
                return false;
            }
            let mut off = 8;
            while off < s.len() {
                if off + 2 > s.len() {
                    return false;
                }
                off += 2 + usize::from(s[off + 1]);
            }
            off == s.len()
        }
        _ => false,
    }
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn logical_unit_is_send_sync() {
    assert_send_sync::<LogicalUnit>();
}

#[test]
fn fixed_and_descriptor_sense() {
    let s = Sense::unrecovered_read_error(0x1234);
    let f = s.encode(false);
    assert_eq!(f.len(), 18);
    assert_eq!(f[0], 0xF0);
    assert_eq!(&f[3..7], &[0, 0, 0x12, 0x34]);
    assert_eq!((f[2], f[12], f[13]), (3, 0x11, 0));
    let d = s.encode(true);
    assert_eq!(&d[..8], &[0x72, 3, 0x11, 0, 0, 0, 0, 12]);
    assert_eq!(&d[8..12], &[0, 0x0A, 0x80, 0]);
    assert_eq!(&d[12..20], &0x1234u64.to_be_bytes());
    // 64-bit LBA: fixed format cannot hold it, VALID = 0
    let big = Sense::write_error(1 << 40).encode(false);
    assert_eq!(big[0], 0x70);
    assert!(well_formed(&big));
    let fp = Sense::invalid_field_in_cdb(2, Some(5)).encode(true);
    assert_eq!(&fp[8..16], &[0x02, 0x06, 0, 0, 0xCD, 0, 2, 0]);
    assert!(well_formed(&fp));
}

#[test]
fn io_errors() {
    let lu = LogicalUnit::new(params(512, 100, false));
    let c = io_error_completion(&lu, 5, false, 7);
    assert_eq!(c.status, status::CHECK_CONDITION);
    assert_eq!(parse_key_asc(&c.sense), Some((3, 0x11, 0)));
    assert_eq!(&c.sense[3..7], &[0, 0, 0, 7]);
    let c = io_error_completion(&lu, 5, true, 7);
    assert_eq!(parse_key_asc(&c.sense), Some((3, 0x0C, 0)));
    let c = io_error_completion(&lu, 28, true, 7);
    assert_eq!(parse_key_asc(&c.sense), Some((7, 0x27, 7)));
    let c = io_error_completion(&lu, 9, true, 7);
    assert_eq!(parse_key_asc(&c.sense), Some((4, 0x44, 0)));
}

#[test]
fn unknown_opcode() {
    let lu = LogicalUnit::new(params(512, 100, false));
    let a = lu.execute(&CmdCtx {
        cdb: &[0xC0, 0, 0, 0, 0, 0],
        data_out: &[],
        landed: 0,
        luns: &[],
    });
    let Action::Complete(c) = a else {
        panic!("{a:?}")
    };
    assert_eq!(parse_key_asc(&c.sense), Some((5, 0x20, 0)));
    let a = lu.execute(&CmdCtx {
        cdb: &[],
        data_out: &[],
        landed: 0,
        luns: &[],
    });
    assert!(matches!(a, Action::Complete(Completion { status: 2, .. })));
}

#[test]
fn padded_cdb_is_accepted() {
    // iSCSI carries 16 CDB bytes; a 6-byte command is zero padded.
    let lu = LogicalUnit::new(params(512, 100, false));
    let mut cdb = [0u8; 16];
    cdb[..6].copy_from_slice(&[0x12, 0, 0, 0, 96, 0]);
    let a = lu.execute(&CmdCtx {
        cdb: &cdb,
        data_out: &[],
        landed: 0,
        luns: &[],
    });
    let Action::Complete(c) = a else {
        panic!("{a:?}")
    };
    assert_eq!((c.status, c.data.len()), (0, 96));
}

fn check_result(lu: &LogicalUnit, cdb: &[u8], data_out: &[u8], a: &Action) {
    let p = lu.params();
    match a {
        Action::Complete(c) => {
            if c.status == status::CHECK_CONDITION {
                assert!(well_formed(&c.sense), "{cdb:02x?} -> {:02x?}", c.sense);
                assert!(c.data.is_empty());
            } else {
                assert_eq!(c.status, status::GOOD);
                assert!(c.sense.is_empty());
            }
        }
        Action::Read { lba, blocks, .. } => {
            assert!(*blocks > 0);
            assert!(lba + u64::from(*blocks) <= p.num_blocks);
        }
        Action::Write {
            lba,
            blocks,
            data_offset,
            ..
        } => {
            assert!(!p.readonly);
            assert!(*blocks > 0);
            assert!(lba + u64::from(*blocks) <= p.num_blocks);
            let end = data_offset + *blocks as usize * p.block_size as usize;
            assert!(end <= data_out.len());
        }
        Action::Sync { lba, blocks } => {
            assert!(lba + u64::from(*blocks) <= p.num_blocks);
        }
        Action::SetTargetPortGroups(asks) => {
            assert!(lu.explicit_alua() && !asks.is_empty());
        }
        Action::Sanitize(s) => {
            assert!(!lu.write_protected());
            if let scsi::sanitize::Method::Overwrite {
                pattern, passes, ..
            } = &s.method
            {
                assert!(!pattern.is_empty() && pattern.len() <= p.block_size as usize);
                assert!(*passes > 0);
            }
            // as the server does when the operation ends, so later commands run normally
            lu.sanitize_finished(true);
        }
        Action::Verify {
            lba,
            blocks,
            same_block,
        } => {
            assert!(*blocks > 0);
            assert!(lba + u64::from(*blocks) <= p.num_blocks);
            let need = if *same_block {
                p.block_size as usize
            } else {
                *blocks as usize * p.block_size as usize
            };
            assert!(need <= data_out.len());
        }
        Action::Unmap { ranges } => {
            assert!(!p.readonly && !ranges.is_empty());
            for (lba, blocks) in ranges {
                assert!(*blocks > 0 && lba + blocks <= p.num_blocks);
            }
        }
        Action::WriteSame {
            lba, blocks, ndob, ..
        } => {
            assert!(!p.readonly);
            assert!(*blocks > 0 && lba + blocks <= p.num_blocks);
            assert!(*ndob || data_out.len() >= p.block_size as usize);
        }
        Action::OrWrite { lba, blocks, .. } | Action::AtomicWrite { lba, blocks, .. } => {
            assert!(!p.readonly);
            assert!(*blocks > 0 && lba + u64::from(*blocks) <= p.num_blocks);
            assert!(data_out.len() >= *blocks as usize * p.block_size as usize);
        }
        Action::CompareAndWrite { lba, blocks, .. } => {
            assert!(!p.readonly);
            assert!(*blocks > 0 && lba + u64::from(*blocks) <= p.num_blocks);
            assert!(data_out.len() >= 2 * *blocks as usize * p.block_size as usize);
        }
        Action::GetLbaStatus { lba, alloc_len } => {
            assert!(*lba < p.num_blocks && *alloc_len > 0);
        }
        Action::ExtendedCopy(job) => {
            for s in &job.segments {
                assert!(usize::from(s.src) < job.cscds.len());
                assert!(usize::from(s.dst) < job.cscds.len());
            }
        }
        Action::SelfTest { lba, blocks } => {
            assert!(*blocks > 0 && lba + u64::from(*blocks) <= p.num_blocks);
        }
        Action::Changer(_) => {
            assert_eq!(
                p.device_type,
                scsi::DeviceType::Changer,
                "only a changer moves media"
            );
        }
        Action::Tape(_) => {
            assert_eq!(
                p.device_type,
                scsi::DeviceType::Tape,
                "only a tape drive runs tape commands"
            );
        }
        Action::Passthrough(op) => {
            assert_eq!(
                p.device_type,
                scsi::DeviceType::Passthrough,
                "only a passthrough LU passes commands on"
            );
            assert!(op.cdb.len() >= 6 && cdb.starts_with(&op.cdb));
        }
    }
}

fn cdb_strategy() -> impl Strategy<Value = Vec<u8>> {
    let opcodes = prop::sample::select(vec![
        0x00u8, 0x03, 0x08, 0x0A, 0x12, 0x15, 0x1A, 0x25, 0x28, 0x2A, 0x2E, 0x2F, 0x35, 0x41, 0x42,
        0x55, 0x5A, 0x83, 0x84, 0x88, 0x89, 0x8A, 0x8B, 0x8E, 0x8F, 0x91, 0x93, 0x9E, 0xA0, 0xA3,
        0xA8, 0xAA, 0xAE, 0xAF, 0x7F, 0xFF,
    ]);
    (
        opcodes,
        prop::collection::vec(any::<u8>(), 0..20),
        prop::collection::vec(prop::sample::select(vec![0u8, 0, 0, 1, 0x10, 0xFF]), 0..20),
        any::<bool>(),
    )
        .prop_map(|(op, random, sparse, use_sparse)| {
            let mut v = vec![op];
            v.extend(if use_sparse { sparse } else { random });
            v
        })
}

/// MAINTENANCE IN CDBs: mostly the two service actions we implement, any reporting options,
/// requested operation codes and service actions, small and large allocation lengths.
fn maintenance_in_strategy() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just(0x0Cu8), Just(0x0D), any::<u8>()],
        prop_oneof![
            0u8..8,
            Just(0x80),
            Just(0x81),
            Just(0x82),
            Just(0x83),
            any::<u8>()
        ],
        any::<u8>(),
        prop_oneof![0u16..0x20, any::<u16>()],
        prop_oneof![0u32..40, Just(65535), any::<u32>()],
        prop_oneof![Just(0u8), any::<u8>()],
        0usize..17,
    )
        .prop_map(|(sa, b2, op, rsa, alloc, ctl, len)| {
            let mut v = vec![0xA3, sa, b2, op];
            v.extend_from_slice(&rsa.to_be_bytes());
            v.extend_from_slice(&alloc.to_be_bytes());
            v.extend_from_slice(&[0, ctl, 0, 0, 0, 0]);
            v.truncate(len.max(1));
            v
        })
}

fn complete_of(lu: &LogicalUnit, cdb: &[u8]) -> Completion {
    match lu.execute(&CmdCtx {
        cdb,
        data_out: &[],
        landed: 0,
        luns: &[],
    }) {
        Action::Complete(c) => c,
        a => panic!("{cdb:02x?} -> {a:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn maintenance_in_never_panics(cdb in maintenance_in_strategy(), readonly in any::<bool>()) {
        let lu = LogicalUnit::new(params(512, 2048, readonly));
        let a = lu.execute(&CmdCtx { cdb: &cdb, data_out: &[], landed: 0, luns: &[] });
        check_result(&lu, &cdb, &[], &a);
        let Action::Complete(c) = a else { panic!("{a:?}") };
        if c.status == status::GOOD {
            let alloc = u32::from_be_bytes([cdb[6], cdb[7], cdb[8], cdb[9]]) as usize;
            prop_assert!(c.data.len() <= alloc);
            if cdb[1] & 0x1F == 0x0C && cdb[2] & 0x07 == 0 && alloc >= 4 {
                // all_commands: COMMAND DATA LENGTH covers the descriptors
                let len = u32::from_be_bytes([c.data[0], c.data[1], c.data[2], c.data[3]]);
                prop_assert!(len > 0);
                prop_assert_eq!(c.data.len(), (len as usize + 4).min(alloc));
            } else if cdb[1] & 0x1F == 0x0C && alloc >= 4 {
                // one_command: SUPPORT 001b or 011b, CDB SIZE consistent
                let support = c.data[1] & 0x07;
                prop_assert!(support == 1 || support == 3);
                let size = usize::from(u16::from_be_bytes([c.data[2], c.data[3]]));
                let ctd = if c.data[1] & 0x80 != 0 { 12 } else { 0 };
                prop_assert_eq!(c.data.len(), (4 + size + ctd).min(alloc));
            }
        }
    }

    /// REPORT SUPPORTED OPERATION CODES (reporting options 011b) calls a command supported
    /// exactly when `execute` knows its operation code and service action.
    #[test]
    fn reported_support_matches_execute(op in any::<u8>(), sa in 0u8..0x20) {
        let lu = LogicalUnit::new(params(512, 2048, false));
        let rsoc = [0xA3, 0x0C, 0x03, op, 0, sa, 0, 0, 0x10, 0, 0, 0];
        let r = complete_of(&lu, &rsoc);
        prop_assert_eq!(r.status, status::GOOD);
        let supported = r.data[1] & 0x07 == 3;
        // reporting options 001b refuse an operation code with service actions
        let plain = complete_of(&lu, &[0xA3, 0x0C, 0x01, op, 0, 0, 0, 0, 0x10, 0, 0, 0]);
        let has_sa = plain.status != status::GOOD;
        let mut cdb = [0u8; 16];
        cdb[0] = op;
        if has_sa {
            cdb[1] = sa;
        }
        // through a nexus: the anonymous `execute` refuses reservation commands
        let n = Nexus::iscsi(NexusId(1), "iqn.2026-11.test:api", 1, "iqn.2026-11.org.numatgt:demo", 1);
        let a = match lu.execute_nexus(&n, &CmdCtx { cdb: &cdb, data_out: &[], landed: 0, luns: &[] }) {
            Outcome::Action(a) => a,
            Outcome::PersistentReserveOut(p) => Action::Complete(p.completion),
        };
        let unknown = match &a {
            Action::Complete(c) if c.status == status::CHECK_CONDITION => {
                let k = parse_key_asc(&c.sense);
                // unknown opcode, or unknown service action of a known one
                k == Some((5, 0x20, 0))
                    || (has_sa
                        && k == Some((5, 0x24, 0))
                        && c.sense.get(15..18) == Some(&[0xCC, 0, 1][..]))
            }
            _ => false,
        };
        if supported {
            // a supported command never fails as an unknown command; the usage data
            // starts with the operation code
            prop_assert!(!unknown, "{op:#04x}/{sa:#04x}");
            prop_assert_eq!(r.data[4], op);
        } else {
            prop_assert!(unknown, "{op:#04x}/{sa:#04x} -> {a:?}");
        }
    }

    #[test]
    fn execute_never_panics(
        cdb in cdb_strategy(),
        data_out in prop::collection::vec(any::<u8>(), 0..2048),
        readonly in any::<bool>(),
        bs in prop::sample::select(vec![512u32, 4096]),
        nb in prop::sample::select(vec![0u64, 1, 300, 1 << 32, u64::MAX]),
        luns in prop::collection::vec(any::<u64>(), 0..5),
    ) {
        let lu = LogicalUnit::new(params(bs, nb, readonly));
        let a = lu.execute(&CmdCtx { cdb: &cdb, data_out: &data_out, landed: 0, luns: &luns });
        check_result(&lu, &cdb, &data_out, &a);
        let c = execute_unmapped(&cdb, &luns, readonly);
        if c.status == status::CHECK_CONDITION {
            prop_assert!(well_formed(&c.sense));
        }
    }

    #[test]
    fn mode_select_arbitrary_lists(
        ten in any::<bool>(),
        list in prop::collection::vec(prop::sample::select(vec![0u8, 0, 4, 8, 0x0A, 0x12, 0x1C, 0xFF]), 0..80),
        len in 0u16..100,
    ) {
        let lu = LogicalUnit::new(params(512, 2048, false));
        let cdb: Vec<u8> = if ten {
            let [h, l] = len.to_be_bytes();
            vec![0x55, 0x10, 0, 0, 0, 0, 0, h, l, 0]
        } else {
            vec![0x15, 0x10, 0, 0, len as u8, 0]
        };
        let a = lu.execute(&CmdCtx { cdb: &cdb, data_out: &list, landed: 0, luns: &[] });
        check_result(&lu, &cdb, &list, &a);
    }
}

#[test]
fn management_sets_descriptor_sense() {
    let lu = LogicalUnit::new(params(512, 8, false));
    assert!(!lu.descriptor_sense());
    lu.set_descriptor_sense(true);
    assert!(lu.descriptor_sense());
    // READ(10) beyond the end: the CHECK CONDITION now carries descriptor sense (72h)
    let cdb = [0x28, 0, 0, 0, 0, 100, 0, 0, 1, 0];
    match lu.execute(&CmdCtx {
        cdb: &cdb,
        data_out: &[],
        landed: 0,
        luns: &[0],
    }) {
        Action::Complete(c) => {
            assert_eq!(c.status, status::CHECK_CONDITION);
            assert_eq!(c.sense.first(), Some(&0x72));
        }
        _ => panic!("READ beyond the end was not refused"),
    }
    lu.set_descriptor_sense(false);
    assert!(!lu.descriptor_sense());
}
