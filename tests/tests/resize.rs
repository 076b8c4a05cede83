//! Online resize: `tgtadm --op update --mode logicalunit --params size=…` grows a
//! file-backed LUN while a session is logged in. The session's next command gets UNIT
//! ATTENTION / CAPACITY DATA HAS CHANGED, READ CAPACITY reports the new size, blocks beyond
//! the old end can be written and read, and a new initiator sees the new size. Shrinking is
//! refused with tgtd's error and changes nothing.

use tests::daemon::require_numatgtd;
use tests::mgmt::update_lun1;
use tests::pdu::ScsiSession;
use tests::tools;
use tests::{Daemon, LunSpec, MIB};

fn key_asc(sense: &[u8]) -> (u8, u8, u8) {
    // fixed format (70h): key in byte 2, ASC/ASCQ in bytes 12/13
    (
        sense.get(2).map_or(0, |b| b & 0x0F),
        sense.get(12).copied().unwrap_or(0),
        sense.get(13).copied().unwrap_or(0),
    )
}

#[test]
fn growing_a_lun_online_tells_the_initiator() {
    require_numatgtd("resize");
    let d = Daemon::start(&[LunSpec::new(1, 512, 8 * MIB)]);
    let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:resize");
    let rc10 = [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let (st, _, data) = s.command(&rc10, &[], 8);
    assert_eq!(st, 0);
    assert_eq!(&data[..4], &(16384u32 - 1).to_be_bytes(), "8 MiB at first");

    let r = update_lun1(&d, "size=16M");
    r.check("tgtadm resize");
    assert_eq!(
        std::fs::metadata(d.lun_path(1)).expect("stat").len(),
        16 * MIB
    );

    let (st, sense, _) = s.command(&[0; 6], &[], 0);
    assert_eq!(
        (st, key_asc(&sense)),
        (2, (6, 0x2A, 0x09)),
        "CAPACITY DATA HAS CHANGED expected"
    );
    let (st, _, data) = s.command(&rc10, &[], 8);
    assert_eq!(st, 0);
    assert_eq!(
        &data[..4],
        &(32768u32 - 1).to_be_bytes(),
        "16 MiB after the resize"
    );
    // a block beyond the old end
    let lba: u32 = 30000;
    let mut w10 = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    w10[2..6].copy_from_slice(&lba.to_be_bytes());
    assert_eq!(
        s.command(&w10, &[0x5A; 512], 0).0,
        0,
        "write beyond the old end"
    );
    let mut r10 = w10;
    r10[0] = 0x28;
    let (st, _, data) = s.command(&r10, &[], 512);
    assert_eq!(st, 0);
    assert!(
        data.iter().all(|&b| b == 0x5A),
        "read back beyond the old end"
    );

    // another initiator sees the new size
    let cap = tools::run(30, "iscsi-readcapacity16", [d.url(1)]);
    cap.check("iscsi-readcapacity16");
    assert!(
        cap.stdout.contains(&format!("Total size:{}", 16 * MIB)),
        "{cap}"
    );

    // shrinking is refused, nothing changes
    let r = update_lun1(&d, "size=4M");
    assert!(!r.status.success(), "shrink must fail: {r}");
    assert_eq!(
        std::fs::metadata(d.lun_path(1)).expect("stat").len(),
        16 * MIB
    );
    let (st, _, data) = s.command(&rc10, &[], 8);
    assert_eq!(st, 0, "no unit attention after a refused resize");
    assert_eq!(&data[..4], &(32768u32 - 1).to_be_bytes());
}
