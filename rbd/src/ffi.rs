//! The C entry points of librados and librbd, found at run time with `dlopen`/`dlsym`.
//!
//! Loading happens once per process ([`api`]); the libraries are never unloaded, so every
//! function pointer stays valid for the life of the process. Only the handful of calls the
//! safe wrappers use are resolved; a missing library or symbol is one clear error.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::io;
use std::sync::OnceLock;

/// `rados_t`, `rados_ioctx_t`, `rbd_image_t`, `rbd_completion_t`: opaque pointers.
pub(crate) type Handle = *mut c_void;
/// `rbd_callback_t`.
pub(crate) type AioCallback = unsafe extern "C" fn(Handle, *mut c_void);
/// `rbd_update_callback_t`.
pub(crate) type UpdateCallback = unsafe extern "C" fn(*mut c_void);
/// `rados_watchcb2_t`: argument, notify id, watch cookie, notifier id, payload, its length.
pub(crate) type ObjWatchCallback =
    unsafe extern "C" fn(*mut c_void, u64, u64, u64, *mut c_void, usize);
/// `rados_watcherrcb_t`: argument, watch cookie, negative errno.
pub(crate) type ObjWatchErrCallback = unsafe extern "C" fn(*mut c_void, u64, c_int);
/// `rbd_diff_iterate2`'s callback: offset, length, whether the extent exists, argument.
pub(crate) type DiffCallback = unsafe extern "C" fn(u64, usize, c_int, *mut c_void) -> c_int;

/// The shared object names tried, the ones Debian's librados2 / librbd1 install.
pub const RADOS_SONAME: &str = "librados.so.2";
/// See [`RADOS_SONAME`].
pub const RBD_SONAME: &str = "librbd.so.1";
/// Environment variable naming another librbd to load (a path or soname); tests use it to
/// play a host without librbd.
pub const RBD_LIB_ENV: &str = "NUMATGT_LIBRBD";

macro_rules! api {
    ($( $lib:ident . $name:ident : fn($($arg:ty),*) -> $ret:ty; )*) => {
        /// Function pointers into the loaded libraries.
        #[allow(non_snake_case)]
        pub(crate) struct Api {
            $( pub(crate) $name: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        impl Api {
            fn resolve(rados: Handle, rbd: Handle) -> Result<Api, String> {
                Ok(Api {
                    $( $name: {
                        let lib = if stringify!($lib) == "rados" { rados } else { rbd };
                        let p = symbol(lib, concat!(stringify!($name), "\0"))?;
                        // SAFETY: `p` is the address of the exported C function of this
                        // name, whose prototype in librados.h / librbd.h (Ceph 16) is the
                        // one declared here; the library stays loaded for ever.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p)
                        }
                    }, )*
                })
            }
        }
    };
}

api! {
    rados.rados_create2: fn(*mut Handle, *const c_char, *const c_char, u64) -> c_int;
    rados.rados_conf_read_file: fn(Handle, *const c_char) -> c_int;
    rados.rados_conf_set: fn(Handle, *const c_char, *const c_char) -> c_int;
    rados.rados_connect: fn(Handle) -> c_int;
    rados.rados_shutdown: fn(Handle) -> ();
    rados.rados_ioctx_create: fn(Handle, *const c_char, *mut Handle) -> c_int;
    rados.rados_ioctx_destroy: fn(Handle) -> ();
    rados.rados_write_full: fn(Handle, *const c_char, *const c_char, usize) -> c_int;
    rados.rados_read: fn(Handle, *const c_char, *mut c_char, usize, u64) -> c_int;
    rados.rados_create_write_op: fn() -> Handle;
    rados.rados_release_write_op: fn(Handle) -> ();
    rados.rados_write_op_create: fn(Handle, c_int, *const c_char) -> ();
    rados.rados_write_op_cmpext: fn(Handle, *const c_char, usize, u64, *mut c_int) -> ();
    rados.rados_write_op_write_full: fn(Handle, *const c_char, usize) -> ();
    rados.rados_write_op_operate: fn(Handle, Handle, *const c_char, *mut libc::time_t, c_int) -> c_int;
    rados.rados_watch2: fn(Handle, *const c_char, *mut u64, ObjWatchCallback, ObjWatchErrCallback, *mut c_void) -> c_int;
    rados.rados_watch_check: fn(Handle, u64) -> c_int;
    rados.rados_unwatch2: fn(Handle, u64) -> c_int;
    rados.rados_watch_flush: fn(Handle) -> c_int;
    rados.rados_notify2: fn(Handle, *const c_char, *const c_char, c_int, u64, *mut *mut c_char, *mut usize) -> c_int;
    rados.rados_notify_ack: fn(Handle, *const c_char, u64, u64, *const c_char, c_int) -> c_int;
    rados.rados_buffer_free: fn(*mut c_char) -> ();
    rados.rados_get_instance_id: fn(Handle) -> u64;
    rados.rados_getaddrs: fn(Handle, *mut *mut c_char) -> c_int;
    rados.rados_blocklist_add: fn(Handle, *mut c_char, u32) -> c_int;
    rados.rados_setxattr: fn(Handle, *const c_char, *const c_char, *const c_char, usize) -> c_int;
    rados.rados_getxattr: fn(Handle, *const c_char, *const c_char, *mut c_char, usize) -> c_int;
    rbd.rbd_open: fn(Handle, *const c_char, *mut Handle, *const c_char) -> c_int;
    rbd.rbd_open_read_only: fn(Handle, *const c_char, *mut Handle, *const c_char) -> c_int;
    rbd.rbd_close: fn(Handle) -> c_int;
    rbd.rbd_get_size: fn(Handle, *mut u64) -> c_int;
    rbd.rbd_resize: fn(Handle, u64) -> c_int;
    rbd.rbd_read2: fn(Handle, u64, usize, *mut c_char, c_int) -> isize;
    rbd.rbd_write2: fn(Handle, u64, usize, *const c_char, c_int) -> isize;
    rbd.rbd_discard: fn(Handle, u64, u64) -> c_int;
    rbd.rbd_write_zeroes: fn(Handle, u64, usize, c_int, c_int) -> isize;
    rbd.rbd_flush: fn(Handle) -> c_int;
    rbd.rbd_aio_create_completion: fn(*mut c_void, AioCallback, *mut Handle) -> c_int;
    rbd.rbd_aio_read2: fn(Handle, u64, usize, *mut c_char, Handle, c_int) -> c_int;
    rbd.rbd_aio_write2: fn(Handle, u64, usize, *const c_char, Handle, c_int) -> c_int;
    rbd.rbd_aio_discard: fn(Handle, u64, u64, Handle) -> c_int;
    rbd.rbd_aio_write_zeroes: fn(Handle, u64, usize, Handle, c_int, c_int) -> c_int;
    rbd.rbd_aio_flush: fn(Handle, Handle) -> c_int;
    rbd.rbd_aio_get_return_value: fn(Handle) -> isize;
    rbd.rbd_aio_release: fn(Handle) -> ();
    rbd.rbd_update_watch: fn(Handle, *mut u64, UpdateCallback, *mut c_void) -> c_int;
    rbd.rbd_update_unwatch: fn(Handle, u64) -> c_int;
    rbd.rbd_lock_acquire: fn(Handle, c_int) -> c_int;
    rbd.rbd_lock_release: fn(Handle) -> c_int;
    rbd.rbd_is_exclusive_lock_owner: fn(Handle, *mut c_int) -> c_int;
    rbd.rbd_lock_get_owners: fn(Handle, *mut c_int, *mut *mut c_char, *mut usize) -> c_int;
    rbd.rbd_lock_get_owners_cleanup: fn(*mut *mut c_char, usize) -> ();
    rbd.rbd_lock_break: fn(Handle, c_int, *const c_char) -> c_int;
    rbd.rbd_diff_iterate2: fn(Handle, *const c_char, u64, u64, u8, u8, DiffCallback, *mut c_void) -> c_int;
}

// SAFETY: the struct holds only function pointers into libraries that are never unloaded;
// the functions themselves are thread-safe per librados/librbd's documentation.
unsafe impl Send for Api {}
// SAFETY: as above; the table is never written after it is built.
unsafe impl Sync for Api {}

/// The text of the last `dlerror`, or a fallback.
fn dl_error(fallback: &str) -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call
    // on this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        fallback.to_string()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn open_lib(name: &str) -> Result<Handle, String> {
    let c = CString::new(name).map_err(|_| format!("{name:?}: NUL in library name"))?;
    // SAFETY: `c` is a valid C string; dlopen runs the library's constructors, which for
    // librados/librbd only set up their own globals.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        Err(dl_error(&format!("{name}: cannot be loaded")))
    } else {
        Ok(h)
    }
}

fn symbol(lib: Handle, name_nul: &str) -> Result<*mut c_void, String> {
    // SAFETY: `lib` is a live dlopen handle and `name_nul` ends with a NUL byte.
    let p = unsafe { libc::dlsym(lib, name_nul.as_ptr().cast()) };
    if p.is_null() {
        Err(dl_error(&format!(
            "{}: symbol not found",
            name_nul.trim_end_matches('\0')
        )))
    } else {
        Ok(p)
    }
}

/// The message every failure to load carries, so an admin knows what to install.
pub(crate) fn missing_library(detail: &str) -> String {
    format!("rbd backing store needs librbd (Debian: apt-get install librbd1): {detail}")
}

/// Loads `rados` and then `rbd` (names or paths) and resolves the entry points.
pub(crate) fn load_from(rados: &str, rbd: &str) -> Result<Api, String> {
    let r = open_lib(rados).map_err(|e| missing_library(&e))?;
    let b = open_lib(rbd).map_err(|e| missing_library(&e))?;
    Api::resolve(r, b).map_err(|e| missing_library(&e))
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The process's librados/librbd entry points, loaded on first use (`NUMATGT_LIBRBD`
/// overrides the librbd name). The error says what to install.
pub(crate) fn api() -> io::Result<&'static Api> {
    API.get_or_init(|| {
        let rbd = std::env::var(RBD_LIB_ENV).unwrap_or_else(|_| RBD_SONAME.to_string());
        load_from(RADOS_SONAME, &rbd)
    })
    .as_ref()
    .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.clone()))
}

/// Whether librbd can be loaded here (and why not).
pub fn available() -> io::Result<()> {
    api().map(|_| ())
}

/// A negative errno return as a plain errno error (what the data path maps to sense data).
pub(crate) fn errno(r: i64) -> io::Result<u64> {
    if r < 0 {
        Err(io::Error::from_raw_os_error(
            i32::try_from(-r).unwrap_or(libc::EIO),
        ))
    } else {
        Ok(r as u64)
    }
}

/// A negative errno return as an error whose message names `what` failed (setup calls).
pub(crate) fn check(r: i64, what: &str) -> io::Result<u64> {
    errno(r).map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_the_package() {
        let e = load_from("libnumatgt-no-such-rados.so.2", RBD_SONAME)
            .err()
            .expect("must fail");
        assert!(
            e.starts_with("rbd backing store needs librbd (Debian: apt-get install librbd1): "),
            "{e}"
        );
        assert!(e.contains("libnumatgt-no-such-rados.so.2"), "{e}");
        assert!(e.contains("cannot open shared object file"), "{e}");
    }

    /// Every entry point this crate declares exists in the installed librados/librbd
    /// (Ceph 16, what tools/install-test-deps.sh installs): a missing one would make every
    /// RBD LUN fail to open.
    #[test]
    fn every_entry_point_resolves_in_the_installed_libraries() {
        if let Err(e) = load_from(RADOS_SONAME, RBD_SONAME) {
            panic!("{e}");
        }
    }

    #[test]
    fn negative_returns_are_errno_errors() {
        assert_eq!(check(5, "x").expect("ok"), 5);
        let e = check(-i64::from(libc::ENOENT), "rbd_open").expect_err("err");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("rbd_open: "), "{e}");
    }
}
