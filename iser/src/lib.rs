//! iSER transport (RFC 7145): not implemented yet; this crate reserves its place in the
//! workspace so the layout is fixed from the start.

#![warn(missing_docs)]
