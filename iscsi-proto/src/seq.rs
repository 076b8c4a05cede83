//! Sequence numbers: RFC 1982 serial arithmetic on 32-bit numbers and the CmdSN window
//! (ExpCmdSN / MaxCmdSN) of RFC 7143 §4.2.2.
//!
//! The window holds commands that arrived ahead of their turn and releases them in CmdSN
//! order. Commands outside the window are reported (never queued) so the caller can drop
//! them silently as §4.2.2.1 prescribes and log why.

use std::collections::VecDeque;

/// `a < b` in 32-bit serial number arithmetic (RFC 1982).
#[inline]
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// `a <= b` in serial arithmetic.
#[inline]
pub fn sn_le(a: u32, b: u32) -> bool {
    a == b || sn_lt(a, b)
}

/// `a > b` in serial arithmetic.
#[inline]
pub fn sn_gt(a: u32, b: u32) -> bool {
    sn_lt(b, a)
}

/// Why a command's CmdSN was not accepted into the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// CmdSN is before ExpCmdSN (a duplicate or stale retry).
    Stale { cmd_sn: u32, exp_cmd_sn: u32 },
    /// CmdSN is beyond MaxCmdSN.
    BeyondMax { cmd_sn: u32, max_cmd_sn: u32 },
    /// CmdSN is inside the window but already used by a held command.
    Duplicate { cmd_sn: u32 },
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropReason::Stale { cmd_sn, exp_cmd_sn } => {
                write!(f, "CmdSN {cmd_sn} is below ExpCmdSN {exp_cmd_sn}")
            }
            DropReason::BeyondMax { cmd_sn, max_cmd_sn } => {
                write!(f, "CmdSN {cmd_sn} is beyond MaxCmdSN {max_cmd_sn}")
            }
            DropReason::Duplicate { cmd_sn } => write!(f, "CmdSN {cmd_sn} received twice"),
        }
    }
}

/// The CmdSN window of a session: ExpCmdSN, MaxCmdSN and the commands held until their
/// turn. `T` is what the caller wants back when a command's turn comes.
#[derive(Debug)]
pub struct CmdWindow<T> {
    exp: u32,
    max: u32,
    depth: u32,
    /// Cap on MaxCmdSN − ExpCmdSN + 1 (a transport's receive credits).
    cap: Option<u32>,
    /// Cap on the commands in flight and allowed together (the server holds the session's
    /// commands back: QoS), from the next [`Self::update_max`] on.
    narrowed: Option<u32>,
    /// `held[i]` is the command with CmdSN `exp + i` if it arrived.
    held: VecDeque<Option<T>>,
}

impl<T> CmdWindow<T> {
    /// A window starting at `initial_cmd_sn` (the CmdSN of the leading login request)
    /// allowing `depth` queued commands (at least 1).
    pub fn new(initial_cmd_sn: u32, depth: u32) -> Self {
        let depth = depth.max(1);
        CmdWindow {
            exp: initial_cmd_sn,
            max: initial_cmd_sn.wrapping_add(depth - 1),
            depth,
            cap: None,
            narrowed: None,
            held: VecDeque::new(),
        }
    }

    /// A window going on from `exp`/`max` (another process's: a moved connection), with
    /// `depth` queued commands allowed from the next [`Self::update_max`] on.
    pub fn resume(exp: u32, max: u32, depth: u32) -> Self {
        CmdWindow {
            exp,
            max,
            depth: depth.max(1),
            cap: None,
            narrowed: None,
            held: VecDeque::new(),
        }
    }

    /// The same window with MaxCmdSN − ExpCmdSN + 1 capped at `cap` (at least 1), for a
    /// window not yet advertised.
    pub fn with_cap(mut self, cap: Option<u32>) -> Self {
        self.cap = cap;
        if let Some(c) = cap {
            let free = self.depth.min(c).max(1);
            self.max = self.exp.wrapping_add(free - 1);
        }
        self
    }

    /// Caps MaxCmdSN − ExpCmdSN + 1 from the next [`Self::update_max`] on (MaxCmdSN never
    /// moves back).
    pub fn set_cap(&mut self, cap: Option<u32>) {
        self.cap = cap;
    }

    /// Allows at most `n` commands in flight and sendable together from the next
    /// [`Self::update_max`] on (`None`: the depth alone). MaxCmdSN never moves back, so the
    /// window narrows as the commands in flight end.
    pub fn narrow(&mut self, n: Option<u32>) {
        self.narrowed = n;
    }

    /// ExpCmdSN: the next CmdSN expected.
    pub fn exp_cmd_sn(&self) -> u32 {
        self.exp
    }

    /// MaxCmdSN: the highest CmdSN the initiator may send.
    pub fn max_cmd_sn(&self) -> u32 {
        self.max
    }

    /// Number of commands that arrived ahead of their turn.
    pub fn held(&self) -> usize {
        self.held.iter().filter(|h| h.is_some()).count()
    }

    /// Checks a non-immediate CmdSN against the window without recording it.
    pub fn check(&self, cmd_sn: u32) -> Result<(), DropReason> {
        if sn_lt(cmd_sn, self.exp) {
            return Err(DropReason::Stale {
                cmd_sn,
                exp_cmd_sn: self.exp,
            });
        }
        if sn_gt(cmd_sn, self.max) {
            return Err(DropReason::BeyondMax {
                cmd_sn,
                max_cmd_sn: self.max,
            });
        }
        let idx = cmd_sn.wrapping_sub(self.exp) as usize;
        if matches!(self.held.get(idx), Some(Some(_))) {
            return Err(DropReason::Duplicate { cmd_sn });
        }
        Ok(())
    }

    /// Records the arrival of the non-immediate command `cmd_sn`. Call `pop_ready` to
    /// release commands whose turn has come.
    pub fn arrive(&mut self, cmd_sn: u32, item: T) -> Result<(), DropReason> {
        self.check(cmd_sn)?;
        let idx = cmd_sn.wrapping_sub(self.exp) as usize;
        while self.held.len() <= idx {
            self.held.push_back(None);
        }
        self.held[idx] = Some(item);
        Ok(())
    }

    /// Releases the next command in CmdSN order if it has arrived (advancing ExpCmdSN).
    pub fn pop_ready(&mut self) -> Option<T> {
        match self.held.front() {
            Some(Some(_)) => {
                let item = self.held.pop_front().flatten();
                self.exp = self.exp.wrapping_add(1);
                item
            }
            _ => None,
        }
    }

    /// Recomputes MaxCmdSN for `active` tasks in flight (already past ExpCmdSN).
    /// MaxCmdSN never moves backwards (the initiator would ignore it anyway).
    pub fn update_max(&mut self, active: usize) {
        let mut free = (self.depth as usize).saturating_sub(active) as u32;
        if let Some(c) = self.cap {
            free = free.min(c);
        }
        if let Some(n) = self.narrowed {
            free = free.min(n.saturating_sub(active.min(u32::MAX as usize) as u32));
        }
        let candidate = self.exp.wrapping_add(free).wrapping_sub(1);
        if sn_gt(candidate, self.max) {
            self.max = candidate;
        }
    }
}

/// Per-connection StatSN counter.
#[derive(Debug, Clone, Copy)]
pub struct StatSn(u32);

impl StatSn {
    /// Starts at `first`.
    pub fn new(first: u32) -> Self {
        StatSn(first)
    }
    /// The current value (not advanced): for R2T, NOP-In pings, Data-In without status.
    pub fn current(&self) -> u32 {
        self.0
    }
    /// Takes the next StatSN for a status-bearing PDU.
    pub fn advance(&mut self) -> u32 {
        let v = self.0;
        self.0 = self.0.wrapping_add(1);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn serial_compare_wraps() {
        assert!(sn_lt(u32::MAX, 0));
        assert!(sn_lt(5, 6));
        assert!(!sn_lt(6, 6));
        assert!(sn_gt(1, u32::MAX - 3));
        assert!(sn_le(7, 7));
    }

    #[test]
    fn window_releases_in_order() {
        let mut w: CmdWindow<u32> = CmdWindow::new(10, 4);
        assert_eq!(w.max_cmd_sn(), 13);
        w.arrive(12, 12).unwrap();
        w.arrive(11, 11).unwrap();
        assert_eq!(w.pop_ready(), None);
        w.arrive(10, 10).unwrap();
        assert_eq!(w.pop_ready(), Some(10));
        assert_eq!(w.pop_ready(), Some(11));
        assert_eq!(w.pop_ready(), Some(12));
        assert_eq!(w.pop_ready(), None);
        assert_eq!(w.exp_cmd_sn(), 13);
        assert!(matches!(w.check(14), Err(DropReason::BeyondMax { .. })));
        assert!(matches!(w.check(9), Err(DropReason::Stale { .. })));
        w.update_max(3);
        assert_eq!(w.max_cmd_sn(), 13);
        w.update_max(0);
        assert_eq!(w.max_cmd_sn(), 16);
        w.update_max(4); // never shrinks
        assert_eq!(w.max_cmd_sn(), 16);
    }

    #[test]
    fn a_narrowed_window_opens_as_commands_end() {
        let mut w: CmdWindow<u32> = CmdWindow::new(10, 32);
        assert_eq!(w.max_cmd_sn(), 41);
        // 32 sent and in flight; narrowed to 8: nothing more until fewer than 8 are left
        for sn in 10..42 {
            w.arrive(sn, sn).unwrap();
            w.pop_ready();
        }
        w.narrow(Some(8));
        w.update_max(32);
        assert_eq!(w.max_cmd_sn(), 41, "never moves back");
        w.update_max(10);
        assert_eq!(w.max_cmd_sn(), 41);
        w.update_max(5);
        assert_eq!(w.max_cmd_sn(), 44, "3 more allowed with 5 in flight");
        w.narrow(None);
        w.update_max(5);
        assert_eq!(w.max_cmd_sn(), 68, "the depth again");
    }

    #[test]
    fn window_duplicate_and_wrap() {
        let mut w: CmdWindow<()> = CmdWindow::new(u32::MAX - 1, 8);
        w.arrive(1, ()).unwrap();
        assert_eq!(w.arrive(1, ()), Err(DropReason::Duplicate { cmd_sn: 1 }));
        w.arrive(u32::MAX - 1, ()).unwrap();
        w.arrive(u32::MAX, ()).unwrap();
        w.arrive(0, ()).unwrap();
        let mut n = 0;
        while w.pop_ready().is_some() {
            n += 1;
        }
        assert_eq!(n, 4);
        assert_eq!(w.exp_cmd_sn(), 2);
    }

    proptest! {
        #[test]
        fn window_any_permutation_releases_all(start in any::<u32>(), perm in Just((0u32..16).collect::<Vec<_>>()).prop_shuffle()) {
            let mut w: CmdWindow<u32> = CmdWindow::new(start, 16);
            let mut out = Vec::new();
            for p in perm {
                w.arrive(start.wrapping_add(p), p).unwrap();
                while let Some(x) = w.pop_ready() { out.push(x); }
            }
            prop_assert_eq!(out, (0u32..16).collect::<Vec<_>>());
            prop_assert_eq!(w.exp_cmd_sn(), start.wrapping_add(16));
        }
    }
}
