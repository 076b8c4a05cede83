//! Persistent reservations survive a restart of numatgtd when the initiator asks for it
//! (APTPL): an initiator registers a key with APTPL and takes an EXCLUSIVE ACCESS
//! reservation over a raw iSCSI session; numatgtd is stopped and started again with the
//! same state directory; the registration and the reservation are still there (PR IN READ
//! KEYS / READ RESERVATION), and another initiator's READ gets RESERVATION CONFLICT. The
//! state file is replaced atomically, so it is never torn.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use tests::daemon::require_numatgtd;
use tests::pdu::{self, ReadOutcome};
use tests::{Daemon, LunSpec, MIB, TEST_IQN};

const KEY: u64 = 0x1122_3344_5566_7788;

struct Raw {
    s: TcpStream,
    cmd_sn: u32,
    itt: u32,
}

/// (status, sense, data-in) of one immediate SCSI command to LUN 1.
fn scsi(r: &mut Raw, cdb: &[u8], data_out: &[u8], read_len: u32) -> (u8, Vec<u8>, Vec<u8>) {
    r.itt += 1;
    let mut bhs = [0u8; 48];
    bhs[0] = 0x40 | 0x01; // immediate SCSI Command
    bhs[1] = 0x80
        | 0x01
        | if read_len > 0 { 0x40 } else { 0 }
        | if data_out.is_empty() { 0 } else { 0x20 };
    let dlen = data_out.len() as u32;
    bhs[5..8].copy_from_slice(&dlen.to_be_bytes()[1..]);
    bhs[8..10].copy_from_slice(&[0, 1]); // LUN 1
    bhs[16..20].copy_from_slice(&r.itt.to_be_bytes());
    let edtl = if data_out.is_empty() { read_len } else { dlen };
    bhs[20..24].copy_from_slice(&edtl.to_be_bytes());
    bhs[24..28].copy_from_slice(&r.cmd_sn.to_be_bytes());
    bhs[32..32 + cdb.len()].copy_from_slice(cdb);
    let mut pdu = bhs.to_vec();
    pdu.extend_from_slice(data_out);
    while pdu.len() % 4 != 0 {
        pdu.push(0);
    }
    r.s.write_all(&pdu).expect("send command");
    let mut data = Vec::new();
    loop {
        match pdu::read_pdu(&mut r.s, Duration::from_secs(10)) {
            ReadOutcome::Pdu(p) if p.opcode() == 0x25 => {
                data.extend_from_slice(&p.data);
                if p.flags() & 0x01 != 0 {
                    return (p.bhs[3], Vec::new(), data);
                }
            }
            ReadOutcome::Pdu(p) if p.opcode() == 0x21 => {
                let sense = p.data.get(2..).map(<[u8]>::to_vec).unwrap_or_default();
                return (p.bhs[3], sense, data);
            }
            ReadOutcome::Pdu(_) => {}
            other => panic!("no response to {cdb:02x?}: {other:?}"),
        }
    }
}

fn session(d: &Daemon, initiator: &str) -> Raw {
    let sess = pdu::login_normal(d.addr(), initiator, TEST_IQN)
        .unwrap_or_else(|e| panic!("login {initiator}: {e}\n{}", d.log_tail(40)));
    let b = &sess.login_response.bhs;
    let exp = u32::from_be_bytes([b[28], b[29], b[30], b[31]]);
    let mut r = Raw {
        s: sess.stream,
        cmd_sn: exp,
        itt: 0,
    };
    // the first command after login reports the power-on unit attention: clear it
    for _ in 0..3 {
        if scsi(&mut r, &[0; 6], &[], 0).0 == 0 {
            break;
        }
    }
    r
}

fn pr_out(r: &mut Raw, sa: u8, pr_type: u8, key: u64, sa_key: u64, aptpl: bool) -> u8 {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5F;
    cdb[1] = sa;
    cdb[2] = pr_type;
    cdb[8] = 24;
    let mut p = [0u8; 24];
    p[0..8].copy_from_slice(&key.to_be_bytes());
    p[8..16].copy_from_slice(&sa_key.to_be_bytes());
    p[20] = u8::from(aptpl);
    scsi(r, &cdb, &p, 0).0
}

fn pr_in(r: &mut Raw, sa: u8) -> Vec<u8> {
    let cdb = [0x5E, sa, 0, 0, 0, 0, 0, 0x01, 0x00, 0];
    let (status, sense, data) = scsi(r, &cdb, &[], 256);
    assert_eq!(status, 0, "PR IN {sa}: sense {sense:02x?}");
    data
}

#[test]
fn aptpl_reservation_survives_a_restart() {
    require_numatgtd("pr_persist");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let owner = "iqn.2026-11.org.numatgt:pr-owner";
    let mut a = session(&d, owner);
    assert_eq!(
        pr_out(&mut a, 0x00, 0, 0, KEY, true),
        0,
        "REGISTER with APTPL"
    );
    assert_eq!(
        pr_out(&mut a, 0x01, 0x03, KEY, 0, false),
        0,
        "RESERVE exclusive access"
    );
    drop(a);
    let state = d.state_dir.join("pr");
    let files: Vec<_> = std::fs::read_dir(&state)
        .unwrap_or_else(|e| panic!("{}: {e}", state.display()))
        .collect();
    assert_eq!(
        files.len(),
        1,
        "one state file expected in {}",
        state.display()
    );

    d.restart();
    let mut a = session(&d, owner);
    let keys = pr_in(&mut a, 0x00);
    assert_eq!(
        &keys[4..8],
        &8u32.to_be_bytes(),
        "one key after restart: {keys:02x?}"
    );
    assert_eq!(&keys[8..16], &KEY.to_be_bytes());
    let res = pr_in(&mut a, 0x01);
    assert_eq!(
        &res[4..8],
        &16u32.to_be_bytes(),
        "a reservation after restart: {res:02x?}"
    );
    assert_eq!(&res[8..16], &KEY.to_be_bytes());
    assert_eq!(res[21] & 0x0F, 0x03, "type exclusive access");
    // the holder reads; another initiator conflicts
    let read10 = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    assert_eq!(scsi(&mut a, &read10, &[], 512).0, 0);
    let mut b = session(&d, "iqn.2026-11.org.numatgt:pr-other");
    assert_eq!(
        scsi(&mut b, &read10, &[], 512).0,
        0x18,
        "RESERVATION CONFLICT expected"
    );
    // release and clear: the state file follows (no registrations after another restart)
    assert_eq!(pr_out(&mut a, 0x03, 0, KEY, 0, false), 0, "CLEAR");
    drop((a, b));
    d.restart();
    let mut a = session(&d, owner);
    let keys = pr_in(&mut a, 0x00);
    assert_eq!(
        &keys[4..8],
        &0u32.to_be_bytes(),
        "no keys after CLEAR + restart: {keys:02x?}"
    );
}
