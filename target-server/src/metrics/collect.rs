//! One scrape: read every counter the daemon keeps (LUN I/O blocks, the cache's per-node
//! counters, event threads, I/O pools, sessions, protocol events) and turn them into metric
//! families. Runs on the metrics thread; takes only locks the data path does not hold per
//! I/O (the registry's tables, each LUN's statistics list).

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use scsi::AccessState;

use super::family::Family;
use crate::backend::Workers;
use crate::event_loop::Shared;
use crate::io_stats::{BUCKET_BOUNDS_NS, ERROR_KINDS, IoClass, IoTotals, c};
use crate::registry::Lun;

/// What the metrics thread reads.
pub struct Source {
    pub shared: std::sync::Arc<Shared>,
    /// Export `numatgt_session_info`.
    pub session_info: bool,
    /// The standard `process_*` metrics.
    pub process: prometheus::process_collector::ProcessCollector,
}

const NS: f64 = 1e-9;

/// Every metric family, in a stable order.
pub fn gather(src: &Source) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    daemon(src, &mut out);
    protocol(src, &mut out);
    luns(src, &mut out);
    nodes(src, &mut out);
    iser(&mut out);
    let mut process = src.process.collect();
    // the collector rounds CPU time down to whole seconds: give it clock-tick precision
    if let Some(cpu) = process_cpu_seconds() {
        for mf in process
            .iter_mut()
            .filter(|f| f.name() == "process_cpu_seconds_total")
        {
            for m in mf.mut_metric() {
                let mut c = prometheus::proto::Counter::default();
                c.set_value(cpu);
                m.set_counter(c);
            }
        }
    }
    out.extend(process);
    out
}

/// User + system CPU time of this process from /proc/self/stat, in seconds.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // fields after the command name (which may hold spaces) start at its closing ')'
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)? as f64;
    Some((utime + stime) / hz)
}

fn push(out: &mut Vec<MetricFamily>, f: Family) {
    if let Some(mf) = f.done() {
        out.push(mf);
    }
}

fn daemon(src: &Source, out: &mut Vec<MetricFamily>) {
    let sh = &src.shared;
    let mut build = Family::gauge(
        "numatgt_build_info",
        "numatgtd's version and NUMA layout (always 1).",
    );
    let nodes = sh.topology.node_count().to_string();
    let virt = if sh.topology.is_virtual() {
        "true"
    } else {
        "false"
    };
    build.add(
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("numa_nodes", &nodes),
            ("nodes_virtual", virt),
        ],
        1.0,
    );
    push(out, build);

    upgrades(out);
    warm_start(out);

    let targets = sh.registry.targets();
    let mut nt = Family::gauge("numatgt_targets", "Targets configured.");
    nt.add(&[], targets.len() as f64);
    push(out, nt);
    let mut nl = Family::gauge("numatgt_luns", "Logical units configured, all targets.");
    nl.add(
        &[],
        targets.iter().map(|t| t.lun_set().map.len()).sum::<usize>() as f64,
    );
    push(out, nl);
    let mut rados = Family::gauge(
        "numatgt_rbd_cluster_connections",
        "Ceph cluster connections open (one per cluster, client and settings, shared by its \
         RBD LUNs; one per LUN that gateways arbitrate).",
    );
    rados.add(&[], rbd::connections() as f64);
    push(out, rados);

    let mut sessions = Family::gauge(
        "numatgt_sessions",
        "Logged-in normal sessions per target and transport.",
    );
    let mut conns = Family::gauge(
        "numatgt_connections",
        "Connections in full feature phase per target and transport.",
    );
    let mut info = Family::gauge(
        "numatgt_session_info",
        "One series per logged-in session, naming its initiator (opt-in: metrics.session_info).",
    );
    for t in &targets {
        let s = sh.registry.sessions_of(&t.iqn);
        for d in config::Driver::ALL {
            let n = s.iter().filter(|v| v.transport == d).count();
            // every target has its series of the default transport (iscsi); one of another
            // transport when it is the target's or has sessions (every target is reachable
            // over every transport)
            if d != config::Driver::default() && n == 0 && t.driver != d {
                continue;
            }
            let labels = [("target", t.iqn.as_str()), ("transport", d.as_str())];
            sessions.add(&labels, n as f64);
            // one connection per session (MaxConnections=1)
            conns.add(&labels, n as f64);
        }
        if src.session_info {
            for v in &s {
                let tsih = v.tsih.to_string();
                info.add(
                    &[
                        ("target", t.iqn.as_str()),
                        ("initiator", v.initiator.as_str()),
                        ("tsih", &tsih),
                        ("transport", v.transport.as_str()),
                    ],
                    1.0,
                );
            }
        }
    }
    push(out, sessions);
    push(out, conns);
    push(out, info);
}

/// The cache's warm start (`backend::warm`).
fn warm_start(out: &mut Vec<MetricFamily>) {
    use std::sync::atomic::Ordering::Relaxed;
    let p = crate::backend::warm::progress();
    let mut blocks = Family::gauge(
        "numatgt_cache_warm_blocks",
        "The cache's warm start (after a live upgrade, or a clean stop with \
         cache.warm_restart): blocks the previous process had cached (listed), cached again \
         from the memory it passed on without a read (adopted), read into the cache again \
         (loaded), already there or busy (skipped), not tried because a partition was full \
         or a read failed (dropped).",
    );
    blocks.add(&[("state", "listed")], p.listed.load(Relaxed) as f64);
    blocks.add(&[("state", "adopted")], p.adopted.load(Relaxed) as f64);
    blocks.add(&[("state", "loaded")], p.loaded.load(Relaxed) as f64);
    blocks.add(&[("state", "skipped")], p.skipped.load(Relaxed) as f64);
    blocks.add(&[("state", "dropped")], p.dropped.load(Relaxed) as f64);
    push(out, blocks);
    let mut running = Family::gauge(
        "numatgt_cache_warm_jobs",
        "1 while the cache's warm start is loading, 0 when it is done (or there is none).",
    );
    running.add(&[], p.running() as f64);
    push(out, running);
}

/// Live upgrades (`numatgtadm --upgrade`) this process went through, and the last one's
/// figures (zeros before the first).
fn upgrades(out: &mut Vec<MetricFamily>) {
    let last = crate::upgrade_stats::last();
    let mut n = Family::counter(
        "numatgt_upgrades_total",
        "Live upgrades (numatgtadm --upgrade) this process went through.",
    );
    n.add(&[], last.map_or(0.0, |u| u.count as f64));
    push(out, n);
    let u = last.unwrap_or_default();
    let mut secs = Family::gauge(
        "numatgt_upgrade_last_seconds",
        "The last live upgrade: seconds no executable served (paused), the sessions took \
         to log out (quiesce), the old executable's write-back, sync and close took \
         (writeback).",
    );
    secs.add(&[("phase", "paused")], u.paused_s);
    secs.add(&[("phase", "quiesce")], u.quiesce_s);
    secs.add(&[("phase", "writeback")], u.writeback_s);
    push(out, secs);
    let mut conns = Family::gauge(
        "numatgt_upgrade_last_connections",
        "The last live upgrade's connections: moved to the new process with their sessions \
         (moved), asked to log out (asked), still open when the wait ended and closed \
         (closed).",
    );
    conns.add(&[("outcome", "moved")], u.moved as f64);
    conns.add(&[("outcome", "asked")], u.asked as f64);
    conns.add(&[("outcome", "closed")], u.closed as f64);
    push(out, conns);
}

fn protocol(src: &Source, out: &mut Vec<MetricFamily>) {
    use crate::proto_stats::{LOGIN_RESULTS, REJECT_REASONS, TMF_FUNCTIONS};
    let mut logins = Family::counter(
        "numatgt_logins_total",
        "Login attempts by outcome (target \"\" when no configured target was named).",
    );
    let mut auth = Family::counter(
        "numatgt_auth_failures_total",
        "CHAP authentication failures.",
    );
    let mut tmf = Family::counter(
        "numatgt_task_management_total",
        "Task management requests by function.",
    );
    let mut rejects = Family::counter(
        "numatgt_pdus_rejected_total",
        "Reject PDUs sent, by reason (RFC 7143 11.17.1).",
    );
    let mut digests = Family::counter(
        "numatgt_digest_errors_total",
        "Header or data digest mismatches.",
    );
    // every configured target has its series (zeros included), and "" always
    let mut names: Vec<String> = src
        .shared
        .registry
        .targets()
        .iter()
        .map(|t| t.iqn.clone())
        .collect();
    names.push(String::new());
    for n in &names {
        let _ = src.shared.proto_stats.target(n);
    }
    for (target, c) in src.shared.proto_stats.all() {
        let t = ("target", target.as_str());
        for (i, r) in LOGIN_RESULTS.iter().enumerate() {
            logins.add(&[t, ("result", r)], c.logins[i] as f64);
        }
        auth.add(&[t], c.auth_failures as f64);
        // every label value, zeros included (bounded: 9 functions, 11 reasons per target),
        // so that rates start from zero
        for (i, f) in TMF_FUNCTIONS.iter().enumerate() {
            tmf.add(&[t, ("function", f)], c.tmf[i] as f64);
        }
        for (i, r) in REJECT_REASONS.iter().enumerate() {
            rejects.add(&[t, ("reason", r)], c.rejects[i] as f64);
        }
        digests.add(&[t], c.digest_errors as f64);
    }
    // every limit has its series, zeros included
    let mut refused = Family::counter(
        "numatgt_limit_refusals_total",
        "Connections, logins and management clients refused (or dropped) by a resource limit.",
    );
    let limits = &src.shared.registry.limits;
    for l in crate::limits::Limit::ALL {
        refused.add(&[("limit", l.label())], limits.refusals(l) as f64);
    }
    for f in [logins, auth, tmf, rejects, digests, refused] {
        push(out, f);
    }
}

/// What iSER holds registered with RDMA devices and keeps posted (zeros without iSER).
fn iser(out: &mut Vec<MetricFamily>) {
    use crate::transport::IserMemoryKind as Kind;
    let g = crate::transport::iser_gauges();
    let mut conns = Family::gauge(
        "numatgt_iser_connections",
        "iSER connections holding RDMA resources (queue pairs not yet released).",
    );
    conns.add(&[], g.connections as f64);
    let mut bytes = Family::gauge(
        "numatgt_iser_registered_bytes",
        "Memory iSER has registered (pinned) with RDMA devices, by use: receive and send \
         buffers, staging chunks, the block cache's arenas.",
    );
    for (k, b) in Kind::ALL.iter().zip(g.bytes) {
        bytes.add(&[("kind", k.label())], b as f64);
    }
    let mut posted = Family::gauge(
        "numatgt_iser_posted_receives",
        "Receives iSER keeps posted: in shared receive queues, or in per-connection receive \
         queues.",
    );
    posted.add(&[("queue", "shared")], g.posted_shared as f64);
    posted.add(&[("queue", "connection")], g.posted_own as f64);
    let mut srqs = Family::gauge(
        "numatgt_iser_shared_receive_queues",
        "Shared receive queues (one per event thread and RDMA device with connections).",
    );
    srqs.add(&[], g.srqs as f64);
    let mut pages = Family::counter(
        "numatgt_iser_shared_pool_pages_total",
        "Pages of the shared receive and staging pools made so far, by where the kernel \
         placed them: on the NUMA node of the event thread that made them (local) or not.",
    );
    pages.add(&[("placement", "local")], g.pool_pages[0] as f64);
    pages.add(&[("placement", "remote")], g.pool_pages[1] as f64);
    let mut data = Family::counter(
        "numatgt_iser_data_bytes_total",
        "Command data iSER moved by RDMA, by iSCSI direction (in: READ data to the initiator, \
         out: WRITE data from it) and path: direct (RDMA straight from pinned cache blocks, or \
         into the cache slots that keep the data: no copy) or staged (through registered \
         staging chunks, one copy). Added once a second per connection.",
    );
    for (p, b) in crate::transport::IserDataPath::ALL.iter().zip(g.data) {
        let (direction, path) = p.labels();
        data.add(&[("direction", direction), ("path", path)], b as f64);
    }
    let mut calls = Family::counter(
        "numatgt_iser_verbs_calls_total",
        "Verbs calls of the iSER data path that enter the kernel with soft-RoCE (rxe): \
         completion events read (one per wake-up: cq_event), completion queue re-arms \
         (cq_arm) and send-queue posts (post_send, one doorbell per batch). Added once a \
         second per connection.",
    );
    let mut completions = Family::counter(
        "numatgt_iser_completions_total",
        "Work completions iSER polled, by queue: send (Sends, RDMA READs, signaled RDMA \
         WRITEs; unsignaled WRITEs complete without one) and receive (iSER messages). \
         Added once a second per connection.",
    );
    for (c, n) in crate::transport::IserCall::ALL.iter().zip(g.calls) {
        use crate::transport::IserCall as C;
        match c {
            C::SendCompletion | C::RecvCompletion => {
                completions.add(&[("queue", c.label())], n as f64);
            }
            _ => calls.add(&[("call", c.label())], n as f64),
        }
    }
    for f in [conns, bytes, posted, srqs, pages, data, calls, completions] {
        push(out, f);
    }
}

/// The per-LUN families: every LUN of every target (by tid) adds its I/O counters, its
/// identity (capacity, what backs it), its latency histogram, its ALUA state and its RBD
/// image's own operations.
fn luns(src: &Source, out: &mut Vec<MetricFamily>) {
    let mut io = LunIo::new();
    let mut id = LunIdentity::new();
    let mut latency = LunLatency::new();
    let mut rbd = RbdOps::new();
    let mut alua = LunAlua::new();
    let mut pr = LunPr::new();
    let mut ship = LunShip::new();
    let mut qos = LunQosFamilies::new();
    let bounds: Vec<f64> = BUCKET_BOUNDS_NS.iter().map(|&b| b as f64 * NS).collect();
    let mut targets = src.shared.registry.targets();
    targets.sort_by_key(|t| t.tid);
    for t in &targets {
        for (n, lun) in &t.lun_set().map {
            let n = n.to_string();
            let l = [("target", t.iqn.as_str()), ("lun", n.as_str())];
            let s = lun.stats.totals();
            io.add(l, &s);
            id.add(l, lun);
            latency.add(l, &s, &bounds);
            rbd.add(l, lun, &bounds);
            alua.add(l, lun);
            pr.add(l, lun);
            ship.add(l, lun);
            qos.add(l, lun);
        }
    }
    io.push(out);
    id.push(out);
    latency.push(out);
    rbd.push(out);
    alua.push(out);
    pr.push(out);
    ship.push(out);
    qos.push(out);
}

/// A LUN's QoS: its limits (the LUNs that have some), the commands they held back and how
/// long those waited (every LUN).
struct LunQosFamilies {
    limit: Family,
    throttled: Family,
    waited: Family,
}

impl LunQosFamilies {
    fn new() -> LunQosFamilies {
        LunQosFamilies {
            limit: Family::gauge(
                "numatgt_lun_qos_limit",
                "QoS limit of the LUN by kind: iops, read_iops, write_iops (commands per second), bps, read_bps, write_bps (bytes per second), and initiator_iops … initiator_write_bps (each initiator's); 0 = no limit of that kind. Only LUNs with a limit have series.",
            ),
            throttled: Family::counter(
                "numatgt_lun_qos_throttled_commands_total",
                "Reads and writes of the LUN its QoS limits held back before they started.",
            ),
            waited: Family::counter(
                "numatgt_lun_qos_wait_seconds_total",
                "Time the held-back commands of the LUN waited for their QoS limits, in all.",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, lun: &Lun) {
        let q = lun.qos.limits();
        if !q.is_unlimited() {
            let (lun, initiator) = (q.lun_rates(), q.initiator_rates());
            for (i, k) in crate::qos::QosKind::ALL.into_iter().enumerate() {
                self.limit
                    .add(&[l[0], l[1], ("kind", k.as_str())], lun[i] as f64);
                let kind = ("kind", k.initiator_str());
                self.limit.add(&[l[0], l[1], kind], initiator[i] as f64);
            }
        }
        let (held, waited_ns) = lun.qos.held_so_far();
        self.throttled.add(&l, held as f64);
        self.waited.add(&l, waited_ns as f64 * NS);
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.limit);
        push(out, self.throttled);
        push(out, self.waited);
    }
}

/// A LUN's labels: target and LUN number.
type LunLabels<'a> = [(&'static str, &'a str); 2];

/// The I/O a LUN served, as node_exporter's disk statistics count it, and its errors.
struct LunIo {
    reads: Family,
    writes: Family,
    rbytes: Family,
    wbytes: Family,
    rtime: Family,
    wtime: Family,
    now: Family,
    iot: Family,
    iow: Family,
    flush: Family,
    disc: Family,
    dbytes: Family,
    errors: Family,
}

impl LunIo {
    fn new() -> LunIo {
        let counter = |name: &str, help: &str| Family::counter(name, help);
        LunIo {
            reads: counter(
                "numatgt_lun_reads_completed_total",
                "READ commands completed (any status).",
            ),
            writes: counter(
                "numatgt_lun_writes_completed_total",
                "WRITE-type commands completed (any status).",
            ),
            rbytes: counter(
                "numatgt_lun_read_bytes_total",
                "Bytes read by successful READ commands.",
            ),
            wbytes: counter(
                "numatgt_lun_written_bytes_total",
                "Bytes written by successful WRITE-type commands.",
            ),
            rtime: counter(
                "numatgt_lun_read_time_seconds_total",
                "Sum of READ latencies (command received to response queued).",
            ),
            wtime: counter(
                "numatgt_lun_write_time_seconds_total",
                "Sum of WRITE-type latencies.",
            ),
            now: Family::gauge(
                "numatgt_lun_io_now",
                "Reads, writes, discards and flushes in flight.",
            ),
            iot: counter(
                "numatgt_lun_io_time_seconds_total",
                "Time with I/O in flight, summed over connections.",
            ),
            iow: counter(
                "numatgt_lun_io_time_weighted_seconds_total",
                "I/O in flight integrated over time.",
            ),
            flush: counter(
                "numatgt_lun_flush_requests_total",
                "SYNCHRONIZE CACHE commands completed.",
            ),
            disc: counter(
                "numatgt_lun_discards_completed_total",
                "UNMAP and WRITE SAME with UNMAP commands completed.",
            ),
            dbytes: counter(
                "numatgt_lun_discarded_bytes_total",
                "Bytes deallocated by successful discards.",
            ),
            errors: counter(
                "numatgt_lun_errors_total",
                "Commands that did not end GOOD, by sense key (or status without sense data).",
            ),
        }
    }

    /// The LUN's counters, and its errors by sense key (only the kinds that happened).
    fn add(&mut self, l: LunLabels<'_>, s: &IoTotals) {
        self.reads.add(&l, s.c[c::RD_DONE] as f64);
        self.writes.add(&l, s.c[c::WR_DONE] as f64);
        self.rbytes.add(&l, s.c[c::RD_BYTES] as f64);
        self.wbytes.add(&l, s.c[c::WR_BYTES] as f64);
        self.rtime.add(&l, s.c[c::RD_NS] as f64 * NS);
        self.wtime.add(&l, s.c[c::WR_NS] as f64 * NS);
        self.now.add(&l, s.c[c::INFLIGHT] as f64);
        self.iot.add(&l, s.c[c::IO_NS] as f64 * NS);
        self.iow.add(&l, s.c[c::WEIGHTED_NS] as f64 * NS);
        self.flush.add(&l, s.c[c::FLUSH_DONE] as f64);
        self.disc.add(&l, s.c[c::DISCARD_DONE] as f64);
        self.dbytes.add(&l, s.c[c::DISCARD_BYTES] as f64);
        for (k, name) in ERROR_KINDS.iter().enumerate() {
            let v = s.errors[k];
            if v > 0 {
                self.errors
                    .add(&[l[0], l[1], ("sense_key", name)], v as f64);
            }
        }
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        let LunIo {
            reads,
            writes,
            rbytes,
            wbytes,
            rtime,
            wtime,
            now,
            iot,
            iow,
            flush,
            disc,
            dbytes,
            errors,
        } = self;
        for f in [
            reads, writes, rbytes, wbytes, rtime, wtime, now, iot, iow, flush, disc, dbytes, errors,
        ] {
            push(out, f);
        }
    }
}

/// A LUN's command latency, one histogram per command class.
struct LunLatency {
    hist: Family,
}

impl LunLatency {
    fn new() -> LunLatency {
        LunLatency {
            hist: Family::histogram(
                "numatgt_lun_io_duration_seconds",
                "Command latency, command received to response queued.",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, s: &IoTotals, bounds: &[f64]) {
        for k in IoClass::ALL {
            let i = k as usize;
            self.hist.add_histogram(
                &[l[0], l[1], ("op", k.label())],
                bounds,
                &s.hist[i],
                s.hist_ns[i] as f64 * NS,
            );
        }
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.hist);
    }
}

/// What a LUN is: its size, and what backs it with which cache mode.
struct LunIdentity {
    cap: Family,
    info: Family,
}

impl LunIdentity {
    fn new() -> LunIdentity {
        LunIdentity {
            cap: Family::gauge("numatgt_lun_capacity_bytes", "Size of the logical unit."),
            info: Family::gauge(
                "numatgt_lun_info",
                "What backs the logical unit, its cache mode and device type (always 1).",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, lun: &Lun) {
        let LunIdentity { cap, info } = self;
        cap.add(&l, lun.store.size() as f64);
        {
            let meta = lun.meta.lock().unwrap_or_else(|p| p.into_inner());
            info.add(
                &[
                    l[0],
                    l[1],
                    ("backing_store", meta.path.as_str()),
                    ("bs_type", meta.bstype.as_str()),
                    ("cache", lun.cache_mode.as_str()),
                    ("device_type", lun.scsi.params().device_type.as_str()),
                ],
                1.0,
            );
        }
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.cap);
        push(out, self.info);
    }
}

/// Every ALUA access state (SPC-4 table 90) with its `state` label, in the order of their
/// ASYMMETRIC ACCESS STATE codes: `numatgt_lun_alua_state` has one series per entry.
const ALUA_STATES: [(AccessState, &str); 5] = [
    (AccessState::ActiveOptimized, "active_optimized"),
    (AccessState::ActiveNonOptimized, "active_non_optimized"),
    (AccessState::Standby, "standby"),
    (AccessState::Unavailable, "unavailable"),
    (AccessState::Transitioning, "transitioning"),
];

/// Where `s` is in [`ALUA_STATES`]. The match has no wildcard: a state added to
/// `scsi::AccessState` does not compile here until it has its entry (and the unit test
/// checks that the entry is in its place).
const fn alua_state_index(s: AccessState) -> usize {
    match s {
        AccessState::ActiveOptimized => 0,
        AccessState::ActiveNonOptimized => 1,
        AccessState::Standby => 2,
        AccessState::Unavailable => 3,
        AccessState::Transitioning => 4,
    }
}

/// The samples of `numatgt_lun_alua_state` for a LUN in state `now`: each state's label,
/// with 1 for `now` and 0 for the others (node_exporter's `node_systemd_unit_state` form).
fn alua_state_samples(now: AccessState) -> impl Iterator<Item = (&'static str, f64)> {
    let now = alua_state_index(now);
    ALUA_STATES
        .iter()
        .enumerate()
        .map(move |(i, &(_, label))| (label, if i == now { 1.0 } else { 0.0 }))
}

/// A LUN's asymmetric access: this gateway's state, the owner group, ownership moves.
struct LunAlua {
    alua_state: Family,
    alua_owner: Family,
    alua_moves: Family,
    alua_causes: Family,
}

impl LunAlua {
    fn new() -> LunAlua {
        LunAlua {
            alua_state: Family::gauge(
                "numatgt_lun_alua_state",
                "Asymmetric access state of this gateway's port group for the LUN: one series per state (active_optimized, active_non_optimized, standby, unavailable, transitioning), 1 for the current one, 0 for the others.",
            ),
            alua_owner: Family::gauge(
                "numatgt_lun_alua_owner_group",
                "Target port group that owns the LUN, as this gateway knows it.",
            ),
            alua_moves: Family::counter(
                "numatgt_lun_alua_transitions_total",
                "Ownership moves of an RBD LUN seen by this gateway: takeover (it took the LUN), fenced_other (… breaking a silent owner's lock), release (it handed the LUN over), fenced (its own lock was broken).",
            ),
            alua_causes: Family::counter(
                "numatgt_lun_alua_takeover_causes_total",
                "Takeovers of an RBD LUN by this gateway, by what asked for them: io (a command through this gateway's non-owner path: a standby path, or an active/non-optimized one whose link to the owner failed), stpg (SET TARGET PORT GROUPS), admin (tgtadm alua_owner=).",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, lun: &Lun) {
        let LunAlua {
            alua_state,
            alua_owner,
            alua_moves,
            alua_causes,
        } = self;
        for (state, v) in alua_state_samples(lun.scsi.access_state()) {
            alua_state.add(&[l[0], l[1], ("state", state)], v);
        }
        let owner = match &lun.rbd_ownership {
            Some(a) => a.owner_group(),
            None => {
                lun.meta
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .alua_owner
            }
        };
        alua_owner.add(&l, f64::from(owner));
        if let Some(a) = &lun.rbd_ownership {
            let m = &a.transitions;
            for (kind, v) in [
                ("takeover", &m.takeovers),
                ("fenced_other", &m.fenced_others),
                ("release", &m.releases),
                ("fenced", &m.fenced),
            ] {
                let v = v.load(std::sync::atomic::Ordering::Relaxed);
                alua_moves.add(&[l[0], l[1], ("kind", kind)], v as f64);
            }
            for (cause, v) in crate::alua::MoveCause::ALL.iter().zip(&m.causes) {
                let v = v.load(std::sync::atomic::Ordering::Relaxed);
                alua_causes.add(&[l[0], l[1], ("cause", cause.label())], v as f64);
            }
        }
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.alua_state);
        push(out, self.alua_owner);
        push(out, self.alua_moves);
        push(out, self.alua_causes);
    }
}

/// A LUN's persistent reservations: PRgeneration and registrations (every LUN), and for
/// the RBD LUNs whose reservations several gateways share, the traffic with the cluster.
struct LunPr {
    generation: Family,
    registrations: Family,
    shared_changes: Family,
    shared_taken: Family,
    shared_rewatches: Family,
    shared_stale: Family,
    shared_fenced: Family,
}

impl LunPr {
    fn new() -> LunPr {
        LunPr {
            generation: Family::gauge(
                "numatgt_lun_pr_generation",
                "PRgeneration of the LUN's persistent reservations (SPC-4: counts registration changes).",
            ),
            registrations: Family::gauge(
                "numatgt_lun_pr_registrations",
                "Registered I_T nexuses of the LUN.",
            ),
            shared_changes: Family::counter(
                "numatgt_lun_pr_shared_changes_total",
                "PERSISTENT RESERVE OUT changes of a shared RBD LUN made through this gateway: written (stored in the cluster), race (the state had changed meanwhile: done again), unanswered (some other gateway did not take it in time).",
            ),
            shared_taken: Family::counter(
                "numatgt_lun_pr_shared_taken_total",
                "Reservation changes made through other gateways that this gateway took.",
            ),
            shared_rewatches: Family::counter(
                "numatgt_lun_pr_shared_rewatches_total",
                "Times the watch on the shared reservation state broke and was made again.",
            ),
            shared_fenced: Family::counter(
                "numatgt_lun_pr_shared_fenced_total",
                "Gateways this gateway fenced (blocklisted their Ceph client) because they did not take a reservation change in time.",
            ),
            shared_stale: Family::gauge(
                "numatgt_lun_pr_shared_stale",
                "1 while this gateway's copy of the shared reservations may be stale (its watch broke): media access waits.",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, lun: &Lun) {
        use std::sync::atomic::Ordering::Relaxed;
        let (generation, regs) = lun.scsi.pr_summary();
        self.generation.add(&l, f64::from(generation));
        self.registrations.add(&l, regs as f64);
        let Some(sp) = &lun.shared_pr else {
            return;
        };
        let s = &sp.stats;
        for (result, v) in [
            ("written", &s.written),
            ("race", &s.races),
            ("unanswered", &s.unanswered),
        ] {
            self.shared_changes
                .add(&[l[0], l[1], ("result", result)], v.load(Relaxed) as f64);
        }
        self.shared_taken.add(&l, s.taken.load(Relaxed) as f64);
        self.shared_rewatches
            .add(&l, s.rewatched.load(Relaxed) as f64);
        self.shared_stale
            .add(&l, f64::from(u8::from(sp.is_stale())));
        self.shared_fenced.add(&l, s.fenced.load(Relaxed) as f64);
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.generation);
        push(out, self.registrations);
        push(out, self.shared_changes);
        push(out, self.shared_taken);
        push(out, self.shared_rewatches);
        push(out, self.shared_stale);
        push(out, self.shared_fenced);
    }
}

/// I/O shipped between the gateways of an RBD LUN (`crate::ship`): from this gateway to
/// the owner (count, the owner's answer time, lost with a link, refused with a full link)
/// and served here for other gateways.
struct LunShip {
    commands: Family,
    latency: Family,
}

impl LunShip {
    fn new() -> LunShip {
        LunShip {
            commands: Family::counter(
                "numatgt_lun_shipped_commands_total",
                "Media commands of an RBD LUN several gateways export: sent (shipped from this gateway's active/non-optimized paths to the owner), served (shipped here by other gateways, run as the owner), lost (their link broke before the owner answered: answered transitioning), refused (the link was full: TASK SET FULL).",
            ),
            latency: Family::histogram(
                "numatgt_lun_shipped_command_duration_seconds",
                "Time from shipping a command to the owner's answer, as this gateway saw it.",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, lun: &Lun) {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(o) = &lun.rbd_ownership else {
            return;
        };
        let s = crate::ship::stats::of(o.record());
        for (dir, v) in [
            ("sent", &s.sent),
            ("served", &s.served),
            ("lost", &s.lost),
            ("refused", &s.refused),
        ] {
            self.commands
                .add(&[l[0], l[1], ("kind", dir)], v.load(Relaxed) as f64);
        }
        self.latency.add_histogram(
            &l,
            &crate::ship::stats::BOUNDS,
            &s.counts(),
            s.sum_ns.load(Relaxed) as f64 * NS,
        );
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.commands);
        push(out, self.latency);
    }
}

/// The RBD image's own operations as librbd answers them (RBD LUNs only): latency, errors,
/// how many were started asynchronously, how many are in flight.
struct RbdOps {
    rbd_hist: Family,
    rbd_errors: Family,
    rbd_async: Family,
    rbd_in_flight: Family,
}

impl RbdOps {
    fn new() -> RbdOps {
        RbdOps {
            rbd_hist: Family::histogram(
                "numatgt_lun_rbd_op_duration_seconds",
                "Latency of the RBD image's own operations as librbd answers them (rbd LUNs only).",
            ),
            rbd_errors: Family::counter(
                "numatgt_lun_rbd_op_errors_total",
                "RBD image operations that failed (timeouts, a sick cluster, a lost lock).",
            ),
            rbd_async: Family::counter(
                "numatgt_lun_rbd_op_async_total",
                "RBD image operations started asynchronously from an event thread (librbd aio).",
            ),
            rbd_in_flight: Family::gauge(
                "numatgt_lun_rbd_ops_in_flight",
                "RBD image operations started and not answered yet (asynchronous and blocking).",
            ),
        }
    }

    fn add(&mut self, l: LunLabels<'_>, lun: &Lun, bounds: &[f64]) {
        let RbdOps {
            rbd_hist,
            rbd_errors,
            rbd_async,
            rbd_in_flight,
        } = self;
        if let Some(lat) = lun.store.op_latency() {
            rbd_in_flight.add(&[l[0], l[1]], lat.in_flight() as f64);
            for op in cache::StoreOp::ALL {
                let h = lat.snapshot(op);
                let labels = [l[0], l[1], ("op", op.label())];
                rbd_hist.add_histogram(&labels, bounds, &h.buckets, h.sum_ns as f64 * NS);
                rbd_errors.add(&labels, h.errors as f64);
                rbd_async.add(&labels, h.asynchronous as f64);
            }
        }
    }

    fn push(self, out: &mut Vec<MetricFamily>) {
        push(out, self.rbd_hist);
        push(out, self.rbd_errors);
        push(out, self.rbd_async);
        push(out, self.rbd_in_flight);
    }
}

/// The per-node families: the NUMA cache of each node, then the event threads and the I/O
/// workers.
fn nodes(src: &Source, out: &mut Vec<MetricFamily>) {
    cache_nodes(src, out);
    threads(src, out);
}

/// Each node's cache: lookups, evictions, bytes held, write-back, locality of what it
/// served, and the requests the router forwarded from it.
fn cache_nodes(src: &Source, out: &mut Vec<MetricFamily>) {
    let sh = &src.shared;
    let mut hits = Family::counter(
        "numatgt_cache_hits_total",
        "Cache lookups whose blocks were all valid, by home node.",
    );
    let mut misses = Family::counter(
        "numatgt_cache_misses_total",
        "Cache lookups that had to read the backing store, by home node.",
    );
    let mut evictions = Family::counter(
        "numatgt_cache_evictions_total",
        "Clean blocks dropped to make room, by home node.",
    );
    let mut bytes = Family::gauge(
        "numatgt_cache_bytes",
        "Cached bytes by home node and state (clean, dirty).",
    );
    let mut capacity = Family::gauge(
        "numatgt_cache_capacity_bytes",
        "Size of the node's cache arena.",
    );
    let mut dirty_limit = Family::gauge(
        "numatgt_cache_dirty_limit_bytes",
        "Dirty bytes the node's cache may hold (cache.dirty_limit): above it, writes are not \
         cached but written through.",
    );
    let mut wb = Family::counter(
        "numatgt_cache_writeback_bytes_total",
        "Dirty bytes written back to the backing stores, by home node.",
    );
    let mut served = Family::counter(
        "numatgt_served_bytes_total",
        "Bytes served from cache blocks homed on the serving node (local) or another (remote).",
    );
    let mut fwd = Family::counter(
        "numatgt_router_forwards_total",
        "Requests the affinity router sent from one node to another.",
    );
    if let Some(cache) = sh.cache.as_ref() {
        let block = cache.config().block_size as f64;
        for node in 0..sh.topology.node_count() {
            let n = node.to_string();
            let l = [("node", n.as_str())];
            let Some(cn) = cache.node_counters(node) else {
                continue;
            };
            let s = cn.snapshot();
            hits.add(&l, s.hits as f64);
            misses.add(&l, s.misses as f64);
            evictions.add(&l, s.evictions as f64);
            let cached = s.cached_blocks as f64 * block;
            let dirty = s.dirty_bytes as f64;
            bytes.add(&[l[0], ("state", "clean")], (cached - dirty).max(0.0));
            bytes.add(&[l[0], ("state", "dirty")], dirty);
            let arena: usize = cache
                .arenas()
                .iter()
                .filter(|a| a.node() == node)
                .map(|a| a.len())
                .sum();
            capacity.add(&l, arena as f64);
            dirty_limit.add(&l, cache.config().dirty_limit_bytes as f64);
            wb.add(&l, s.writeback_bytes as f64);
            served.add(&[l[0], ("locality", "local")], s.served_local_bytes as f64);
            served.add(
                &[l[0], ("locality", "remote")],
                s.served_remote_bytes as f64,
            );
            for (to, v) in cn.forwards_to().into_iter().enumerate() {
                let to = to.to_string();
                fwd.add(&[("from", n.as_str()), ("to", to.as_str())], v as f64);
            }
        }
    }
    for f in [
        hits,
        misses,
        evictions,
        bytes,
        capacity,
        dirty_limit,
        wb,
        served,
        fwd,
    ] {
        push(out, f);
    }
}

/// How busy each event thread was, and how many jobs wait for each node's I/O workers.
fn threads(src: &Source, out: &mut Vec<MetricFamily>) {
    let sh = &src.shared;
    let mut busy = Family::counter(
        "numatgt_event_thread_busy_seconds_total",
        "Time each event thread spent working (not waiting for events).",
    );
    let mut depth = Family::gauge(
        "numatgt_io_worker_queue_depth",
        "Jobs queued for the node's backing-store I/O workers.",
    );
    for (i, t) in sh.thread_stats.iter().enumerate() {
        let n = t.node.to_string();
        let i = i.to_string();
        busy.add(
            &[("node", n.as_str()), ("thread", i.as_str())],
            t.busy_ns.load(std::sync::atomic::Ordering::Relaxed) as f64 * NS,
        );
    }
    for node in 0..sh.workers.nodes() {
        let n = node.to_string();
        depth.add(
            &[("node", n.as_str())],
            Workers::pending(&sh.workers, node) as f64,
        );
    }
    for f in [busy, depth] {
        push(out, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alua_states_are_all_listed_in_code_order() {
        for (i, &(s, label)) in ALUA_STATES.iter().enumerate() {
            assert_eq!(alua_state_index(s), i, "{s:?} out of place");
            // the configuration's name, in label form
            assert_eq!(label, s.name().replace('-', "_"), "{s:?}");
            if let Some(&(prev, _)) = i.checked_sub(1).and_then(|p| ALUA_STATES.get(p)) {
                assert!(prev.code() < s.code(), "{prev:?} before {s:?}");
            }
        }
    }

    #[test]
    fn alua_state_is_one_series_per_state_with_one_set() {
        for &(now, now_label) in &ALUA_STATES {
            let samples: Vec<(&str, f64)> = alua_state_samples(now).collect();
            assert_eq!(samples.len(), ALUA_STATES.len());
            let labels: Vec<&str> = samples.iter().map(|&(l, _)| l).collect();
            assert_eq!(
                labels,
                [
                    "active_optimized",
                    "active_non_optimized",
                    "standby",
                    "unavailable",
                    "transitioning"
                ]
            );
            for (label, v) in samples {
                let want = if label == now_label { 1.0 } else { 0.0 };
                assert_eq!(v, want, "state {now:?}, series {label}");
            }
        }
    }
}
