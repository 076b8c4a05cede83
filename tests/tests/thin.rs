//! Thin provisioning end to end, through qemu-io's libiscsi driver (`-d unmap`: discards
//! become SCSI UNMAP): data written into the write-back cache (WCE=1, still dirty) and then
//! discarded must read back as zeros, the rest unchanged; after a clean stop the backing
//! file holds zeros there too and has a real hole (fewer allocated blocks), so dirty cached
//! data never resurfaces over an unmapped range.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use tests::daemon::require_numatgtd;
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

fn qemu_io(url: &str, cmds: &[&str]) -> tools::ToolRun {
    let mut args: Vec<String> = ["-f", "raw", "-t", "writeback", "-d", "unmap"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for c in cmds {
        args.push("-c".into());
        args.push(c.to_string());
    }
    args.push(url.to_string());
    tools::run(60, "qemu-io", &args)
}

#[test]
fn discard_of_dirty_cached_data_reads_zeros_and_punches_a_hole() {
    require_numatgtd("thin");
    tools::require_tool("qemu-io");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 64 * MIB)
        .thin()
        .with_cache("numa")
        .with_write_cache(true)]);
    let url = d.url(1);
    let r = qemu_io(
        &url,
        &[
            "write -P 0xab 0 4M",
            "discard 1M 2M",
            "read -P 0xab 0 1M",
            "read -P 0 1M 2M",
            "read -P 0xab 3M 1M",
        ],
    );
    r.check("qemu-io write/discard/read");
    assert!(
        !r.stdout.contains("Pattern verification failed"),
        "read-back after discard differs:\n{r}"
    );
    assert_eq!(r.stdout.matches("read ").count(), 3, "{r}");
    let (status, _) = d.terminate(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "clean stop failed");
    let path = d.lun_path(1).to_path_buf();
    let data = std::fs::read(&path).expect("read backing file");
    let mib = MIB as usize;
    assert!(data[..mib].iter().all(|&b| b == 0xab), "first MiB");
    assert!(
        data[mib..3 * mib].iter().all(|&b| b == 0),
        "discarded range is not zero on disk"
    );
    assert!(
        data[3 * mib..4 * mib].iter().all(|&b| b == 0xab),
        "fourth MiB"
    );
    let allocated = std::fs::metadata(&path).expect("stat").blocks() * 512;
    assert!(
        allocated <= 2 * MIB + 256 * 1024,
        "backing file has {allocated} bytes allocated: the discard did not punch a hole"
    );
}
