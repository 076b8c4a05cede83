//! (f) A bad config file makes numatgtd exit non-zero quickly, with a message that names the
//! file and the offending field.

use std::time::Duration;

use tests::daemon::{self, LunSpec, numatgtd_bin, require_numatgtd};
use tests::{MIB, tools};

fn run_with_config(name: &str, mutate: impl Fn(String) -> String) -> (tools::ToolRun, String) {
    let dir = tempfile::Builder::new()
        .prefix("numatgt-cfg.")
        .tempdir()
        .expect("temp dir");
    let lun = dir.path().join("lun1.img");
    daemon::create_sparse(&lun, 16 * MIB);
    let good = daemon::numatgtd_config(
        daemon::free_port(),
        &[(LunSpec::new(1, 512, 16 * MIB), lun)],
    );
    let cfg = dir.path().join(name);
    std::fs::write(&cfg, mutate(good)).expect("write config");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    let bin = numatgtd_bin();
    let r = tools::run(
        20,
        &bin.to_string_lossy(),
        [
            "-f".to_string(),
            "--config".into(),
            cfg.to_string_lossy().into_owned(),
            "--state-dir".into(),
            state.to_string_lossy().into_owned(),
            "-C".into(),
            daemon::random_control_port().to_string(),
        ],
    );
    (r, cfg.to_string_lossy().into_owned())
}

fn assert_rejected(r: &tools::ToolRun, cfg: &str, field: &str) {
    assert!(
        !r.timed_out(),
        "numatgtd did not exit on a bad config (killed by timeout)\n{r}"
    );
    assert!(!r.status.success(), "numatgtd accepted a bad config\n{r}");
    assert!(
        r.elapsed < Duration::from_secs(5),
        "numatgtd took {:?} to reject a bad config\n{r}",
        r.elapsed
    );
    let msg = format!("{}{}", r.stderr, r.stdout);
    assert!(
        msg.contains(cfg),
        "error message does not name the file {cfg}\n{r}"
    );
    assert!(
        msg.contains(field),
        "error message does not name the field `{field}`\n{r}"
    );
}

#[test]
fn unknown_field_is_rejected() {
    require_numatgtd("config_errors");
    let (r, cfg) = run_with_config("unknown-field.yaml", |y| {
        y.replace(
            "        block_size: 512\n",
            "        block_size: 512\n        bogus_knob: 7\n",
        )
    });
    assert_rejected(&r, &cfg, "bogus_knob");
}

#[test]
fn block_size_1000_is_rejected() {
    require_numatgtd("config_errors");
    let (r, cfg) = run_with_config("bad-block-size.yaml", |y| {
        y.replace("block_size: 512", "block_size: 1000")
    });
    assert_rejected(&r, &cfg, "block_size");
    assert!(
        format!("{}{}", r.stderr, r.stdout).contains("1000"),
        "error message does not quote the bad value 1000\n{r}"
    );
}

#[test]
fn good_config_control_starts() {
    // the same generator without the mutation must start (guards the two tests above against
    // passing because every config fails)
    let d = tests::Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    assert!(d.port > 0);
}

#[test]
fn out_of_range_limits_are_rejected() {
    require_numatgtd("config_errors");
    for (key, value) in [
        ("max_sessions", "0"),
        ("login_timeout", "86400"),
        ("max_mgmt_clients", "many"),
    ] {
        let (r, cfg) = run_with_config(&format!("bad-{key}.yaml"), |y| {
            format!("limits:\n  {key}: {value}\n{y}")
        });
        assert_rejected(&r, &cfg, &format!("limits.{key}"));
    }
}

/// `--cache-size` sets the cache per node when numatgtd is started like tgtd (no
/// configuration file); a size too small for the cache's shape stops the start with a
/// message naming the option.
#[test]
fn cache_size_option_sets_or_refuses_the_cache() {
    require_numatgtd("cache_size_option_sets_or_refuses_the_cache");
    let d = tests::Daemon::start_like_tgtd_env(
        tests::TargetKind::Numatgtd,
        &["--cache-size", "64M"],
        &[],
    );
    let log = d.log();
    let ready = log
        .lines()
        .find(|l| l.contains("NUMA block cache ready"))
        .unwrap_or_else(|| panic!("no cache line\n{log}"));
    assert!(
        ready.contains("size_per_node=64M") && ready.contains("configured=64M"),
        "{ready}"
    );
    drop(d);
    let state = tempfile::tempdir().expect("state dir");
    let r = tools::run(
        20,
        &numatgtd_bin().to_string_lossy(),
        [
            "-f".to_string(),
            "--cache-size".into(),
            "512K".into(),
            "--state-dir".into(),
            state.path().to_string_lossy().into_owned(),
            "-C".into(),
            daemon::random_control_port().to_string(),
            "--iscsi".into(),
            format!("portal=127.0.0.1:{}", daemon::free_port()),
        ],
    );
    assert!(!r.timed_out() && !r.status.success(), "512K accepted\n{r}");
    assert!(
        r.stderr.contains("--cache-size: 512K holds 8 cache blocks"),
        "{r}"
    );
}

/// A passthrough LUN (`device_type: pt`) is a local SCSI device on `bs_type: sg` or `bsg`:
/// either without the other, a block size (the device has its own) or `readonly` (the
/// target does not write-protect a device it passes through) is refused at the field.
#[test]
fn passthrough_luns_are_checked() {
    require_numatgtd("config_errors");
    for (name, with, field) in [
        ("sg-disk", "        bs_type: sg\n", "bs_type"),
        (
            "pt-rdwr",
            "        device_type: pt\n        bs_type: rdwr\n",
            "bs_type",
        ),
        ("pt-block-size", "        device_type: pt\n", "block_size"),
    ] {
        let (r, cfg) = run_with_config(&format!("{name}.yaml"), |y| {
            y.replace(
                "        block_size: 512\n",
                &format!("        block_size: 512\n{with}"),
            )
        });
        assert_rejected(&r, &cfg, field);
    }
    let (r, cfg) = run_with_config("pt-readonly.yaml", |y| {
        y.replace(
            "        block_size: 512\n",
            "        device_type: pt\n        readonly: yes\n",
        )
    });
    assert_rejected(&r, &cfg, "readonly");
    // a well-formed one whose path is no sg node stops the start naming the path
    let (r, _) = run_with_config("pt-file.yaml", |y| {
        y.replace("        block_size: 512\n", "        device_type: pt\n")
    });
    assert!(!r.status.success() && !r.timed_out(), "{r}");
    let msg = format!("{}{}", r.stderr, r.stdout);
    assert!(
        msg.contains("is not a character device: passthrough needs a SCSI generic node"),
        "{r}"
    );
}
