//! I_T nexus identity (SAM-5 4.7, SPC-4 7.6.4.6, RFC 7143 10.1): the initiator port name
//! `InitiatorName + ",i,0x" + ISID` (12 hex digits), the target port name
//! `TargetName + ",t,0x" + TPGT` (4 hex digits), the server's compact numeric [`NexusId`],
//! and the iSCSI TransportID (format 00b device name, format 01b initiator port) used by
//! PERSISTENT RESERVE IN READ FULL STATUS and PERSISTENT RESERVE OUT REGISTER AND MOVE.
//!
//! iSCSI names are compared case-insensitively (RFC 3722 stringprep folds case), so the
//! port names kept here are lower-cased once at construction.

use std::fmt::Write as _;

/// The server's numeric handle of an I_T nexus (one iSCSI session to one target portal
/// group). Unique among the nexuses the server currently has on a logical unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NexusId(pub u64);

/// Identity of one I_T nexus. Build it once per session ([`Nexus::iscsi`]) and pass it with
/// every command ([`crate::LogicalUnit::execute_nexus`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nexus {
    /// The server's compact id.
    pub id: NexusId,
    /// `iqn…,i,0x<isid>`, lower case.
    initiator_port: String,
    /// `iqn…,t,0x<tpgt>`, lower case.
    target_port: String,
    /// The relative target port identifier of the port the session came through, when
    /// several gateways serve the target as one (0: the logical unit's own, the single
    /// gateway's case): the same initiator port through two gateways is two I_T nexuses.
    rel_port: u16,
}

/// Protocol identifier of iSCSI in TransportIDs (SPC-4 table 362).
const PROTO_ISCSI: u8 = 0x05;
/// Longest iSCSI name (RFC 7143 6.1).
pub const MAX_ISCSI_NAME: usize = 223;

impl Nexus {
    /// The nexus of an iSCSI session: initiator name and ISID (low 48 bits used) of the
    /// session, target name and target portal group tag of the portal it logged in through.
    pub fn iscsi(
        id: NexusId,
        initiator_name: &str,
        isid: u64,
        target_name: &str,
        tpgt: u16,
    ) -> Self {
        let mut initiator_port = initiator_name.to_ascii_lowercase();
        let _ = write!(initiator_port, ",i,0x{:012x}", isid & 0xFFFF_FFFF_FFFF);
        let mut target_port = target_name.to_ascii_lowercase();
        let _ = write!(target_port, ",t,0x{tpgt:04x}");
        Nexus {
            id,
            initiator_port,
            target_port,
            rel_port: 0,
        }
    }

    /// The nexus as seen through relative target port `rel_port` of a target that
    /// several gateways serve (each gateway one target port; 0 leaves it unspecified).
    pub fn at_relative_port(mut self, rel_port: u16) -> Self {
        self.rel_port = rel_port;
        self
    }

    /// A nexus with no name, used by [`crate::LogicalUnit::execute`] for callers that do
    /// not track nexuses yet.
    pub(crate) fn anonymous() -> Self {
        Nexus {
            id: NexusId(u64::MAX),
            initiator_port: String::new(),
            target_port: String::new(),
            rel_port: 0,
        }
    }

    /// SCSI initiator port name (`InitiatorName,i,0xISID`), lower case.
    pub fn initiator_port_name(&self) -> &str {
        &self.initiator_port
    }

    /// SCSI target port name (`TargetName,t,0xTPGT`), lower case.
    pub fn target_port_name(&self) -> &str {
        &self.target_port
    }

    /// The identity persistent reservations key registrations on.
    pub(crate) fn key(&self) -> PortPair {
        PortPair {
            initiator: self.initiator_port.clone(),
            target: self.target_port.clone(),
            rel_port: self.rel_port,
        }
    }
}

/// Something that names one I_T nexus: compared against registrations without building a
/// [`PortPair`] (no allocation on the I/O path).
pub(crate) trait Ident {
    fn is(&self, p: &PortPair) -> bool;
}

impl Ident for PortPair {
    fn is(&self, p: &PortPair) -> bool {
        self == p
    }
}

impl Ident for Nexus {
    fn is(&self, p: &PortPair) -> bool {
        p.initiator == self.initiator_port
            && p.target == self.target_port
            && p.rel_port == self.rel_port
    }
}

/// (initiator port name, target port name): an I_T nexus independent of the session that
/// carries it, as registrations remember it across logouts and restarts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PortPair {
    pub initiator: String,
    pub target: String,
    /// Relative target port identifier (0: the logical unit's own port).
    pub rel_port: u16,
}

impl PortPair {
    /// The relative target port identifier to report: the nexus's own, else `own`.
    pub fn rel_port_or(&self, own: u16) -> u16 {
        if self.rel_port == 0 {
            own
        } else {
            self.rel_port
        }
    }
}

/// iSCSI TransportID, format 01b (initiator port): name `,i,0x` ISID, NUL terminated,
/// padded to a multiple of four bytes (SPC-4 7.6.4.6).
pub(crate) fn transport_id(initiator_port: &str) -> Vec<u8> {
    let name_len = initiator_port.len() + 1;
    let padded = name_len.div_ceil(4) * 4;
    let mut t = Vec::with_capacity(4 + padded);
    t.push(0x40 | PROTO_ISCSI);
    t.push(0);
    t.extend_from_slice(&u16::try_from(padded).unwrap_or(u16::MAX).to_be_bytes());
    t.extend_from_slice(initiator_port.as_bytes());
    t.resize(4 + padded, 0);
    t
}

/// Why a TransportID was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportIdError {
    /// Shorter than its header or its additional length says.
    Truncated,
    /// Not iSCSI, not format 01b, or a malformed name; the byte offset of the bad field.
    Invalid(usize),
}

/// Parses an iSCSI initiator-port TransportID (format 01b) at the start of `b`; returns the
/// lower-cased initiator port name and the TransportID's total length. Format 00b (a
/// device name, i.e. every port of the initiator) is refused: REGISTER AND MOVE needs one
/// I_T nexus.
pub(crate) fn parse_transport_id(b: &[u8]) -> Result<(String, usize), TransportIdError> {
    let hdr = b.get(..4).ok_or(TransportIdError::Truncated)?;
    if hdr[0] != 0x40 | PROTO_ISCSI {
        return Err(TransportIdError::Invalid(0));
    }
    let len = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
    if len < 20 || len % 4 != 0 {
        return Err(TransportIdError::Invalid(2));
    }
    let body = b.get(4..4 + len).ok_or(TransportIdError::Truncated)?;
    let end = body
        .iter()
        .position(|&c| c == 0)
        .ok_or(TransportIdError::Invalid(4))?;
    let name = std::str::from_utf8(&body[..end]).map_err(|_| TransportIdError::Invalid(4))?;
    // "<name>,i,0x<12 hex digits>"
    let (iname, isid) = name
        .rsplit_once(",i,0x")
        .or_else(|| name.rsplit_once(",I,0X"))
        .ok_or(TransportIdError::Invalid(4))?;
    if iname.is_empty()
        || iname.len() > MAX_ISCSI_NAME
        || isid.len() != 12
        || !isid.bytes().all(|c| c.is_ascii_hexdigit())
    {
        return Err(TransportIdError::Invalid(4));
    }
    Ok((name.to_ascii_lowercase(), 4 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names() {
        let n = Nexus::iscsi(
            NexusId(3),
            "iqn.2007-10.com.Example:Init",
            0x0002_3d00_0001,
            "iqn.2026-11.org.numatgt:t1",
            1,
        );
        assert_eq!(
            n.initiator_port_name(),
            "iqn.2007-10.com.example:init,i,0x00023d000001"
        );
        assert_eq!(n.target_port_name(), "iqn.2026-11.org.numatgt:t1,t,0x0001");
    }

    #[test]
    fn transport_id_round_trip() {
        let name = "iqn.a:b,i,0x00023d000001";
        let t = transport_id(name);
        assert_eq!(t[0], 0x45);
        assert_eq!(t.len() % 4, 0);
        assert_eq!(usize::from(u16::from_be_bytes([t[2], t[3]])), t.len() - 4);
        assert_eq!(parse_transport_id(&t), Ok((name.to_string(), t.len())));
        assert_eq!(
            parse_transport_id(&t[..t.len() - 1]),
            Err(TransportIdError::Truncated)
        );
        let mut dev = t.clone();
        dev[0] = 0x05;
        assert_eq!(parse_transport_id(&dev), Err(TransportIdError::Invalid(0)));
        assert!(parse_transport_id(&transport_id("iqn.a:b")).is_err());
    }
}
