//! A medium changer's elements and what they hold, with tgt's way of describing them
//! (tgtadm `--params element_type=…,start_address=…,quantity=…` adds elements,
//! `address=…,barcode=…` puts a cartridge in a slot, `address=…,tid=…,lun=…` binds a data
//! transfer element to a tape drive LUN, `media_home=DIR` is where the tapes named by
//! their barcodes live), the moves, and the state as text (saved by the server, restored
//! at start). Pure data: no I/O.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Element types (SMC-3 table 9; tgt's `element_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Medium transport (the robot's picker), 1.
    Transport,
    /// Storage (a slot), 2.
    Storage,
    /// Import/export (the mail slot), 3.
    ImportExport,
    /// Data transfer (a tape drive), 4.
    Drive,
}

impl Kind {
    pub fn code(self) -> u8 {
        match self {
            Kind::Transport => 1,
            Kind::Storage => 2,
            Kind::ImportExport => 3,
            Kind::Drive => 4,
        }
    }

    pub fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::Transport,
            2 => Kind::Storage,
            3 => Kind::ImportExport,
            4 => Kind::Drive,
            _ => return None,
        })
    }

    /// In the order READ ELEMENT STATUS reports them and the Element Address Assignment
    /// page lists them.
    pub const ALL: [Kind; 4] = [
        Kind::Transport,
        Kind::Storage,
        Kind::ImportExport,
        Kind::Drive,
    ];
}

/// The tape drive LUN a data transfer element is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriveRef {
    pub tid: u32,
    pub lun: u64,
}

/// One element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    pub kind: Kind,
    /// The cartridge's barcode (volume tag) when full.
    pub cartridge: Option<String>,
    /// Where the cartridge came from (SVALID and SOURCE STORAGE ELEMENT ADDRESS).
    pub source: Option<u16>,
    /// A data transfer element's drive.
    pub drive: Option<DriveRef>,
}

/// The library: its elements by address, and the directory of its tapes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Library {
    pub media_home: Option<String>,
    pub elements: BTreeMap<u16, Element>,
    /// The transport can turn a cartridge over (tgt's `sides` > 1 on element type 1).
    pub rotate: bool,
}

/// Why tgtadm's `--params` were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown changer parameter {0:?}")]
    Unknown(String),
    #[error("bad value for {0}: {1:?}")]
    Value(&'static str, String),
    #[error("element_type is required (1 transport, 2 storage, 3 import/export, 4 data transfer)")]
    NoType,
    #[error("start_address needs a quantity of at least 1")]
    NoQuantity,
    #[error("elements {start}..{end} overlap element {at}")]
    Overlap { start: u32, end: u32, at: u16 },
    #[error("element addresses end at 65535")]
    Range,
    #[error("no element of type {kind} at address {address}")]
    NoElement { kind: u8, address: u16 },
    #[error("a data transfer element is bound with tid= and lun=")]
    NoDrive,
    #[error("barcode {0:?}: 1 to 32 printable characters, no '/'")]
    Barcode(String),
}

fn num<T: std::str::FromStr>(key: &'static str, v: &str) -> Result<T, ConfigError> {
    v.trim()
        .parse()
        .map_err(|_| ConfigError::Value(key, v.to_string()))
}

/// A barcode may name a file in the media home.
pub fn valid_barcode(b: &str) -> bool {
    !b.is_empty()
        && b.len() <= 32
        && b.bytes().all(|c| c.is_ascii_graphic() && c != b'/')
        && b != "."
        && b != ".."
}

/// One `--params` request, gathered before it is applied (its keys may come in any order).
#[derive(Debug, Default)]
struct Request {
    kind: Option<u8>,
    start: Option<u32>,
    quantity: Option<u32>,
    address: Option<u32>,
    barcode: Option<String>,
    tid: Option<u32>,
    lun: Option<u64>,
    sides: Option<u32>,
}

/// What a configuration request changed (for the server: load a drive, save the state).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Configured {
    /// A data transfer element was bound to this drive and holds this cartridge: load it.
    pub load: Option<(DriveRef, String)>,
    /// Accepted without a change, and why (for the log).
    pub note: Option<String>,
}

impl Library {
    /// Applies tgt's `--params` keys of one request. Nothing changes when it is refused.
    /// An element range that exists already, the same, and a cartridge put where it is
    /// already, are accepted as they are (a configuration replayed after a restart meets
    /// the restored state).
    pub fn configure(&mut self, pairs: &[(&str, &str)]) -> Result<Configured, ConfigError> {
        let mut r = Request::default();
        let mut home = None;
        for &(k, v) in pairs {
            match k {
                "element_type" => r.kind = Some(num("element_type", v)?),
                "start_address" => r.start = Some(num("start_address", v)?),
                "quantity" => r.quantity = Some(num("quantity", v)?),
                "address" => r.address = Some(num("address", v)?),
                "barcode" => r.barcode = Some(v.to_string()),
                "tid" => r.tid = Some(num("tid", v)?),
                "lun" => r.lun = Some(num("lun", v)?),
                "sides" => r.sides = Some(num("sides", v)?),
                "media_home" => home = Some(v.to_string()),
                // tgt prints its slots to its debug log
                "dump" | "type" => {}
                other => return Err(ConfigError::Unknown(other.to_string())),
            }
        }
        let mut next = self.clone();
        if let Some(h) = home {
            next.media_home = Some(h);
        }
        let mut done = Configured::default();
        let kind = r.kind;
        if let Some(start) = r.start {
            let kind = kind.and_then(Kind::from_code).ok_or(ConfigError::NoType)?;
            let quantity = r
                .quantity
                .filter(|&q| q > 0)
                .ok_or(ConfigError::NoQuantity)?;
            next.add(kind, start, quantity)?;
        } else if let Some(address) = r.address {
            let kind = kind.and_then(Kind::from_code).ok_or(ConfigError::NoType)?;
            let address = u16::try_from(address).map_err(|_| ConfigError::Range)?;
            done = next.set(kind, address, &r)?;
        } else if kind == Some(Kind::Transport.code()) {
            if let Some(s) = r.sides {
                next.rotate = s > 1;
            }
        } else if r.kind.is_some() || r.quantity.is_some() || r.barcode.is_some() {
            return Err(ConfigError::NoType);
        }
        *self = next;
        Ok(done)
    }

    fn add(&mut self, kind: Kind, start: u32, quantity: u32) -> Result<(), ConfigError> {
        let end = start
            .checked_add(quantity)
            .filter(|&e| e <= 0x1_0000 && start > 0)
            .ok_or(ConfigError::Range)?;
        // the same range again (a configuration replayed after a restart): exactly one
        // run of elements of this type, no more, no less
        let is_kind = |a: u32| {
            u16::try_from(a)
                .ok()
                .and_then(|a| self.elements.get(&a))
                .is_some_and(|e| e.kind == kind)
        };
        if (start..end).all(is_kind) && !is_kind(start.wrapping_sub(1)) && !is_kind(end) {
            return Ok(());
        }
        if let Some((&at, _)) = self.elements.range(start as u16..=(end - 1) as u16).next() {
            return Err(ConfigError::Overlap { start, end, at });
        }
        for a in start..end {
            self.elements.insert(
                a as u16,
                Element {
                    kind,
                    cartridge: None,
                    source: None,
                    drive: None,
                },
            );
        }
        Ok(())
    }

    fn set(&mut self, kind: Kind, address: u16, r: &Request) -> Result<Configured, ConfigError> {
        let where_is = |b: &str, lib: &Library| {
            lib.elements
                .iter()
                .find(|(_, e)| e.cartridge.as_deref() == Some(b))
                .map(|(&a, _)| a)
        };
        let missing = ConfigError::NoElement {
            kind: kind.code(),
            address,
        };
        match kind {
            Kind::Transport => {
                if self.elements.get(&address).is_none_or(|e| e.kind != kind) {
                    return Err(missing);
                }
                if let Some(s) = r.sides {
                    self.rotate = s > 1;
                }
                Ok(Configured::default())
            }
            Kind::Storage | Kind::ImportExport => {
                let barcode = r.barcode.clone().unwrap_or_default();
                if !valid_barcode(&barcode) {
                    return Err(ConfigError::Barcode(barcode));
                }
                match where_is(&barcode, self) {
                    Some(a) if a == address => return Ok(Configured::default()),
                    // moved since the configuration was written (the saved state put it
                    // there): it stays where it is
                    Some(a) if self.elements.get(&address).is_some_and(|e| e.kind == kind) => {
                        return Ok(Configured {
                            load: None,
                            note: Some(format!(
                                "barcode {barcode} is at element {a}: left there, \
                                 element {address} unchanged"
                            )),
                        });
                    }
                    _ => {}
                }
                let e = self
                    .elements
                    .get_mut(&address)
                    .filter(|e| e.kind == kind)
                    .ok_or(missing)?;
                e.cartridge = Some(barcode);
                e.source = None;
                Ok(Configured::default())
            }
            Kind::Drive => {
                let (Some(tid), Some(lun)) = (r.tid, r.lun) else {
                    return Err(ConfigError::NoDrive);
                };
                let e = self
                    .elements
                    .get_mut(&address)
                    .filter(|e| e.kind == kind)
                    .ok_or(missing)?;
                let drive = DriveRef { tid, lun };
                e.drive = Some(drive);
                Ok(Configured {
                    load: e.cartridge.clone().map(|b| (drive, b)),
                    note: None,
                })
            }
        }
    }

    /// The first address and the number of the elements of `kind` (the Element Address
    /// Assignment page).
    pub fn span(&self, kind: Kind) -> (u16, u16) {
        let mut it = self.elements.iter().filter(|(_, e)| e.kind == kind);
        let first = it.next().map_or(0, |(&a, _)| a);
        let n = self.elements.values().filter(|e| e.kind == kind).count();
        (first, u16::try_from(n).unwrap_or(u16::MAX))
    }

    /// The drives of the data transfer elements.
    pub fn drives(&self) -> Vec<DriveRef> {
        self.elements.values().filter_map(|e| e.drive).collect()
    }

    /// The configuration that makes this library again, as tgt's `--params` strings: the
    /// media home, the element ranges, the transport's sides, the drives' LUNs, and the
    /// cartridges of the slots (a cartridge in a drive is put back at the slot it came
    /// from when that slot is empty).
    pub fn to_params(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(h) = &self.media_home {
            out.push(format!("media_home={h}"));
        }
        let mut run: Option<(Kind, u16, u32)> = None;
        for (&a, e) in &self.elements {
            match &mut run {
                Some((k, start, n)) if *k == e.kind && u32::from(*start) + *n == u32::from(a) => {
                    *n += 1;
                }
                _ => {
                    if let Some((k, start, n)) = run.take() {
                        out.push(format!(
                            "element_type={},start_address={start},quantity={n}",
                            k.code()
                        ));
                    }
                    run = Some((e.kind, a, 1));
                }
            }
        }
        if let Some((k, start, n)) = run {
            out.push(format!(
                "element_type={},start_address={start},quantity={n}",
                k.code()
            ));
        }
        if self.rotate
            && let Some((a, _)) = self
                .elements
                .iter()
                .find(|(_, e)| e.kind == Kind::Transport)
        {
            out.push(format!("element_type=1,address={a},sides=2"));
        }
        for (a, e) in &self.elements {
            if let Some(d) = e.drive {
                out.push(format!(
                    "element_type=4,address={a},tid={},lun={}",
                    d.tid, d.lun
                ));
            }
        }
        for (&a, e) in &self.elements {
            let Some(b) = &e.cartridge else { continue };
            let at = match e.kind {
                Kind::Storage | Kind::ImportExport => Some((e.kind, a)),
                _ => e.source.and_then(|s| {
                    self.elements
                        .get(&s)
                        .filter(|h| {
                            h.cartridge.is_none()
                                && matches!(h.kind, Kind::Storage | Kind::ImportExport)
                        })
                        .map(|h| (h.kind, s))
                }),
            };
            if let Some((k, a)) = at {
                out.push(format!("element_type={},address={a},barcode={b}", k.code()));
            }
        }
        out
    }

    /// The state as text, one element per line: `ADDRESS TYPE [full BARCODE [from
    /// SOURCE]] [drive TID LUN]`, after a `media_home PATH` line.
    pub fn to_text(&self) -> String {
        let mut s = String::from("numatgt-changer 1\n");
        if let Some(h) = &self.media_home {
            let _ = writeln!(s, "media_home {h}");
        }
        if self.rotate {
            s.push_str("rotate\n");
        }
        for (a, e) in &self.elements {
            let _ = write!(s, "{a} {}", e.kind.code());
            if let Some(b) = &e.cartridge {
                let _ = write!(s, " full {b}");
                if let Some(src) = e.source {
                    let _ = write!(s, " from {src}");
                }
            }
            if let Some(d) = e.drive {
                let _ = write!(s, " drive {} {}", d.tid, d.lun);
            }
            s.push('\n');
        }
        s
    }

    /// The state [`to_text`](Self::to_text) wrote. `None`: not that format.
    pub fn from_text(text: &str) -> Option<Library> {
        let mut lines = text.lines();
        if lines.next()? != "numatgt-changer 1" {
            return None;
        }
        let mut lib = Library::default();
        for line in lines {
            if let Some(h) = line.strip_prefix("media_home ") {
                lib.media_home = Some(h.to_string());
                continue;
            }
            if line == "rotate" {
                lib.rotate = true;
                continue;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            let address: u16 = w.first()?.parse().ok()?;
            let kind = Kind::from_code(w.get(1)?.parse().ok()?)?;
            let mut e = Element {
                kind,
                cartridge: None,
                source: None,
                drive: None,
            };
            let mut i = 2;
            while i < w.len() {
                match w[i] {
                    "full" => {
                        let b = *w.get(i + 1)?;
                        valid_barcode(b).then_some(())?;
                        e.cartridge = Some(b.to_string());
                        i += 2;
                    }
                    "from" => {
                        e.source = Some(w.get(i + 1)?.parse().ok()?);
                        i += 2;
                    }
                    "drive" => {
                        e.drive = Some(DriveRef {
                            tid: w.get(i + 1)?.parse().ok()?,
                            lun: w.get(i + 2)?.parse().ok()?,
                        });
                        i += 3;
                    }
                    _ => return None,
                }
            }
            lib.elements.insert(address, e);
        }
        Some(lib)
    }

    /// The cartridges of `saved` put back where they were, into the elements that exist
    /// now and are empty, unless the cartridge is elsewhere already (a restart: the
    /// configuration makes the elements again, the saved state says what they hold).
    pub fn fill_from(&mut self, saved: &Library) {
        for (a, s) in &saved.elements {
            let Some(b) = &s.cartridge else { continue };
            if self
                .elements
                .values()
                .any(|e| e.cartridge.as_ref() == Some(b))
            {
                continue;
            }
            if let Some(e) = self
                .elements
                .get_mut(a)
                .filter(|e| e.kind == s.kind && e.cartridge.is_none())
            {
                e.cartridge = Some(b.clone());
                e.source = s.source;
            }
        }
    }
}

/// A move the server carries out: the drives to unload and load, then
/// [`Library::commit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub src: u16,
    pub dst: u16,
    pub barcode: String,
    /// The source is a drive: take the tape out of it.
    pub unload: Option<DriveRef>,
    /// The destination is a drive: put the tape (`media_home/barcode`) in.
    pub load: Option<DriveRef>,
}

impl Library {
    /// Checks MOVE MEDIUM from `src` to `dst` (SMC-3 6.6).
    pub fn plan(&self, src: u16, dst: u16, invert: bool) -> Result<Move, crate::Sense> {
        use crate::sense::key::ILLEGAL_REQUEST;
        let bad_address = crate::Sense::new(ILLEGAL_REQUEST, 0x21, 0x01);
        let s = self.elements.get(&src).ok_or(bad_address)?;
        let d = self.elements.get(&dst).ok_or(bad_address)?;
        if s.kind == Kind::Transport || d.kind == Kind::Transport {
            // the picker holds nothing between commands
            return Err(bad_address);
        }
        if invert && !self.rotate {
            return Err(crate::Sense::invalid_field_in_cdb(10, Some(0)));
        }
        let Some(barcode) = s.cartridge.clone() else {
            return Err(crate::Sense::new(ILLEGAL_REQUEST, 0x3B, 0x0E));
        };
        if d.cartridge.is_some() && src != dst {
            return Err(crate::Sense::new(ILLEGAL_REQUEST, 0x3B, 0x0D));
        }
        let unbound = crate::Sense::new(crate::sense::key::NOT_READY, 0x04, 0x03);
        let drive_of = |e: &Element| -> Result<Option<DriveRef>, crate::Sense> {
            match (e.kind, e.drive) {
                (Kind::Drive, None) => Err(unbound),
                (Kind::Drive, d) => Ok(d),
                _ => Ok(None),
            }
        };
        Ok(Move {
            src,
            dst,
            barcode,
            unload: drive_of(s)?,
            load: drive_of(d)?,
        })
    }

    /// The move done: the cartridge is at its destination, which remembers where it came
    /// from.
    pub fn commit(&mut self, m: &Move) {
        if m.src == m.dst {
            return;
        }
        let from_slot = self.elements.get(&m.src).and_then(|e| {
            if e.kind == Kind::Drive {
                e.source
            } else {
                Some(m.src)
            }
        });
        if let Some(s) = self.elements.get_mut(&m.src) {
            s.cartridge = None;
            s.source = None;
        }
        if let Some(d) = self.elements.get_mut(&m.dst) {
            d.cartridge = Some(m.barcode.clone());
            d.source = from_slot;
        }
    }
}
