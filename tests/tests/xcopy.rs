//! EXTENDED COPY end to end: a pattern is written to LUN 1 through a raw session with the
//! write cache on and no SYNCHRONIZE CACHE (so it sits dirty in the block cache, unless the
//! flusher got to it first), then one
//! EXTENDED COPY (two block → block segments, CSCDs naming the LUNs by the NAA designators
//! their VPD page 83h reports) copies it to LUN 2 of the same target, and to LUN 1 of a
//! second target made with tgtadm. A real initiator (qemu-img over libiscsi, a new session)
//! reads the destinations back and must find the pattern where it was copied and zeros
//! around it; RECEIVE COPY RESULTS must report the finished copy; after a clean stop LUN 2's
//! backing file holds the pattern (the copy's write-back data reached the disk).
//!
//! The copy manager acts for the I_T nexus of the EXTENDED COPY: a read-only destination is
//! DATA PROTECT, an ejected medium NOT READY, a LUN another initiator reserved ends the copy
//! with COPY ABORTED (RESERVATION CONFLICT when it is the LUN the command went to); ABORT
//! TASK and another nexus' LOGICAL UNIT RESET stop a running copy between chunks; the
//! Third-party Copy VPD page (8Fh) agrees with RECEIVE COPY RESULTS OPERATING PARAMETERS.

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

/// A parameter list with these CSCD designators (512-byte blocks unless `bs` says) and
/// segments.
fn list_of(list_id: u8, cscds: &[(&[u8], u32)], segs: &[Vec<u8>]) -> Vec<u8> {
    let c: Vec<u8> = cscds
        .iter()
        .flat_map(|(d, bs)| {
            let mut one = cscd(d);
            one[29..32].copy_from_slice(&bs.to_be_bytes()[1..]);
            one
        })
        .collect();
    let sg = segs.concat();
    let mut p = vec![0u8; 16];
    p[0] = list_id;
    p[2..4].copy_from_slice(&(c.len() as u16).to_be_bytes());
    p[8..12].copy_from_slice(&(sg.len() as u32).to_be_bytes());
    p.extend(c);
    p.extend(sg);
    p
}

fn xcopy_cdb(len: usize) -> [u8; 16] {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x83;
    cdb[10..14].copy_from_slice(&(len as u32).to_be_bytes());
    cdb
}

fn key_asc(sense: &[u8]) -> (u8, u8, u8) {
    (
        sense.get(2).map_or(0, |b| b & 0x0F),
        sense.get(12).copied().unwrap_or(0),
        sense.get(13).copied().unwrap_or(0),
    )
}

/// (status, sense key / ASC / ASCQ) of an EXTENDED COPY of 8 blocks from CSCD 0 to CSCD 1
/// sent to the session's current LUN.
fn try_copy(s: &mut ScsiSession, src: &[u8], dst: &[u8]) -> (u8, (u8, u8, u8)) {
    let p = list_of(1, &[(src, 512), (dst, 512)], &[b2b(0, 1, 8, 0, 100)]);
    let (st, sense, _) = s.command(&xcopy_cdb(p.len()), &p, 0);
    (st, key_asc(&sense))
}

const GOOD: (u8, (u8, u8, u8)) = (0, (0, 0, 0));
const CONFLICT: (u8, (u8, u8, u8)) = (0x18, (0, 0, 0));
const DATA_PROTECT: (u8, (u8, u8, u8)) = (2, (7, 0x27, 0x00));
const NO_MEDIUM: (u8, (u8, u8, u8)) = (2, (2, 0x3A, 0x00));
const COPY_ABORTED_UNREACHABLE: (u8, (u8, u8, u8)) = (2, (0x0A, 0x0D, 0x02));

/// A read-only destination is DATA PROTECT whichever LUN the command goes to; reading it is
/// fine. An ejected removable LUN is NOT READY as source and as destination, and copies work
/// again once the medium is loaded.
#[test]
fn copy_honours_write_protection_and_the_medium() {
    require_numatgtd("EXTENDED COPY");
    let d = Daemon::start(&[
        LunSpec::new(1, BS as u32, 16 * MIB),
        LunSpec::new(2, BS as u32, 16 * MIB).readonly(),
        LunSpec::new(3, BS as u32, 16 * MIB).removable(),
    ]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:xcopy-access");
    let d1 = naa_designator(&mut s);
    s.lun = 2;
    let d2 = naa_designator(&mut s);
    s.lun = 3;
    let d3 = naa_designator(&mut s);

    s.lun = 1;
    assert_eq!(
        try_copy(&mut s, &d1, &d2),
        DATA_PROTECT,
        "to read-only via LUN 1"
    );
    assert_eq!(try_copy(&mut s, &d2, &d1), GOOD, "from read-only");
    s.lun = 2;
    assert_eq!(
        try_copy(&mut s, &d1, &d2),
        DATA_PROTECT,
        "to read-only via itself"
    );

    // eject LUN 3's medium
    s.lun = 3;
    let (st, sense, _) = s.command(&[0x1B, 0, 0, 0, 0x02, 0], &[], 0);
    assert_eq!(st, 0, "EJECT: sense {sense:02x?}");
    s.lun = 1;
    assert_eq!(try_copy(&mut s, &d1, &d3), NO_MEDIUM, "to ejected");
    assert_eq!(try_copy(&mut s, &d3, &d1), NO_MEDIUM, "from ejected");
    s.lun = 3;
    assert_eq!(
        try_copy(&mut s, &d1, &d3),
        NO_MEDIUM,
        "sent to the ejected LUN"
    );
    let (st, sense, _) = s.command(&[0x1B, 0, 0, 0, 0x03, 0], &[], 0);
    assert_eq!(st, 0, "LOAD: sense {sense:02x?}");
    s.lun = 1;
    assert_eq!(try_copy(&mut s, &d1, &d3), GOOD, "after LOAD");
}

fn pr_out(s: &mut ScsiSession, sa: u8, pr_type: u8, key: u64, sa_key: u64) {
    let st = s.persistent_reserve_out(sa, pr_type, key, sa_key, false);
    assert_eq!(st, 0, "PR OUT {sa:x}");
}

/// LUNs reserved by another initiator: an SPC-2 reservation refuses reading and writing, a
/// WRITE EXCLUSIVE persistent reservation only writing. A refusal by the LUN the EXTENDED
/// COPY went to is RESERVATION CONFLICT; by another copy target, COPY ABORTED / COPY TARGET
/// DEVICE NOT REACHABLE. The reservation holder itself copies.
#[test]
fn copy_respects_reservations_of_other_initiators() {
    require_numatgtd("EXTENDED COPY");
    let d = Daemon::start(&[
        LunSpec::new(1, BS as u32, 16 * MIB),
        LunSpec::new(2, BS as u32, 16 * MIB),
    ]);
    let mut a = ScsiSession::open(&d, "iqn.2026-11.test:xcopy-a");
    let mut b = ScsiSession::open(&d, "iqn.2026-11.test:xcopy-b");
    let d1 = naa_designator(&mut a);
    a.lun = 2;
    let d2 = naa_designator(&mut a);
    a.lun = 1;

    // b holds an SPC-2 reservation of LUN 2
    b.lun = 2;
    ready(&mut b);
    let (st, sense, _) = b.command(&[0x16, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(st, 0, "RESERVE(6): sense {sense:02x?}");
    assert_eq!(
        try_copy(&mut a, &d1, &d2),
        COPY_ABORTED_UNREACHABLE,
        "to reserved"
    );
    assert_eq!(
        try_copy(&mut a, &d2, &d1),
        COPY_ABORTED_UNREACHABLE,
        "from reserved"
    );
    a.lun = 2;
    assert_eq!(
        try_copy(&mut a, &d1, &d2),
        CONFLICT,
        "sent to the reserved LUN"
    );
    a.lun = 1;
    // the holder copies
    b.lun = 1;
    assert_eq!(try_copy(&mut b, &d1, &d2), GOOD, "the holder's copy");
    b.lun = 2;
    let (st, sense, _) = b.command(&[0x17, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(st, 0, "RELEASE(6): sense {sense:02x?}");
    assert_eq!(try_copy(&mut a, &d1, &d2), GOOD, "after RELEASE");

    // b registers and takes WRITE EXCLUSIVE on LUN 1: reading it is still allowed
    b.lun = 1;
    pr_out(&mut b, 0x00, 0, 0, 0xB0B);
    pr_out(&mut b, 0x01, 0x01, 0xB0B, 0);
    assert_eq!(
        try_copy(&mut a, &d1, &d2),
        GOOD,
        "read under WRITE EXCLUSIVE"
    );
    assert_eq!(
        try_copy(&mut a, &d2, &d1),
        CONFLICT,
        "write of the LUN sent to"
    );
    a.lun = 2;
    assert_eq!(
        try_copy(&mut a, &d2, &d1),
        COPY_ABORTED_UNREACHABLE,
        "write of another LUN"
    );
    assert_eq!(try_copy(&mut b, &d2, &d1), GOOD, "the holder writes");
}

/// COPY STATUS of list `id` once the copy is no longer running (00h): (copy manager
/// status, segments processed).
fn copy_status(s: &mut ScsiSession, id: u8) -> (u8, u16) {
    let mut rcr = [0u8; 16];
    rcr[0] = 0x84;
    rcr[2] = id;
    rcr[13] = 64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let (st, sense, d) = s.command(&rcr, &[], 64);
        if st == 0 && d.len() >= 7 {
            if d[4] != 0x00 {
                return (d[4], u16::from_be_bytes([d[5], d[6]]));
            }
            // still running: it stops at its next chunk
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        // a unit attention first (after a reset) is fine; anything else is not
        assert_eq!(
            key_asc(&sense).0,
            6,
            "COPY STATUS: {st:x} sense {sense:02x?}"
        );
    }
    panic!("the copy did not end");
}

/// A long copy: 4 segments of 65535 4-KiB blocks (1 GiB) from LUN 1 to LUN 2.
fn long_copy(s: &mut ScsiSession, list_id: u8) -> Vec<u8> {
    let d1 = naa_designator(s);
    s.lun = 2;
    let d2 = naa_designator(s);
    s.lun = 1;
    let n = 65535u64;
    let segs: Vec<Vec<u8>> = (0..4).map(|i| b2b(0, 1, n, i * n, i * n)).collect();
    list_of(list_id, &[(&d1, 4096), (&d2, 4096)], &segs)
}

/// ABORT TASK of a running EXTENDED COPY: the copy stops between chunks (COPY STATUS says
/// it failed before its last segment), and the task management response comes once it has.
/// Then LOGICAL UNIT RESET from another initiator does the same.
#[test]
fn task_management_stops_a_running_copy() {
    require_numatgtd("EXTENDED COPY");
    let d = Daemon::start(&[
        LunSpec::new(1, 4096, 1024 * MIB + 4 * MIB),
        LunSpec::new(2, 4096, 1024 * MIB + 4 * MIB).with_cache("off"),
    ]);
    let mut a = ScsiSession::open(&d, "iqn.2026-11.test:xcopy-abort");
    let p = long_copy(&mut a, 3);
    let started = std::time::Instant::now();
    let itt = a.send_command(&xcopy_cdb(p.len()), &p, p.len() as u32, false);
    assert_eq!(
        a.task_management(0x01, itt),
        0,
        "ABORT TASK: function complete"
    );
    let took = started.elapsed();
    let (status, segments) = copy_status(&mut a, 3);
    assert_eq!(status, 0x02, "the aborted copy's status (after {took:?})");
    assert!(
        segments < 4,
        "all {segments} segments copied despite the abort"
    );
    // no SCSI response came for the aborted task
    while let Some(pdu) = a.next_pdu(std::time::Duration::from_millis(200)) {
        assert_ne!(pdu.opcode(), 0x21, "a response for the aborted copy");
    }

    // another initiator resets the LU while a's copy runs
    let mut b = ScsiSession::open(&d, "iqn.2026-11.test:xcopy-reset");
    let itt = a.send_command(&xcopy_cdb(p.len()), &p, p.len() as u32, false);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(b.task_management(0x05, 0), 0, "LOGICAL UNIT RESET");
    let (status, segments) = copy_status(&mut a, 3);
    assert_eq!(status, 0x02, "the reset copy's status (task {itt})");
    assert!(
        segments < 4,
        "all {segments} segments copied despite the reset"
    );
}

/// The Third-party Copy VPD page is listed and agrees with OPERATING PARAMETERS.
#[test]
fn third_party_copy_vpd_page() {
    require_numatgtd("EXTENDED COPY");
    let d = Daemon::start(&[LunSpec::new(1, BS as u32, 16 * MIB)]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.test:xcopy-vpd");
    ready(&mut s);
    let (st, _, sup) = s.command(&[0x12, 1, 0x00, 0, 255, 0], &[], 255);
    assert_eq!(st, 0);
    assert!(sup[4..].contains(&0x8F), "8Fh not listed: {sup:02x?}");
    let (st, sense, page) = s.command(&[0x12, 1, 0x8F, 0x04, 0, 0], &[], 1024);
    assert_eq!(st, 0, "VPD 8Fh: sense {sense:02x?}");
    assert_eq!(page[1], 0x8F);
    assert_eq!(
        usize::from(u16::from_be_bytes([page[2], page[3]])) + 4,
        page.len()
    );
    let mut rcr = [0u8; 16];
    rcr[0] = 0x84;
    rcr[1] = 0x03;
    rcr[13] = 64;
    let (st, _, op) = s.command(&rcr, &[], 64);
    assert_eq!(st, 0);
    // walk the descriptors
    let mut at = 4;
    let mut seen = Vec::new();
    while at + 4 <= page.len() {
        let ty = u16::from_be_bytes([page[at], page[at + 1]]);
        let len = usize::from(u16::from_be_bytes([page[at + 2], page[at + 3]]));
        assert_eq!(len % 4, 0, "descriptor {ty:04x} length");
        let b = &page[at + 4..at + 4 + len];
        match ty {
            0x0001 => assert_eq!(&b[..10], &[9, 0x83, 1, 0, 0x84, 4, 0, 1, 3, 4]),
            0x0004 => {
                assert_eq!(len, 0x1C);
                assert_eq!(&b[4..12], &op[8..16], "descriptor counts and list length");
            }
            0x0008 => assert_eq!(
                &b[..=usize::from(op[43])],
                &op[43..44 + usize::from(op[43])]
            ),
            0x000C | 0x8001 => {}
            other => panic!("unexpected descriptor {other:04x}"),
        }
        seen.push(ty);
        at += 4 + len;
    }
    assert_eq!(seen, vec![0x0001, 0x0004, 0x0008, 0x000C, 0x8001]);
}
