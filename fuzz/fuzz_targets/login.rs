//! Login: arbitrary bytes fed as a sequence of Login Request PDUs to a fresh Connection
//! (test Directory: a normal target, a target with its own small limits, an ACL-refused
//! one, discovery), then the login timeout tick. A second pass feeds the same records to
//! a connection whose Directory requires CHAP (mutual accounts on the normal target,
//! one-way MD5-only on the small one, one-way for discovery) with a deterministic random
//! source; there a key `CHAP_R=?` is replaced by user "alice"'s correct response to the
//! target's last challenge, so the fuzzer gets past authentication.
//!
//! Input: byte 0 = read size for the socket (chunking), then records of a 48-byte header
//! (its opcode is forced to Login Request; bit 0 of byte 4 asks for a one-word AHS taken
//! from the data), a big-endian u16 data length and the data (see `login_record`).
//!
//! Checks: no panic; every byte the target sends parses as a target PDU; bounded
//! buffers and tasks; at most one LoggedIn; a CHAP login only succeeds for "alice", and
//! no failure text carries a secret.
#![no_main]

use iscsi_proto::pdu::{Bhs, Decoded, Digests, Pdu, check_frame, op};
use iscsi_proto::text::{binary, kv};
use iscsi_proto::{
    AuthPolicy, ChapAlgorithm, ChapCredential, ChapPolicy, ConnConfig, ConnError, Connection,
    Directory, Event, LoginGrant, LoginReject, LoginRequestInfo, TargetRecord,
};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::{Harness, Input, TARGET, TARGET_ACL, TARGET_SMALL, frame_raw};
use std::net::SocketAddr;

const ALICE_SECRET: &str = "alice-secret-1234";
const TARGET_SECRET: &str = "target-secret-5678";

/// The test directory's targets, all behind CHAP.
struct ChapDir;

impl Directory for ChapDir {
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
        match req.target_name {
            None | Some(TARGET) | Some(TARGET_SMALL) => Ok(LoginGrant {
                tsih: 0x21,
                target_portal_group_tag: 1,
                target_alias: None,
                config: None,
            }),
            Some(TARGET_ACL) => Err(LoginReject::NotAuthorized),
            _ => Err(LoginReject::TargetNotFound),
        }
    }
    fn send_targets(
        &self,
        _: &str,
        _: SocketAddr,
        _: SocketAddr,
        _: Option<&str>,
    ) -> Vec<TargetRecord> {
        Vec::new()
    }
    fn auth_policy(&self, req: &LoginRequestInfo<'_>) -> AuthPolicy {
        let alice = vec![ChapCredential::new("alice", ALICE_SECRET)];
        AuthPolicy::Chap(match req.target_name {
            Some(TARGET_SMALL) => ChapPolicy {
                algorithms: vec![ChapAlgorithm::Md5],
                ..ChapPolicy::new(alice, None)
            },
            Some(_) => ChapPolicy::new(alice, Some(ChapCredential::new("target", TARGET_SECRET))),
            None => ChapPolicy::new(alice, None),
        })
    }
}

/// Replaces every `CHAP_R=?` pair by alice's response to `last` (algorithm, id, challenge).
fn substitute(data: &[u8], last: &Option<(ChapAlgorithm, u8, Vec<u8>)>) -> Vec<u8> {
    let Some((alg, id, c)) = last else {
        return data.to_vec();
    };
    let answer = format!(
        "CHAP_R={}",
        binary::encode_hex(&alg.response(*id, ALICE_SECRET.as_bytes(), c))
    );
    let mut out = Vec::with_capacity(data.len() + 64);
    for (i, item) in data.split(|&b| b == 0).enumerate() {
        if i > 0 {
            out.push(0);
        }
        if item == b"CHAP_R=?" {
            out.extend_from_slice(answer.as_bytes());
        } else {
            out.extend_from_slice(item);
        }
    }
    out
}

fn chap_pass(records: &[([u8; 48], &[u8], &[u8])], chunk: usize) {
    let peer: SocketAddr = "127.0.0.1:50001".parse().expect("address");
    let local: SocketAddr = "127.0.0.1:3260".parse().expect("address");
    let mut c: Connection<Vec<u8>> = Connection::new(ConnConfig::default(), peer, local);
    let mut n = 0u8;
    c.set_random_source(Box::new(move |b: &mut [u8]| {
        for x in b {
            *x = n;
            n = n.wrapping_add(0x3b);
        }
        Ok(())
    }));
    let mut last: Option<(ChapAlgorithm, u8, Vec<u8>)> = None;
    let now = 1000;
    for (hdr, ahs, data) in records {
        if c.is_closing() {
            break;
        }
        let wire = frame_raw(hdr, ahs, &substitute(data, &last), Digests::default());
        let mut off = 0;
        while off < wire.len() && !c.is_closing() {
            let space = c.rx_space();
            let k = space.len().min(wire.len() - off).min(chunk);
            space[..k].copy_from_slice(&wire[off..off + k]);
            c.rx_commit(k, &ChapDir, now);
            off += k;
        }
        let mut bytes = Vec::new();
        while c.has_tx() {
            let mut v = Vec::new();
            c.gather_tx(&mut v, 16);
            let sent: usize = v.iter().map(|s| s.len()).sum();
            for s in &v {
                bytes.extend_from_slice(s);
            }
            c.tx_consumed(sent);
        }
        let mut at = 0;
        while at < bytes.len() {
            let Ok(Decoded::Complete(f)) = check_frame(&bytes[at..], 1 << 24, Digests::default())
            else {
                panic!("target sent an unparsable PDU");
            };
            let Ok(Decoded::Complete(p)) = Pdu::decode(&bytes[at..], 1 << 24, Digests::default())
            else {
                panic!("target sent an undecodable PDU");
            };
            at += f.total;
            if let Bhs::LoginResponse(_) = p.bhs {
                let keys = kv::parse(&p.data).expect("target login text parses");
                let get = |name: &str| keys.iter().find(|(k, _)| k == name).map(|(_, v)| v);
                if let (Some(a), Some(i), Some(ch)) = (get("CHAP_A"), get("CHAP_I"), get("CHAP_C"))
                {
                    let alg = a.parse().ok().and_then(ChapAlgorithm::from_code);
                    let id = i.parse().ok();
                    let ch = binary::decode(ch, 1024).ok();
                    if let (Some(alg), Some(id), Some(ch)) = (alg, id, ch) {
                        last = Some((alg, id, ch));
                    }
                }
            }
        }
        while let Some(e) = c.poll_event() {
            match e {
                Event::LoggedIn(info) => {
                    // authenticated, and as the only account there is
                    let chap = info.chap.expect("a CHAP target logged in without CHAP");
                    assert_eq!(chap.user, "alice");
                    return;
                }
                Event::Close(err) => {
                    let text = format!("{err} {err:?}");
                    assert!(!text.contains(ALICE_SECRET) && !text.contains(TARGET_SECRET));
                    if let ConnError::LoginFailed { auth: Some(f), .. } = &err {
                        assert!(!f.reason.as_str().is_empty());
                    }
                }
                _ => {}
            }
        }
    }
    c.on_tick(now + iscsi_proto::conn::LOGIN_TIMEOUT_MS + 1);
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let chunk = match inp.u8() {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let mut records = Vec::new();
    while inp.len() >= 48 && records.len() < 32 {
        let mut hdr: [u8; 48] = inp.array();
        hdr[0] = (hdr[0] & 0x40) | op::LOGIN_REQ;
        let len = usize::from(inp.u16());
        let body = inp.bytes(len);
        let (ahs, data) = if hdr[4] & 1 != 0 {
            body.split_at(body.len().min(4))
        } else {
            (&[][..], body)
        };
        records.push((hdr, ahs, data));
    }
    let mut h = Harness::new(ConnConfig::default());
    for (hdr, ahs, data) in &records {
        if h.c.is_closing() {
            break;
        }
        let wire = frame_raw(hdr, ahs, data, Digests::default());
        h.feed(&wire, chunk);
        h.drain_tx(usize::MAX);
    }
    // whatever state the login reached: the timeout must close it cleanly
    h.tick(iscsi_proto::conn::LOGIN_TIMEOUT_MS + 1);
    h.finish();

    chap_pass(&records, chunk);
});
