//! PDU decoding: `check_frame`, `Pdu::decode`, `Bhs::decode` and `parse_ahs` on arbitrary
//! bytes, with and without header / data digests, under any MaxRecvDataSegmentLength.
//!
//! Input: byte 0 = digests (bit 0 header, bit 1 data), bytes 1..5 = the data segment
//! limit (big endian), the rest = the receive buffer.
//!
//! Checks: no panic; `check_frame` and `Pdu::decode` agree; a complete frame lies within
//! the buffer and an incomplete one asks for more than there is; decode ∘ encode ∘ decode
//! = decode (whatever decodes re-encodes to something that decodes the same); walking the
//! buffer PDU by PDU as the connection does always makes progress.
#![no_main]

use iscsi_proto::pdu::{Bhs, Decoded, Digests, Frame, Pdu, check_frame, frame};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let dg = Digests {
        header: flags & 1 != 0,
        data: flags & 2 != 0,
    };
    let max = inp.u32();
    let buf = inp.rest();

    let framed = check_frame(buf, max, dg);
    let decoded = Pdu::decode(buf, max, dg);
    match (&framed, &decoded) {
        (Ok(Decoded::Complete(f)), Ok(Decoded::Complete(p))) => {
            assert!(f.total <= buf.len());
            assert!(f.data_len as u64 <= u64::from(max));
            assert_eq!(p.data.len(), f.data_len);
            roundtrip(p, dg);
        }
        (Ok(Decoded::Complete(_)), Err(_)) => {} // unknown opcode or bad AHS
        (Ok(Decoded::Incomplete(n)), Ok(Decoded::Incomplete(m))) => {
            assert_eq!(n, m);
            assert!(
                *n > buf.len(),
                "asks for {n} bytes with {} there",
                buf.len()
            );
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        other => panic!("check_frame and Pdu::decode disagree: {other:?}"),
    }

    if buf.len() >= 48 {
        let hdr: &[u8; 48] = buf[..48].try_into().expect("48 bytes");
        if let Ok(bhs) = Bhs::decode(hdr) {
            // every field that decodes survives an encode / decode round trip
            let again = Bhs::decode(&bhs.encode(hdr[4], 0)).expect("re-encoded BHS decodes");
            assert_eq!(again, bhs);
        }
        let f = Frame::from_header(hdr, dg);
        let _ = frame::parse_ahs(&buf[48..(48 + f.ahs_len).min(buf.len())]);
    }

    // The connection's receive loop: skip whole frames, also over errors.
    let mut off = 0;
    let mut steps = 0;
    while off < buf.len() && steps < 64 {
        steps += 1;
        let rest = &buf[off..];
        match check_frame(rest, max, dg) {
            Ok(Decoded::Incomplete(_)) => break,
            Ok(Decoded::Complete(f)) => {
                let _ = Bhs::decode(f.header(rest));
                let _ = frame::parse_ahs(f.ahs(rest));
                let _ = f.data(rest);
                assert!(f.total >= 48);
                off += f.total;
            }
            Err(_) => {
                if rest.len() < 48 {
                    break;
                }
                let hdr: &[u8; 48] = rest[..48].try_into().expect("48 bytes");
                let f = Frame::from_header(hdr, dg);
                if f.total > rest.len() {
                    break;
                }
                off += f.total;
            }
        }
    }
});

fn roundtrip(p: &Pdu, dg: Digests) {
    let bytes = p.encode(dg).expect("a decoded PDU re-encodes");
    match Pdu::decode(&bytes, u32::MAX, dg) {
        Ok(Decoded::Complete(q)) => assert_eq!(&q, p),
        other => panic!("re-encoded PDU does not decode: {other:?}"),
    }
}
