//! A logged-in Connection (open-iscsi style login, optionally with header / data digests,
//! a target with its own small limits, or a discovery session) fed a fuzzed sequence of
//! actions: raw bytes in arbitrary chunking, framed PDUs with any header bytes (correct
//! lengths and digests), well-formed SCSI commands / Data-Out / NOP-Out / Text / TMF /
//! Logout, completions of whatever commands came out, TMF answers, NOP ticks and partial
//! draining of the output.
//!
//! Input: byte 0 = setup (bit 0 header digest, bit 1 data digest, bit 2 small target,
//! bit 3 discovery, bit 4 InitialR2T=Yes, bit 5 ImmediateData=No, bit 6 initiator
//! MaxRecvDataSegmentLength=512, bit 7 MaxOutstandingR2T=2 and a 4 KiB MaxBurstLength),
//! then actions (one opcode byte each, see `step`).
//!
//! Checks: no panic; every byte sent parses as a target PDU under the negotiated digests;
//! commands come out once, with all of their write data; tasks stay within the session's
//! queue limits; the receive buffer stays within one maximal PDU; queued output stays
//! proportional to what came in.
#![no_main]

use iscsi_proto::ConnConfig;
use iscsi_proto::pdu::{
    Bhs, DataOut, LogoutRequest, NopOut, RESERVED_TAG, ScsiCommandHdr, TaskMgmtRequest,
    TextRequest, fields,
};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::{
    Harness, Input, TARGET, TARGET_SMALL, encode, frame_raw, kv, open_iscsi_operational_pairs,
    set_key,
};

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let setup = inp.u8();
    let mut h = Harness::new(ConnConfig {
        nop_interval_ms: 5000,
        nop_count: 2,
        ..ConnConfig::default()
    });
    let ok = if setup & 8 != 0 {
        h.login_discovery()
    } else {
        let target = if setup & 4 != 0 { TARGET_SMALL } else { TARGET };
        let hd = if setup & 1 != 0 { "CRC32C" } else { "None" };
        let dd = if setup & 2 != 0 { "CRC32C" } else { "None" };
        let mut pairs = open_iscsi_operational_pairs(hd, dd);
        if setup & 16 != 0 {
            set_key(&mut pairs, "InitialR2T", "Yes");
        }
        if setup & 32 != 0 {
            set_key(&mut pairs, "ImmediateData", "No");
        }
        if setup & 64 != 0 {
            set_key(&mut pairs, "MaxRecvDataSegmentLength", "512");
        }
        if setup & 128 != 0 {
            set_key(&mut pairs, "MaxOutstandingR2T", "2");
            set_key(&mut pairs, "MaxBurstLength", "4096");
            set_key(&mut pairs, "FirstBurstLength", "1024");
        }
        h.login(target, &kv(&pairs))
    };
    assert!(ok, "the scripted login must succeed");
    let mut steps = 0;
    while !inp.is_empty() && steps < 256 {
        steps += 1;
        step(&mut h, &mut inp);
        if !h.hold_tx {
            h.drain_tx(usize::MAX);
        }
    }
    h.finish();
});

/// One action of the scenario.
fn step(h: &mut Harness, inp: &mut Input<'_>) {
    match inp.u8() % 12 {
        // raw bytes, any chunking
        0 => {
            let len = usize::from(inp.u16() % 2048);
            let chunk = usize::from(inp.u8()).max(1);
            let b = inp.bytes(len).to_vec();
            h.feed(&b, chunk);
        }
        // a framed PDU with arbitrary header bytes
        1 => {
            let hdr: [u8; 48] = inp.array();
            let ahs_len = usize::from(inp.u8() % 5) * 4;
            let ahs = inp.bytes(ahs_len).to_vec();
            let dlen = usize::from(inp.u16() % 8192);
            let d = inp.bytes(dlen).to_vec();
            let chunk = usize::from(inp.u8()) * 8;
            let wire = frame_raw(&hdr, &ahs, &d, h.in_dg);
            h.feed(&wire, if chunk == 0 { usize::MAX } else { chunk });
        }
        // a well-formed SCSI command
        2 => {
            let flags = inp.u8();
            let itt = u32::from(inp.u8() % 16);
            let edtl = match inp.u8() % 4 {
                0 => 0,
                1 => u32::from(inp.u16()),
                2 => 512 * u32::from(inp.u8()),
                _ => inp.u32(),
            };
            let cdb: [u8; 16] = inp.array();
            let imm_len = usize::from(inp.u16() % 4096).min(edtl as usize);
            let imm = vec![0x5au8; if flags & 0x20 != 0 { imm_len } else { 0 }];
            let immediate = flags & 8 != 0;
            let cmd_sn = if flags & 0x40 != 0 {
                h.exp_cmd_sn.wrapping_add(u32::from(inp.u8() % 4))
            } else {
                h.exp_cmd_sn
            };
            let mut ahs = Vec::new();
            if flags & 0x80 != 0 {
                // extended CDB or bidirectional read length
                if inp.bool() {
                    ahs.extend_from_slice(&[0, 5, 2, 0]);
                    ahs.extend_from_slice(&inp.u32().to_be_bytes());
                } else {
                    ahs.extend_from_slice(&[0, 17, 1, 0]);
                    ahs.extend_from_slice(&inp.array::<16>());
                }
            }
            let bhs = Bhs::ScsiCommand(ScsiCommandHdr {
                immediate,
                final_: flags & 4 != 0 || flags & 0x10 == 0,
                read: flags & 1 != 0,
                write: flags & 2 != 0,
                attr: inp.u8() & 7,
                lun: fields::lun_encode(u64::from(inp.u8() % 4)),
                itt,
                edtl,
                cmd_sn,
                exp_stat_sn: h.stat_sn,
                cdb,
            });
            let hdr = bhs.encode(0, 0);
            let wire = frame_raw(&hdr, &ahs, &imm, h.in_dg);
            h.feed(&wire, usize::MAX);
        }
        // Data-Out answering a seen R2T (or unsolicited / made up)
        3 => {
            let sel = inp.u8();
            let (itt, ttt, offset, len) = match h.r2ts.get(usize::from(sel) % h.r2ts.len().max(1)) {
                Some(r) if sel & 0x80 == 0 => (r.itt, r.ttt, r.offset, r.len),
                _ => (
                    u32::from(inp.u8() % 16),
                    if inp.bool() { RESERVED_TAG } else { inp.u32() },
                    u32::from(inp.u16()),
                    u32::from(inp.u16()),
                ),
            };
            let pieces = u32::from(inp.u8() % 4) + 1;
            let each = (len / pieces).max(1);
            let mut off = 0u32;
            let mut sn = 0u32;
            while off < len && sn < 8 {
                let n = each.min(len - off).min(8192);
                let bhs = Bhs::DataOut(DataOut {
                    final_: off + n >= len,
                    lun: 0,
                    itt,
                    ttt,
                    exp_stat_sn: h.stat_sn,
                    data_sn: sn,
                    buffer_offset: offset + off,
                });
                let wire = encode(bhs, &vec![0x33u8; n as usize], h.in_dg);
                h.feed(&wire, usize::MAX);
                off += n;
                sn += 1;
            }
        }
        // complete a delivered command
        4 | 5 => {
            let idx = usize::from(inp.u8());
            h.complete(idx, inp);
        }
        // NOP-In timer
        6 => {
            let ms = u64::from(inp.u16()) * 4;
            h.tick(ms);
        }
        // write some of the output, or switch between a slow and a fast socket
        7 => {
            let n = inp.u16();
            if n & 0x8000 != 0 {
                h.hold_tx = !h.hold_tx;
            }
            let n = usize::from(n & 0x7fff);
            h.drain_tx(if n == 0 { usize::MAX } else { n });
        }
        // answer a task management request
        8 => {
            let idx = usize::from(inp.u8());
            let code = inp.u8();
            h.complete_tmf(idx, code);
        }
        // NOP-Out: ping, or answer to the target's ping
        9 => {
            let f = inp.u8();
            let (itt, ttt) = if f & 1 != 0 {
                (RESERVED_TAG, h.ping_ttt.unwrap_or(RESERVED_TAG))
            } else {
                (u32::from(inp.u8()) + 100, RESERVED_TAG)
            };
            let len = usize::from(inp.u16() % 1024);
            let d = inp.bytes(len).to_vec();
            let bhs = Bhs::NopOut(NopOut {
                immediate: f & 2 != 0,
                lun: 0,
                itt,
                ttt,
                cmd_sn: h.exp_cmd_sn,
                exp_stat_sn: h.stat_sn,
            });
            h.feed(&encode(bhs, &d, h.in_dg), usize::MAX);
        }
        // Text request: SendTargets, a negotiation, or fuzzed text; C bit and TTT continuation
        10 => {
            let f = inp.u8();
            let text = match f % 4 {
                0 => kv(&[("SendTargets", "All")]),
                1 => kv(&[("SendTargets", TARGET)]),
                2 => kv(&[("MaxRecvDataSegmentLength", "4096"), ("X-foo", "bar")]),
                _ => {
                    let len = usize::from(inp.u16() % 2048);
                    inp.bytes(len).to_vec()
                }
            };
            let bhs = Bhs::TextRequest(TextRequest {
                immediate: f & 0x10 != 0,
                final_: f & 0x20 == 0,
                cont: f & 0x40 != 0,
                lun: 0,
                itt: 200 + u32::from(f >> 7),
                ttt: if f & 0x08 != 0 {
                    inp.u32()
                } else {
                    RESERVED_TAG
                },
                cmd_sn: h.exp_cmd_sn,
                exp_stat_sn: h.stat_sn,
            });
            h.feed(&encode(bhs, &text, h.in_dg), usize::MAX);
        }
        // task management or logout
        _ => {
            let f = inp.u8();
            let bhs = if f & 0x80 == 0 {
                let referenced = match h.pending.first() {
                    Some(p) if f & 0x40 == 0 => p.itt,
                    _ => u32::from(inp.u8() % 16),
                };
                Bhs::TaskMgmtRequest(TaskMgmtRequest {
                    immediate: true,
                    function: f & 0x0f,
                    lun: fields::lun_encode(u64::from(inp.u8() % 4)),
                    itt: 300 + u32::from(inp.u8()),
                    rtt: referenced,
                    cmd_sn: h.exp_cmd_sn,
                    exp_stat_sn: h.stat_sn,
                    ref_cmd_sn: h.exp_cmd_sn,
                    exp_data_sn: 0,
                })
            } else {
                Bhs::LogoutRequest(LogoutRequest {
                    immediate: f & 1 != 0,
                    reason: (f >> 1) & 3,
                    itt: 400,
                    cid: 0,
                    cmd_sn: h.exp_cmd_sn,
                    exp_stat_sn: h.stat_sn,
                })
            };
            h.feed(&encode(bhs, &[], h.in_dg), usize::MAX);
        }
    }
}
