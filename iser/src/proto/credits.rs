//! Receive credits: every Send from the initiator consumes one posted receive, and a Send
//! that finds none is answered Receiver-Not-Ready: retried by the initiator's adapter
//! while its RNR retry count lasts, then fatal for the connection. So the target grants a
//! command window (MaxCmdSN − ExpCmdSN + 1) no larger than the receives it has posted for
//! the connection, less a reserve for PDUs outside the window (NOP-Out, task management,
//! Text, Logout, immediate commands, unsolicited Data-Out), and never larger than the
//! initiator can take. (A target whose connections draw from a shared receive queue counts
//! each connection's share here and leaves bursts above the pool to RNR retries.)
//!
//! [`Credits`] counts receives as posted, held (completed, buffer still in use) or free,
//! and the window granted so far. MaxCmdSN never moves back: a grant only grows the
//! window, which shrinks only as commands arrive.

/// A reserve for PDUs outside the command window that covers what a Linux initiator can
/// have outstanding at once: two NOP-Outs, one Text, two task-management requests and one
/// Logout.
pub const DEFAULT_RESERVE: u32 = 6;

/// Sizes that bound the accounting of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditsConfig {
    /// Receive buffers of the connection (the receive queue depth): most that can be
    /// posted or held at once.
    pub max_posted: u32,
    /// Receives kept back from the command window for PDUs outside it.
    pub reserve: u32,
    /// Largest window the initiator can take (its queue depth, e.g. Linux `cmds_max`).
    pub max_window: u32,
}

/// A receive-accounting mistake or a peer that sent more than it was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CreditError {
    /// The configuration leaves no room for a window.
    #[error(
        "credits: reserve {reserve} leaves no window out of {max_posted} receives (or max window is 0)"
    )]
    BadConfig {
        /// Receive buffers.
        max_posted: u32,
        /// Reserve asked for.
        reserve: u32,
    },
    /// Posting more receives than the connection has buffers.
    #[error("credits: posting {adding} more receives would exceed {max_posted} buffers")]
    TooManyPosted {
        /// Receives being posted.
        adding: u32,
        /// Receive buffers.
        max_posted: u32,
    },
    /// Re-posting or releasing more buffers than are held.
    #[error("credits: {0} buffers returned but fewer are held")]
    NotHeld(u32),
    /// A receive completed while none was posted (an accounting bug in the driver).
    #[error("credits: a receive completed with none posted")]
    NothingPosted,
    /// A command arrived beyond the granted window (the initiator ignored MaxCmdSN); its
    /// receive is counted as held all the same.
    #[error("credits: command beyond the granted window")]
    WindowOverrun,
    /// A PDU outside the window arrived when only the window's receives were left (the
    /// initiator sent more unexpected PDUs than the reserve).
    #[error("credits: unexpected PDU with no reserve receive left")]
    ReserveOverrun,
}

/// Receive accounting for one connection (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credits {
    cfg: CreditsConfig,
    posted: u32,
    held: u32,
    granted: u32,
}

impl Credits {
    /// Accounting with no receive posted yet and an empty window.
    pub fn new(cfg: CreditsConfig) -> Result<Credits, CreditError> {
        if cfg.reserve >= cfg.max_posted || cfg.max_window == 0 {
            return Err(CreditError::BadConfig {
                max_posted: cfg.max_posted,
                reserve: cfg.reserve,
            });
        }
        Ok(Credits {
            cfg,
            posted: 0,
            held: 0,
            granted: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> CreditsConfig {
        self.cfg
    }

    /// Receives posted and not yet completed.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Receives completed whose buffers are still in use.
    pub fn held(&self) -> u32 {
        self.held
    }

    /// The window granted and not yet used: MaxCmdSN − ExpCmdSN + 1 as last advertised,
    /// less the commands received since.
    pub fn window(&self) -> u32 {
        self.granted
    }

    /// Records `n` fresh receives posted (at connection set-up, or buffers added).
    pub fn post(&mut self, n: u32) -> Result<(), CreditError> {
        let total = u64::from(self.posted) + u64::from(self.held) + u64::from(n);
        if total > u64::from(self.cfg.max_posted) {
            return Err(CreditError::TooManyPosted {
                adding: n,
                max_posted: self.cfg.max_posted,
            });
        }
        self.posted += n;
        Ok(())
    }

    /// A command inside the window (a non-immediate SCSI command, Text or Logout, which
    /// take a CmdSN) consumed a receive.
    ///
    /// A command beyond the granted window (the initiator ignored MaxCmdSN, as libiscsi
    /// 1.19's iSER initiator does: it posts every command at once) still consumed a posted
    /// receive: it is counted as held like any other, so the driver reposts or releases its
    /// buffer as usual and nothing leaks, and [`CreditError::WindowOverrun`] tells the
    /// driver (the connection drops the command itself, RFC 7143 §3.2.2.1).
    pub fn on_command(&mut self) -> Result<(), CreditError> {
        if self.posted == 0 {
            return Err(CreditError::NothingPosted);
        }
        self.posted -= 1;
        self.held += 1;
        if self.granted == 0 {
            return Err(CreditError::WindowOverrun);
        }
        self.granted -= 1;
        Ok(())
    }

    /// A PDU outside the window (immediate command, NOP-Out, unsolicited Data-Out, ...)
    /// consumed a receive. It must come from the reserve: the window's receives stay.
    pub fn on_unexpected(&mut self) -> Result<(), CreditError> {
        if self.posted == 0 {
            return Err(CreditError::NothingPosted);
        }
        if self.posted <= self.granted {
            return Err(CreditError::ReserveOverrun);
        }
        self.posted -= 1;
        self.held += 1;
        Ok(())
    }

    /// `n` held buffers were processed and posted again.
    pub fn repost(&mut self, n: u32) -> Result<(), CreditError> {
        if n > self.held {
            return Err(CreditError::NotHeld(n));
        }
        self.held -= n;
        self.posted += n;
        Ok(())
    }

    /// `n` held buffers were released without re-posting (teardown).
    pub fn release(&mut self, n: u32) -> Result<(), CreditError> {
        if n > self.held {
            return Err(CreditError::NotHeld(n));
        }
        self.held -= n;
        Ok(())
    }

    /// Every posted receive completed with a flush error (the queue pair went to the
    /// error state): they become held, the window closes. Returns how many flushed.
    pub fn flush(&mut self) -> u32 {
        let n = self.posted;
        self.held += n;
        self.posted = 0;
        self.granted = 0;
        n
    }

    /// Grows the window as far as the posted receives allow (keeping the reserve) and the
    /// initiator can take, and returns it: advertise MaxCmdSN = ExpCmdSN + window − 1.
    /// Never shrinks a window already granted.
    pub fn grant(&mut self) -> u32 {
        let room = self
            .posted
            .saturating_sub(self.cfg.reserve)
            .min(self.cfg.max_window);
        self.granted = self.granted.max(room);
        self.granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg() -> CreditsConfig {
        CreditsConfig {
            max_posted: 134,
            reserve: DEFAULT_RESERVE,
            max_window: 128,
        }
    }

    #[test]
    fn linux_sized_connection() {
        let mut c = Credits::new(cfg()).unwrap();
        assert_eq!(c.grant(), 0, "nothing posted, nothing granted");
        c.post(134).unwrap();
        assert_eq!(c.grant(), 128);
        for _ in 0..128 {
            c.on_command().unwrap();
        }
        assert_eq!(c.grant(), 0, "six receives left, all reserve");
        for _ in 0..6 {
            c.on_unexpected().unwrap();
        }
        assert_eq!(c.on_unexpected(), Err(CreditError::NothingPosted));
        c.repost(10).unwrap();
        assert_eq!(c.grant(), 4);
        assert_eq!(c.posted(), 10);
        assert_eq!(c.held(), 124);
    }

    #[test]
    fn a_command_beyond_the_window_is_held_like_any_other() {
        // libiscsi 1.19 over iSER posts commands past MaxCmdSN: each still took a receive,
        // whose buffer the driver reposts; the accounting must follow, or buffers leak
        let mut c = Credits::new(CreditsConfig {
            max_posted: 8,
            reserve: 2,
            max_window: 100,
        })
        .unwrap();
        c.post(8).unwrap();
        assert_eq!(c.grant(), 6);
        for _ in 0..6 {
            c.on_command().unwrap();
        }
        assert_eq!(c.on_command(), Err(CreditError::WindowOverrun));
        assert_eq!((c.posted(), c.held(), c.window()), (1, 7, 0));
        // the driver reposts all seven buffers (the overrun one included): all back
        c.repost(7).unwrap();
        assert_eq!((c.posted(), c.held()), (8, 0));
        assert_eq!(c.grant(), 6, "the window opens again");
    }

    #[test]
    fn reserve_protects_the_window() {
        let mut c = Credits::new(CreditsConfig {
            max_posted: 4,
            reserve: 1,
            max_window: 100,
        })
        .unwrap();
        c.post(4).unwrap();
        assert_eq!(c.grant(), 3);
        c.on_unexpected().unwrap();
        assert_eq!(c.on_unexpected(), Err(CreditError::ReserveOverrun));
        assert_eq!(c.grant(), 3, "the window never shrinks");
        c.on_command().unwrap();
        assert_eq!(c.window(), 2);
    }

    #[test]
    fn config_and_bounds() {
        let bad = CreditsConfig {
            max_posted: 4,
            reserve: 4,
            max_window: 1,
        };
        assert!(Credits::new(bad).is_err());
        let no_window = CreditsConfig {
            max_window: 0,
            ..cfg()
        };
        assert!(Credits::new(no_window).is_err());
        let mut c = Credits::new(cfg()).unwrap();
        assert!(matches!(
            c.post(135),
            Err(CreditError::TooManyPosted { .. })
        ));
        assert_eq!(c.repost(1), Err(CreditError::NotHeld(1)));
        c.post(8).unwrap();
        assert_eq!(c.grant(), 2);
        assert_eq!(c.flush(), 8);
        assert_eq!(c.window(), 0);
        assert_eq!(c.grant(), 0);
        c.release(8).unwrap();
        assert_eq!(c.held(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Post(u32),
        Command,
        Unexpected,
        Repost(u32),
        Release(u32),
        Grant,
        Flush,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0u32..8).prop_map(Op::Post),
            4 => Just(Op::Command),
            2 => Just(Op::Unexpected),
            3 => (0u32..8).prop_map(Op::Repost),
            1 => (0u32..3).prop_map(Op::Release),
            3 => Just(Op::Grant),
            1 => Just(Op::Flush),
        ]
    }

    proptest! {
        #[test]
        fn invariants(max_posted in 1u32..40, reserve in 0u32..10, max_window in 1u32..50,
                      ops in proptest::collection::vec(op(), 0..200)) {
            prop_assume!(reserve < max_posted);
            let mut c = Credits::new(CreditsConfig { max_posted, reserve, max_window }).unwrap();
            // ExpCmdSN and MaxCmdSN, as plain counters (no wrap in a test run).
            let mut exp: u64 = 0;
            let mut max_cmd_sn: u64 = 0; // exp + window
            let mut flushed = false;
            for op in ops {
                let before = c.clone();
                let r = match op {
                    Op::Post(n) => c.post(n),
                    Op::Command => c.on_command().map(|_| exp += 1),
                    Op::Unexpected => c.on_unexpected(),
                    Op::Repost(n) => c.repost(n),
                    Op::Release(n) => c.release(n),
                    Op::Grant => { c.grant(); Ok(()) }
                    Op::Flush => { c.flush(); flushed = true; Ok(()) }
                };
                match r {
                    // the receive was taken all the same (see on_command)
                    Err(CreditError::WindowOverrun) => {
                        prop_assert_eq!(c.posted() + 1, before.posted());
                        prop_assert_eq!(c.window(), 0);
                    }
                    Err(_) => prop_assert_eq!(&c, &before, "a refused step changes nothing"),
                    Ok(()) => {}
                }
                prop_assert!(c.posted() + c.held() <= max_posted);
                prop_assert!(c.window() <= c.posted(), "never grant more than posted");
                prop_assert!(c.window() <= max_window);
                let now = exp + u64::from(c.window());
                if !flushed {
                    prop_assert!(now >= max_cmd_sn, "MaxCmdSN moved back");
                }
                max_cmd_sn = now;
            }
            // Liveness: once every buffer is back on the queue, the window opens fully.
            c.repost(c.held()).unwrap();
            let free = max_posted - c.posted() - c.held();
            c.post(free).unwrap();
            prop_assert_eq!(c.grant(), (max_posted - reserve).min(max_window));
        }
    }
}
