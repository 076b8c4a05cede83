//! `numatgtd --config /etc/tgt/targets.conf`: tgt's own configuration syntax is imported at
//! start (the same importer `numatgtd` uses for YAML-less migrations), and an initiator sees
//! the targets and LUNs it declares.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::MIB;
use tests::daemon::{create_sparse, free_port, numatgtd_bin, require_numatgtd, send_signal};
use tests::tools;

#[test]
fn targets_conf_is_served() {
    require_numatgtd("config_import");
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    create_sparse(&a, 8 * MIB);
    create_sparse(&b, 16 * MIB);
    let conf = dir.path().join("targets.conf");
    std::fs::write(
        &conf,
        format!(
            "# imported from tgt\n<target iqn.2026-11.org.numatgt:imported>\n    backing-store {}\n    backing-store {}\n    vendor_id ACME\n    initiator-address 127.0.0.1\n</target>\n",
            b.display(),
            a.display()
        ),
    )
    .expect("write targets.conf");
    let port = free_port();
    let mut child = Command::new(numatgtd_bin())
        .args([
            "-f",
            "--iscsi",
            &format!("portal=127.0.0.1:{port}"),
            "--config",
        ])
        .arg(&conf)
        .arg("--state-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn numatgtd");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "numatgtd did not listen"
        );
        assert!(child.try_wait().expect("wait").is_none(), "numatgtd exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ls = tools::run(30, "iscsi-ls", ["-s", &format!("iscsi://127.0.0.1:{port}")]);
    // LUNs numbered as tgt-admin does: backing stores sorted by path (a.img = 1, b.img = 2)
    let inq1 = tools::run(
        30,
        "iscsi-readcapacity16",
        [&format!(
            "iscsi://127.0.0.1:{port}/iqn.2026-11.org.numatgt:imported/1"
        )],
    );
    let inq = tools::run(
        30,
        "iscsi-inq",
        [&format!(
            "iscsi://127.0.0.1:{port}/iqn.2026-11.org.numatgt:imported/2"
        )],
    );
    send_signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
    ls.check("iscsi-ls");
    assert!(
        ls.stdout.contains("iqn.2026-11.org.numatgt:imported"),
        "{ls}"
    );
    inq1.check("iscsi-readcapacity16 LUN 1");
    assert!(
        inq1.stdout.contains("Total size:8388608"),
        "LUN 1 should be a.img (8 MiB):\n{inq1}"
    );
    inq.check("iscsi-inq LUN 2");
    assert!(
        inq.stdout.contains("ACME"),
        "vendor_id from targets.conf:\n{inq}"
    );
}
