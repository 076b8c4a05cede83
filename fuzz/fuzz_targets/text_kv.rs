//! Text keys: `kv::parse` of arbitrary key=value data, the C-bit `Accumulator`, and the
//! negotiation of every parsed pair through a `Negotiator` built from a fuzzed target
//! configuration, in a fuzzed phase.
//!
//! Input: byte 0 = phase (bits 0-1) / discovery (bit 2) / digest offers (bits 3-4),
//! bytes 1..13 = target limits (MaxRecvDataSegmentLength, MaxBurstLength, FirstBurstLength,
//! big endian u32 each), byte 13 = chunk size for the accumulator, the rest = text.
//!
//! Checks: no panic; answers are well-formed text that parses back to the same pairs;
//! negotiated parameters stay within RFC 7143's ranges and the target's limits; a second
//! exchange with the same keys is not a duplicate after `begin_exchange`.
#![no_main]

use iscsi_proto::ConnConfig;
use iscsi_proto::Digest;
use iscsi_proto::text::kv::{self, Accumulator};
use iscsi_proto::text::negotiate::{Negotiator, Phase, parse_num};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let phase = match flags & 3 {
        0 => Phase::Security,
        1 => Phase::Operational,
        _ => Phase::FullFeature,
    };
    let digests = match (flags >> 3) & 3 {
        0 => vec![Digest::None, Digest::Crc32c],
        1 => vec![Digest::Crc32c],
        2 => vec![Digest::None],
        _ => vec![Digest::Crc32c, Digest::None],
    };
    let cfg = ConnConfig {
        max_recv_data_segment_length: inp.u32(),
        max_burst_length: inp.u32(),
        first_burst_length: inp.u32(),
        header_digest: digests.clone(),
        data_digest: digests,
        ..ConnConfig::default()
    };
    let chunk = usize::from(inp.u8()).max(1);
    let text = inp.rest();

    // The accumulator rebuilds text split over PDUs (or refuses more than its limit).
    let mut acc = Accumulator::new(4096);
    let parts = kv::split(text, chunk);
    let mut whole = None;
    for (i, p) in parts.iter().enumerate() {
        match acc.push(p, i + 1 < parts.len()) {
            Ok(Some(t)) => whole = Some(t),
            Ok(None) => assert!(i + 1 < parts.len()),
            Err(_) => {
                assert!(text.len() > 4096);
                break;
            }
        }
    }
    if text.len() <= 4096 {
        assert_eq!(whole.as_deref(), Some(text));
    }

    let Ok(pairs) = kv::parse(text) else {
        return;
    };
    // encode ∘ parse is the identity on parsed pairs
    assert_eq!(kv::parse(&kv::encode(&pairs)).as_ref(), Ok(&pairs));

    let offer = cfg.offer();
    let mut neg = Negotiator::new(offer.clone());
    neg.discovery = flags & 4 != 0;
    let mut answers = Vec::new();
    let mut dup = false;
    for (k, v) in &pairs {
        let _ = parse_num(v);
        match neg.respond(k, v, phase) {
            Ok(Some(a)) => answers.push((k.clone(), a)),
            Ok(None) => {}
            Err(_) => dup = true,
        }
    }
    let enc = kv::encode(&answers);
    assert_eq!(
        kv::parse(&enc).as_ref(),
        Ok(&answers),
        "answers must be valid text"
    );

    let p = neg.finish();
    let r24 = 512..=0xff_ffff;
    assert!(r24.contains(&p.max_burst_length), "{p:?}");
    assert!(r24.contains(&p.first_burst_length), "{p:?}");
    assert!(p.first_burst_length <= p.max_burst_length, "{p:?}");
    assert!(
        r24.contains(&p.initiator_max_recv_data_segment_length),
        "{p:?}"
    );
    assert!(
        p.max_burst_length <= offer.max_burst_length.max(262_144),
        "{p:?}"
    );
    assert!((1..=65535).contains(&p.max_outstanding_r2t), "{p:?}");
    assert!(
        p.max_outstanding_r2t <= offer.max_outstanding_r2t.max(1),
        "{p:?}"
    );
    assert!(p.max_connections >= 1 && p.max_connections <= offer.max_connections.max(1));
    assert!(
        p.default_time2wait <= 3600 && p.default_time2retain <= 3600,
        "{p:?}"
    );
    assert_eq!(p.error_recovery_level, 0, "{p:?}");
    if !offer.immediate_data {
        assert!(!p.immediate_data);
    }
    if offer.initial_r2t {
        assert!(p.initial_r2t);
    }

    // A later exchange (full feature phase Text request) may repeat the keys.
    neg.begin_exchange();
    for (k, v) in &pairs {
        if neg.respond(k, v, Phase::FullFeature).is_err() {
            dup = true;
        }
    }
    let _ = dup;
});
