//! Per-LUN quality of service: the limits of a LUN (IOPS and bytes per second, for reads,
//! writes and in total, with a burst) as lock-free rate buckets the event threads charge
//! each read and write to ([`LunQos::charge`]), and when a command may start. The event
//! threads hold a command until then (`event_loop/throttle.rs`); nothing here waits, sleeps
//! or reads a clock: the caller passes the time.

mod bucket;
mod lun;

pub use bucket::Bucket;
pub use lun::{Buckets, Dir, LunQos, QosKind};

/// How far ahead of its time a command may still start at once: the slack that lets one
/// loop turn take a few commands together without the rate drifting.
pub const BASE_TOLERANCE_NS: u64 = 1_000_000;
