//! CD/DVD LUNs (issue 27, `--device-type cd`): an ISO image made with genisoimage, exported
//! through Debian's tgtadm by numatgtd started like tgtd, read back byte-exact by qemu-img
//! (libiscsi), and its MMC answers over a raw session: INQUIRY, READ CAPACITY, GET
//! CONFIGURATION, READ TOC, GET EVENT STATUS NOTIFICATION around an eject and a load, a
//! refused WRITE. The same commands go to Debian's tgtd with the same image, and the
//! answers that both targets give the same way are compared byte for byte.

use std::path::{Path, PathBuf};

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::mgmt::{export_lun1, new_lun, tgtadm_ok, update_lun1};
use tests::pdu::ScsiSession;
use tests::{qemuio, tools};

const IQN: &str = "iqn.2026-11.org.numatgt:cd";

/// An ISO 9660 image of a few files of random bytes (genisoimage, from
/// tools/install-test-deps.sh).
fn make_iso(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for (name, len) in [
        ("a.bin", 300_000usize),
        ("sub/b.bin", 70_001),
        ("c.txt", 12),
    ] {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        std::fs::write(src.join(name), bytes).expect("write");
    }
    let iso = dir.join("disc.iso");
    let iso_s = iso.to_string_lossy().into_owned();
    let src_s = src.to_string_lossy().into_owned();
    tools::run(
        60,
        "genisoimage",
        [
            "-quiet",
            "-R",
            "-J",
            "-V",
            "NUMATGT_CD",
            "-o",
            &iso_s,
            &src_s,
        ],
    )
    .check("genisoimage (tools/install-test-deps.sh installs it)");
    iso
}

/// Target 1 with LUN 1 the image as a CD/DVD drive, open to every initiator.
fn export_cd(d: &Daemon, iso: &Path) {
    export_lun1(d, IQN, iso, &["--device-type", "cd"]);
}

fn key_asc(sense: &[u8]) -> (u8, u8, u8) {
    (
        sense.get(2).map_or(0, |b| b & 0x0F),
        sense.get(12).copied().unwrap_or(0),
        sense.get(13).copied().unwrap_or(0),
    )
}

/// The answers of one target to the commands both targets are compared on.
#[derive(Debug, PartialEq)]
struct Answers {
    inquiry_type_rmb: (u8, u8),
    read_capacity: Vec<u8>,
    /// The primary volume descriptor (LBA 16) read with READ(10).
    pvd: Vec<u8>,
    current_profile: Vec<u8>,
    toc: Vec<u8>,
}

fn answers(s: &mut ScsiSession) -> Answers {
    let (st, _, inq) = s.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!(st, 0, "INQUIRY");
    let (st, _, cap) = s.command(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 8);
    assert_eq!(st, 0, "READ CAPACITY");
    let (st, _, pvd) = s.command(&[0x28, 0, 0, 0, 0, 16, 0, 0, 1, 0], &[], 2048);
    assert_eq!(st, 0, "READ(10)");
    let (st, _, conf) = s.command(&[0x46, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[], 8);
    assert_eq!(st, 0, "GET CONFIGURATION");
    let (st, _, toc) = s.command(&[0x43, 0, 0, 0, 0, 0, 0, 0, 100, 0], &[], 100);
    assert_eq!(st, 0, "READ TOC");
    Answers {
        inquiry_type_rmb: (inq[0], inq[1] & 0x80),
        read_capacity: cap,
        pvd,
        current_profile: conf.get(6..8).map(<[u8]>::to_vec).unwrap_or_default(),
        toc,
    }
}

#[test]
fn an_iso_image_is_a_dvd_rom_drive_read_byte_exact() {
    require_numatgtd("cd");
    let dir = tempfile::tempdir().expect("tempdir");
    let iso = make_iso(dir.path());
    let image = std::fs::read(&iso).expect("read iso");
    assert_eq!(image.len() % 2048, 0, "an ISO is whole 2048-byte sectors");
    let sectors = (image.len() / 2048) as u32;

    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_cd(&d, &iso);
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    show.check("tgtadm show");
    for line in [
        "Type: cd/dvd",
        "Removable media: Yes",
        "Backing store type: mmc",
        "Block size: 1",
    ] {
        assert!(show.stdout.contains(line), "{line:?} not in\n{show}");
    }

    // qemu-img (libiscsi) reads the whole disc: the image, byte for byte
    let url = format!("{}/{IQN}/1", d.portal_url());
    let read = qemuio::read_all(&url, dir.path(), "read.iso")
        .unwrap_or_else(|e| panic!("qemu-img read: {e}\n{}", d.log_tail(30)));
    assert!(read == image, "the disc read back differs from the image");

    let mut s = ScsiSession::open_target(&d, "iqn.2026-11.org.numatgt:cd-a", IQN);
    let a = answers(&mut s);
    assert_eq!(a.inquiry_type_rmb, (0x05, 0x80), "PDT 5, removable");
    let mut cap = (sectors - 1).to_be_bytes().to_vec();
    cap.extend_from_slice(&2048u32.to_be_bytes());
    assert_eq!(a.read_capacity, cap);
    assert!(
        a.pvd == image[16 * 2048..17 * 2048],
        "LBA 16 is the image's"
    );
    assert_eq!(&a.pvd[..6], b"\x01CD001", "a primary volume descriptor");
    assert_eq!(a.current_profile, vec![0x00, 0x10], "DVD-ROM");
    assert_eq!(&a.toc[..4], &[0, 18, 1, 1]);
    assert_eq!(
        &a.toc[16..20],
        &sectors.to_be_bytes(),
        "lead-out at the end"
    );

    // a DVD-ROM drive does not write
    let (st, sense, _) = s.command(&[0x2A, 0, 0, 0, 0, 16, 0, 0, 1, 0], &[0u8; 2048], 0);
    assert_eq!((st, key_asc(&sense)), (2, (5, 0x20, 0)), "WRITE(10)");
    let after = qemuio::read_all(&url, dir.path(), "after.iso").expect("read again");
    assert!(after == image, "the image changed");

    // eject: no disc (NOT READY), a media-removal event once; load: new media
    let gesn = [0x4A, 1, 0, 0, 0x10, 0, 0, 0, 8, 0];
    assert_eq!(
        s.command(&gesn, &[], 8).2[4..6],
        [0, 0x02],
        "no event, disc in"
    );
    assert_eq!(s.command(&[0x1B, 0, 0, 0, 0x02, 0], &[], 0).0, 0, "eject");
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (2, (2, 0x3A, 0)),
        "TEST UNIT READY after eject"
    );
    assert_eq!(
        s.command(&gesn, &[], 8).2[4..6],
        [3, 0x01],
        "media removal, tray open"
    );
    assert_eq!(s.command(&gesn, &[], 8).2[4..6], [0, 0x01], "reported once");
    let conf = s.command(&[0x46, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[], 8).2;
    assert_eq!(conf[6..8], [0, 0], "no current profile without a disc");
    assert_eq!(s.command(&[0x1B, 0, 0, 0, 0x03, 0], &[], 0).0, 0, "load");
    assert_eq!(s.command(&gesn, &[], 8).2[4..6], [2, 0x02], "new media");
    assert_eq!(s.command(&[0; 6], &[], 0).0, 0, "ready again");
    // PREVENT: the tray stays shut
    assert_eq!(s.command(&[0x1E, 0, 0, 0, 1, 0], &[], 0).0, 0);
    let (st, sense, _) = s.command(&[0x1B, 0, 0, 0, 0x02, 0], &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (2, (5, 0x53, 0x02)),
        "eject while prevented"
    );
    assert_eq!(s.command(&[0x1E, 0, 0, 0, 0, 0], &[], 0).0, 0);
    drop(s);

    // numatgtd's dump keeps the LUN a cd
    let dump = tests::mgmt::numatgtadm_dump(&d);
    assert!(dump.stdout.contains("device_type: cd"), "{dump}");
    assert_eq!(
        d.metric("numatgt_lun_info", "device_type=\"cd\""),
        1.0,
        "numatgt_lun_info with device_type=\"cd\""
    );

    // Debian's tgtd with the same image: the same answers to the same commands
    let t = Daemon::start_like_tgtd(TargetKind::Tgtd, &[]);
    export_cd(&t, &iso);
    let mut s = ScsiSession::open_target(&t, "iqn.2026-11.org.numatgt:cd-a", IQN);
    let mut b = answers(&mut s);
    // tgtd 1.0.85 sends the TOC 2 bytes short: its lead-out descriptor ends after the
    // address's first two bytes, though its TOC DATA LENGTH says 18 (MMC-6 6.33.2.2: 2 +
    // 8 per descriptor). numatgtd sends all 20; the bytes tgtd sends are the same.
    assert!(
        b.toc.len() >= 18 && a.toc.starts_with(&b.toc),
        "tgtd's TOC {:02x?}, numatgtd's {:02x?}",
        b.toc,
        a.toc
    );
    b.toc.clone_from(&a.toc);
    assert_eq!(b, a, "tgtd answers differently");
}

#[test]
fn passthrough_device_types_are_refused_clearly() {
    require_numatgtd("cd");
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("x.img");
    tests::daemon::create_sparse(&img, 4 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    tgtadm_ok(
        &d,
        &[
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "1", "-T", IQN,
        ],
    );
    for (n, extra) in [
        ("3", &["--device-type", "pt", "--bstype", "sg"][..]),
        // a cd is an image file: not an RBD image, nothing, or 512-byte blocks
        ("4", &["--device-type", "cd", "--bstype", "null"][..]),
        ("5", &["--device-type", "cd", "--blocksize", "512"][..]),
    ] {
        let r = new_lun(&d, "1", n, &img, extra);
        assert!(!r.status.success(), "{extra:?} accepted\n{r}");
    }
    // tgt's `--bstype mmc` alone is a disk on the file, as in tgtd
    new_lun(&d, "1", "6", &img, &["--bstype", "mmc"]).check("--bstype mmc");
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(
        show.stdout.contains("LUN: 6\n            Type: disk"),
        "{show}"
    );
    assert!(!show.stdout.contains("LUN: 2\n"), "{show}");
}

#[test]
fn tgt_admin_exports_a_cd_from_targets_conf() {
    require_numatgtd("cd");
    tools::require_tool("tgt-admin");
    let dir = tempfile::tempdir().expect("tempdir");
    let iso = make_iso(dir.path());
    let image = std::fs::read(&iso).expect("read iso");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let conf = dir.path().join("targets.conf");
    std::fs::write(
        &conf,
        format!(
            "<target {IQN}>\n    <backing-store {}>\n        device-type cd\n        lun 1\n    </backing-store>\n</target>\n",
            iso.display()
        ),
    )
    .expect("write targets.conf");
    let r = d.admin_tool("tgt-admin", &["-e", "-c", &conf.to_string_lossy()]);
    assert!(r.status.success(), "tgt-admin -e\n{r}\n{}", d.log_tail(30));
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(show.stdout.contains("Type: cd/dvd"), "{show}");
    let url = format!("{}/{IQN}/1", d.portal_url());
    let read = qemuio::read_all(&url, dir.path(), "read.iso")
        .unwrap_or_else(|e| panic!("qemu-img read: {e}\n{}", d.log_tail(30)));
    assert!(read == image, "the disc read back differs from the image");
    // and the same file through numatgtd's own importer of targets.conf
    let cfg = config::targets_conf::import(&conf).unwrap_or_else(|e| panic!("import: {e}"));
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let l = &cfg.config.targets[0].luns[0];
    assert_eq!(
        (l.device_type, l.block_size),
        (config::DeviceType::Cd, 2048)
    );
}

#[test]
fn libiscsi_suites_that_apply_to_a_cd_drive_pass() {
    require_numatgtd("cd");
    let dir = tempfile::tempdir().expect("tempdir");
    let iso = make_iso(dir.path());
    let mut d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_cd(&d, &iso);
    let url = format!("{}/{IQN}/1", d.portal_url());
    // the suites of SPC's commands, the reads and the medium: the rest of iscsi-test-cu
    // tests a disk's commands (writes, UNMAP, WRITE SAME, ...), which a DVD-ROM drive has
    // not. libiscsi skips its SBC-only tests on a cd ("Not SBC device"): Inquiry 2, Read10 3,
    // Read12 2 of them, and the whole of PreventAllow, NoMedia and Mandatory (left out)
    let results: Vec<_> = [
        "SCSI.Inquiry",
        "SCSI.TestUnitReady",
        "SCSI.ReadCapacity10",
        "SCSI.Read10",
        "SCSI.Read12",
        "SCSI.ReportSupportedOpcodes",
        "SCSI.StartStopUnit",
    ]
    .iter()
    .map(|s| {
        tests::testcu::run_suite_urls(
            &mut d,
            s,
            "iscsi-test-cu-cd",
            &[],
            std::slice::from_ref(&url),
        )
    })
    .collect();
    tests::testcu::assert_clean(&results, "numatgtd cd", "iscsi-test-cu-cd");
}

/// tgtadm's answer (exit status) and the LUN's `show` lines that change with the disc.
fn disc_admin(d: &Daemon, params: &str) -> (bool, String) {
    let r = update_lun1(d, params);
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    let lines: Vec<&str> = show
        .stdout
        .lines()
        .skip_while(|l| l.trim() != "LUN: 1")
        .filter(|l| l.contains("Online:") || l.contains("Backing store path:"))
        .take(2)
        .map(str::trim)
        .collect();
    (r.status.success(), lines.join(" | "))
}

#[test]
fn the_disc_changes_from_tgtadm_as_in_tgtd() {
    require_numatgtd("cd");
    let dir = tempfile::tempdir().expect("tempdir");
    let one = make_iso(dir.path());
    let two_dir = dir.path().join("two");
    std::fs::create_dir_all(&two_dir).expect("mkdir");
    std::fs::write(two_dir.join("big.bin"), vec![7u8; 900_000]).expect("write");
    let two = dir.path().join("two.iso");
    let (two_s, src_s) = (two.to_string_lossy(), two_dir.to_string_lossy());
    tools::run(
        30,
        "genisoimage",
        ["-quiet", "-V", "TWO", "-o", &two_s, &src_s],
    )
    .check("genisoimage");
    let image_two = std::fs::read(&two).expect("read");
    let path_two = format!("path={two_s}");

    // the same tgtadm commands to tgtd and numatgtd: the same answers and show lines
    let mut transcripts = Vec::new();
    for kind in [TargetKind::Tgtd, TargetKind::Numatgtd] {
        let d = Daemon::start_like_tgtd(kind, &[]);
        export_cd(&d, &one);
        let steps = [
            disc_admin(&d, &path_two), // refused: the disc is in
            disc_admin(&d, "online=0"),
            disc_admin(&d, "path="),
            disc_admin(&d, &path_two), // accepted: online again
        ];
        transcripts.push(steps);
    }
    assert_eq!(transcripts[0], transcripts[1], "tgtd, then numatgtd");
    let steps = &transcripts[1];
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        [false, true, false, true]
    );
    assert!(
        steps[3].1.contains("Online: Yes") && steps[3].1.contains("two.iso"),
        "{steps:?}"
    );

    // what an initiator sees in numatgtd: no disc while offline, then the new disc
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_cd(&d, &one);
    let mut s = ScsiSession::open_target(&d, "iqn.2026-11.org.numatgt:cd-a", IQN);
    assert_eq!(s.command(&[0x1E, 0, 0, 0, 1, 0], &[], 0).0, 0, "PREVENT");
    assert!(disc_admin(&d, "online=0").0);
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (2, (2, 0x3A, 0)),
        "no disc while offline"
    );
    assert!(disc_admin(&d, &path_two).0);
    // a new logical unit on the new disc: the unit attentions of the change, then it reads
    let mut ready = false;
    for _ in 0..4 {
        let (st, sense, _) = s.command(&[0; 6], &[], 0);
        if st == 0 {
            ready = true;
            break;
        }
        assert_eq!(
            (st, key_asc(&sense).0),
            (2, 6),
            "only unit attentions: {sense:02x?}"
        );
    }
    assert!(ready, "TEST UNIT READY never GOOD after the change");
    let sectors = (image_two.len() / 2048) as u32;
    let cap = s.command(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 8).2;
    assert_eq!(
        cap[..4],
        (sectors - 1).to_be_bytes(),
        "the new disc's capacity"
    );
    let pvd = s.command(&[0x28, 0, 0, 0, 0, 16, 0, 0, 1, 0], &[], 2048).2;
    assert!(
        pvd == image_two[16 * 2048..17 * 2048],
        "the new disc's volume descriptor"
    );
    let url = format!("{}/{IQN}/1", d.portal_url());
    let read = qemuio::read_all(&url, dir.path(), "two-read.iso").expect("read");
    assert!(read == image_two, "the new disc read back differs");
}

/// A live upgrade (`numatgtadm --upgrade`) carries the drive's state with the moved
/// session: it sees no unit attention, its PREVENT ALLOW MEDIUM REMOVAL holds (the disc
/// cannot be ejected), and an eject made after it allowed removal is carried too (the disc
/// is still out after a second upgrade).
#[test]
fn a_cd_drive_goes_on_with_its_state_across_a_live_upgrade() {
    require_numatgtd("cd");
    let dir = tempfile::tempdir().expect("tempdir");
    let disc = dir.path().join("disc.img");
    tests::daemon::create_sparse(&disc, 4 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_cd(&d, &disc);
    let mut s = ScsiSession::open_target(&d, "iqn.2026-11.org.numatgt:cd-a", IQN);
    const PREVENT: [u8; 6] = [0x1E, 0, 0, 0, 1, 0];
    const ALLOW: [u8; 6] = [0x1E, 0, 0, 0, 0, 0];
    const EJECT: [u8; 6] = [0x1B, 0, 0, 0, 0x02, 0];
    let (st, sense, _) = s.command(&PREVENT, &[], 0);
    assert_eq!(st, 0, "PREVENT: {:?}", key_asc(&sense));
    let upgrade = || tests::mgmt::upgrade_moving(&d, 1);
    upgrade();
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (0, (0, 0, 0)),
        "TEST UNIT READY after the upgrade: no unit attention, the disc is in"
    );
    let (st, sense, _) = s.command(&EJECT, &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (2, (5, 0x53, 0x02)),
        "the prevention holds: MEDIUM REMOVAL PREVENTED"
    );
    assert_eq!(s.command(&ALLOW, &[], 0).0, 0, "ALLOW");
    assert_eq!(s.command(&EJECT, &[], 0).0, 0, "EJECT");
    upgrade();
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (2, (2, 0x3A, 0x00)),
        "the disc is still out: MEDIUM NOT PRESENT"
    );
}
