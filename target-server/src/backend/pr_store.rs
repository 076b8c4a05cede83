//! Persistent reservations across restarts (SPC-4 APTPL): one file per logical unit in the
//! state directory (`<state-dir>/pr/<target>.lun<N>`), written atomically — a temporary
//! file, fsync, rename over the old one, fsync of the directory — so a crash at any point
//! leaves either the old or the new state, never a torn one (the scsi crate also rejects
//! any file whose checksum does not match). Restored when the LU is created.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The last sequence number written per file: a PR OUT finished later on another worker
/// never overwrites a newer state with an older one.
static WRITTEN: Mutex<Option<HashMap<PathBuf, u64>>> = Mutex::new(None);

/// The state file of LUN `lun` of target `iqn` under `state_dir`.
pub fn path(state_dir: &Path, iqn: &str, lun: u64) -> PathBuf {
    let name: String = iqn
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    state_dir.join("pr").join(format!("{name}.lun{lun}"))
}

/// The temporary file `persist` writes before renaming it over `p`: the state file's whole
/// name plus `.tmp` (one per LUN: `with_extension` would map `t.lun1` and `t.lun2` to the
/// same `t.tmp`, and two LUNs persisting at once could swap states).
fn tmp_path(p: &Path) -> PathBuf {
    let mut name = p.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    p.with_file_name(name)
}

/// Loads the stored state into `lu`, if there is a file. A file that cannot be read or is
/// corrupt is reported (the LU then starts without reservations) — never silently.
pub fn restore(lu: &scsi::LogicalUnit, state_dir: &Path, iqn: &str, lun: u64) {
    let p = path(state_dir, iqn, lun);
    match std::fs::read(&p) {
        Ok(bytes) => match lu.restore_pr_state(&bytes) {
            Ok(()) => tracing::info!(target = iqn, lun, file = %p.display(),
                "persistent reservations restored"),
            Err(e) => tracing::error!(target = iqn, lun, file = %p.display(),
                "persistent reservation state not restored: {e}"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::error!(target = iqn, lun, file = %p.display(),
            "cannot read persistent reservation state: {e}"),
    }
}

/// Stores `req` for LUN `lun` of `iqn` (atomic replace, durable before returning).
pub fn persist(
    state_dir: &Path,
    iqn: &str,
    lun: u64,
    req: &scsi::PersistRequest,
) -> std::io::Result<()> {
    let p = path(state_dir, iqn, lun);
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = written.get_or_insert_with(HashMap::new);
    if seen.get(&p).is_some_and(|&s| s > req.seq) {
        return Ok(()); // a newer state is already on disk
    }
    let dir = p.parent().unwrap_or(state_dir);
    std::fs::create_dir_all(dir)?;
    let tmp = tmp_path(&p);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&req.bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &p)?;
    std::fs::File::open(dir)?.sync_all()?;
    seen.insert(p, req.seq);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_files_are_per_lun() {
        let d = Path::new("/state");
        let a = tmp_path(&path(d, "iqn.2026-11.org.example:t", 1));
        let b = tmp_path(&path(d, "iqn.2026-11.org.example:t", 2));
        assert_ne!(a, b);
        assert_eq!(a, Path::new("/state/pr/iqn.2026-11.org.example_t.lun1.tmp"));
    }

    #[test]
    fn file_names_are_safe_and_distinct() {
        let d = Path::new("/s");
        assert_eq!(
            path(d, "iqn.2026-11.org.numatgt:demo/../x", 3),
            PathBuf::from("/s/pr/iqn.2026-11.org.numatgt_demo_.._x.lun3")
        );
        assert_ne!(path(d, "iqn.a:b", 1), path(d, "iqn.a:b", 2));
    }
}
