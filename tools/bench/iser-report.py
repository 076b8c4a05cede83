#!/usr/bin/env python3
"""The table of tools/bench/iser.sh (python3 standard library only).

  iser-report.py RUN_DIR

reads RUN_DIR/raw.tsv (one line per fio run, written in the guest by
tools/vm/guest-iser-bench.sh: transport point target round json target_ticks guest_busy_ticks
guest_total_ticks), the fio JSON files in RUN_DIR/raw/, RUN_DIR/syscalls.tsv (target transport
point ios strace_file) and RUN_DIR/meta.txt (key=value), and writes RUN_DIR/results.md (also
printed), RUN_DIR/results.csv and RUN_DIR/chart.dat and chart.ref (for tools/bench/chart-iser.gp: the IOPS reference's name).
"""
import csv
import json
import os
import re
import statistics
import sys

ORDER = ["numatgtd", "numatgtd-base", "tgtd", "lio"]
SHORT = {"numatgtd": "numatgtd", "numatgtd-base": "base", "tgtd": "tgtd", "lio": "LIO"}
LABELS = {
    "rr4k-qd1": "4K rand read QD1",
    "rr4k-qd32": "4K rand read QD32",
    "rw4k-qd32": "4K rand write QD32",
    "sr64k-qd8": "64K seq read QD8",
    "sr512k-qd8": "512K seq read QD8",
    "sr512k-qd32": "512K seq read QD32",
    "sw128k-qd8": "128K seq write QD8",
    "sw128k-qd8-fua": "128K seq write QD8 FUA",
}
KEYS = ("iops", "mbps", "p50", "p99", "cpu", "guest", "busy", "fio")


def run_metrics(run_dir, row, hz):
    """One fio run -> dict of KEYS (None where unknown)."""
    m = dict.fromkeys(KEYS)
    try:
        job = json.load(open(os.path.join(run_dir, "raw", row["json"])))["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return m
    d = job["write" if "write" in row["rw"] else "read"]
    ios = job["read"]["total_ios"] + job["write"]["total_ios"]
    if ios <= 0:
        return m
    pct = d.get("clat_ns", {}).get("percentile", {})
    m["iops"] = d["iops"]
    m["mbps"] = d["bw_bytes"] / 1e6
    m["p50"] = pct.get("50.000000", 0) / 1000 or None
    m["p99"] = pct.get("99.000000", 0) / 1000 or None
    if row["ticks"] != "-":
        m["cpu"] = int(row["ticks"]) / hz * 1e6 / ios
    busy, total = int(row["busy"]), int(row["total"])
    m["guest"] = busy / hz * 1e6 / ios
    m["busy"] = 100.0 * busy / total if total > 0 else None
    m["fio"] = (job.get("usr_cpu", 0) + job.get("sys_cpu", 0)) / 100 * job.get("job_runtime", 0) / 1000 * 1e6 / ios
    return m


CALLS = ("cq_event", "cq_arm", "post_send", "send", "receive")


def run_calls(run_dir, row):
    """numatgtd's iSER verbs calls and completions per I/O of one fio run (raw/NAME.calls:
    the counters before and after), None without them."""
    name = row["json"][:-len(".json")] if row["json"].endswith(".json") else row["json"]
    try:
        lines = open(os.path.join(run_dir, "raw", name + ".calls")).read().split("\n")
        before, after = [int(v) for v in lines[0].split()], [int(v) for v in lines[1].split()]
        job = json.load(open(os.path.join(run_dir, "raw", row["json"])))["jobs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    ios = job["read"]["total_ios"] + job["write"]["total_ios"]
    if ios <= 0 or len(before) != len(CALLS) or len(after) != len(CALLS):
        return None
    return {k: (a - b) / ios for k, a, b in zip(CALLS, after, before)}


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median_low(vals) if vals else None


def fmt(v, digits=0):
    return "-" if v is None else ("%.*f" % (digits, v))


def ratio(a, b):
    return a / b if a is not None and b else None


def rfmt(v, bold=False):
    if v is None:
        return "-"
    return ("**%.2f**" if bold else "%.2f") % v


def rw_of(point):
    return {"rr": "randread", "rw": "randwrite", "sr": "read", "sw": "write"}[point[:2]]


def syscalls(run_dir):
    """syscalls.tsv -> [(target, transport, point, ios, total_calls, secs, [(name, calls), ...])]

    Each trace is `strace -f -ttt` output ("PID SECONDS.USEC name(args) = ret"; an interrupted
    call also prints a "<... name resumed>" line, not counted again); the .ios file holds
    "SECONDS.USEC completed_ios" samples of the disk every 0.1 s. I/Os are counted between the
    first and the last traced call (linear between samples), so strace's attach time is out."""
    out = []
    path = os.path.join(run_dir, "syscalls.tsv")
    if not os.path.exists(path):
        return out
    call = re.compile(r"^(?:\d+\s+)?(\d+\.\d+)\s+([a-z_][a-z0-9_]*)\(")
    stamp = re.compile(r"^(?:\d+\s+)?(\d+\.\d+)\s")
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 5:
            continue
        t, x, point, trace, iosf = f[:5]
        counts, first, last = {}, None, None
        try:
            for tl in open(os.path.join(run_dir, "raw", trace), errors="replace"):
                m = stamp.match(tl)
                if not m:
                    continue
                ts = float(m.group(1))
                first = ts if first is None else first
                last = ts
                c = call.match(tl)
                if c:
                    counts[c.group(2)] = counts.get(c.group(2), 0) + 1
            samples = []
            for sl in open(os.path.join(run_dir, "raw", iosf)):
                a = sl.split()
                if len(a) == 2:
                    samples.append((float(a[0]), int(a[1])))
        except (OSError, ValueError):
            continue
        if first is None or len(samples) < 2:
            continue

        def ios_at(ts):
            if ts <= samples[0][0]:
                return samples[0][1]
            for (t0, v0), (t1, v1) in zip(samples, samples[1:]):
                if t0 <= ts <= t1:
                    return v0 + (v1 - v0) * ((ts - t0) / (t1 - t0) if t1 > t0 else 0)
            return samples[-1][1]

        ios = ios_at(last) - ios_at(first)
        calls = sorted(counts.items(), key=lambda c: -c[1])
        out.append((t, x, point, ios, sum(counts.values()), last - first, calls))
    return out


def thread_group(comm):
    """A thread's role from its name: numatgtd's event threads (ev-nN-M), I/O workers
    (io-nN-M), flushers (flush-nN-M) and io_uring's kernel workers (iou-wrk-TID); tgtd's
    threads all say tgtd (its first is the event loop)."""
    for prefix in ("ev-", "io-", "flush-", "iou-wrk-", "iou-sqp-"):
        if comm.startswith(prefix):
            return prefix.rstrip("-") + ("" if prefix.startswith("iou") else "-*")
    return comm


def profile(run_dir, hz):
    """profile.tsv -> [(target, point, ios, [(group, threads, user_ticks, sys_ticks), ...])]"""
    path = os.path.join(run_dir, "profile.tsv")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 4:
            continue
        t, point, tf = f[0], f[1], f[2]
        try:
            rows = open(os.path.join(run_dir, "raw", tf)).read().split("\n")
        except OSError:
            continue
        ios = 0
        groups = {}
        first = {}
        for r in rows:
            w = r.split()
            if len(w) == 2 and w[0] == "ios":
                ios = int(w[1])
            elif len(w) == 6:
                tid, comm, u0, s0, u1, s1 = w[0], w[1], int(w[2]), int(w[3]), int(w[4]), int(w[5])
                g = thread_group(comm)
                if t == "tgtd":
                    first.setdefault("tgtd", int(tid))
                    g = "tgtd (main)" if int(tid) == first["tgtd"] else "tgtd (workers)"
                n, uu, ss = groups.get(g, (0, 0, 0))
                groups[g] = (n + 1, uu + u1 - u0, ss + s1 - s0)
        out.append((t, point, ios, sorted(((g, n, uu, ss) for g, (n, uu, ss) in groups.items()),
                                           key=lambda x: -(x[2] + x[3]))))
    return out


def main():
    run_dir = sys.argv[1]
    meta = {}
    for line in open(os.path.join(run_dir, "meta.txt")):
        k, _, v = line.rstrip("\n").partition("=")
        meta[k] = v
    hz = int(meta.get("guest_hz") or 100)
    runs = {}  # (transport, point, target) -> [metrics per round]
    calls = {}  # (point, numatgtd target) -> [iSER verbs calls per I/O per round]
    order = []  # (transport, point) in run order
    targets = []
    for line in open(os.path.join(run_dir, "raw.tsv")):
        f = line.rstrip("\n").split("\t")
        if len(f) < 8:
            continue
        row = dict(zip(("x", "point", "target", "round", "json", "ticks", "busy", "total"), f))
        row["rw"] = rw_of(row["point"])
        if (row["x"], row["point"]) not in order:
            order.append((row["x"], row["point"]))
        if row["target"] not in targets:
            targets.append(row["target"])
        runs.setdefault((row["x"], row["point"], row["target"]), []).append(run_metrics(run_dir, row, hz))
        c = run_calls(run_dir, row)
        if c is not None:
            calls.setdefault((row["point"], row["target"]), []).append(c)
    targets = [t for t in ORDER if t in targets]
    user = [t for t in targets if t != "lio"]
    has = {t: t in targets for t in ORDER}

    def m(x, p, t, k):
        return med([r[k] for r in runs.get((x, p, t), [])])

    lines = []
    lines.append("# numatgtd vs Debian's tgtd vs LIO over iSER and TCP (`tools/bench/iser.sh`, %s)" % meta.get("date", "?"))
    lines.append("")
    lines.append("- **TCG numbers are for ratios only**: the guest's 2 vCPUs are emulated by QEMU TCG on a 2-core host, so absolute IOPS, MB/s and µs are far below real hardware; compare targets within the same boot.")
    lines.append("- host: %s CPUs, kernel %s; guest: %s (%s MiB seen), kernel %s, soft-RoCE rdma_rxe on a dummy netdev (MTU %s); %s" % (
        meta.get("host_cpus", "?"), meta.get("host_kernel", "?"), meta.get("vm", "?"), meta.get("guest_mem_mb", "?"),
        meta.get("guest_kernel", "?"), meta.get("net_mtu", "1500"), meta.get("fio_version", "fio")))
    lines.append("- numatgtd `%s`%s; tgtd %s%s" % (
        meta.get("numatgtd", "?"),
        ("; numatgtd-base (column base) `%s`, started and given its LUN the same way" % meta["numatgtd_base"]) if has["numatgtd-base"] else "",
        meta.get("tgtd_version", "?"),
        "; LIO: the guest kernel's target_core_mod + iscsi_target_mod + ib_isert, fileio backstore (write_back), set up with python3-rtslib-fb" if has["lio"] else "; LIO: not in this run"))
    lines.append("- load: the kernel initiator (open-iscsi, iface transport iser / tcp), fio libaio direct=1 on its /dev/sdX, 1 job; %s s per point, median of %s alternated rounds (%s, ...); %s MiB LUN of random data on the guest's tmpfs, one copy per target, warmed; all sessions logged in for the whole run" % (
        meta.get("secs", "?"), meta.get("rounds", "?"), ", ".join(targets), meta.get("lun_mb", "?")))
    lines.append("- host /proc/loadavg before: %s; after: %s. Guest /proc/loadavg before the matrix: %s; after: %s" % (
        meta.get("load_before", "?"), meta.get("load_after", "?"), meta.get("guest_load_before", "?"), meta.get("guest_load_after", "?")))
    if meta.get("warning"):
        lines.append("- **WARNING**: " + meta["warning"])
    lines.append("- rerun: `sudo %s`" % meta.get("rerun", "tools/bench/iser.sh"))
    lines.append("")
    head = ["transport", "workload"]
    head += ["%s IOPS" % SHORT[t] for t in targets]
    head += (["numatgtd/tgtd"] if has["tgtd"] else []) + (["numatgtd/LIO"] if has["lio"] else []) + (["numatgtd/base"] if has["numatgtd-base"] else [])
    head += ["MB/s " + " · ".join(SHORT[t] for t in targets)]
    head += ["p50/p99 µs %s" % SHORT[t] for t in targets]
    head += ["target CPU µs/IO %s" % SHORT[t] for t in user]
    head += (["target CPU numatgtd/tgtd"] if has["tgtd"] else []) + (["target CPU numatgtd/base"] if has["numatgtd-base"] else [])
    head += ["guest CPU µs/IO %s" % SHORT[t] for t in targets]
    head += (["guest CPU numatgtd/tgtd"] if has["tgtd"] else []) + (["guest CPU numatgtd/LIO"] if has["lio"] else []) + (["guest CPU numatgtd/base"] if has["numatgtd-base"] else [])
    head += ["guest busy % " + " · ".join(SHORT[t] for t in targets)]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    csv_rows = []
    chart = []
    # the chart's IOPS reference: tgtd, else (TGTD=0) numatgtd-base, else LIO
    ref = next((t for t in ("tgtd", "numatgtd-base", "lio") if has[t]), "numatgtd")
    for x, p in order:
        get = {t: {k: m(x, p, t, k) for k in KEYS} for t in targets}
        n = get["numatgtd"] if has["numatgtd"] else dict.fromkeys(KEYS)
        g = lambda t, k: get[t][k] if t in get else None  # noqa: E731
        r_tgtd = ratio(n["iops"], g("tgtd", "iops"))
        r_lio = ratio(n["iops"], g("lio", "iops"))
        r_base = ratio(n["iops"], g("numatgtd-base", "iops"))
        row = [x, LABELS.get(p, p)]
        row += [fmt(get[t]["iops"]) for t in targets]
        row += ([rfmt(r_tgtd, True)] if has["tgtd"] else []) + ([rfmt(r_lio, True)] if has["lio"] else []) + ([rfmt(r_base, True)] if has["numatgtd-base"] else [])
        row += [" · ".join(fmt(get[t]["mbps"], 1) for t in targets)]
        row += ["%s / %s" % (fmt(get[t]["p50"], 0), fmt(get[t]["p99"], 0)) for t in targets]
        row += [fmt(get[t]["cpu"], 1) for t in user]
        row += ([rfmt(ratio(n["cpu"], g("tgtd", "cpu")))] if has["tgtd"] else []) + ([rfmt(ratio(n["cpu"], g("numatgtd-base", "cpu")))] if has["numatgtd-base"] else [])
        row += [fmt(get[t]["guest"], 1) for t in targets]
        row += ([rfmt(ratio(n["guest"], g("tgtd", "guest")))] if has["tgtd"] else []) + ([rfmt(ratio(n["guest"], g("lio", "guest")))] if has["lio"] else []) + ([rfmt(ratio(n["guest"], g("numatgtd-base", "guest")))] if has["numatgtd-base"] else [])
        row += [" · ".join(fmt(get[t]["busy"], 0) for t in targets)]
        lines.append("| " + " | ".join(row) + " |")
        c = {"transport": x, "point": p}
        for t in targets:
            for k in KEYS:
                c["%s_%s" % (t, k)] = "" if get[t][k] is None else "%.3f" % get[t][k]
            c["%s_iops_rounds" % t] = " ".join("%.0f" % r["iops"] for r in runs.get((x, p, t), []) if r["iops"] is not None)
        c["numatgtd_vs_tgtd"] = "" if r_tgtd is None else "%.3f" % r_tgtd
        c["numatgtd_vs_lio"] = "" if r_lio is None else "%.3f" % r_lio
        c["numatgtd_vs_base"] = "" if r_base is None else "%.3f" % r_base
        csv_rows.append(c)
        nan = lambda v: "NaN" if v is None else "%.4f" % v  # noqa: E731
        chart.append("\t".join(["%s %s" % (x, LABELS.get(p, p))]
                               + [nan(ratio(g(t, "iops"), g(ref, "iops"))) for t in ("numatgtd", "numatgtd-base", "lio")]
                               + [nan(g(t, "guest")) for t in ORDER]
                               + [nan(g(t, "cpu")) for t in ORDER]))
    lines.append("")
    lines.append("IOPS and MB/s: fio's (10^6 bytes/s), the median of the rounds (per-round IOPS in results.csv); ratios of median IOPS. "
                 "p50/p99: fio's completion latency. target CPU µs/IO: the target process's utime+stime (/proc/PID/stat, all threads) over the run / I/Os "
                 "(not for LIO, whose work runs in kernel threads and interrupts). guest CPU µs/IO: the whole guest's busy CPU time "
                 "(/proc/stat user+nice+system+irq+softirq+steal, both vCPUs) over the run / I/Os: target, initiator (fio, ib_iser / iscsi_tcp, "
                 "the block layer) and soft-RoCE together, the one figure that compares LIO with the user-space targets. guest busy %: that busy "
                 "time as a share of both vCPUs. Ratios numatgtd/X above 1 mean numatgtd is faster; CPU ratios below 1 mean it spends less.")
    sc = syscalls(run_dir)
    if sc:
        lines.append("")
        lines.append("### System calls per I/O (user-space targets)")
        lines.append("")
        lines.append("`strace -f -ttt -p PID` for %s s in the middle of a separate %s run per target and transport; I/Os = the disk's completed "
                     "reads+writes (/sys/block/DEV/stat, sampled every 0.1 s) between the first and the last traced call. strace stops the "
                     "target at every system call, so few I/Os happen in the window and batching may differ from an untraced run: compare the "
                     "targets, not the rate." % (meta.get("strace_secs", "?"), LABELS.get(sc[0][2], sc[0][2])))
        lines.append("")
        lines.append("| target | transport | traced s | I/Os | system calls | per I/O | most frequent (per I/O) |")
        lines.append("|---|---|---|---|---|---|---|")
        for t, x, point, ios, total, secs, calls in sc:
            per = (total / ios) if ios > 0 else None
            top = ", ".join("%s %.2f" % (nm, c / ios) for nm, c in calls[:5]) if ios > 0 else "-"
            lines.append("| %s | %s | %.1f | %.0f | %d | %s | %s |" % (t, x, secs, ios, total, fmt(per, 2), top))
            csv_rows.append({"transport": x, "point": "syscalls-" + point, "%s_syscalls_per_io" % t: fmt(per, 3),
                             "%s_syscall_ios" % t: "%.0f" % ios})
    if calls:
        lines.append("")
        lines.append("### numatgtd's iSER verbs calls per I/O")
        lines.append("")
        lines.append("From its metrics (`numatgt_iser_verbs_calls_total`, `numatgt_iser_completions_total`) before and after each iSER run, "
                     "per I/O fio completed, median of the rounds. With soft-RoCE each call enters the kernel: a wake-up reads a completion "
                     "event (cq_event) and re-arms the queue (cq_arm); a post_send is one doorbell for a batch of RDMA WRITEs/READs and Sends. "
                     "Completions: send (Sends, RDMA READs, signaled WRITEs), receive (iSER messages).")
        lines.append("")
        lines.append("| target | point | cq_event | cq_arm | post_send | verbs calls | send completions | receive completions |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for (point, t), rs in calls.items():
            m = {k: med([r[k] for r in rs]) for k in CALLS}
            tot = m["cq_event"] + m["cq_arm"] + m["post_send"]
            lines.append("| %s | %s | %.2f | %.2f | %.2f | **%.2f** | %.2f | %.2f |" % (
                t, LABELS.get(point, point), m["cq_event"], m["cq_arm"], m["post_send"], tot, m["send"], m["receive"]))
            csv_rows.append({"transport": "iser", "point": "calls-" + point, "%s_verbs_calls_per_io" % t: "%.3f" % tot})
    pr = profile(run_dir, hz)
    if pr:
        lines.append("")
        lines.append("### Where the user-space targets' CPU goes (iSER)")
        lines.append("")
        lines.append("A separate %s s window in the middle of a fio run per target and point: every thread's utime and stime "
                     "(/proc/PID/task/*/stat) before and after, summed by role, per I/O completed by the disk in the window. "
                     "Tick-based (1/%d s), so a role with a few ticks is noise." % (meta.get("profile_secs", "?"), hz))
        lines.append("")
        lines.append("| target | point | I/Os | threads (role) | user µs/IO | system µs/IO | total µs/IO |")
        lines.append("|---|---|---|---|---|---|---|")
        for t, point, ios, groups in pr:
            tot_u = sum(g[2] for g in groups)
            tot_s = sum(g[3] for g in groups)
            per = lambda ticks: fmt(ticks * 1e6 / hz / ios, 0) if ios > 0 else "-"  # noqa: E731
            for g, n, uu, ss in groups:
                if uu + ss == 0:
                    continue
                lines.append("| %s | %s | %d | %s (%d) | %s | %s | %s |" % (t, LABELS.get(point, point), ios, g, n, per(uu), per(ss), per(uu + ss)))
            lines.append("| %s | %s | %d | **all** | %s | %s | **%s** |" % (t, LABELS.get(point, point), ios, per(tot_u), per(tot_s), per(tot_u + tot_s)))
            csv_rows.append({"transport": "iser", "point": "profile-" + point, "%s_profile_ios" % t: str(ios),
                             "%s_profile_user_us_per_io" % t: per(tot_u), "%s_profile_sys_us_per_io" % t: per(tot_s)})
    text = "\n".join(lines) + "\n"
    open(os.path.join(run_dir, "results.md"), "w").write(text)
    sys.stdout.write(text)
    fields = []
    for c in csv_rows:
        for k in c:
            if k not in fields:
                fields.append(k)
    with open(os.path.join(run_dir, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(csv_rows)
    open(os.path.join(run_dir, "chart.dat"), "w").write("\n".join(chart) + "\n")
    open(os.path.join(run_dir, "chart.ref"), "w").write(SHORT[ref] + "\n")


if __name__ == "__main__":
    main()
