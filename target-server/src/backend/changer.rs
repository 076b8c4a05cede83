//! A medium changer's moves, on the changer's own thread (`serial_work`), in the order
//! the LUN received them: MOVE MEDIUM takes the tape out of a drive LUN (made durable
//! first) and puts one in (`media_home/BARCODE`, opened and locked by [`FileTape`]), then
//! the library's state is committed and saved. The state file is the changer's backing
//! store (tgt's `smc` file, which tgtd leaves as it is): written whole to a temporary file
//! and renamed over it, read back when the changer is opened again, so a restart keeps
//! which cartridge is where. [`settle`] puts into each drive the cartridge the library
//! says it holds, once every target is there (start, reload).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use scsi::smc::{DriveRef, Library};

use super::reply::{Answer, ReplyTo, completed};
use super::tape::FileTape;
use crate::registry::{Lun, Registry};

/// HARDWARE ERROR, MECHANICAL POSITIONING ERROR: the tape could not be put in the drive.
const POSITIONING: scsi::Sense = scsi::Sense::new(scsi::sense::key::HARDWARE_ERROR, 0x15, 0x01);
/// NOT READY, LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED: the drive of a data
/// transfer element is not exported.
const NO_DRIVE: scsi::Sense = scsi::Sense::new(scsi::sense::key::NOT_READY, 0x04, 0x03);

/// The drive LUNs of the library's data transfer elements, as the registry has them now.
pub fn drives_of(registry: &Registry, lib: &Library) -> HashMap<DriveRef, Arc<Lun>> {
    let mut out = HashMap::new();
    for d in lib.drives() {
        let lun = registry
            .target_by_tid(d.tid)
            .and_then(|t| t.lun_set().map.get(&d.lun).cloned());
        if let Some(l) = lun.filter(|l| l.scsi.params().device_type == scsi::DeviceType::Tape) {
            out.insert(d, l);
        }
    }
    out
}

/// Queues the MOVE MEDIUM on the changer's thread; answers when it is done.
pub fn start(
    lun: &Arc<Lun>,
    op: scsi::smc::ChangerOp,
    registry: Option<&Registry>,
    reply: ReplyTo,
) -> Answer {
    let scsi::smc::ChangerOp::Move { src, dst, invert } = op;
    let Some(work) = &lun.serial else {
        let c = lun
            .scsi
            .check_condition(&scsi::Sense::internal_target_failure());
        return Answer::Now(completed(c));
    };
    let drives = registry
        .map(|r| drives_of(r, &lun.scsi.changer_library()))
        .unwrap_or_default();
    let (replier, later) = reply.defer();
    let changer = Arc::clone(lun);
    let job = Box::new(move || {
        let c = match move_medium(&changer, src, dst, invert, &drives) {
            Ok(()) => scsi::Completion::good(),
            Err(s) => changer.scsi.check_condition(&s),
        };
        replier.send(completed(c));
    });
    if work.push(job).is_err() {
        tracing::error!(lun = lun.number, "the changer's thread has ended");
    }
    Answer::Later(later)
}

/// Where the tape with `barcode` lives.
fn tape_path(lib: &Library, barcode: &str) -> Option<std::path::PathBuf> {
    let home = lib.media_home.as_deref()?;
    scsi::smc::valid_barcode(barcode).then(|| Path::new(home).join(barcode))
}

/// Puts the tape `barcode` of `lib` into `drive`: opened, locked and loaded; the drive's
/// LUN then shows it as its backing store, online.
fn load(lib: &Library, drive: &Lun, barcode: &str) -> Result<(), String> {
    let path = tape_path(lib, barcode).ok_or_else(|| {
        "the changer has no media_home (tgtadm --params media_home=DIR)".to_string()
    })?;
    let tape = FileTape::open(&path, drive.scsi.params().readonly)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    drive
        .scsi
        .tape_insert(Box::new(tape))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut m = drive.meta.lock().unwrap_or_else(|p| p.into_inner());
    m.path = path.display().to_string();
    m.online = true;
    Ok(())
}

/// Takes the tape out of `drive` (synced first); the drive is then offline, as tgtd shows
/// an empty drive.
fn unload(drive: &Lun) {
    if let Some(r) = drive.scsi.tape_remove()
        && let Err(e) = r.synced
    {
        tracing::error!(
            lun = drive.number,
            "tape taken out of the drive, but what was written \
            may not be on disk: {e}"
        );
    }
    drive.meta.lock().unwrap_or_else(|p| p.into_inner()).online = false;
}

fn move_medium(
    changer: &Lun,
    src: u16,
    dst: u16,
    invert: bool,
    drives: &HashMap<DriveRef, Arc<Lun>>,
) -> Result<(), scsi::Sense> {
    let m = changer.scsi.changer_plan(src, dst, invert)?;
    if m.src == m.dst {
        return Ok(());
    }
    let lib = changer.scsi.changer_library();
    let from = m
        .unload
        .map(|d| drives.get(&d).ok_or(NO_DRIVE))
        .transpose()?;
    let to = m.load.map(|d| drives.get(&d).ok_or(NO_DRIVE)).transpose()?;
    if let Some(d) = from
        && d.scsi.medium_removal_prevented()
    {
        return Err(scsi::removable::MEDIUM_REMOVAL_PREVENTED);
    }
    if let Some(d) = from {
        unload(d);
    }
    if let Some(d) = to
        && let Err(e) = load(&lib, d, &m.barcode)
    {
        tracing::error!(lun = changer.number, src, dst, barcode = %m.barcode,
            "MOVE MEDIUM: the tape could not be put in the drive: {e}");
        // the cartridge goes back into the drive it came from
        if let Some(d) = from
            && let Err(e) = load(&lib, d, &m.barcode)
        {
            tracing::error!(lun = changer.number, "and could not be put back: {e}");
        }
        return Err(POSITIONING);
    }
    changer.scsi.changer_commit(&m);
    tracing::info!(lun = changer.number, src, dst, barcode = %m.barcode, "medium moved");
    save(changer);
    Ok(())
}

/// Writes the library's state to the changer's state file (its backing store): a
/// temporary file beside it, synced, renamed over it. A failure is logged: the moves
/// stand, but a restart would not know them.
pub fn save(changer: &Lun) {
    let path = changer
        .meta
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .path
        .clone();
    let text = changer.scsi.changer_library().to_text();
    if let Err(e) = write_atomic(Path::new(&path), text.as_bytes()) {
        tracing::error!(
            lun = changer.number,
            path,
            "the changer's state was not saved: {e}"
        );
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.numatgt-tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The state a changer saved in its state file, if the file holds one (tgt's `smc` file
/// of zeros holds none).
pub fn saved_state(path: &Path) -> Option<Library> {
    let bytes = std::fs::read(path).ok()?;
    Library::from_text(std::str::from_utf8(&bytes).ok()?)
}

/// tgtadm's element configuration of a changer LUN: applied, the state saved, and a drive
/// bound to an element that holds a cartridge given that tape (taken out of the drive the
/// element was bound to before: the last binding of an element counts, as in tgtd).
pub fn configure(
    registry: &Registry,
    changer: &Lun,
    pairs: &[(&str, &str)],
) -> Result<(), scsi::smc::ConfigError> {
    let before = changer.scsi.changer_library();
    let done = changer.scsi.changer_configure(pairs)?;
    if let Some(n) = done.note {
        tracing::warn!(lun = changer.number, "changer configuration: {n}");
    }
    if let Some((d, barcode)) = done.load {
        let old = before
            .elements
            .values()
            .find(|e| e.cartridge.as_deref() == Some(barcode.as_str()))
            .and_then(|e| e.drive)
            .filter(|&o| o != d);
        if let Some(o) = old
            && let Some(drive) = drives_of(registry, &before).remove(&o)
            && drive.scsi.tape_status().barcode == barcode
        {
            unload(&drive);
        }
        put_in(registry, changer, d, &barcode);
    }
    save(changer);
    Ok(())
}

/// The drive `d` gets the tape `barcode` unless it has it already.
fn put_in(registry: &Registry, changer: &Lun, d: DriveRef, barcode: &str) {
    let lib = changer.scsi.changer_library();
    let Some(drive) = drives_of(registry, &lib).remove(&d) else {
        tracing::warn!(
            lun = changer.number,
            tid = d.tid,
            drive = d.lun,
            "the library's drive is not exported yet: its tape {barcode} is loaded when it is"
        );
        return;
    };
    if drive.scsi.tape_status().barcode == barcode {
        return;
    }
    match load(&lib, &drive, barcode) {
        Ok(()) => tracing::info!(
            lun = changer.number,
            tid = d.tid,
            drive = d.lun,
            barcode,
            "tape put back into its drive"
        ),
        Err(e) => tracing::error!(
            lun = changer.number,
            tid = d.tid,
            drive = d.lun,
            barcode,
            "the library says the drive holds this tape, but it cannot be loaded: {e}"
        ),
    }
}

/// Every changer's drives get the cartridges their library says they hold (after a
/// restart, once every target and LUN exists).
pub fn settle(registry: &Registry) {
    for t in registry.targets() {
        for lun in t.lun_set().map.values() {
            if lun.scsi.params().device_type != scsi::DeviceType::Changer {
                continue;
            }
            let lib = lun.scsi.changer_library();
            for e in lib.elements.values() {
                if let (Some(d), Some(b)) = (e.drive, &e.cartridge) {
                    put_in(registry, lun, d, b);
                }
            }
        }
    }
}
