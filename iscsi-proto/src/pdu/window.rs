//! Which initiator PDUs take a CmdSN slot in the command window (RFC 7143 §3.2.2.1, §4.2.2.1):
//! a transport that accounts for the window itself (iSER's receive credits, RFC 7145 §5.1)
//! asks this of a PDU before the connection has decoded it.

use super::bhs::op;

/// The I bit of byte 0: an immediate request, outside the window.
const IMMEDIATE: u8 = 0x40;
/// The opcode bits of byte 0.
const OPCODE: u8 = 0x3f;

/// True for a request with opcode `opcode` that takes a slot in the command window: a
/// non-immediate request other than SCSI Data-Out, SNACK and Login (those carry no CmdSN of
/// their own, or one that does not advance it).
pub const fn opcode_in_window(opcode: u8, immediate: bool) -> bool {
    !immediate && !matches!(opcode, op::DATA_OUT | op::SNACK | op::LOGIN_REQ)
}

/// [`opcode_in_window`] of the PDU whose header starts `pdu` (false for an empty slice).
pub fn in_command_window(pdu: &[u8]) -> bool {
    match pdu.first() {
        Some(&b0) => opcode_in_window(b0 & OPCODE, b0 & IMMEDIATE != 0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_requests() {
        for o in [
            op::NOP_OUT,
            op::SCSI_CMD,
            op::TMF_REQ,
            op::TEXT_REQ,
            op::LOGOUT_REQ,
        ] {
            assert!(in_command_window(&[o]), "{o:#04x}");
            assert!(!in_command_window(&[o | IMMEDIATE]), "immediate {o:#04x}");
        }
    }

    #[test]
    fn requests_outside_the_window() {
        assert!(!in_command_window(&[op::DATA_OUT]));
        assert!(!in_command_window(&[op::SNACK]));
        // a Login request always has the I bit; without it, it still takes no slot
        assert!(!in_command_window(&[op::LOGIN_REQ | IMMEDIATE]));
        assert!(!in_command_window(&[op::LOGIN_REQ]));
        assert!(!in_command_window(&[]));
    }

    #[test]
    fn only_byte_zero_counts() {
        // the F bit and the rest of the header do not change the answer
        assert!(in_command_window(&[op::SCSI_CMD | 0x80, 0xff, 0xff]));
        assert!(!in_command_window(&[op::DATA_OUT | 0x80, 0, 0]));
    }
}
