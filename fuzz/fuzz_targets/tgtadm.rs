//! tgtadm management requests: a sequence of raw requests, each decoded by `tgtadm_wire`
//! (`ReqHeader::decode`, `Payload::parse`) and executed by numatgtd's management handlers
//! (`target_server::fuzzing::Daemon::request`: the code behind the management socket,
//! without the socket and without its `catch_unwind`) against one in-memory registry (an
//! open target, tid 1), so later requests see what earlier ones created: targets, LUNs on
//! sandboxed backing files, ACLs, accounts and their bindings, session keys.
//!
//! Input: records of a flags byte, a big-endian u16 length and that many bytes of request
//! (120-byte header, little-endian as tgtadm sends it, then the `key=value,...` payload).
//! Flags bit 0 set: the header's `len` is rewritten to the record's length (so the payload
//! is read), bit 1 set: the driver name is cut to its first 8 bytes (a NUL at byte 16).
//! At most 64 records.
//!
//! Checks: no panic; a decoded header re-encodes to the same header; every request the
//! socket would answer gets a response whose header parses, whose `err` is one of tgtd's
//! codes and whose `len` is the response's size; a failed request has no text, a text is
//! UTF-8 ending in its one NUL. `NUMATGT_FUZZ_TRACE=1` prints every request's answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::Input;
use target_server::fuzzing::Daemon;
use tgtadm_wire::{
    ErrCode, Payload, REQ_HEADER_LEN, RSP_HEADER_LEN, ReqHeader, decode_response_header,
};

fn sandbox() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("numatgt-fuzz-tgtadm-{}", std::process::id()))
}

fn check_wire(req: &[u8]) {
    let Ok(h) = ReqHeader::decode(req) else {
        return;
    };
    assert!(h.lld.len() < 64 && !h.lld.contains('\0'));
    let body = &req[REQ_HEADER_LEN..req.len().min(h.len as usize).max(REQ_HEADER_LEN)];
    if let Ok(p) = Payload::parse(body) {
        for (k, v) in p.pairs.iter().chain(p.params.iter()) {
            assert!(!k.contains(',') && !v.contains(',') && !k.contains('\0'));
        }
        let _ = p.get("targetname");
    }
    let again = ReqHeader::decode(&h.encode("")).expect("an encoded header decodes");
    assert_eq!(
        ReqHeader {
            len: h.len,
            ..again
        },
        h,
        "header round trip"
    );
}

fn check_response(r: &[u8]) {
    assert!(r.len() >= RSP_HEADER_LEN, "short response");
    let head: [u8; RSP_HEADER_LEN] = r[..RSP_HEADER_LEN].try_into().expect("8 bytes");
    let (err, len) = decode_response_header(&head);
    assert_eq!(len as usize, r.len(), "response len field");
    let code = ErrCode::from_u32(err).expect("a tgtd error code");
    let text = &r[RSP_HEADER_LEN..];
    if code != ErrCode::Success {
        assert!(text.is_empty(), "error {code:?} with text");
    }
    if !text.is_empty() {
        assert_eq!(text.last(), Some(&0), "text without its NUL");
        let t = std::str::from_utf8(&text[..text.len() - 1]).expect("UTF-8 text");
        assert!(!t.contains('\0'), "NUL inside the text");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let daemon = Daemon::new(&sandbox());
    let mut n = 0;
    while !inp.is_empty() && n < 64 {
        n += 1;
        let flags = inp.u8();
        let len = usize::from(inp.u16());
        let mut req = inp.bytes(len).to_vec();
        if flags & 1 != 0 && req.len() >= REQ_HEADER_LEN {
            let l = (req.len() as u32).to_le_bytes();
            req[72..76].copy_from_slice(&l);
        }
        if flags & 2 != 0 && req.len() >= REQ_HEADER_LEN {
            req[16] = 0;
        }
        check_wire(&req);
        if let Some(r) = daemon.request(&req) {
            if numatgt_fuzz::trace() {
                eprintln!(
                    "request {:02x?}: {:?}",
                    req.get(..8),
                    String::from_utf8_lossy(&r)
                );
            }
            check_response(&r);
        }
    }
});
