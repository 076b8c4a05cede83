//! CHAP (RFC 1994) as the iSCSI target runs it in the security stage (RFC 7143 §12.1.3),
//! one-way and mutual:
//!
//! ```text
//! I: AuthMethod=CHAP,None        T: AuthMethod=CHAP
//! I: CHAP_A=<A1,A2,...>          T: CHAP_A=<A> CHAP_I=<I> CHAP_C=<C>
//! I: CHAP_N=<N> CHAP_R=<R> [CHAP_I=<I'> CHAP_C=<C'>]
//!                                T: [CHAP_N=<N'> CHAP_R=<R'>]   (mutual only)
//! ```
//!
//! R = H(I ‖ secret ‖ C) with H one of MD5 (5), SHA-1 (6), SHA-256 (7), SHA3-256 (8)
//! (IANA "PPP Authentication Algorithms"; the Linux target accepts the same four). The
//! target picks the first algorithm of the initiator's list that its [`ChapPolicy`]
//! allows, sends a random identifier and a random challenge as long as the digest (from
//! the injected [`RandomSource`]), and checks the response in constant time. Binary
//! values are accepted in hex or base64 and bounded (RFC 7143: at most 1024 bytes).
//! Keys at the wrong step, malformed values, unknown users, wrong responses, a mutual
//! request without an outgoing account, a reflected challenge and an initiator secret
//! equal to the target's outgoing secret all end the login with an [`AuthFailure`].

use super::auth::{
    AuthFailure, AuthFailureReason as R, ChapIdentity, ChapPolicy, RandomSource, RandomUnavailable,
};
use super::{AuthStatus, Authenticator};
use crate::text::binary;
use crate::text::kv;
use crate::text::negotiate::parse_num;
use sha2::Digest;

/// Longest CHAP_C / CHAP_R accepted, decoded (RFC 7143 §12.1.3).
pub const MAX_BINARY_LEN: usize = 1024;
/// Longest CHAP_N accepted.
pub const MAX_NAME_LEN: usize = 512;

/// A CHAP hash algorithm, by its IANA PPP authentication algorithm number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChapAlgorithm {
    Md5 = 5,
    Sha1 = 6,
    Sha256 = 7,
    Sha3_256 = 8,
}

impl ChapAlgorithm {
    /// Every supported algorithm, strongest first.
    pub const ALL: [ChapAlgorithm; 4] = [
        ChapAlgorithm::Sha3_256,
        ChapAlgorithm::Sha256,
        ChapAlgorithm::Sha1,
        ChapAlgorithm::Md5,
    ];

    /// The CHAP_A number.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The algorithm with this CHAP_A number.
    pub fn from_code(code: u64) -> Option<Self> {
        match code {
            5 => Some(ChapAlgorithm::Md5),
            6 => Some(ChapAlgorithm::Sha1),
            7 => Some(ChapAlgorithm::Sha256),
            8 => Some(ChapAlgorithm::Sha3_256),
            _ => None,
        }
    }

    /// A name for logs ("MD5", "SHA-1", "SHA-256", "SHA3-256").
    pub fn name(self) -> &'static str {
        match self {
            ChapAlgorithm::Md5 => "MD5",
            ChapAlgorithm::Sha1 => "SHA-1",
            ChapAlgorithm::Sha256 => "SHA-256",
            ChapAlgorithm::Sha3_256 => "SHA3-256",
        }
    }

    /// Digest (and so CHAP_R) length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            ChapAlgorithm::Md5 => 16,
            ChapAlgorithm::Sha1 => 20,
            ChapAlgorithm::Sha256 | ChapAlgorithm::Sha3_256 => 32,
        }
    }

    /// The CHAP response H(id ‖ secret ‖ challenge) (RFC 1994 §4.1).
    pub fn response(self, id: u8, secret: &[u8], challenge: &[u8]) -> Vec<u8> {
        fn h<D: Digest>(id: u8, secret: &[u8], challenge: &[u8]) -> Vec<u8> {
            D::new()
                .chain_update([id])
                .chain_update(secret)
                .chain_update(challenge)
                .finalize()
                .to_vec()
        }
        match self {
            ChapAlgorithm::Md5 => h::<md5::Md5>(id, secret, challenge),
            ChapAlgorithm::Sha1 => h::<sha1::Sha1>(id, secret, challenge),
            ChapAlgorithm::Sha256 => h::<sha2::Sha256>(id, secret, challenge),
            ChapAlgorithm::Sha3_256 => h::<sha3::Sha3_256>(id, secret, challenge),
        }
    }
}

/// Equality whose time depends only on the lengths, not on the contents.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The CHAP keys of one login PDU, each at most once.
#[derive(Default)]
struct Keys<'a> {
    a: Option<&'a str>,
    i: Option<&'a str>,
    c: Option<&'a str>,
    n: Option<&'a str>,
    r: Option<&'a str>,
}

impl<'a> Keys<'a> {
    fn parse(pairs: &'a [(String, String)]) -> Result<Self, AuthFailure> {
        let mut k = Keys::default();
        for (key, v) in pairs {
            let (slot, name) = match key.as_str() {
                "CHAP_A" => (&mut k.a, "CHAP_A"),
                "CHAP_I" => (&mut k.i, "CHAP_I"),
                "CHAP_C" => (&mut k.c, "CHAP_C"),
                "CHAP_N" => (&mut k.n, "CHAP_N"),
                "CHAP_R" => (&mut k.r, "CHAP_R"),
                _ => continue,
            };
            if slot.replace(v.as_str()).is_some() {
                return Err(AuthFailure::key(R::UnexpectedKey, name));
            }
        }
        Ok(k)
    }

    /// The first key present among those not allowed at this step.
    fn unexpected(&self, a: bool, nric: bool) -> Option<&'static str> {
        let all = [
            (a, self.a, "CHAP_A"),
            (nric, self.i, "CHAP_I"),
            (nric, self.c, "CHAP_C"),
            (nric, self.n, "CHAP_N"),
            (nric, self.r, "CHAP_R"),
        ];
        all.into_iter()
            .find(|(bad, v, _)| *bad && v.is_some())
            .map(|(_, _, k)| k)
    }
}

enum State {
    /// Waiting for CHAP_A.
    Algorithm,
    /// Challenge sent; waiting for CHAP_N/CHAP_R (and maybe CHAP_I/CHAP_C).
    Response {
        alg: ChapAlgorithm,
        id: u8,
        challenge: Vec<u8>,
    },
    Done,
    Failed,
}

/// The target side of one CHAP exchange.
pub struct ChapAuthenticator {
    policy: ChapPolicy,
    rng: Option<Box<dyn RandomSource>>,
    state: State,
    identity: Option<ChapIdentity>,
}

impl std::fmt::Debug for ChapAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChapAuthenticator")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl ChapAuthenticator {
    /// An exchange under `policy`; without a random source the challenge step fails
    /// with [`R::RandomUnavailable`].
    pub fn new(policy: ChapPolicy, rng: Option<Box<dyn RandomSource>>) -> Self {
        ChapAuthenticator {
            policy,
            rng,
            state: State::Algorithm,
            identity: None,
        }
    }

    fn random(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        match self.rng.as_mut() {
            Some(r) => r.fill(buf),
            None => Err(RandomUnavailable),
        }
    }

    /// CHAP_A received: pick the algorithm, answer with it, an identifier and a challenge.
    fn challenge(&mut self, a: &str, out: &mut Vec<u8>) -> Result<State, AuthFailure> {
        let alg = a
            .split(',')
            .filter_map(parse_num)
            .filter_map(ChapAlgorithm::from_code)
            .find(|x| self.policy.algorithms.contains(x))
            .ok_or_else(|| AuthFailure::key(R::NoCommonAlgorithm, "CHAP_A"))?;
        let mut id = [0u8; 1];
        let mut challenge = vec![0u8; alg.digest_len()];
        self.random(&mut id)
            .and_then(|()| self.random(&mut challenge))
            .map_err(|_| AuthFailure::new(R::RandomUnavailable))?;
        kv::push(out, "CHAP_A", &alg.code().to_string());
        kv::push(out, "CHAP_I", &id[0].to_string());
        kv::push(out, "CHAP_C", &binary::encode_hex(&challenge));
        Ok(State::Response {
            alg,
            id: id[0],
            challenge,
        })
    }

    /// CHAP_N/CHAP_R (and maybe CHAP_I/CHAP_C) received: verify, answer a mutual request.
    fn verify(
        &mut self,
        k: &Keys<'_>,
        (alg, id, challenge): (ChapAlgorithm, u8, &[u8]),
        out: &mut Vec<u8>,
    ) -> Result<(), AuthFailure> {
        let name = k.n.ok_or(AuthFailure::key(R::MissingKey, "CHAP_N"))?;
        let resp = k.r.ok_or(AuthFailure::key(R::MissingKey, "CHAP_R"))?;
        if name.len() > MAX_NAME_LEN {
            return Err(AuthFailure::key(R::MalformedValue, "CHAP_N"));
        }
        let bad = |key| AuthFailure {
            user: Some(name.to_string()),
            ..AuthFailure::key(R::MalformedValue, key)
        };
        let resp = binary::decode(resp, MAX_BINARY_LEN).map_err(|_| bad("CHAP_R"))?;
        if resp.len() != alg.digest_len() {
            return Err(bad("CHAP_R"));
        }
        // mutual: CHAP_I and CHAP_C come together
        let mutual = match (k.i, k.c) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(AuthFailure {
                    user: Some(name.to_string()),
                    ..AuthFailure::key(R::MissingKey, "CHAP_C")
                });
            }
            (None, Some(_)) => {
                return Err(AuthFailure {
                    user: Some(name.to_string()),
                    ..AuthFailure::key(R::MissingKey, "CHAP_I")
                });
            }
            (Some(i), Some(c)) => {
                let i = parse_num(i)
                    .and_then(|v| u8::try_from(v).ok())
                    .ok_or_else(|| bad("CHAP_I"))?;
                let c = binary::decode(c, MAX_BINARY_LEN).map_err(|_| bad("CHAP_C"))?;
                if ct_eq(&c, challenge) {
                    return Err(AuthFailure::user(R::ReflectedChallenge, name));
                }
                Some((i, c))
            }
        };
        // the initiator's proof; an unknown user costs the same hash as a known one
        let account = self.policy.incoming.iter().find(|c| c.user == name);
        let secret = account.map_or(&[][..], |c| c.secret.expose());
        let expected = alg.response(id, secret, challenge);
        let matches = ct_eq(&expected, &resp);
        if account.is_none() {
            return Err(AuthFailure::user(R::UnknownUser, name));
        }
        if !matches {
            return Err(AuthFailure::user(R::BadResponse, name));
        }
        if let Some(o) = &self.policy.outgoing {
            // RFC 7143 §12.1.3: a response the target would itself have produced means
            // the same secret serves both directions; treat it as a failure.
            if ct_eq(&alg.response(id, o.secret.expose(), challenge), &resp) {
                return Err(AuthFailure::user(R::SecretReused, name));
            }
        }
        if let Some((i, c)) = &mutual {
            let Some(o) = &self.policy.outgoing else {
                return Err(AuthFailure::user(R::MissingOutgoingAccount, name));
            };
            kv::push(out, "CHAP_N", &o.user);
            kv::push(
                out,
                "CHAP_R",
                &binary::encode_hex(&alg.response(*i, o.secret.expose(), c)),
            );
        }
        self.identity = Some(ChapIdentity {
            user: name.to_string(),
            algorithm: alg,
            mutual: mutual.is_some(),
        });
        Ok(())
    }

    fn advance(
        &mut self,
        keys: &[(String, String)],
        out: &mut Vec<u8>,
    ) -> Result<bool, AuthFailure> {
        let k = Keys::parse(keys)?;
        match std::mem::replace(&mut self.state, State::Failed) {
            State::Algorithm => {
                if let Some(key) = k.unexpected(false, true) {
                    return Err(AuthFailure::key(R::UnexpectedKey, key));
                }
                match k.a {
                    // e.g. the PDU that selected AuthMethod=CHAP
                    None => self.state = State::Algorithm,
                    Some(a) => self.state = self.challenge(a, out)?,
                }
                Ok(false)
            }
            State::Response { alg, id, challenge } => {
                if let Some(key) = k.unexpected(true, false) {
                    return Err(AuthFailure::key(R::UnexpectedKey, key));
                }
                self.verify(&k, (alg, id, &challenge), out)?;
                self.state = State::Done;
                Ok(true)
            }
            State::Done => {
                if let Some(key) = k.unexpected(true, true) {
                    return Err(AuthFailure::key(R::UnexpectedKey, key));
                }
                self.state = State::Done;
                Ok(true)
            }
            State::Failed => Err(AuthFailure::new(R::UnexpectedKey)),
        }
    }
}

impl Authenticator for ChapAuthenticator {
    fn method(&self) -> &'static str {
        "CHAP"
    }

    fn step(&mut self, keys: &[(String, String)], out: &mut Vec<u8>) -> AuthStatus {
        // answers of a failed step are dropped: the login fails with no text
        let mut answer = Vec::new();
        match self.advance(keys, &mut answer) {
            Ok(done) => {
                out.extend_from_slice(&answer);
                if done {
                    AuthStatus::Done
                } else {
                    AuthStatus::Continue
                }
            }
            Err(f) => {
                if f.reason == R::NoCommonAlgorithm {
                    // RFC 7143 §6.2: no acceptable value → Reject
                    kv::push(out, "CHAP_A", crate::text::negotiate::REJECT);
                }
                AuthStatus::Failed(f)
            }
        }
    }

    fn chap_identity(&self) -> Option<ChapIdentity> {
        self.identity.clone()
    }
}
