//! The class of a command by its operation code, as block-device statistics count commands
//! (reads, writes, flushes, discards; node_exporter's disk statistics): READ and WRITE of
//! every size, the writes that replace blocks (COMPARE AND WRITE, ORWRITE, WRITE ATOMIC,
//! WRITE SAME, WRITE AND VERIFY(10), (12) and (16)), SYNCHRONIZE CACHE, UNMAP. The server classes
//! a command's [`Action`](crate::Action) itself; this is for a command answered without one
//! (refused, or emulated), which still counts as what it asked for.

use crate::ops::opcode::{
    COMPARE_AND_WRITE, ORWRITE_16, READ_6, READ_10, READ_12, READ_16, SYNCHRONIZE_CACHE_10,
    SYNCHRONIZE_CACHE_16, UNMAP, WRITE_6, WRITE_10, WRITE_12, WRITE_16, WRITE_AND_VERIFY_10,
    WRITE_AND_VERIFY_12, WRITE_AND_VERIFY_16, WRITE_ATOMIC_16, WRITE_SAME_10, WRITE_SAME_16,
};

/// What a command does to the medium, for the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    Read,
    Write,
    Flush,
    Discard,
    /// Everything else (INQUIRY, TEST UNIT READY, MODE SENSE, reservations, VERIFY, …).
    Other,
}

/// The class of operation code `opcode`.
pub fn op_class(opcode: u8) -> OpClass {
    match opcode {
        READ_6 | READ_10 | READ_12 | READ_16 => OpClass::Read,
        WRITE_6 | WRITE_10 | WRITE_12 | WRITE_16 | COMPARE_AND_WRITE | ORWRITE_16
        | WRITE_ATOMIC_16 | WRITE_SAME_10 | WRITE_SAME_16 | WRITE_AND_VERIFY_10
        | WRITE_AND_VERIFY_12 | WRITE_AND_VERIFY_16 => OpClass::Write,
        SYNCHRONIZE_CACHE_10 | SYNCHRONIZE_CACHE_16 => OpClass::Flush,
        UNMAP => OpClass::Discard,
        _ => OpClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::TABLE;

    #[test]
    fn classes_by_opcode() {
        assert_eq!(op_class(0x28), OpClass::Read);
        assert_eq!(op_class(0x8A), OpClass::Write);
        assert_eq!(op_class(0x89), OpClass::Write);
        assert_eq!(op_class(0x93), OpClass::Write);
        assert_eq!(op_class(0x35), OpClass::Flush);
        assert_eq!(op_class(0x42), OpClass::Discard);
        assert_eq!(op_class(0x12), OpClass::Other);
        assert_eq!(op_class(0x2F), OpClass::Other);
    }

    /// Every WRITE AND VERIFY is a write, (12) included (it was missing from the class).
    #[test]
    fn write_and_verify_of_every_size_is_a_write() {
        for op in [0x2E, 0xAE, 0x8E] {
            assert_eq!(op_class(op), OpClass::Write, "{op:#04x}");
        }
        // VERIFY alone writes nothing
        for op in [0x2F, 0xAF, 0x8F] {
            assert_eq!(op_class(op), OpClass::Other, "{op:#04x}");
        }
    }

    /// Every command of the table named as a write (WRITE…, ORWRITE, COMPARE AND WRITE) is
    /// classed as one: a size added to the table and forgotten here fails.
    #[test]
    fn every_write_of_the_table_is_classed() {
        for i in TABLE {
            let n = i.name;
            if n.starts_with("WRITE") || n.starts_with("ORWRITE") || n == "COMPARE AND WRITE" {
                assert_eq!(op_class(i.opcode), OpClass::Write, "{n}");
            }
        }
    }

    /// Every opcode with a class is one the target accepts.
    #[test]
    fn every_classed_opcode_is_in_the_table() {
        for op in 0..=u8::MAX {
            if op_class(op) != OpClass::Other {
                assert!(TABLE.iter().any(|i| i.opcode == op), "{op:#04x}");
            }
        }
    }
}
