//! Text keys: `key=value\0` encoding/decoding ([`kv`]), binary values in hex or base64
//! ([`binary`]) and the negotiation rules of RFC 7143 §13 ([`negotiate`]).
pub mod binary;
pub mod kv;
pub mod negotiate;
