//! The kernel's SCSI generic ABI as numatgtd uses it (`<scsi/sg.h>`, `<linux/bsg.h>`): the
//! sg v3 request header that `write(2)`/`read(2)` on `/dev/sgN` queue and reap, bsg's v4
//! header for its `SG_IO` ioctl, the ioctl numbers, and the few calls on them. Every
//! `unsafe` of passthrough lives here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SG_IO`: one command, blocking (sg and bsg).
const SG_IO: libc::c_ulong = 0x2285;
/// `SG_GET_VERSION_NUM`.
const SG_GET_VERSION_NUM: libc::c_ulong = 0x2282;
/// `SG_SET_RESERVED_SIZE`.
const SG_SET_RESERVED_SIZE: libc::c_ulong = 0x2275;
/// `SG_SCSI_RESET`.
const SG_SCSI_RESET: libc::c_ulong = 0x2284;
/// `SG_SCSI_RESET_DEVICE`: reset the logical unit only.
const SG_SCSI_RESET_DEVICE: libc::c_int = 1;

/// Data direction of a v3 request (`SG_DXFER_*`).
pub const SG_DXFER_NONE: i32 = -1;
pub const SG_DXFER_TO_DEV: i32 = -2;
pub const SG_DXFER_FROM_DEV: i32 = -3;

/// `struct sg_io_hdr` (sg v3), as the kernel lays it out on 64-bit Linux.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SgIoHdr {
    pub interface_id: i32,
    pub dxfer_direction: i32,
    pub cmd_len: u8,
    pub mx_sb_len: u8,
    pub iovec_count: u16,
    pub dxfer_len: u32,
    pub dxferp: *mut u8,
    pub cmdp: *const u8,
    pub sbp: *mut u8,
    pub timeout: u32,
    pub flags: u32,
    pub pack_id: i32,
    pub usr_ptr: *mut libc::c_void,
    pub status: u8,
    pub masked_status: u8,
    pub msg_status: u8,
    pub sb_len_wr: u8,
    pub host_status: u16,
    pub driver_status: u16,
    pub resid: i32,
    pub duration: u32,
    pub info: u32,
}

impl SgIoHdr {
    /// An empty header (`interface_id` 'S'), the form `read(2)` fills in.
    pub fn empty() -> SgIoHdr {
        SgIoHdr {
            interface_id: i32::from(b'S'),
            dxfer_direction: SG_DXFER_NONE,
            cmd_len: 0,
            mx_sb_len: 0,
            iovec_count: 0,
            dxfer_len: 0,
            dxferp: std::ptr::null_mut(),
            cmdp: std::ptr::null(),
            sbp: std::ptr::null_mut(),
            timeout: 0,
            flags: 0,
            pack_id: -1,
            usr_ptr: std::ptr::null_mut(),
            status: 0,
            masked_status: 0,
            msg_status: 0,
            sb_len_wr: 0,
            host_status: 0,
            driver_status: 0,
            resid: 0,
            duration: 0,
            info: 0,
        }
    }
}

/// `struct sg_io_v4` (bsg).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SgIoV4 {
    pub guard: i32,
    pub protocol: u32,
    pub subprotocol: u32,
    pub request_len: u32,
    pub request: u64,
    pub request_tag: u64,
    pub request_attr: u32,
    pub request_priority: u32,
    pub request_extra: u32,
    pub max_response_len: u32,
    pub response: u64,
    pub dout_iovec_count: u32,
    pub dout_xfer_len: u32,
    pub din_iovec_count: u32,
    pub din_xfer_len: u32,
    pub dout_xferp: u64,
    pub din_xferp: u64,
    pub timeout: u32,
    pub flags: u32,
    pub usr_ptr: u64,
    pub spare_in: u32,
    pub driver_status: u32,
    pub transport_status: u32,
    pub device_status: u32,
    pub retry_delay: u32,
    pub info: u32,
    pub duration: u32,
    pub response_len: u32,
    pub din_resid: i32,
    pub dout_resid: i32,
    pub generated_tag: u64,
    pub spare_out: u32,
    pub padding: u32,
}

const _: () = assert!(std::mem::size_of::<SgIoHdr>() == 88);
const _: () = assert!(std::mem::size_of::<SgIoV4>() == 160);

/// The sg driver's version (`SG_GET_VERSION_NUM`, e.g. 30536 for 3.5.36).
pub fn sg_version(fd: BorrowedFd<'_>) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    // SAFETY: SG_GET_VERSION_NUM writes one int through the pointer, which points to `v`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SG_GET_VERSION_NUM, &mut v) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Sets the size of the sg file descriptor's reserved buffer (`SG_SET_RESERVED_SIZE`).
pub fn set_reserved_size(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    let v: libc::c_int = bytes;
    // SAFETY: SG_SET_RESERVED_SIZE reads one int through the pointer, which points to `v`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SG_SET_RESERVED_SIZE, &v) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Resets the logical unit behind an sg node (`SG_SCSI_RESET`, `SG_SCSI_RESET_DEVICE`).
/// Blocks until the kernel's error handler has done it.
pub fn reset_device(fd: BorrowedFd<'_>) -> io::Result<()> {
    let v: libc::c_int = SG_SCSI_RESET_DEVICE;
    // SAFETY: SG_SCSI_RESET reads one int through the pointer, which points to `v`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SG_SCSI_RESET, &v) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the v3 request `hdr` with the blocking `SG_IO` ioctl. The caller keeps the buffers
/// `hdr` points to alive and unaliased for the call.
pub fn sg_io_v3(fd: BorrowedFd<'_>, hdr: &mut SgIoHdr) -> io::Result<()> {
    // SAFETY: `hdr` is a valid sg_io_hdr; its command, data and sense pointers point to
    // buffers of the lengths it states, which the caller keeps alive for this blocking call
    // (the kernel is done with them when it returns).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SG_IO, hdr as *mut SgIoHdr) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the v4 request `hdr` with bsg's blocking `SG_IO` ioctl; same contract as
/// [`sg_io_v3`].
pub fn sg_io_v4(fd: BorrowedFd<'_>, hdr: &mut SgIoV4) -> io::Result<()> {
    // SAFETY: as `sg_io_v3`: a valid sg_io_v4 whose request, response and data addresses
    // point to live buffers of the stated lengths for the duration of the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SG_IO, hdr as *mut SgIoV4) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Queues the v3 request `hdr` on a non-blocking sg file descriptor (`write(2)`). The
/// buffers it points to must stay alive and unmoved until [`sg_reap`] returns the request.
///
/// # Safety
/// The command, data and sense pointers of `hdr` point to buffers of the lengths it
/// states that outlive the request: the kernel writes the data and sense of a read into
/// them when the command completes, after this call returned.
pub unsafe fn sg_queue(fd: BorrowedFd<'_>, hdr: &SgIoHdr) -> io::Result<()> {
    let len = std::mem::size_of::<SgIoHdr>();
    // SAFETY: `hdr` is a readable sg_io_hdr of `len` bytes; the buffers it names satisfy
    // this function's contract.
    let r = unsafe { libc::write(fd.as_raw_fd(), (hdr as *const SgIoHdr).cast(), len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r as usize != len {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sg write"));
    }
    Ok(())
}

/// Takes one finished request off a non-blocking sg file descriptor (`read(2)` with
/// `pack_id` -1: whichever finished first); `Ok(None)` when none has.
pub fn sg_reap(fd: BorrowedFd<'_>) -> io::Result<Option<SgIoHdr>> {
    let mut hdr = SgIoHdr::empty();
    let len = std::mem::size_of::<SgIoHdr>();
    // SAFETY: `hdr` is a writable sg_io_hdr of `len` bytes; the kernel fills it in and
    // writes data and sense only into the buffers the request was queued with.
    let r = unsafe { libc::read(fd.as_raw_fd(), (&mut hdr as *mut SgIoHdr).cast(), len) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(None),
            _ => Err(e),
        };
    }
    if r as usize != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short sg read",
        ));
    }
    Ok(Some(hdr))
}
