//! A tape drive's commands: each runs on the drive's own thread (`serial_work`), in the
//! order the LUN received them, where `scsi::ssc` reads and writes the tape image through
//! [`FileTape`] (pread, pwrite, fdatasync on the image file, opened read-write, or
//! read-only when the file or the LUN is). The answer goes back through the command's
//! `Replier` with its write buffer.
//!
//! A tape is in one drive at a time: the image is locked (`flock`, exclusive) while a drive
//! holds it, so a second drive of this daemon, or another numatgtd, cannot load it too.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};
use scsi::ssc::TapeMedium;

use super::reply::{Answer, ReplyTo, completed};
use crate::registry::Lun;

/// Where the MAM's medium type is in a tape image.
const MEDIUM_TYPE_AT: u64 = 48 + 336;

/// A tape image file, locked while it is open.
#[derive(Debug)]
pub struct FileTape {
    file: Flock<File>,
    writable: bool,
}

impl FileTape {
    /// Opens and locks the image at `path`: read-write unless `readonly` or the file
    /// refuses it. A tape another drive holds is refused.
    pub fn open(path: &Path, readonly: bool) -> io::Result<FileTape> {
        let (file, writable) = match std::fs::OpenOptions::new()
            .read(true)
            .write(!readonly)
            .open(path)
        {
            Ok(f) => (f, !readonly),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && !readonly => {
                (File::open(path)?, false)
            }
            Err(e) => return Err(e),
        };
        // a tape that is never written (a cleaning cartridge, read-only) may be in several
        // drives at once (tgt's VTL examples give every empty drive the same "notape"
        // cleaning cartridge); a data tape written in one drive is in no other
        let mut medium = [0u8; 1];
        let never_written = !writable
            || (file.read_exact_at(&mut medium, MEDIUM_TYPE_AT).is_ok()
                && medium[0] == scsi::ssc::format::medium::CLEANING);
        let how = if never_written {
            FlockArg::LockSharedNonblock
        } else {
            FlockArg::LockExclusiveNonblock
        };
        let file = Flock::lock(file, how).map_err(|(_, e)| {
            if e == nix::errno::Errno::EWOULDBLOCK {
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the tape is in another drive (its image is locked)",
                )
            } else {
                io::Error::from(e)
            }
        })?;
        Ok(FileTape { file, writable })
    }
}

impl TapeMedium for FileTape {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }

    fn write_at(&mut self, off: u64, parts: &[&[u8]]) -> io::Result<()> {
        let mut at = off;
        for p in parts {
            self.file.write_all_at(p, at)?;
            at += p.len() as u64;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn writable(&self) -> bool {
        self.writable
    }
}

/// Queues `op` (with its write data `data`) on the drive's thread; answers when it ran.
pub fn start(lun: &Arc<Lun>, op: scsi::ssc::TapeOp, data: Vec<u8>, reply: ReplyTo) -> Answer {
    let Some(work) = &lun.serial else {
        let c = lun
            .scsi
            .check_condition(&scsi::Sense::internal_target_failure());
        return Answer::Now(completed(c));
    };
    let (replier, later) = reply.defer();
    let job_lun = Arc::clone(lun);
    let job = Box::new(move || {
        let c = job_lun.scsi.run_tape(&op, &data);
        replier.send_with_buffer(completed(c), data);
    });
    if work.push(job).is_err() {
        // the drive's thread is gone: the dropped job's replier answers INTERNAL TARGET
        // FAILURE
        tracing::error!(lun = lun.number, "the tape drive's thread has ended");
    }
    Answer::Later(later)
}

/// The image at `path` is a tape (read without taking its lock: a reload checks a drive's
/// tape while the old drive still holds it).
pub fn check(path: &Path) -> Result<(), String> {
    /// The image read as it is, unlocked and never written.
    struct Unlocked(File);
    impl TapeMedium for Unlocked {
        fn read_at(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()> {
            self.0.read_exact_at(buf, off)
        }
        fn write_at(&mut self, _: u64, _: &[&[u8]]) -> io::Result<()> {
            Err(io::ErrorKind::PermissionDenied.into())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn writable(&self) -> bool {
            false
        }
    }
    let f = File::open(path).map_err(|e| e.to_string())?;
    scsi::ssc::Cartridge::open(Box::new(Unlocked(f)))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The tape drives of `targets` that are online without their tape (opened by a reload
/// while the old drives held the tapes) load it now.
pub fn load_deferred(targets: &[Arc<crate::registry::Target>]) {
    for t in targets {
        for lun in t.lun_set().map.values() {
            if lun.scsi.params().device_type != scsi::DeviceType::Tape
                || lun.scsi.tape_status().loaded
            {
                continue;
            }
            let (path, online) = {
                let m = lun.meta.lock().unwrap_or_else(|p| p.into_inner());
                (m.path.clone(), m.online)
            };
            if !online {
                continue;
            }
            let r = FileTape::open(Path::new(&path), lun.scsi.params().readonly)
                .map_err(|e| e.to_string())
                .and_then(|tape| {
                    lun.scsi
                        .tape_insert(Box::new(tape))
                        .map(drop)
                        .map_err(|e| e.to_string())
                });
            match r {
                Ok(()) => tracing::info!(target = %t.iqn, lun = lun.number, path, "tape loaded"),
                Err(e) => tracing::error!(target = %t.iqn, lun = lun.number, path,
                    "reload: the drive's tape could not be loaded, the drive is empty: {e}"),
            }
        }
    }
}

/// Tape drives go on with the previous numatgtd's tape and position, now that every tape
/// is in its drive again (`scsi::LogicalUnit::tape_resume`; where one cannot, its moved
/// sessions are told POWER ON OCCURRED, and the log says why).
pub fn resume_all(registry: &crate::registry::Registry) {
    for t in registry.targets() {
        for (lun, l) in &t.lun_set().map {
            if l.scsi.params().device_type != scsi::DeviceType::Tape {
                continue;
            }
            match l.scsi.tape_resume() {
                Ok(()) => {}
                Err(e) => tracing::warn!(
                    target = %t.iqn,
                    lun,
                    "the tape drive cannot go on where the previous numatgtd left it ({e}): \
                     its sessions are told of a power on"
                ),
            }
        }
    }
}
