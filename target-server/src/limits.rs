//! Resource limits at run time: the values in force (`limits:` in the configuration,
//! changed by reload or `tgtadm --mode sys --op update`), the count of refusals per limit
//! (`numatgt_limit_refusals_total{limit}`) and the log of refusals, one line per burst
//! ([`BurstLog`]): a flood of refused logins or connections writes two lines every
//! [`BURST_WINDOW`], not one per refusal.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a burst of refusals of one limit is summarised before it is logged again.
pub const BURST_WINDOW: Duration = Duration::from_secs(10);

/// A limit that can refuse something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `limits.max_sessions`: logged-in normal sessions, all targets.
    Sessions,
    /// A target's `max_sessions`.
    TargetSessions,
    /// `limits.max_connections`: open connections, all portals and transports.
    Connections,
    /// `limits.login_timeout`: a connection that did not finish its login in time.
    LoginTimeout,
    /// A PDU whose data segment exceeds the MaxRecvDataSegmentLength the target declared.
    PduSize,
    /// `limits.max_mgmt_clients`: management socket clients served at once.
    MgmtClients,
    /// The CmdSN window (`MaxQueueCmd` outstanding commands per session): a command outside
    /// it is dropped.
    CommandWindow,
}

impl Limit {
    /// Every limit, in the order of the metric's series.
    pub const ALL: [Limit; 7] = [
        Limit::Sessions,
        Limit::TargetSessions,
        Limit::Connections,
        Limit::LoginTimeout,
        Limit::PduSize,
        Limit::MgmtClients,
        Limit::CommandWindow,
    ];

    /// The metric label (`limit="sessions"`).
    pub const fn label(self) -> &'static str {
        match self {
            Limit::Sessions => "sessions",
            Limit::TargetSessions => "target_sessions",
            Limit::Connections => "connections",
            Limit::LoginTimeout => "login_timeout",
            Limit::PduSize => "pdu_size",
            Limit::MgmtClients => "mgmt_clients",
            Limit::CommandWindow => "command_window",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What [`BurstLog::hit`] and [`BurstLog::flush`] ask the caller to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLine {
    /// The first refusal of a burst: log it with its details.
    First,
    /// `n` refusals were counted silently during the last window.
    Summary(u64),
}

/// Rate limit of one kind of log line: the first event logs, the following ones within
/// [`BURST_WINDOW`] are only counted; when the window ends their number is logged in one
/// line and a new window starts. A window with nothing counted ends the burst: the next
/// event logs again.
#[derive(Debug, Default)]
pub struct BurstLog {
    /// Start of the current window and the events counted in it (None: no burst).
    window: Option<(Instant, u64)>,
}

impl BurstLog {
    /// One more event at `now`. `Some(First)`: log it; `Some(Summary(n))`: the window
    /// that just ended counted `n` more (log that, then this event is counted in the next
    /// window); `None`: counted for the next summary.
    pub fn hit(&mut self, now: Instant) -> Option<LogLine> {
        let summary = self.flush(now);
        match &mut self.window {
            None => {
                self.window = Some((now, 0));
                Some(summary.unwrap_or(LogLine::First))
            }
            Some((_, n)) => {
                *n += 1;
                summary
            }
        }
    }

    /// Ends a window that is over at `now`: `Some(Summary(n))` when it counted `n > 0`
    /// events (a new window starts: the burst goes on), `None` otherwise (the burst is over
    /// when it counted none).
    pub fn flush(&mut self, now: Instant) -> Option<LogLine> {
        let (start, n) = self.window?;
        if now.saturating_duration_since(start) < BURST_WINDOW {
            return None;
        }
        if n == 0 {
            self.window = None;
            None
        } else {
            self.window = Some((now, 0));
            Some(LogLine::Summary(n))
        }
    }
}

/// The limits in force and their refusals.
#[derive(Debug)]
pub struct Limits {
    max_sessions: AtomicU32,
    max_connections: AtomicU32,
    login_timeout_s: AtomicU32,
    max_mgmt_clients: AtomicU32,
    refusals: [AtomicU64; Limit::ALL.len()],
    logs: [Mutex<BurstLog>; Limit::ALL.len()],
}

impl Default for Limits {
    fn default() -> Self {
        let l = Limits {
            max_sessions: AtomicU32::new(0),
            max_connections: AtomicU32::new(0),
            login_timeout_s: AtomicU32::new(0),
            max_mgmt_clients: AtomicU32::new(0),
            refusals: Default::default(),
            logs: Default::default(),
        };
        l.apply(&config::LimitsSettings::default());
        l
    }
}

impl Limits {
    /// Takes the values of a (validated) `limits:` section.
    pub fn apply(&self, s: &config::LimitsSettings) {
        self.max_sessions.store(s.max_sessions, Ordering::Relaxed);
        self.max_connections
            .store(s.max_connections, Ordering::Relaxed);
        self.login_timeout_s
            .store(s.login_timeout, Ordering::Relaxed);
        self.max_mgmt_clients
            .store(s.max_mgmt_clients, Ordering::Relaxed);
    }

    /// The values in force, as a `limits:` section.
    pub fn settings(&self) -> config::LimitsSettings {
        config::LimitsSettings {
            max_sessions: self.max_sessions.load(Ordering::Relaxed),
            max_connections: self.max_connections.load(Ordering::Relaxed),
            login_timeout: self.login_timeout_s.load(Ordering::Relaxed),
            max_mgmt_clients: self.max_mgmt_clients.load(Ordering::Relaxed),
        }
    }

    pub fn max_sessions(&self) -> usize {
        self.max_sessions.load(Ordering::Relaxed) as usize
    }

    pub fn max_connections(&self) -> usize {
        self.max_connections.load(Ordering::Relaxed) as usize
    }

    pub fn login_timeout_ms(&self) -> u64 {
        u64::from(self.login_timeout_s.load(Ordering::Relaxed)) * 1000
    }

    pub fn max_mgmt_clients(&self) -> usize {
        self.max_mgmt_clients.load(Ordering::Relaxed) as usize
    }

    /// Refusals of `which` since the start.
    pub fn refusals(&self, which: Limit) -> u64 {
        self.refusals[which.index()].load(Ordering::Relaxed)
    }

    /// Counts one refusal of `which` and logs it if it starts a burst (`what` says what
    /// was refused and why, e.g. "login refused: 2 sessions (limits.max_sessions)"),
    /// or the summary of the previous window when that is due.
    pub fn refuse(&self, which: Limit, peer: Option<SocketAddr>, what: std::fmt::Arguments<'_>) {
        self.refusals[which.index()].fetch_add(1, Ordering::Relaxed);
        let line = self.logs[which.index()]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hit(Instant::now());
        match line {
            Some(LogLine::First) => {
                let peer = peer.map(|p| p.to_string()).unwrap_or_default();
                tracing::warn!(
                    limit = which.label(),
                    peer,
                    "{what}; further refusals within {}s are counted and summarised",
                    BURST_WINDOW.as_secs()
                );
            }
            Some(LogLine::Summary(n)) => summary(which, n),
            None => {}
        }
    }

    /// Logs the summaries of bursts whose window is over (called on a timer).
    pub fn flush_logs(&self) {
        let now = Instant::now();
        for which in Limit::ALL {
            let line = self.logs[which.index()]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .flush(now);
            if let Some(LogLine::Summary(n)) = line {
                summary(which, n);
            }
        }
    }

    /// Admits a new connection when fewer than `max_connections` are open (`open`);
    /// otherwise counts and logs the refusal. The caller closes a refused connection at
    /// once: no Login Request has arrived, so there is nothing to answer.
    pub fn admit_connection(&self, open: usize, peer: SocketAddr) -> bool {
        let max = self.max_connections();
        if open < max {
            return true;
        }
        self.refuse(
            Limit::Connections,
            Some(peer),
            format_args!(
                "connection refused: {open} connections open (limits.max_connections {max})"
            ),
        );
        false
    }
}

fn summary(which: Limit, n: u64) {
    tracing::warn!(
        limit = which.label(),
        refused = n,
        "limit {}: {n} more refused in the last {}s",
        which.label(),
        BURST_WINDOW.as_secs()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_logs_its_first_event_and_one_summary() {
        let mut b = BurstLog::default();
        let t0 = Instant::now();
        assert_eq!(b.hit(t0), Some(LogLine::First));
        for i in 1..=5 {
            assert_eq!(b.hit(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(
            b.flush(t0 + Duration::from_secs(9)),
            None,
            "window not over"
        );
        assert_eq!(
            b.flush(t0 + BURST_WINDOW),
            Some(LogLine::Summary(5)),
            "the five silent ones"
        );
        // a quiet window ends the burst; the next event logs again
        assert_eq!(b.flush(t0 + BURST_WINDOW * 2), None);
        assert_eq!(b.hit(t0 + BURST_WINDOW * 2), Some(LogLine::First));
    }

    #[test]
    fn a_sustained_flood_logs_one_summary_per_window() {
        let mut b = BurstLog::default();
        let t0 = Instant::now();
        let mut lines = Vec::new();
        // 100 events a second for 35 s, no timer flush: hit() itself reports summaries
        for ms in (0..35_000u64).step_by(10) {
            if let Some(l) = b.hit(t0 + Duration::from_millis(ms)) {
                lines.push(l);
            }
        }
        assert_eq!(lines.first(), Some(&LogLine::First));
        let summaries: Vec<u64> = lines
            .iter()
            .filter_map(|l| match l {
                LogLine::Summary(n) => Some(*n),
                LogLine::First => None,
            })
            .collect();
        assert_eq!(lines.len(), 4, "first + 3 summaries: {lines:?}");
        assert_eq!(summaries.len(), 3);
        // every event but the first is in a summary or in the open window
        let open = 3500 - 1 - summaries.iter().sum::<u64>();
        assert!(open < 600, "{open} events left unsummarised");
    }

    #[test]
    fn refusals_are_counted_per_limit() {
        let l = Limits::default();
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("address");
        l.apply(&config::LimitsSettings {
            max_connections: 2,
            ..config::LimitsSettings::default()
        });
        assert!(l.admit_connection(1, peer));
        assert!(!l.admit_connection(2, peer));
        assert!(!l.admit_connection(3, peer));
        assert_eq!(l.refusals(Limit::Connections), 2);
        assert_eq!(l.refusals(Limit::Sessions), 0);
        assert_eq!(l.settings().max_connections, 2);
        assert_eq!(l.login_timeout_ms(), 15_000);
    }
}
