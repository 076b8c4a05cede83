//! Saved configuration (`--save-config`, opt-in): every change an administrator makes at
//! run time — tgtadm, tgt-admin and numatgtadm requests that change something, reloads —
//! is written, once it took effect, as the running configuration (`numatgtadm --dump`'s
//! YAML) to `<state-dir>/saved-config.yaml`, atomically (a temporary file, fsync, rename,
//! fsync of the directory), so a restart or a reboot brings back what the administrator
//! made. At start ([`source`]) the saved file is loaded instead of the `--config` file when
//! it was written after it; a `--config` file edited after the last save wins (its edits are
//! the administrator's latest word), and the next change saves again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::mgmt::Ctx;

/// The saved configuration's name in the state directory.
pub const FILE: &str = "saved-config.yaml";

/// One save at a time: each writes the state as it is when it holds the lock, so the last
/// one writes the latest state.
static SAVING: Mutex<()> = Mutex::new(());

/// Where the saved configuration of state directory `state_dir` lives.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// Writes the running configuration to `ctx`'s saved file, when saving is on. A failure is
/// logged (the change itself took effect; only its survival of a restart is in doubt).
pub fn after_change(ctx: &Ctx) {
    let Some(file) = &ctx.saved else {
        return;
    };
    let _one = SAVING.lock().unwrap_or_else(|p| p.into_inner());
    let text = crate::mgmt::dump::yaml(&ctx.registry, &ctx.base);
    match write_atomically(file, text.as_bytes()) {
        Ok(()) => tracing::debug!(path = %file.display(), "configuration saved"),
        Err(e) => tracing::error!(path = %file.display(),
            "the change took effect but could not be saved; a restart will not bring it back: {e}"),
    }
}

/// Replaces `file` with `bytes`, durable before it returns.
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = file.with_extension("yaml.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, file)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Which file a start with saving on loads, and why (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The saved configuration: there is no `--config` file, or it is older.
    Saved(PathBuf),
    /// The `--config` file: nothing was saved yet, or the file was changed since.
    Config(PathBuf),
    /// Neither: the daemon starts empty, as tgtd.
    Nothing,
}

/// Chooses between the saved file in `state_dir` and the `--config` file `config`: the one
/// written last.
pub fn source(config: Option<&Path>, state_dir: &Path) -> Source {
    let saved = path(state_dir);
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (config, modified(&saved)) {
        (None, Some(_)) => Source::Saved(saved),
        (None, None) => Source::Nothing,
        (Some(c), None) => Source::Config(c.to_path_buf()),
        (Some(c), Some(s)) => match modified(c) {
            Some(cm) if cm > s => Source::Config(c.to_path_buf()),
            _ => Source::Saved(saved),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_written_last_is_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("numatgt.yaml");
        let state = dir.path().join("state");
        assert_eq!(source(None, &state), Source::Nothing);
        std::fs::write(&cfg, "targets: []\n").expect("write");
        assert_eq!(source(Some(&cfg), &state), Source::Config(cfg.clone()));
        write_atomically(&path(&state), b"targets: []\n").expect("save");
        assert_eq!(source(Some(&cfg), &state), Source::Saved(path(&state)));
        assert_eq!(source(None, &state), Source::Saved(path(&state)));
        // the administrator edits the file after the last save: it wins
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&cfg)
            .and_then(|f| f.set_modified(later))
            .expect("touch");
        assert_eq!(source(Some(&cfg), &state), Source::Config(cfg.clone()));
        assert!(!path(&state).with_extension("yaml.tmp").exists());
    }
}
