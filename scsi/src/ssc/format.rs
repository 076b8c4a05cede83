//! tgt's tape image file format, as Debian's `tgtimg` and tgtd write it (observed from their
//! files; documented in `docs/tape-format.md`). Pure bytes: no I/O.
//!
//! A tape file is a doubly linked list of 48-byte block headers, each followed by its
//! data:
//!
//! - offset 0: the beginning-of-tape header (type [`kind::BOT`]; its `blk_sz` holds the
//!   medium's capacity in MiB);
//! - offset 48: the medium auxiliary memory ([`Mam`], 1104 bytes);
//! - offset 1152: the first record's header. Every record (a data block or a filemark) is
//!   a header at `curr` with `ondisk_sz` data bytes after it; `next` = `curr + 48 +
//!   ondisk_sz`, `prev` is the previous header's offset (the first record's is 0, the BOT);
//! - the last header is the end of data ([`kind::EOD`]: no data, `next == curr`).
//!
//! Every integer is big-endian. `blk_num` counts the headers: BOT 0, the first record 1, so
//! a record's logical object identifier (READ POSITION, LOCATE) is `blk_num - 1`. The first
//! four bytes of a header are the CRC32C of its other 44 bytes, little-endian (what tgt
//! writes on x86; tgtd only warns "crc error" when it does not match, and tgt releases
//! before the checksum left whatever their stack held there): written here, not required
//! on reading. Writing at a position turns the header there into the new record and
//! writes a new EOD after it; what lay beyond is unreachable (the file is not truncated).

/// Size of a block header.
pub const HEADER_LEN: usize = 48;
/// Size of the medium auxiliary memory that follows the BOT header.
pub const MAM_LEN: usize = 1104;
/// Offset of the first record's header.
pub const FIRST_RECORD: u64 = (HEADER_LEN + MAM_LEN) as u64;
/// The MAM's `tape_fmt_version` of this format.
pub const FORMAT_VERSION: u32 = 2;

/// Block types (`blk_type`).
pub mod kind {
    pub const UNCOMPRESSED_DATA: u32 = 0x02;
    pub const BOT: u32 = 0x10;
    pub const EOD: u32 = 0x20;
    pub const FILEMARK: u32 = 0x40;
}

/// One block header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Bytes of data stored after the header.
    pub ondisk_sz: u32,
    /// The block's length as written (equal to `ondisk_sz`: tgt never compresses); in the
    /// BOT header, the capacity in MiB.
    pub blk_sz: u32,
    pub blk_type: u32,
    pub blk_num: u64,
    pub prev: u64,
    pub curr: u64,
    pub next: u64,
}

fn be32(b: &[u8], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(v)
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

impl Header {
    pub fn decode(b: &[u8; HEADER_LEN]) -> Header {
        Header {
            ondisk_sz: be32(b, 4),
            blk_sz: be32(b, 8),
            blk_type: be32(b, 12),
            blk_num: be64(b, 16),
            prev: be64(b, 24),
            curr: be64(b, 32),
            next: be64(b, 40),
        }
    }

    /// The header's bytes, its checksum first.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[4..8].copy_from_slice(&self.ondisk_sz.to_be_bytes());
        b[8..12].copy_from_slice(&self.blk_sz.to_be_bytes());
        b[12..16].copy_from_slice(&self.blk_type.to_be_bytes());
        b[16..24].copy_from_slice(&self.blk_num.to_be_bytes());
        b[24..32].copy_from_slice(&self.prev.to_be_bytes());
        b[32..40].copy_from_slice(&self.curr.to_be_bytes());
        b[40..48].copy_from_slice(&self.next.to_be_bytes());
        let crc = crc32c::crc32c(&b[4..]);
        b[0..4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The checksum of header bytes `b` matches (tgt's, and numatgt's).
    pub fn checksum_ok(b: &[u8; HEADER_LEN]) -> bool {
        b[0..4] == crc32c::crc32c(&b[4..]).to_le_bytes()
    }

    /// An end-of-data header at `at`, after the header at `prev`, numbered `blk_num`.
    pub fn eod(at: u64, prev: u64, blk_num: u64) -> Header {
        Header {
            ondisk_sz: 0,
            blk_sz: 0,
            blk_type: kind::EOD,
            blk_num,
            prev,
            curr: at,
            next: at,
        }
    }

    pub fn is_eod(&self) -> bool {
        self.blk_type == kind::EOD
    }

    pub fn is_filemark(&self) -> bool {
        self.blk_type == kind::FILEMARK
    }

    pub fn is_data(&self) -> bool {
        !self.is_eod() && !self.is_filemark() && self.blk_type != kind::BOT
    }

    /// The record's logical object identifier (0 for the first record).
    pub fn object(&self) -> u64 {
        self.blk_num.saturating_sub(1)
    }

    /// Whether the header can be followed: its links point where the format says.
    pub fn consistent(&self, at: u64) -> bool {
        self.curr == at
            && match self.blk_type {
                kind::EOD => self.next == at && self.ondisk_sz == 0,
                kind::FILEMARK => self.next == at + HEADER_LEN as u64 && self.ondisk_sz == 0,
                kind::BOT => at == 0,
                _ => {
                    self.next == at + HEADER_LEN as u64 + u64::from(self.ondisk_sz)
                        && self.ondisk_sz == self.blk_sz
                }
            }
    }
}

/// Media types of the MAM's `medium_type` (tgtimg `--type`).
pub mod medium {
    pub const DATA: u8 = 1;
    pub const CLEANING: u8 = 2;
    pub const WORM: u8 = 6;
}

/// Offsets of the MAM fields this crate reads or writes (C layout of tgt's `struct MAM`).
mod mam_at {
    pub const FORMAT_VERSION: usize = 0;
    pub const REMAINING_CAPACITY: usize = 8;
    pub const MAX_CAPACITY: usize = 16;
    pub const LOAD_COUNT: usize = 32;
    pub const MEDIUM_MANUFACTURER: usize = 256;
    pub const MEDIUM_SERIAL: usize = 264;
    pub const MEDIUM_LENGTH: usize = 296;
    pub const MEDIUM_WIDTH: usize = 300;
    pub const MEDIUM_TYPE: usize = 336;
    pub const APPLICATION_VENDOR: usize = 344;
    pub const BARCODE: usize = 568;
}

/// What the drive uses of the medium auxiliary memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mam {
    pub format_version: u32,
    /// Capacity in bytes.
    pub max_capacity: u64,
    pub medium_type: u8,
    /// The volume's barcode (trailing spaces and NULs removed).
    pub barcode: String,
    pub serial: String,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches(['\0', ' '])
        .to_string()
}

impl Mam {
    pub fn decode(b: &[u8; MAM_LEN]) -> Mam {
        use mam_at::*;
        Mam {
            format_version: be32(b, FORMAT_VERSION),
            max_capacity: be64(b, MAX_CAPACITY),
            medium_type: b[MEDIUM_TYPE],
            barcode: text(&b[BARCODE..BARCODE + 32]),
            serial: text(&b[MEDIUM_SERIAL..MEDIUM_SERIAL + 32]),
        }
    }
}

/// A new, empty tape of `size_mib` MiB with `barcode`, as `tgtimg --op new --device-type
/// tape` makes it (`serial_suffix` is the number tgtimg appends to the barcode: its clock).
pub fn new_image(barcode: &str, size_mib: u32, medium_type: u8, serial_suffix: u64) -> Vec<u8> {
    use mam_at::*;
    let mut f = vec![0u8; FIRST_RECORD as usize + HEADER_LEN];
    let bot = Header {
        ondisk_sz: 0,
        blk_sz: size_mib,
        blk_type: kind::BOT,
        blk_num: 0,
        prev: 0,
        curr: 0,
        next: FIRST_RECORD,
    };
    f[..HEADER_LEN].copy_from_slice(&bot.encode());
    let m = &mut f[HEADER_LEN..HEADER_LEN + MAM_LEN];
    let bytes = u64::from(size_mib) << 20;
    m[FORMAT_VERSION..FORMAT_VERSION + 4].copy_from_slice(&self::FORMAT_VERSION.to_be_bytes());
    m[REMAINING_CAPACITY..REMAINING_CAPACITY + 8].copy_from_slice(&bytes.to_be_bytes());
    m[MAX_CAPACITY..MAX_CAPACITY + 8].copy_from_slice(&bytes.to_be_bytes());
    m[LOAD_COUNT..LOAD_COUNT + 8].copy_from_slice(&0u64.to_be_bytes());
    m[MEDIUM_MANUFACTURER..MEDIUM_MANUFACTURER + 8].copy_from_slice(b"NUMATGT ");
    let serial = format!("{barcode}_{serial_suffix}");
    let sb = serial.as_bytes();
    let n = sb.len().min(32);
    m[MEDIUM_SERIAL..MEDIUM_SERIAL + n].copy_from_slice(&sb[..n]);
    m[MEDIUM_LENGTH..MEDIUM_LENGTH + 4].copy_from_slice(&384u32.to_be_bytes());
    m[MEDIUM_WIDTH..MEDIUM_WIDTH + 4].copy_from_slice(&127u32.to_be_bytes());
    m[MEDIUM_TYPE] = medium_type;
    m[APPLICATION_VENDOR..APPLICATION_VENDOR + 8].copy_from_slice(b"NUMATGT ");
    let mut code = [b' '; 32];
    let bb = barcode.as_bytes();
    let n = bb.len().min(32);
    code[..n].copy_from_slice(&bb[..n]);
    m[BARCODE..BARCODE + 32].copy_from_slice(&code);
    let eod = Header::eod(FIRST_RECORD, 0, 1);
    f[FIRST_RECORD as usize..].copy_from_slice(&eod.encode());
    f
}
