//! Device contexts as librdmacm opens them, and the protection domain of one.
//!
//! Queue pairs created with `rdma_create_qp` must live in a protection domain of the very
//! `ibv_context` the CM id is bound to, which librdmacm opens itself. [`Context::of_id`]
//! takes a counted reference on it through `rdma_get_devices` (released by
//! `rdma_free_devices` when the last [`Context`] clone is dropped), so a context never goes
//! away under a protection domain, a memory region or a completion queue made from it.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys as ffi;

use crate::cm::CmId;
use crate::error::{Error, LIBIBVERBS, LIBRDMACM, Result};

/// The list `rdma_get_devices` returned: holding it holds a reference on every context in it.
struct DeviceList(NonNull<*mut ffi::ibv_context>);

// SAFETY: the list is an immutable array of context pointers freed once, in drop; librdmacm
// serialises rdma_free_devices with its own lock.
unsafe impl Send for DeviceList {}
// SAFETY: as above: nothing in it is mutated while it is shared.
unsafe impl Sync for DeviceList {}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from rdma_get_devices and is freed once; every user of a
        // context in it holds an Arc to this list, so none is left.
        unsafe { ffi::rdma_free_devices(self.0.as_ptr()) }
        resync_devices();
    }
}

/// Makes librdmacm read the device list again (and let go of the list at once).
///
/// librdmacm closes the context of a removed device only when it notices the removal (it
/// re-reads the list in `rdma_get_devices`) while nothing references that context; and a
/// device removal (`rdma link delete`) of a device without context disassociation
/// (soft-RoCE) waits in the kernel until that close. Call it after the last reference to
/// a removed device's objects is dropped, and again once the device has left the list.
/// librdmacm 44 cannot notice the removal of the last RDMA device of the host (its re-read
/// fails on an empty list), so that one stays open until the process exits.
pub fn resync_devices() {
    let mut n: libc::c_int = 0;
    // SAFETY: `n` is a valid out pointer; a non-NULL list is freed right away, once.
    unsafe {
        let list = ffi::rdma_get_devices(&mut n);
        if !list.is_null() {
            ffi::rdma_free_devices(list);
        }
    }
}

/// An open RDMA device context (`ibv_context`), kept open while any clone exists.
#[derive(Clone)]
pub struct Context {
    ctx: NonNull<ffi::ibv_context>,
    _list: Arc<DeviceList>,
}

// SAFETY: libibverbs contexts are thread-safe (every verb on them locks as needed); this
// wrapper exposes no Rust-side mutable state.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// The context `id` is bound to (a connect request's new id, or a client id after
    /// address resolution). [`Error::Invalid`] when the id is not bound to a device yet.
    pub fn of_id(id: &CmId) -> Result<Context> {
        let want = id.verbs();
        if want.is_null() {
            return Err(Error::Invalid("CM id not bound to an RDMA device"));
        }
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a valid out pointer; the list is freed by DeviceList's drop.
        let list = unsafe { ffi::rdma_get_devices(&mut n) };
        let list = NonNull::new(list).ok_or_else(|| Error::last("rdma_get_devices", LIBRDMACM))?;
        let list = Arc::new(DeviceList(list));
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` context pointers (then a NULL); `i < n`.
            let ctx = unsafe { *list.0.as_ptr().add(i) };
            if ctx == want {
                let ctx = NonNull::new(ctx).ok_or(Error::Invalid("NULL device context"))?;
                return Ok(Context { ctx, _list: list });
            }
        }
        Err(Error::Invalid(
            "CM id's device context is not in rdma_get_devices",
        ))
    }

    /// Whether `id` is bound to this very context. librdmacm may open a device anew when
    /// its device list changes (another device added or removed), so contexts of one device
    /// name are told apart by this, not by name.
    pub fn is_of(&self, id: &CmId) -> bool {
        self.ctx.as_ptr() == id.verbs()
    }

    /// The device's kernel name (e.g. `rxe0`).
    pub fn device_name(&self) -> String {
        // SAFETY: the context is open; `device` is set at open and constant, and its name is
        // a NUL-terminated string owned by the device, copied here.
        unsafe {
            let dev = self.ctx.as_ref().device;
            CStr::from_ptr(ffi::ibv_get_device_name(dev))
                .to_string_lossy()
                .into_owned()
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.ctx.as_ptr()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context({:p})", self.ctx.as_ptr())
    }
}

/// A protection domain: memory regions and queue pairs of one device context. Shared with
/// `Arc` by the regions and connections made in it, so it is deallocated after them.
pub struct ProtectionDomain {
    pd: NonNull<ffi::ibv_pd>,
    ctx: Context,
}

// SAFETY: a PD is only passed to thread-safe verbs (reg_mr, create_qp) and freed once.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Context) -> Result<Arc<ProtectionDomain>> {
        // SAFETY: the context is open (held by `ctx`).
        let pd = unsafe { ffi::ibv_alloc_pd(ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| Error::last("ibv_alloc_pd", LIBIBVERBS))?;
        Ok(Arc::new(ProtectionDomain {
            pd,
            ctx: ctx.clone(),
        }))
    }

    /// The context the domain belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.pd.as_ptr()
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: the PD is freed once; every region and queue pair in it holds an Arc to it,
        // so none is left. A failure (EBUSY) cannot be acted on in drop.
        unsafe { ffi::ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProtectionDomain({:p})", self.pd.as_ptr())
    }
}
