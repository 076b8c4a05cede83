//! The error type of every call in this crate: why RDMA is not usable, never a panic.

use std::ffi::CStr;
use std::io;

/// Why an RDMA call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The rdma-core library could not be loaded (rdma-core is not installed).
    #[error("{0} not found (install rdma-core: libibverbs1, librdmacm1)")]
    LibraryMissing(&'static str),
    /// The libraries are there but the kernel has no RDMA support (no uverbs / rdma_cm).
    #[error("no kernel RDMA support ({call}: {source})")]
    NoKernelSupport {
        /// The rdma-core call that failed.
        call: &'static str,
        /// Its errno.
        source: io::Error,
    },
    /// The kernel supports RDMA but there is no device.
    #[error("no RDMA device")]
    NoDevices,
    /// A verbs or CM call failed.
    #[error("{call}: {source}")]
    Call {
        /// The rdma-core call that failed.
        call: &'static str,
        /// Its errno.
        source: io::Error,
    },
    /// An argument this wrapper refuses before calling rdma-core.
    #[error("{0}")]
    Invalid(&'static str),
}

impl Error {
    /// The errno of a failed call, if the error carries one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::NoKernelSupport { source, .. } | Error::Call { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }

    /// The error of `call`, from the thread's errno right after it failed: `EOPNOTSUPP` from a
    /// stub whose library is not loaded becomes [`Error::LibraryMissing`]; `ENOSYS` and
    /// `ENODEV` (no `/sys/class/infiniband_verbs`, no `/dev/infiniband/rdma_cm`) become
    /// [`Error::NoKernelSupport`].
    pub(crate) fn last(call: &'static str, lib: &'static CStr) -> Error {
        let source = io::Error::last_os_error();
        Error::classify(call, lib, source)
    }

    pub(crate) fn classify(call: &'static str, lib: &'static CStr, source: io::Error) -> Error {
        match source.raw_os_error() {
            Some(libc::EOPNOTSUPP) if !library_loaded(lib) => {
                Error::LibraryMissing(lib.to_str().unwrap_or("rdma-core"))
            }
            Some(libc::ENOSYS | libc::ENODEV) => Error::NoKernelSupport { call, source },
            _ => Error::Call { call, source },
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// libibverbs' soname, as the stubs load it.
pub(crate) const LIBIBVERBS: &CStr = c"libibverbs.so.1";
/// librdmacm's soname, as the stubs load it.
pub(crate) const LIBRDMACM: &CStr = c"librdmacm.so.1";

/// Whether `lib` is loaded in this process. The stubs of rdma-mummy-sys dlopen it from a
/// constructor at start-up, so "not loaded" means it could not be found.
pub(crate) fn library_loaded(lib: &CStr) -> bool {
    // SAFETY: `lib` is a NUL-terminated string; RTLD_NOLOAD only looks the library up among
    // the loaded ones (it never runs a constructor) and returns a counted handle or NULL.
    let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` came from the successful dlopen above; closing drops that reference
    // only, the stubs keep theirs.
    unsafe { libc::dlclose(handle) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_maps_errnos() {
        let e = Error::classify("x", LIBIBVERBS, io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(matches!(e, Error::NoKernelSupport { call: "x", .. }), "{e}");
        let e = Error::classify("x", LIBRDMACM, io::Error::from_raw_os_error(libc::ENODEV));
        assert!(matches!(e, Error::NoKernelSupport { .. }), "{e}");
        let e = Error::classify("x", LIBRDMACM, io::Error::from_raw_os_error(libc::EINVAL));
        assert!(matches!(e, Error::Call { .. }), "{e}");
        assert_eq!(e.errno(), Some(libc::EINVAL));
        // a library that is certainly not loaded: EOPNOTSUPP from its stub means it is missing
        let e = Error::classify(
            "x",
            c"libnumatgt-no-such-library.so.9",
            io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        );
        assert!(matches!(e, Error::LibraryMissing(_)), "{e}");
    }

    #[test]
    fn libc_is_loaded() {
        assert!(library_loaded(c"libc.so.6"));
        assert!(!library_loaded(c"libnumatgt-no-such-library.so.9"));
    }
}
