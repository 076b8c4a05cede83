//! Ceph RBD images for numatgt's RBD backing store, through librados/librbd loaded at run
//! time (`dlopen`), so the daemon builds and runs on hosts without Ceph.
//!
//! - [`ImageSpec`] / [`ClusterOptions`]: tgt's `[pool/]image[@snap]` and `--bsopts`.
//! - [`Cluster::connect`], [`Cluster::shared`], [`Cluster::open`]: a connection of one's
//!   own or the one shared by every image of that cluster, and an [`Image`] on it.
//! - [`Image`]: blocking and asynchronous I/O, size, resize, update watches, exclusive lock;
//!   small shared objects beside it (compare-and-write, watch/notify: `object`).
//!
//! Errors are `std::io::Error`s from librbd's negative errno (I/O calls carry the plain
//! errno; setup calls add what failed). Loading failures say which package to install.

mod ffi;
mod image;
mod object;
mod opts;
mod shared;

pub use ffi::{RADOS_SONAME, RBD_LIB_ENV, RBD_SONAME, available};
pub use image::{Cluster, Done, Image};
pub use object::{Expect, ObjectWatchFns, Unanswered};
pub use opts::{ClusterOptions, DEFAULT_POOL, DEFAULT_SETTINGS, ImageSpec, redact};
pub use shared::connections;

/// Connects as `opts` says (a connection of the image's own) and opens `spec` (read-only
/// when asked or a snapshot).
pub fn open(spec: &ImageSpec, opts: &ClusterOptions, read_only: bool) -> std::io::Result<Image> {
    Cluster::connect(opts)?.open(spec, read_only)
}

/// Opens `spec` on the connection shared by every image opened this way with the same
/// cluster options ([`Cluster::shared`]).
pub fn open_shared(
    spec: &ImageSpec,
    opts: &ClusterOptions,
    read_only: bool,
) -> std::io::Result<Image> {
    Cluster::shared(opts)?.open(spec, read_only)
}
