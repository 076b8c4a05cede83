//! Task management across I_T nexuses: a LOGICAL UNIT RESET from one session ends the
//! tasks of another session on that LUN. Session A starts a WRITE and waits for its R2T;
//! session B resets the LUN; A's write then never completes — its late Data-Out is ignored,
//! no status is ever sent for it, nothing reaches the disk — and A's next command reports
//! the reset (UNIT ATTENTION, BUS DEVICE RESET FUNCTION OCCURRED) on a connection that
//! stays up.

use std::time::Duration;

use tests::daemon::require_numatgtd;
use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB};

#[test]
fn lun_reset_from_another_session_ends_its_tasks() {
    require_numatgtd("tmf_cross");
    let d = Daemon::start(&[LunSpec::new(1, 512, 8 * MIB)]);
    let mut a = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:tmf-a");
    let mut b = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:tmf-b");

    // A: WRITE(10) of 8 blocks at LBA 0 without immediate data → the target asks with an R2T
    let itt = a.send_command(&[0x2A, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[], 4096, false);
    let r2t = a
        .next_pdu(Duration::from_secs(5))
        .expect("an R2T for A's write");
    assert_eq!(r2t.opcode(), 0x31, "expected R2T, got {:#x}", r2t.opcode());
    let ttt = u32::from_be_bytes([r2t.bhs[20], r2t.bhs[21], r2t.bhs[22], r2t.bhs[23]]);

    // B: LOGICAL UNIT RESET
    assert_eq!(
        b.task_management(5, 0xFFFF_FFFF),
        0,
        "LUN RESET not complete"
    );

    // A's write is gone: its data is ignored and nothing is answered for it
    a.send_data_out(itt, ttt, 0, &[0xAB; 4096]);
    if let Some(p) = a.next_pdu(Duration::from_millis(800)) {
        panic!("the aborted write got an answer: opcode {:#x}", p.opcode());
    }
    // A's next command sees the reset, then the connection works as before
    let (st, sense, _) = a.command(&[0; 6], &[], 0);
    assert_eq!(st, 2, "unit attention expected");
    assert_eq!(
        (sense[2] & 0x0F, sense[12], sense[13]),
        (0x06, 0x29, 0x03),
        "BUS DEVICE RESET FUNCTION OCCURRED: {sense:02x?}"
    );
    assert_eq!(a.command(&[0; 6], &[], 0).0, 0);
    let (st, _, data) = a.command(&[0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0], &[], 4096);
    assert_eq!(st, 0);
    assert!(
        data.iter().all(|&x| x == 0),
        "the aborted write's data reached the LUN"
    );
}
