//! SCSI command execution: `LogicalUnit::execute_nexus` on arbitrary CDBs and Data-Out for
//! 512- and 4096-byte-block LUs (read-only or not, thin or not, various capacities), a
//! sequence of commands per input from two I_T nexuses in turn so MODE SELECT,
//! reservation and unit attention state carries over, plus `execute_unmapped`,
//! `data_out_len` and `verify_compare`.
//!
//! Input: byte 0 = LU shape (bit 0 4096-byte blocks, bit 1 read-only, bit 2 WCE,
//! bits 3-5 capacity, bit 6 thin, bits 0 and 6 together a CD/DVD drive with 2048-byte
//! blocks, bit 7 two ALUA groups with this one standby and explicit ALUA), then commands: CDB length (mod 33), CDB, big-endian u16 Data-Out
//! length, Data-Out.
//!
//! Checks: no panic; CHECK CONDITION carries parseable sense; block actions stay within
//! the medium and MAX_TRANSFER_BYTES; a Write's data range lies within Data-Out; nothing
//! is written to a read-only LU; a Verify has the Data-Out it compares.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::Input;
use scsi::{
    Action, CmdCtx, LogicalUnit, LuParams, MAX_TRANSFER_BYTES, Nexus, NexusId, Outcome, status,
};

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let shape = inp.u8();
    // 4096-byte blocks and thin together: a CD/DVD drive (2048-byte blocks, MMC table);
    // read-only too: a tape drive (SSC table) with a 1 MiB tape in memory
    let tape = shape & 0x43 == 0x43;
    let cd = shape & 0x43 == 0x41;
    // thin, read-only, write cache, 512-byte blocks: a medium changer with a small library
    let changer = shape & 0x47 == 0x46;
    // not thin, read-only, write cache, 512-byte blocks: a passthrough LU
    let pt = shape & 0x47 == 0x06;
    let block_size: u32 = if cd {
        2048
    } else if shape & 1 != 0 {
        4096
    } else {
        512
    };
    let num_blocks: u64 = match (shape >> 3) & 7 {
        0 => 2048,
        1 => 1,
        2 => 7,
        3 => 0x1_0000_0001,
        4 => 1 << 40,
        5 => 0xffff_ffff,
        6 => 300,
        _ => 65536,
    };
    let lu = LogicalUnit::new(LuParams {
        lun: 1,
        block_size,
        num_blocks,
        vendor_id: "NUMATGT".into(),
        product_id: "VIRTUAL-DISK".into(),
        product_rev: "0001".into(),
        serial: "SER12345".into(),
        naa_id: 0x1234_5678_9abc_def0,
        write_cache: shape & 4 != 0,
        write_through: false,
        readonly: shape & 2 != 0,
        target_name: "iqn.2026-11.org.numatgt:t1".into(),
        rel_port_id: 1,
        tpg: 7,
        device_type: if cd {
            scsi::DeviceType::Cd
        } else if tape {
            scsi::DeviceType::Tape
        } else if changer {
            scsi::DeviceType::Changer
        } else if pt {
            scsi::DeviceType::Passthrough
        } else {
            scsi::DeviceType::Disk
        },
    });
    if tape {
        let img = scsi::ssc::format::new_image("FUZZ0001", 1, scsi::ssc::format::medium::DATA, 1);
        let t = scsi::ssc::MemTape {
            bytes: img,
            ..Default::default()
        };
        assert!(lu.tape_insert(Box::new(t)).is_ok(), "a new tape loads");
    }
    if changer {
        for p in [
            "element_type=1,start_address=1,quantity=1,media_home=/nonexistent",
            "element_type=2,start_address=1000,quantity=6",
            "element_type=3,start_address=10,quantity=2",
            "element_type=4,start_address=500,quantity=2",
            "element_type=4,address=500,tid=1,lun=1",
            "element_type=2,address=1000,barcode=A0000001",
            "element_type=2,address=1003,barcode=A0000002",
        ] {
            let pairs: Vec<(&str, &str)> = p.split(',').filter_map(|kv| kv.split_once('=')).collect();
            assert!(lu.changer_configure(&pairs).is_ok(), "{p}");
        }
    }
    lu.set_thin_provisioning(shape & 0x40 != 0);
    if shape & 0x80 != 0 {
        // two gateways, this one standby, explicit ALUA: SET TARGET PORT GROUPS and the
        // standby command filter are reachable
        lu.set_explicit_alua(true);
        let group = |id, state, port| scsi::PortGroup {
            id,
            state,
            rel_ports: vec![port],
            preferred: false,
        };
        let _ = lu.set_port_groups(vec![
            group(7, scsi::AccessState::Standby, 1),
            group(8, scsi::AccessState::ActiveOptimized, 2),
        ]);
    }
    let nexuses = [
        Nexus::iscsi(
            NexusId(1),
            "iqn.2026-11.org.numatgt:i1",
            0x23d0_0001,
            "iqn.t",
            1,
        ),
        Nexus::iscsi(
            NexusId(2),
            "iqn.2026-11.org.numatgt:i2",
            0x23d0_0002,
            "iqn.t",
            1,
        ),
    ];
    for n in &nexuses {
        lu.nexus_added(n);
    }
    let luns = [0u64, 1, 300, 0x3fff];
    let mut n = 0;
    while !inp.is_empty() && n < 16 {
        n += 1;
        let cdb_len = usize::from(inp.u8() % 33);
        let cdb = inp.bytes(cdb_len);
        let dlen = usize::from(inp.u16());
        let data_out = inp.bytes(dlen);
        let ctx = CmdCtx {
            cdb,
            data_out,
            landed: 0,
            luns: &luns[..usize::from(shape >> 6) + 1],
        };
        match lu.execute_nexus(&nexuses[n % 2], &ctx) {
            Outcome::Action(a) => check(&lu, a, &ctx, block_size, num_blocks),
            Outcome::PersistentReserveOut(po) => check_completion(&po.completion),
        }
        if n % 5 == 4 {
            lu.logical_unit_reset();
        }
        let c = scsi::execute_unmapped(cdb, ctx.luns, shape & 0x40 != 0);
        check_completion(&c);
        let _ = scsi::data_out_len(cdb, block_size);
        let _ = lu.data_out_len(cdb);
    }
});

fn check_completion(c: &scsi::Completion) {
    if c.status == status::CHECK_CONDITION {
        assert!(
            scsi::sense::parse_key_asc(&c.sense).is_some(),
            "CHECK CONDITION with malformed sense {:02x?}",
            c.sense
        );
    }
}

fn within(lba: u64, blocks: u64, num_blocks: u64) -> bool {
    lba.checked_add(blocks).is_some_and(|e| e <= num_blocks)
}

fn check(lu: &LogicalUnit, action: Action, ctx: &CmdCtx<'_>, bs: u32, num_blocks: u64) {
    let bs64 = u64::from(bs);
    match action {
        Action::Complete(c) => check_completion(&c),
        Action::Read { lba, blocks, .. } => {
            assert!(blocks > 0, "empty Read action");
            assert!(
                within(lba, u64::from(blocks), num_blocks),
                "read {lba}+{blocks}"
            );
            assert!(u64::from(blocks) * bs64 <= u64::from(MAX_TRANSFER_BYTES));
        }
        Action::Write {
            lba,
            blocks,
            data_offset,
            ..
        } => {
            assert!(!lu.params().readonly, "write to a read-only LU");
            assert!(blocks > 0, "empty Write action");
            assert!(
                within(lba, u64::from(blocks), num_blocks),
                "write {lba}+{blocks}"
            );
            let len = u64::from(blocks) * bs64;
            assert!(len <= u64::from(MAX_TRANSFER_BYTES));
            assert!(
                (data_offset as u64).saturating_add(len) <= ctx.data_out.len() as u64,
                "write of {len} bytes at offset {data_offset} of {} bytes of Data-Out",
                ctx.data_out.len()
            );
        }
        Action::Verify {
            lba,
            blocks,
            same_block,
        } => {
            assert!(
                within(lba, u64::from(blocks), num_blocks),
                "verify {lba}+{blocks}"
            );
            let need = if same_block {
                bs64
            } else {
                u64::from(blocks) * bs64
            };
            assert!(ctx.data_out.len() as u64 >= need, "verify without its data");
            // the server compares what it read with Data-Out
            let medium = vec![0u8; (u64::from(blocks) * bs64).min(1 << 16) as usize];
            let _ = scsi::verify_compare(&medium, ctx.data_out, bs as usize, same_block);
        }
        Action::Sync { lba, blocks } => {
            assert!(
                within(lba, u64::from(blocks), num_blocks),
                "sync {lba}+{blocks}"
            );
        }
        Action::SetTargetPortGroups(asks) => {
            assert!(
                lu.explicit_alua(),
                "SET TARGET PORT GROUPS on an implicit-only LU"
            );
            let groups = lu.port_groups();
            for (g, _) in asks {
                assert!(groups.iter().any(|x| x.id == g), "unknown group {g}");
            }
        }
        Action::Unmap { ranges } => {
            assert!(lu.thin_provisioning(), "UNMAP on a fully provisioned LU");
            assert!(!lu.params().readonly, "UNMAP on a read-only LU");
            for (lba, blocks) in ranges {
                assert!(
                    blocks > 0 && within(lba, blocks, num_blocks),
                    "unmap {lba}+{blocks}"
                );
            }
        }
        Action::WriteSame {
            lba,
            blocks,
            ndob,
            unmap,
        } => {
            assert!(!lu.params().readonly, "WRITE SAME on a read-only LU");
            assert!(
                blocks > 0 && within(lba, blocks, num_blocks),
                "write same {lba}+{blocks}"
            );
            assert!(
                !unmap || lu.thin_provisioning(),
                "unmapping WRITE SAME on a thick LU"
            );
            assert!(
                ndob || ctx.data_out.len() as u64 >= bs64,
                "WRITE SAME without its block"
            );
        }
        Action::AtomicWrite { lba, blocks, .. } => {
            assert!(!lu.params().readonly, "WRITE ATOMIC on a read-only LU");
            assert!(
                blocks > 0 && within(lba, u64::from(blocks), num_blocks),
                "write atomic {lba}+{blocks}"
            );
            assert!(
                ctx.data_out.len() as u64 >= u64::from(blocks) * bs64,
                "WRITE ATOMIC without its data"
            );
        }
        Action::OrWrite { lba, blocks, .. } => {
            assert!(!lu.params().readonly, "ORWRITE on a read-only LU");
            assert!(
                blocks > 0 && within(lba, u64::from(blocks), num_blocks),
                "orwrite {lba}+{blocks}"
            );
            assert!(
                ctx.data_out.len() as u64 >= u64::from(blocks) * bs64,
                "ORWRITE without its data"
            );
        }
        Action::CompareAndWrite { lba, blocks, .. } => {
            assert!(!lu.params().readonly, "COMPARE AND WRITE on a read-only LU");
            assert!(
                blocks > 0 && within(lba, u64::from(blocks), num_blocks),
                "caw {lba}+{blocks}"
            );
            assert!(
                ctx.data_out.len() as u64 >= 2 * u64::from(blocks) * bs64,
                "COMPARE AND WRITE without both halves of its data"
            );
        }
        Action::GetLbaStatus { lba, alloc_len } => {
            assert!(lba < num_blocks && alloc_len > 0, "get lba status {lba}");
        }
        Action::ExtendedCopy(job) => {
            for s in &job.segments {
                let n = job.cscds.len();
                assert!(
                    usize::from(s.src) < n && usize::from(s.dst) < n,
                    "xcopy index"
                );
            }
        }
        Action::SelfTest { lba, blocks } => {
            assert!(
                blocks > 0 && lba + u64::from(blocks) <= num_blocks,
                "self-test read {lba}+{blocks}"
            );
        }
        Action::Sanitize(_) => {
            assert!(!lu.write_protected(), "SANITIZE on a write-protected LU");
        }
        Action::Changer(scsi::smc::ChangerOp::Move { src, dst, invert }) => {
            assert_eq!(lu.params().device_type, scsi::DeviceType::Changer);
            let before = lu.changer_library();
            let cartridges = |l: &scsi::smc::Library| {
                l.elements.values().filter(|e| e.cartridge.is_some()).count()
            };
            if let Ok(m) = lu.changer_plan(src, dst, invert) {
                lu.changer_commit(&m);
            }
            let after = lu.changer_library();
            assert_eq!(cartridges(&before), cartridges(&after), "a move loses no cartridge");
            assert_eq!(
                scsi::smc::Library::from_text(&after.to_text()).as_ref(),
                Some(&after),
                "the state round-trips"
            );
        }
        Action::Passthrough(op) => {
            assert_eq!(lu.params().device_type, scsi::DeviceType::Passthrough);
            assert!(op.cdb.len() >= 6 && ctx.cdb.starts_with(&op.cdb), "the CDB as it came");
        }
        Action::Tape(op) => {
            assert_eq!(lu.params().device_type, scsi::DeviceType::Tape);
            let c = lu.run_tape(&op, ctx.data_out);
            check_completion(&c);
            if let scsi::ssc::TapeOp::Read { fixed, len, .. } = op {
                let most = if fixed {
                    u64::from(len) * u64::from(lu.tape_block_len())
                } else {
                    u64::from(len)
                };
                assert!(c.data.len() as u64 <= most, "READ returned more than asked");
            }
        }
    }
}
