//! `Model`: what a LUN must hold, byte for byte, after a sequence of pattern writes (every
//! write fills a sector-aligned range with one byte), plus which write last touched each sector,
//! so a mismatch can name the write whose data went missing.

use std::fmt::Write as _;

/// The sector size every model works in (the LUNs under test use 512-byte blocks).
pub const SECTOR: u64 = 512;

/// One run of equal bytes in the model: `off..off+len` all hold `pat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub off: u64,
    pub len: u64,
    pub pat: u8,
}

/// The expected content of a LUN.
#[derive(Clone)]
pub struct Model {
    data: Vec<u8>,
    /// Per sector: 0 = never written, else 1 + index into `tags`.
    last: Vec<u32>,
    tags: Vec<String>,
}

fn idx(v: u64) -> usize {
    usize::try_from(v).expect("offset fits usize")
}

impl Model {
    /// A LUN of `size` bytes of zeros (a fresh sparse file).
    pub fn new(size: u64) -> Model {
        assert!(size % SECTOR == 0, "model size {size} is not whole sectors");
        Model {
            data: vec![0; idx(size)],
            last: vec![0; idx(size / SECTOR)],
            tags: Vec::new(),
        }
    }

    pub fn size(&self) -> u64 {
        self.data.len() as u64
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Records `write -P pat off len`; `tag` names the write in failure reports.
    pub fn write(&mut self, off: u64, len: u64, pat: u8, tag: String) {
        assert!(
            off % SECTOR == 0 && len % SECTOR == 0 && len > 0,
            "model write {off}+{len} is not sector aligned"
        );
        assert!(
            off + len <= self.size(),
            "model write {off}+{len} past the end"
        );
        self.data[idx(off)..idx(off + len)].fill(pat);
        self.tags.push(tag);
        let t = u32::try_from(self.tags.len()).expect("fewer than 2^32 writes");
        self.last[idx(off / SECTOR)..idx((off + len) / SECTOR)].fill(t);
    }

    /// The byte at `off`.
    pub fn at(&self, off: u64) -> u8 {
        self.data[idx(off)]
    }

    /// The write that last touched the sector holding `off`, or "never written".
    pub fn last_writer(&self, off: u64) -> &str {
        match self.last[idx(off / SECTOR)] {
            0 => "never written (zeros of the sparse file)",
            t => &self.tags[t as usize - 1],
        }
    }

    /// The runs of equal bytes that make up `off..off+len`, in order.
    pub fn runs(&self, off: u64, len: u64) -> Vec<Run> {
        let mut out: Vec<Run> = Vec::new();
        let d = &self.data[idx(off)..idx(off + len)];
        let mut start = 0usize;
        for i in 1..=d.len() {
            if i == d.len() || d[i] != d[start] {
                out.push(Run {
                    off: off + start as u64,
                    len: (i - start) as u64,
                    pat: d[start],
                });
                start = i;
            }
        }
        out
    }

    /// Compares `got` (the bytes of `base..base+got.len()`) with the model. None when equal;
    /// else a report of the mismatching runs (first few in full) that names, for each, the
    /// expected and found bytes and the write that last touched it.
    pub fn compare(&self, got: &[u8], base: u64) -> Option<String> {
        let want = &self.data[idx(base)..idx(base) + got.len()];
        mismatch_report(want, got, base, |off| self.last_writer(off).to_string())
    }
}

/// A report of where `got` differs from `want` (both starting at byte `base` of the LUN), or
/// None. `who` names the write responsible for an offset.
pub fn mismatch_report(
    want: &[u8],
    got: &[u8],
    base: u64,
    who: impl Fn(u64) -> String,
) -> Option<String> {
    assert_eq!(want.len(), got.len(), "compare lengths");
    let mut bad_bytes = 0u64;
    let mut bad_sectors = 0u64;
    let mut runs: Vec<(u64, u64)> = Vec::new(); // (start, len) of differing byte runs
    let mut last_bad_sector = u64::MAX;
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w == g {
            continue;
        }
        let off = base + i as u64;
        bad_bytes += 1;
        if off / SECTOR != last_bad_sector {
            bad_sectors += 1;
            last_bad_sector = off / SECTOR;
        }
        match runs.last_mut() {
            Some((s, l)) if *s + *l == off => *l += 1,
            _ => runs.push((off, 1)),
        }
    }
    if runs.is_empty() {
        return None;
    }
    let mut r = format!(
        "{bad_bytes} byte(s) in {bad_sectors} sector(s) differ, in {} run(s); first runs:",
        runs.len()
    );
    for (s, l) in runs.iter().take(6) {
        let i = idx(s - base);
        let mut found: Vec<u8> = got[i..i + idx(*l)].to_vec();
        found.sort_unstable();
        found.dedup();
        let found: Vec<String> = found.iter().take(4).map(|b| format!("{b:#04x}")).collect();
        let _ = write!(
            r,
            "\n  bytes {s}..{} (sector {}, {} bytes): expected {:#04x}, found {}; last write \
             there: {}",
            s + l,
            s / SECTOR,
            l,
            want[i],
            found.join("/"),
            who(*s)
        );
    }
    Some(r)
}
