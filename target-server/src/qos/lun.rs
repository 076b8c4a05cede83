//! A LUN's limits as buckets ([`LunQos`]): one per kind of limit (IOPS and bytes per
//! second, in total, of reads, of writes), and with a burst a second bucket per kind at the
//! burst rate ([`Buckets`]); with per-initiator limits, one such set per I_T nexus too. A
//! read or write is charged to the buckets of its kind (the LUN's and its nexus's) and may
//! start when the last of them allows. The limits as set (shown by tgtadm, dumped,
//! exported) and the nexuses' sets sit beside them under locks only the management side
//! and a session's first command to the LUN take.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{BASE_TOLERANCE_NS, Bucket};

/// What a command does, for its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// The kinds of limit, in the order of the configuration's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosKind {
    Iops,
    ReadIops,
    WriteIops,
    Bps,
    ReadBps,
    WriteBps,
}

impl QosKind {
    /// Every kind.
    pub const ALL: [QosKind; 6] = [
        QosKind::Iops,
        QosKind::ReadIops,
        QosKind::WriteIops,
        QosKind::Bps,
        QosKind::ReadBps,
        QosKind::WriteBps,
    ];

    /// The configuration's name of the limit (the metrics' `kind` label): tgtadm's
    /// `qos_*` name without its prefix (`config::QOS_PARAMS` lists the six rates first).
    pub fn as_str(self) -> &'static str {
        param_key(config::QOS_PARAMS[self as usize])
    }

    /// The name of the same limit per initiator (the metrics' `kind` label): the rates
    /// after the two burst keys in `config::QOS_PARAMS`.
    pub fn initiator_str(self) -> &'static str {
        param_key(config::QOS_PARAMS[8 + self as usize])
    }
}

/// A `qos_*` parameter's name without its prefix.
fn param_key(p: &'static str) -> &'static str {
    p.strip_prefix("qos_").unwrap_or(p)
}

/// One set of limits as buckets: per [`QosKind`] the rate (with the burst's extra as
/// tolerance) and, with a burst, the burst rate.
#[derive(Debug, Default)]
pub struct Buckets {
    sustained: [Bucket; 6],
    peak: [Bucket; 6],
}

impl Buckets {
    /// `rates` (per [`QosKind`], 0: none) with a burst of `burst_ms` at `percent` % of
    /// them, from `now_ns` on.
    fn set(&self, rates: [u64; 6], burst_ms: u64, percent: u64, now_ns: u64) {
        let bursts = burst_ms > 0 && percent > 100;
        for (i, rate) in rates.into_iter().enumerate() {
            if rate > 0 && bursts {
                // a full bucket lets the burst rate run for `burst_ms`: it gains
                // (percent − 100) % of the rate's time for each unit of time
                let extra = burst_ms
                    .saturating_mul(1_000_000)
                    .saturating_mul(percent - 100)
                    / 100;
                self.sustained[i].set(rate, BASE_TOLERANCE_NS.saturating_add(extra), now_ns);
                self.peak[i].set(
                    rate.saturating_mul(percent) / 100,
                    BASE_TOLERANCE_NS,
                    now_ns,
                );
            } else {
                self.sustained[i].set(rate, BASE_TOLERANCE_NS, now_ns);
                self.peak[i].set(0, 0, now_ns);
            }
        }
    }

    /// Charges a command: when these limits let it start.
    fn charge(&self, dir: Dir, bytes: u64, now_ns: u64) -> u64 {
        let (iops, bps) = match dir {
            Dir::Read => (QosKind::ReadIops, QosKind::ReadBps),
            Dir::Write => (QosKind::WriteIops, QosKind::WriteBps),
        };
        let mut start = now_ns;
        for (k, units) in [
            (QosKind::Iops, 1),
            (iops, 1),
            (QosKind::Bps, bytes),
            (bps, bytes),
        ] {
            let i = k as usize;
            start = start
                .max(self.sustained[i].reserve(now_ns, units))
                .max(self.peak[i].reserve(now_ns, units));
        }
        start
    }
}

/// A LUN's limits and what they held back. Kept when the LUN is rebuilt by tgtadm
/// (`--op update`), set again by an update or a reload.
#[derive(Debug, Default)]
pub struct LunQos {
    /// The LUN's own limits.
    lun: Buckets,
    /// Each I_T nexus's, with per-initiator limits (made at a session's first command to
    /// the LUN, forgotten when the session ends).
    initiators: Mutex<HashMap<scsi::NexusId, Arc<Buckets>>>,
    /// Some limit is set: commands are charged.
    limited: AtomicBool,
    /// Some per-initiator limit is set.
    per_initiator: AtomicBool,
    /// The limits as set.
    limits: Mutex<config::Qos>,
    /// Commands held back.
    throttled: AtomicU64,
    /// Nanoseconds they waited, in all.
    waited_ns: AtomicU64,
}

impl LunQos {
    /// The limits `q` from `now_ns` on (its unset fields: no limit); every nexus's set too.
    pub fn set(&self, q: &config::Qos, now_ns: u64) {
        let burst_ms = q.burst_ms.unwrap_or(0);
        let percent = u64::from(q.burst_percent_or_default());
        self.lun.set(q.lun_rates(), burst_ms, percent, now_ns);
        let mut limits = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        *limits = *q;
        let initiators = self.initiators.lock().unwrap_or_else(|p| p.into_inner());
        for b in initiators.values() {
            b.set(q.initiator_rates(), burst_ms, percent, now_ns);
        }
        let per_initiator = q.initiator_rates().iter().any(|&r| r > 0);
        self.per_initiator.store(per_initiator, Ordering::Release);
        self.limited.store(!q.is_unlimited(), Ordering::Release);
    }

    /// Some per-initiator limit is set: commands are charged to their nexus's set too.
    #[inline]
    pub fn per_initiator(&self) -> bool {
        self.per_initiator.load(Ordering::Relaxed)
    }

    /// Nexus `id`'s set of per-initiator limits (made on first use, with the limits as
    /// set now): a session looks it up once and keeps it.
    pub fn initiator(&self, id: scsi::NexusId, now_ns: u64) -> Arc<Buckets> {
        let limits = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let mut initiators = self.initiators.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(initiators.entry(id).or_insert_with(|| {
            let b = Buckets::default();
            let percent = u64::from(limits.burst_percent_or_default());
            b.set(
                limits.initiator_rates(),
                limits.burst_ms.unwrap_or(0),
                percent,
                now_ns,
            );
            Arc::new(b)
        }))
    }

    /// Nexus `id` has ended: its set goes.
    pub fn forget_initiator(&self, id: scsi::NexusId) {
        self.initiators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// The limits as set.
    pub fn limits(&self) -> config::Qos {
        *self.limits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Some limit is set.
    #[inline]
    pub fn is_limited(&self) -> bool {
        self.limited.load(Ordering::Relaxed)
    }

    /// Charges a command (`dir`, `bytes` of data) at `now_ns` to the LUN's limits and,
    /// given, its nexus's: when it may start.
    pub fn charge(&self, dir: Dir, bytes: u64, now_ns: u64, initiator: Option<&Buckets>) -> u64 {
        let lun = self.lun.charge(dir, bytes, now_ns);
        initiator.map_or(lun, |b| lun.max(b.charge(dir, bytes, now_ns)))
    }

    /// A command was held back for `ns`.
    pub fn held(&self, ns: u64) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
        self.waited_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Commands held back so far, and the nanoseconds they waited.
    pub fn held_so_far(&self) -> (u64, u64) {
        (
            self.throttled.load(Ordering::Relaxed),
            self.waited_ns.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn qos(f: impl FnOnce(&mut config::Qos)) -> config::Qos {
        let mut q = config::Qos::default();
        f(&mut q);
        q
    }

    /// Starts of `n` commands charged at `now` (all at once).
    fn starts(l: &LunQos, n: usize, dir: Dir, bytes: u64, now: u64) -> Vec<u64> {
        (0..n).map(|_| l.charge(dir, bytes, now, None)).collect()
    }

    #[test]
    fn unlimited_charges_nothing() {
        let l = LunQos::default();
        assert!(!l.is_limited());
        l.set(&qos(|q| q.iops = Some(0)), 0);
        assert!(!l.is_limited());
        assert!(
            starts(&l, 100, Dir::Read, 1 << 20, 7)
                .iter()
                .all(|&s| s == 7)
        );
    }

    #[test]
    fn a_read_limit_holds_reads_not_writes() {
        let l = LunQos::default();
        l.set(&qos(|q| q.read_iops = Some(1000)), 0);
        assert!(l.is_limited());
        let r = starts(&l, 10, Dir::Read, 4096, 0);
        assert_eq!(r[9], 8 * MS, "{r:?}"); // 1 ms of tolerance: two at once
        assert!(starts(&l, 10, Dir::Write, 4096, 0).iter().all(|&s| s == 0));
    }

    #[test]
    fn the_total_limit_counts_reads_and_writes() {
        let l = LunQos::default();
        l.set(&qos(|q| q.iops = Some(1000)), 0);
        let mut last = 0;
        for i in 0..20 {
            let d = if i % 2 == 0 { Dir::Read } else { Dir::Write };
            last = l.charge(d, 512, 0, None);
        }
        assert_eq!(last, 18 * MS);
    }

    #[test]
    fn bandwidth_limits_by_bytes() {
        let l = LunQos::default();
        l.set(&qos(|q| q.bps = Some(50_000_000)), 0);
        // 100 reads of 512 KiB at 50 MB/s: the last starts about 1.04 s later
        let last = *starts(&l, 100, Dir::Read, 512 << 10, 0)
            .last()
            .unwrap_or(&0);
        let expect = 99 * (512u64 << 10) * S / 50_000_000 - MS;
        assert!(last.abs_diff(expect) < MS, "{last} vs {expect}");
    }

    #[test]
    fn a_burst_runs_at_its_rate_for_its_time_then_falls_back() {
        let l = LunQos::default();
        // 1000 IOPS, bursts of 2x for 2 s
        l.set(
            &qos(|q| {
                q.iops = Some(1000);
                q.burst_ms = Some(2000);
                q.burst_percent = Some(200);
            }),
            0,
        );
        // offer 5000 commands at once: they start at 2000/s for 2 s, then at 1000/s
        let s = starts(&l, 5000, Dir::Read, 4096, 0);
        let by = |t: u64| s.iter().filter(|&&x| x < t).count();
        let first_second = by(S);
        let second_second = by(2 * S) - by(S);
        let third_second = by(3 * S) - by(2 * S);
        assert!((1990..=2010).contains(&first_second), "{first_second}");
        assert!((1990..=2010).contains(&second_second), "{second_second}");
        assert!((990..=1010).contains(&third_second), "{third_second}");
    }

    #[test]
    fn each_initiator_has_its_own_limit_within_the_luns() {
        let l = LunQos::default();
        l.set(
            &qos(|q| {
                q.initiator_iops = Some(1000);
                q.iops = Some(1500);
            }),
            0,
        );
        assert!(l.is_limited() && l.per_initiator());
        let (a, b) = (
            l.initiator(scsi::NexusId(1), 0),
            l.initiator(scsi::NexusId(2), 0),
        );
        assert!(
            Arc::ptr_eq(&a, &l.initiator(scsi::NexusId(1), 0)),
            "one set per nexus"
        );
        // A alone: held to its 1000/s
        let sa: Vec<u64> = (0..10)
            .map(|_| l.charge(Dir::Read, 512, 0, Some(&a)))
            .collect();
        assert_eq!(sa[9], 8 * MS, "{sa:?}");
        // B is not held by A's limit, only by the LUN's (1500/s, 10 already charged)
        let sb = l.charge(Dir::Read, 512, 0, Some(&b));
        assert!(sb < 8 * MS, "{sb}");
        // a change reaches the nexuses' sets
        l.set(&qos(|q| q.initiator_iops = Some(0)), S);
        assert!(!l.per_initiator() && !l.is_limited());
        assert_eq!(l.charge(Dir::Read, 512, S, Some(&a)), S);
        l.forget_initiator(scsi::NexusId(1));
        assert!(
            !Arc::ptr_eq(&a, &l.initiator(scsi::NexusId(1), S)),
            "forgotten"
        );
    }

    #[test]
    fn kinds_are_named_as_the_configuration_names_them() {
        let names: Vec<_> = QosKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "iops",
                "read_iops",
                "write_iops",
                "bps",
                "read_bps",
                "write_bps"
            ]
        );
        assert_eq!(QosKind::WriteBps.initiator_str(), "initiator_write_bps");
        assert_eq!(QosKind::Iops.initiator_str(), "initiator_iops");
    }

    #[test]
    fn held_commands_are_counted() {
        let l = LunQos::default();
        l.held(5 * MS);
        l.held(MS);
        assert_eq!(l.held_so_far(), (2, 6 * MS));
    }

    #[test]
    fn the_limits_as_set_are_kept() {
        let l = LunQos::default();
        let q = qos(|q| {
            q.write_bps = Some(1 << 20);
            q.burst_ms = Some(500);
        });
        l.set(&q, 0);
        assert_eq!(l.limits(), q);
        assert_eq!(l.limits().lun_rates()[QosKind::WriteBps as usize], 1 << 20);
    }
}
