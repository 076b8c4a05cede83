//! CHAP through the whole [`LoginMachine`]: known-answer digests, one-way and mutual
//! logins with every algorithm, hex and base64 values, and every refusal (wrong secret,
//! unknown user, None offered, reflection, reused secret, malformed values, keys out of
//! order, no random source), plus a property test that arbitrary CHAP values never panic.

use super::*;
use crate::text::binary;
use proptest::prelude::*;
use sha2::Digest as _;
use std::sync::Mutex;

const ALICE: &str = "alice-secret-1234";
const TARGET_SECRET: &str = "target-secret-5678";

/// A directory with CHAP targets; records the `authenticated` calls.
#[derive(Default)]
struct ChapDir {
    seen: Mutex<Vec<Option<ChapIdentity>>>,
}

fn policy(target: Option<&str>) -> AuthPolicy {
    let alice = || ChapCredential::new("alice", ALICE);
    let out = || Some(ChapCredential::new("target", TARGET_SECRET));
    match target {
        None => AuthPolicy::Chap(ChapPolicy::new(
            vec![ChapCredential::new("disc", "discovery-secret")],
            None,
        )),
        Some("iqn.t:chap") => AuthPolicy::Chap(ChapPolicy::new(vec![alice()], out())),
        Some("iqn.t:oneway") => AuthPolicy::Chap(ChapPolicy::new(vec![alice()], None)),
        Some("iqn.t:md5") => AuthPolicy::Chap(ChapPolicy {
            algorithms: vec![ChapAlgorithm::Md5],
            ..ChapPolicy::new(vec![alice()], None)
        }),
        Some("iqn.t:reuse") => AuthPolicy::Chap(ChapPolicy::new(
            vec![ChapCredential::new("alice", TARGET_SECRET)],
            out(),
        )),
        _ => AuthPolicy::None,
    }
}

impl Directory for ChapDir {
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
        match req.target_name {
            Some("iqn.t:acl") => Err(LoginReject::NotAuthorized),
            _ => Ok(LoginGrant {
                tsih: 9,
                target_portal_group_tag: 1,
                target_alias: None,
                config: None,
            }),
        }
    }
    fn send_targets(
        &self,
        _: &str,
        _: SocketAddr,
        _: SocketAddr,
        _: Option<&str>,
    ) -> Vec<TargetRecord> {
        vec![]
    }
    fn auth_policy(&self, req: &LoginRequestInfo<'_>) -> AuthPolicy {
        policy(req.target_name)
    }
    fn authenticated(
        &self,
        _req: &LoginRequestInfo<'_>,
        chap: Option<&ChapIdentity>,
    ) -> Result<(), LoginReject> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(chap.cloned());
        Ok(())
    }
}

/// Deterministic "random" bytes: 0x10, 0x11, ...
fn counter() -> Box<dyn RandomSource> {
    let mut n = 0x10u8;
    Box::new(move |buf: &mut [u8]| {
        for b in buf {
            *b = n;
            n = n.wrapping_add(1);
        }
        Ok(())
    })
}

fn addr() -> SocketAddr {
    "127.0.0.1:3260".parse().unwrap()
}

fn req(csg: u8, nsg: u8, t: bool) -> LoginRequest {
    LoginRequest {
        transit: t,
        cont: false,
        csg,
        nsg,
        version_max: 0,
        version_min: 0,
        isid: [0x80, 0, 0, 0, 0, 1],
        tsih: 0,
        itt: 1,
        cid: 0,
        cmd_sn: 5,
        exp_stat_sn: 9,
    }
}

fn machine() -> LoginMachine {
    let mut m = LoginMachine::new(LoginConfig {
        offer: Offer::default(),
        max_login_pdus: 16,
    });
    m.set_random_source(counter());
    m
}

fn text(s: &str) -> Vec<u8> {
    s.replace(';', "\0").into_bytes()
}

fn keys(out: &[u8]) -> Vec<(String, String)> {
    kv::parse(out).unwrap()
}

fn get<'a>(k: &'a [(String, String)], name: &str) -> Option<&'a str> {
    k.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Independent digest of id ‖ secret ‖ challenge, straight from the crates.
fn digest(alg: u8, id: u8, secret: &[u8], challenge: &[u8]) -> Vec<u8> {
    let mut m = vec![id];
    m.extend_from_slice(secret);
    m.extend_from_slice(challenge);
    match alg {
        5 => md5::Md5::digest(&m).to_vec(),
        6 => sha1::Sha1::digest(&m).to_vec(),
        7 => sha2::Sha256::digest(&m).to_vec(),
        8 => sha3::Sha3_256::digest(&m).to_vec(),
        _ => unreachable!(),
    }
}

struct Login {
    m: LoginMachine,
    dir: ChapDir,
}

impl Login {
    fn new() -> Self {
        Login {
            m: machine(),
            dir: ChapDir::default(),
        }
    }
    fn send(&mut self, r: LoginRequest, t: &str) -> LoginStep {
        self.m.handle(&r, &text(t), &self.dir, addr(), addr())
    }
    /// Security stage up to the target's challenge: returns (algorithm, id, challenge).
    fn challenge(&mut self, target: &str, chap_a: &str) -> (u8, u8, Vec<u8>) {
        let first = format!(
            "InitiatorName=iqn.i;SessionType=Normal;TargetName={target};AuthMethod=CHAP,None;"
        );
        let LoginStep::Continue(r, out) = self.send(req(0, 1, true), &first) else {
            panic!("AuthMethod step failed")
        };
        assert!(!r.transit, "must not leave the security stage before CHAP");
        assert_eq!(get(&keys(&out), "AuthMethod"), Some("CHAP"));
        let LoginStep::Continue(r, out) = self.send(req(0, 1, false), &format!("CHAP_A={chap_a};"))
        else {
            panic!("CHAP_A step failed")
        };
        assert!(!r.transit);
        let k = keys(&out);
        let a: u8 = get(&k, "CHAP_A").unwrap().parse().unwrap();
        let id: u8 = get(&k, "CHAP_I").unwrap().parse().unwrap();
        let c = binary::decode(get(&k, "CHAP_C").unwrap(), 1024).unwrap();
        (a, id, c)
    }
    fn fail(&mut self, r: LoginRequest, t: &str) -> (u8, u8, AuthFailure) {
        match self.send(r, t) {
            LoginStep::Fail(r, _, why, Some(f)) => {
                assert!(!why.contains(ALICE) && !why.contains(TARGET_SECRET));
                (r.status_class, r.status_detail, f)
            }
            other => panic!("expected an authentication failure, got {other:?}"),
        }
    }
}

#[test]
fn known_answer_vectors() {
    // id ‖ secret ‖ challenge = "abc": the FIPS 180 / FIPS 202 "abc" vectors.
    let abc = |alg: ChapAlgorithm| binary::encode_hex(&alg.response(b'a', b"b", b"c"));
    assert_eq!(
        abc(ChapAlgorithm::Md5),
        "0x900150983cd24fb0d6963f7d28e17f72"
    );
    assert_eq!(
        abc(ChapAlgorithm::Sha1),
        "0xa9993e364706816aba3e25717850c26c9cd0d89d"
    );
    assert_eq!(
        abc(ChapAlgorithm::Sha256),
        "0xba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        abc(ChapAlgorithm::Sha3_256),
        "0x3a985da74fe225b2045c172d6bd390bd855f086e3e9d525b46bfe24511431532"
    );
    // and a CHAP-shaped input against the crates used directly
    for alg in ChapAlgorithm::ALL {
        let c = [0x5a; 16];
        assert_eq!(
            alg.response(0x42, ALICE.as_bytes(), &c),
            digest(alg.code(), 0x42, ALICE.as_bytes(), &c)
        );
        assert_eq!(alg.response(1, b"s", &c).len(), alg.digest_len());
        assert_eq!(ChapAlgorithm::from_code(u64::from(alg.code())), Some(alg));
    }
    assert_eq!(
        [5, 6, 7, 8].map(|c| ChapAlgorithm::from_code(c).map(ChapAlgorithm::name)),
        [
            Some("MD5"),
            Some("SHA-1"),
            Some("SHA-256"),
            Some("SHA3-256")
        ]
    );
    assert_eq!(ChapAlgorithm::from_code(4), None);
    assert_eq!(ChapAlgorithm::from_code(261), None);
}

#[test]
fn one_way_login_each_algorithm() {
    for code in [5u8, 6, 7, 8] {
        let mut l = Login::new();
        let (a, id, c) = l.challenge("iqn.t:oneway", &code.to_string());
        assert_eq!(a, code);
        let alg = ChapAlgorithm::from_code(code.into()).unwrap();
        assert_eq!(c.len(), alg.digest_len(), "challenge as long as the digest");
        let r = binary::encode_hex(&digest(code, id, ALICE.as_bytes(), &c));
        let LoginStep::Continue(resp, out) =
            l.send(req(0, 1, true), &format!("CHAP_N=alice;CHAP_R={r};"))
        else {
            panic!("{code}: response refused")
        };
        assert!(resp.transit && resp.nsg == 1, "{code}");
        assert!(out.is_empty(), "one-way: the target sends no CHAP_N/CHAP_R");
        let LoginStep::Complete(resp, _, info) =
            l.send(req(1, 3, true), "MaxRecvDataSegmentLength=65536;")
        else {
            panic!()
        };
        assert_eq!(resp.tsih, 9);
        let want = ChapIdentity {
            user: "alice".into(),
            algorithm: alg,
            mutual: false,
        };
        assert_eq!(info.chap.as_ref(), Some(&want));
        assert_eq!(*l.dir.seen.lock().unwrap(), vec![Some(want)]);
    }
}

#[test]
fn mutual_login() {
    let mut l = Login::new();
    let (a, id, c) = l.challenge("iqn.t:chap", "7,5");
    assert_eq!(a, 7);
    let r = binary::encode_hex(&digest(7, id, ALICE.as_bytes(), &c));
    let my_c = [0xa5u8; 24];
    let LoginStep::Continue(resp, out) = l.send(
        req(0, 1, true),
        &format!(
            "CHAP_N=alice;CHAP_R={r};CHAP_I=77;CHAP_C={};",
            binary::encode_hex(&my_c)
        ),
    ) else {
        panic!()
    };
    assert!(resp.transit);
    let k = keys(&out);
    assert_eq!(get(&k, "CHAP_N"), Some("target"));
    let want = digest(7, 77, TARGET_SECRET.as_bytes(), &my_c);
    assert_eq!(
        binary::decode(get(&k, "CHAP_R").unwrap(), 64).unwrap(),
        want
    );
    let LoginStep::Complete(_, _, info) = l.send(req(1, 3, true), "") else {
        panic!()
    };
    assert!(info.chap.is_some_and(|i| i.mutual && i.user == "alice"));
}

#[test]
fn base64_values_and_late_transit() {
    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:chap", "0x5");
    let r = binary::encode_base64(&digest(5, id, ALICE.as_bytes(), &c));
    let my_c = binary::encode_base64(b"sixteen byte chl");
    // T=0 here: the target answers and stays in the security stage
    let LoginStep::Continue(resp, out) = l.send(
        req(0, 1, false),
        &format!("CHAP_N=alice;CHAP_R={r};CHAP_I=0x0;CHAP_C={my_c};"),
    ) else {
        panic!()
    };
    assert!(!resp.transit);
    let k = keys(&out);
    assert_eq!(
        binary::decode(get(&k, "CHAP_R").unwrap(), 64).unwrap(),
        digest(5, 0, TARGET_SECRET.as_bytes(), b"sixteen byte chl")
    );
    // an empty PDU with T=1 leaves it; the Directory heard of it once
    let LoginStep::Continue(resp, _) = l.send(req(0, 1, true), "") else {
        panic!()
    };
    assert!(resp.transit && resp.nsg == 1);
    assert_eq!(l.dir.seen.lock().unwrap().len(), 1);
    // CHAP keys once authenticated: refused
    let (class, detail, f) = l.fail(req(1, 3, true), "CHAP_A=5;");
    assert_eq!((class, detail), status::AUTH_FAILED);
    assert_eq!(f.reason, AuthFailureReason::UnexpectedKey);
}

#[test]
fn algorithm_choice() {
    // the initiator's preference among those the policy allows; unknown codes skipped
    let mut l = Login::new();
    assert_eq!(l.challenge("iqn.t:oneway", "99,junk,6,7").0, 6);
    let mut l = Login::new();
    assert_eq!(l.challenge("iqn.t:md5", "8,7,6,5").0, 5);
    for (target, a) in [
        ("iqn.t:md5", "7,8"),
        ("iqn.t:oneway", "1,2,300"),
        ("iqn.t:oneway", ""),
    ] {
        let mut l = Login::new();
        l.send(
            req(0, 1, false),
            &format!("InitiatorName=iqn.i;TargetName={target};AuthMethod=CHAP;"),
        );
        let LoginStep::Fail(_, txt, _, _) = l.send(req(0, 1, false), &format!("CHAP_A={a};"))
        else {
            panic!()
        };
        assert_eq!(txt, b"CHAP_A=Reject\0");
        let mut l = Login::new();
        l.send(
            req(0, 1, false),
            &format!("InitiatorName=iqn.i;TargetName={target};AuthMethod=CHAP;"),
        );
        let (class, detail, f) = l.fail(req(0, 1, false), &format!("CHAP_A={a};"));
        assert_eq!((class, detail), status::AUTH_FAILED);
        assert_eq!(f.reason, AuthFailureReason::NoCommonAlgorithm, "{a}");
        assert_eq!(f.key, Some("CHAP_A"));
    }
}

#[test]
fn wrong_secret_and_unknown_user() {
    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:chap", "5");
    let r = binary::encode_hex(&digest(5, id, b"not-the-secret", &c));
    let (class, detail, f) = l.fail(req(0, 1, true), &format!("CHAP_N=alice;CHAP_R={r};"));
    assert_eq!((class, detail), (2, 1));
    assert_eq!(f.reason, AuthFailureReason::BadResponse);
    assert_eq!(f.user.as_deref(), Some("alice"));
    assert!(!f.to_string().contains("not-the-secret"));

    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:chap", "5");
    let r = binary::encode_hex(&digest(5, id, ALICE.as_bytes(), &c));
    let (_, _, f) = l.fail(req(0, 1, true), &format!("CHAP_N=mallory;CHAP_R={r};"));
    assert_eq!(f.reason, AuthFailureReason::UnknownUser);
    assert_eq!(f.user.as_deref(), Some("mallory"));
    assert_eq!(
        f.to_string(),
        "authentication failed: unknown_user user \"mallory\""
    );
    assert!(l.dir.seen.lock().unwrap().is_empty());
}

#[test]
fn none_refused_when_chap_required() {
    let mut l = Login::new();
    let (class, detail, f) = l.fail(
        req(0, 1, true),
        "InitiatorName=iqn.i;TargetName=iqn.t:chap;AuthMethod=None;",
    );
    assert_eq!((class, detail), status::AUTH_FAILED);
    assert_eq!(f.reason, AuthFailureReason::MethodRejected);
    // skipping the security stage
    let mut l = Login::new();
    let (_, _, f) = l.fail(
        req(1, 3, true),
        "InitiatorName=iqn.i;TargetName=iqn.t:chap;",
    );
    assert_eq!(f.reason, AuthFailureReason::NotAuthenticated);
    // asking to leave it without any AuthMethod
    let mut l = Login::new();
    let (_, _, f) = l.fail(
        req(0, 1, true),
        "InitiatorName=iqn.i;TargetName=iqn.t:chap;",
    );
    assert_eq!(f.reason, AuthFailureReason::NotAuthenticated);
    // ... or after choosing CHAP but before answering the challenge
    let mut l = Login::new();
    l.challenge("iqn.t:chap", "5");
    assert!(matches!(
        l.send(req(1, 3, true), "MaxBurstLength=512;"),
        LoginStep::Fail(..)
    ));
}

#[test]
fn no_auth_policy_still_picks_none() {
    let mut l = Login::new();
    let LoginStep::Continue(r, out) = l.send(
        req(0, 1, true),
        "InitiatorName=iqn.i;TargetName=iqn.t:plain;AuthMethod=CHAP,None;",
    ) else {
        panic!()
    };
    assert!(r.transit);
    assert_eq!(get(&keys(&out), "AuthMethod"), Some("None"));
    let LoginStep::Complete(_, _, info) = l.send(req(1, 3, true), "") else {
        panic!()
    };
    assert_eq!(info.chap, None);
    assert_eq!(*l.dir.seen.lock().unwrap(), vec![None]);
}

#[test]
fn discovery_policy() {
    let mut l = Login::new();
    let first = "InitiatorName=iqn.i;SessionType=Discovery;AuthMethod=CHAP;";
    let LoginStep::Continue(_, out) = l.send(req(0, 1, false), first) else {
        panic!()
    };
    assert_eq!(get(&keys(&out), "AuthMethod"), Some("CHAP"));
    let LoginStep::Continue(_, out) = l.send(req(0, 1, false), "CHAP_A=6;") else {
        panic!()
    };
    let k = keys(&out);
    let id: u8 = get(&k, "CHAP_I").unwrap().parse().unwrap();
    let c = binary::decode(get(&k, "CHAP_C").unwrap(), 64).unwrap();
    let r = binary::encode_hex(&digest(6, id, b"discovery-secret", &c));
    let LoginStep::Complete(_, _, info) =
        l.send(req(0, 3, true), &format!("CHAP_N=disc;CHAP_R={r};"))
    else {
        panic!()
    };
    assert_eq!(info.session_type, SessionType::Discovery);
    assert_eq!(info.chap.map(|i| i.user), Some("disc".into()));
}

#[test]
fn mutual_refusals() {
    // reflected challenge
    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:chap", "5");
    let r = binary::encode_hex(&digest(5, id, ALICE.as_bytes(), &c));
    let t = format!(
        "CHAP_N=alice;CHAP_R={r};CHAP_I=1;CHAP_C={};",
        binary::encode_base64(&c)
    );
    let (_, _, f) = l.fail(req(0, 1, true), &t);
    assert_eq!(f.reason, AuthFailureReason::ReflectedChallenge);
    // no outgoing account
    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:oneway", "5");
    let r = binary::encode_hex(&digest(5, id, ALICE.as_bytes(), &c));
    let (_, _, f) = l.fail(
        req(0, 1, true),
        &format!("CHAP_N=alice;CHAP_R={r};CHAP_I=1;CHAP_C=0x0102030405060708;"),
    );
    assert_eq!(f.reason, AuthFailureReason::MissingOutgoingAccount);
    // the initiator's secret is the target's outgoing secret (one-way as well)
    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:reuse", "5");
    let r = binary::encode_hex(&digest(5, id, TARGET_SECRET.as_bytes(), &c));
    let (_, _, f) = l.fail(req(0, 1, true), &format!("CHAP_N=alice;CHAP_R={r};"));
    assert_eq!(f.reason, AuthFailureReason::SecretReused);
    // CHAP_I without CHAP_C
    let mut l = Login::new();
    let (_, id, c) = l.challenge("iqn.t:chap", "5");
    let r = binary::encode_hex(&digest(5, id, ALICE.as_bytes(), &c));
    let (_, _, f) = l.fail(
        req(0, 1, true),
        &format!("CHAP_N=alice;CHAP_R={r};CHAP_I=3;"),
    );
    assert_eq!(
        (f.reason, f.key),
        (AuthFailureReason::MissingKey, Some("CHAP_C"))
    );
}

/// Builds the CHAP_N/CHAP_R text from the challenge's (id, challenge).
type MakeText = dyn Fn(u8, &[u8]) -> String;

#[test]
fn malformed_values() {
    let ok_r = |id: u8, c: &[u8]| binary::encode_hex(&digest(5, id, ALICE.as_bytes(), c));
    let big_c = binary::encode_hex(&[7u8; 1025]);
    let cases: Vec<(Box<MakeText>, &str)> = vec![
        (
            Box::new(|_, _| "CHAP_N=alice;CHAP_R=0xzz;".into()),
            "CHAP_R",
        ),
        (
            Box::new(|_, _| "CHAP_N=alice;CHAP_R=1234;".into()),
            "CHAP_R",
        ),
        (
            Box::new(|_, _| "CHAP_N=alice;CHAP_R=0b!!!!;".into()),
            "CHAP_R",
        ),
        // a SHA-256-sized response to an MD5 challenge
        (
            Box::new(|_, _| format!("CHAP_N=alice;CHAP_R={};", binary::encode_hex(&[1; 32]))),
            "CHAP_R",
        ),
        (
            Box::new(move |id, c| {
                format!(
                    "CHAP_N=alice;CHAP_R={};CHAP_I=256;CHAP_C=0x01;",
                    ok_r(id, c)
                )
            }),
            "CHAP_I",
        ),
        (
            Box::new(move |id, c| {
                format!("CHAP_N=alice;CHAP_R={};CHAP_I=x;CHAP_C=0x01;", ok_r(id, c))
            }),
            "CHAP_I",
        ),
        (
            Box::new(move |id, c| {
                format!(
                    "CHAP_N=alice;CHAP_R={};CHAP_I=1;CHAP_C={big_c};",
                    ok_r(id, c)
                )
            }),
            "CHAP_C",
        ),
        (
            Box::new(move |id, c| format!("CHAP_N={};CHAP_R={};", "n".repeat(513), ok_r(id, c))),
            "CHAP_N",
        ),
    ];
    for (make, key) in cases {
        let mut l = Login::new();
        let (_, id, c) = l.challenge("iqn.t:chap", "5");
        let t = make(id, &c);
        let (class, detail, f) = l.fail(req(0, 1, true), &t);
        assert_eq!((class, detail), status::AUTH_FAILED, "{t}");
        assert_eq!(f.reason, AuthFailureReason::MalformedValue, "{t}");
        assert_eq!(f.key, Some(key), "{t}");
    }
}

#[test]
fn keys_out_of_order() {
    // CHAP_N before a challenge was sent
    let mut l = Login::new();
    let (_, _, f) = l.fail(
        req(0, 1, false),
        "InitiatorName=iqn.i;TargetName=iqn.t:chap;AuthMethod=CHAP;CHAP_N=alice;",
    );
    assert_eq!(
        (f.reason, f.key),
        (AuthFailureReason::UnexpectedKey, Some("CHAP_N"))
    );
    // CHAP_A again after the challenge
    let mut l = Login::new();
    l.challenge("iqn.t:chap", "5");
    let (_, _, f) = l.fail(req(0, 1, false), "CHAP_A=5;");
    assert_eq!(
        (f.reason, f.key),
        (AuthFailureReason::UnexpectedKey, Some("CHAP_A"))
    );
    // a repeated key
    let mut l = Login::new();
    l.challenge("iqn.t:chap", "5");
    let (_, _, f) = l.fail(req(0, 1, false), "CHAP_N=alice;CHAP_N=alice;CHAP_R=0x00;");
    assert_eq!(
        (f.reason, f.key),
        (AuthFailureReason::UnexpectedKey, Some("CHAP_N"))
    );
    // CHAP keys before AuthMethod=CHAP was agreed
    let mut l = Login::new();
    let (_, _, f) = l.fail(
        req(0, 1, false),
        "InitiatorName=iqn.i;TargetName=iqn.t:chap;CHAP_A=5;",
    );
    assert_eq!(f.reason, AuthFailureReason::UnexpectedKey);
    // missing CHAP_R
    let mut l = Login::new();
    l.challenge("iqn.t:chap", "5");
    let (_, _, f) = l.fail(req(0, 1, true), "CHAP_N=alice;");
    assert_eq!(
        (f.reason, f.key),
        (AuthFailureReason::MissingKey, Some("CHAP_R"))
    );
    // CHAP_A in the PDU that selects CHAP is fine
    let mut l = Login::new();
    let LoginStep::Continue(_, out) = l.send(
        req(0, 1, false),
        "CHAP_A=5;InitiatorName=iqn.i;TargetName=iqn.t:chap;AuthMethod=CHAP;",
    ) else {
        panic!()
    };
    assert!(get(&keys(&out), "CHAP_C").is_some());
}

#[test]
fn no_random_source_is_a_target_error() {
    let mut l = Login::new();
    l.m = LoginMachine::new(LoginConfig {
        offer: Offer::default(),
        max_login_pdus: 8,
    });
    l.send(
        req(0, 1, false),
        "InitiatorName=iqn.i;TargetName=iqn.t:chap;AuthMethod=CHAP;",
    );
    let (class, detail, f) = l.fail(req(0, 1, false), "CHAP_A=5;");
    assert_eq!((class, detail), status::TARGET_ERROR);
    assert_eq!(f.reason, AuthFailureReason::RandomUnavailable);
}

#[test]
fn secrets_stay_out_of_debug_and_warnings() {
    let AuthPolicy::Chap(p) = policy(Some("iqn.t:reuse")) else {
        panic!()
    };
    let dbg = format!("{p:?}");
    assert!(!dbg.contains(TARGET_SECRET), "{dbg}");
    let w = p.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("same secret") && !w[0].contains(TARGET_SECRET));
    let short = ChapPolicy::new(vec![ChapCredential::new("u", "short")], None);
    assert_eq!(short.warnings().len(), 1);
    assert_ne!(ChapSecret::from("a"), ChapSecret::from("b"));
    assert_eq!(ChapSecret::from("a"), ChapSecret::new(b"a".to_vec()));
}

#[test]
fn any_corrupted_response_fails() {
    for byte in 0..16 {
        let mut l = Login::new();
        let (_, id, c) = l.challenge("iqn.t:chap", "5");
        let mut r = digest(5, id, ALICE.as_bytes(), &c);
        r[byte] ^= 0x01;
        let t = format!("CHAP_N=alice;CHAP_R={};", binary::encode_hex(&r));
        assert_eq!(
            l.fail(req(0, 1, true), &t).2.reason,
            AuthFailureReason::BadResponse
        );
    }
}

proptest! {
    #[test]
    fn arbitrary_chap_values_never_panic(
        a in prop::option::of(prop_oneof![
            Just("5".to_string()),
            Just("8,7,6,5".to_string()),
            "[0-9,x]{0,12}",
            "\\PC{0,40}",
        ]),
        vals in prop::collection::vec(("CHAP_[AICNRX]", "(0[xXbB])?[0-9a-zA-Z+/=]{0,80}|\\PC{0,20}"), 0..6),
        mutual in any::<bool>(),
    ) {
        let mut l = Login::new();
        let target = if mutual { "iqn.t:chap" } else { "iqn.t:oneway" };
        l.send(
            req(0, 1, false),
            &format!("InitiatorName=iqn.i;TargetName={target};AuthMethod=CHAP;"),
        );
        let first = match &a {
            Some(a) => format!("CHAP_A={};", a.replace(['\0', ';'], "")),
            None => String::new(),
        };
        let step1 = l.send(req(0, 1, false), &first);
        let mut t = String::new();
        for (k, v) in &vals {
            t.push_str(&format!("{k}={};", v.replace(['\0', ';'], "")));
        }
        if matches!(step1, LoginStep::Continue(..)) {
            let step2 = l.send(req(0, 1, true), &t);
            if let LoginStep::Complete(..) | LoginStep::Continue(..) = step2 {
                // success is possible only with a verified response
                prop_assert!(!vals.is_empty() || a.is_none());
            }
            let _ = l.send(req(1, 3, true), &t);
        }
    }
}
