//! RDMA CM private data (RFC 7145 §9.1 iSER CM REQ / REP, as Linux ib_iser uses it): four
//! bytes `{flags, reserved[3]}` in the initiator's connection request and in the target's
//! accept. In the request, flag 0x80 says the initiator does not support zero-based
//! virtual addresses (ZBVA) and 0x40 that it does not support Send with Invalidate; Linux
//! always sends both. In the accept, the same bits say the target will not use them.
//!
//! Transports pad private data with zeros (InfiniBand CM REQ carries a fixed-size blob),
//! so bytes after the first four are ignored.

/// Request flag: the initiator does not support zero-based virtual addresses.
pub const ZBVA_NOT_SUPPORTED: u8 = 0x80;
/// Request flag: the initiator does not support Send with Invalidate.
pub const SEND_W_INV_NOT_SUPPORTED: u8 = 0x40;
/// Accept flag: the target will not use zero-based virtual addresses.
pub const ZBVA_NOT_USED: u8 = 0x80;
/// Accept flag: the target will not use Send with Invalidate.
pub const SEND_W_INV_NOT_USED: u8 = 0x40;
/// Flag bits with no meaning in RFC 7145; a request with any of them set is not iSER.
pub const RESERVED_FLAGS: u8 = 0x3f;
/// Length of the iSER CM message.
pub const CM_PRIVATE_LEN: usize = 4;

/// The iSER part of an initiator's connection request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    /// The raw flags byte (0 when the request carried no private data).
    pub flags: u8,
    /// The request carried iSER private data at all.
    pub present: bool,
}

/// What a connection uses, decided at connect time from the request and the target's
/// capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Advertised buffers are zero-based offsets rather than virtual addresses. The
    /// planning arithmetic is the same (base + offset); only the meaning of `va` changes.
    pub zbva: bool,
    /// The target may answer with Send with Invalidate (remote invalidation of the
    /// initiator's STag). Sending one the initiator did not agree to kills the connection.
    pub send_with_invalidate: bool,
}

/// Private data that is not an iSER CM request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// Flag bits that RFC 7145 reserves are set: some other protocol's private data.
    #[error("CM private data flags {0:#04x} set reserved bits (not an iSER connection request)")]
    ReservedFlags(u8),
    /// The reserved bytes after the flags are not zero.
    #[error(
        "CM private data reserved bytes {0:02x?} are not zero (not an iSER connection request)"
    )]
    ReservedBytes([u8; 3]),
}

impl CmRequest {
    /// Parses a connection request's private data. Missing data (empty) is tolerated as
    /// "no flags": such an initiator gets no Send with Invalidate and no ZBVA, as Linux
    /// targets treat it. Data shorter than four bytes is read as far as it goes (a lone
    /// flags byte is accepted). Set reserved flag bits or non-zero reserved bytes are
    /// refused: that is not an iSER request.
    pub fn parse(data: &[u8]) -> Result<CmRequest, CmError> {
        let Some(&flags) = data.first() else {
            return Ok(CmRequest {
                flags: 0,
                present: false,
            });
        };
        if flags & RESERVED_FLAGS != 0 {
            return Err(CmError::ReservedFlags(flags));
        }
        let mut rsvd = [0u8; 3];
        for (i, b) in data.iter().skip(1).take(3).enumerate() {
            rsvd[i] = *b;
        }
        if rsvd != [0; 3] {
            return Err(CmError::ReservedBytes(rsvd));
        }
        Ok(CmRequest {
            flags,
            present: true,
        })
    }

    /// The decision for this connection: zero-based VA when the initiator did not say it
    /// lacks it, Send with Invalidate when the initiator did not refuse it and the target
    /// (device and configuration) offers it. Without private data neither is used.
    pub fn negotiate(&self, target_send_with_invalidate: bool) -> Negotiated {
        if !self.present {
            return Negotiated {
                zbva: false,
                send_with_invalidate: false,
            };
        }
        Negotiated {
            zbva: self.flags & ZBVA_NOT_SUPPORTED == 0,
            send_with_invalidate: target_send_with_invalidate
                && self.flags & SEND_W_INV_NOT_SUPPORTED == 0,
        }
    }
}

impl Negotiated {
    /// The target's accept private data: the bits of the features it will not use.
    pub fn accept_private_data(&self) -> [u8; CM_PRIVATE_LEN] {
        let mut flags = 0;
        if !self.zbva {
            flags |= ZBVA_NOT_USED;
        }
        if !self.send_with_invalidate {
            flags |= SEND_W_INV_NOT_USED;
        }
        [flags, 0, 0, 0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn linux_initiator() {
        // Linux ib_iser: both "not supported" bits, padded with zeros by the CM.
        let mut data = vec![0xc0, 0, 0, 0];
        data.resize(56, 0);
        let req = CmRequest::parse(&data).unwrap();
        let n = req.negotiate(true);
        assert_eq!(
            n,
            Negotiated {
                zbva: false,
                send_with_invalidate: false
            }
        );
        assert_eq!(n.accept_private_data(), [0xc0, 0, 0, 0]);
    }

    #[test]
    fn send_with_invalidate_needs_both_sides() {
        let req = CmRequest::parse(&[ZBVA_NOT_SUPPORTED, 0, 0, 0]).unwrap();
        assert!(req.negotiate(true).send_with_invalidate);
        assert!(!req.negotiate(false).send_with_invalidate);
        assert_eq!(req.negotiate(true).accept_private_data(), [0x80, 0, 0, 0]);
        let zb = CmRequest::parse(&[0, 0, 0, 0]).unwrap().negotiate(false);
        assert!(zb.zbva);
        assert_eq!(zb.accept_private_data(), [0x40, 0, 0, 0]);
    }

    #[test]
    fn missing_and_short_data() {
        let none = CmRequest::parse(&[]).unwrap();
        assert!(!none.present);
        assert_eq!(
            none.negotiate(true),
            Negotiated {
                zbva: false,
                send_with_invalidate: false
            }
        );
        assert_eq!(CmRequest::parse(&[0xc0]).unwrap().flags, 0xc0);
        assert_eq!(CmRequest::parse(&[0x80, 0]).unwrap().flags, 0x80);
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(CmRequest::parse(&[0xc1]), Err(CmError::ReservedFlags(0xc1)));
        assert_eq!(
            CmRequest::parse(&[0xc0, 0, 7, 0]),
            Err(CmError::ReservedBytes([0, 7, 0]))
        );
        assert!(
            CmError::ReservedFlags(0xff)
                .to_string()
                .contains("not an iSER")
        );
    }

    proptest! {
        #[test]
        fn accept_reflects_decision(flags in 0u8..4, target: bool) {
            let req = CmRequest::parse(&[flags << 6, 0, 0, 0]).unwrap();
            let n = req.negotiate(target);
            let a = n.accept_private_data();
            prop_assert_eq!(a[0] & ZBVA_NOT_USED == 0, n.zbva);
            prop_assert_eq!(a[0] & SEND_W_INV_NOT_USED == 0, n.send_with_invalidate);
            // Never use a feature the initiator said it lacks.
            if req.flags & SEND_W_INV_NOT_SUPPORTED != 0 { prop_assert!(!n.send_with_invalidate); }
            if req.flags & ZBVA_NOT_SUPPORTED != 0 { prop_assert!(!n.zbva); }
        }
    }
}
