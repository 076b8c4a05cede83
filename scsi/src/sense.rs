//! Sense data (SPC-4 4.5): the `Sense` value every failing command produces, its named
//! constructors (one per additional sense code this crate reports) and its encoding in fixed
//! (response code 70h) or descriptor (72h) format, with the INFORMATION field, the
//! sense-key-specific field pointer and the stream commands bits (FILEMARK, EOM, ILI) of a
//! tape drive.

/// Sense keys (SPC-4 table 27).
pub mod key {
    pub const NO_SENSE: u8 = 0x0;
    pub const RECOVERED_ERROR: u8 = 0x1;
    pub const NOT_READY: u8 = 0x2;
    pub const MEDIUM_ERROR: u8 = 0x3;
    pub const HARDWARE_ERROR: u8 = 0x4;
    pub const ILLEGAL_REQUEST: u8 = 0x5;
    pub const UNIT_ATTENTION: u8 = 0x6;
    pub const DATA_PROTECT: u8 = 0x7;
    pub const ABORTED_COMMAND: u8 = 0xB;
    pub const MISCOMPARE: u8 = 0xE;
}

/// Response code of current fixed-format sense data.
pub const FIXED_CURRENT: u8 = 0x70;
/// Response code of deferred fixed-format sense data.
pub const FIXED_DEFERRED: u8 = 0x71;
/// Response code of current descriptor-format sense data.
pub const DESCRIPTOR_CURRENT: u8 = 0x72;
/// Response code of deferred descriptor-format sense data.
pub const DESCRIPTOR_DEFERRED: u8 = 0x73;
/// Length of the fixed-format sense data this crate produces.
pub const FIXED_LEN: usize = 18;

/// Sense-key-specific "field pointer" (SPC-4 4.5.2.4.2): which byte (and optionally bit)
/// of the CDB or of the parameter list is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldPointer {
    /// true: the byte is in the CDB (C/D = 1); false: in the parameter list.
    pub in_cdb: bool,
    /// Byte offset of the field.
    pub byte: u16,
    /// Bit (0..=7) of the most significant bit of the field, when known.
    pub bit: Option<u8>,
}

impl FieldPointer {
    /// The three sense-key-specific bytes (SKSV set).
    pub fn bytes(&self) -> [u8; 3] {
        let mut b0 = 0x80;
        if self.in_cdb {
            b0 |= 0x40;
        }
        if let Some(bit) = self.bit {
            b0 |= 0x08 | (bit & 0x07);
        }
        let [hi, lo] = self.byte.to_be_bytes();
        [b0, hi, lo]
    }
}

/// One sense condition: sense key, additional sense code and qualifier, plus the optional
/// INFORMATION field (an LBA for medium errors) and field pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
    pub info: Option<u64>,
    pub field: Option<FieldPointer>,
    /// Stream commands bits (SSC-3 4.2.x): [`stream::FILEMARK`], [`stream::EOM`],
    /// [`stream::ILI`]; fixed format byte 2, descriptor format a stream commands
    /// descriptor (04h).
    pub stream: u8,
}

/// The stream commands bits of sense data (a tape drive's READ, WRITE, SPACE, LOCATE …).
pub mod stream {
    /// A filemark was crossed.
    pub const FILEMARK: u8 = 0x80;
    /// End of medium (or of partition): early warning, end of data, beginning of medium.
    pub const EOM: u8 = 0x40;
    /// Incorrect length indicator: the block read was not the length asked for.
    pub const ILI: u8 = 0x20;
}

fn ptr(byte: usize) -> u16 {
    u16::try_from(byte).unwrap_or(u16::MAX)
}

impl Sense {
    /// A sense condition without INFORMATION or field pointer.
    pub const fn new(key: u8, asc: u8, ascq: u8) -> Self {
        Sense {
            key,
            asc,
            ascq,
            info: None,
            field: None,
            stream: 0,
        }
    }

    /// Sets the INFORMATION field.
    pub const fn with_info(mut self, info: u64) -> Self {
        self.info = Some(info);
        self
    }

    /// Sets the stream commands bits ([`stream`]).
    pub const fn with_stream(mut self, bits: u8) -> Self {
        self.stream = bits;
        self
    }

    /// Sets the sense-key-specific field pointer.
    pub const fn with_field(mut self, field: FieldPointer) -> Self {
        self.field = Some(field);
        self
    }

    /// NO SENSE / NO ADDITIONAL SENSE INFORMATION (00h/00h).
    pub const fn no_sense() -> Self {
        Sense::new(key::NO_SENSE, 0x00, 0x00)
    }

    /// ILLEGAL REQUEST / INVALID COMMAND OPERATION CODE (20h/00h).
    pub const fn invalid_opcode() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x20, 0x00)
    }

    /// ILLEGAL REQUEST / INVALID FIELD IN CDB (24h/00h), pointing at `byte` (and `bit`).
    pub fn invalid_field_in_cdb(byte: usize, bit: Option<u8>) -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x24, 0x00).with_field(FieldPointer {
            in_cdb: true,
            byte: ptr(byte),
            bit,
        })
    }

    /// ILLEGAL REQUEST / INVALID FIELD IN CDB (24h/00h) without a field pointer.
    pub const fn invalid_field_in_cdb_unspecified() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x24, 0x00)
    }

    /// ILLEGAL REQUEST / INVALID FIELD IN INFORMATION UNIT (0Eh/03h): the transport delivered
    /// less data than the CDB describes (iSCSI expected data transfer length too small).
    pub const fn invalid_field_in_information_unit() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x0E, 0x03)
    }

    /// MISCOMPARE / MISCOMPARE DURING VERIFY OPERATION (1Dh/00h); `offset` is the offset of
    /// the first differing byte in the Data-Out buffer (SBC-3 VERIFY).
    pub const fn miscompare(offset: u64) -> Self {
        Sense::new(key::MISCOMPARE, 0x1D, 0x00).with_info(offset)
    }

    /// ILLEGAL REQUEST / INVALID FIELD IN PARAMETER LIST (26h/00h), pointing at `byte`.
    pub fn invalid_field_in_param_list(byte: usize, bit: Option<u8>) -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x00).with_field(FieldPointer {
            in_cdb: false,
            byte: ptr(byte),
            bit,
        })
    }

    /// ILLEGAL REQUEST / PARAMETER LIST LENGTH ERROR (1Ah/00h).
    pub const fn param_list_length_error() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x1A, 0x00)
    }

    /// ILLEGAL REQUEST / LOGICAL BLOCK ADDRESS OUT OF RANGE (21h/00h).
    pub const fn lba_out_of_range() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x21, 0x00)
    }

    /// ILLEGAL REQUEST / SAVING PARAMETERS NOT SUPPORTED (39h/00h).
    pub const fn saving_parameters_not_supported() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x39, 0x00)
    }

    /// ILLEGAL REQUEST / LOGICAL UNIT NOT SUPPORTED (25h/00h).
    pub const fn lu_not_supported() -> Self {
        Sense::new(key::ILLEGAL_REQUEST, 0x25, 0x00)
    }

    /// DATA PROTECT / WRITE PROTECTED (27h/00h).
    pub const fn write_protected() -> Self {
        Sense::new(key::DATA_PROTECT, 0x27, 0x00)
    }

    /// DATA PROTECT / SPACE ALLOCATION FAILED WRITE PROTECT (27h/07h), at `lba`.
    pub const fn space_allocation_failed(lba: u64) -> Self {
        Sense::new(key::DATA_PROTECT, 0x27, 0x07).with_info(lba)
    }

    /// MEDIUM ERROR / UNRECOVERED READ ERROR (11h/00h), at `lba`.
    pub const fn unrecovered_read_error(lba: u64) -> Self {
        Sense::new(key::MEDIUM_ERROR, 0x11, 0x00).with_info(lba)
    }

    /// MEDIUM ERROR / WRITE ERROR (0Ch/00h), at `lba`.
    pub const fn write_error(lba: u64) -> Self {
        Sense::new(key::MEDIUM_ERROR, 0x0C, 0x00).with_info(lba)
    }

    /// HARDWARE ERROR / INTERNAL TARGET FAILURE (44h/00h).
    pub const fn internal_target_failure() -> Self {
        Sense::new(key::HARDWARE_ERROR, 0x44, 0x00)
    }

    /// Encodes in descriptor format when `descriptor` (control mode page D_SENSE = 1),
    /// else in fixed format.
    pub fn encode(&self, descriptor: bool) -> Vec<u8> {
        if descriptor {
            self.encode_descriptor()
        } else {
            self.encode_fixed()
        }
    }

    /// Fixed format (SPC-4 4.5.3), 18 bytes. An INFORMATION value that does not fit in
    /// 32 bits is reported with VALID = 0.
    pub fn encode_fixed(&self) -> Vec<u8> {
        let mut s = vec![0u8; FIXED_LEN];
        s[0] = FIXED_CURRENT;
        if let Some(info) = self.info
            && let Ok(v) = u32::try_from(info)
        {
            s[0] |= 0x80;
            s[3..7].copy_from_slice(&v.to_be_bytes());
        }
        s[2] = (self.key & 0x0F) | (self.stream & 0xE0);
        s[7] = (FIXED_LEN - 8) as u8;
        s[12] = self.asc;
        s[13] = self.ascq;
        if let Some(f) = self.field {
            s[15..18].copy_from_slice(&f.bytes());
        }
        s
    }

    /// Descriptor format (SPC-4 4.5.2): an information descriptor (type 00h) when there is
    /// INFORMATION, a sense-key-specific descriptor (type 02h) when there is a field pointer.
    pub fn encode_descriptor(&self) -> Vec<u8> {
        let mut s = vec![
            DESCRIPTOR_CURRENT,
            self.key & 0x0F,
            self.asc,
            self.ascq,
            0,
            0,
            0,
            0,
        ];
        if let Some(info) = self.info {
            s.extend_from_slice(&[0x00, 0x0A, 0x80, 0x00]);
            s.extend_from_slice(&info.to_be_bytes());
        }
        if self.stream != 0 {
            s.extend_from_slice(&[0x04, 0x02, 0x00, self.stream & 0xE0]);
        }
        if let Some(f) = self.field {
            s.extend_from_slice(&[0x02, 0x06, 0x00, 0x00]);
            s.extend_from_slice(&f.bytes());
            s.push(0);
        }
        s[7] = (s.len() - 8) as u8;
        s
    }
}

/// Parses the sense key, ASC and ASCQ out of fixed or descriptor sense data (for tests and
/// logging). None when the response code is not 70h-73h or the data is too short.
pub fn parse_key_asc(sense: &[u8]) -> Option<(u8, u8, u8)> {
    match sense.first()? & 0x7F {
        FIXED_CURRENT | FIXED_DEFERRED if sense.len() >= 14 => {
            Some((sense[2] & 0x0F, sense[12], sense[13]))
        }
        DESCRIPTOR_CURRENT | DESCRIPTOR_DEFERRED if sense.len() >= 8 => {
            Some((sense[1] & 0x0F, sense[2], sense[3]))
        }
        _ => None,
    }
}

/// The sense key alone of fixed or descriptor sense data, current or deferred (for the
/// statistics). None when the response code is not 70h-73h or the data ends before the key.
pub fn sense_key(sense: &[u8]) -> Option<u8> {
    match sense.first()? & 0x7F {
        FIXED_CURRENT | FIXED_DEFERRED => sense.get(2).map(|b| b & 0x0F),
        DESCRIPTOR_CURRENT | DESCRIPTOR_DEFERRED => sense.get(1).map(|b| b & 0x0F),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sense_key_of_both_formats_current_and_deferred() {
        let s = Sense::write_protected();
        for descriptor in [false, true] {
            let mut bytes = s.encode(descriptor);
            assert_eq!(sense_key(&bytes), Some(key::DATA_PROTECT));
            bytes[0] |= 1; // deferred
            assert_eq!(sense_key(&bytes), Some(key::DATA_PROTECT));
        }
        // the key is all the statistics need: short data still has one
        assert_eq!(sense_key(&[FIXED_CURRENT, 0, key::MEDIUM_ERROR]), Some(3));
        assert_eq!(sense_key(&[FIXED_CURRENT, 0]), None);
        assert_eq!(sense_key(&[0x7F, key::MEDIUM_ERROR, 0]), None);
        assert_eq!(sense_key(&[]), None);
    }
}
