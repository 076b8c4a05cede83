//! Ceph RBD images for numatgt's RBD backing store, through librados/librbd loaded at run
//! time (`dlopen`), so the daemon builds and runs on hosts without Ceph.
//!
//! - [`ImageSpec`] / [`ClusterOptions`]: tgt's `[pool/]image[@snap]` and `--bsopts`.
//! - [`Cluster::connect`], [`Cluster::open`]: a connection and an [`Image`] on it.
//! - [`Image`]: blocking and asynchronous I/O, size, resize, update watches, exclusive lock.
//!
//! Errors are `std::io::Error`s from librbd's negative errno (I/O calls carry the plain
//! errno; setup calls add what failed). Loading failures say which package to install.

mod ffi;
mod image;
mod opts;

pub use ffi::{RADOS_SONAME, RBD_LIB_ENV, RBD_SONAME, available};
pub use image::{Cluster, Done, Image};
pub use opts::{ClusterOptions, DEFAULT_POOL, DEFAULT_SETTINGS, ImageSpec, redact};

/// Connects as `opts` says and opens `spec` (read-only when asked or a snapshot).
pub fn open(spec: &ImageSpec, opts: &ClusterOptions, read_only: bool) -> std::io::Result<Image> {
    Cluster::connect(opts)?.open(spec, read_only)
}
