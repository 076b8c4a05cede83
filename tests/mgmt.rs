//! Helpers for the management-socket tests (`tests/tgtadm.rs`, `tests/mgmt_runtime.rs`):
//! tgtadm transcripts and their normalisation, raw management requests, and raw SCSI
//! commands on an iSCSI session to watch run-time changes from a live session.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::pdu::{self, Bhs, ReadOutcome};
use crate::{Daemon, tools};

pub const IQN1: &str = "iqn.2026-11.org.numatgt:mgmt1";

pub const IQN2: &str = "iqn.2026-11.org.numatgt:mgmt2";

/// One step's transcript: command, exit code, stdout, stderr.
pub fn step(d: &Daemon, args: &[&str]) -> String {
    step_with(d, "tgtadm", args)
}

/// [`step`] with another tgtadm-compatible program (numatgtadm).
pub fn step_with(d: &Daemon, prog: &str, args: &[&str]) -> String {
    let r = d.admin_tool(prog, args);
    assert!(!r.timed_out(), "tgtadm timed out: {r}");
    format!(
        "$ tgtadm {}\n[exit {:?}]\n{}{}",
        args.join(" "),
        r.status.code(),
        r.stdout,
        r.stderr
    )
}

/// The ports differ between the two daemons; session ids are each daemon's own.
pub fn normalise(text: &str, d: &Daemon) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let l = line.replace(&format!(":{}", d.port), ":PORT");
        let l = match l.split_once("I_T nexus: ") {
            Some((a, _)) => format!("{a}I_T nexus: SID"),
            None => l,
        };
        let l = match l.strip_prefix("Session: ") {
            Some(_) => "Session: SID".to_string(),
            None => l,
        };
        out.push_str(&l);
        out.push('\n');
    }
    out
}

pub fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            let from = i.saturating_sub(8);
            let ctx: Vec<&str> = a.lines().skip(from).take(i - from).collect();
            return format!(
                "line {}: numatgtd {x:?} vs tgtd {y:?}\ncontext:\n{}",
                i + 1,
                ctx.join("\n")
            );
        }
    }
    format!(
        "lengths differ: numatgtd {} lines, tgtd {} lines",
        a.lines().count(),
        b.lines().count()
    )
}

/// REPORT LUNS on a raw session: the LUN numbers (peripheral addressing).
pub fn report_luns(s: &mut std::net::TcpStream, itt: u32, cmd_sn: u32) -> Vec<u64> {
    let mut bhs = Bhs::new(0x01, false)
        .flags(0xC1)
        .itt(itt)
        .set_u32(20, 4096)
        .set_u32(24, cmd_sn)
        .set_u32(28, 0);
    bhs.0[32] = 0xA0;
    bhs.0[38..42].copy_from_slice(&4096u32.to_be_bytes());
    s.write_all(bhs.bytes()).expect("send REPORT LUNS");
    let mut data = Vec::new();
    for _ in 0..8 {
        match pdu::read_pdu(s, Duration::from_secs(5)) {
            ReadOutcome::Pdu(p) => {
                if p.opcode() == 0x25 {
                    data.extend_from_slice(&p.data);
                    if p.flags() & 0x01 != 0 {
                        break;
                    }
                } else if p.opcode() == 0x21 {
                    break;
                }
            }
            other => panic!("no answer to REPORT LUNS: {other:?}"),
        }
    }
    assert!(data.len() >= 8, "short REPORT LUNS data {data:?}");
    let n = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize / 8;
    (0..n)
        .filter_map(|i| data.get(8 + i * 8..10 + i * 8))
        .map(|b| u64::from(u16::from_be_bytes([b[0] & 0x3f, b[1]])))
        .collect()
}

/// READ(10) past the end on a raw session: the sense response code of the CHECK CONDITION.
pub fn read_past_end_sense_code(s: &mut std::net::TcpStream, itt: u32, cmd_sn: u32) -> u8 {
    let mut bhs = Bhs::new(0x01, false)
        .flags(0xC1)
        .itt(itt)
        .set_u32(20, 512)
        .set_u32(24, cmd_sn)
        .set_u32(28, 0);
    bhs.0[8] = 0;
    bhs.0[9] = 1; // LUN 1
    bhs.0[32..42].copy_from_slice(&[0x28, 0, 0x7f, 0, 0, 0, 0, 0, 1, 0]);
    s.write_all(bhs.bytes()).expect("send READ(10)");
    for _ in 0..8 {
        match pdu::read_pdu(s, Duration::from_secs(5)) {
            ReadOutcome::Pdu(p) if p.opcode() == 0x21 => {
                assert_eq!(p.bhs[3], 0x02, "not CHECK CONDITION");
                return *p.data.get(2).expect("sense data");
            }
            ReadOutcome::Pdu(_) => continue,
            other => panic!("no response to READ(10): {other:?}"),
        }
    }
    panic!("no SCSI Response to READ(10)");
}

pub fn inq(d: &Daemon, iqn: &str, lun: u64) -> tools::ToolRun {
    tools::run(
        20,
        "iscsi-inq",
        [format!("iscsi://127.0.0.1:{}/{iqn}/{lun}", d.port)],
    )
}

/// A raw request: header fields as tgtadm lays them out, then the payload.
pub fn raw_request(mode: u32, op: u32, tid: i32, len: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 120];
    b[0..4].copy_from_slice(&mode.to_le_bytes());
    b[4..8].copy_from_slice(&op.to_le_bytes());
    b[72..76].copy_from_slice(&len.to_le_bytes());
    b[76..80].copy_from_slice(&tid.to_le_bytes());
    b[88..96].copy_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// Send `bytes`, read the answer (err, text) if any.
pub fn exchange(path: &Path, bytes: &[u8]) -> Option<(u32, String)> {
    let mut s = UnixStream::connect(path).expect("connect to the management socket");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    if out.len() < 8 {
        return None;
    }
    let err = u32::from_le_bytes([out[0], out[1], out[2], out[3]]);
    let text = &out[8..];
    if let Some(last) = text.last() {
        assert_eq!(*last, 0, "a text answer must end with its NUL, as tgtd's");
    }
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    Some((err, String::from_utf8_lossy(&text[..end]).into_owned()))
}

pub fn assert_serving(d: &mut Daemon, ctx: &str) {
    d.assert_alive(ctx);
    let r = d.tgtadm(&["--op", "show", "--mode", "sys"]);
    assert!(
        r.status.success() && r.stdout.starts_with("System:"),
        "{ctx}: {r}"
    );
}

pub fn numatgtadm_bin() -> String {
    let p = crate::daemon::numatgtd_bin().with_file_name("numatgtadm");
    assert!(
        p.is_file(),
        "numatgtadm not found at {} (build it: `cargo build -p tools`)",
        p.display()
    );
    p.display().to_string()
}

pub const INVALID_REQUEST: u32 = 17;

/// A data-in SCSI command on a raw session to LUN `lun`: the data, or None on CHECK CONDITION.
pub fn data_in(
    s: &mut std::net::TcpStream,
    itt: u32,
    cmd_sn: u32,
    lun: u8,
    cdb: &[u8],
    alloc: u32,
) -> Option<Vec<u8>> {
    let mut bhs = Bhs::new(0x01, false)
        .flags(0xC1)
        .itt(itt)
        .set_u32(20, alloc)
        .set_u32(24, cmd_sn)
        .set_u32(28, 0);
    bhs.0[9] = lun;
    bhs.0[32..32 + cdb.len()].copy_from_slice(cdb);
    s.write_all(bhs.bytes()).expect("send a SCSI command");
    let mut data = Vec::new();
    for _ in 0..16 {
        match pdu::read_pdu(s, Duration::from_secs(5)) {
            ReadOutcome::Pdu(p) if p.opcode() == 0x25 => {
                data.extend_from_slice(&p.data);
                if p.flags() & 0x01 != 0 {
                    return Some(data);
                }
            }
            ReadOutcome::Pdu(p) if p.opcode() == 0x21 => {
                return (p.bhs[3] == 0).then_some(data);
            }
            ReadOutcome::Pdu(_) => continue,
            other => panic!("no answer to the SCSI command: {other:?}"),
        }
    }
    panic!("no SCSI Response");
}

/// Stops `d` and starts numatgtd from `dump` (the YAML `numatgtadm --dump` wrote of `d`),
/// on a portal of its own.
pub fn restart_from_dump(d: Daemon, dump: &str) -> Daemon {
    let old = format!("127.0.0.1:{}", d.port);
    drop(d);
    Daemon::start_numatgtd_yaml(&|port| dump.replace(&old, &format!("127.0.0.1:{port}")))
}

/// Every LUN of `dump` (the YAML `numatgtadm --dump` wrote, read as numatgtd reads a
/// configuration) with the cache mode it is dumped with: (target, LUN, mode).
pub fn dumped_cache_modes(dump: &str) -> Vec<(String, u64, Option<config::CacheMode>)> {
    let c = config::parse(dump, "numatgtadm --dump")
        .unwrap_or_else(|e| panic!("the dump does not read back: {e}\n{dump}"));
    c.targets
        .iter()
        .flat_map(|t| t.luns.iter().map(|l| (t.iqn.clone(), l.lun, l.cache)))
        .collect()
}

/// Through tgtadm: target `tid` named `iqn` with `path` as LUN 1, open to every initiator
/// (`-I ALL`). Each step must succeed.
pub fn export_lun(d: &Daemon, tid: &str, iqn: &str, path: &str) {
    new_open_target(d, tid, iqn);
    new_lun(d, tid, "1", Path::new(path), &[]).check("export a LUN");
}

/// Through tgtadm: target `tid` named `iqn`, no LUN yet, open to every initiator
/// (`-I ALL`). Each step must succeed.
pub fn new_open_target(d: &Daemon, tid: &str, iqn: &str) {
    for s in [
        vec!["--op", "new", "--mode", "target", "--tid", tid, "-T", iqn],
        vec![
            "--op", "bind", "--mode", "target", "--tid", tid, "-I", "ALL",
        ],
    ] {
        d.tgtadm(&s).check("a target open to all");
    }
}

/// `tgtadm --op new --mode logicalunit --tid TID --lun LUN -b PATH EXTRA...`.
/// Debian's `tgtadm` with `args` against `d`, which must succeed (the daemon's log tail on
/// failure).
pub fn tgtadm_ok(d: &Daemon, args: &[&str]) {
    let r = d.tgtadm(args);
    assert!(
        r.status.success(),
        "tgtadm {args:?} failed\n{r}\n{}",
        d.log_tail(30)
    );
}

pub fn new_lun(d: &Daemon, tid: &str, lun: &str, path: &Path, extra: &[&str]) -> tools::ToolRun {
    let path = path.to_string_lossy();
    let base = [
        "--lld",
        "iscsi",
        "--op",
        "new",
        "--mode",
        "logicalunit",
        "--tid",
        tid,
    ];
    d.tgtadm(&[&base[..], &["--lun", lun, "-b", &path], extra].concat())
}

/// `numatgtadm --upgrade` of daemon `d` to the same executable, checked: it answered that
/// `moved` connections went on in the new process.
pub fn upgrade_moving(d: &Daemon, moved: usize) {
    let r = d.admin_tool(&numatgtadm_bin(), &["--upgrade"]);
    r.check("numatgtadm --upgrade");
    assert!(
        r.stdout.contains(&format!("{moved} connections moved")),
        "{r}"
    );
}

/// `tgtadm --op delete --mode logicalunit --tid TID --lun LUN`.
pub fn delete_lun(d: &Daemon, tid: &str, lun: &str) -> tools::ToolRun {
    d.tgtadm(&[
        "--lld",
        "iscsi",
        "--op",
        "delete",
        "--mode",
        "logicalunit",
        "--tid",
        tid,
        "--lun",
        lun,
    ])
}

/// `tgtadm --op update --mode logicalunit --tid 1 --lun 1 --params PARAMS`.
pub fn update_lun1(d: &Daemon, params: &str) -> tools::ToolRun {
    d.tgtadm(&[
        "--lld",
        "iscsi",
        "--op",
        "update",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "1",
        "--params",
        params,
    ])
}

/// Target 1 named `iqn` with LUN 1 on `path` (`extra`: more `--op new --mode logicalunit`
/// options, such as `--device-type`), open to every initiator: through tgtadm, as an
/// administrator of tgtd does it.
pub fn export_lun1(d: &Daemon, iqn: &str, path: &Path, extra: &[&str]) {
    tgtadm_ok(
        d,
        &[
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "1", "-T", iqn,
        ],
    );
    new_lun(d, "1", "1", path, extra).check(&format!("tgtadm new LUN 1 {extra:?}"));
    tgtadm_ok(
        d,
        &[
            "--lld", "iscsi", "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
    );
}

/// `numatgtadm --dump` of daemon `d` (numatgtadm beside the numatgtd under test), checked.
pub fn numatgtadm_dump(d: &Daemon) -> tools::ToolRun {
    let dump = d.admin_tool(&numatgtadm_bin(), &["--dump"]);
    dump.check("numatgtadm --dump");
    dump
}

/// `tgtimg --op show` of a tape image (Debian's tgt): what tgt reads in it.
pub fn tgtimg_show(tape: &Path) -> tools::ToolRun {
    let file = format!("--file={}", tape.display());
    let r = tools::run(
        30,
        "tgtimg",
        ["--op", "show", "--device-type", "tape", file.as_str()],
    );
    r.check("tgtimg --op show");
    r
}
