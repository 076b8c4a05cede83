//! Text keys: `key=value\0` encoding/decoding ([`kv`]) and the negotiation rules of
//! RFC 7143 §13 ([`negotiate`]).
pub mod kv;
pub mod negotiate;
