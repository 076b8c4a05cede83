//! The identity of one connection across the daemon: which event thread owns it, its slot,
//! and the slot's generation. A plain value that the registry (session table), the backend
//! (answers, task watch) and the event loop all name, so it lives below all of them.

/// Identifies a connection: which event thread owns it, its slot, and the slot's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub thread: usize,
    pub slot: usize,
    pub generation: u64,
}
