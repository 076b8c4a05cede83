//! Integration-test harness for numatgt (see tests/README.md): starts the real target
//! process (`numatgtd`, or Debian's `tgtd` when validating the harness itself), drives it with
//! real initiators (libiscsi tools, qemu-img, iscsi-test-cu) and raw TCP clients on 127.0.0.1,
//! and stops everything it started by PID. No mocks of any peer.

pub mod alua;
pub mod cdb;
pub mod ceph;
pub mod daemon;
pub mod mgmt;
pub mod model;
pub mod pdu;
pub mod prom;
pub mod qemuio;
pub mod testcu;
pub mod tools;

pub use daemon::{Daemon, Identity, LunSpec, TEST_IQN, TargetKind};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// The workspace root (parent of this crate).
pub fn workspace_root() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .expect("tests crate has a parent directory (the workspace)")
        .to_path_buf()
}

/// Directory where tests leave reports for humans (per-suite tables, verbose logs):
/// `<workspace>/target/test-reports`, created on demand.
pub fn reports_dir() -> std::path::PathBuf {
    let d = workspace_root().join("target").join("test-reports");
    std::fs::create_dir_all(&d)
        .unwrap_or_else(|e| panic!("cannot create report dir {}: {e}", d.display()));
    d
}
