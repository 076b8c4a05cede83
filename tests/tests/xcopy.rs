//! EXTENDED COPY end to end: a pattern is written to LUN 1 through a raw session with the
//! write cache on and no SYNCHRONIZE CACHE (so it sits dirty in the block cache, unless the
//! flusher got to it first), then one
//! EXTENDED COPY (two block → block segments, CSCDs naming the LUNs by the NAA designators
//! their VPD page 83h reports) copies it to LUN 2 of the same target, and to LUN 1 of a
//! second target made with tgtadm. A real initiator (qemu-img over libiscsi, a new session)
//! reads the destinations back and must find the pattern where it was copied and zeros
//! around it; RECEIVE COPY RESULTS must report the finished copy; after a clean stop LUN 2's
//! backing file holds the pattern (the copy's write-back data reached the disk).

use tests::daemon::{create_sparse, require_numatgtd};
use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB, mgmt, qemuio, tools};

const BS: u64 = 512;
/// Where the pattern is written on LUN 1 and how long it is.
const SRC_LBA: u64 = 2048;
const BLOCKS: u64 = 8192;
/// Where the copy lands on each destination.
const DST_LBA: u64 = 100;
const LIST_ID: u8 = 7;
const SECOND_IQN: &str = "iqn.2026-11.org.numatgt:xcopy2";

fn pattern() -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..BLOCKS * BS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Retries TEST UNIT READY past the unit attentions a first command to a LUN meets.
fn ready(s: &mut ScsiSession) {
    for _ in 0..4 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            return;
        }
    }
    panic!("LUN {} never became ready", s.lun);
}

/// The 16-byte NAA designator (designator type 3, LU association) of the session's LUN.
fn naa_designator(s: &mut ScsiSession) -> Vec<u8> {
    ready(s);
    let (status, sense, d) = s.command(&[0x12, 1, 0x83, 0, 255, 0], &[], 255);
    assert_eq!(status, 0, "INQUIRY VPD 83h: sense {sense:02x?}");
    let mut at = 4;
    while at + 4 <= d.len() {
        let len = usize::from(d[at + 3]);
        let (assoc, ty) = ((d[at + 1] >> 4) & 3, d[at + 1] & 0x0F);
        if assoc == 0 && ty == 3 && len == 16 && at + 4 + len <= d.len() {
            return d[at + 4..at + 4 + len].to_vec();
        }
        at += 4 + len;
    }
    panic!("no NAA designator in {d:02x?}");
}

fn cscd(designator: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8; 32];
    d[0] = 0xE4;
    d[4] = 0x01; // binary
    d[5] = 0x03; // LU association, NAA
    d[7] = designator.len() as u8;
    d[8..8 + designator.len()].copy_from_slice(designator);
    d[29..32].copy_from_slice(&(BS as u32).to_be_bytes()[1..]);
    d
}

fn b2b(src: u16, dst: u16, blocks: u64, src_lba: u64, dst_lba: u64) -> Vec<u8> {
    let mut d = vec![0u8; 28];
    d[0] = 0x02;
    d[3] = 0x18;
    d[4..6].copy_from_slice(&src.to_be_bytes());
    d[6..8].copy_from_slice(&dst.to_be_bytes());
    d[10..12].copy_from_slice(&u16::try_from(blocks).expect("blocks").to_be_bytes());
    d[12..20].copy_from_slice(&src_lba.to_be_bytes());
    d[20..28].copy_from_slice(&dst_lba.to_be_bytes());
    d
}

/// The pattern copied from LUN 1 to the CSCD named `dst` in two segments.
fn copy_list(src: &[u8], dst: &[u8]) -> Vec<u8> {
    let cscds = [cscd(src), cscd(dst)].concat();
    let first = 6000;
    let segs = [
        b2b(0, 1, first, SRC_LBA, DST_LBA),
        b2b(0, 1, BLOCKS - first, SRC_LBA + first, DST_LBA + first),
    ]
    .concat();
    let mut p = vec![0u8; 16];
    p[0] = LIST_ID;
    p[2..4].copy_from_slice(&(cscds.len() as u16).to_be_bytes());
    p[8..12].copy_from_slice(&(segs.len() as u32).to_be_bytes());
    p.extend(cscds);
    p.extend(segs);
    p
}

fn extended_copy(s: &mut ScsiSession, list: &[u8]) {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x83;
    cdb[10..14].copy_from_slice(&(list.len() as u32).to_be_bytes());
    let (status, sense, _) = s.command(&cdb, list, 0);
    assert_eq!(status, 0, "EXTENDED COPY: sense {sense:02x?}");
    // RECEIVE COPY RESULTS / COPY STATUS: completed, 2 segments, the bytes copied
    let mut rcr = [0u8; 16];
    rcr[0] = 0x84;
    rcr[2] = LIST_ID;
    rcr[13] = 64;
    let (status, sense, d) = s.command(&rcr, &[], 64);
    assert_eq!(status, 0, "COPY STATUS: sense {sense:02x?}");
    assert_eq!(d.len(), 12, "{d:02x?}");
    assert_eq!(d[4], 0x01, "copy manager status: {d:02x?}");
    assert_eq!(u16::from_be_bytes([d[5], d[6]]), 2, "segments processed");
    assert_eq!(d[7], 0, "transfer count units: bytes");
    let count = u32::from_be_bytes([d[8], d[9], d[10], d[11]]);
    assert_eq!(u64::from(count), BLOCKS * BS, "transfer count");
}

/// The destination read back by a real initiator: zeros before, the pattern, zeros after.
fn check_destination(url: &str, pat: &[u8], tmp: &std::path::Path) {
    let len = (DST_LBA + BLOCKS + 92) * BS; // a whole number of 32 KiB requests
    let got = qemuio::read_range(url, 0, len, 32 * 1024, tmp)
        .unwrap_or_else(|e| panic!("read {url}: {e}"));
    let start = (DST_LBA * BS) as usize;
    let end = start + pat.len();
    assert!(
        got[..start].iter().all(|&b| b == 0),
        "{url}: before the copy"
    );
    if let Some(at) = got[start..end].iter().zip(pat).position(|(a, b)| a != b) {
        panic!(
            "{url}: copied data differs at byte {at} of {} (LBA {})",
            pat.len(),
            DST_LBA + at as u64 / BS
        );
    }
    assert!(got[end..].iter().all(|&b| b == 0), "{url}: after the copy");
}

fn copy_dirty_pattern(dst_cache: &str) {
    require_numatgtd("EXTENDED COPY");
    tools::require_tool("qemu-img");
    let d = Daemon::start(&[
        LunSpec::new(1, BS as u32, 64 * MIB)
            .with_cache("numa")
            .with_write_cache(true),
        LunSpec::new(2, BS as u32, 64 * MIB)
            .with_cache(dst_cache)
            .with_write_cache(true),
    ]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let pat = pattern();
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:xcopy");
    // 16 KiB WRITE(10)s as immediate data; WCE=1 and no SYNCHRONIZE CACHE: dirty in cache
    let chunk = 16 * 1024;
    for (i, piece) in pat.chunks(chunk).enumerate() {
        let lba = SRC_LBA + (i * chunk) as u64 / BS;
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2A;
        cdb[2..6].copy_from_slice(&(lba as u32).to_be_bytes());
        cdb[7..9].copy_from_slice(&((piece.len() as u64 / BS) as u16).to_be_bytes());
        let (status, sense, _) = s.command(&cdb, piece, 0);
        assert_eq!(status, 0, "WRITE(10) at {lba}: sense {sense:02x?}");
    }
    let src = naa_designator(&mut s);
    s.lun = 2;
    let dst = naa_designator(&mut s);
    assert_ne!(src, dst, "two LUNs with one designator");
    s.lun = 1;

    // a second target, made at run time: LUN 1 of it is reachable by its designator too
    let second = tmp.path().join("second.img");
    create_sparse(&second, 64 * MIB);
    mgmt::export_lun(&d, "2", SECOND_IQN, &second.display().to_string());
    let mut s2 = ScsiSession::open_target(&d, "iqn.2026-11.test:xcopy-2", SECOND_IQN);
    let other = naa_designator(&mut s2);
    assert!(other != src && other != dst, "designators must be unique");

    extended_copy(&mut s, &copy_list(&src, &dst));
    extended_copy(&mut s, &copy_list(&src, &other));

    check_destination(&d.url(2), &pat, tmp.path());
    let url2 = format!("iscsi://{}/{SECOND_IQN}/1", d.addr());
    check_destination(&url2, &pat, tmp.path());
    // the source is unchanged
    let got = qemuio::read_range(&d.url(1), SRC_LBA * BS, BLOCKS * BS, 32 * 1024, tmp.path())
        .expect("read LUN 1");
    assert!(got == pat, "the source changed");
    let mut d = d;
    let (status, _) = d.terminate(std::time::Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "clean stop failed");
    let file = std::fs::read(d.lun_path(2)).expect("read LUN 2's backing file");
    let start = (DST_LBA * BS) as usize;
    assert!(
        file[start..start + pat.len()] == pat[..],
        "LUN 2's backing file lacks the copy after a clean stop"
    );
}

/// Destination through the block cache (write-back: the copy stays dirty there too).
#[test]
fn extended_copy_of_dirty_cached_data_reads_back_elsewhere() {
    copy_dirty_pattern("numa");
}

/// Destination with the cache off (O_DIRECT writes to the backing file).
#[test]
fn extended_copy_to_an_uncached_lun() {
    copy_dirty_pattern("off");
}
