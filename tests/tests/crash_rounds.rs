//! Crash consistency (issue 15): numatgtd is SIGKILLed at a random moment while a session
//! writes (random ranges and patterns, some with FUA, a SYNCHRONIZE CACHE every few writes),
//! many rounds, with the write cache on and off. After each kill the backing file is checked
//! sector by sector against a model of what the initiator was told:
//! - a write acknowledged with the write cache off, a FUA write, and every write acknowledged
//!   before the last completed SYNCHRONIZE CACHE must be there, unless a later write to the
//!   same sector was sent (acknowledged or not), whose data may be there instead;
//! - nothing else may appear (no zeros where data was made durable, no torn sector).
//!
//! Then the daemon restarts on the same file and the next round begins from what is on disk.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tests::pdu::ScsiSession;
use tests::{Daemon, LunSpec, MIB};

const SECTOR: usize = 512;
const LUN_SIZE: u64 = 4 * MIB;
/// Kills per mode (`NUMATGT_CRASH_ROUNDS` for a longer run).
fn rounds_wanted() -> usize {
    std::env::var("NUMATGT_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(8)
}

/// Per sector: the value that must survive, and values sent since that may replace it.
struct Model {
    durable: Vec<u8>,
    since: Vec<Vec<u8>>,
}

impl Model {
    fn from_disk(bytes: &[u8]) -> Model {
        Model {
            durable: bytes.chunks(SECTOR).map(|c| c[0]).collect(),
            since: vec![Vec::new(); bytes.len() / SECTOR],
        }
    }

    /// A write of `pat` to sectors `r` is about to be sent.
    fn sent(&mut self, r: std::ops::Range<usize>, pat: u8) {
        for s in r {
            self.since[s].push(pat);
        }
    }

    /// That write was acknowledged as durable (WCE=0 or FUA): it is the new floor.
    fn durable(&mut self, r: std::ops::Range<usize>, pat: u8) {
        for s in r {
            self.durable[s] = pat;
            self.since[s].clear();
        }
    }

    /// A SYNCHRONIZE CACHE completed: every acknowledged write is durable. `pending` holds
    /// every write acknowledged since the last one, durable or not, in order (so a FUA write
    /// that followed a cached write to the same sector still wins).
    fn synced(&mut self, pending: &mut Vec<(std::ops::Range<usize>, u8)>) {
        for (r, pat) in pending.drain(..) {
            self.durable(r, pat);
        }
    }

    /// The first sector of `disk` that breaks the rules, with what was allowed.
    fn check(&self, disk: &[u8]) -> Option<String> {
        for (s, c) in disk.chunks(SECTOR).enumerate() {
            let v = c[0];
            if c.iter().any(|&b| b != v) {
                return Some(format!("sector {s} is torn: {:02x?}...", &c[..16]));
            }
            if v != self.durable[s] && !self.since[s].contains(&v) {
                return Some(format!(
                    "sector {s} holds {v:#04x}; allowed: {:#04x} (durable) or {:02x?} (sent since)",
                    self.durable[s], self.since[s]
                ));
            }
        }
        None
    }
}

fn write10(lba: usize, blocks: usize, fua: bool) -> [u8; 10] {
    let l = (lba as u32).to_be_bytes();
    let n = (blocks as u16).to_be_bytes();
    [
        0x2a,
        if fua { 0x08 } else { 0 },
        l[0],
        l[1],
        l[2],
        l[3],
        0,
        n[0],
        n[1],
        0,
    ]
}

const SYNC10: [u8; 10] = [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// Counts of one mode's rounds.
#[derive(Default, Debug)]
struct Tally {
    writes_acked: u64,
    fua_acked: u64,
    syncs_acked: u64,
    sectors_checked: u64,
}

fn rounds(wce: bool) -> Tally {
    let seed: u64 = std::env::var("NUMATGT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("crash rounds, write cache {wce}: seed {seed} (NUMATGT_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut d = Daemon::start(&[LunSpec::new(1, SECTOR as u32, LUN_SIZE).with_write_cache(wce)]);
    let sectors = LUN_SIZE as usize / SECTOR;
    let mut tally = Tally::default();
    let wanted = rounds_wanted();
    for round in 0..wanted {
        let disk = std::fs::read(d.lun_path(1)).expect("LUN file");
        let mut model = Model::from_disk(&disk);
        let mut pending: Vec<(std::ops::Range<usize>, u8)> = Vec::new();
        let mut s = ScsiSession::open(&d, "iqn.2026-11.org.numatgt:crash");
        // the kill comes 30..400 ms into the round, from another thread
        let delay = Duration::from_millis(rng.gen_range(30..400));
        let pid = d.pid();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            tests::daemon::send_signal(pid, libc::SIGKILL);
        });
        let t0 = Instant::now();
        let mut n = 0u32;
        loop {
            n += 1;
            let result = if n % 7 == 0 {
                s.try_command(&SYNC10, &[], Duration::from_secs(5))
                    .map(|(st, _)| (st, None))
            } else {
                let len = rng.gen_range(1..=64usize);
                let first = rng.gen_range(0..=sectors - len);
                let pat: u8 = rng.gen_range(1..=255);
                let fua = rng.gen_bool(0.2);
                model.sent(first..first + len, pat);
                let data = vec![pat; len * SECTOR];
                s.try_command(&write10(first, len, fua), &data, Duration::from_secs(5))
                    .map(|(st, _)| (st, Some((first..first + len, pat, fua))))
            };
            match result {
                Ok((0, Some((r, pat, fua)))) => {
                    tally.writes_acked += 1;
                    if fua || !wce {
                        tally.fua_acked += u64::from(fua);
                        model.durable(r.clone(), pat);
                    }
                    pending.push((r, pat));
                }
                Ok((0, None)) => {
                    tally.syncs_acked += 1;
                    model.synced(&mut pending);
                }
                Ok((status, _)) => panic!(
                    "round {round}: command refused with status {status:#x} before the kill\n{}",
                    d.log_tail(20)
                ),
                Err(_) => break, // the target is gone
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "round {round}: the target was not killed"
            );
        }
        killer.join().expect("killer thread");
        let st = d.kill9();
        assert!(
            st.is_some_and(|s| !s.success()),
            "round {round}: the daemon was not killed: {st:?}"
        );
        let disk = std::fs::read(d.lun_path(1)).expect("LUN file after the kill");
        if let Some(why) = model.check(&disk) {
            panic!(
                "round {round} (seed {seed}, write cache {wce}): after kill -9 {why}\n{}",
                d.log_tail(20)
            );
        }
        tally.sectors_checked += sectors as u64;
        d.respawn();
    }
    let (st, _) = d.terminate(Duration::from_secs(30));
    assert!(
        st.is_some_and(|s| s.success()),
        "clean stop at the end: {st:?}"
    );
    eprintln!("crash rounds, write cache {wce}: {wanted} kills, {tally:?}, 0 lost");
    assert!(
        tally.writes_acked > wanted as u64 * 5,
        "too few writes before the kills: {tally:?}"
    );
    tally
}

#[test]
fn kill9_during_writes_with_write_cache_on() {
    let t = rounds(true);
    assert!(t.syncs_acked > 0 && t.fua_acked > 0, "{t:?}");
}

#[test]
fn kill9_during_writes_with_write_cache_off() {
    rounds(false);
}
