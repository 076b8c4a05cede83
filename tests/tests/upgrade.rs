//! Live upgrade (issue 29): `numatgtadm --upgrade` hands a numatgtd started as tgtd, its
//! target made with Debian's tgtadm, over to a new numatgtd executable in the same process:
//! the old one lets its sessions' TCP connections go quiet and moves them out, writes its
//! dirty cache back and executes the new one, which goes on with the same connections (the
//! same StatSN and CmdSN, no login) and serves the same targets on the same (passed-on)
//! portal, management socket and metrics port, and reads back what was written before. A binary that cannot take over leaves the
//! running daemon serving, and the admin is told why.

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::mgmt::{export_lun1, numatgtadm_bin};
use tests::pdu::ScsiSession;

const IQN: &str = "iqn.2026-11.org.numatgt:upgrade";
const INITIATOR: &str = "iqn.2026-11.org.numatgt:upgrade-host";

fn write_block(s: &mut ScsiSession, lba: u32, fill: u8) {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2A;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[8] = 1;
    let (st, sense, _) = s.command(&cdb, &[fill; 512], 0);
    assert_eq!(st, 0, "WRITE(10): {sense:02x?}");
}

fn read_block(s: &mut ScsiSession, lba: u32) -> Vec<u8> {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[8] = 1;
    let (st, sense, data) = s.command(&cdb, &[], 512);
    assert_eq!(st, 0, "READ(10): {sense:02x?}");
    data
}

/// Cache block `b` (64 KiB: 128 LBAs of 512 bytes) written whole with `fill`.
fn write_cache_block(s: &mut ScsiSession, b: u32, fill: u8) {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2A;
    cdb[2..6].copy_from_slice(&(b * 128).to_be_bytes());
    cdb[7..9].copy_from_slice(&128u16.to_be_bytes());
    let (st, sense, _) = s.command(&cdb, &vec![fill; 64 << 10], 0);
    assert_eq!(st, 0, "WRITE(10): {sense:02x?}");
}

/// Cache block `b` read whole.
fn read_cache_block(s: &mut ScsiSession, b: u32) -> Vec<u8> {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[2..6].copy_from_slice(&(b * 128).to_be_bytes());
    cdb[7..9].copy_from_slice(&128u16.to_be_bytes());
    let (st, sense, data) = s.command(&cdb, &[], 64 << 10);
    assert_eq!(st, 0, "READ(10): {sense:02x?}");
    data
}

/// numatgtd started as tgtd, a 16 MiB file LUN exported with Debian's tgtadm.
fn serving() -> (tempfile::TempDir, std::path::PathBuf, Daemon) {
    require_numatgtd("upgrade");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun = dir.path().join("lun1.img");
    tests::daemon::create_sparse(&lun, 16 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_lun1(&d, IQN, &lun, &[]);
    (dir, lun, d)
}

/// An executable shell script `name` in `dir`.
fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).expect("script");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    p
}

fn upgrade(d: &Daemon, extra: &[&str]) -> tests::tools::ToolRun {
    d.admin_tool(&numatgtadm_bin(), &[&["--upgrade"][..], extra].concat())
}

#[test]
fn upgrade_hands_the_daemon_over_and_the_data_and_targets_stay() {
    let (_dir, lun, d) = serving();
    let old = d.pid();
    // written into the cache (write cache on): the old daemon writes it back at handover
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    write_block(&mut s, 7, 0xA7);
    // a persistent reservation without APTPL: it would not survive a restart
    assert_eq!(
        s.persistent_reserve_out(0, 0, 0, 0x77, false),
        0,
        "REGISTER"
    );
    assert_eq!(s.persistent_reserve_out(1, 1, 0x77, 0, false), 0, "RESERVE");

    // the session's TCP connection moves to the new executable with it
    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    let line = r.stdout.trim();
    // the same process (systemd's main PID stays), running the new executable
    assert!(
        line.starts_with(&format!("upgraded: numatgtd pid {old} (")),
        "{line}"
    );
    assert!(
        line.contains("1 connections moved, 0 asked to log out"),
        "{line}"
    );
    assert!(line.contains("not serving for "), "{line}");
    assert_eq!(d.pid(), old);
    // the logical unit went on with its state: no unit attention, the data
    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(st, 0, "TEST UNIT READY after the move: {sense:02x?}");
    assert_eq!(read_block(&mut s, 7), vec![0xA7; 512], "the moved session");
    // the reservation went on: another initiator's write conflicts, the holder's does not
    let mut other = ScsiSession::open_target(&d, "iqn.2026-11.org.numatgt:other-host", IQN);
    other.lun = 1;
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2A;
    cdb[8] = 1;
    assert_eq!(
        other.command(&cdb, &[0; 512], 0).0,
        0x18,
        "RESERVATION CONFLICT"
    );
    write_block(&mut s, 9, 0x99);
    assert_eq!(s.persistent_reserve_out(2, 1, 0x77, 0, false), 0, "RELEASE");
    assert_eq!(other.command(&cdb, &[0; 512], 0).0, 0, "released");
    drop((s, other));

    // the same target, LUN and data, on the same portal and management socket
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(show.status.success(), "{show}");
    assert!(show.stdout.contains(IQN), "{}", show.stdout);
    assert!(
        show.stdout
            .contains(&format!("Backing store path: {}", lun.display())),
        "{}",
        show.stdout
    );
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(
        read_block(&mut s, 7),
        vec![0xA7; 512],
        "written before the upgrade"
    );
    write_block(&mut s, 8, 0xB8);
    assert_eq!(read_block(&mut s, 8), vec![0xB8; 512]);
    // the metrics listener was passed on too: the new process answers on it
    let (code, body) = d.http_get("/metrics").expect("metrics after the upgrade");
    assert_eq!(code, 200);
    assert!(
        body.contains("process_start_time_seconds"),
        "{}",
        &body[..body.len().min(400)]
    );
    // the upgrade's figures
    assert_eq!(d.metric("numatgt_upgrades_total", ""), 1.0);
    assert_eq!(
        d.metric("numatgt_upgrade_last_connections", "outcome=\"moved\""),
        1.0
    );
    assert_eq!(
        d.metric("numatgt_upgrade_last_connections", "outcome=\"asked\""),
        0.0
    );
    assert!(d.metric("numatgt_upgrade_last_seconds", "phase=\"paused\"") > 0.0);
    let log = d.log();
    assert!(
        log.contains("listening socket taken over from the previous numatgtd"),
        "{}",
        d.log_tail(40)
    );

    // and again: the new executable hands over as the old one did
    drop(s);
    let r = upgrade(&d, &[]);
    assert!(
        r.status.success(),
        "second upgrade: {r}\n{}",
        d.log_tail(40)
    );
    assert!(
        r.stdout
            .starts_with(&format!("upgraded: numatgtd pid {old} (")),
        "{r}"
    );
    assert_eq!(d.metric("numatgt_upgrades_total", ""), 2.0, "carried on");
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(read_block(&mut s, 8), vec![0xB8; 512]);
    assert_eq!(
        d.log()
            .matches("handover: taking over from the previous numatgtd")
            .count(),
        2,
        "{}",
        d.log_tail(40)
    );
}

#[test]
fn a_binary_that_cannot_take_over_leaves_the_daemon_serving() {
    let (dir, lun, d) = serving();
    let old = d.pid();
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    write_block(&mut s, 3, 0x33);

    // exits at once; then a file that is no executable at all
    let exits = script(dir.path(), "not-numatgtd", "exit 3\n");
    for (binary, says) in [
        (exits.display().to_string(), "exit status: 3"),
        (lun.display().to_string(), "cannot start"),
    ] {
        let r = upgrade(&d, &["--binary", &binary]);
        assert!(!r.status.success(), "{r}");
        assert!(
            r.stderr.contains(says) && r.stderr.contains("goes on serving"),
            "{binary}: {r}"
        );
        // the same process serves the same session
        assert_eq!(d.pid(), old);
        assert_eq!(read_block(&mut s, 3), vec![0x33; 512], "{binary}");
        write_block(&mut s, 4, 0x44);
        let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
        assert!(show.status.success() && show.stdout.contains(IQN), "{show}");
    }
}

#[test]
fn a_new_executable_that_vanishes_before_the_takeover_gives_way_to_the_old_one() {
    let (dir, _lun, d) = serving();
    let old = d.pid();
    {
        let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
        s.lun = 1;
        write_block(&mut s, 5, 0x55);
    }
    // passes the check, then is gone when the daemon executes it: the daemon has stopped
    // by then, and starts its own executable again on the same sockets
    let vanishing = script(
        dir.path(),
        "vanishing-numatgtd",
        &format!(
            "rm -f -- \"$0\"\nexec {} \"$@\"\n",
            tests::daemon::numatgtd_bin().display()
        ),
    );
    let r = upgrade(&d, &["--binary", &vanishing.display().to_string()]);
    assert!(!r.status.success(), "{r}");
    assert!(
        r.stderr.contains("starts again (same pid)"),
        "{r}\n{}",
        d.log_tail(30)
    );
    assert_eq!(d.pid(), old);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(read_block(&mut s, 5), vec![0x55; 512]);
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(show.status.success() && show.stdout.contains(IQN), "{show}");
    assert!(
        d.log().contains("mode=Resume"),
        "the old executable started again: {}",
        d.log_tail(30)
    );
}

/// A raw initiator that sends non-immediate commands (each takes a CmdSN) and checks every
/// answer's StatSN, ExpCmdSN and MaxCmdSN against its own count.
struct Counted {
    stream: std::net::TcpStream,
    cmd_sn: u32,
    exp_stat_sn: u32,
    itt: u32,
    /// Unsolicited NOP-Ins seen (the new executable's "window open" notice).
    nops: usize,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl Counted {
    fn open(d: &Daemon) -> Counted {
        let sess = tests::pdu::login_normal(d.addr(), INITIATOR, IQN)
            .unwrap_or_else(|e| panic!("login: {e}\n{}", d.log_tail(30)));
        let b = &sess.login_response.bhs;
        Counted {
            stream: sess.stream,
            cmd_sn: be32(&b[28..32]),
            exp_stat_sn: be32(&b[24..28]) + 1,
            itt: 0x100,
            nops: 0,
        }
    }

    /// (status, sense key, ASC, Data-In) of a non-immediate command to LUN 1.
    fn command(&mut self, cdb: &[u8], data_out: &[u8], read_len: u32) -> (u8, u8, u8, Vec<u8>) {
        use std::io::Write;
        use tests::pdu::{ReadOutcome, read_pdu};
        self.itt += 1;
        let edtl = if data_out.is_empty() {
            read_len
        } else {
            data_out.len() as u32
        };
        let mut bhs = [0u8; 48];
        bhs[0] = 0x01;
        bhs[1] = 0x80
            | 0x01
            | if read_len > 0 { 0x40 } else { 0 }
            | if data_out.is_empty() { 0 } else { 0x20 };
        bhs[5..8].copy_from_slice(&(data_out.len() as u32).to_be_bytes()[1..]);
        bhs[9] = 1;
        bhs[16..20].copy_from_slice(&self.itt.to_be_bytes());
        bhs[20..24].copy_from_slice(&edtl.to_be_bytes());
        bhs[24..28].copy_from_slice(&self.cmd_sn.to_be_bytes());
        bhs[28..32].copy_from_slice(&self.exp_stat_sn.to_be_bytes());
        bhs[32..32 + cdb.len()].copy_from_slice(cdb);
        let mut pdu = bhs.to_vec();
        pdu.extend_from_slice(data_out);
        while pdu.len() % 4 != 0 {
            pdu.push(0);
        }
        self.stream.write_all(&pdu).expect("send command");
        self.cmd_sn += 1;
        let mut data = Vec::new();
        loop {
            let p = match read_pdu(&mut self.stream, std::time::Duration::from_secs(20)) {
                ReadOutcome::Pdu(p) => p,
                other => panic!("no answer to CmdSN {}: {other:?}", self.cmd_sn - 1),
            };
            let (stat_sn, exp, max) = (
                be32(&p.bhs[24..28]),
                be32(&p.bhs[28..32]),
                be32(&p.bhs[32..36]),
            );
            let status_bearing = p.opcode() == 0x21 || (p.opcode() == 0x25 && p.flags() & 1 != 0);
            match p.opcode() {
                0x20 => {
                    // a NOP-In that wants no answer: StatSN is the next one, not advanced
                    assert_eq!(be32(&p.bhs[16..20]), 0xffff_ffff, "NOP-In ITT");
                    assert_eq!(stat_sn, self.exp_stat_sn, "NOP-In StatSN");
                    self.nops += 1;
                    continue;
                }
                0x25 if !status_bearing => {
                    data.extend_from_slice(&p.data);
                    continue;
                }
                0x21 | 0x25 => {}
                op => panic!("unexpected PDU {op:#x}"),
            }
            assert_eq!(stat_sn, self.exp_stat_sn, "StatSN continuity");
            assert_eq!(exp, self.cmd_sn, "ExpCmdSN");
            assert!(
                max.wrapping_sub(exp.wrapping_sub(1)) < 0x8000_0000,
                "MaxCmdSN {max} below ExpCmdSN {exp} - 1"
            );
            self.exp_stat_sn = stat_sn + 1;
            if p.opcode() == 0x25 {
                data.extend_from_slice(&p.data);
                return (p.bhs[3], 0, 0, data);
            }
            let sense = p.data.get(2..).unwrap_or_default();
            let key = sense.get(2).map_or(0, |k| k & 0xf);
            let asc = sense.get(12).copied().unwrap_or(0);
            return (p.bhs[3], key, asc, data);
        }
    }

    fn write(&mut self, lba: u32, fill: u8) -> (u8, u8, u8) {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2A;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[8] = 1;
        let (st, k, a, _) = self.command(&cdb, &[fill; 512], 0);
        (st, k, a)
    }

    fn read(&mut self, lba: u32) -> (u8, u8, u8, Vec<u8>) {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[8] = 1;
        self.command(&cdb, &[], 512)
    }
}

/// Commands run on one connection while it is upgraded under them, twice: every one is
/// answered GOOD, in order, with StatSN and CmdSN going on across the handovers (no login,
/// no lost or repeated number, no unit attention: the logical unit went on with its
/// state), and what was written reads back.
#[test]
fn a_session_goes_on_across_upgrades_with_its_numbers() {
    let (_dir, _lun, d) = serving();
    let old = d.pid();
    let mut c = Counted::open(&d);
    // the login's power-on unit attention
    assert_eq!(c.command(&[0; 6], &[], 0).1, 6);
    assert_eq!(c.command(&[0; 6], &[], 0).0, 0);
    let mut attentions = 0;
    let mut written = Vec::new();
    let mut lba = 0u32;
    let mut io = |c: &mut Counted, attentions: &mut usize, written: &mut Vec<(u32, u8)>| {
        lba += 1;
        let fill = (lba % 251) as u8 + 1;
        loop {
            match c.write(lba % 4096, fill) {
                (0, _, _) => break,
                (2, 6, 0x29) => *attentions += 1,
                other => panic!("WRITE of LBA {lba}: {other:?}\n{}", d.log_tail(30)),
            }
        }
        written.push((lba % 4096, fill));
    };
    for round in 0..2 {
        let r = std::thread::scope(|sc| {
            let admin = sc.spawn(|| upgrade(&d, &[]));
            // commands one after another all through the handover
            while !admin.is_finished() {
                io(&mut c, &mut attentions, &mut written);
            }
            admin.join().expect("numatgtadm")
        });
        assert!(r.status.success(), "round {round}: {r}\n{}", d.log_tail(40));
        assert!(r.stdout.contains("1 connections moved"), "{r}");
        for _ in 0..20 {
            io(&mut c, &mut attentions, &mut written);
        }
        assert_eq!(d.pid(), old);
    }
    assert_eq!(
        attentions, 0,
        "no unit attention: the logical unit's state went on"
    );
    assert!(c.nops >= 2, "each new executable announced its window");
    for (lba, fill) in written.iter().rev().take(64) {
        let (st, _, _, data) = c.read(*lba);
        assert_eq!(st, 0);
        // a later write of the same LBA wins
        let last = written
            .iter()
            .rev()
            .find(|(l, _)| l == lba)
            .map(|(_, f)| *f);
        assert_eq!(Some(data[0]), last, "LBA {lba} (written {fill})");
    }
    assert_eq!(
        d.log()
            .matches("session moved from the previous numatgtd")
            .count(),
        2,
        "{}",
        d.log_tail(40)
    );
    assert_eq!(
        d.log().matches("login complete").count(),
        1,
        "no login after the first"
    );
}

/// The block at `lba` of the backing file, read straight from the file.
fn on_disk(lun: &std::path::Path, lba: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(lun).expect("open the backing file");
    f.seek(SeekFrom::Start(lba * 512)).expect("seek");
    let mut b = vec![0u8; 512];
    f.read_exact(&mut b).expect("read");
    b
}

/// Data written into the cache before an upgrade, data written with FUA and data made
/// stable with SYNCHRONIZE CACHE, before and after the handover, are in the backing file
/// when the new process is killed with SIGKILL right after the handover: nothing the
/// initiator was told is stable is lost, and the cached writes were written back by the
/// old executable before it handed over.
#[test]
fn nothing_acknowledged_is_lost_when_the_new_process_is_killed() {
    let (_dir, lun, mut d) = serving();
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    let write = |s: &mut ScsiSession, lba: u32, fill: u8, fua: bool| {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2A;
        cdb[1] = if fua { 0x08 } else { 0 };
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[8] = 1;
        let (st, sense, _) = s.command(&cdb, &[fill; 512], 0);
        assert_eq!(st, 0, "WRITE(10) of LBA {lba}: {sense:02x?}");
    };
    let sync = |s: &mut ScsiSession| {
        let (st, sense, _) = s.command(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 0);
        assert_eq!(st, 0, "SYNCHRONIZE CACHE(10): {sense:02x?}");
    };
    write(&mut s, 10, 0x10, false); // cached only
    write(&mut s, 11, 0x11, true); // FUA
    write(&mut s, 12, 0x12, false);
    sync(&mut s); // 10 and 12 stable too
    write(&mut s, 13, 0x13, false); // cached only: the handover writes it back

    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    assert!(r.stdout.contains("1 connections moved"), "{r}");
    for (lba, fill) in [(10, 0x10), (11, 0x11), (12, 0x12), (13, 0x13)] {
        assert_eq!(
            on_disk(&lun, lba),
            vec![fill; 512],
            "LBA {lba} on disk after the handover"
        );
    }
    // the moved session goes on in the new process: FUA and SYNCHRONIZE CACHE there
    write(&mut s, 20, 0x20, true);
    write(&mut s, 21, 0x21, false);
    sync(&mut s);
    d.kill9();
    for (lba, fill) in [
        (10, 0x10),
        (11, 0x11),
        (12, 0x12),
        (13, 0x13),
        (20, 0x20),
        (21, 0x21),
    ] {
        assert_eq!(
            on_disk(&lun, lba),
            vec![fill; 512],
            "LBA {lba} after SIGKILL"
        );
    }
}

/// The new executable starts with the old one's cache: the blocks it had cached (written
/// back first) are listed in the handover and loaded again in the background, so reads of
/// them after the upgrade are cache hits, not misses.
#[test]
fn the_cache_is_warm_after_an_upgrade() {
    let (_dir, _lun, d) = serving();
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    // 4 KiB at the start of 24 cache blocks (64 KiB each: LBA 128 apart)
    let lbas: Vec<u32> = (0..24).map(|i| i * 128 + 3).collect();
    for (i, &lba) in lbas.iter().enumerate() {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2A;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[8] = 8;
        let (st, sense, _) = s.command(&cdb, &[i as u8 + 1; 4096], 0);
        assert_eq!(st, 0, "WRITE(10): {sense:02x?}");
    }
    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    // where shared memory gets no huge pages (Debian's default shmem_enabled=never)
    // `cache.memory: auto` is private memory: the blocks are read back, as this test
    // checks; elsewhere the memory itself goes along (the test below)
    let auto_shared = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .is_ok_and(|t| !t.contains("[never]") && !t.contains("[deny]"));
    if auto_shared {
        assert_all_adopted(&d, &r, 24);
        return;
    }
    assert!(
        r.stdout
            .contains("24 cached blocks kept (0 in the memory passed on)"),
        "{r}"
    );
    d.wait_warm_start();
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"listed\""),
        24.0
    );
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"loaded\""),
        24.0,
        "{}",
        d.log_tail(20)
    );
    assert!(d.log().contains("cache warm-up done"), "{}", d.log_tail(20));
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"adopted\""),
        0.0,
        "private memory: read back, not adopted"
    );
    let misses = d.metric("numatgt_cache_misses_total", "");
    let hits = d.metric("numatgt_cache_hits_total", "");
    for (i, &lba) in lbas.iter().enumerate() {
        // the whole block was loaded: the 4 KiB before the written ones hit too
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&(lba - 3).to_be_bytes());
        cdb[8] = 11;
        let (st, sense, data) = s.command(&cdb, &[], 11 * 512);
        assert_eq!(st, 0, "READ(10): {sense:02x?}");
        assert_eq!(data[3 * 512..], vec![i as u8 + 1; 4096][..], "LBA {lba}");
    }
    assert_eq!(
        d.metric("numatgt_cache_misses_total", ""),
        misses,
        "no miss"
    );
    assert_eq!(d.metric("numatgt_cache_hits_total", ""), hits + 24.0);
}

/// The upgrade `r` passed `n` cached blocks on in the cache's memory, and the new process
/// cached every one of them again where it is (none read back).
fn assert_all_adopted(d: &Daemon, r: &tests::tools::ToolRun, n: u32) {
    assert!(
        r.stdout.contains(&format!(
            "{n} cached blocks kept ({n} in the memory passed on)"
        )),
        "{r}"
    );
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"adopted\""),
        f64::from(n),
        "every kept block cached again where it is\n{}",
        d.log_tail(30)
    );
}

/// numatgtd with a 16 MiB LUN 1 and `cache.memory: shared` (this host's shared memory may
/// get no huge pages, where `auto` would choose private memory).
fn with_shared_cache_memory(test: &str) -> Daemon {
    require_numatgtd(test);
    Daemon::start_kind_with(
        TargetKind::Numatgtd,
        &[tests::daemon::LunSpec::new(1, 512, 16 << 20)],
        "cache:\n  memory: shared\n",
    )
}

/// `cache.memory: shared`: the cache's memory files go to the new executable with the
/// places of the blocks in them, and it caches the whole blocks again without reading the
/// backing store (adopted, not loaded). To tell where the bytes after the upgrade come
/// from, the test changes the backing file behind the daemon's back (no admin should):
/// the reads still return what was cached, and count as hits.
#[test]
fn the_cache_memory_itself_goes_to_the_new_executable() {
    use std::os::unix::fs::FileExt;
    let d = with_shared_cache_memory("the_cache_memory_itself_goes_to_the_new_executable");
    assert!(
        d.log().contains("memory=\"shared\"") || d.log().contains("memory=shared"),
        "{}",
        d.log_tail(30)
    );
    let mut s = ScsiSession::open(&d, INITIATOR);
    // 20 whole cache blocks (64 KiB: 128 LBAs each) written, 4 more read whole, and 4 KiB
    // written at the start of 4 more (cached in part)
    for b in 24..28u32 {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2A;
        cdb[2..6].copy_from_slice(&(b * 128).to_be_bytes());
        cdb[8] = 8;
        let (st, sense, _) = s.command(&cdb, &[b as u8 + 0x60; 4096], 0);
        assert_eq!(st, 0, "WRITE(10): {sense:02x?}");
    }
    for b in 0..24u32 {
        if b < 20 {
            write_cache_block(&mut s, b, b as u8 + 0x60);
        } else {
            read_cache_block(&mut s, b);
        }
    }
    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    assert!(
        r.stdout
            .contains("28 cached blocks kept (28 in the memory passed on)"),
        "{r}"
    );
    assert!(r.stdout.contains("1 connections moved"), "{r}");
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"adopted\""),
        28.0,
        "{}",
        d.log_tail(30)
    );
    assert!(
        d.log()
            .contains("cache memory kept: blocks cached again without a read"),
        "{}",
        d.log_tail(30)
    );
    d.wait_warm_start();
    assert_eq!(
        d.metric("numatgt_cache_warm_blocks", "state=\"loaded\""),
        0.0,
        "nothing read back"
    );
    // the file changes underneath; the kept blocks are what the cache serves
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.lun_path(1))
        .expect("open the backing file");
    for b in 0..28u64 {
        f.write_all_at(&vec![0xEE; 64 << 10], b * (64 << 10))
            .expect("write behind the daemon");
    }
    f.sync_all().expect("sync");
    let misses = d.metric("numatgt_cache_misses_total", "");
    let hits = d.metric("numatgt_cache_hits_total", "");
    for b in 0..24u32 {
        let data = read_cache_block(&mut s, b);
        let want = if b < 20 { b as u8 + 0x60 } else { 0 };
        assert!(
            data.iter().all(|&x| x == want),
            "block {b}: the kept copy, not the file's 0xEE (first byte {:#x})",
            data[0]
        );
    }
    // the blocks cached in part: their valid sectors from the kept memory (hits), the
    // rest from the file (the miss reads what the file holds now)
    for b in 24..28u32 {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&(b * 128).to_be_bytes());
        cdb[8] = 8;
        let (st, sense, data) = s.command(&cdb, &[], 4096);
        assert_eq!(st, 0, "READ(10): {sense:02x?}");
        assert!(
            data.iter().all(|&x| x == b as u8 + 0x60),
            "block {b}'s kept sectors"
        );
    }
    assert_eq!(
        d.metric("numatgt_cache_misses_total", ""),
        misses,
        "no miss"
    );
    assert_eq!(d.metric("numatgt_cache_hits_total", ""), hits + 28.0);
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[2..6].copy_from_slice(&(24 * 128 + 8u32).to_be_bytes());
    cdb[8] = 8;
    let (st, sense, data) = s.command(&cdb, &[], 4096);
    assert_eq!(st, 0, "READ(10): {sense:02x?}");
    assert!(
        data.iter().all(|&x| x == 0xEE),
        "the sectors block 24 did not have cached come from the file"
    );
}

/// A portal added with tgtadm at run time goes to the new executable as such: its listening
/// socket is passed on (a connection made during the swap waits in its backlog: none is
/// refused), the new process serves it, and tgtadm can still delete it.
#[test]
fn a_portal_added_at_run_time_stays_open_and_deletable_across_an_upgrade() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let (_dir, _lun, d) = serving();
    let port = tests::daemon::free_port();
    let portal = format!("portal=127.0.0.1:{port}");
    d.tgtadm(&["--op", "new", "--mode", "portal", "--param", &portal])
        .check("portal new");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // connections to the added portal all through the upgrade (20 ms apart: the backlog
    // holds those made while nobody accepts)
    let stop = Arc::new(AtomicBool::new(false));
    let probing = Arc::clone(&stop);
    let prober = std::thread::spawn(move || {
        let (mut made, mut failed) = (0u32, Vec::new());
        let t0 = Instant::now();
        while !probing.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(120) {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                Ok(_) => made += 1,
                Err(e) => failed.push(format!("{:.3}s: {e}", t0.elapsed().as_secs_f64())),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (made, failed)
    });
    std::thread::sleep(Duration::from_millis(200));
    let up = upgrade(&d, &[]);
    up.check("upgrade");
    assert!(up.stdout.contains("upgraded: numatgtd pid"), "{up}");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (made, failed) = prober.join().expect("prober");
    assert!(
        failed.is_empty(),
        "connections to the added portal failed during the upgrade: {failed:?}\n{}",
        d.log_tail(40)
    );
    assert!(made >= 10, "only {made} connections made");
    assert!(
        d.log().contains(&format!(
            "portal 127.0.0.1:{port}: listening socket (added at run time) taken over"
        )),
        "{}",
        d.log_tail(40)
    );
    // the new process serves the portal: an initiator logs in through it
    let url = format!("iscsi://127.0.0.1:{port}/{IQN}/1");
    tests::tools::run(20, "iscsi-inq", [&url]).check("inquiry through the added portal");
    let shown = d.tgtadm(&["--op", "show", "--mode", "portal"]);
    assert!(
        shown.stdout.contains(&format!("127.0.0.1:{port},1")),
        "{shown}"
    );
    // and it is still a portal added at run time: tgtadm deletes it
    d.tgtadm(&["--op", "delete", "--mode", "portal", "--param", &portal])
        .check("portal delete after the upgrade");
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "the deleted portal still accepts"
    );
}

/// A LUN keeps its cache identity across an upgrade, so its blocks in the memory passed on
/// are cached again where they are even when the new process would number its LUNs
/// otherwise: LUN 1 (identity 0) deleted and LUN 2 (identity 1) added with tgtadm, which a
/// fresh start would give identity 0.
#[test]
fn a_lun_keeps_its_cache_identity_so_its_kept_memory_is_adopted() {
    let d =
        with_shared_cache_memory("a_lun_keeps_its_cache_identity_so_its_kept_memory_is_adopted");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun2 = dir.path().join("lun2.img");
    tests::daemon::create_sparse(&lun2, 16 << 20);
    tests::mgmt::new_lun(&d, "1", "2", &lun2, &[]).check("tgtadm new LUN 2");
    tests::mgmt::delete_lun(&d, "1", "1").check("tgtadm delete LUN 1");
    let mut s = ScsiSession::open(&d, INITIATOR);
    s.lun = 2;
    for _ in 0..3 {
        if s.command(&[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
    for b in 0..24u32 {
        write_cache_block(&mut s, b, b as u8 + 0x30);
    }
    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    assert_all_adopted(&d, &r, 24);
    for b in 0..24u32 {
        let data = read_cache_block(&mut s, b);
        assert!(data.iter().all(|&x| x == b as u8 + 0x30), "block {b}");
    }
}
