//! Several connections of one initiator (same InitiatorName, same ISID by default) logging
//! in to one target at once: a second connection joining the first one's session with the
//! TSIH it got (MC/S, refused: numatgtd offers MaxConnections=1), session reinstatement
//! (a new login with TSIH 0 and the same ISID closes the old session), the same CID on
//! two connections, logout of one connection (close the session, close a connection,
//! remove a connection for recovery, with any CID), sockets closing, time passing.
//!
//! iscsi-proto's `Connection` is per connection: the session state (TSIH allocation,
//! the session table, reinstatement) lives in numatgtd's registry, behind the login
//! `Directory`. So the connections log in through the daemon's own registry Directory
//! (`target_server::fuzzing::Daemon::directory`, one open target), and every connection
//! the registry asks to close is closed (and reported back) as the event loop does. Byte 0
//! bit 0 set uses the fuzz crate's test `Directory` (fixed TSIHs) instead.
//!
//! Input: byte 0 = flags (bit 0: test Directory; bits 1-7: socket read size, 0 = all),
//! then steps (at most 48) of a selector byte `s`; `k = (s & 3) % 3` picks one of three
//! connections:
//! - `s >> 6 == 0`: a login record as the `login` target reads it (48-byte header, u16
//!   length, data); `s & 4` sets the common ISID, `s & 8` the TSIH the last login got,
//!   `s & 16` CID 0; unless `s & 32` the opcode is forced to Login Request.
//! - `s >> 6 == 1`: open-iscsi's two-PDU login to the target; then a byte: bit 0 asks for
//!   the last TSIH, bit 1 for a different ISID, bits 2-7 the CID.
//! - `s >> 6 == 2`: a Logout Request at the connection's current CmdSN/StatSN; then a
//!   byte: bits 0-1 the reason code, bit 2 immediate, bits 3-7 the CID.
//! - `s >> 6 == 3`: `s & 4` closes the socket of connection `k` (a new one takes its
//!   place), else time passes (u16 milliseconds times 16).
//!
//! Checks: no panic; each connection's own harness checks (every output PDU parses,
//! bounded buffers, one LoggedIn); a logged-in normal session has a non-zero TSIH; with
//! the registry: a login with a non-zero TSIH never reaches full feature phase, every
//! registered session is owned by a live connection, at most one per connection, TSIHs
//! distinct.
#![no_main]

use iscsi_proto::pdu::{Bhs, Digests, LoginRequest, LogoutRequest, op};
use iscsi_proto::{ConnConfig, Directory, SessionType};
use libfuzzer_sys::fuzz_target;
use numatgt_fuzz::{
    Harness, INITIATOR, ISID, Input, TestDir, encode, frame_raw, kv, open_iscsi_operational_text,
};
use target_server::fuzzing::{Daemon, TARGET};

const N: usize = 3;

struct Slot {
    id: usize,
    h: Harness,
}

struct World {
    daemon: Daemon,
    test_dir: bool,
    slots: Vec<Slot>,
    next_id: usize,
    last_tsih: u16,
    chunk: usize,
}

fn sandbox() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("numatgt-fuzz-mconn-{}", std::process::id()))
}

impl World {
    fn fresh(&mut self) -> Slot {
        self.next_id += 1;
        Slot {
            id: self.next_id,
            h: Harness::new(ConnConfig::default()),
        }
    }

    fn feed(&mut self, k: usize, wire: &[u8]) {
        let chunk = self.chunk;
        let slot = &mut self.slots[k];
        if self.test_dir {
            slot.h.feed_with(wire, chunk, &TestDir);
        } else {
            let dir = self.daemon.directory(slot.id);
            slot.h.feed_with(wire, chunk, &dir as &dyn Directory);
        }
        slot.h.drain_tx(usize::MAX);
        if let Some(s) = slot.h.c.session() {
            if s.session_type == SessionType::Normal {
                assert_ne!(s.tsih, 0, "a normal session without TSIH");
            }
            self.last_tsih = s.tsih;
        }
        self.settle();
    }

    /// Closes what the daemon asked to close and what closed itself, as the event loop.
    fn settle(&mut self) {
        loop {
            let asked = self.daemon.take_closed();
            let mut any = false;
            for k in 0..N {
                let s = &self.slots[k];
                if asked.contains(&s.id) || s.h.closed || s.h.c.is_closing() {
                    self.close(k);
                    any = true;
                }
            }
            if !any && asked.is_empty() {
                break;
            }
        }
        if !self.test_dir {
            let live: Vec<usize> = self.slots.iter().map(|s| s.id).collect();
            let sessions = self.daemon.sessions(TARGET);
            for (i, (tsih, _cid, owner)) in sessions.iter().enumerate() {
                assert!(
                    live.contains(owner),
                    "session {tsih} owned by closed connection {owner}"
                );
                for (t2, _, o2) in &sessions[i + 1..] {
                    assert_ne!(o2, owner, "two sessions on connection {owner}");
                    assert_ne!(t2, tsih, "two sessions with TSIH {tsih}");
                }
            }
        }
    }

    fn close(&mut self, k: usize) {
        let id = self.slots[k].id;
        let new = self.fresh();
        let mut old = std::mem::replace(&mut self.slots[k], new);
        old.h.finish();
        if !self.test_dir {
            self.daemon.connection_closed(id);
        }
    }
}

fn login_bhs(
    csg: u8,
    nsg: u8,
    cmd_sn: u32,
    exp_stat_sn: u32,
    isid: [u8; 6],
    tsih: u16,
    cid: u16,
) -> Bhs {
    Bhs::LoginRequest(LoginRequest {
        transit: true,
        cont: false,
        csg,
        nsg,
        version_max: 0,
        version_min: 0,
        isid,
        tsih,
        itt: u32::from(cid),
        cid,
        cmd_sn,
        exp_stat_sn,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let chunk = match flags >> 1 {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let mut w = World {
        daemon: Daemon::new(&sandbox()),
        test_dir: flags & 1 != 0,
        slots: Vec::new(),
        next_id: 0,
        last_tsih: 0,
        chunk,
    };
    for _ in 0..N {
        let s = w.fresh();
        w.slots.push(s);
    }
    let target = if w.test_dir {
        numatgt_fuzz::TARGET
    } else {
        TARGET
    };
    let mut steps = 0;
    while !inp.is_empty() && steps < 48 {
        steps += 1;
        let s = inp.u8();
        let k = usize::from(s & 3) % N;
        match s >> 6 {
            0 => {
                let mut hdr: [u8; 48] = inp.array();
                let len = usize::from(inp.u16());
                let data = inp.bytes(len);
                if s & 4 != 0 {
                    hdr[8..14].copy_from_slice(&ISID);
                }
                if s & 8 != 0 {
                    hdr[14..16].copy_from_slice(&w.last_tsih.to_be_bytes());
                }
                if s & 16 != 0 {
                    hdr[20..22].fill(0);
                }
                if s & 32 == 0 {
                    hdr[0] = (hdr[0] & 0x40) | op::LOGIN_REQ;
                }
                let dg = w.slots[k].h.in_dg;
                let wire = frame_raw(&hdr, &[], data, dg);
                w.feed(k, &wire);
            }
            1 => {
                let b = inp.u8();
                let tsih = if b & 1 != 0 { w.last_tsih } else { 0 };
                let mut isid = ISID;
                if b & 2 != 0 {
                    isid[5] ^= 0x80;
                }
                let cid = u16::from(b >> 2);
                let was_logged_in = w.slots[k].h.logged_in;
                let sec = kv(&[
                    ("InitiatorName", INITIATOR),
                    ("SessionType", "Normal"),
                    ("TargetName", target),
                    ("AuthMethod", "None"),
                ]);
                let pdu = encode(
                    login_bhs(0, 1, 1, 0, isid, tsih, cid),
                    &sec,
                    Digests::default(),
                );
                w.feed(k, &pdu);
                let st = w.slots[k].h.stat_sn;
                let pdu = encode(
                    login_bhs(1, 3, 1, st, isid, tsih, cid),
                    &open_iscsi_operational_text("None", "None"),
                    Digests::default(),
                );
                w.feed(k, &pdu);
                if tsih != 0 && !w.test_dir && !was_logged_in {
                    // MaxConnections=1: joining a session is refused (a connection logged
                    // in before this step stays so: the login PDUs are a protocol error)
                    assert!(
                        !w.slots[k].h.logged_in,
                        "a connection joined session {tsih}"
                    );
                }
            }
            2 => {
                let b = inp.u8();
                let h = &w.slots[k].h;
                let bhs = Bhs::LogoutRequest(LogoutRequest {
                    immediate: b & 4 != 0,
                    reason: b & 3,
                    itt: 0x500,
                    cid: u16::from(b >> 3),
                    cmd_sn: h.exp_cmd_sn,
                    exp_stat_sn: h.stat_sn,
                });
                let pdu = encode(bhs, &[], h.in_dg);
                w.feed(k, &pdu);
            }
            _ => {
                if s & 4 != 0 {
                    w.close(k);
                    w.settle();
                } else {
                    let ms = u64::from(inp.u16()) * 16;
                    let slots = &mut w.slots;
                    for sl in slots.iter_mut() {
                        sl.h.tick(ms);
                        sl.h.drain_tx(usize::MAX);
                    }
                    w.settle();
                }
            }
        }
    }
    for k in 0..N {
        w.close(k);
    }
    w.settle();
    if !w.test_dir {
        assert!(
            w.daemon.sessions(TARGET).is_empty(),
            "sessions outlive their connections"
        );
    }
});
