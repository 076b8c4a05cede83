//! Small RADOS objects beside an image, in the image's pool: state that several gateways
//! share (a compare-and-write that replaces an object only if it still holds what the
//! writer read, or only if it does not exist yet), and watch/notify on such an object — a
//! notification returns once every watcher has run its callback (or the timeout passed).

use std::ffi::{c_char, c_int, c_void};
use std::io;

use crate::ffi::{Api, Handle, check, errno};
use crate::image::{Image, cstring};

/// What a compare-and-write expects of the object before it replaces it.
#[derive(Clone, Copy, Debug)]
pub enum Expect<'a> {
    /// The object does not exist.
    Absent,
    /// The object's bytes at `offset` are `bytes`.
    Bytes { offset: u64, bytes: &'a [u8] },
}

/// What runs for a notification: its payload.
pub type NotifyFn = Box<dyn Fn(&[u8]) + Send + Sync>;

/// The callbacks of an object watch (run on a librados thread).
pub struct ObjectWatchFns {
    /// A notification's payload; the notifier is answered when this returns.
    pub on_notify: NotifyFn,
    /// The watch broke (the cluster lost it: a network cut, an OSD restart); the watch
    /// must be made again, and what was missed meanwhile read again.
    pub on_error: Box<dyn Fn(io::Error) + Send + Sync>,
}

/// What the librados callbacks of one watch reach through their `arg`.
pub(crate) struct WatchCtx {
    api: &'static Api,
    ioctx: Handle,
    oid: std::ffi::CString,
    fns: ObjectWatchFns,
}

// SAFETY: the ioctx is used by librados from any thread (its calls are thread-safe); the
// rest is owned data and Send + Sync callbacks.
unsafe impl Send for WatchCtx {}
// SAFETY: as above.
unsafe impl Sync for WatchCtx {}

unsafe extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    _notifier: u64,
    data: *mut c_void,
    len: usize,
) {
    // SAFETY: `arg` is the WatchCtx box kept in `Image::object_watches` until the watch is
    // removed and flushed (rados_unwatch2 + rados_watch_flush wait for running callbacks).
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    let payload: &[u8] = if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: librados hands `len` readable bytes at `data` for the callback's duration.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
    };
    (ctx.fns.on_notify)(payload);
    // SAFETY: live ioctx (see above); the object name is a valid C string; no reply data.
    let r = unsafe {
        (ctx.api.rados_notify_ack)(
            ctx.ioctx,
            ctx.oid.as_ptr(),
            notify_id,
            cookie,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        (ctx.fns.on_error)(io::Error::from_raw_os_error(-r));
    }
}

unsafe extern "C" fn on_watch_error(arg: *mut c_void, _cookie: u64, err: c_int) {
    // SAFETY: as in `on_notify`.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    (ctx.fns.on_error)(io::Error::from_raw_os_error(
        err.checked_neg().unwrap_or(libc::EIO),
    ));
}

impl Image {
    /// Replaces RADOS object `name` with `data` if it is as `expect` says, in one atomic
    /// operation: `Ok(true)` written, `Ok(false)` the object was not as expected (nothing
    /// written).
    pub fn object_replace_if(
        &self,
        name: &str,
        expect: Expect<'_>,
        data: &[u8],
    ) -> io::Result<bool> {
        let oid = cstring(name, "object name")?;
        let api = self.api;
        // SAFETY: creates an empty write operation, released below on every path.
        let op = unsafe { (api.rados_create_write_op)() };
        if op.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        }
        let mut cmp_rval: c_int = 0;
        // SAFETY: `op` is live; buffers outlive the synchronous operate call below.
        unsafe {
            match expect {
                Expect::Absent => (api.rados_write_op_create)(op, 1, std::ptr::null()),
                Expect::Bytes { offset, bytes } => (api.rados_write_op_cmpext)(
                    op,
                    bytes.as_ptr().cast::<c_char>(),
                    bytes.len(),
                    offset,
                    &mut cmp_rval,
                ),
            }
            (api.rados_write_op_write_full)(op, data.as_ptr().cast::<c_char>(), data.len());
        }
        // SAFETY: live op and ioctx; NULL mtime (now); flags 0.
        let r = unsafe {
            (api.rados_write_op_operate)(op, self.ioctx, oid.as_ptr(), std::ptr::null_mut(), 0)
        };
        // SAFETY: released once, after its operation finished.
        unsafe { (api.rados_release_write_op)(op) };
        // a mismatch is -MAX_ERRNO - offset (cmpext), -EEXIST (exclusive create), or
        // -ENOENT (compared an object that is gone)
        const MAX_ERRNO: c_int = 4095;
        match r {
            0 => Ok(true),
            r if r == -libc::EEXIST || r == -libc::ENOENT || r <= -MAX_ERRNO => Ok(false),
            r => Err(io::Error::from_raw_os_error(
                r.checked_neg().unwrap_or(libc::EIO),
            )),
        }
    }

    /// Watches RADOS object `name` (which must exist): `fns.on_notify` runs for every
    /// notification, then the notifier is answered. Returns the watch's cookie.
    pub fn object_watch(&self, name: &str, fns: ObjectWatchFns) -> io::Result<u64> {
        let oid = cstring(name, "object name")?;
        let ctx = Box::new(WatchCtx {
            api: self.api,
            ioctx: self.ioctx,
            oid: oid.clone(),
            fns,
        });
        let arg = (&*ctx as *const WatchCtx).cast_mut().cast::<c_void>();
        let mut cookie = 0u64;
        let mut watches = self
            .object_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // SAFETY: live ioctx; `arg` points into `ctx`, kept in `object_watches` until the
        // watch is removed and flushed.
        let r = unsafe {
            (self.api.rados_watch2)(
                self.ioctx,
                oid.as_ptr(),
                &mut cookie,
                on_notify,
                on_watch_error,
                arg,
            )
        };
        check(r.into(), &format!("watch of object {name}"))?;
        watches.push((cookie, ctx));
        Ok(cookie)
    }

    /// Whether watch `cookie` is still established: `Ok` with the milliseconds since the
    /// cluster last confirmed it, or the error that broke it.
    pub fn object_watch_check(&self, cookie: u64) -> io::Result<u64> {
        // SAFETY: live ioctx; an unknown cookie is an error return, not undefined behaviour.
        let r = unsafe { (self.api.rados_watch_check)(self.ioctx, cookie) };
        errno(r.into())
    }

    /// Removes watch `cookie` (waiting for its running callbacks).
    pub fn object_unwatch(&self, cookie: u64) {
        let ctx = {
            let mut w = self
                .object_watches
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let Some(i) = w.iter().position(|(c, _)| *c == cookie) else {
                return;
            };
            w.swap_remove(i)
        };
        self.unwatch_and_flush(ctx.0);
        drop(ctx);
    }

    pub(crate) fn unwatch_and_flush(&self, cookie: u64) {
        // SAFETY: a watch made on this ioctx; after unwatch2 and watch_flush no callback
        // of it runs any more, so its context may be freed by the caller.
        unsafe {
            (self.api.rados_unwatch2)(self.ioctx, cookie);
            (self.api.rados_watch_flush)(self.cluster_handle());
        }
    }

    /// Notifies every watcher of object `name` with `payload` and waits until each has
    /// answered or `timeout_ms` passed (`ErrorKind::TimedOut`: some watcher did not answer).
    pub fn object_notify(&self, name: &str, payload: &[u8], timeout_ms: u64) -> io::Result<()> {
        let oid = cstring(name, "object name")?;
        let len = c_int::try_from(payload.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "notification too large"))?;
        let mut reply: *mut c_char = std::ptr::null_mut();
        let mut reply_len = 0usize;
        // SAFETY: live ioctx; `payload` readable for `len`; out-pointers valid.
        let r = unsafe {
            (self.api.rados_notify2)(
                self.ioctx,
                oid.as_ptr(),
                payload.as_ptr().cast::<c_char>(),
                len,
                timeout_ms,
                &mut reply,
                &mut reply_len,
            )
        };
        if !reply.is_null() {
            // SAFETY: a reply buffer librados allocated for this call, freed once.
            unsafe { (self.api.rados_buffer_free)(reply) };
        }
        errno(r.into()).map(drop)
    }
}
