//! Round-trip and malformed-input tests for the PDU codec.

use super::*;
use proptest::prelude::*;

fn arb_bhs() -> impl Strategy<Value = Bhs> {
    let u = any::<u32>;
    let l = any::<u64>;
    prop_oneof![
        (any::<bool>(), l(), u(), u(), u(), u()).prop_map(|(i, lun, itt, ttt, c, e)| Bhs::NopOut(
            NopOut {
                immediate: i,
                lun,
                itt,
                ttt,
                cmd_sn: c,
                exp_stat_sn: e
            }
        )),
        (
            any::<[bool; 4]>(),
            0u8..8,
            l(),
            u(),
            u(),
            u(),
            u(),
            any::<[u8; 16]>()
        )
            .prop_map(|(f, attr, lun, itt, edtl, c, e, cdb)| Bhs::ScsiCommand(
                ScsiCommandHdr {
                    immediate: f[0],
                    final_: f[1],
                    read: f[2],
                    write: f[3],
                    attr,
                    lun,
                    itt,
                    edtl,
                    cmd_sn: c,
                    exp_stat_sn: e,
                    cdb
                }
            )),
        (any::<bool>(), 0u8..128, l(), u(), u(), u(), u(), u(), u()).prop_map(
            |(i, function, lun, itt, rtt, c, e, r, d)| Bhs::TaskMgmtRequest(TaskMgmtRequest {
                immediate: i,
                function,
                lun,
                itt,
                rtt,
                cmd_sn: c,
                exp_stat_sn: e,
                ref_cmd_sn: r,
                exp_data_sn: d
            })
        ),
        (
            any::<[bool; 2]>(),
            0u8..4,
            0u8..4,
            any::<[u8; 2]>(),
            any::<[u8; 6]>(),
            any::<u16>(),
            u(),
            any::<u16>(),
            u(),
            u()
        )
            .prop_map(
                |(tc, csg, nsg, v, isid, tsih, itt, cid, c, e)| Bhs::LoginRequest(LoginRequest {
                    transit: tc[0],
                    cont: tc[1],
                    csg,
                    nsg,
                    version_max: v[0],
                    version_min: v[1],
                    isid,
                    tsih,
                    itt,
                    cid,
                    cmd_sn: c,
                    exp_stat_sn: e
                })
            ),
        (any::<[bool; 3]>(), l(), u(), u(), u(), u()).prop_map(|(f, lun, itt, ttt, c, e)| {
            Bhs::TextRequest(TextRequest {
                immediate: f[0],
                final_: f[1],
                cont: f[2],
                lun,
                itt,
                ttt,
                cmd_sn: c,
                exp_stat_sn: e,
            })
        }),
        (any::<bool>(), l(), u(), u(), u(), u(), u()).prop_map(|(f, lun, itt, ttt, e, d, o)| {
            Bhs::DataOut(DataOut {
                final_: f,
                lun,
                itt,
                ttt,
                exp_stat_sn: e,
                data_sn: d,
                buffer_offset: o,
            })
        }),
        (any::<bool>(), 0u8..128, u(), any::<u16>(), u(), u()).prop_map(
            |(i, reason, itt, cid, c, e)| Bhs::LogoutRequest(LogoutRequest {
                immediate: i,
                reason,
                itt,
                cid,
                cmd_sn: c,
                exp_stat_sn: e
            })
        ),
        (0u8..16, l(), u(), u(), u(), u(), u()).prop_map(|(t, lun, itt, ttt, e, b, r)| Bhs::Snack(
            Snack {
                snack_type: t,
                lun,
                itt,
                ttt,
                exp_stat_sn: e,
                beg_run: b,
                run_length: r
            }
        )),
        (l(), u(), u(), u(), u(), u()).prop_map(|(lun, itt, ttt, s, e, m)| Bhs::NopIn(NopIn {
            lun,
            itt,
            ttt,
            stat_sn: s,
            exp_cmd_sn: e,
            max_cmd_sn: m
        })),
        (
            any::<[bool; 4]>(),
            any::<[u8; 2]>(),
            u(),
            u(),
            u(),
            u(),
            u(),
            u(),
            u(),
            u()
        )
            .prop_map(|(f, rs, itt, st, s, e, m, d, br, r)| Bhs::ScsiResponse(
                ScsiResponse {
                    bidi_overflow: f[0],
                    bidi_underflow: f[1],
                    overflow: f[2],
                    underflow: f[3],
                    response: rs[0],
                    status: rs[1],
                    itt,
                    snack_tag: st,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    exp_data_sn: d,
                    bidi_residual: br,
                    residual: r
                }
            )),
        (any::<u8>(), u(), u(), u(), u()).prop_map(|(r, itt, s, e, m)| Bhs::TaskMgmtResponse(
            TaskMgmtResponse {
                response: r,
                itt,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m
            }
        )),
        (
            any::<[bool; 2]>(),
            0u8..4,
            0u8..4,
            any::<[u8; 4]>(),
            any::<[u8; 6]>(),
            any::<u16>(),
            u(),
            u(),
            u(),
            u()
        )
            .prop_map(
                |(tc, csg, nsg, v, isid, tsih, itt, s, e, m)| Bhs::LoginResponse(LoginResponse {
                    transit: tc[0],
                    cont: tc[1],
                    csg,
                    nsg,
                    version_max: v[0],
                    version_active: v[1],
                    isid,
                    tsih,
                    itt,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    status_class: v[2],
                    status_detail: v[3]
                })
            ),
        (any::<[bool; 2]>(), l(), u(), u(), u(), u(), u()).prop_map(
            |(f, lun, itt, ttt, s, e, m)| Bhs::TextResponse(TextResponse {
                final_: f[0],
                cont: f[1],
                lun,
                itt,
                ttt,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m
            })
        ),
        (
            any::<[bool; 4]>(),
            any::<Option<u8>>(),
            l(),
            (u(), u(), u(), u(), u()),
            (u(), u(), u())
        )
            .prop_map(
                |(f, status, lun, (itt, ttt, s, e, m), (d, o, r))| Bhs::DataIn(DataIn {
                    final_: f[0],
                    ack: f[1],
                    overflow: f[2],
                    underflow: f[3],
                    status,
                    lun,
                    itt,
                    ttt,
                    stat_sn: s,
                    exp_cmd_sn: e,
                    max_cmd_sn: m,
                    data_sn: d,
                    buffer_offset: o,
                    residual: r
                })
            ),
        (any::<u8>(), u(), u(), u(), u(), any::<[u16; 2]>()).prop_map(|(r, itt, s, e, m, t)| {
            Bhs::LogoutResponse(LogoutResponse {
                response: r,
                itt,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m,
                time2wait: t[0],
                time2retain: t[1],
            })
        }),
        (l(), (u(), u(), u(), u(), u()), (u(), u(), u())).prop_map(
            |(lun, (itt, ttt, s, e, m), (sn, o, len))| Bhs::R2t(R2t {
                lun,
                itt,
                ttt,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m,
                r2t_sn: sn,
                buffer_offset: o,
                desired_len: len
            })
        ),
        (l(), u(), u(), u(), any::<[u8; 2]>(), any::<[u16; 3]>()).prop_map(
            |(lun, s, e, m, ev, p)| Bhs::AsyncMessage(AsyncMessage {
                lun,
                stat_sn: s,
                exp_cmd_sn: e,
                max_cmd_sn: m,
                event: ev[0],
                vcode: ev[1],
                param1: p[0],
                param2: p[1],
                param3: p[2]
            })
        ),
        (any::<u8>(), u(), u(), u(), u()).prop_map(|(r, s, e, m, d)| Bhs::Reject(Reject {
            reason: r,
            stat_sn: s,
            exp_cmd_sn: e,
            max_cmd_sn: m,
            data_sn: d
        })),
    ]
}

fn arb_ahs() -> impl Strategy<Value = Vec<Ahs>> {
    prop::collection::vec(
        (any::<u8>(), prop::collection::vec(any::<u8>(), 1..40)).prop_map(|(t, d)| Ahs {
            ahs_type: t,
            data: d,
        }),
        0..3,
    )
}

proptest! {
    #[test]
    fn pdu_roundtrip(bhs in arb_bhs(), ahs in arb_ahs(), data in prop::collection::vec(any::<u8>(), 0..300),
                     hd in any::<bool>(), dd in any::<bool>()) {
        let dg = Digests { header: hd, data: dd };
        let pdu = Pdu { bhs, ahs, data };
        let bytes = pdu.encode(dg).unwrap();
        prop_assert_eq!(bytes.len() % 4, 0);
        // Every strict prefix is incomplete.
        for cut in [0usize, 1, 47, bytes.len() - 1] {
            if cut < bytes.len() {
                let r = Pdu::decode(&bytes[..cut], 1 << 20, dg).unwrap();
                prop_assert!(matches!(r, Decoded::Incomplete(_)), "cut {} gave {:?}", cut, r);
            }
        }
        let back = Pdu::decode(&bytes, 1 << 20, dg).unwrap();
        prop_assert_eq!(back, Decoded::Complete(pdu));
    }

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200), hd in any::<bool>(), dd in any::<bool>()) {
        let _ = Pdu::decode(&bytes, 64, Digests { header: hd, data: dd });
    }
}

#[test]
fn data_segment_limit_enforced_on_header() {
    let pdu = Pdu::new(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 1,
            ttt: RESERVED_TAG,
            cmd_sn: 1,
            exp_stat_sn: 1,
        }),
        vec![0u8; 100],
    );
    let bytes = pdu.encode(Digests::default()).unwrap();
    let r = Pdu::decode(&bytes[..48], 64, Digests::default());
    assert_eq!(r, Err(PduError::DataSegmentTooLong { len: 100, max: 64 }));
}

#[test]
fn digest_errors_detected() {
    let dg = Digests {
        header: true,
        data: true,
    };
    let pdu = Pdu::new(
        Bhs::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt: 1,
            ttt: RESERVED_TAG,
            cmd_sn: 1,
            exp_stat_sn: 1,
        }),
        b"ping".to_vec(),
    );
    let mut bytes = pdu.encode(dg).unwrap();
    bytes[53] ^= 1; // data
    assert!(matches!(
        Pdu::decode(&bytes, 1024, dg),
        Err(PduError::DataDigest { .. })
    ));
    bytes[53] ^= 1;
    bytes[20] ^= 1; // header
    assert!(matches!(
        Pdu::decode(&bytes, 1024, dg),
        Err(PduError::HeaderDigest { .. })
    ));
}

#[test]
fn crc32c_known_vector() {
    // RFC 3720 B.4: 32 bytes of zeros -> aa 36 91 8a on the wire.
    assert_eq!(
        frame::data_digest(&[0u8; 32]).to_le_bytes(),
        [0xaa, 0x36, 0x91, 0x8a]
    );
}

#[test]
fn unknown_opcode_and_bad_ahs() {
    let mut b = [0u8; 48];
    b[0] = 0x1c;
    assert_eq!(Bhs::decode(&b), Err(PduError::UnknownOpcode(0x1c)));
    assert_eq!(frame::parse_ahs(&[0, 9, 1, 0]), Err(PduError::BadAhs));
    assert_eq!(frame::parse_ahs(&[0, 0, 1, 0]), Err(PduError::BadAhs));
    let a = frame::parse_ahs(&[0, 5, 2, 0, 0, 0, 16, 0]).unwrap();
    assert_eq!(a, vec![Ahs::bidi_read_len(4096)]);
}
