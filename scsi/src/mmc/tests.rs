//! A CD/DVD logical unit against MMC-6: identity, the disc's layout, events around load
//! and eject, and the commands a read-only drive does not have.

use crate::test_util::*;
use crate::{Action, DeviceType, LogicalUnit, Nexus, NexusId};

/// A drive with a 1000-sector (2048-byte) disc.
fn cd() -> LogicalUnit {
    lu_with(|p| {
        p.device_type = DeviceType::Cd;
        p.block_size = 2048;
        p.num_blocks = 1000;
    })
}

const EJECT: [u8; 6] = [0x1B, 0, 0, 0, 0x02, 0];
const LOAD: [u8; 6] = [0x1B, 0, 0, 0, 0x03, 0];
const GESN_MEDIA: [u8; 10] = [0x4A, 1, 0, 0, 0x10, 0, 0, 0, 8, 0];

#[test]
fn inquiry_says_cd_dvd_removable_with_identity_pages_only() {
    let lu = cd();
    let d = complete(&lu, &[0x12, 0, 0, 0, 96, 0]).data;
    assert_eq!(
        (d[0], d[1] & 0x80, d[5]),
        (0x05, 0x80, 0),
        "PDT 5, RMB, no 3PC/TPGS"
    );
    assert_eq!(
        &d[58..66],
        &[0, 0xA0, 0x09, 0x60, 0x04, 0x60, 0x04, 0xE0],
        "SAM-5, iSCSI, SPC-4, MMC-6"
    );
    let d = complete(&lu, &[0x12, 1, 0, 0, 255, 0]).data;
    assert_eq!(d, vec![0x05, 0, 0, 3, 0x00, 0x80, 0x83]);
    assert_eq!(
        check(&complete(&lu, &[0x12, 1, 0xB0, 0, 255, 0])),
        (5, 0x24, 0)
    );
}

#[test]
fn read_capacity_and_reads_use_2048_byte_sectors() {
    let lu = cd();
    let d = complete(&lu, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]).data;
    assert_eq!(d, vec![0, 0, 0x03, 0xE7, 0, 0, 0x08, 0]);
    assert_eq!(
        exec(&lu, &[0x28, 0, 0, 0, 0, 10, 0, 0, 4, 0], &[]),
        Action::Read {
            lba: 10,
            blocks: 4,
            fua: false
        }
    );
    assert!(matches!(
        exec(&lu, &[0xA8, 0, 0, 0, 0x03, 0xE0, 0, 0, 0, 8, 0, 0], &[]),
        Action::Read {
            lba: 992,
            blocks: 8,
            ..
        }
    ));
    // past the end of the disc
    assert_eq!(
        check(&complete(&lu, &[0x28, 0, 0, 0, 0x03, 0xE7, 0, 0, 2, 0])),
        (5, 0x21, 0)
    );
}

#[test]
fn a_dvd_rom_drive_has_no_write_or_disk_only_commands() {
    let lu = cd();
    for cdb in [
        &[0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0][..],       // WRITE(10)
        &[0xAA, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0][..], // WRITE(12)
        &[0x0A, 0, 0, 0, 1, 0][..],                   // WRITE(6)
        &[0x08, 0, 0, 0, 1, 0][..],                   // READ(6): not MMC
        &[0x88, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0][..], // READ(16)
        &[0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0][..], // READ CAPACITY(16)
        &[0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0][..],      // UNMAP
        &[0x83, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..], // EXTENDED COPY
    ] {
        assert_eq!(check(&complete(&lu, cdb)), (5, 0x20, 0), "{cdb:02x?}");
    }
    // REPORT SUPPORTED OPERATION CODES lists the drive's own table
    let d = complete(&lu, &[0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0]).data;
    let listed: Vec<u8> = d[4..].chunks(8).map(|c| c[0]).collect();
    assert_eq!(listed.len(), crate::mmc::TABLE.len());
    assert!(listed.contains(&0x43) && listed.contains(&0x46) && !listed.contains(&0x2A));
}

#[test]
fn toc_has_one_data_track_and_the_lead_out_in_lba_and_msf() {
    let lu = cd();
    let d = complete(&lu, &[0x43, 0, 0, 0, 0, 0, 0, 0, 100, 0]).data;
    assert_eq!(
        d,
        vec![
            0, 18, 1, 1, //
            0, 0x14, 1, 0, 0, 0, 0, 0, //
            0, 0x14, 0xAA, 0, 0, 0, 0x03, 0xE8,
        ]
    );
    // MSF: 1000 + 150 frames = 0 min 15 s 25 frames; track 1 at 00:02:00
    let d = complete(&lu, &[0x43, 0x02, 0, 0, 0, 0, 0, 0, 100, 0]).data;
    assert_eq!(&d[8..12], &[0, 0, 2, 0]);
    assert_eq!(&d[16..20], &[0, 0, 15, 25]);
    // the lead-out alone; a track that is not there
    let d = complete(&lu, &[0x43, 0, 0, 0, 0, 0, 0xAA, 0, 100, 0]).data;
    assert_eq!((d[1], d[6]), (10, 0xAA));
    assert_eq!(
        check(&complete(&lu, &[0x43, 0, 0, 0, 0, 0, 2, 0, 100, 0])),
        (5, 0x24, 0)
    );
    // session information: one session from track 1
    let d = complete(&lu, &[0x43, 0, 1, 0, 0, 0, 0, 0, 100, 0]).data;
    assert_eq!(d, vec![0, 10, 1, 1, 0, 0x14, 1, 0, 0, 0, 0, 0]);
    assert_eq!(
        check(&complete(&lu, &[0x43, 0, 5, 0, 0, 0, 0, 0, 100, 0])),
        (5, 0x24, 0)
    );
}

#[test]
fn configuration_is_the_dvd_rom_profile_while_a_disc_is_in() {
    let lu = cd();
    let d = complete(&lu, &[0x46, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]).data;
    assert_eq!(&d[6..8], &[0x00, 0x10], "current profile DVD-ROM");
    let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
    assert_eq!(len + 4, d.len());
    // the feature codes in order, each with its current bit
    let mut at = 8;
    let mut features = Vec::new();
    while at < d.len() {
        features.push((u16::from_be_bytes([d[at], d[at + 1]]), d[at + 2] & 1));
        at += 4 + usize::from(d[at + 3]);
    }
    assert_eq!(
        features,
        vec![(0, 1), (1, 1), (2, 1), (3, 1), (0x10, 1), (0x1F, 1)]
    );
    // one feature (RT 10b): Random Readable, 2048-byte blocks
    let d = complete(&lu, &[0x46, 2, 0, 0x10, 0, 0, 0, 0, 64, 0]).data;
    assert_eq!(&d[8..10], &[0, 0x10]);
    assert_eq!(&d[12..16], &2048u32.to_be_bytes());
    // no disc: no current profile, reading features not current, still answered
    assert_eq!(complete(&lu, &EJECT).status, 0);
    let d = complete(&lu, &[0x46, 1, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]).data;
    assert_eq!(&d[6..8], &[0, 0]);
    assert_eq!(
        check(&complete(&lu, &[0x46, 3, 0, 0, 0, 0, 0, 0, 64, 0])),
        (5, 0x24, 0)
    );
}

#[test]
fn media_events_report_eject_and_load_once_and_no_disc_is_not_ready() {
    let lu = cd();
    let event = |lu: &LogicalUnit| {
        let d = complete(lu, &GESN_MEDIA).data;
        assert_eq!(&d[..4], &[0, 6, 4, 0x10]);
        (d[4], d[5])
    };
    assert_eq!(event(&lu), (0, 0x02), "no event, disc present");
    assert_eq!(complete(&lu, &EJECT).status, 0);
    assert_eq!(event(&lu), (3, 0x01), "media removal, tray open");
    assert_eq!(event(&lu), (0, 0x01), "reported once");
    for cdb in [
        &[0, 0, 0, 0, 0, 0][..],
        &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0][..],
        &[0x43, 0, 0, 0, 0, 0, 0, 0, 100, 0][..],
        &[0x51, 0, 0, 0, 0, 0, 0, 0, 34, 0][..],
    ] {
        assert_eq!(check(&complete(&lu, cdb)), (2, 0x3A, 0), "{cdb:02x?}");
    }
    assert_eq!(
        complete(&lu, &[0xBD, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0]).data[1],
        0x10
    );
    assert_eq!(complete(&lu, &LOAD).status, 0);
    assert_eq!(event(&lu), (2, 0x02), "new media");
    assert_eq!(
        complete(&lu, &[0xBD, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0]).data[1],
        0
    );
    // asynchronous notification is not supported; other classes: no event available
    assert_eq!(
        check(&complete(&lu, &[0x4A, 0, 0, 0, 0x10, 0, 0, 0, 8, 0])),
        (5, 0x24, 0)
    );
    assert_eq!(
        complete(&lu, &[0x4A, 1, 0, 0, 0x40, 0, 0, 0, 8, 0]).data,
        vec![0, 2, 0x80, 0x10]
    );
}

#[test]
fn the_administrator_takes_the_disc_out_and_puts_it_back_whatever_is_prevented() {
    let lu = cd();
    // the nexus `complete` uses, announced: it gets unit attentions
    let n = Nexus::iscsi(
        NexusId(1),
        "iqn.2026-11.test:unit",
        1,
        &lu.params().target_name,
        1,
    );
    lu.nexus_added(&n);
    assert_eq!(
        check(&complete(&lu, &[0, 0, 0, 0, 0, 0])),
        (6, 0x29, 0),
        "power on"
    );
    assert_eq!(complete(&lu, &[0x1E, 0, 0, 0, 1, 0]).status, 0, "PREVENT");
    lu.set_medium_present(false);
    assert!(lu.medium_ejected());
    assert_eq!(check(&complete(&lu, &[0, 0, 0, 0, 0, 0])), (2, 0x3A, 0));
    assert_eq!(complete(&lu, &GESN_MEDIA).data[4..6], [3, 0x01]);
    lu.set_medium_present(false);
    assert_eq!(complete(&lu, &GESN_MEDIA).data[4], 0, "no change, no event");
    lu.set_medium_present(true);
    // the unit attention first, then the disc is there
    assert_eq!(check(&complete(&lu, &[0, 0, 0, 0, 0, 0])), (6, 0x28, 0));
    assert_eq!(complete(&lu, &[0, 0, 0, 0, 0, 0]).status, 0);
    assert_eq!(complete(&lu, &GESN_MEDIA).data[4..6], [2, 0x02]);
}

#[test]
fn disc_information_and_capabilities_page() {
    let lu = cd();
    let d = complete(&lu, &[0x51, 0, 0, 0, 0, 0, 0, 0, 34, 0]).data;
    assert_eq!(d.len(), 34);
    assert_eq!(&d[..7], &[0, 32, 0x0E, 1, 1, 1, 1]);
    let d = complete(&lu, &[0x5A, 0, 0x2A, 0, 0, 0, 0, 0, 255, 0]).data;
    assert_eq!(&d[..2], &[0, 28]);
    assert_eq!(&d[6..8], &[0, 0], "no block descriptors");
    assert_eq!(
        (d[8], d[9], d[10], d[11], d[14] & 0x29),
        (0x2A, 20, 0x08, 0, 0x29)
    );
    // the lock state follows PREVENT
    assert_eq!(complete(&lu, &[0x1E, 0, 0, 0, 1, 0]).status, 0);
    let d = complete(&lu, &[0x5A, 0, 0x3F, 0, 0, 0, 0, 0, 255, 0]).data;
    assert_eq!(d[14] & 0x02, 0x02);
    assert_eq!(
        check(&complete(&lu, &[0x5A, 0, 0x08, 0, 0, 0, 0, 0, 255, 0])),
        (5, 0x24, 0)
    );
    // MODE SENSE(6), as Linux's sr driver asks: a 4-byte header, the same page
    let d6 = complete(&lu, &[0x1A, 0, 0x2A, 0, 128, 0]).data;
    assert_eq!(&d6[..4], &[25, 0, 0, 0]);
    assert_eq!(&d6[4..], &d[8..]);
}
