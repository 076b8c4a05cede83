//! Safe handles: a connected [`Cluster`] and an open [`Image`] with its blocking calls, the
//! asynchronous ones (a completion closure run on a librbd thread), update watches and the
//! exclusive-lock calls. Handles are closed in the right order on drop (watches, image,
//! I/O context, cluster).

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::io;
use std::sync::{Arc, Mutex};

use crate::ffi::{Api, Handle, api, check, errno};
use crate::opts::{ClusterOptions, ImageSpec};

pub(crate) fn cstring(s: &str, what: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {s:?} contains a NUL byte"),
        )
    })
}

/// A connection to one Ceph cluster (`rados_t`).
pub struct Cluster {
    api: &'static Api,
    handle: Handle,
    /// `rados_connect` succeeded (counted in [`crate::connections`]).
    connected: bool,
}

// SAFETY: a connected rados_t is used from any thread; librados serializes internally.
unsafe impl Send for Cluster {}
// SAFETY: as above: every call taking the handle is thread-safe.
unsafe impl Sync for Cluster {}

impl Cluster {
    /// Connects as `opts` says. Never waits longer than `client_mount_timeout` (10 s unless
    /// overridden) for an unreachable cluster.
    pub fn connect(opts: &ClusterOptions) -> io::Result<Arc<Cluster>> {
        let api = api()?;
        let cluster = cstring(opts.cluster.as_deref().unwrap_or("ceph"), "cluster name")?;
        let name = cstring(&opts.client_name(), "client id")?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer and C strings; flags 0.
        let r = unsafe { (api.rados_create2)(&mut handle, cluster.as_ptr(), name.as_ptr(), 0) };
        check(r.into(), "rados_create2")?;
        // from here the handle is shut down on every path by Drop
        let mut c = Cluster {
            api,
            handle,
            connected: false,
        };
        let conf = match &opts.conf {
            Some(p) => Some(cstring(&p.to_string_lossy(), "conf path")?),
            None => None,
        };
        // SAFETY: live, unconnected handle; NULL asks for librados's default search.
        let r = unsafe {
            (api.rados_conf_read_file)(
                c.handle,
                conf.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
            )
        };
        let conf_name = opts
            .conf
            .as_ref()
            .map_or("the default ceph.conf".to_string(), |p| {
                p.display().to_string()
            });
        check(r.into(), &format!("reading {conf_name}"))?;
        for (k, v) in opts.effective_settings() {
            let (ck, cv) = (cstring(&k, "option")?, cstring(&v, "option value")?);
            // SAFETY: live, unconnected handle; valid C strings.
            let r = unsafe { (api.rados_conf_set)(c.handle, ck.as_ptr(), cv.as_ptr()) };
            check(r.into(), &format!("ceph option {k}={v}"))?;
        }
        // SAFETY: live, configured handle.
        let r = unsafe { (api.rados_connect)(c.handle) };
        check(
            r.into(),
            &format!(
                "connecting to the cluster of {conf_name} as {}",
                opts.client_name()
            ),
        )?;
        crate::shared::opened();
        c.connected = true;
        Ok(Arc::new(c))
    }

    /// The connection shared by every image opened with the same cluster options (cluster
    /// name, client, conf, librados settings): the one open already, or a new one that
    /// closes with the last image on it. Not for an image that must be fenced alone (a
    /// broken lock blocklists the whole connection): [`connect`](Self::connect) that one.
    pub fn shared(opts: &ClusterOptions) -> io::Result<Arc<Cluster>> {
        crate::shared::shared(opts)
    }

    /// Opens `spec` (read-only when `read_only` or a snapshot).
    pub fn open(self: &Arc<Self>, spec: &ImageSpec, read_only: bool) -> io::Result<Image> {
        let api = self.api;
        let pool = cstring(&spec.pool, "pool")?;
        let mut ioctx: Handle = std::ptr::null_mut();
        // SAFETY: connected cluster; valid out-pointer and C string.
        let r = unsafe { (api.rados_ioctx_create)(self.handle, pool.as_ptr(), &mut ioctx) };
        check(r.into(), &format!("pool {}", spec.pool))?;
        let image = cstring(&spec.image, "image")?;
        let snap = match &spec.snap {
            Some(s) => Some(cstring(s, "snapshot")?),
            None => None,
        };
        let snap_ptr = snap.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        let read_only = read_only || spec.snap.is_some();
        let mut handle: Handle = std::ptr::null_mut();
        let open = if read_only {
            api.rbd_open_read_only
        } else {
            api.rbd_open
        };
        // SAFETY: live ioctx; valid out-pointer; C strings (snap may be NULL).
        let r = unsafe { open(ioctx, image.as_ptr(), &mut handle, snap_ptr) };
        if let Err(e) = check(r.into(), &format!("rbd image {spec}")) {
            // SAFETY: the ioctx was created above and nothing else uses it.
            unsafe { (api.rados_ioctx_destroy)(ioctx) };
            return Err(e);
        }
        Ok(Image {
            api,
            handle,
            ioctx,
            read_only,
            spec: spec.clone(),
            watches: Mutex::new(Vec::new()),
            object_watches: Mutex::new(Vec::new()),
            _cluster: Arc::clone(self),
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle came from rados_create2; every image and ioctx holds an Arc to
        // this cluster, so none is left.
        unsafe { (self.api.rados_shutdown)(self.handle) };
        if self.connected {
            crate::shared::closed();
        }
    }
}

/// A boxed update-watch callback; its address is librbd's `arg`.
type WatchFn = Box<dyn Fn() + Send + Sync>;

/// An open RBD image (`rbd_image_t`). Thread-safe: librbd serializes what it must.
pub struct Image {
    pub(crate) api: &'static Api,
    handle: Handle,
    pub(crate) ioctx: Handle,
    read_only: bool,
    spec: ImageSpec,
    /// Registered watches: the handle and the callback box, which must outlive the watch.
    watches: Mutex<Vec<(u64, Box<WatchFn>)>>,
    /// Watches of RADOS objects beside the image: cookie and callback context.
    pub(crate) object_watches: Mutex<Vec<(u64, Box<crate::object::WatchCtx>)>>,
    _cluster: Arc<Cluster>,
}

// SAFETY: librbd allows concurrent calls on one image handle from any thread.
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

/// A completion closure: the result (bytes read for reads, 0 for everything else, or the
/// error) and the buffer back.
pub type Done<B> = Box<dyn FnOnce(io::Result<usize>, B) + Send>;

/// What a pending asynchronous call owns until librbd calls back.
struct Pending<B> {
    api: &'static Api,
    buf: B,
    done: Done<B>,
}

unsafe extern "C" fn complete<B>(c: Handle, arg: *mut c_void) {
    // SAFETY: `arg` is the Box<Pending<B>> leaked by `Image::submit` for this completion,
    // and librbd calls back exactly once, so it is reclaimed exactly once.
    let p = unsafe { Box::from_raw(arg.cast::<Pending<B>>()) };
    // SAFETY: `c` is the live completion this callback belongs to; released once, here.
    let r = unsafe { (p.api.rbd_aio_get_return_value)(c) };
    // SAFETY: as above; nothing uses the completion after this.
    unsafe { (p.api.rbd_aio_release)(c) };
    let Pending { buf, done, .. } = *p;
    done(errno(r as i64).map(|n| n as usize), buf);
}

/// Collects the extents `rbd_diff_iterate2` reports as existing into the
/// `Mutex<Vec<(u64, u64)>>` at `arg`.
unsafe extern "C" fn diff_collect(
    offset: u64,
    len: usize,
    exists: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: `arg` is the address of the Mutex that `Image::data_extents` keeps alive
    // (borrowed) for the whole synchronous call that invokes this callback.
    let out = unsafe { &*arg.cast::<Mutex<Vec<(u64, u64)>>>() };
    if exists != 0 {
        out.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((offset, len as u64));
    }
    0
}

unsafe extern "C" fn watch_trampoline(arg: *mut c_void) {
    // SAFETY: `arg` is the address of a WatchFn box kept in `Image::watches` until the
    // watch is removed (rbd_update_unwatch waits for running callbacks).
    let f = unsafe { &*arg.cast::<WatchFn>() };
    f();
}

impl Image {
    /// What was opened.
    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    /// Opened read-only (asked for, or a snapshot).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The image's size in bytes, as the cluster has it now.
    pub fn size(&self) -> io::Result<u64> {
        let mut s = 0u64;
        // SAFETY: open image; valid out-pointer.
        let r = unsafe { (self.api.rbd_get_size)(self.handle, &mut s) };
        errno(r.into())?;
        Ok(s)
    }

    /// Grows or shrinks the image to `size` bytes.
    pub fn resize(&self, size: u64) -> io::Result<()> {
        // SAFETY: open image.
        let r = unsafe { (self.api.rbd_resize)(self.handle, size) };
        errno(r.into()).map(drop)
    }

    /// Reads `buf.len()` bytes at `offset` (blocking).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // SAFETY: `buf` is valid for writes of buf.len() bytes during the call.
        let r = unsafe {
            (self.api.rbd_read2)(self.handle, offset, buf.len(), buf.as_mut_ptr().cast(), 0)
        };
        short(errno(r as i64)?, buf.len())
    }

    /// Writes all of `data` at `offset` (blocking); acknowledged = in the cluster.
    pub fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        // SAFETY: `data` is valid for reads of data.len() bytes during the call.
        let r = unsafe {
            (self.api.rbd_write2)(self.handle, offset, data.len(), data.as_ptr().cast(), 0)
        };
        short(errno(r as i64)?, data.len())
    }

    /// Discards `len` bytes at `offset` (they read back as zeros).
    pub fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        // SAFETY: open image.
        let r = unsafe { (self.api.rbd_discard)(self.handle, offset, len) };
        errno(r.into()).map(drop)
    }

    /// Writes zeros over `len` bytes at `offset` (sparse where librbd can).
    pub fn write_zeroes(&self, offset: u64, len: usize) -> io::Result<()> {
        // SAFETY: open image; no buffer.
        let r = unsafe { (self.api.rbd_write_zeroes)(self.handle, offset, len, 0, 0) };
        errno(r as i64).map(drop)
    }

    /// Waits until every acknowledged write is durable in the cluster.
    pub fn flush(&self) -> io::Result<()> {
        // SAFETY: open image.
        let r = unsafe { (self.api.rbd_flush)(self.handle) };
        errno(r.into()).map(drop)
    }

    /// Hands a completion to `submit`; on a submission error the closure is called at once.
    fn submit<B: Send + 'static>(
        &self,
        buf: B,
        done: Done<B>,
        submit: impl FnOnce(&mut B, Handle) -> c_int,
    ) {
        let p = Box::into_raw(Box::new(Pending {
            api: self.api,
            buf,
            done,
        }));
        let mut c: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; `p` stays alive until the callback reclaims it.
        let r = unsafe { (self.api.rbd_aio_create_completion)(p.cast(), complete::<B>, &mut c) };
        let r = if r < 0 {
            r
        } else {
            // SAFETY: `p` is live until the callback, which cannot run before submission;
            // the buffer sits in the box from here on, so pointers into it stay valid.
            let buf = unsafe { &mut (*p).buf };
            let s = submit(buf, c);
            if s < 0 {
                // SAFETY: not submitted: librbd never calls back; release it here.
                unsafe { (self.api.rbd_aio_release)(c) };
            }
            s
        };
        if r < 0 {
            // SAFETY: not submitted, so this is the only owner of `p`.
            let p = unsafe { Box::from_raw(p) };
            let Pending { buf, done, .. } = *p;
            done(errno(r.into()).map(|n| n as usize), buf);
        }
    }

    /// Reads into `buf` (its whole length) at `offset`; `done` runs on a librbd thread.
    pub fn aio_read<B: AsMut<[u8]> + Send + 'static>(&self, buf: B, offset: u64, done: Done<B>) {
        let (h, read) = (self.handle, self.api.rbd_aio_read2);
        self.submit(buf, done, |b, c| {
            let s = b.as_mut();
            // SAFETY: `b` lives in the pending call's box (it does not move) until `done`.
            unsafe { read(h, offset, s.len(), s.as_mut_ptr().cast(), c, 0) }
        });
    }

    /// Writes all of `buf` at `offset`; `done` runs on a librbd thread.
    pub fn aio_write<B: AsRef<[u8]> + Send + 'static>(&self, buf: B, offset: u64, done: Done<B>) {
        let h = self.handle;
        let write = self.api.rbd_aio_write2;
        self.submit(buf, done, |b, c| {
            let s = b.as_ref();
            // SAFETY: `b` lives in the pending call's box (it does not move) until `done`.
            unsafe { write(h, offset, s.len(), s.as_ptr().cast(), c, 0) }
        });
    }

    /// Discards `len` bytes at `offset`.
    pub fn aio_discard(&self, offset: u64, len: u64, done: Done<()>) {
        let (h, f) = (self.handle, self.api.rbd_aio_discard);
        // SAFETY: open image; the completion is live.
        self.submit((), done, |_, c| unsafe { f(h, offset, len, c) });
    }

    /// Writes zeros over `len` bytes at `offset`.
    pub fn aio_write_zeroes(&self, offset: u64, len: usize, done: Done<()>) {
        self.aio_write_zeroes_with((), offset, len, done)
    }

    /// [`Image::aio_write_zeroes`] that hands `value` back to `done`.
    pub fn aio_write_zeroes_with<B: Send + 'static>(
        &self,
        value: B,
        offset: u64,
        len: usize,
        done: Done<B>,
    ) {
        let (h, f) = (self.handle, self.api.rbd_aio_write_zeroes);
        // SAFETY: open image; the completion is live.
        self.submit(value, done, |_, c| unsafe { f(h, offset, len, c, 0, 0) });
    }

    /// Flushes every acknowledged write.
    pub fn aio_flush(&self, done: Done<()>) {
        self.aio_flush_with((), done);
    }

    /// [`aio_flush`](Self::aio_flush) carrying `value` to `done` (the caller's record of
    /// the operation), as the I/O calls carry their buffer.
    pub fn aio_flush_with<B: Send + 'static>(&self, value: B, done: Done<B>) {
        let (h, f) = (self.handle, self.api.rbd_aio_flush);
        // SAFETY: open image; the completion is live.
        self.submit(value, done, |_, c| unsafe { f(h, c) });
    }

    /// The extents of `offset .. offset + len` that hold data, `(offset, len)` in order: what
    /// `rbd_diff_iterate2` reports as existing since the image was created, a clone's
    /// parent data included (it reads as data). The rest was never written or was
    /// deallocated, and reads as zeros. Without the image's fast-diff feature librbd asks
    /// each object in the range (a few at a time), so callers keep ranges bounded.
    pub fn data_extents(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64)>> {
        let out: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
        let arg = (&raw const out).cast_mut().cast::<c_void>();
        // SAFETY: open image; no snapshot name (NULL: since creation); `arg` points to
        // `out`, alive until this synchronous call returns; the callback only pushes.
        let r = unsafe {
            (self.api.rbd_diff_iterate2)(
                self.handle,
                std::ptr::null(),
                offset,
                len,
                1,
                0,
                diff_collect,
                arg,
            )
        };
        errno(r.into())?;
        let mut v = out.into_inner().unwrap_or_else(|p| p.into_inner());
        v.sort_unstable();
        Ok(v)
    }

    /// Calls `f` (on a librbd thread) whenever the image's header changes: a resize, a
    /// snapshot, a lock change. The watch lasts as long as the image is open.
    pub fn update_watch(&self, f: impl Fn() + Send + Sync + 'static) -> io::Result<()> {
        let boxed: Box<WatchFn> = Box::new(Box::new(f));
        let arg = (&*boxed as *const WatchFn).cast_mut().cast::<c_void>();
        let mut handle = 0u64;
        let mut watches = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: open image; `arg` points into `boxed`, which is kept in `watches` until
        // the watch is removed in Drop.
        let r =
            unsafe { (self.api.rbd_update_watch)(self.handle, &mut handle, watch_trampoline, arg) };
        check(r.into(), "rbd_update_watch")?;
        watches.push((handle, boxed));
        Ok(())
    }

    /// Takes the exclusive lock (breaking no one's: fails while another client holds it).
    pub fn lock_acquire(&self) -> io::Result<()> {
        // SAFETY: open image; mode 0 = RBD_LOCK_MODE_EXCLUSIVE.
        let r = unsafe { (self.api.rbd_lock_acquire)(self.handle, 0) };
        errno(r.into()).map(drop)
    }

    /// Gives the exclusive lock back.
    pub fn lock_release(&self) -> io::Result<()> {
        // SAFETY: open image.
        let r = unsafe { (self.api.rbd_lock_release)(self.handle) };
        errno(r.into()).map(drop)
    }

    /// Whether this client holds the exclusive lock.
    pub fn is_lock_owner(&self) -> io::Result<bool> {
        let mut owner: c_int = 0;
        // SAFETY: open image; valid out-pointer.
        let r = unsafe { (self.api.rbd_is_exclusive_lock_owner)(self.handle, &mut owner) };
        errno(r.into())?;
        Ok(owner != 0)
    }

    /// The clients holding the lock (empty when none).
    pub fn lock_owners(&self) -> io::Result<Vec<String>> {
        const MAX: usize = 16;
        let mut mode: c_int = 0;
        let mut owners: [*mut c_char; MAX] = [std::ptr::null_mut(); MAX];
        let mut n = MAX;
        // SAFETY: open image; `owners` has room for `n` pointers.
        let r = unsafe {
            (self.api.rbd_lock_get_owners)(self.handle, &mut mode, owners.as_mut_ptr(), &mut n)
        };
        if r == -libc::ENOENT {
            return Ok(Vec::new());
        }
        errno(r.into())?;
        let n = n.min(MAX);
        let out = owners[..n]
            .iter()
            .filter(|p| !p.is_null())
            // SAFETY: librbd filled these with NUL-terminated strings it allocated.
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect();
        // SAFETY: the `n` strings librbd allocated, freed once.
        unsafe { (self.api.rbd_lock_get_owners_cleanup)(owners.as_mut_ptr(), n) };
        Ok(out)
    }

    /// Replaces the whole of RADOS object `name` in the image's pool with `data` (a small
    /// record beside the image, written without the image's lock).
    pub fn object_write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let oid = cstring(name, "object name")?;
        // SAFETY: live ioctx; valid C string; `data` is readable for its length.
        let r = unsafe {
            (self.api.rados_write_full)(
                self.ioctx,
                oid.as_ptr(),
                data.as_ptr().cast::<c_char>(),
                data.len(),
            )
        };
        errno(r.into()).map(drop)
    }

    /// The first `max` bytes of RADOS object `name` in the image's pool; `None` when it
    /// does not exist.
    pub fn object_read(&self, name: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
        let oid = cstring(name, "object name")?;
        let mut buf = vec![0u8; max];
        // SAFETY: live ioctx; valid C string; `buf` is writable for its length.
        let r = unsafe {
            (self.api.rados_read)(
                self.ioctx,
                oid.as_ptr(),
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len(),
                0,
            )
        };
        if r == -libc::ENOENT {
            return Ok(None);
        }
        let n = errno(r.into())?;
        buf.truncate(usize::try_from(n).unwrap_or(0).min(max));
        Ok(Some(buf))
    }

    /// Breaks `owner`'s exclusive lock (blocklisting it: its next write fails).
    pub fn lock_break(&self, owner: &str) -> io::Result<()> {
        let o = cstring(owner, "lock owner")?;
        // SAFETY: open image; valid C string; mode exclusive.
        let r = unsafe { (self.api.rbd_lock_break)(self.handle, 0, o.as_ptr()) };
        errno(r.into()).map(drop)
    }
}

/// A short transfer (past the end of the image) as EIO rather than silent zeros.
fn short(done: u64, want: usize) -> io::Result<()> {
    if done == want as u64 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

impl Image {
    /// The cluster connection's `rados_t`.
    pub(crate) fn cluster_handle(&self) -> Handle {
        self._cluster.handle
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let objects = std::mem::take(
            self.object_watches
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for (cookie, _ctx) in &objects {
            self.unwatch_and_flush(*cookie);
        }
        drop(objects);
        let watches = std::mem::take(self.watches.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (h, _f) in &watches {
            // SAFETY: a watch registered on this open image; unwatch waits for a running
            // callback, after which the box may go.
            unsafe { (self.api.rbd_update_unwatch)(self.handle, *h) };
        }
        drop(watches);
        // SAFETY: the image and its ioctx are closed once, image first; no call is running
        // (Drop has the only reference).
        unsafe {
            (self.api.rbd_close)(self.handle);
            (self.api.rados_ioctx_destroy)(self.ioctx);
        }
    }
}
