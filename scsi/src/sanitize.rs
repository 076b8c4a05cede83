//! SANITIZE (SBC-4 5.30, opcode 48h): CDB and parameter list checks of the OVERWRITE,
//! BLOCK ERASE, CRYPTOGRAPHIC ERASE and EXIT FAILURE MODE service actions, and the logical
//! unit's sanitize state — idle, in progress (with a progress indication) or failed — with
//! what that state does to every other command.
//!
//! A valid SANITIZE that starts an operation becomes [`Action::Sanitize`]; the server runs
//! it in the background (GOOD at once with IMMED, else when it ends) and reports
//! [`LogicalUnit::sanitize_progress`] and [`LogicalUnit::sanitize_finished`]. While it runs
//! every command except INQUIRY, REPORT LUNS and REQUEST SENSE is terminated with NOT READY
//! / LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS (before reservation and unit attention
//! checks; unit attentions stay queued), with the progress in the sense-key-specific field;
//! REQUEST SENSE returns that sense data as its parameter data. After a failed operation
//! the medium-access commands get MEDIUM ERROR / SANITIZE COMMAND FAILED until a sanitize
//! operation completes without error or, when the failed one had AUSE set, EXIT FAILURE
//! MODE.
//!
//! BLOCK ERASE and CRYPTOGRAPHIC ERASE are offered on thin-provisioned LUs only, where both
//! deallocate every block (reads return zeros, GET LBA STATUS reports every block
//! deallocated); a fully provisioned LU offers OVERWRITE. (libiscsi's conformance tests
//! require logical block provisioning for BLOCK ERASE, and its CRYPTOGRAPHIC ERASE test
//! checks the WABEREQ field, which must be 0 where BLOCK ERASE is not offered.)
//!
//! Field errors, including those inside the parameter list (OVERWRITE COUNT or
//! INITIALIZATION PATTERN LENGTH zero, pattern longer than a block), are reported as
//! INVALID FIELD IN CDB, as libiscsi's conformance tests expect.

use std::sync::atomic::{AtomicU8, AtomicU16, Ordering};

use crate::cdb::be16;
use crate::ops::{self, OpInfo, opcode};
use crate::sense::{FieldPointer, Sense, key};
use crate::{Action, LogicalUnit, Req};

/// Service actions.
pub mod sa {
    pub const OVERWRITE: u8 = 0x01;
    pub const BLOCK_ERASE: u8 = 0x02;
    pub const CRYPTO_ERASE: u8 = 0x03;
    pub const EXIT_FAILURE_MODE: u8 = 0x1F;
}

/// CDB byte 1 bits.
const IMMED: u8 = 0x80;
const AUSE: u8 = 0x20;

/// Most passes an OVERWRITE may ask for (the 5-bit OVERWRITE COUNT field).
pub const MAX_PASSES: u8 = 0x1F;

/// How the medium is sanitized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// Write `pattern` (repeated to fill each logical block) over every block, `passes`
    /// times; with `invert` the passes alternate between the inverted and the plain pattern,
    /// the last pass plain (see [`Method::pass_inverted`]).
    Overwrite {
        pattern: Vec<u8>,
        invert: bool,
        passes: u8,
    },
    /// Every block deallocated (thin LU): reads return zeros, GET LBA STATUS reports them
    /// deallocated.
    BlockErase,
    /// Every block's content made unrecoverable: deallocated (thin LU).
    CryptoErase,
}

impl Method {
    /// Whether pass `pass` (0-based) of an OVERWRITE writes the inverted pattern.
    pub fn pass_inverted(&self, pass: u8) -> bool {
        match self {
            Method::Overwrite {
                invert: true,
                passes,
                ..
            } => passes.saturating_sub(1).saturating_sub(pass) % 2 == 1,
            _ => false,
        }
    }

    /// One logical block of `block_size` bytes for pass `pass`: the pattern repeated from
    /// the start of the block (inverted when the pass says so). Zeros for the erase methods.
    pub fn block(&self, block_size: usize, pass: u8) -> Vec<u8> {
        let Method::Overwrite { pattern, .. } = self else {
            return vec![0; block_size];
        };
        if pattern.is_empty() {
            return vec![0; block_size];
        }
        let inv = if self.pass_inverted(pass) { 0xFF } else { 0 };
        pattern
            .iter()
            .cycle()
            .take(block_size)
            .map(|b| b ^ inv)
            .collect()
    }

    /// Number of passes over the medium.
    pub fn passes(&self) -> u8 {
        match self {
            Method::Overwrite { passes, .. } => *passes,
            _ => 1,
        }
    }
}

/// A sanitize operation to run (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sanitize {
    pub method: Method,
    /// GOOD was (or is) sent as soon as the command was validated; the operation goes on.
    pub immed: bool,
}

/// Phases of [`SanitizeState`].
mod phase {
    pub const IDLE: u8 = 0;
    pub const RUNNING: u8 = 1;
    /// Failed; EXIT FAILURE MODE refused (AUSE was 0).
    pub const FAILED_RESTRICTED: u8 = 2;
    /// Failed; EXIT FAILURE MODE allowed (AUSE was 1).
    pub const FAILED_UNRESTRICTED: u8 = 3;
}

/// The LU's sanitize state, read lock-free by every command.
#[derive(Debug, Default)]
pub(crate) struct SanitizeState {
    phase: AtomicU8,
    /// AUSE of the running operation (its failure mode on error).
    ause: AtomicU8,
    /// Progress indication: fraction done × 65536.
    progress: AtomicU16,
}

/// NOT READY / LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS (04h/1Bh) with `progress`
/// (fraction done × 65536) in the sense-key-specific progress indication (SKSV set).
pub fn in_progress_sense(progress: u16) -> Sense {
    // the progress indication has the field pointer's layout without the C/D and BPV bits:
    // SKSV, then the 16-bit value
    Sense::new(key::NOT_READY, 0x04, 0x1B).with_field(FieldPointer {
        in_cdb: false,
        byte: progress,
        bit: None,
    })
}

/// MEDIUM ERROR / SANITIZE COMMAND FAILED (31h/03h).
pub const fn failed_sense() -> Sense {
    Sense::new(key::MEDIUM_ERROR, 0x31, 0x03)
}

impl LogicalUnit {
    /// A sanitize operation is running.
    pub fn sanitize_in_progress(&self) -> bool {
        self.state().sanitize.phase.load(Ordering::Acquire) == phase::RUNNING
    }

    /// Progress of the running sanitize operation: `done` of `total` units.
    pub fn sanitize_progress(&self, done: u64, total: u64) {
        let p = if total == 0 {
            0
        } else {
            (u128::from(done.min(total)) * 65535 / u128::from(total)) as u16
        };
        self.state().sanitize.progress.store(p, Ordering::Relaxed);
    }

    /// The running sanitize operation ended: `ok` back to normal operation, else the
    /// sanitize failure mode (restricted or not, from the command's AUSE bit).
    pub fn sanitize_finished(&self, ok: bool) {
        let s = &self.state().sanitize;
        let next = if ok {
            phase::IDLE
        } else if s.ause.load(Ordering::Relaxed) != 0 {
            phase::FAILED_UNRESTRICTED
        } else {
            phase::FAILED_RESTRICTED
        };
        s.progress.store(0, Ordering::Relaxed);
        s.phase.store(next, Ordering::Release);
    }
}

/// Whether the erase service actions are available (thin LUs).
fn erase_offered(lu: &LogicalUnit) -> bool {
    lu.thin_provisioning()
}

/// Whether the LU offers table entry `e` (BLOCK ERASE and CRYPTOGRAPHIC ERASE only on thin
/// LUs).
pub(crate) fn offered(lu: &LogicalUnit, e: &OpInfo) -> bool {
    let erase = e.opcode == opcode::SANITIZE
        && matches!(e.service_action, Some(sa::BLOCK_ERASE | sa::CRYPTO_ERASE));
    !erase || erase_offered(lu)
}

/// Byte 7 of the Block Device Characteristics VPD page: WABEREQ (bits 7-6) and WACEREQ
/// (bits 5-4) = 01b where the erase methods are offered (reads after a block /
/// cryptographic erase complete with GOOD status and zeros), else 0.
pub(crate) fn bdc_byte7(lu: &LogicalUnit) -> u8 {
    if erase_offered(lu) { 0x50 } else { 0 }
}

/// What a sanitize operation in progress does to a command: None when it may run
/// (INQUIRY, REPORT LUNS), else its completion.
pub(crate) fn while_running(lu: &LogicalUnit, cdb: &[u8]) -> Option<Action> {
    let s = &lu.state().sanitize;
    if s.phase.load(Ordering::Acquire) != phase::RUNNING {
        return None;
    }
    let sense = in_progress_sense(s.progress.load(Ordering::Relaxed));
    match cdb.first().copied() {
        Some(opcode::INQUIRY) | Some(opcode::REPORT_LUNS) => None,
        Some(opcode::REQUEST_SENSE) => Some(match ops::validate(cdb, ops::USAGE_REQUEST_SENSE) {
            Ok(c) => Action::data(crate::request_sense::response(c, &sense)),
            Err(e) => Action::Complete(lu.check_condition(&e)),
        }),
        _ => Some(Action::Complete(lu.check_condition(&sense))),
    }
}

/// After a failed sanitize operation: a command that would access the medium gets MEDIUM
/// ERROR / SANITIZE COMMAND FAILED instead.
pub(crate) fn after_failure(lu: &LogicalUnit, action: Action) -> Action {
    let p = lu.state().sanitize.phase.load(Ordering::Acquire);
    let failed = p == phase::FAILED_RESTRICTED || p == phase::FAILED_UNRESTRICTED;
    match action {
        Action::Complete(_) | Action::Sanitize(_) | Action::Sync { .. } => action,
        _ if failed => Action::Complete(lu.check_condition(&failed_sense())),
        _ => action,
    }
}

/// Decodes a SANITIZE CDB (usage-checked, 10 bytes) and its parameter list into the
/// method to run; `None` for EXIT FAILURE MODE. `block_size` bounds the pattern length;
/// `thin`: BLOCK ERASE and CRYPTOGRAPHIC ERASE are available.
pub fn decode(
    cdb: &[u8],
    data_out: &[u8],
    block_size: u32,
    thin: bool,
) -> Result<Option<Method>, Sense> {
    let service_action = cdb[1] & 0x1F;
    let param_len = usize::from(be16(cdb, 7));
    let bad_len = || Sense::invalid_field_in_cdb(7, Some(7));
    match service_action {
        sa::OVERWRITE => {
            // header (4 bytes) and a pattern of 1 ..= one block
            if param_len < 5 || param_len > block_size as usize + 4 {
                return Err(bad_len());
            }
            let list = data_out
                .get(..param_len)
                .ok_or_else(Sense::param_list_length_error)?;
            let invert = list[0] & 0x80 != 0;
            let test = (list[0] >> 5) & 0x03;
            let passes = list[0] & 0x1F;
            let ip_len = usize::from(be16(list, 2));
            if test != 0 || passes == 0 {
                return Err(Sense::invalid_field_in_cdb_unspecified());
            }
            if ip_len == 0 || ip_len > block_size as usize || ip_len + 4 > param_len {
                return Err(Sense::invalid_field_in_cdb_unspecified());
            }
            Ok(Some(Method::Overwrite {
                pattern: list[4..4 + ip_len].to_vec(),
                invert,
                passes,
            }))
        }
        sa::BLOCK_ERASE | sa::CRYPTO_ERASE | sa::EXIT_FAILURE_MODE if param_len != 0 => {
            Err(bad_len())
        }
        sa::BLOCK_ERASE if thin => Ok(Some(Method::BlockErase)),
        sa::CRYPTO_ERASE if thin => Ok(Some(Method::CryptoErase)),
        sa::EXIT_FAILURE_MODE => Ok(None),
        _ => Err(Sense::invalid_field_in_cdb(1, Some(4))),
    }
}

/// SANITIZE (every service action).
pub(crate) fn sanitize(lu: &LogicalUnit, cdb: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let immed = cdb[1] & IMMED != 0;
    let ause = cdb[1] & AUSE != 0;
    let method = decode(
        cdb,
        req.data_out,
        lu.params().block_size,
        lu.thin_provisioning(),
    )?;
    let s = &lu.state().sanitize;
    let current = s.phase.load(Ordering::Acquire);
    let Some(method) = method else {
        // EXIT FAILURE MODE: leaves an unrestricted failure; nothing to do when not failed
        return match current {
            phase::FAILED_RESTRICTED => Err(Sense::invalid_field_in_cdb(1, Some(4))),
            phase::FAILED_UNRESTRICTED => {
                let _ = s.phase.compare_exchange(
                    phase::FAILED_UNRESTRICTED,
                    phase::IDLE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                Ok(Action::good())
            }
            _ => Ok(Action::good()),
        };
    };
    if current == phase::FAILED_RESTRICTED && ause {
        // after a restricted failure only a sanitize operation in restricted mode may run
        return Err(Sense::invalid_field_in_cdb(1, Some(5)));
    }
    if lu.write_protected() {
        return Err(Sense::write_protected());
    }
    if s.phase
        .compare_exchange(current, phase::RUNNING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
        || current == phase::RUNNING
    {
        return Err(in_progress_sense(s.progress.load(Ordering::Relaxed)));
    }
    s.ause.store(u8::from(ause), Ordering::Relaxed);
    s.progress.store(0, Ordering::Relaxed);
    Ok(Action::Sanitize(Sanitize { method, immed }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn cdb(sa: u8, flags: u8, len: u16) -> [u8; 10] {
        let [hi, lo] = len.to_be_bytes();
        [0x48, flags | sa, 0, 0, 0, 0, 0, hi, lo, 0]
    }

    fn overwrite_list(byte0: u8, pattern: &[u8]) -> Vec<u8> {
        let mut l = vec![byte0, 0];
        l.extend_from_slice(&(pattern.len() as u16).to_be_bytes());
        l.extend_from_slice(pattern);
        l
    }

    #[test]
    fn overwrite_parameter_list() {
        let l = overwrite_list(0x83, &[0xAA, 0x55]);
        let m = decode(&cdb(1, 0, l.len() as u16), &l, 512, false)
            .expect("valid")
            .expect("a method");
        assert_eq!(
            m,
            Method::Overwrite {
                pattern: vec![0xAA, 0x55],
                invert: true,
                passes: 3
            }
        );
        // three passes with INVERT: plain, inverted, plain
        assert!(!m.pass_inverted(0) && m.pass_inverted(1) && !m.pass_inverted(2));
        let b = m.block(8, 1);
        assert_eq!(b, vec![0x55, 0xAA, 0x55, 0xAA, 0x55, 0xAA, 0x55, 0xAA]);
        assert_eq!(m.block(5, 0), vec![0xAA, 0x55, 0xAA, 0x55, 0xAA]);
        // two passes with INVERT: the first inverted
        let two = Method::Overwrite {
            pattern: vec![1],
            invert: true,
            passes: 2,
        };
        assert!(two.pass_inverted(0) && !two.pass_inverted(1));
    }

    #[test]
    fn overwrite_field_errors() {
        let full = overwrite_list(0x01, &[0xAA; 512]);
        // parameter list length 0..=4 and > block size + 4
        for len in [0u16, 1, 4, 517] {
            let e = decode(&cdb(1, 0, len), &[0; 600], 512, false).expect_err("bad length");
            assert_eq!((e.key, e.asc), (5, 0x24), "length {len}");
        }
        // OVERWRITE COUNT 0, TEST ≠ 0, pattern length 0 or beyond a block or the list
        for (b0, ip) in [(0x00, 512u16), (0x21, 512), (0x01, 0), (0x01, 513)] {
            let mut l = full.clone();
            l[0] = b0;
            l[2..4].copy_from_slice(&ip.to_be_bytes());
            let e = decode(&cdb(1, 0, 516), &l, 512, false).expect_err("bad list");
            assert_eq!((e.key, e.asc), (5, 0x24), "{b0:#x} {ip}");
        }
        // the list shorter than the CDB says
        let e = decode(&cdb(1, 0, 516), &full[..100], 512, false).expect_err("short");
        assert_eq!((e.key, e.asc), (5, 0x1A));
        assert!(decode(&cdb(1, 0, 516), &full, 512, false).is_ok());
    }

    #[test]
    fn erase_and_exit_service_actions() {
        assert_eq!(
            decode(&cdb(2, 0, 0), &[], 512, true),
            Ok(Some(Method::BlockErase))
        );
        let e = decode(&cdb(2, 0, 0), &[], 512, false).expect_err("thick: no block erase");
        assert_eq!(e.field.map(|f| f.byte), Some(1));
        assert_eq!(
            decode(&cdb(3, 0, 0), &[], 512, true),
            Ok(Some(Method::CryptoErase))
        );
        assert!(
            decode(&cdb(3, 0, 0), &[], 512, false).is_err(),
            "thick: no erase"
        );
        assert_eq!(decode(&cdb(0x1F, 0, 0), &[], 512, false), Ok(None));
        for s in [2u8, 3, 0x1F] {
            let e = decode(&cdb(s, 0, 8), &[0; 8], 512, true).expect_err("list not allowed");
            assert_eq!(e.field.map(|f| f.byte), Some(7));
        }
        for s in [0u8, 4, 0x10, 0x1E] {
            assert!(decode(&cdb(s, 0, 0), &[], 512, true).is_err(), "sa {s}");
        }
    }

    #[test]
    fn running_sanitize_gates_other_commands() {
        let lu = lu();
        lu.set_thin_provisioning(true);
        let a = exec(&lu, &cdb(3, IMMED, 0), &[]);
        assert_eq!(
            a,
            Action::Sanitize(Sanitize {
                method: Method::CryptoErase,
                immed: true
            })
        );
        assert!(lu.sanitize_in_progress());
        lu.sanitize_progress(1, 4);
        // TEST UNIT READY: NOT READY, SANITIZE IN PROGRESS, progress 1/4
        let c = complete(&lu, &[0, 0, 0, 0, 0, 0]);
        assert_eq!(check(&c), (2, 0x04, 0x1B));
        assert_eq!(&c.sense[15..18], &[0x80, 0x3F, 0xFF]);
        // a second SANITIZE and a READ too
        assert_eq!(check(&complete(&lu, &cdb(3, 0, 0))), (2, 0x04, 0x1B));
        assert_eq!(
            check(&complete(&lu, &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0])),
            (2, 0x04, 0x1B)
        );
        // INQUIRY runs; REQUEST SENSE reports the progress as parameter data
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 36, 0]).status, 0);
        let rs = complete(&lu, &[0x03, 0, 0, 0, 18, 0]);
        assert_eq!(rs.status, 0);
        assert_eq!((rs.data[2], rs.data[12], rs.data[13]), (2, 0x04, 0x1B));
        assert_eq!(&rs.data[15..18], &[0x80, 0x3F, 0xFF]);
        lu.sanitize_finished(true);
        assert_eq!(complete(&lu, &[0, 0, 0, 0, 0, 0]).status, 0);
    }

    #[test]
    fn failure_modes() {
        let read = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        // AUSE = 0: restricted — EXIT FAILURE MODE and AUSE = 1 refused, reads fail
        let lu = lu();
        lu.set_thin_provisioning(true);
        assert!(matches!(exec(&lu, &cdb(3, 0, 0), &[]), Action::Sanitize(_)));
        lu.sanitize_finished(false);
        assert_eq!(check(&complete(&lu, &read)), (3, 0x31, 0x03));
        assert_eq!(check(&complete(&lu, &cdb(0x1F, 0, 0))), (5, 0x24, 0));
        assert_eq!(check(&complete(&lu, &cdb(3, AUSE, 0))), (5, 0x24, 0));
        // a restricted sanitize that succeeds clears it
        assert!(matches!(exec(&lu, &cdb(3, 0, 0), &[]), Action::Sanitize(_)));
        lu.sanitize_finished(true);
        assert!(matches!(exec(&lu, &read, &[]), Action::Read { .. }));
        // AUSE = 1: EXIT FAILURE MODE leaves the failure mode
        assert!(matches!(
            exec(&lu, &cdb(3, AUSE, 0), &[]),
            Action::Sanitize(_)
        ));
        lu.sanitize_finished(false);
        assert_eq!(check(&complete(&lu, &read)), (3, 0x31, 0x03));
        assert_eq!(complete(&lu, &cdb(0x1F, 0, 0)).status, 0);
        assert!(matches!(exec(&lu, &read, &[]), Action::Read { .. }));
    }

    #[test]
    fn write_protected_and_reserved_bits() {
        let ro = lu_with(|p| p.readonly = true);
        ro.set_thin_provisioning(true);
        assert_eq!(check(&complete(&ro, &cdb(3, 0, 0))), (7, 0x27, 0));
        assert!(!ro.sanitize_in_progress());
        let lu = lu();
        let mut c = cdb(3, 0x40, 0);
        assert_eq!(check(&complete(&lu, &c)), (5, 0x24, 0));
        for byte in 2..7 {
            c = cdb(3, 0, 0);
            c[byte] = 1;
            assert_eq!(check(&complete(&lu, &c)), (5, 0x24, 0), "byte {byte}");
        }
    }
}
