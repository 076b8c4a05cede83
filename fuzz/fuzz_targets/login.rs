//! Login: arbitrary bytes fed as a sequence of Login Request PDUs to a fresh Connection
//! (test Directory: a normal target, a target with its own small limits, an ACL-refused
//! one, discovery), then the login timeout tick.
//!
//! Input: byte 0 = read size for the socket (chunking), then records of a 48-byte header
//! (its opcode is forced to Login Request; bit 0 of byte 4 asks for a one-word AHS taken
//! from the data), a big-endian u16 data length and the data (see `login_record`).
//!
//! Checks: no panic; every byte the target sends parses as a target PDU; bounded
//! buffers and tasks; at most one LoggedIn.
#![no_main]

use iscsi_proto::ConnConfig;
use iscsi_proto::pdu::{Digests, op};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::{Harness, Input, frame_raw};

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let chunk = match inp.u8() {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let mut h = Harness::new(ConnConfig::default());
    let mut records = 0;
    while inp.len() >= 48 && records < 32 && !h.c.is_closing() {
        records += 1;
        let mut hdr: [u8; 48] = inp.array();
        hdr[0] = (hdr[0] & 0x40) | op::LOGIN_REQ;
        let len = usize::from(inp.u16());
        let body = inp.bytes(len);
        let (ahs, data) = if hdr[4] & 1 != 0 {
            body.split_at(body.len().min(4))
        } else {
            (&[][..], body)
        };
        let wire = frame_raw(&hdr, ahs, data, Digests::default());
        h.feed(&wire, chunk);
        h.drain_tx(usize::MAX);
    }
    // whatever state the login reached: the timeout must close it cleanly
    h.tick(iscsi_proto::conn::LOGIN_TIMEOUT_MS + 1);
    h.finish();
});
