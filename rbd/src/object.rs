//! Small RADOS objects beside an image, in the image's pool: state that several gateways
//! share (a compare-and-write that replaces an object only if it still holds what the
//! writer read, or only if it does not exist yet), and watch/notify on such an object — a
//! notification returns once every watcher has run its callback (or the timeout passed),
//! and says which watchers did not answer; extended attributes; this client's id and
//! address, and the fencing of a client (a blocklist entry: none of its operations reaches
//! an OSD any more).

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

/// The watchers a notification timed out on: (client id, cookie) of each.
pub type Unanswered = Vec<(u64, u64)>;

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
    /// answered or `timeout_ms` passed: `Ok` with the watchers that did not answer (empty
    /// when all did).
    pub fn object_notify(
        &self,
        name: &str,
        payload: &[u8],
        timeout_ms: u64,
    ) -> io::Result<Unanswered> {
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
        let unanswered = if reply.is_null() {
            None
        } else {
            // SAFETY: librados allocated `reply_len` bytes at `reply` for this call.
            let bytes = unsafe { std::slice::from_raw_parts(reply.cast::<u8>(), reply_len) };
            let t = parse_notify_reply(bytes);
            // SAFETY: a reply buffer librados allocated for this call, freed once.
            unsafe { (self.api.rados_buffer_free)(reply) };
            t
        };
        match (r, unanswered) {
            (0, _) => Ok(Vec::new()),
            (r, Some(t)) if r == -libc::ETIMEDOUT && !t.is_empty() => Ok(t),
            (r, _) => errno(r.into()).map(|_| Vec::new()),
        }
    }

    /// Sets extended attribute `key` of object `name` to `value`.
    pub fn object_set_xattr(&self, name: &str, key: &str, value: &[u8]) -> io::Result<()> {
        let (oid, k) = (cstring(name, "object name")?, cstring(key, "attribute")?);
        // SAFETY: live ioctx; valid C strings; `value` readable for its length.
        let r = unsafe {
            (self.api.rados_setxattr)(
                self.ioctx,
                oid.as_ptr(),
                k.as_ptr(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
            )
        };
        check(r.into(), &format!("attribute {key} of object {name}")).map(drop)
    }

    /// Extended attribute `key` of object `name` (at most 4 KiB), `None` when unset.
    pub fn object_xattr(&self, name: &str, key: &str) -> io::Result<Option<Vec<u8>>> {
        let (oid, k) = (cstring(name, "object name")?, cstring(key, "attribute")?);
        let mut buf = vec![0u8; 4096];
        // SAFETY: live ioctx; valid C strings; `buf` writable for its length.
        let r = unsafe {
            (self.api.rados_getxattr)(
                self.ioctx,
                oid.as_ptr(),
                k.as_ptr(),
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len(),
            )
        };
        if r == -libc::ENODATA || r == -libc::ENOENT {
            return Ok(None);
        }
        let n = check(r.into(), &format!("attribute {key} of object {name}"))?;
        buf.truncate(usize::try_from(n).unwrap_or(0));
        Ok(Some(buf))
    }

    /// This process's client id on the image's cluster connection (a watcher's id in a
    /// notification's reply).
    pub fn client_id(&self) -> u64 {
        // SAFETY: connected cluster handle.
        unsafe { (self.api.rados_get_instance_id)(self.cluster_handle()) }
    }

    /// This process's client address on the image's cluster connection (`IP:port/nonce`,
    /// what a blocklist entry names).
    pub fn client_addr(&self) -> io::Result<String> {
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: connected cluster handle; valid out-pointer.
        let r = unsafe { (self.api.rados_getaddrs)(self.cluster_handle(), &mut p) };
        check(r.into(), "rados_getaddrs")?;
        if p.is_null() {
            return Err(io::Error::other("rados_getaddrs gave no address"));
        }
        // SAFETY: a NUL-terminated string librados allocated; copied, then freed once.
        let s = unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        unsafe { (self.api.rados_buffer_free)(p) };
        Ok(plain_addr(&s))
    }

    /// Fences the client at `addr` ([`Image::client_addr`] of another process) for an
    /// hour: a blocklist entry, after which none of that client's operations reaches an
    /// OSD (its watches break, its writes fail). Needs the `osd blocklist` capability
    /// (Ceph's `profile rbd` has it).
    pub fn blocklist(&self, addr: &str) -> io::Result<()> {
        let c = cstring(addr, "client address")?;
        let mut bytes = c.into_bytes_with_nul();
        // SAFETY: connected cluster; a NUL-terminated string librados only reads.
        let r = unsafe {
            (self.api.rados_blocklist_add)(
                self.cluster_handle(),
                bytes.as_mut_ptr().cast::<c_char>(),
                3600,
            )
        };
        check(r.into(), &format!("blocklist {addr}")).map(drop)
    }
}

/// The first address of a client's address vector as a blocklist entry names it:
/// `[v2:1.2.3.4:0/77,v1:...]` or `any:1.2.3.4:0/77` → `1.2.3.4:0/77`.
fn plain_addr(s: &str) -> String {
    let first = s
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .next()
        .unwrap_or("");
    first
        .strip_prefix("v2:")
        .or_else(|| first.strip_prefix("v1:"))
        .or_else(|| first.strip_prefix("any:"))
        .unwrap_or(first)
        .to_string()
}

/// The watchers a notification's reply lists as timed out: `u32 acks, {u64 client, u64
/// cookie, u32 len, len bytes} * acks, u32 timeouts, {u64 client, u64 cookie} * timeouts`
/// (little-endian); `None` when the bytes do not parse.
fn parse_notify_reply(b: &[u8]) -> Option<Unanswered> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = b.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let u32le = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap_or([0; 4]));
    let u64le = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
    let acks = u32le(take(4)?);
    for _ in 0..acks {
        take(16)?;
        let len = usize::try_from(u32le(take(4)?)).ok()?;
        take(len)?;
    }
    let timeouts = u32le(take(4)?);
    let mut out = Vec::new();
    for _ in 0..timeouts.min(4096) {
        let client = u64le(take(8)?);
        let cookie = u64le(take(8)?);
        out.push((client, cookie));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_replies_parse_and_garbage_does_not() {
        let mut b = Vec::new();
        b.extend_from_slice(&2u32.to_le_bytes());
        for (c, k, p) in [(7u64, 1u64, &b"ok"[..]), (8, 2, &b""[..])] {
            b.extend_from_slice(&c.to_le_bytes());
            b.extend_from_slice(&k.to_le_bytes());
            b.extend_from_slice(&(p.len() as u32).to_le_bytes());
            b.extend_from_slice(p);
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        assert_eq!(parse_notify_reply(&b), Some(vec![(9, 3)]));
        for cut in 0..b.len() {
            assert_eq!(parse_notify_reply(&b[..cut]), None, "cut at {cut}");
        }
        assert_eq!(parse_notify_reply(&[0xff; 8]), None);
    }

    #[test]
    fn client_addresses_as_blocklist_entries() {
        assert_eq!(
            plain_addr("127.0.0.1:0/3390451234"),
            "127.0.0.1:0/3390451234"
        );
        assert_eq!(
            plain_addr("[v2:10.0.0.1:0/77,v1:10.0.0.1:0/77]"),
            "10.0.0.1:0/77"
        );
        assert_eq!(plain_addr("any:10.0.0.2:0/5"), "10.0.0.2:0/5");
    }
}
