//! Tape drives (issue 27, `--device-type tape`): tapes made by Debian's `tgtimg`, exported
//! through Debian's tgtadm by numatgtd started like tgtd, written and read over a raw
//! session (records of several sizes, filemarks, READ POSITION, SPACE, LOCATE, the end of
//! data), and exchanged with Debian's tgtd both ways: a tape numatgtd wrote reads back the
//! same through tgtd, and one tgtd wrote reads back the same through numatgtd. `tgtadm
//! --op show` of the drive is compared with tgtd's byte for byte; the administrator
//! changes the tape with `online=0`, `path=` and `online=1`.

use std::path::{Path, PathBuf};

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::mgmt::{export_lun1, new_lun, tgtadm_ok, update_lun1};
use tests::pdu::ScsiSession;
use tests::tools;

const IQN: &str = "iqn.2026-11.org.numatgt:tape";
const INITIATOR: &str = "iqn.2026-11.org.numatgt:tape-host";

/// A blank 16 MiB data tape made by tgtimg, as tgt's README.vtl makes them.
fn tgtimg_tape(dir: &Path, barcode: &str) -> PathBuf {
    let f = dir.join(barcode);
    let file = format!("--file={}", f.display());
    let code = format!("--barcode={barcode}");
    tools::run(
        30,
        "tgtimg",
        [
            "--op",
            "new",
            "--device-type",
            "tape",
            &code,
            "--size=16",
            "--type=data",
            &file,
        ],
    )
    .check("tgtimg --op new (Debian's tgt, tools/install-test-deps.sh)");
    f
}

/// Target 1 with LUN 1 a tape drive holding `tape`, open to every initiator.
fn export_tape(d: &Daemon, tape: &Path) {
    export_lun1(d, IQN, tape, &["--device-type", "tape"]);
}

/// What a tape holds, as a host reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Object {
    Record(Vec<u8>),
    Filemark,
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Two files: three records, a filemark, one record, a filemark.
fn content() -> Vec<Object> {
    vec![
        Object::Record(pattern(1000, 1)),
        Object::Record(pattern(4000, 2)),
        Object::Record(pattern(10, 3)),
        Object::Filemark,
        Object::Record(pattern(2048, 4)),
        Object::Filemark,
    ]
}

fn good(s: &mut ScsiSession, cdb: &[u8], data: &[u8], what: &str) {
    let (st, sense, _) = s.command(cdb, data, 0);
    assert_eq!(st, 0, "{what}: sense {sense:02x?}");
}

/// Each object as its length and a checksum (a failure prints these, not the bytes).
fn summary(objects: &[Object]) -> Vec<String> {
    objects
        .iter()
        .map(|o| match o {
            Object::Record(r) => {
                let sum = r.iter().fold(0u32, |a, &b| a.rotate_left(5) ^ u32::from(b));
                format!("record {} bytes #{sum:08x}", r.len())
            }
            Object::Filemark => "filemark".into(),
        })
        .collect()
}

fn same(got: &[Object], want: &[Object], what: &str) {
    assert_eq!(summary(got), summary(want), "{what}");
    assert!(got == want, "{what}");
}

fn write_all(s: &mut ScsiSession, objects: &[Object]) {
    for o in objects {
        match o {
            Object::Record(r) => {
                let n = r.len() as u32;
                let cdb = [0x0A, 0, (n >> 16) as u8, (n >> 8) as u8, n as u8, 0];
                good(s, &cdb, r, "WRITE(6)");
            }
            Object::Filemark => good(s, &[0x10, 0, 0, 0, 1, 0], &[], "WRITE FILEMARKS"),
        }
    }
}

/// Rewinds and reads every object up to the end of data (variable-block READ(6) of 64 KiB
/// with SILI).
fn read_all(s: &mut ScsiSession) -> Vec<Object> {
    good(s, &[0x01, 0, 0, 0, 0, 0], &[], "REWIND");
    let mut out = Vec::new();
    for _ in 0..20 {
        let (st, sense, data) = s.command(&[0x08, 0x02, 0x01, 0, 0, 0], &[], 0x10000);
        let (flags, key, asc, ascq) = (
            sense.get(2).map_or(0, |b| b & 0xE0),
            sense.get(2).map_or(0, |b| b & 0x0F),
            sense.get(12).copied().unwrap_or(0),
            sense.get(13).copied().unwrap_or(0),
        );
        match st {
            0 => out.push(Object::Record(data)),
            2 if flags & 0x80 != 0 => out.push(Object::Filemark),
            // end of data: BLANK CHECK, END-OF-DATA DETECTED (SSC-3; tgtd 1.0.85 sends BLANK
            // CHECK with EOM and no additional sense code)
            2 if (asc, ascq) == (0, 5) || key == 8 => return out,
            // tgtd reports a shorter record with ILI even with SILI
            // (and sends its whole buffer: the residual, the INFORMATION field, says how
            // much of it is the record, as Linux's st reads it)
            2 if flags & 0x20 != 0 && key == 0 => {
                let resid = i32::from_be_bytes([sense[3], sense[4], sense[5], sense[6]]);
                let len = usize::try_from(0x10000 - resid).unwrap_or(0);
                out.push(Object::Record(data[..len.min(data.len())].to_vec()));
            }
            _ => panic!("READ(6): status {st}, sense {sense:02x?}"),
        }
    }
    panic!("no end of data after 20 objects: {out:?}");
}

fn position(s: &mut ScsiSession) -> (u8, u32) {
    let (st, sense, d) = s.command(&[0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 20);
    assert_eq!(st, 0, "READ POSITION: {sense:02x?}");
    assert_eq!(d.len(), 20, "READ POSITION short form");
    (d[0], u32::from_be_bytes([d[4], d[5], d[6], d[7]]))
}

/// The LUN 1 block of `--op show`.
fn lun1_block(d: &Daemon) -> String {
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    show.check("tgtadm show");
    let at = show.stdout.find("        LUN: 1\n").expect("LUN 1 in show");
    let rest = &show.stdout[at..];
    let end = rest.find("    Account information:").unwrap_or(rest.len());
    rest[..end].to_string()
}

#[test]
fn tapes_written_by_numatgtd_and_tgtd_read_back_the_same_through_both() {
    require_numatgtd("tape");
    tools::require_tool("tgtimg");
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = tgtimg_tape(dir.path(), "NUM00001");
    let theirs = tgtimg_tape(dir.path(), "TGT00001");
    let want = content();

    // numatgtd writes NUM00001 and reads it back
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_tape(&d, &ours);
    let ours_show = lun1_block(&d);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    let (st, _, inq) = s.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!(
        (st, inq[0], inq[1] & 0x80),
        (0, 0x01, 0x80),
        "PDT 1, removable"
    );
    let (st, _, limits) = s.command(&[0x05, 0, 0, 0, 0, 0], &[], 6);
    assert_eq!((st, limits.len()), (0, 6), "READ BLOCK LIMITS");
    assert_eq!(position(&mut s), (0x80, 0), "at the beginning");
    write_all(&mut s, &want);
    assert_eq!(position(&mut s).1, 6, "six objects written");
    same(
        &read_all(&mut s),
        &want,
        "numatgtd reads back what it wrote",
    );
    // positioning: SPACE over a filemark, LOCATE, the long form counts files
    good(&mut s, &[0x01, 0, 0, 0, 0, 0], &[], "REWIND");
    good(&mut s, &[0x11, 0x01, 0, 0, 1, 0], &[], "SPACE 1 filemark");
    assert_eq!(position(&mut s), (0, 4));
    let (st, _, d4) = s.command(&[0x08, 0, 0, 0x08, 0, 0], &[], 2048);
    assert_eq!((st, d4), (0, pattern(2048, 4)), "the second file's record");
    good(&mut s, &[0x2B, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], "LOCATE 1");
    let (st, _, d1) = s.command(&[0x08, 0, 0, 0x0F, 0xA0, 0], &[], 4000);
    assert_eq!((st, d1), (0, pattern(4000, 2)), "record 1 after LOCATE");
    let (st, _, long) = s.command(&[0x34, 6, 0, 0, 0, 0, 0, 0, 32, 0], &[], 32);
    assert_eq!(
        (st, long[15], long[23]),
        (0, 2, 0),
        "long form: object 2, file 0"
    );
    let (st, sense, _) = s.command(&[0x11, 0x03, 0, 0, 0, 0], &[], 0);
    assert_eq!(st, 0, "SPACE to end of data: {sense:02x?}");
    assert_eq!(position(&mut s).1, 6);
    // a record is too short for the asked length without SILI: ILI, the residue
    good(&mut s, &[0x01, 0, 0, 0, 0, 0], &[], "REWIND");
    let (st, sense, data) = s.command(&[0x08, 0, 0, 0x04, 0, 0], &[], 1024);
    assert_eq!(
        (st, sense[2], &sense[3..7]),
        (2, 0x20, &24u32.to_be_bytes()[..])
    );
    assert_eq!(data, pattern(1000, 1));
    drop(s);
    // numatgtd's dump and metrics keep it a tape drive
    let dump = tests::mgmt::numatgtadm_dump(&d);
    assert!(dump.stdout.contains("device_type: tape"), "{dump}");
    assert_eq!(d.metric("numatgt_lun_info", "device_type=\"tape\""), 1.0);
    drop(d);

    // tgtimg reads the tape numatgtd wrote: four data blocks, two filemarks
    let shown = tests::mgmt::tgtimg_show(&ours);
    assert_eq!(shown.stdout.matches("Filemark").count(), 2, "{shown}");
    assert_eq!(
        shown.stdout.matches("Uncompressed data").count(),
        4,
        "{shown}"
    );

    // Debian's tgtd reads it back the same, and writes its own tape
    let t = Daemon::start_like_tgtd(TargetKind::Tgtd, &[]);
    export_tape(&t, &ours);
    assert_eq!(lun1_block(&t), ours_show, "tgtadm show of the drive");
    let mut s = ScsiSession::open_target(&t, INITIATOR, IQN);
    same(&read_all(&mut s), &want, "tgtd reads numatgtd's tape");
    assert!(
        !t.log().contains("crc error"),
        "tgtd checks the headers' CRC32C\n{}",
        t.log_tail(20)
    );
    drop(s);
    tgtadm_ok(
        &t,
        &[
            "--lld",
            "iscsi",
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "2",
            "-b",
            &theirs.to_string_lossy(),
            "--device-type",
            "tape",
        ],
    );
    let mut s = ScsiSession::open_target(&t, INITIATOR, IQN);
    s.lun = 2;
    for _ in 0..3 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
    write_all(&mut s, &want);
    drop(s);
    drop(t);

    // numatgtd reads tgtd's tape back the same
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_tape(&d, &theirs);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    same(&read_all(&mut s), &want, "numatgtd reads tgtd's tape");
    // and appends to it after the end of data
    let (st, _, _) = s.command(&[0x11, 0x03, 0, 0, 0, 0], &[], 0);
    assert_eq!(st, 0);
    write_all(&mut s, &[Object::Record(pattern(77, 9)), Object::Filemark]);
    let mut more = want.clone();
    more.extend([Object::Record(pattern(77, 9)), Object::Filemark]);
    same(&read_all(&mut s), &more, "");
}

#[test]
fn the_tape_changes_from_tgtadm_and_bad_tapes_are_refused() {
    require_numatgtd("tape");
    tools::require_tool("tgtimg");
    let dir = tempfile::tempdir().expect("tempdir");
    let a = tgtimg_tape(dir.path(), "A0000001");
    let b = tgtimg_tape(dir.path(), "B0000001");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_tape(&d, &a);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    write_all(&mut s, &[Object::Record(pattern(100, 1)), Object::Filemark]);

    // out of the drive: NOT READY, MEDIUM NOT PRESENT
    update_lun1(&d, "online=0").check("online=0");
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense[2] & 0x0F, sense[12]),
        (2, 2, 0x3A),
        "{sense:02x?}"
    );
    // a path only while offline, then the drive holds the new tape
    update_lun1(&d, &format!("path={}", b.display())).check("path=");
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense[2] & 0x0F, sense[12]),
        (2, 6, 0x28),
        "not ready to ready"
    );
    same(&read_all(&mut s), &[], "B is blank");
    let r = update_lun1(&d, &format!("path={}", a.display()));
    assert!(!r.status.success(), "path= while online\n{r}");
    update_lun1(&d, "online=0").check("online=0");
    update_lun1(&d, "online=1").check("online=1");
    let _ = s.command(&[0; 6], &[], 0);
    same(
        &read_all(&mut s),
        &[],
        "online=1 loads the LUN's path again",
    );
    update_lun1(&d, "online=0").check("online=0");
    update_lun1(&d, &format!("path={}", a.display())).check("path=A");
    let _ = s.command(&[0; 6], &[], 0);
    assert_eq!(
        read_all(&mut s),
        vec![Object::Record(pattern(100, 1)), Object::Filemark]
    );
    // the initiator unloads and loads
    good(&mut s, &[0x1B, 0, 0, 0, 0, 0], &[], "UNLOAD");
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!((st, sense[12]), (2, 0x3A));
    good(&mut s, &[0x1B, 0, 0, 0, 1, 0], &[], "LOAD");
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense[2] & 0x0F, sense[12]),
        (2, 6, 0x28),
        "the tape is ready"
    );
    assert_eq!(position(&mut s), (0x80, 0));
    drop(s);

    // not a tape: refused (tgtd refuses it too)
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0x5Au8; 8192]).expect("write");
    let r = new_lun(&d, "1", "2", &junk, &["--device-type", "tape"]);
    assert!(!r.status.success(), "a file that is no tape\n{r}");
    // ssc is a tape's store: a disk cannot be on it (tgtd 1.0.85 takes it; Debian's
    // tgtadm itself sends bstype ssc for any tape drive, whatever --bstype says)
    let r = new_lun(&d, "1", "3", &a, &["--bstype", "ssc"]);
    assert!(!r.status.success(), "a disk on ssc\n{r}");
    // a tape in a drive is in no other drive (tgtd 1.0.85 loads it twice)
    let r = new_lun(&d, "1", "4", &a, &["--device-type", "tape"]);
    assert!(!r.status.success(), "one tape in two drives\n{r}");
    assert!(
        d.log_tail(40).contains("in another drive"),
        "{}",
        d.log_tail(40)
    );
    assert!(
        d.log_tail(40).contains("not a tgt tape image"),
        "{}",
        d.log_tail(40)
    );
}

#[test]
fn tgt_admin_exports_a_tape_drive_from_targets_conf() {
    require_numatgtd("tape");
    tools::require_tool("tgt-admin");
    tools::require_tool("tgtimg");
    let dir = tempfile::tempdir().expect("tempdir");
    let tape = tgtimg_tape(dir.path(), "C0000001");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let conf = dir.path().join("targets.conf");
    std::fs::write(
        &conf,
        format!(
            "<target {IQN}>\n    <backing-store {}>\n        device-type tape\n        bs-type ssc\n        lun 1\n    </backing-store>\n</target>\n",
            tape.display()
        ),
    )
    .expect("write targets.conf");
    let r = d.admin_tool("tgt-admin", &["-e", "-c", &conf.to_string_lossy()]);
    assert!(r.status.success(), "tgt-admin -e\n{r}\n{}", d.log_tail(30));
    assert!(lun1_block(&d).contains("Type: tape"));
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    write_all(&mut s, &content());
    same(&read_all(&mut s), &content(), "");
    // numatgtd's own importer of targets.conf agrees
    let cfg = config::targets_conf::import(&conf).unwrap_or_else(|e| panic!("import: {e}"));
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let l = &cfg.config.targets[0].luns[0];
    assert_eq!(
        (l.device_type, l.bs_type),
        (config::DeviceType::Tape, config::BsType::Ssc)
    );
}

/// A live upgrade (`numatgtadm --upgrade`) in the middle of writing a tape: the moved
/// session sees no unit attention, READ POSITION gives the same object, the writing goes on
/// where it stopped, and the tape reads back whole. A second upgrade with the tape
/// unloaded keeps it unloaded (NOT READY until LOAD).
#[test]
fn a_tape_drive_goes_on_where_it_was_across_a_live_upgrade() {
    require_numatgtd("tape");
    let dir = tempfile::tempdir().expect("tempdir");
    let tape = tgtimg_tape(dir.path(), "UPG001");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_tape(&d, &tape);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    let all = content();
    write_all(&mut s, &all[..3]);
    let before = position(&mut s);
    assert_eq!(before.1, 3, "three records written");
    let upgrade = || tests::mgmt::upgrade_moving(&d, 1);
    upgrade();
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(st, 0, "TEST UNIT READY after the upgrade: {sense:02x?}");
    assert_eq!(position(&mut s), before, "the same position");
    write_all(&mut s, &all[3..]);
    same(
        &read_all(&mut s),
        &all,
        "the tape written across the upgrade",
    );
    // unloaded, it stays so
    good(&mut s, &[0x1B, 0, 0, 0, 0, 0], &[], "UNLOAD");
    upgrade();
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, sense.get(2).map(|k| k & 0x0F), sense.get(12).copied()),
        (2, Some(2), Some(0x3A)),
        "unloaded after the upgrade: NOT READY, MEDIUM NOT PRESENT ({sense:02x?})"
    );
    good(&mut s, &[0x1B, 0, 0, 0, 1, 0], &[], "LOAD");
    for _ in 0..3 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
    same(&read_all(&mut s), &all, "the tape after LOAD");
    assert!(
        !d.log()
            .contains("cannot go on where the previous numatgtd left it"),
        "{}",
        d.log_tail(30)
    );
}
