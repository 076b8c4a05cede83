//! `cache.warm_restart` (issue 29): a clean stop lists the cached blocks in the state
//! directory, and the next start reads them into the cache again in the background, so
//! the first reads after a restart are cache hits; the list is used once.

use tests::daemon::{Daemon, LunSpec, TargetKind, require_numatgtd};
use tests::pdu::ScsiSession;

#[test]
fn a_clean_restart_starts_with_the_blocks_it_had_cached() {
    require_numatgtd("a_clean_restart_starts_with_the_blocks_it_had_cached");
    let mut d = Daemon::start_kind_with(
        TargetKind::Numatgtd,
        &[LunSpec::new(1, 512, 16 << 20)],
        "cache:\n  warm_restart: true\n",
    );
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:warm-host");
    // 4 KiB in each of 16 cache blocks (64 KiB: 128 LBAs apart)
    let lbas: Vec<u32> = (0..16).map(|i| i * 128 + 8).collect();
    for (i, &lba) in lbas.iter().enumerate() {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2A;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[8] = 8;
        let (st, sense, _) = s.command(&cdb, &[i as u8 + 0x40; 4096], 0);
        assert_eq!(st, 0, "WRITE(10): {sense:02x?}");
    }
    drop(s);
    d.restart();
    let file = d.state_dir.join("cache-hot-blocks");
    assert!(!file.exists(), "the list is taken at start");
    assert!(
        d.log()
            .contains("cache: block list saved for a warm restart"),
        "{}",
        d.log_tail(30)
    );
    d.wait_warm_start();
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"listed\""),
        16.0
    );
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"loaded\""),
        16.0,
        "{}",
        d.log_tail(20)
    );
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:warm-host");
    let misses = d.metric("numatgt_cache_misses_total", "");
    for (i, &lba) in lbas.iter().enumerate() {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&(lba - 8).to_be_bytes());
        cdb[8] = 16;
        let (st, sense, data) = s.command(&cdb, &[], 16 * 512);
        assert_eq!(st, 0, "READ(10): {sense:02x?}");
        assert_eq!(data[4096..], vec![i as u8 + 0x40; 4096][..], "LBA {lba}");
    }
    assert_eq!(
        d.metric("numatgt_cache_misses_total", ""),
        misses,
        "every read hit the warmed cache"
    );

    // used once: a crash (no clean stop) leaves no list, the next start is cold
    drop(s);
    d.kill9();
    d.respawn();
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"listed\""),
        0.0
    );
}
