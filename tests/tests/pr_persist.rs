//! Persistent reservations survive a restart of numatgtd when the initiator asks for it
//! (APTPL): an initiator registers a key with APTPL and takes an EXCLUSIVE ACCESS
//! reservation over a raw iSCSI session; numatgtd is stopped and started again with the
//! same state directory; the registration and the reservation are still there (PR IN READ
//! KEYS / READ RESERVATION), and another initiator's READ gets RESERVATION CONFLICT. The
//! state file is replaced atomically, so it is never torn.

use tests::daemon::require_numatgtd;
use tests::pdu::ScsiSession as Raw;
use tests::{Daemon, LunSpec, MIB};

const KEY: u64 = 0x1122_3344_5566_7788;

fn pr_out(r: &mut Raw, sa: u8, pr_type: u8, key: u64, sa_key: u64, aptpl: bool) -> u8 {
    r.persistent_reserve_out(sa, pr_type, key, sa_key, aptpl)
}

fn pr_in(r: &mut Raw, sa: u8) -> Vec<u8> {
    let cdb = [0x5E, sa, 0, 0, 0, 0, 0, 0x01, 0x00, 0];
    let (status, sense, data) = r.command(&cdb, &[], 256);
    assert_eq!(status, 0, "PR IN {sa}: sense {sense:02x?}");
    data
}

#[test]
fn aptpl_reservation_survives_a_restart() {
    require_numatgtd("pr_persist");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let owner = "iqn.2026-11.org.numatgt:pr-owner";
    let mut a = Raw::open(&d, owner);
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
    let mut a = Raw::open(&d, owner);
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
    assert_eq!(a.command(&read10, &[], 512).0, 0);
    let mut b = Raw::open(&d, "iqn.2026-11.org.numatgt:pr-other");
    assert_eq!(
        b.command(&read10, &[], 512).0,
        0x18,
        "RESERVATION CONFLICT expected"
    );
    // release and clear: the state file follows (no registrations after another restart)
    assert_eq!(pr_out(&mut a, 0x03, 0, KEY, 0, false), 0, "CLEAR");
    drop((a, b));
    d.restart();
    let mut a = Raw::open(&d, owner);
    let keys = pr_in(&mut a, 0x00);
    assert_eq!(
        &keys[4..8],
        &0u32.to_be_bytes(),
        "no keys after CLEAR + restart: {keys:02x?}"
    );
}

/// kill -9 while an initiator keeps changing its APTPL registration: every restart finds a
/// state file that loads (no "not restored" error), holding the last acknowledged key or the
/// one whose PR OUT was in flight — never a torn or stale file. Five crashes at different
/// moments.
#[test]
fn kill_9_during_pr_updates_never_leaves_a_corrupt_state() {
    use std::time::{Duration, Instant};
    require_numatgtd("pr_persist");
    let mut d = Daemon::start(&[LunSpec::new(1, 512, 16 * MIB)]);
    let owner = "iqn.2026-11.org.numatgt:pr-crash";
    let mut next_key = 1u64;
    for round in 0..5u64 {
        let mut a = Raw::open(&d, owner);
        // keep going until the connection dies; the killer strikes 150..550 ms in
        let pid = d.pid();
        let delay = Duration::from_millis(150 + round * 100);
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            tests::daemon::send_signal(pid, libc::SIGKILL);
        });
        let mut acked = None;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "the daemon was not killed");
            let key = next_key;
            next_key += 1;
            // REGISTER AND IGNORE EXISTING KEY, APTPL: each one rewrites the state file
            let mut cdb = [0u8; 10];
            cdb[0] = 0x5F;
            cdb[1] = 0x06;
            cdb[8] = 24;
            let mut p = [0u8; 24];
            p[8..16].copy_from_slice(&key.to_be_bytes());
            p[20] = 1;
            let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                a.send_command(&cdb, &p, 24, false)
            }));
            if sent.is_err() {
                break;
            }
            match a.next_pdu(Duration::from_secs(5)) {
                Some(r) if r.opcode() == 0x21 => {
                    assert_eq!(r.bhs[3], 0, "PR OUT status");
                    acked = Some(key);
                }
                Some(other) => panic!("unexpected PDU {:02x}", other.opcode()),
                None => break,
            }
        }
        killer.join().expect("killer thread");
        d.kill9();
        let in_flight = next_key - 1;
        d.respawn();
        let log = d.log();
        assert!(
            !log.contains("not restored") && !log.contains("cannot read persistent"),
            "round {round}: state file rejected after kill -9\n{}",
            d.log_tail(30)
        );
        let mut a = Raw::open(&d, owner);
        let keys = pr_in(&mut a, 0x00);
        let Some(acked) = acked else {
            panic!("round {round}: no PR OUT was acknowledged before the kill");
        };
        assert_eq!(
            &keys[4..8],
            &8u32.to_be_bytes(),
            "round {round}: one key: {keys:02x?}"
        );
        let got = u64::from_be_bytes(keys[8..16].try_into().expect("8 bytes"));
        assert!(
            got == acked || got == in_flight,
            "round {round}: key {got} after restart; acknowledged {acked}, in flight {in_flight}"
        );
        eprintln!("round {round}: {acked} acknowledged, key {got} restored");
    }
}
