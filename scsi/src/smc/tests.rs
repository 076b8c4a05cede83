//! A medium changer configured with tgt's `--params` as Debian's VTL examples do: its
//! elements in READ ELEMENT STATUS and the Element Address Assignment page, moves between
//! slots and drives with their checks, and the state saved and restored.

use super::{ChangerOp, ConfigError, DriveRef, Kind, Library};
use crate::test_util::*;
use crate::{Action, DeviceType, LogicalUnit};

fn params(s: &str) -> Vec<(&str, &str)> {
    s.split(',').filter_map(|kv| kv.split_once('=')).collect()
}

/// One picker at 1, four slots from 1000 (two full), one mail slot at 10, two drives at
/// 500 bound to LUNs 1 and 2 of tid 1.
fn changer() -> LogicalUnit {
    let lu = lu_with(|p| p.device_type = DeviceType::Changer);
    for p in [
        "element_type=1,start_address=1,quantity=1,media_home=/srv/tapes",
        "element_type=2,start_address=1000,quantity=4",
        "element_type=3,start_address=10,quantity=1",
        "element_type=4,start_address=500,quantity=2",
        "element_type=4,address=500,tid=1,lun=1",
        "element_type=4,address=501,tid=1,lun=2",
        "element_type=2,address=1000,barcode=A0000001,sides=1",
        "element_type=2,address=1001,barcode=A0000002",
    ] {
        lu.changer_configure(&params(p))
            .unwrap_or_else(|e| panic!("{p}: {e}"));
    }
    lu
}

fn status(lu: &LogicalUnit, kind: u8, voltag: bool) -> Vec<u8> {
    let b1 = kind | if voltag { 0x10 } else { 0 };
    let c = complete(lu, &[0xB8, b1, 0, 0, 0xFF, 0xFF, 0, 0, 0x40, 0, 0, 0]);
    assert_eq!(c.status, 0, "{:02x?}", c.sense);
    c.data
}

#[test]
fn inquiry_and_the_element_address_assignment_page() {
    let lu = changer();
    let d = complete(&lu, &[0x12, 0, 0, 0, 96, 0]).data;
    assert_eq!(d[0], 0x08, "PDT 8: medium changer");
    assert_eq!(&d[64..66], &[0x04, 0x80], "SMC-3");
    let m = complete(&lu, &[0x1A, 0x08, 0x1D, 0, 255, 0]).data;
    // header 4, page 1Dh: MT 1 x1, ST 1000 x4, I/E 10 x1, DT 500 x2
    assert_eq!(
        &m[4..22],
        &[
            0x1D, 18, 0, 1, 0, 1, 0x03, 0xE8, 0, 4, 0, 10, 0, 1, 0x01, 0xF4, 0, 2
        ]
    );
    let all = complete(&lu, &[0x1A, 0x08, 0x3F, 0, 255, 0]).data;
    assert_eq!(usize::from(all[0]) + 1, all.len());
}

#[test]
fn read_element_status_reports_every_type_with_volume_tags() {
    let lu = changer();
    let d = status(&lu, 0, true);
    // header: first element 1, 8 elements
    assert_eq!((&d[0..2], &d[2..4]), (&[0u8, 1][..], &[0u8, 8][..]));
    let avail = u32::from_be_bytes([0, d[5], d[6], d[7]]) as usize;
    assert_eq!(avail + 8, d.len());
    // pages in order: transport, storage, import/export, data transfer
    let mut at = 8;
    let mut seen = Vec::new();
    while at < d.len() {
        let (kind, len) = (
            d[at],
            usize::from(u16::from_be_bytes([d[at + 2], d[at + 3]])),
        );
        let bytes = u32::from_be_bytes([0, d[at + 5], d[at + 6], d[at + 7]]) as usize;
        assert_eq!((d[at + 1], len), (0x80, 52), "PVOLTAG, 52-byte descriptors");
        for e in d[at + 8..at + 8 + bytes].chunks(len) {
            let addr = u16::from_be_bytes([e[0], e[1]]);
            let tag = String::from_utf8_lossy(&e[12..44]).trim_end().to_string();
            seen.push((kind, addr, e[2] & 1, tag));
        }
        at += 8 + bytes;
    }
    assert_eq!(
        seen,
        vec![
            (1, 1, 0, String::new()),
            (2, 1000, 1, "A0000001".into()),
            (2, 1001, 1, "A0000002".into()),
            (2, 1002, 0, String::new()),
            (2, 1003, 0, String::new()),
            (3, 10, 0, String::new()),
            (4, 500, 0, String::new()),
            (4, 501, 0, String::new()),
        ]
    );
    // one type, from an address, a number of elements; without volume tags 16 bytes
    let c = complete(&lu, &[0xB8, 0x02, 0x03, 0xE9, 0, 2, 0, 0, 0x40, 0, 0, 0]).data;
    assert_eq!(
        (&c[0..4], c.len()),
        (&[0x03u8, 0xE9, 0, 2][..], 8 + 8 + 2 * 16)
    );
    // allocation length cuts
    let c = complete(&lu, &[0xB8, 0x10, 0, 0, 0xFF, 0xFF, 0, 0, 0, 20, 0, 0]).data;
    assert_eq!(c.len(), 20);
}

#[test]
fn moves_are_checked_then_committed() {
    let lu = changer();
    let mv = |src: u16, dst: u16| match exec(
        &lu,
        &[
            0xA5,
            0,
            0,
            0,
            (src >> 8) as u8,
            src as u8,
            (dst >> 8) as u8,
            dst as u8,
            0,
            0,
            0,
            0,
        ],
        &[],
    ) {
        Action::Changer(ChangerOp::Move { src, dst, invert }) => lu.changer_plan(src, dst, invert),
        other => panic!("{other:?}"),
    };
    let m = mv(1000, 500).expect("slot to drive");
    assert_eq!(
        (m.barcode.as_str(), m.load, m.unload),
        ("A0000001", Some(DriveRef { tid: 1, lun: 1 }), None)
    );
    lu.changer_commit(&m);
    let lib = lu.changer_library();
    assert_eq!(lib.elements[&500].cartridge.as_deref(), Some("A0000001"));
    assert_eq!(lib.elements[&500].source, Some(1000));
    assert!(lib.elements[&1000].cartridge.is_none());
    // refused: empty source, full destination, no such element, the picker
    assert_eq!(
        mv(1002, 501).map(drop),
        Err(crate::Sense::new(5, 0x3B, 0x0E))
    );
    assert_eq!(
        mv(1001, 500).map(drop),
        Err(crate::Sense::new(5, 0x3B, 0x0D))
    );
    assert_eq!(
        mv(1001, 4242).map(drop),
        Err(crate::Sense::new(5, 0x21, 0x01))
    );
    assert_eq!(mv(1001, 1).map(drop), Err(crate::Sense::new(5, 0x21, 0x01)));
    // back to a slot: the drive is unloaded
    let m = mv(500, 1003).expect("drive to slot");
    assert_eq!(m.unload, Some(DriveRef { tid: 1, lun: 1 }));
    lu.changer_commit(&m);
    assert_eq!(lu.changer_library().elements[&1003].source, Some(1000));
}

#[test]
fn configuration_errors_and_replays() {
    let lu = changer();
    let before = lu.changer_library();
    for (p, e) in [
        ("element_type=2,start_address=1002,quantity=4", "overlap"),
        ("element_type=2,start_address=1001,quantity=2", "overlap"),
        (
            "element_type=2,address=999,barcode=X",
            "no element of type 2",
        ),
        ("element_type=4,address=500", "tid= and lun="),
        ("element_type=2,address=1002,barcode=../etc", "barcode"),
        (
            "element_type=9,start_address=1,quantity=1",
            "element_type is required",
        ),
        ("colour=red", "unknown changer parameter"),
        (
            "element_type=2,start_address=65535,quantity=2",
            "end at 65535",
        ),
    ] {
        let err: ConfigError = lu.changer_configure(&params(p)).expect_err(p);
        assert!(err.to_string().contains(e), "{p}: {err}");
    }
    assert_eq!(
        lu.changer_library(),
        before,
        "refused requests change nothing"
    );
    let done = lu
        .changer_configure(&params("element_type=2,address=1003,barcode=A0000001"))
        .expect("a barcode that is elsewhere");
    assert!(done.note.is_some_and(|n| n.contains("at element 1000")));
    // the same configuration again is accepted as it is
    for p in [
        "element_type=2,start_address=1000,quantity=4",
        "element_type=2,address=1000,barcode=A0000001",
    ] {
        lu.changer_configure(&params(p)).expect(p);
    }
    assert_eq!(lu.changer_library(), before);
}

#[test]
fn the_state_round_trips_and_restores_contents() {
    let lu = changer();
    let m = lu.changer_plan(1001, 501, false).expect("move");
    lu.changer_commit(&m);
    let text = lu.changer_library().to_text();
    let saved = Library::from_text(&text).expect("parse");
    assert_eq!(saved, lu.changer_library());
    // a restart: the state is restored into an empty changer, the configuration makes
    // the elements again and they fill from it; the slot's barcode of the configuration
    // is left alone (the cartridge is in the drive)
    let again = lu_with(|p| p.device_type = DeviceType::Changer);
    again.changer_restore(saved);
    let mut loads = Vec::new();
    for p in [
        "element_type=2,start_address=1000,quantity=4",
        "element_type=4,start_address=500,quantity=2",
        "element_type=4,address=500,tid=1,lun=1",
        "element_type=4,address=501,tid=1,lun=2",
        "element_type=2,address=1000,barcode=A0000001",
        "element_type=2,address=1001,barcode=A0000002",
    ] {
        let done = again.changer_configure(&params(p)).expect(p);
        loads.extend(done.load);
    }
    assert_eq!(
        loads,
        vec![(DriveRef { tid: 1, lun: 2 }, "A0000002".to_string())]
    );
    let lib = again.changer_library();
    assert_eq!(lib.elements[&501].cartridge.as_deref(), Some("A0000002"));
    assert!(lib.elements[&1001].cartridge.is_none());
    assert_eq!(lib.elements[&1000].cartridge.as_deref(), Some("A0000001"));
    assert_eq!(lib.media_home.as_deref(), Some("/srv/tapes"));
    assert_eq!(lib.span(Kind::Drive), (500, 2));
    assert!(Library::from_text("garbage\n1 2 3").is_none());
    // the configuration that makes it again (the drive's cartridge back at its slot)
    let ps = lu.changer_library().to_params();
    let fresh = lu_with(|p| p.device_type = DeviceType::Changer);
    for p in &ps {
        let pairs: Vec<(&str, &str)> = p.split(',').filter_map(|kv| kv.split_once('=')).collect();
        fresh.changer_configure(&pairs).expect(p);
    }
    let f = fresh.changer_library();
    assert_eq!(f.elements.len(), lu.changer_library().elements.len());
    assert_eq!(f.elements[&1001].cartridge.as_deref(), Some("A0000002"));
    assert_eq!(f.elements[&501].drive, Some(DriveRef { tid: 1, lun: 2 }));
    assert!(Library::from_text("numatgt-changer 1\n1000 2 full ../x").is_none());
}
