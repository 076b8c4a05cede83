//! The tape in a tape drive: its position and the SSC-3 semantics of reading, writing,
//! spacing and locating over tgt's tape file format ([`super::format`]). The file itself is
//! reached through [`TapeMedium`], which the server implements (pread/pwrite/fdatasync on
//! the image file); tests use [`MemTape`]. The drive is driven by one thread at a time (the
//! server runs a drive's commands in arrival order).
//!
//! Position: before the record whose header is [`Cartridge::cur`] (the EOD header at end
//! of data). Logical object identifiers count data blocks and filemarks from 0.
//!
//! Buffered mode 1 (as the mode parameter header says): WRITE is GOOD once its record is in
//! the file; WRITE FILEMARKS with IMMED = 0, REWIND, ERASE and unloading make everything
//! written durable (fdatasync) first.

use std::io;

use super::format::{self, FIRST_RECORD, HEADER_LEN, Header, MAM_LEN, Mam};
use crate::sense::{Sense, key, stream};

/// The image file of a tape.
pub trait TapeMedium: Send {
    /// Reads exactly `buf.len()` bytes at `off`.
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `parts` one after the other from `off`.
    fn write_at(&mut self, off: u64, parts: &[&[u8]]) -> io::Result<()>;
    /// Makes what was written durable.
    fn sync(&mut self) -> io::Result<()>;
    /// The file can be written (it was opened read-write).
    fn writable(&self) -> bool;
}

/// A tape image in memory (tests, and a tape made before it is written out).
#[derive(Clone, Debug, Default)]
pub struct MemTape {
    pub bytes: Vec<u8>,
    pub syncs: u32,
    pub read_only: bool,
}

impl TapeMedium for MemTape {
    fn read_at(&mut self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let at = usize::try_from(off).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let src = at
            .checked_add(buf.len())
            .and_then(|end| self.bytes.get(at..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_at(&mut self, off: u64, parts: &[&[u8]]) -> io::Result<()> {
        let mut at = usize::try_from(off).map_err(|_| io::ErrorKind::InvalidInput)?;
        for p in parts {
            let end = at + p.len();
            if self.bytes.len() < end {
                self.bytes.resize(end, 0);
            }
            self.bytes[at..end].copy_from_slice(p);
            at = end;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.syncs += 1;
        Ok(())
    }

    fn writable(&self) -> bool {
        !self.read_only
    }
}

/// Why a file is not a tape.
#[derive(Debug, thiserror::Error)]
pub enum BadTape {
    #[error("cannot read the tape image: {0}")]
    Io(#[from] io::Error),
    #[error("not a tgt tape image: {0}")]
    Format(&'static str),
}

/// Sense data of the drive.
pub mod sense {
    use super::*;
    pub const BLANK_CHECK: u8 = 0x8;
    pub const VOLUME_OVERFLOW: u8 = 0xD;
    /// END-OF-DATA DETECTED.
    pub const END_OF_DATA: Sense = Sense::new(BLANK_CHECK, 0x00, 0x05);
    /// FILEMARK DETECTED.
    pub const FILEMARK: Sense = Sense::new(key::NO_SENSE, 0x00, 0x01).with_stream(stream::FILEMARK);
    /// BEGINNING-OF-PARTITION/MEDIUM DETECTED.
    pub const BEGINNING: Sense = Sense::new(key::NO_SENSE, 0x00, 0x04).with_stream(stream::EOM);
    /// END-OF-PARTITION/MEDIUM DETECTED (early warning).
    pub const EARLY_WARNING: Sense = Sense::new(key::NO_SENSE, 0x00, 0x02).with_stream(stream::EOM);
    /// VOLUME OVERFLOW, END-OF-PARTITION/MEDIUM DETECTED: the record does not fit.
    pub const OVERFLOW: Sense = Sense::new(VOLUME_OVERFLOW, 0x00, 0x02).with_stream(stream::EOM);
    /// An incorrect length block.
    pub const INCORRECT_LENGTH: Sense =
        Sense::new(key::NO_SENSE, 0x00, 0x00).with_stream(stream::ILI);
    /// MEDIUM FORMAT CORRUPTED: a header that does not link where it should.
    pub const FORMAT_CORRUPTED: Sense = Sense::new(key::MEDIUM_ERROR, 0x31, 0x00);
    /// UNRECOVERED READ ERROR.
    pub const READ_ERROR: Sense = Sense::new(key::MEDIUM_ERROR, 0x11, 0x00);
    /// WRITE ERROR.
    pub const WRITE_ERROR: Sense = Sense::new(key::MEDIUM_ERROR, 0x0C, 0x00);
    /// WORM MEDIUM - OVERWRITE ATTEMPTED.
    pub const WORM_OVERWRITE: Sense = Sense::new(key::DATA_PROTECT, 0x30, 0x0C);
    /// CLEANING CARTRIDGE INSTALLED.
    pub const CLEANING: Sense = Sense::new(key::NOT_READY, 0x30, 0x03);
    /// SEQUENTIAL POSITIONING ERROR.
    pub const POSITIONING_ERROR: Sense = Sense::new(key::MEDIUM_ERROR, 0x3B, 0x00);
}

/// A signed residue in the 32-bit INFORMATION field.
fn residue(v: i64) -> u64 {
    u64::from(v as i32 as u32)
}

/// What a command did: its Data-In and, when it ended short or hit something, the sense
/// (CHECK CONDITION with the data that was transferred).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    pub data: Vec<u8>,
    pub sense: Option<Sense>,
}

impl Done {
    fn good() -> Done {
        Done::default()
    }

    fn check(sense: Sense) -> Done {
        Done {
            data: Vec::new(),
            sense: Some(sense),
        }
    }
}

impl From<Sense> for Done {
    fn from(s: Sense) -> Done {
        Done::check(s)
    }
}

/// A loaded tape.
pub struct Cartridge {
    io: Box<dyn TapeMedium>,
    /// The header at the current position.
    cur: Header,
    /// Filemarks before the position (the logical file identifier).
    file: u64,
    /// Bytes the records may take (the file offset of the last possible header).
    capacity: u64,
    /// From here on, writes report early warning.
    early_warning: u64,
    mam: Mam,
    write_protected: bool,
    /// Written since the last sync.
    dirty: bool,
}

/// Bytes before the end of the medium where early warning starts: 1/16 of the capacity,
/// at most 32 MiB.
fn early_warning_zone(capacity: u64) -> u64 {
    (capacity / 16).min(32 << 20)
}

impl Cartridge {
    /// Reads the beginning of tape, the MAM and the first record's header of `io`, and
    /// positions at the beginning.
    pub fn open(mut io: Box<dyn TapeMedium>) -> Result<Cartridge, BadTape> {
        let mut h = [0u8; HEADER_LEN];
        io.read_at(0, &mut h)
            .map_err(|_| BadTape::Format("shorter than a tape header"))?;
        let bot = Header::decode(&h);
        if bot.blk_type != format::kind::BOT || bot.next != FIRST_RECORD {
            return Err(BadTape::Format("no beginning-of-tape header at offset 0"));
        }
        let mut m = [0u8; MAM_LEN];
        io.read_at(HEADER_LEN as u64, &mut m)
            .map_err(|_| BadTape::Format("shorter than its medium auxiliary memory"))?;
        let mam = Mam::decode(&m);
        if mam.format_version != format::FORMAT_VERSION {
            return Err(BadTape::Format("tape format version is not 2"));
        }
        let capacity = if mam.max_capacity > 0 {
            mam.max_capacity
        } else {
            u64::from(bot.blk_sz) << 20
        };
        let first = read_header(io.as_mut(), FIRST_RECORD)
            .map_err(|_| BadTape::Format("the first record's header is unreadable"))?;
        if !first.consistent(FIRST_RECORD) || first.blk_num != 1 || first.prev != 0 {
            return Err(BadTape::Format("the first record's header does not link"));
        }
        let write_protected = !io.writable() || mam.medium_type == format::medium::CLEANING;
        Ok(Cartridge {
            io,
            cur: first,
            file: 0,
            capacity,
            early_warning: capacity.saturating_sub(early_warning_zone(capacity)),
            mam,
            write_protected,
            dirty: false,
        })
    }

    /// The MAM (barcode, capacity, type).
    pub fn mam(&self) -> &Mam {
        &self.mam
    }

    pub fn write_protected(&self) -> bool {
        self.write_protected
    }

    /// The logical object identifier of the position.
    pub fn object(&self) -> u64 {
        self.cur.object()
    }

    /// Filemarks before the position.
    pub fn file(&self) -> u64 {
        self.file
    }

    /// At the beginning of the partition.
    pub fn at_bop(&self) -> bool {
        self.cur.blk_num == 1
    }

    /// At end of data.
    pub fn at_eod(&self) -> bool {
        self.cur.is_eod()
    }

    /// Between early warning and the end of the medium.
    pub fn beyond_early_warning(&self) -> bool {
        self.cur.curr >= self.early_warning
    }

    /// The position as the image holds it: its header's offset and the filemarks before it
    /// (for a new process to go on from, [`Cartridge::go_to`]).
    pub fn place(&self) -> (u64, u64) {
        (self.cur.curr, self.file)
    }

    /// Positions at the header at `offset` with `file` filemarks before it, a place
    /// [`Cartridge::place`] gave for this image; refused (nothing moves) when no record
    /// header of this image is there.
    pub fn go_to(&mut self, offset: u64, file: u64) -> Result<(), Sense> {
        if offset < FIRST_RECORD || offset > self.capacity {
            return Err(sense::FORMAT_CORRUPTED);
        }
        let h = read_header(self.io.as_mut(), offset).map_err(|_| sense::FORMAT_CORRUPTED)?;
        if !h.consistent(offset) || h.blk_type == format::kind::BOT || h.blk_num == 0 {
            return Err(sense::FORMAT_CORRUPTED);
        }
        if file >= h.blk_num {
            return Err(sense::FORMAT_CORRUPTED);
        }
        self.cur = h;
        self.file = file;
        Ok(())
    }

    /// Gives the image back (after a final sync).
    pub fn into_medium(mut self) -> (Box<dyn TapeMedium>, io::Result<()>) {
        let r = self.sync();
        (self.io, r)
    }

    /// Makes what was written durable.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.dirty {
            self.io.sync()?;
            self.dirty = false;
        }
        Ok(())
    }

    fn sync_or_sense(&mut self) -> Result<(), Sense> {
        self.sync().map_err(|_| sense::WRITE_ERROR)
    }

    fn step_next(&mut self) -> Result<(), Sense> {
        let at = self.cur.next;
        let h = read_header(self.io.as_mut(), at).map_err(|_| sense::FORMAT_CORRUPTED)?;
        if !h.consistent(at) || h.blk_num != self.cur.blk_num + 1 || h.prev != self.cur.curr {
            return Err(sense::FORMAT_CORRUPTED);
        }
        if self.cur.is_filemark() {
            self.file += 1;
        }
        self.cur = h;
        Ok(())
    }

    fn step_prev(&mut self) -> Result<(), Sense> {
        let at = self.cur.prev;
        let h = read_header(self.io.as_mut(), at).map_err(|_| sense::FORMAT_CORRUPTED)?;
        if !h.consistent(at) || h.blk_num + 1 != self.cur.blk_num || h.next != self.cur.curr {
            return Err(sense::FORMAT_CORRUPTED);
        }
        if h.is_filemark() {
            self.file = self.file.saturating_sub(1);
        }
        self.cur = h;
        Ok(())
    }

    /// REWIND: durable, then at the beginning.
    pub fn rewind(&mut self) -> Result<(), Sense> {
        self.sync_or_sense()?;
        let first =
            read_header(self.io.as_mut(), FIRST_RECORD).map_err(|_| sense::FORMAT_CORRUPTED)?;
        if !first.consistent(FIRST_RECORD) || first.blk_num != 1 {
            return Err(sense::FORMAT_CORRUPTED);
        }
        self.cur = first;
        self.file = 0;
        Ok(())
    }

    /// READ(6) in variable-block mode: one record of up to `len` bytes. `sili`: a shorter
    /// record is not an error (nor a longer one when `block_len` is 0).
    pub fn read_variable(&mut self, len: u32, sili: bool, block_len: u32) -> Done {
        if len == 0 {
            return Done::good();
        }
        let h = self.cur;
        if h.is_eod() {
            return sense::END_OF_DATA.with_info(u64::from(len)).into();
        }
        if h.is_filemark() {
            if let Err(s) = self.step_next() {
                return s.into();
            }
            return sense::FILEMARK.with_info(u64::from(len)).into();
        }
        let take = len.min(h.ondisk_sz);
        let mut data = vec![0u8; take as usize];
        if self
            .io
            .read_at(h.curr + HEADER_LEN as u64, &mut data)
            .is_err()
        {
            return sense::READ_ERROR.into();
        }
        if let Err(s) = self.step_next() {
            return s.into();
        }
        let short = h.ondisk_sz < len;
        let long = h.ondisk_sz > len;
        let quiet = sili && (short || (long && block_len == 0));
        let sense = ((short || long) && !quiet).then(|| {
            sense::INCORRECT_LENGTH.with_info(residue(i64::from(len) - i64::from(h.ondisk_sz)))
        });
        Done { data, sense }
    }

    /// READ(6) in fixed-block mode: `count` records of `block_len` bytes each.
    pub fn read_fixed(&mut self, count: u32, block_len: u32) -> Done {
        let mut data = Vec::new();
        for i in 0..count {
            let left = u64::from(count - i);
            let h = self.cur;
            if h.is_eod() {
                return Done {
                    data,
                    sense: Some(sense::END_OF_DATA.with_info(left)),
                };
            }
            if h.is_filemark() {
                let s = match self.step_next() {
                    Ok(()) => sense::FILEMARK.with_info(left),
                    Err(s) => s,
                };
                return Done {
                    data,
                    sense: Some(s),
                };
            }
            if h.ondisk_sz != block_len {
                let s = match self.step_next() {
                    Ok(()) => sense::INCORRECT_LENGTH.with_info(left),
                    Err(s) => s,
                };
                return Done {
                    data,
                    sense: Some(s),
                };
            }
            let at = data.len();
            data.resize(at + block_len as usize, 0);
            if self
                .io
                .read_at(h.curr + HEADER_LEN as u64, &mut data[at..])
                .is_err()
            {
                data.truncate(at);
                return Done {
                    data,
                    sense: Some(sense::READ_ERROR),
                };
            }
            if let Err(s) = self.step_next() {
                return Done {
                    data,
                    sense: Some(s),
                };
            }
        }
        Done { data, sense: None }
    }

    /// Whether a write may start here.
    fn check_write(&self) -> Result<(), Sense> {
        if self.mam.medium_type == format::medium::CLEANING {
            return Err(sense::CLEANING);
        }
        if self.write_protected {
            return Err(Sense::write_protected());
        }
        if self.mam.medium_type == format::medium::WORM && !self.cur.is_eod() {
            return Err(sense::WORM_OVERWRITE);
        }
        Ok(())
    }

    /// Writes one record (`blk_type`) here; what followed is gone. `Ok(false)`: it does
    /// not fit before the end of the medium.
    fn append(&mut self, blk_type: u32, data: &[u8]) -> Result<bool, Sense> {
        let len = u32::try_from(data.len()).map_err(|_| sense::OVERFLOW)?;
        let at = self.cur.curr;
        let next = at + HEADER_LEN as u64 + u64::from(len);
        if next + HEADER_LEN as u64 > self.capacity {
            return Ok(false);
        }
        let rec = Header {
            ondisk_sz: len,
            blk_sz: len,
            blk_type,
            blk_num: self.cur.blk_num,
            prev: self.cur.prev,
            curr: at,
            next,
        };
        let eod = Header::eod(next, at, self.cur.blk_num + 1);
        // the data and the new end of data first, then the header that links them: a
        // crash in between leaves the old end of data where it was
        self.dirty = true;
        let eod_bytes = eod.encode();
        self.io
            .write_at(at + HEADER_LEN as u64, &[data, &eod_bytes])
            .map_err(|_| sense::WRITE_ERROR)?;
        self.io
            .write_at(at, &[&rec.encode()])
            .map_err(|_| sense::WRITE_ERROR)?;
        if blk_type == format::kind::FILEMARK {
            self.file += 1;
        }
        self.cur = eod;
        Ok(true)
    }

    fn early_warning_now(&self) -> Option<Sense> {
        self.beyond_early_warning()
            .then_some(sense::EARLY_WARNING.with_info(0))
    }

    /// WRITE(6): `data` as one record (variable mode, `block_len` = None) or as records of
    /// `block_len` bytes.
    pub fn write(&mut self, data: &[u8], block_len: Option<u32>) -> Done {
        if let Err(s) = self.check_write() {
            return s.into();
        }
        if data.is_empty() {
            return Done::good();
        }
        let size = block_len.map_or(data.len(), |b| b as usize).max(1);
        let records = data.len().div_ceil(size);
        for (i, rec) in data.chunks(size).enumerate() {
            match self.append(format::kind::UNCOMPRESSED_DATA, rec) {
                Ok(true) => {}
                Ok(false) => {
                    let left = if block_len.is_some() {
                        (records - i) as u64
                    } else {
                        data.len() as u64
                    };
                    return sense::OVERFLOW.with_info(left).into();
                }
                Err(s) => return s.into(),
            }
        }
        Done {
            data: Vec::new(),
            sense: self.early_warning_now(),
        }
    }

    /// WRITE FILEMARKS(6): `count` filemarks; without `immed`, everything written is durable
    /// before the answer (a count of 0 only does that).
    pub fn write_filemarks(&mut self, count: u32, immed: bool) -> Done {
        if count > 0 {
            if let Err(s) = self.check_write() {
                return s.into();
            }
            for i in 0..count {
                match self.append(format::kind::FILEMARK, &[]) {
                    Ok(true) => {}
                    Ok(false) => return sense::OVERFLOW.with_info(u64::from(count - i)).into(),
                    Err(s) => return s.into(),
                }
            }
        }
        if !immed && let Err(s) = self.sync_or_sense() {
            return s.into();
        }
        Done {
            data: Vec::new(),
            sense: if count > 0 {
                self.early_warning_now()
            } else {
                None
            },
        }
    }

    /// ERASE(6): end of data here; what followed is gone.
    pub fn erase(&mut self) -> Done {
        if let Err(s) = self.check_write() {
            return s.into();
        }
        let eod = Header::eod(self.cur.curr, self.cur.prev, self.cur.blk_num);
        self.dirty = true;
        if self.io.write_at(eod.curr, &[&eod.encode()]).is_err() {
            return sense::WRITE_ERROR.into();
        }
        self.cur = eod;
        match self.sync_or_sense() {
            Ok(()) => Done::good(),
            Err(s) => s.into(),
        }
    }

    /// SPACE(6) over `count` blocks (negative: towards the beginning).
    pub fn space_blocks(&mut self, count: i64) -> Done {
        let n = count.unsigned_abs();
        for i in 0..n {
            let left = n - i;
            let r = if count > 0 {
                if self.cur.is_eod() {
                    return sense::END_OF_DATA.with_info(left).into();
                }
                let fm = self.cur.is_filemark();
                self.step_next().and_then(|()| {
                    if fm {
                        Err(sense::FILEMARK.with_info(left))
                    } else {
                        Ok(())
                    }
                })
            } else {
                if self.at_bop() {
                    return sense::BEGINNING.with_info(left).into();
                }
                self.step_prev().and_then(|()| {
                    if self.cur.is_filemark() {
                        // stop on the beginning side of the filemark
                        Err(sense::FILEMARK.with_info(left))
                    } else {
                        Ok(())
                    }
                })
            };
            if let Err(s) = r {
                return s.into();
            }
        }
        Done::good()
    }

    /// SPACE(6) over `count` filemarks (negative: towards the beginning, ending on the
    /// beginning side of the last one crossed).
    pub fn space_filemarks(&mut self, count: i64) -> Done {
        let mut left = count.unsigned_abs();
        while left > 0 {
            let r = if count > 0 {
                if self.cur.is_eod() {
                    return sense::END_OF_DATA.with_info(left).into();
                }
                let fm = self.cur.is_filemark();
                let r = self.step_next();
                if fm {
                    left -= 1;
                }
                r
            } else {
                if self.at_bop() {
                    return sense::BEGINNING.with_info(left).into();
                }
                let r = self.step_prev();
                if self.cur.is_filemark() {
                    left -= 1;
                }
                r
            };
            if let Err(s) = r {
                return s.into();
            }
        }
        Done::good()
    }

    /// SPACE(6) to end of data.
    pub fn space_to_eod(&mut self) -> Done {
        while !self.cur.is_eod() {
            if let Err(s) = self.step_next() {
                return s.into();
            }
        }
        Done::good()
    }

    /// LOCATE to logical object `object`; beyond the end of data it stops there with BLANK
    /// CHECK.
    pub fn locate(&mut self, object: u64) -> Done {
        let here = self.object();
        if object < here && object < here - object {
            if let Err(s) = self.rewind() {
                return s.into();
            }
        }
        while self.object() > object {
            if let Err(s) = self.step_prev() {
                return s.into();
            }
        }
        while self.object() < object {
            if self.cur.is_eod() {
                return sense::END_OF_DATA.into();
            }
            if let Err(s) = self.step_next() {
                return s.into();
            }
        }
        Done::good()
    }
}

fn read_header(io: &mut dyn TapeMedium, at: u64) -> io::Result<Header> {
    let mut h = [0u8; HEADER_LEN];
    io.read_at(at, &mut h)?;
    Ok(Header::decode(&h))
}
