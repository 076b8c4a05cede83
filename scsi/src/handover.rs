//! A logical unit's state that outlives its process when the server hands its sessions
//! over to a new executable (live upgrade): the persistent reservations (with or without
//! APTPL) and the SPC-2 reservation, the unit attentions pending per I_T nexus, the
//! initiator ports seen, and the mode parameters initiators changed (WCE, D_SENSE, SWP).
//! The new process takes it before its first nexus is added; a nexus added then with a
//! carried identity gets its carried unit attentions instead of POWER ON OCCURRED, so the
//! initiator of a moved session sees the logical unit as it was.
//!
//! For a removable medium (a removable disk's, a CD/DVD drive's disc) the medium state
//! goes too: in or ejected, the media event not reported yet, and which moving nexuses
//! prevent its removal (each prevents it again once it is added).
//!
//! A tape drive's tape (by barcode), loaded or unloaded, its position and the drive's mode
//! parameters go too; the position is taken up once the server has put the tape in again
//! ([`LogicalUnit::tape_resume`]: where it cannot be, the moved sessions get POWER ON
//! OCCURRED). A changer's elements are in its state file, which the next process reads.
//! A passthrough LU carries what the target keeps for it (reservations, unit attentions);
//! the device keeps its own state.
//!
//! The bytes (big-endian): `"NTHO"`, u16 version (1, or 2 with the medium), u32 length and
//! the persistent reservation state as APTPL stores it (`pr::persist`, with its own
//! checksum), u8 mode bits (WCE 1, D_SENSE 2, SWP 4), u32 count and the initiator ports
//! seen, u32 count and for each moving nexus its port pair, u8 count and its unit
//! attentions (codes of [`UA_CODES`]); version 2 then: u8 medium bits (ejected 1), u8 the
//! media event, u32 count and the port pairs of the moving nexuses that prevent removal;
//! version 3 (a tape drive) then: u8 tape state (0 none, 1 loaded, 2 unloaded), u64 the
//! position's header offset, u64 filemarks before it, u32 block length, u8 density, u8
//! compression, u8 barcode length and the barcode. Port pairs as in `pr::persist`. A
//! logical unit without a removable medium writes version 1, which every numatgtd with
//! live upgrade reads.

use std::sync::atomic::Ordering;

use crate::LogicalUnit;
use crate::mmc::DeviceType;
use crate::nexus::PortPair;
use crate::pr::persist::{Reader, put_pair};
use crate::ssc::TapeIn;
use crate::ua::{UaQueue, UnitAttention};

const MAGIC: &[u8; 4] = b"NTHO";
/// Without the medium section, and with it.
const VERSION: u16 = 1;
const VERSION_MEDIUM: u16 = 2;
/// And a tape drive's section.
const VERSION_TAPE: u16 = 3;
/// Most initiator ports or nexuses one state holds.
const MAX_ENTRIES: usize = 1 << 16;

/// Every unit attention condition, by its code in the bytes (its index).
const UA_CODES: [UnitAttention; 11] = [
    UnitAttention::PowerOnReset,
    UnitAttention::LuReset,
    UnitAttention::NexusLoss,
    UnitAttention::MediumMayHaveChanged,
    UnitAttention::ModeParametersChanged,
    UnitAttention::ReservationsPreempted,
    UnitAttention::ReservationsReleased,
    UnitAttention::RegistrationsPreempted,
    UnitAttention::AsymmetricAccessStateChanged,
    UnitAttention::CapacityChanged,
    UnitAttention::LunsChanged,
];

fn put_count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n.min(u32::MAX as usize) as u32).to_be_bytes());
}

fn count(r: &mut Reader<'_>) -> Result<usize, String> {
    let n = r.u32().map_err(|e| e.to_string())? as usize;
    if n > MAX_ENTRIES {
        return Err(format!("{n} entries"));
    }
    Ok(n)
}

impl LogicalUnit {
    /// The state a new executable goes on with ([`LogicalUnit::resume_state`]), with the
    /// unit attentions of the nexuses in `moving` (those whose sessions move).
    pub fn handover_state(&self, moving: &[crate::NexusId]) -> Vec<u8> {
        let tape = match self.params.device_type {
            DeviceType::Tape => Some(self.tape_carry()),
            _ => None,
        };
        let with_medium = self.removable() || tape.is_some();
        let g = self.shared.lock();
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(MAGIC);
        let version = match (&tape, with_medium) {
            (Some(_), _) => VERSION_TAPE,
            (None, true) => VERSION_MEDIUM,
            (None, false) => VERSION,
        };
        out.extend_from_slice(&version.to_be_bytes());
        let pr = crate::pr::persist::encode(&g.pr, g.seq);
        put_count(&mut out, pr.len());
        out.extend_from_slice(&pr);
        let s = &self.state;
        out.push(
            u8::from(s.wce.load(Ordering::Relaxed))
                | u8::from(s.d_sense.load(Ordering::Relaxed)) << 1
                | u8::from(s.swp.load(Ordering::Relaxed)) << 2,
        );
        let seen: Vec<&PortPair> = g.seen_ports().collect();
        put_count(&mut out, seen.len());
        for p in seen {
            put_pair(&mut out, p);
        }
        let entries: Vec<_> = g
            .nexuses
            .iter()
            .filter(|(id, _)| moving.contains(id))
            .map(|(_, e)| e)
            .collect();
        put_count(&mut out, entries.len());
        for e in entries {
            put_pair(&mut out, &e.ports);
            let uas: Vec<u8> =
                e.ua.iter()
                    .filter_map(|u| UA_CODES.iter().position(|c| *c == u))
                    .map(|i| i as u8)
                    .collect();
            out.push(uas.len() as u8);
            out.extend_from_slice(&uas);
        }
        if with_medium {
            let (ejected, event) = self.medium.carried();
            out.push(u8::from(ejected));
            out.push(event);
            let preventing: Vec<&PortPair> = g
                .nexuses
                .iter()
                .filter(|(id, _)| moving.contains(id) && self.medium.prevents(**id))
                .map(|(_, e)| &e.ports)
                .collect();
            put_count(&mut out, preventing.len());
            for p in preventing {
                put_pair(&mut out, p);
            }
        }
        if let Some(t) = tape {
            let (state, offset, file) = match t.tape {
                TapeIn::Empty => (0u8, 0, 0),
                TapeIn::Loaded { offset, file } => (1, offset, file),
                TapeIn::Unloaded => (2, 0, 0),
            };
            out.push(state);
            out.extend_from_slice(&offset.to_be_bytes());
            out.extend_from_slice(&file.to_be_bytes());
            out.extend_from_slice(&t.block_len.to_be_bytes());
            out.push(t.density);
            out.push(u8::from(t.compression));
            let barcode = &t.barcode.as_bytes()[..t.barcode.len().min(255)];
            out.push(barcode.len() as u8);
            out.extend_from_slice(barcode);
        }
        out
    }

    /// Goes on with `bytes`, the same logical unit's [`LogicalUnit::handover_state`] in
    /// the previous process; call it before the first nexus is added. Reservations shared
    /// through a cluster are not taken (the server reads them where they are kept).
    /// Invalid bytes are refused and change nothing.
    pub fn resume_state(&self, bytes: &[u8]) -> Result<(), String> {
        if bytes.len() < 6 || &bytes[..4] != MAGIC {
            return Err("not a logical unit's handover state".into());
        }
        let version = u16::from_be_bytes([bytes[4], bytes[5]]);
        if !matches!(version, VERSION | VERSION_MEDIUM | VERSION_TAPE) {
            return Err(format!("handover state version {version} is not read here"));
        }
        let is_tape = self.params.device_type == DeviceType::Tape;
        if is_tape != (version == VERSION_TAPE) {
            return Err("the state of another device type".into());
        }
        let mut r = Reader::new(bytes, 6, 3);
        let e = |e: crate::pr::PrStateError| e.to_string();
        let n = r.u32().map_err(e)? as usize;
        let pr_bytes = r.take(n).map_err(e)?;
        let (pr, seq) = crate::pr::persist::decode(pr_bytes).map_err(e)?;
        let [mode] = r.array::<1>().map_err(e)?;
        let mut seen = Vec::new();
        for _ in 0..count(&mut r)? {
            seen.push(r.pair().map_err(e)?);
        }
        let mut carried = Vec::new();
        for _ in 0..count(&mut r)? {
            let p = r.pair().map_err(e)?;
            let [k] = r.array::<1>().map_err(e)?;
            let mut q = UaQueue::default();
            for &c in r.take(usize::from(k)).map_err(e)? {
                q.push(
                    *UA_CODES
                        .get(usize::from(c))
                        .ok_or_else(|| format!("unknown unit attention code {c}"))?,
                );
            }
            carried.push((p, q));
        }
        let mut medium = None;
        if version >= VERSION_MEDIUM {
            let [bits, event] = r.array::<2>().map_err(e)?;
            let mut preventing = Vec::new();
            for _ in 0..count(&mut r)? {
                preventing.push(r.pair().map_err(e)?);
            }
            medium = Some((bits & 1 != 0, event, preventing));
        }
        let mut tape = None;
        if version == VERSION_TAPE {
            let [state] = r.array::<1>().map_err(e)?;
            let offset = u64::from_be_bytes(r.array::<8>().map_err(e)?);
            let file = u64::from_be_bytes(r.array::<8>().map_err(e)?);
            let block_len = u32::from_be_bytes(r.array::<4>().map_err(e)?);
            let [density, compression, n] = r.array::<3>().map_err(e)?;
            let barcode = String::from_utf8(r.take(usize::from(n)).map_err(e)?.to_vec())
                .map_err(|_| "a barcode that is not UTF-8".to_string())?;
            let tape_in = match state {
                0 => TapeIn::Empty,
                1 => TapeIn::Loaded { offset, file },
                2 => TapeIn::Unloaded,
                _ => return Err(format!("tape state {state}")),
            };
            if compression > 1 {
                return Err(format!("tape compression {compression}"));
            }
            tape = Some(crate::ssc::TapeCarry {
                tape: tape_in,
                barcode,
                block_len,
                density,
                compression: compression == 1,
            });
        }
        if !r.at_end() {
            return Err("bytes after the state".into());
        }
        let mut g = self.shared.lock();
        if !g.shared_pr {
            g.pr = pr;
            g.seq = seq;
        }
        for p in seen {
            g.remember_port(p);
        }
        for (p, q) in carried {
            g.remember_port(p.clone());
            g.carry(p, q);
        }
        // the medium as it was, where this logical unit has one to remove
        let medium = medium.filter(|_| self.removable());
        if let Some((_, _, preventing)) = &medium {
            g.carried_preventing.extend(preventing.iter().cloned());
        }
        drop(g);
        if let Some((ejected, event, _)) = medium {
            self.medium.resume(ejected, event);
        }
        if let Some(t) = tape {
            self.tape_carried(t);
        }
        self.state.wce.store(mode & 1 != 0, Ordering::Relaxed);
        self.state.d_sense.store(mode & 2 != 0, Ordering::Relaxed);
        self.state.swp.store(mode & 4 != 0, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::lu;
    use crate::*;

    fn nexus(id: u64, name: &str, isid: u64) -> Nexus {
        Nexus::iscsi(NexusId(id), name, isid, "iqn.2026-11.org.numatgt:t1", 1)
    }

    fn run(lu: &LogicalUnit, n: &Nexus, cdb: &[u8], data_out: &[u8]) -> Completion {
        let cmd = CmdCtx {
            cdb,
            data_out,
            landed: 0,
            luns: &[1],
        };
        match lu.execute_nexus(n, &cmd) {
            Outcome::Action(Action::Complete(c)) => c,
            Outcome::PersistentReserveOut(p) => p.completion,
            other => panic!("{other:?}"),
        }
    }

    /// The sense (key, ASC, ASCQ) of TEST UNIT READY, `None` when GOOD.
    fn first_sense(lu: &LogicalUnit, n: &Nexus) -> Option<(u8, u8, u8)> {
        let c = run(lu, n, &[0; 6], &[]);
        (c.status != 0).then(|| sense::parse_key_asc(&c.sense).expect("sense"))
    }

    fn prout(lu: &LogicalUnit, n: &Nexus, sa: u8, ty: u8, key: u64, sa_key: u64) -> u8 {
        let mut list = [0u8; 24];
        list[..8].copy_from_slice(&key.to_be_bytes());
        list[8..16].copy_from_slice(&sa_key.to_be_bytes());
        run(lu, n, &[0x5F, sa, ty, 0, 0, 0, 0, 0, 24, 0], &list).status
    }

    /// The reservation's key, read through `n` (PERSISTENT RESERVE IN, READ RESERVATION).
    fn reservation_key(lu: &LogicalUnit, n: &Nexus) -> Option<u64> {
        let c = run(lu, n, &[0x5E, 1, 0, 0, 0, 0, 0, 0, 255, 0], &[]);
        let d = c.data;
        (d.len() >= 16 && d[4..8] != [0, 0, 0, 0])
            .then(|| u64::from_be_bytes(d[8..16].try_into().expect("8 bytes")))
    }

    fn caching_page(lu: &LogicalUnit, n: &Nexus) -> Vec<u8> {
        run(lu, n, &[0x1A, 0x08, 0x08, 0, 255, 0], &[]).data
    }

    fn cd() -> LogicalUnit {
        crate::test_util::lu_with(|p| {
            p.device_type = DeviceType::Cd;
            p.block_size = 2048;
            p.num_blocks = 1000;
        })
    }

    const PREVENT: [u8; 6] = [0x1E, 0, 0, 0, 1, 0];
    const EJECT: [u8; 6] = [0x1B, 0, 0, 0, 0x02, 0];

    #[test]
    fn a_cd_goes_on_with_its_disc_in_and_its_removal_prevented() {
        // x prevents the disc's removal, y does not; both sessions move
        let a = cd();
        let (x, y) = (nexus(1, "iqn.x", 1), nexus(2, "iqn.y", 2));
        for n in [&x, &y] {
            a.nexus_added(n);
            for _ in 0..3 {
                if first_sense(&a, n).is_none() {
                    break;
                }
            }
        }
        assert_eq!(run(&a, &x, &PREVENT, &[]).status, 0, "PREVENT");
        let text = a.handover_state(&[x.id, y.id]);
        assert_eq!(text[4..6], [0, 2], "with the medium section");

        let b = cd();
        b.resume_state(&text).expect("resume");
        let (x2, y2) = (nexus(7, "iqn.x", 1), nexus(8, "iqn.y", 2));
        for n in [&x2, &y2] {
            b.nexus_added(n);
            assert_eq!(
                first_sense(&b, n),
                None,
                "no unit attention, the disc is in"
            );
        }
        let c = run(&b, &y2, &EJECT, &[]);
        assert_eq!(
            sense::parse_key_asc(&c.sense),
            Some((5, 0x53, 0x02)),
            "x's prevention goes on: MEDIUM REMOVAL PREVENTED"
        );
        // x's session ends: its prevention with it, and the disc can go
        b.nexus_removed(x2.id);
        assert_eq!(run(&b, &y2, &EJECT, &[]).status, 0, "EJECT");
        let text = b.handover_state(&[y2.id]);

        let c3 = cd();
        c3.resume_state(&text).expect("resume");
        let y3 = nexus(9, "iqn.y", 2);
        c3.nexus_added(&y3);
        assert_eq!(
            first_sense(&c3, &y3),
            Some((2, 0x3A, 0x00)),
            "the disc is still out: MEDIUM NOT PRESENT"
        );
    }

    #[test]
    fn a_passthrough_lu_goes_on_with_what_the_target_keeps_for_it() {
        // the target answers REPORT LUNS and the reservations itself; the rest is the
        // device's, which keeps its own state
        let pt = || crate::test_util::lu_with(|p| p.device_type = DeviceType::Passthrough);
        // PERSISTENT RESERVE IN, READ KEYS: answered here, after the unit attentions
        let read_keys = [0x5E, 0, 0, 0, 0, 0, 0, 0, 64, 0];
        let a = pt();
        let x = nexus(1, "iqn.x", 1);
        a.nexus_added(&x);
        assert_eq!(run(&a, &x, &read_keys, &[]).status, 2, "POWER ON first");
        assert_eq!(run(&a, &x, &read_keys, &[]).status, 0);
        assert_eq!(prout(&a, &x, 0, 0, 0, 0xB1), 0, "REGISTER");
        assert_eq!(prout(&a, &x, 1, 1, 0xB1, 0), 0, "RESERVE");
        let text = a.handover_state(&[x.id]);
        assert_eq!(text[4..6], [0, 1]);
        let b = pt();
        b.resume_state(&text).expect("resume");
        let x2 = nexus(5, "iqn.x", 1);
        b.nexus_added(&x2);
        assert_eq!(run(&b, &x2, &read_keys, &[]).status, 0, "no unit attention");
        assert_eq!(
            reservation_key(&b, &x2),
            Some(0xB1),
            "the reservation holds"
        );
    }

    #[test]
    fn a_disk_without_a_removable_medium_writes_the_first_version() {
        let a = lu();
        let x = nexus(1, "iqn.x", 1);
        a.nexus_added(&x);
        let text = a.handover_state(&[x.id]);
        assert_eq!(
            text[4..6],
            [0, 1],
            "readable by every numatgtd with live upgrade"
        );
    }

    #[test]
    fn a_disk_goes_on_with_its_reservations_attentions_and_mode() {
        // A persistent reservation, a pending unit attention and a mode change made in
        // one process are there in the next: the moved nexus sees no POWER ON, a new one
        // does.
        let a = lu();
        let (x, y) = (nexus(1, "iqn.x", 1), nexus(2, "iqn.y", 2));
        for n in [&x, &y] {
            a.nexus_added(n);
            assert_eq!(first_sense(&a, n), Some((6, 0x29, 0x00)));
            assert_eq!(first_sense(&a, n), None);
        }
        assert_eq!(prout(&a, &x, 0, 0, 0, 0xAA), 0, "REGISTER");
        assert_eq!(prout(&a, &x, 1, 1, 0xAA, 0), 0, "RESERVE, write exclusive");
        let mut page = caching_page(&a, &x);
        page[0] = 0;
        page[2] = 0;
        page[6] &= !0x04;
        let c = run(&a, &x, &[0x15, 0x10, 0, 0, page.len() as u8, 0], &page);
        assert_eq!(c.status, 0, "MODE SELECT: WCE off");
        // y now has MODE PARAMETERS CHANGED pending
        let text = a.handover_state(&[x.id, y.id]);

        let b = lu();
        b.resume_state(&text).expect("resume");
        let (x2, y2, z) = (
            nexus(7, "iqn.x", 1),
            nexus(8, "iqn.y", 2),
            nexus(9, "iqn.z", 3),
        );
        for n in [&x2, &y2, &z] {
            b.nexus_added(n);
        }
        assert_eq!(first_sense(&b, &x2), None, "x: nothing pending");
        assert_eq!(
            first_sense(&b, &y2),
            Some((6, 0x2A, 0x01)),
            "y: mode parameters changed"
        );
        assert_eq!(first_sense(&b, &z), Some((6, 0x29, 0x00)), "z: a new nexus");
        assert_eq!(reservation_key(&b, &x2), Some(0xAA));
        assert_eq!(
            caching_page(&b, &x2)[6] & 0x04,
            0,
            "MODE SELECT's WCE carried"
        );
        // y is no registrant: its write conflicts with x's reservation
        let w = run(&b, &y2, &[0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[0; 512]);
        assert_eq!(w.status, status::RESERVATION_CONFLICT);
    }

    #[test]
    fn bad_handover_state_is_refused_and_changes_nothing() {
        let a = lu();
        let (x, y) = (nexus(1, "iqn.x", 1), nexus(2, "iqn.y", 2));
        a.nexus_added(&x);
        a.nexus_added(&y);
        let good = a.handover_state(&[x.id, y.id]);
        let b = lu();
        // every truncation, a flipped byte in each place, garbage, another version
        for n in 0..good.len() {
            assert!(b.resume_state(&good[..n]).is_err(), "truncated at {n}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(b.resume_state(&longer).is_err());
        let mut v4 = good.clone();
        v4[5] = 4;
        assert!(b.resume_state(&v4).unwrap_err().contains("version"));
        let mut tape = good.clone();
        tape[5] = 3;
        assert!(
            b.resume_state(&tape)
                .unwrap_err()
                .contains("another device type"),
            "a tape drive's state on a disk"
        );
        // a CD's state (version 2, with the medium) too
        let d = cd();
        d.nexus_added(&x);
        for _ in 0..3 {
            if first_sense(&d, &x).is_none() {
                break;
            }
        }
        assert_eq!(run(&d, &x, &PREVENT, &[]).status, 0, "PREVENT");
        let with_medium = d.handover_state(&[x.id]);
        for n in 0..with_medium.len() {
            assert!(
                cd().resume_state(&with_medium[..n]).is_err(),
                "truncated at {n}"
            );
        }
        let mut longer = with_medium.clone();
        longer.push(0);
        assert!(cd().resume_state(&longer).is_err());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = b.resume_state(&bad); // never panics; may be accepted (a UA code)
        }
        let c = lu();
        assert!(c.resume_state(b"GET / HTTP/1.0").is_err());
        let n = nexus(1, "iqn.x", 1);
        c.nexus_added(&n);
        assert_eq!(
            first_sense(&c, &n),
            Some((6, 0x29, 0x00)),
            "nothing was taken"
        );
    }
}
