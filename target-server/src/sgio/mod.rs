//! SCSI passthrough's device side: a real local SCSI device opened through its SCSI
//! generic node and the commands of a passthrough LUN (tgt's `--device-type pt`) sent to
//! it. `sg` (`/dev/sgN`) is driven asynchronously: one thread per device queues up to
//! [`SG_QUEUE`] commands with `write(2)` and reaps them with `read(2)` as they finish
//! (`sg_queue.rs`), never a thread per command. `bsg` (`/dev/bsg/H:C:T:L`) has only the
//! blocking `SG_IO` ioctl since Linux 4.17 took its read/write interface away: a pool of
//! [`BSG_POOL`] threads per device runs it (`bsg_pool.rs`). The kernel's structures and
//! calls are in `abi.rs`.
//!
//! This module knows nothing of iSCSI or of the backend: a command is a [`Request`] (CDB,
//! data direction and bytes, and what to do with the [`Reply`]), and a reset is a call.

mod abi;
mod bsg_pool;
mod sg_queue;

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Commands one sg device has queued in the kernel at most (the sg driver's own limit per
/// open file, `SG_MAX_QUEUE`); more wait in the device's queue here.
pub const SG_QUEUE: usize = 16;
/// Threads that run a bsg device's blocking `SG_IO`s.
pub const BSG_POOL: usize = 4;
/// The largest transfer of one passthrough command; a longer one is refused before it
/// reaches the device.
pub const MAX_TRANSFER: usize = 16 << 20;
/// Sense bytes kept of an answer (SPC-4's largest is 252).
const SENSE_MAX: usize = 252;
/// The longest CDB the kernel takes (`SG_MAX_CDB_SIZE`).
const CDB_MAX: usize = 252;
/// The reserved buffer sg keeps for this file (tgt's size).
const SG_RESERVED: i32 = 512 * 1024;
/// SCSI generic's character major (`/dev/sgN`).
const SCSI_GENERIC_MAJOR: u64 = 21;

/// Which kernel interface reaches the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/dev/sgN`: sg v3 requests queued with write(2), reaped with read(2).
    Sg,
    /// `/dev/bsg/H:C:T:L`: v4 requests with the blocking SG_IO ioctl.
    Bsg,
}

impl Kind {
    /// tgt's bstype: `sg` or `bsg`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sg => "sg",
            Kind::Bsg => "bsg",
        }
    }
}

/// The data of a command.
#[derive(Debug)]
pub enum Data {
    /// No data phase.
    None,
    /// Data-Out: these bytes go to the device.
    Out(Vec<u8>),
    /// Data-In: the device sends at most this many bytes.
    In(usize),
}

/// One command for the device and what to do with its answer (called on the device's
/// thread: it must not block for long).
pub struct Request {
    pub cdb: Vec<u8>,
    pub data: Data,
    pub done: Box<dyn FnOnce(Reply) + Send>,
}

/// How a command ended.
#[derive(Debug)]
pub enum Outcome {
    /// The device answered with this SCSI status and these sense bytes.
    Device { status: u8, sense: Vec<u8> },
    /// The command did not end at the device: the host adapter's (`DID_*`) and the
    /// driver's status say why (a timeout, a reset, a device gone).
    Transport { host: u16, driver: u16 },
    /// The kernel refused the request (a transfer too long for the device, no memory, the
    /// device gone).
    Refused(io::Error),
}

/// The answer to a [`Request`].
#[derive(Debug)]
pub struct Reply {
    pub outcome: Outcome,
    /// Data-In: the bytes the device sent (cut to what it transferred). Data-Out: the
    /// write buffer, back for reuse.
    pub data: Vec<u8>,
}

/// What the device says it is (its standard INQUIRY data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Peripheral device type (0 disk, 1 tape, 5 cd/dvd, 8 changer, ...).
    pub pdt: u8,
    pub vendor: String,
    pub product: String,
    pub revision: String,
}

/// A local SCSI device open for passthrough, with the thread(s) that run its commands.
/// Dropping it lets the threads finish the commands they hold and end; the device is
/// closed when the last has.
pub struct PtDevice {
    kind: Kind,
    path: PathBuf,
    identity: Identity,
    submit: Submit,
    /// An sg file of the device for LOGICAL UNIT RESET (`None`: a bsg device without an sg
    /// node, which cannot be reset from here).
    reset_fd: Option<Arc<OwnedFd>>,
    resetting: Arc<AtomicBool>,
}

enum Submit {
    Sg(sg_queue::Queue),
    Bsg(bsg_pool::Pool),
}

impl std::fmt::Debug for PtDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtDevice")
            .field("kind", &self.kind)
            .field("path", &self.path)
            .field("identity", &self.identity)
            .finish()
    }
}

impl PtDevice {
    /// Opens the device at `path` as `kind` (checked: an sg node for `sg`, a bsg node for
    /// `bsg`), asks its INQUIRY data and starts its thread(s), named after `name`.
    pub fn open(path: &Path, kind: Kind, name: &str) -> io::Result<PtDevice> {
        check_node(path, kind)?;
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true).write(true);
        if kind == Kind::Sg {
            opts.custom_flags(libc::O_NONBLOCK);
        }
        let file = opts
            .open(path)
            .map_err(|e| with_path(path, "cannot open", e))?;
        if kind == Kind::Sg {
            let v = abi::sg_version(file.as_fd()).map_err(|e| with_path(path, "sg version", e))?;
            if v < 30000 {
                return Err(invalid(format!(
                    "{}: the sg driver is version {v}: passthrough needs 3.x",
                    path.display()
                )));
            }
            abi::set_reserved_size(file.as_fd(), SG_RESERVED)
                .map_err(|e| with_path(path, "SG_SET_RESERVED_SIZE", e))?;
        }
        let identity = inquiry(&file, kind)
            .map_err(|e| with_path(path, "the device does not answer INQUIRY", e))?;
        let timeout_ms = timeout_for(identity.pdt);
        let reset_fd = match kind {
            Kind::Sg => Some(reset_file(path)?),
            Kind::Bsg => sg_node_of_bsg(path).and_then(|sg| reset_file(&sg).ok()),
        };
        let fd = OwnedFd::from(file);
        let submit = match kind {
            Kind::Sg => Submit::Sg(sg_queue::Queue::start(fd, timeout_ms, name)?),
            Kind::Bsg => Submit::Bsg(bsg_pool::Pool::start(fd, timeout_ms, name)?),
        };
        Ok(PtDevice {
            kind,
            path: path.to_path_buf(),
            identity,
            submit,
            reset_fd: reset_fd.map(Arc::new),
            resetting: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Sends `req` to the device; its `done` runs when the device answered (or at once,
    /// on this thread, when the request cannot be sent).
    pub fn submit(&self, req: Request) {
        let Ok(req) = check_request(req) else {
            return;
        };
        match &self.submit {
            Submit::Sg(q) => q.push(req),
            Submit::Bsg(p) => p.push(req),
        }
    }

    /// The device can be reset from here (an sg node to reset it through).
    pub fn can_reset(&self) -> bool {
        self.reset_fd.is_some()
    }

    /// LOGICAL UNIT RESET of the device (`SG_SCSI_RESET`), on a thread of its own (the
    /// kernel's error handler may take seconds); `then` runs when it is done. A reset
    /// asked while one runs runs `then` at once: the device is being reset already.
    pub fn reset(&self, then: Box<dyn FnOnce() + Send>) {
        let Some(fd) = self.reset_fd.clone() else {
            tracing::warn!(path = %self.path.display(),
                "logical unit reset not passed to the device: its bsg node has no sg node \
                 to reset it through (modprobe sg)");
            then();
            return;
        };
        if self.resetting.swap(true, Ordering::AcqRel) {
            then();
            return;
        }
        let busy = Arc::clone(&self.resetting);
        let path = self.path.clone();
        // `then` runs when the reset is done, or when no thread could be started for it
        let finish = Finally(Some(then));
        let run = move || {
            match abi::reset_device(fd.as_fd()) {
                Ok(()) => tracing::info!(path = %path.display(), "device reset (SG_SCSI_RESET)"),
                Err(e) => tracing::warn!(path = %path.display(), "device reset failed: {e}"),
            }
            busy.store(false, Ordering::Release);
            drop(finish);
        };
        let spawned = std::thread::Builder::new()
            .name("pt-reset".into())
            .spawn(run);
        if let Err(e) = spawned {
            tracing::error!(path = %self.path.display(), "cannot start the reset thread: {e}");
            self.resetting.store(false, Ordering::Release);
        }
    }
}

/// Runs its closure when dropped.
struct Finally(Option<Box<dyn FnOnce() + Send>>);

impl Drop for Finally {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// A request the kernel would refuse anyway (a transfer beyond [`MAX_TRANSFER`], a CDB
/// longer than it takes) is answered at once: `Err` when it was.
fn check_request(req: Request) -> Result<Request, ()> {
    let len = match &req.data {
        Data::None => 0,
        Data::Out(d) => d.len(),
        Data::In(n) => *n,
    };
    if len <= MAX_TRANSFER && req.cdb.len() <= CDB_MAX {
        return Ok(req);
    }
    let data = match req.data {
        Data::Out(d) => d,
        _ => Vec::new(),
    };
    (req.done)(Reply {
        outcome: Outcome::Refused(io::Error::from_raw_os_error(libc::EINVAL)),
        data,
    });
    Err(())
}

/// How long the kernel lets one command run before it aborts it: tgt's 30 seconds, and
/// hours for a tape drive (ERASE, a SPACE to the end of a long tape), half an hour for a
/// changer (a robot's moves and inventory).
fn timeout_for(pdt: u8) -> u32 {
    match pdt {
        0x01 => 14_000_000,
        0x08 => 1_800_000,
        _ => 30_000,
    }
}

/// The path is the character device `kind` asks for.
fn check_node(path: &Path, kind: Kind) -> io::Result<()> {
    let md = std::fs::metadata(path).map_err(|e| with_path(path, "cannot stat", e))?;
    let major = |rdev: u64| ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    if !md.file_type().is_char_device() {
        return Err(invalid(format!(
            "{} is not a character device: passthrough needs {}",
            path.display(),
            expected(kind)
        )));
    }
    let ok = match kind {
        Kind::Sg => major(md.rdev()) == SCSI_GENERIC_MAJOR,
        Kind::Bsg => bsg_major().is_some_and(|m| m == major(md.rdev())),
    };
    if !ok {
        return Err(invalid(format!(
            "{} is not {}",
            path.display(),
            expected(kind)
        )));
    }
    Ok(())
}

fn expected(kind: Kind) -> &'static str {
    match kind {
        Kind::Sg => "a SCSI generic node (/dev/sgN, character major 21; modprobe sg)",
        Kind::Bsg => "a bsg node (/dev/bsg/H:C:T:L)",
    }
}

/// bsg's character major, from /proc/devices.
fn bsg_major() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/devices").ok()?;
    text.lines()
        .skip_while(|l| !l.starts_with("Character devices"))
        .filter_map(|l| l.trim().split_once(' '))
        .find(|(_, name)| name.trim() == "bsg")
        .and_then(|(n, _)| n.parse().ok())
}

/// The sg node of the SCSI device a bsg node stands for (its sysfs device's
/// `scsi_generic` entry), when the sg driver is loaded.
fn sg_node_of_bsg(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let dir = Path::new("/sys/class/bsg")
        .join(name)
        .join("device/scsi_generic");
    let sg = std::fs::read_dir(dir).ok()?.flatten().next()?.file_name();
    let node = Path::new("/dev").join(sg);
    node.exists().then_some(node)
}

/// A blocking sg file of the device, for resets.
fn reset_file(path: &Path) -> io::Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|e| with_path(path, "cannot open for resets", e))
}

/// The device's standard INQUIRY data, asked with a blocking SG_IO.
fn inquiry(file: &File, kind: Kind) -> io::Result<Identity> {
    let cdb = [0x12u8, 0, 0, 0, 96, 0];
    let mut data = vec![0u8; 96];
    let mut sense = [0u8; SENSE_MAX];
    let (status, host, got) = match kind {
        Kind::Sg => {
            let mut h = abi::SgIoHdr::empty();
            h.dxfer_direction = abi::SG_DXFER_FROM_DEV;
            h.cmd_len = cdb.len() as u8;
            h.cmdp = cdb.as_ptr();
            h.dxfer_len = data.len() as u32;
            h.dxferp = data.as_mut_ptr();
            h.mx_sb_len = SENSE_MAX as u8;
            h.sbp = sense.as_mut_ptr();
            h.timeout = 30_000;
            abi::sg_io_v3(file.as_fd(), &mut h)?;
            (
                h.status,
                h.host_status,
                data.len() - h.resid.clamp(0, 96) as usize,
            )
        }
        Kind::Bsg => {
            let mut h = abi::SgIoV4 {
                guard: i32::from(b'Q'),
                request_len: cdb.len() as u32,
                request: cdb.as_ptr() as u64,
                max_response_len: SENSE_MAX as u32,
                response: sense.as_mut_ptr() as u64,
                din_xfer_len: data.len() as u32,
                din_xferp: data.as_mut_ptr() as u64,
                timeout: 30_000,
                ..Default::default()
            };
            abi::sg_io_v4(file.as_fd(), &mut h)?;
            (
                h.device_status as u8,
                h.transport_status as u16,
                data.len() - h.din_resid.clamp(0, 96) as usize,
            )
        }
    };
    if status != 0 || host != 0 || got < 36 {
        return Err(invalid(format!(
            "INQUIRY ended with status {status:#x}, host status {host:#x}, {got} bytes"
        )));
    }
    let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&data[r]).trim().to_string();
    Ok(Identity {
        pdt: data[0] & 0x1F,
        vendor: text(8..16),
        product: text(16..32),
        revision: text(32..36),
    })
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn with_path(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

/// What the kernel said about a finished command, in the form both interfaces give it.
pub(crate) struct Finished {
    pub status: u8,
    pub host: u16,
    pub driver: u16,
    pub sense_len: usize,
}

impl Finished {
    /// The [`Outcome`]: the device's status and sense when the command ended there.
    pub(crate) fn outcome(&self, sense: &[u8]) -> Outcome {
        // the driver's SENSE bit only says sense came; anything else there, or from the
        // host adapter, means the command did not end at the device
        const DRIVER_SENSE: u16 = 0x08;
        if self.host != 0 || (self.driver & !DRIVER_SENSE & 0x0F) != 0 {
            return Outcome::Transport {
                host: self.host,
                driver: self.driver,
            };
        }
        Outcome::Device {
            status: self.status,
            sense: sense[..self.sense_len.min(sense.len())].to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_ended_at_the_device_keeps_its_status_and_sense() {
        let sense = [0x70, 0, 0x06, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x29, 0x00];
        let fin = |status, host, driver, sense_len| Finished {
            status,
            host,
            driver,
            sense_len,
        };
        match fin(2, 0, 0x08, 14).outcome(&sense) {
            Outcome::Device {
                status: 2,
                sense: s,
            } => assert_eq!(s, sense.to_vec()),
            other => panic!("{other:?}"),
        }
        // more sense written than kept is cut to what there is
        match fin(2, 0, 0, 200).outcome(&sense) {
            Outcome::Device { sense: s, .. } => assert_eq!(s.len(), sense.len()),
            other => panic!("{other:?}"),
        }
        // DID_TIME_OUT, or a driver error beyond the sense bit: not the device's answer
        assert!(matches!(
            fin(0, 3, 0, 0).outcome(&sense),
            Outcome::Transport { host: 3, .. }
        ));
        assert!(matches!(
            fin(0, 0, 0x06, 0).outcome(&sense),
            Outcome::Transport { driver: 6, .. }
        ));
    }

    #[test]
    fn requests_the_kernel_would_refuse_are_answered_at_once() {
        let answered = |cdb_len: usize, data: Data| {
            let got = Arc::new(std::sync::Mutex::new(None));
            let g = Arc::clone(&got);
            let r = check_request(Request {
                cdb: vec![0x28; cdb_len],
                data,
                done: Box::new(move |reply| *g.lock().unwrap() = Some(reply)),
            });
            let reply = got.lock().unwrap().take();
            (r.is_ok(), reply)
        };
        let (ok, reply) = answered(10, Data::In(MAX_TRANSFER));
        assert!(ok && reply.is_none());
        let (ok, reply) = answered(10, Data::Out(vec![7; MAX_TRANSFER + 1]));
        let reply = reply.expect("answered");
        assert!(!ok && matches!(reply.outcome, Outcome::Refused(_)));
        assert_eq!(
            reply.data.len(),
            MAX_TRANSFER + 1,
            "the write buffer comes back"
        );
        let (ok, reply) = answered(CDB_MAX + 1, Data::None);
        assert!(!ok && reply.is_some());
    }

    #[test]
    fn tapes_and_changers_get_longer_timeouts() {
        assert_eq!(timeout_for(0), 30_000);
        assert!(timeout_for(1) > timeout_for(8) && timeout_for(8) > timeout_for(0));
    }

    #[test]
    fn nodes_that_are_not_scsi_generic_are_refused() {
        let e = PtDevice::open(Path::new("/dev/null"), Kind::Sg, "t").expect_err("not sg");
        assert!(e.to_string().contains("is not a SCSI generic node"), "{e}");
        let e = PtDevice::open(Path::new("/dev/null"), Kind::Bsg, "t").expect_err("not bsg");
        assert!(e.to_string().contains("is not a bsg node"), "{e}");
        let e = PtDevice::open(Path::new("/"), Kind::Sg, "t").expect_err("a directory");
        assert!(e.to_string().contains("is not a character device"), "{e}");
        let e = PtDevice::open(Path::new("/nonexistent/sg9"), Kind::Sg, "t").expect_err("none");
        assert!(e.to_string().contains("cannot stat"), "{e}");
    }
}
