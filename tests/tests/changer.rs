//! Medium changers (issue 27, `--device-type changer`): Debian's own virtual tape library
//! example, `targets.conf.vtl.L700` (paths moved to a temporary directory), loaded into
//! numatgtd with Debian's `tgt-admin -e`, tapes made by `tgtimg` and put in slots with
//! tgtadm as the example says. Over a raw session the changer reports its elements (READ
//! ELEMENT STATUS with volume tags, the Element Address Assignment page) and moves a tape
//! into a drive, where the drive LUN writes it, and back to a slot; the tape file then
//! holds the record. A restart keeps which tape is where (the state in the changer's
//! `smc` file). `--op show` and the elements are compared with Debian's tgtd on the same
//! files.

use std::path::{Path, PathBuf};

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::pdu::ScsiSession;
use tests::tools;

const IQN: &str = "iqn.2008-09.com.example:server.tape";
const INITIATOR: &str = "iqn.2026-11.org.numatgt:vtl-host";

fn tgtimg(dir: &Path, file: &str, barcode: &str, size: &str, kind: &str) {
    let f = format!("--file={}", dir.join(file).display());
    let b = format!("--barcode={barcode}");
    let s = format!("--size={size}");
    let t = format!("--type={kind}");
    tools::run(
        30,
        "tgtimg",
        ["--op", "new", "--device-type", "tape", &b, &s, &t, &f],
    )
    .check("tgtimg --op new");
}

/// The library's files as tgt's L700 example wants them: an empty "notape" cleaning
/// cartridge linked as each drive's backing store, the changer's `smc` file, two tapes.
fn vtl_dir(dir: &Path) -> PathBuf {
    tgtimg(dir, "notape", "", "1", "clean");
    for i in 1..=3 {
        std::os::unix::fs::symlink("notape", dir.join(format!("notape{i}"))).expect("symlink");
    }
    for b in ["A0000001", "A0000002"] {
        tgtimg(dir, b, b, "16", "data");
    }
    std::fs::write(dir.join("smc"), vec![0u8; 1024]).expect("smc");
    let example = std::fs::read_to_string("/usr/share/doc/tgt/examples/targets.conf.vtl.L700")
        .expect("Debian's tgt ships examples/targets.conf.vtl.L700");
    let d = dir.display().to_string();
    let conf: String = example
        .replace("/root/tapes", &d)
        .replace("/root/smc", &format!("{d}/smc"))
        .lines()
        .filter(|l| !l.starts_with("include"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.join("l700.conf");
    std::fs::write(&path, conf).expect("write conf");
    path
}

/// The L700 example's files in a new temporary directory (kept while it lives) and its
/// configuration's path; a test fails without numatgtd and tgt's tools.
fn l700_files() -> (tempfile::TempDir, PathBuf) {
    require_numatgtd("changer");
    tools::require_tool("tgt-admin");
    tools::require_tool("tgtimg");
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = vtl_dir(dir.path());
    (dir, conf)
}

/// tgt-admin -e of the example, then the two tapes put in slots 1000 and 1001 as its
/// comment says.
fn load_library(d: &Daemon, conf: &Path) {
    let r = d.admin_tool("tgt-admin", &["-e", "-c", &conf.to_string_lossy()]);
    assert!(r.status.success(), "tgt-admin -e\n{r}\n{}", d.log_tail(30));
    for (slot, b) in [("1000", "A0000001"), ("1001", "A0000002")] {
        let p = format!("element_type=2,address={slot},barcode={b},sides=1");
        update_changer(d, &p).check("tgtadm --params barcode=");
    }
}

/// A session to `lun`: the changer and a drive each get their own (one initiator's new
/// login would reinstate the other).
/// tgtadm `--op update --params P` of the changer (LUN 4 of tid 1).
fn update_changer(d: &Daemon, params: &str) -> tools::ToolRun {
    d.tgtadm(&[
        "--lld",
        "iscsi",
        "--mode",
        "logicalunit",
        "--op",
        "update",
        "--tid",
        "1",
        "--lun",
        "4",
        "--params",
        params,
    ])
}

fn session(d: &Daemon, lun: u16) -> ScsiSession {
    let name = format!("{INITIATOR}-{lun}");
    let mut s = ScsiSession::open_target(d, &name, IQN);
    s.lun = lun;
    for _ in 0..3 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
    s
}

/// (element type, address, full, volume tag) of every element READ ELEMENT STATUS
/// reports for `kind` (0: all), with volume tags.
fn elements(s: &mut ScsiSession, kind: u8) -> Vec<(u8, u16, bool, String)> {
    let cdb = [0xB8, 0x10 | kind, 0, 0, 0xFF, 0xFF, 0, 0, 0x40, 0, 0, 0];
    let (st, sense, d) = s.command(&cdb, &[], 0x4000);
    assert_eq!(st, 0, "READ ELEMENT STATUS: {sense:02x?}");
    let mut out = Vec::new();
    let mut at = 8;
    while at + 8 <= d.len() {
        let t = d[at];
        let len = usize::from(u16::from_be_bytes([d[at + 2], d[at + 3]]));
        let bytes = u32::from_be_bytes([0, d[at + 5], d[at + 6], d[at + 7]]) as usize;
        let end = (at + 8 + bytes).min(d.len());
        if len == 0 {
            break;
        }
        for e in d[at + 8..end].chunks(len).filter(|e| e.len() >= 44) {
            let tag = String::from_utf8_lossy(&e[12..44]).trim_end().to_string();
            out.push((t, u16::from_be_bytes([e[0], e[1]]), e[2] & 1 != 0, tag));
        }
        at = end;
    }
    out
}

fn full(elems: &[(u8, u16, bool, String)]) -> Vec<(u16, String)> {
    elems
        .iter()
        .filter(|e| e.2)
        .map(|e| (e.1, e.3.clone()))
        .collect()
}

fn move_medium(s: &mut ScsiSession, src: u16, dst: u16) -> (u8, Vec<u8>) {
    let [a, b] = src.to_be_bytes();
    let [c, e] = dst.to_be_bytes();
    let (st, sense, _) = s.command(&[0xA5, 0, 0, 0, a, b, c, e, 0, 0, 0, 0], &[], 0);
    (st, sense)
}

fn asc(sense: &[u8]) -> (u8, u8, u8) {
    (
        sense.get(2).map_or(0, |b| b & 0x0F),
        sense.get(12).copied().unwrap_or(0),
        sense.get(13).copied().unwrap_or(0),
    )
}

fn show(d: &Daemon) -> String {
    let r = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    r.check("tgtadm show");
    r.stdout
}

#[test]
fn debians_l700_library_moves_tapes_and_keeps_them_across_a_restart() {
    let (dir, conf) = l700_files();

    // Debian's tgtd on the same files first (it does not write them): show, elements
    let t = Daemon::start_like_tgtd(TargetKind::Tgtd, &[]);
    load_library(&t, &conf);
    let tgtd_show = show(&t);
    let mut s = session(&t, 4);
    let tgtd_types: Vec<_> = (1..=4).map(|k| elements(&mut s, k)).collect();
    // and after the first tape went into drive 500
    assert_eq!(move_medium(&mut s, 1000, 500).0, 0, "tgtd's MOVE MEDIUM");
    let tgtd_moved = (elements(&mut s, 2), elements(&mut s, 4));
    assert_eq!(
        move_medium(&mut s, 500, 1000).0,
        0,
        "tgtd's MOVE MEDIUM back"
    );
    drop(s);
    drop(t);

    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    load_library(&d, &conf);
    assert_eq!(show(&d), tgtd_show, "tgtadm --op show");
    let mut s = session(&d, 4);
    let (st, _, inq) = s.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!((st, inq[0] & 0x1F), (0, 0x08), "a medium changer");
    assert_eq!(&inq[8..16], b"STK     ", "the example's vendor_id");
    // Element Address Assignment: 1 picker at 1, 216 slots from 1000, 20 mail slots from
    // 10, 3 drives from 500
    let (st, _, m) = s.command(&[0x1A, 0x08, 0x1D, 0, 255, 0], &[], 255);
    assert_eq!(st, 0);
    assert_eq!(
        &m[6..22],
        &[
            0, 1, 0, 1, 0x03, 0xE8, 0, 216, 0, 10, 0, 20, 0x01, 0xF4, 0, 3
        ]
    );
    let all = elements(&mut s, 0);
    assert_eq!(all.len(), 1 + 216 + 20 + 3, "every element");
    // each element type's page, as tgtd reports it (tgtd's report of all types at once
    // overlaps its pages: compared type by type)
    for (k, theirs) in (1..=4).zip(&tgtd_types) {
        assert_eq!(
            &elements(&mut s, k),
            theirs,
            "element type {k}, as tgtd reports it"
        );
    }
    assert_eq!(
        full(&all),
        vec![(1000, "A0000001".into()), (1001, "A0000002".into())]
    );

    // refused moves: from an empty slot, to a full one, to no element
    assert_eq!(asc(&move_medium(&mut s, 1002, 500).1), (5, 0x3B, 0x0E));
    assert_eq!(asc(&move_medium(&mut s, 1000, 1001).1), (5, 0x3B, 0x0D));
    assert_eq!(asc(&move_medium(&mut s, 1000, 7777).1), (5, 0x21, 0x01));
    // slot 1000 to drive 500 (the example binds it to LUN 3)
    let (st, sense) = move_medium(&mut s, 1000, 500);
    assert_eq!(
        st,
        0,
        "MOVE MEDIUM to the drive: {sense:02x?}\n{}",
        d.log_tail(20)
    );
    let drives: Vec<_> = elements(&mut s, 4);
    assert_eq!(drives[0], (4, 500, true, "A0000001".into()));
    assert_eq!(
        (elements(&mut s, 2), drives),
        tgtd_moved,
        "after the move, as tgtd"
    );

    // the drive writes the tape
    let mut t3 = session(&d, 3);
    let rec = vec![0x5Au8; 3000];
    let (st, sense, _) = t3.command(&[0x0A, 0, 0, 0x0B, 0xB8, 0], &rec, 0);
    assert_eq!(st, 0, "WRITE(6) in the drive: {sense:02x?}");
    let (st, _, _) = t3.command(&[0x10, 0, 0, 0, 1, 0], &[], 0);
    assert_eq!(st, 0, "WRITE FILEMARKS");
    // back to slot 1005; the drive is empty
    let (st, sense) = move_medium(&mut s, 500, 1005);
    assert_eq!(st, 0, "MOVE MEDIUM back: {sense:02x?}");
    let (st, sense, _) = t3.command(&[0; 6], &[], 0);
    assert_eq!((st, asc(&sense).1), (2, 0x3A), "the drive has no tape");
    assert_eq!(
        full(&elements(&mut s, 0)),
        vec![(1001, "A0000002".into()), (1005, "A0000001".into())]
    );
    drop(t3);
    drop(s);
    let shown = tests::mgmt::tgtimg_show(&dir.path().join("A0000001"));
    assert_eq!(
        shown.stdout.matches("Uncompressed data").count(),
        1,
        "{shown}"
    );
    assert_eq!(shown.stdout.matches("Filemark").count(), 1, "{shown}");
    // A0000002 into drive 500 again, then a restart: it is still in the drive
    let mut s = session(&d, 4);
    assert_eq!(move_medium(&mut s, 1001, 500).0, 0);
    drop(s);
    drop(d);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    load_library(&d, &conf);
    let mut s = session(&d, 4);
    assert_eq!(
        full(&elements(&mut s, 0)),
        vec![(1005, "A0000001".into()), (500, "A0000002".into())],
        "the restored library (slots, then drives)\n{}",
        d.log_tail(30)
    );
    let mut t3 = session(&d, 3);
    let (st, sense, _) = t3.command(&[0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 20);
    assert_eq!(st, 0, "the drive has its tape again: {sense:02x?}");
    // numatgtd's dump describes the library with tgt's parameters
    let dump = tests::mgmt::numatgtadm_dump(&d);
    for line in [
        "device_type: changer",
        "element_type=2,start_address=1000,quantity=216",
        "element_type=4,address=500,tid=1,lun=3",
    ] {
        assert!(dump.stdout.contains(line), "{line:?} not in\n{dump}");
    }
    assert_eq!(d.metric("numatgt_lun_info", "device_type=\"changer\""), 1.0);
}

#[test]
fn bad_changer_parameters_are_refused() {
    require_numatgtd("changer");
    tools::require_tool("tgt-admin");
    tools::require_tool("tgtimg");
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = vtl_dir(dir.path());
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    load_library(&d, &conf);
    for p in [
        "element_type=2,start_address=1100,quantity=5",
        "element_type=2,address=4242,barcode=X",
        "element_type=2,address=1003,barcode=../../etc/passwd",
        "element_type=4,address=501",
        "element_type=7,start_address=9000,quantity=1",
        "colour=red",
    ] {
        let r = update_changer(&d, p);
        assert!(!r.status.success(), "{p} accepted\n{r}");
    }
    let log = d.log_tail(40);
    assert!(log.contains("overlap") && log.contains("barcode"), "{log}");
}

/// YAML of a library target (tid 2): a tape drive (LUN 1, "notape" when empty), the changer
/// (LUN 2: a picker, four slots from 1000, one drive at 500 bound to LUN 1, A0000001 in
/// slot 1000), a drive of its own with the data tape A0000002 (LUN 4), and `extra` LUNs.
fn vtl_yaml(dir: &Path, extra: &str) -> String {
    let d = dir.display();
    format!(
        "  - iqn: {IQN}\n    tid: 2\n    luns:\n      - lun: 1\n        path: {d}/notape1\n        device_type: tape\n      - lun: 2\n        path: {d}/smc\n        device_type: changer\n        changer:\n          - element_type=1,start_address=1,quantity=1,media_home={d}\n          - element_type=2,start_address=1000,quantity=4\n          - element_type=4,start_address=500,quantity=1\n          - element_type=4,address=500,tid=2,lun=1\n          - element_type=2,address=1000,barcode=A0000001\n      - lun: 4\n        path: {d}/A0000002\n        device_type: tape\n{extra}"
    )
}

#[test]
fn a_reload_keeps_the_library_and_the_tape_in_its_drive() {
    require_numatgtd("changer");
    tools::require_tool("tgtimg");
    let dir = tempfile::tempdir().expect("tempdir");
    vtl_dir(dir.path());
    let d = Daemon::start(&[tests::LunSpec::new(1, 512, tests::MIB)]);
    let base = std::fs::read_to_string(&d.config_path).expect("read config");
    let path = d.config_path.display().to_string();
    let reload = |yaml: String, want: &str| {
        std::fs::write(&d.config_path, yaml).expect("write config");
        let r = d.admin_tool(&tests::mgmt::numatgtadm_bin(), &["--reload", &path]);
        r.check("numatgtadm --reload");
        assert!(r.stdout.contains(want), "{r}\n{}", d.log_tail(20));
    };
    reload(format!("{base}{}", vtl_yaml(dir.path(), "")), "1 added");
    let mut s = session(&d, 2);
    assert_eq!(move_medium(&mut s, 1000, 500).0, 0, "{}", d.log_tail(20));
    let mut t1 = session(&d, 1);
    let rec = vec![0xC3u8; 512];
    assert_eq!(t1.command(&[0x0A, 0, 0, 2, 0, 0], &rec, 0).0, 0, "WRITE(6)");
    assert_eq!(
        t1.command(&[0x10, 0, 0, 0, 1, 0], &[], 0).0,
        0,
        "WRITE FILEMARKS"
    );
    drop(t1);
    drop(s);
    // the library's target changes (a disk LUN more): rebuilt while its old version
    // holds the tape; the new drive gets it once the old one let it go
    let disk = dir.path().join("disk.img");
    tests::daemon::create_sparse(&disk, tests::MIB);
    let extra = format!("      - lun: 3\n        path: {}\n", disk.display());
    reload(
        format!("{base}{}", vtl_yaml(dir.path(), &extra)),
        "1 changed",
    );
    let mut s = session(&d, 2);
    assert_eq!(
        full(&elements(&mut s, 0)),
        vec![(500, "A0000001".into())],
        "the library after the reload\n{}",
        d.log_tail(20)
    );
    let mut t1 = session(&d, 1);
    assert_eq!(t1.command(&[0x01, 0, 0, 0, 0, 0], &[], 0).0, 0, "REWIND");
    let (st, sense, data) = t1.command(&[0x08, 0, 0, 2, 0, 0], &[], 512);
    assert_eq!(
        (st, data),
        (0, rec),
        "the record, read back after the reload: {sense:02x?}"
    );
    // the drive of its own has its data tape again (held exclusively by the old drive
    // while the reload opened the new one)
    let mut t4 = session(&d, 4);
    let (st, sense, _) = t4.command(&[0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 20);
    assert_eq!(
        st,
        0,
        "LUN 4 has its tape: {sense:02x?}\n{}",
        d.log_tail(20)
    );
}

/// A live upgrade (`numatgtadm --upgrade`) with a tape in a drive of the library, half
/// written: the changer's and the drive's moved sessions see no unit attention, the
/// elements are where they were, and the drive is at the same position with the same tape
/// (the new process puts the tape in its drive again, then goes on where it was).
#[test]
fn a_library_and_its_drive_go_on_across_a_live_upgrade() {
    let (_dir, conf) = l700_files();
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    load_library(&d, &conf);
    let mut changer = session(&d, 4);
    assert_eq!(move_medium(&mut changer, 1000, 500).0, 0, "MOVE MEDIUM");
    // the drive of element 500 (LUN 3 in the example)
    let mut drive = session(&d, 3);
    for n in [700u32, 64] {
        let cdb = [0x0A, 0, 0, (n >> 8) as u8, n as u8, 0];
        let (st, sense, _) = drive.command(&cdb, &vec![n as u8; n as usize], 0);
        assert_eq!(st, 0, "WRITE(6): {sense:02x?}");
    }
    let read_position = |s: &mut ScsiSession| {
        let (st, sense, p) = s.command(&[0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 20);
        assert_eq!(st, 0, "READ POSITION: {sense:02x?}");
        u32::from_be_bytes([p[4], p[5], p[6], p[7]])
    };
    assert_eq!(read_position(&mut drive), 2);
    let before = elements(&mut changer, 0);

    tests::mgmt::upgrade_moving(&d, 2);
    for (s, what) in [(&mut changer, "changer"), (&mut drive, "drive")] {
        let (st, sense, _) = s.command(&[0; 6], &[], 0);
        assert_eq!(
            st,
            0,
            "the {what}: no unit attention after the upgrade: {}",
            { format!("{:?}", asc(&sense)) }
        );
    }
    assert_eq!(elements(&mut changer, 0), before, "the elements");
    assert_eq!(read_position(&mut drive), 2, "the drive's position");
    let (st, sense, _) = drive.command(&[0x0A, 0, 0, 0, 10, 0], &[9; 10], 0);
    assert_eq!(st, 0, "WRITE(6) after the upgrade: {sense:02x?}");
    assert_eq!(read_position(&mut drive), 3);
    assert_eq!(
        move_medium(&mut changer, 500, 1000).0,
        0,
        "MOVE MEDIUM back"
    );
}
