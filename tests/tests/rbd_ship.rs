//! I/O shipping between two numatgtd gateways of one RBD LUN (issue 26), on the project's
//! mini Ceph cluster. Both gateways are started like tgtd and set up with Debian's tgtadm
//! alone (ALUA group, peer, non-owners active/non-optimized, the LUN with `--bstype rbd`);
//! raw iSCSI sessions play the initiator. Checked:
//!
//! - media commands through the non-owner (B) are served by the owner (A) over the gateway
//!   link: WRITEs through B read back through A and B; a WRITE through A that sits in A's
//!   write-back cache reads back through B (B reads A's cache, not the image); COMPARE AND
//!   WRITE through B matches and miscompares as on A; no ownership move (the takeover
//!   counters stay 0 and A keeps reporting active/optimized), and the shipped and served
//!   counters and the shipped latency histogram count it;
//! - a REGISTER with ALL_TG_PT through A registers the initiator's nexus through B too;
//! - the link server refuses junk and a wrong token, and goes on;
//! - SYNCHRONIZE CACHE through B makes A's cached writes durable: A killed (SIGKILL) after
//!   it, B's link breaks, B takes the LUN over (the takeover of before) and reads every
//!   acknowledged block back from the image.

use std::time::{Duration, Instant};

use tests::cdb::{cdb10, sense_of};
use tests::ceph::Cluster;
use tests::daemon::require_numatgtd;
use tests::pdu::ScsiSession;
use tests::tools;

const WRITE10: u8 = 0x2a;
const READ10: u8 = 0x28;
const SYNC10: u8 = 0x35;
const CAW: u8 = 0x89;

/// A block's pattern: its LBA and a round number in every byte pair.
fn pattern(lba: u64, round: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * 512)
        .map(|i| {
            let b = lba + (i / 512) as u64;
            if i % 2 == 0 { b as u8 } else { round }
        })
        .collect()
}

/// WRITE(10) through `s`, retried while the path answers NOT READY / transitioning (the
/// link is being made) for up to 10 s: the status and sense of the last try.
fn write(s: &mut ScsiSession, lba: u64, data: &[u8]) -> (u8, Option<(u8, u8, u8)>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, sense, _) = s.command(&cdb10(WRITE10, lba, (data.len() / 512) as u16), data, 0);
        let sense = sense_of(&sense);
        if st == 0 || sense != Some((2, 4, 0x0a)) || Instant::now() > deadline {
            return (st, sense);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(s: &mut ScsiSession, lba: u64, blocks: u16) -> (u8, Vec<u8>) {
    let (st, _, data) = s.command(&cdb10(READ10, lba, blocks), &[], u32::from(blocks) * 512);
    (st, data)
}

/// Median latencies of `n` 4 KiB READs and `n` 4 KiB WRITEs (to LBAs 1024..) through `s`.
fn qd1_latencies(s: &mut ScsiSession, n: u64) -> (Duration, Duration) {
    let data = pattern(1024, 7, 8);
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for i in 0..n {
        let lba = 1024 + (i % 32) * 8;
        let t = Instant::now();
        assert_eq!(write(s, lba, &data).0, 0);
        writes.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(read(s, lba, 8).0, 0);
        reads.push(t.elapsed());
    }
    reads.sort();
    writes.sort();
    (reads[reads.len() / 2], writes[writes.len() / 2])
}

/// PERSISTENT RESERVE OUT `sa` (type `ty`, keys, parameter flags byte 20) through `s`.
fn prout(s: &mut ScsiSession, sa: u8, ty: u8, key: u64, sa_key: u64, flags: u8) -> u8 {
    let mut p = [0u8; 24];
    p[0..8].copy_from_slice(&key.to_be_bytes());
    p[8..16].copy_from_slice(&sa_key.to_be_bytes());
    p[20] = flags;
    s.command(&[0x5F, sa, ty, 0, 0, 0, 0, 0, 24, 0], &p, 0).0
}

fn caw(s: &mut ScsiSession, lba: u64, old: &[u8], new: &[u8]) -> (u8, Option<(u8, u8, u8)>) {
    let mut cdb = [0u8; 16];
    cdb[0] = CAW;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[13] = 1;
    let mut data = old.to_vec();
    data.extend_from_slice(new);
    let (st, sense, _) = s.command(&cdb, &data, 0);
    (st, sense_of(&sense))
}

#[test]
fn non_owner_paths_ship_io_to_the_owner() {
    require_numatgtd("non_owner_paths_ship_io_to_the_owner");
    tools::require_tool("tgtadm");
    let c = Cluster::start();
    c.create_image("shared", 64 << 20);
    let ano = "active-non-optimized";
    let mut a = c.gateway(1, 2, ano);
    let mut b = c.gateway(2, 1, ano);
    let mut sa = ScsiSession::open(&a, "iqn.2026-11.test:ship-a");
    let mut sb = ScsiSession::open(&b, "iqn.2026-11.test:ship-b");

    // writes through B land on A
    let t0 = Instant::now();
    let first = pattern(0, 1, 8);
    assert_eq!(
        write(&mut sb, 0, &first),
        (0, None),
        "first WRITE through B\n{}",
        b.log_tail(30)
    );
    eprintln!("first shipped WRITE answered after {:?}", t0.elapsed());
    for lba in (8..256).step_by(8) {
        assert_eq!(
            write(&mut sb, lba, &pattern(lba, 1, 8)),
            (0, None),
            "WRITE {lba} through B"
        );
    }
    let big = pattern(256, 2, 128);
    assert_eq!(
        write(&mut sb, 256, &big),
        (0, None),
        "64 KiB WRITE through B"
    );
    assert_eq!(read(&mut sa, 0, 8), (0, first.clone()), "A reads B's write");
    assert_eq!(read(&mut sb, 256, 128), (0, big), "B reads its 64 KiB back");

    // a write through the owner sits in its write-back cache: B reads it from there
    let cached = pattern(512, 3, 8);
    assert_eq!(write(&mut sa, 512, &cached), (0, None));
    assert_eq!(
        read(&mut sb, 512, 8),
        (0, cached.clone()),
        "B reads A's cached write"
    );

    // COMPARE AND WRITE through B: a match writes, a mismatch is MISCOMPARE
    let one = pattern(0, 1, 1);
    let two = pattern(0, 9, 1);
    assert_eq!(
        caw(&mut sb, 0, &one, &two),
        (0, None),
        "COMPARE AND WRITE through B"
    );
    assert_eq!(read(&mut sa, 0, 1), (0, two.clone()));
    let (st, sense) = caw(&mut sb, 0, &one, &two);
    assert_eq!(
        (st, sense.map(|s| s.0)),
        (2, Some(0x0e)),
        "MISCOMPARE through B"
    );

    // SYNCHRONIZE CACHE through B makes A's write-back cache durable
    let (st, sense, _) = sb.command(&cdb10(SYNC10, 0, 0), &[], 0);
    assert_eq!(
        (st, sense_of(&sense)),
        (0, None),
        "SYNCHRONIZE CACHE through B"
    );

    // active/non-optimized non-owners offer implicit ALUA only (INQUIRY TPGS 01b): Linux
    // sends no SET TARGET PORT GROUPS that would move the LUN under round-robin multipath
    let (st, _, inq) = sb.command(&[0x12, 0, 0, 0, 96, 0], &[], 96);
    assert_eq!((st, (inq[5] >> 4) & 3), (0, 1), "TPGS implicit only");

    // no ownership move, and the counters say what happened
    for d in [&a, &b] {
        assert_eq!(
            d.metric("numatgt_lun_alua_transitions_total", "kind=\"takeover\""),
            0.0,
            "no takeover"
        );
    }
    assert_eq!(
        a.metric(
            "numatgt_lun_alua_state",
            "lun=\"1\",state=\"active_optimized\""
        ),
        1.0,
        "A active/optimized"
    );
    let sent = b.metric("numatgt_lun_shipped_commands_total", "kind=\"sent\"");
    let served = a.metric("numatgt_lun_shipped_commands_total", "kind=\"served\"");
    eprintln!("shipped: sent {sent} by B, served {served} by A");
    assert!(sent >= 37.0, "B shipped its media commands ({sent})");
    assert_eq!(sent, served, "A served what B sent");
    assert_eq!(
        b.metric("numatgt_lun_shipped_commands_total", "kind=\"lost\""),
        0.0
    );
    assert_eq!(
        b.metric("numatgt_lun_shipped_command_duration_seconds_count", ""),
        sent,
        "every shipped command was timed"
    );
    assert!(b.log().contains("gateway link up"), "{}", b.log_tail(30));

    // ALL_TG_PT: Z registers through A for every target port, so its nexus through B is a
    // registrant too; under WRITE EXCLUSIVE - REGISTRANTS ONLY Z writes through B (shipped)
    // and the other initiator's WRITE through B conflicts
    let mut za = ScsiSession::open(&a, "iqn.2026-11.test:ship-z");
    let mut zb = ScsiSession::open(&b, "iqn.2026-11.test:ship-z");
    assert_eq!(
        prout(&mut za, 0, 0, 0, 0x2, 0x04),
        0,
        "REGISTER ALL_TG_PT through A"
    );
    assert_eq!(
        prout(&mut za, 1, 5, 0x2, 0, 0),
        0,
        "RESERVE WE_RO through A"
    );
    assert_eq!(
        write(&mut zb, 600, &pattern(600, 4, 8)),
        (0, None),
        "Z through B"
    );
    assert_eq!(
        write(&mut sb, 600, &pattern(600, 5, 8)).0,
        0x18,
        "B's other initiator"
    );
    assert_eq!(prout(&mut zb, 3, 0, 0x2, 0, 0), 0, "CLEAR through B");
    assert_eq!(
        write(&mut sb, 600, &pattern(600, 5, 8)),
        (0, None),
        "cleared"
    );

    // a shipped command against a direct one (QD1, 4 KiB, served from A's cache either way)
    for (who, s) in [("direct (A)", &mut sa), ("shipped (B)", &mut sb)] {
        let (r, w) = qd1_latencies(s, 200);
        eprintln!("{who}: 4 KiB READ p50 {r:?}, 4 KiB WRITE p50 {w:?} (200 each, QD1)");
    }

    // the link server refuses what is not a gateway with this daemon's token, and goes on
    let link = a
        .log()
        .lines()
        .find_map(|l| {
            let at = l.find("gateway link server listening addr=")?;
            let rest = &l[at + "gateway link server listening addr=".len()..];
            rest.split_whitespace()
                .next()?
                .parse::<std::net::SocketAddr>()
                .ok()
        })
        .expect("A logged its link server's address");
    let mut wrong_token = vec![0, 0, 0, 22, 1];
    wrong_token.extend_from_slice(b"NTGS\x01");
    wrong_token.extend_from_slice(&[0xee; 16]);
    let huge = [0xff, 0xff, 0xff, 0xff, 3];
    for junk in [&b"GET / HTTP/1.0\r\n\r\n"[..], &wrong_token, &huge] {
        let mut c = std::net::TcpStream::connect(link).expect("connect to A's link server");
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        use std::io::{Read, Write};
        let _ = c.write_all(junk);
        let mut buf = [0u8; 64];
        assert!(
            matches!(c.read(&mut buf), Ok(0) | Err(_)),
            "A closes a link that sent {junk:02x?}"
        );
    }
    assert!(
        a.log().matches("gateway link refused").count() >= 3,
        "{}",
        a.log_tail(10)
    );
    a.assert_alive("after junk on the link server");
    assert_eq!(
        read(&mut sb, 512, 8),
        (0, cached.clone()),
        "the real link still ships"
    );

    // A dies: B's link breaks, B takes the LUN over and every acknowledged block is there
    a.kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let (st, data) = read(&mut sb, 0, 8);
        if st == 0 || Instant::now() > deadline {
            break (st, data);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut want = first;
    want[..512].copy_from_slice(&two);
    assert_eq!(
        got,
        (0, want),
        "B serves the LUN after A died\n{}",
        b.log_tail(40)
    );
    assert_eq!(
        read(&mut sb, 512, 8),
        (0, cached),
        "A's synchronized write survived A"
    );
    assert!(b.metric("numatgt_lun_alua_transitions_total", "kind=\"takeover\"") >= 1.0);
    assert!(
        b.metric("numatgt_lun_alua_takeover_causes_total", "cause=\"io\"") >= 1.0,
        "a command through B, whose link to the dead owner broke, asked for it"
    );
    b.assert_alive("after the takeover");
}
