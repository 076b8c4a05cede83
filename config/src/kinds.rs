//! The small closed sets of words tgt uses for targets and LUNs: the
//! transport (`iscsi`/`iser`), a target's state, a LUN's sense format,
//! backing-store type and open flags, each with its parser and spelling.

/// The transport a target is exported over (tgtadm `--lld`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Driver {
    /// `iscsi`: iSCSI over TCP.
    #[default]
    Iscsi,
    /// `iser`: iSCSI Extensions for RDMA.
    Iser,
}

impl Driver {
    /// Every transport, in the order tgtadm and the metrics list them: a new one added
    /// here is listed everywhere.
    pub const ALL: [Driver; 2] = [Driver::Iscsi, Driver::Iser];

    /// `iscsi` or `iser`.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Iscsi => "iscsi",
            Driver::Iser => "iser",
        }
    }

    /// Parses `iscsi` / `iser` (any case).
    pub fn parse(text: &str) -> Option<Driver> {
        Driver::ALL
            .into_iter()
            .find(|d| text.trim().eq_ignore_ascii_case(d.as_str()))
    }
}

/// A target's state (tgtadm `--op update --mode target -n state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TargetState {
    /// `ready`: serves initiators.
    #[default]
    Ready,
    /// `offline`: logins are refused (Target Error, service unavailable).
    Offline,
}

impl TargetState {
    /// `ready` or `offline`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Ready => "ready",
            TargetState::Offline => "offline",
        }
    }

    /// Parses `ready` / `offline` (any case).
    pub fn parse(text: &str) -> Option<TargetState> {
        [TargetState::Ready, TargetState::Offline]
            .into_iter()
            .find(|d| text.trim().eq_ignore_ascii_case(d.as_str()))
    }
}

/// The sense data format a LUN reports (tgt's `sense_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SenseFormat {
    /// `fixed` (0): fixed-format sense data (default).
    #[default]
    Fixed,
    /// `descriptor` (1): descriptor-format sense data.
    Descriptor,
}

impl SenseFormat {
    /// `fixed` or `descriptor`.
    pub fn as_str(self) -> &'static str {
        match self {
            SenseFormat::Fixed => "fixed",
            SenseFormat::Descriptor => "descriptor",
        }
    }

    /// Parses `0`/`fixed` or `1`/`descriptor` (any case).
    pub fn parse(text: &str) -> Option<SenseFormat> {
        match text.trim().to_ascii_lowercase().as_str() {
            "0" | "fixed" => Some(SenseFormat::Fixed),
            "1" | "descriptor" => Some(SenseFormat::Descriptor),
            _ => None,
        }
    }
}

/// tgt's backing-store type of a LUN. `rdwr` and `aio` both mean a file or
/// block device served by numatgt's own I/O path (the value is kept for
/// `tgtadm` output); `rbd` is a Ceph RBD image (`path` = `[pool/]image[@snap]`);
/// `null` stores nothing (zeros read, writes dropped; `path` is only a name). Each
/// names one store of the daemon's backing-store table (`cache::store::STORES`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum BsType {
    /// `rdwr` (default): pread/pwrite.
    #[default]
    Rdwr,
    /// `aio`: Linux native AIO in tgtd.
    Aio,
    /// `rbd`: a Ceph RBD image through librbd (loaded at run time).
    Rbd,
    /// `null`: no storage (tgtd's `--bstype null`, the benchmark floor).
    Null,
    /// `mmc`: tgt's name for a CD/DVD image file (the store of `device_type: cd`); a file
    /// read as `rdwr` reads it.
    Mmc,
    /// `ssc`: tgt's tape image file (the store of `device_type: tape`), which the tape
    /// drive reads and writes itself: no block store.
    Ssc,
    /// `smc`: tgt's store of a medium changer (`device_type: changer`): its file keeps the
    /// library's state (what each element holds), no data.
    Smc,
    /// `sg`: a real local SCSI device through its SCSI generic node (`/dev/sgN`), passed
    /// through (the store of `device_type: pt`).
    Sg,
    /// `bsg`: a real local SCSI device through its block SCSI generic node
    /// (`/dev/bsg/H:C:T:L`), passed through.
    Bsg,
}

impl BsType {
    /// Every type, in the order the documentation lists them.
    pub const ALL: [BsType; 9] = [
        BsType::Rdwr,
        BsType::Aio,
        BsType::Rbd,
        BsType::Null,
        BsType::Mmc,
        BsType::Ssc,
        BsType::Smc,
        BsType::Sg,
        BsType::Bsg,
    ];

    /// `rdwr`, `aio`, `rbd`, `null`, `mmc`, `ssc`, `smc`, `sg` or `bsg`.
    pub fn as_str(self) -> &'static str {
        match self {
            BsType::Rdwr => "rdwr",
            BsType::Aio => "aio",
            BsType::Rbd => "rbd",
            BsType::Null => "null",
            BsType::Mmc => "mmc",
            BsType::Ssc => "ssc",
            BsType::Smc => "smc",
            BsType::Sg => "sg",
            BsType::Bsg => "bsg",
        }
    }

    /// The backing-store template that opens this type (`mmc` is a file: `rdwr`; a tape
    /// image, `ssc`, is no block store: `null` stands in while the drive holds the tape; a
    /// passed-through device, `sg` or `bsg`, neither).
    pub fn store(self) -> &'static str {
        match self {
            BsType::Mmc => "rdwr",
            BsType::Ssc | BsType::Smc | BsType::Sg | BsType::Bsg => "null",
            t => t.as_str(),
        }
    }

    /// Parses `rdwr` / `aio` / `rbd` / `null` / `mmc` / `ssc` / `smc` / `sg` / `bsg` (any
    /// case).
    pub fn parse(text: &str) -> Option<BsType> {
        BsType::ALL
            .into_iter()
            .find(|d| text.trim().eq_ignore_ascii_case(d.as_str()))
    }

    /// The path is a file or block device (absolute; `size:` may create it).
    pub fn is_file(self) -> bool {
        matches!(self, BsType::Rdwr | BsType::Aio | BsType::Mmc)
    }

    /// A real SCSI device passed through: `sg` or `bsg`.
    pub fn is_passthrough(self) -> bool {
        matches!(self, BsType::Sg | BsType::Bsg)
    }

    /// The default type of a device type's LUN: `mmc` for a cd, `ssc` for a tape drive,
    /// `smc` for a changer, `sg` for passthrough, `rdwr` otherwise.
    pub fn default_for(device_type: DeviceType) -> BsType {
        match device_type {
            DeviceType::Disk => BsType::Rdwr,
            DeviceType::Cd => BsType::Mmc,
            DeviceType::Tape => BsType::Ssc,
            DeviceType::Changer => BsType::Smc,
            DeviceType::Passthrough => BsType::Sg,
        }
    }
}

/// tgt's `--device-type`: what kind of SCSI device a LUN is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// `disk` (default): a direct-access block device.
    #[default]
    Disk,
    /// `cd`: a CD/DVD drive with a read-only DVD-ROM disc, the image file (2048-byte blocks,
    /// removable).
    Cd,
    /// `tape`: a tape drive whose tape is a tgt tape image file (`bs_type: ssc`).
    Tape,
    /// `changer`: a medium changer (`bs_type: smc`), the robot of a virtual tape library.
    Changer,
    /// `pt`: a real local SCSI device passed through (`bs_type: sg` or `bsg`); it answers
    /// its commands itself.
    Passthrough,
}

impl DeviceType {
    /// `disk`, `cd`, `tape`, `changer` or `pt`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Disk => "disk",
            DeviceType::Cd => "cd",
            DeviceType::Tape => "tape",
            DeviceType::Changer => "changer",
            DeviceType::Passthrough => "pt",
        }
    }

    /// Parses `disk` / `cd` / `tape` / `changer` / `pt` (any case).
    pub fn parse(text: &str) -> Option<DeviceType> {
        [
            DeviceType::Disk,
            DeviceType::Cd,
            DeviceType::Tape,
            DeviceType::Changer,
            DeviceType::Passthrough,
        ]
        .into_iter()
        .find(|d| text.trim().eq_ignore_ascii_case(d.as_str()))
    }

    /// tgt's code for it on the management wire (`--device-type`): 0 disk, 1 tape, 5 cd,
    /// 8 changer, 255 pt.
    pub fn from_tgt_code(code: u32) -> Option<DeviceType> {
        match code {
            0 => Some(DeviceType::Disk),
            1 => Some(DeviceType::Tape),
            5 => Some(DeviceType::Cd),
            8 => Some(DeviceType::Changer),
            0xFF => Some(DeviceType::Passthrough),
            _ => None,
        }
    }

    /// How tgtadm's `--op show` names it (`Type:`).
    pub fn show_name(self) -> &'static str {
        match self {
            DeviceType::Disk => "disk",
            DeviceType::Cd => "cd/dvd",
            DeviceType::Tape => "tape",
            DeviceType::Changer => "changer",
            DeviceType::Passthrough => "passthrough",
        }
    }
}

/// tgt's `bsoflags`: extra open(2) flags for the backing store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct BsOflags {
    /// `direct`: O_DIRECT.
    pub direct: bool,
    /// `sync`: O_SYNC.
    pub sync: bool,
}

impl BsOflags {
    /// Parses tgt's form: `direct`, `sync`, `sync:direct` (`:` or `,`
    /// separated, any order and case); empty = none.
    pub fn parse(text: &str) -> Result<BsOflags, String> {
        let mut f = BsOflags::default();
        for w in text
            .split([':', ','])
            .map(str::trim)
            .filter(|w| !w.is_empty())
        {
            match w.to_ascii_lowercase().as_str() {
                "direct" => f.direct = true,
                "sync" => f.sync = true,
                _ => {
                    return Err(format!(
                        "unknown flag {w:?} (expected direct, sync or sync:direct)"
                    ));
                }
            }
        }
        Ok(f)
    }

    /// tgt's spelling: `sync:direct`, `direct`, `sync` or an empty string.
    pub fn as_string(self) -> String {
        match (self.sync, self.direct) {
            (true, true) => "sync:direct",
            (true, false) => "sync",
            (false, true) => "direct",
            (false, false) => "",
        }
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(Driver::parse(" ISER "), Some(Driver::Iser));
        assert_eq!(Driver::parse("fc"), None);
        for d in Driver::ALL {
            assert_eq!(Driver::parse(d.as_str()), Some(d));
        }
        assert_eq!(TargetState::parse("Offline"), Some(TargetState::Offline));
        assert_eq!(SenseFormat::parse("1"), Some(SenseFormat::Descriptor));
        assert_eq!(SenseFormat::parse("Fixed"), Some(SenseFormat::Fixed));
        assert_eq!(BsType::parse("AIO"), Some(BsType::Aio));
        assert_eq!(BsType::parse("rbd"), Some(BsType::Rbd));
        assert_eq!(BsType::parse(" Null "), Some(BsType::Null));
        for t in BsType::ALL {
            assert_eq!(BsType::parse(t.as_str()), Some(t));
        }
        assert_eq!(BsType::parse("glfs"), None);
        for t in ["", "direct", "sync", "sync:direct"] {
            assert_eq!(BsOflags::parse(t).map(|f| f.as_string()), Ok(t.to_string()));
        }
        assert_eq!(
            BsOflags::parse("direct,SYNC").map(|f| f.as_string()),
            Ok("sync:direct".to_string())
        );
        assert!(BsOflags::parse("fast").is_err());
    }
}
