#!/usr/bin/env python3
"""Helpers of tools/bench/run.sh (python3 standard library only).

  report.py fio JSON RW CPU_TICKS HZ [OSD_TICKS]   one fio run -> "iops MB/s p50_us p99_us
                                       cpu_us_per_io fio_cpu_us_per_io fio_cpu_pct_per_session
                                       osd_cpu_us_per_io" (the last "-" without OSD_TICKS)
  report.py perf LOG BS SECS CPU_TICKS HZ [OSD_TICKS]   the same from iscsi-perf's output
  report.py tcp SECS [TIMES]           the best of TIMES loopback TCP streams of SECS s -> "GB/s"
  report.py report RAW_TSV OUT_DIR META_FILE   medians -> results.md, results.csv, chart.dat
                                       (META_FILE: key=value lines of run.sh; targets= the columns;
                                       rbd=1: the RBD table, tools/bench/chart-rbd.gp's chart.dat)
"""
import csv
import json
import os
import re
import socket
import statistics
import sys
import time

FILE_TARGETS = ["numatgtd", "numatgtd-base", "numatgtd-poll", "tgtd", "tgtd-null", "numatgtd-null"]  # column order
CHART_TARGETS = ["numatgtd", "numatgtd-poll", "tgtd", "tgtd-null"]  # chart.dat's first groups (numatgtd-null's columns come last)
RBD_TARGETS = ["numatgtd", "numatgtd-nocache", "tgtd-rbd"]  # RBD=1 (issue 16)
TARGETS = FILE_TARGETS + ["numatgtd-nocache", "tgtd-rbd"]  # all known
SHORT = {"numatgtd": "numatgtd", "numatgtd-poll": "poll", "tgtd": "tgtd", "tgtd-null": "null",
         "numatgtd-null": "numatgtd-null", "numatgtd-base": "base", "numatgtd-nocache": "nocache", "tgtd-rbd": "tgtd-rbd"}
KEYS = ("iops", "mbps", "p50", "p99", "cpu", "fio_cpu", "fio_pct", "osd")
BOUND_PCT = 90  # fio at or above this % of one CPU per session: the initiator is the limit
LABELS = {
    "rr4k-qd1": "4K rand read QD1",
    "rr4k-qd32": "4K rand read QD32",
    "rw4k-qd32": "4K rand write QD32",
    "sr64k-qd8": "64K seq read QD8",
    "sr64k-qd32": "64K seq read QD32",
    "sr512k-qd8": "512K seq read QD8",
    "sr512k-qd32": "512K seq read QD32",
    "sw128k-qd8": "128K seq write QD8",
}


def cpu_per_io(ticks, hz, ios):
    return "%.1f" % (int(ticks) / int(hz) * 1e6 / ios) if ios > 0 else "-"


def fio_cpu(job, ios):
    """fio's own CPU (the initiator) -> ("µs per I/O", "% of one CPU per session").

    fio-3.33 with group_reporting sums the jobs (sessions): job_runtime is the sum of the
    jobs' run times in ms (2 jobs of 2 s: 4000) and usr_cpu/sys_cpu are the summed user and
    system times over that sum, in %, i.e. the mean share of one CPU per job. So the CPU
    seconds of all jobs are (usr_cpu + sys_cpu) / 100 x job_runtime / 1000 (no factor of
    numjobs), and usr_cpu + sys_cpu is already per session. Only the job processes count,
    not fio's parent process (a few %, mostly asleep)."""
    pct = job.get("usr_cpu", 0) + job.get("sys_cpu", 0)
    runtime_ms = job.get("job_runtime", 0)
    if ios <= 0 or runtime_ms <= 0:
        return "-", "-"
    return "%.2f" % (pct / 100 * runtime_ms / 1000 * 1e6 / ios), "%.1f" % pct


def fio_point(path, rw, ticks, hz, osd_ticks=None):
    try:
        job = json.load(open(path))["jobs"][0]  # group_reporting: one entry for all sessions
        d = job["write" if "write" in rw else "read"]
        ios = job["read"]["total_ios"] + job["write"]["total_ios"]
        pct = d.get("clat_ns", {}).get("percentile", {})
        p50, p99 = pct.get("50.000000"), pct.get("99.000000")
        print("%.0f %.1f %s %s %s %s %s %s" % (
            d["iops"], d["bw_bytes"] / 1e6,
            "%.1f" % (p50 / 1000) if p50 else "-", "%.1f" % (p99 / 1000) if p99 else "-",
            cpu_per_io(ticks, hz, ios), *fio_cpu(job, ios),
            cpu_per_io(osd_ticks, hz, ios) if osd_ticks is not None else "-"))
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        print("- - - - - - - -")


def perf_point(path, bs, secs, ticks, hz, osd_ticks=None):
    m = re.findall(r"iops average (\d+)", open(path, errors="replace").read())
    if not m:
        print("- - - - - - - -")
        return
    iops = int(m[-1])  # the average over the whole run: I/Os = IOPS x seconds
    # no percentiles, no initiator CPU figure (iscsi-perf reports none)
    ios = iops * int(secs)
    print("%d %.1f - - %s - - %s" % (iops, iops * int(bs) / 1e6, cpu_per_io(ticks, hz, ios),
                                     cpu_per_io(osd_ticks, hz, ios) if osd_ticks is not None else "-"))


def tcp(secs, times="1"):
    """The best of TIMES single-stream measurements of SECS seconds each -> GB/s."""
    print("%.2f" % max(tcp_stream(float(secs)) for _ in range(int(times))))


def tcp_stream(secs):
    """One TCP stream over 127.0.0.1: a forked sender writes 1 MiB buffers for SECS seconds
    (at most 256 GiB), this process receives; GB/s from the first to the last byte."""
    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(1)
    port = lsn.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        try:
            lsn.close()
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            buf = memoryview(bytearray(1 << 20))
            end, sent = time.monotonic() + secs, 0
            while time.monotonic() < end and sent < (256 << 30):
                s.sendall(buf)
                sent += len(buf)
            s.close()
        finally:
            os._exit(0)
    lsn.settimeout(10)
    conn, _ = lsn.accept()
    conn.settimeout(10)
    buf = bytearray(1 << 20)
    got, t0 = 0, None
    try:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            if t0 is None:
                t0 = time.monotonic()
            got += n
    finally:
        t1 = time.monotonic()
        conn.close()
        lsn.close()
        os.waitpid(pid, 0)
    return got / (t1 - t0) / 1e9 if t0 and t1 > t0 else 0.0


def num(x):
    return None if x in ("-", "", None) else float(x)


def med(vals):
    v = [x for x in vals if x is not None]
    return statistics.median_low(v) if v else None


def fmt(v, digits=0):
    return "n/a" if v is None else ("%.*f" % (digits, v))


def ratio(a, b):
    return None if a is None or not b else a / b


def report(raw, out, meta_path):
    meta = dict(line.rstrip("\n").split("=", 1) for line in open(meta_path) if "=" in line)
    runs = {}  # (sessions, point, target) -> list of dicts
    order = []
    seen = set()
    with open(raw) as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 9:
                continue
            s, point, tgt, rnd = row[:4]
            vals = (row[4:] + ["-"] * len(KEYS))[:len(KEYS)]  # older raw.tsv: no fio CPU
            key = (int(s), point)
            if key not in order:
                order.append(key)
            seen.add(tgt)
            runs.setdefault((int(s), point, tgt), []).append(
                {k: num(v) for k, v in zip(KEYS, vals)})
    targets = meta.get("targets", "").split() or [t for t in TARGETS if t in seen]
    if meta.get("rbd") == "1":
        return report_rbd(runs, order, targets, out, meta)
    poll = "numatgtd-poll" in targets
    nnull = "numatgtd-null" in targets
    base = "numatgtd-base" in targets
    fio = not meta.get("engine", "").startswith("iscsi-perf")
    tcp_gbs = [num(meta.get("tcp_before")), num(meta.get("tcp_after"))]
    tcp_mbs = max(x for x in tcp_gbs if x) * 1000 if any(tcp_gbs) else None  # the ceiling

    rows = []
    for s, point in order:
        r = {"sessions": s, "point": point, "label": LABELS.get(point, point)}
        for t in FILE_TARGETS:
            rs = runs.get((s, point, t), [])
            for k in KEYS:
                r[t + "_" + k] = med([x[k] for x in rs])
            r[t + "_runs"] = " ".join(fmt(x["iops"]) for x in rs)
        r["vs_tgtd"] = ratio(r["numatgtd_iops"], r["tgtd_iops"])
        r["vs_null"] = ratio(r["numatgtd_iops"], r["tgtd-null_iops"])
        r["poll_vs_tgtd"] = ratio(r["numatgtd-poll_iops"], r["tgtd_iops"])
        r["poll_vs_null"] = ratio(r["numatgtd-poll_iops"], r["tgtd-null_iops"])
        r["poll_vs_numatgtd"] = ratio(r["numatgtd-poll_iops"], r["numatgtd_iops"])
        r["null_vs_null"] = ratio(r["numatgtd-null_iops"], r["tgtd-null_iops"])
        r["vs_own_null"] = ratio(r["numatgtd_iops"], r["numatgtd-null_iops"])
        r["vs_base"] = ratio(r["numatgtd_iops"], r["numatgtd-base_iops"])
        r["cpu_vs_base"] = ratio(r["numatgtd_cpu"], r["numatgtd-base_cpu"])
        r["tcp_share"] = ratio(r["numatgtd_mbps"], tcp_mbs) if point.startswith("sr") else None
        rows.append(r)

    md = []
    md.append("# numatgtd vs Debian's tgtd (`tools/bench/run.sh`, %s)\n" % meta.get("date", ""))
    md.append("- machine: %s CPUs, kernel %s; numatgtd `%s`; %s" % (
        meta.get("cpus"), meta.get("kernel"), meta.get("numatgtd"), meta.get("tgtd")))
    if poll:
        md.append("- numatgtd-poll (column poll): the same numatgtd binary started the same way plus "
                  "`--busy-poll %s` (event threads poll %s µs after their last event before "
                  "sleeping)" % (meta.get("busy_poll"), meta.get("busy_poll")))
    if nnull:
        md.append("- numatgtd-null: the same numatgtd binary started the same way, LUN made with "
                  "`tgtadm ... --bstype null -b /dev/null` (no storage, uncached: numatgtd's own "
                  "floor, beside tgtd's)")
    if base:
        md.append("- numatgtd-base (column base): another numatgtd binary, `%s`, started and given "
                  "its LUN the same way (before/after a change in the same run; numatgtd/base is "
                  "the ratio of IOPS, CPU numatgtd/base of CPU µs per I/O)" % meta.get("numatgtd_base"))
    md.append("- load: %s; %s s per point, median of %s alternated rounds (%s, %s, ...); %s MiB "
              "LUN on tmpfs (random data, warmed), LUNs made with tgtadm, default settings" % (
                  meta.get("engine"), meta.get("secs"), meta.get("rounds"), ", ".join(targets),
                  targets[0] if targets else "", meta.get("lun_mb")))
    md.append("- one-stream loopback TCP: %s GB/s before, %s GB/s after" % (
        meta.get("tcp_before"), meta.get("tcp_after")))
    md.append("- /proc/loadavg before: %s; after: %s" % (meta.get("load_before"), meta.get("load_after")))
    if meta.get("warning"):
        md.append("- **WARNING**: %s" % meta["warning"])
    md.append("- rerun: `%s`\n" % meta.get("rerun"))
    cols = [t for t in FILE_TARGETS if t in targets]
    names = [SHORT[t] for t in cols]
    head = ["sess", "workload"] + [(t if t != "tgtd-null" else "null") + " IOPS" for t in cols]
    head += ["numatgtd/tgtd", "numatgtd/null"] + (["poll/tgtd", "poll/null"] if poll else [])
    head += ["numatgtd-null/null", "numatgtd/numatgtd-null"] if nnull else []
    head += ["numatgtd/base", "CPU numatgtd/base"] if base else []
    head.append("MB/s " + " · ".join(names))
    head += ["p50/p99 µs " + n for n in names]
    head += ["CPU µs/IO " + n for n in names]
    head += ["fio CPU µs/IO " + n for n in names]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "---|" * len(head))
    for r in rows:
        cells = [str(r["sessions"]), r["label"]]
        cells += [fmt(r[t + "_iops"]) for t in cols]
        cells += ["**%s**" % fmt(r["vs_tgtd"], 2), fmt(r["vs_null"], 2)]
        if poll:
            cells += ["**%s**" % fmt(r["poll_vs_tgtd"], 2), fmt(r["poll_vs_null"], 2)]
        if nnull:
            cells += [fmt(r["null_vs_null"], 2), fmt(r["vs_own_null"], 2)]
        if base:
            cells += ["**%s**" % fmt(r["vs_base"], 2), fmt(r["cpu_vs_base"], 2)]
        cells.append(" · ".join(fmt(r[t + "_mbps"]) for t in cols))
        cells += ["%s / %s" % (fmt(r[t + "_p50"], 1), fmt(r[t + "_p99"], 1)) for t in cols]
        cells += [fmt(r[t + "_cpu"], 1) for t in cols]
        cells += [fmt(r[t + "_fio_cpu"], 1) for t in cols]
        md.append("| " + " | ".join(cells) + " |")
    md.append("")
    md.append("null = tgtd with `--bstype null` (no storage at all: the floor)%s%s. Ratios are of "
              "median IOPS; CPU µs/IO = the target's utime+stime (/proc/PID/stat) over the point "
              "/ I/Os done; fio CPU µs/IO = the initiator's: fio's usr+sys CPU time of all its "
              "sessions (JSON usr_cpu+sys_cpu × job_runtime) / I/Os done%s. Per-round IOPS are in "
              "results.csv." % (
                  "; poll = numatgtd-poll, numatgtd with `--busy-poll %s`" % meta.get("busy_poll")
                  if poll else "",
                  "; numatgtd-null = numatgtd with `--bstype null` (numatgtd-null/null compares "
                  "the two floors: the iSCSI path alone; numatgtd/numatgtd-null is how close a "
                  "real LUN comes to numatgtd's own floor)" if nnull else "",
                  "" if fio else " (n/a: iscsi-perf reports no CPU)"))
    for r in rows:
        bound = [(t, r[t + "_fio_pct"]) for t in cols
                 if r[t + "_fio_pct"] is not None and r[t + "_fio_pct"] >= BOUND_PCT]
        if bound:
            md.append("- %s, %d session(s): initiator-bound: fio used %s (≥ %d %%: there "
                      "the initiator's CPU, not the target, caps the IOPS and the ratios; "
                      "compare CPU µs/IO)" % (
                          r["label"], r["sessions"],
                          ", ".join(("%.0f %% of a CPU per session with %s" if i == 0 else
                                     "%.0f %% with %s") % (v, t) for i, (t, v) in enumerate(bound)),
                          BOUND_PCT))
    for r in rows:
        if r["tcp_share"] is not None:
            md.append("- %s, %d session(s): numatgtd moves %s MB/s = %.0f %% of one loopback TCP "
                      "stream (%s MB/s, the best measurement of the run)" % (r["label"], r["sessions"], fmt(r["numatgtd_mbps"]),
                                            100 * r["tcp_share"], fmt(tcp_mbs)))
    text = "\n".join(md) + "\n"
    open(os.path.join(out, "results.md"), "w").write(text)
    sys.stdout.write(text)

    names_csv = {"p50": "p50_us", "p99": "p99_us", "cpu": "cpu_us_per_io",
                 "fio_cpu": "fio_cpu_us_per_io", "fio_pct": "fio_cpu_pct_per_session",
                 "runs": "iops_per_round"}
    csv_cols = ["sessions", "point", "label"]
    for t in cols:
        csv_cols += [t + "_" + k for k in KEYS[:-1] + ("runs",)]  # no OSD in file mode
    csv_cols += ["vs_tgtd", "vs_null"]
    if poll:
        csv_cols += ["poll_vs_tgtd", "poll_vs_null", "poll_vs_numatgtd"]
    if nnull:
        csv_cols += ["null_vs_null", "vs_own_null"]
    if base:
        csv_cols += ["vs_base", "cpu_vs_base"]
    csv_cols.append("tcp_share")

    def csv_name(c):
        for t in sorted(cols, key=len, reverse=True):
            if c.startswith(t + "_"):
                k = c[len(t) + 1:]
                return t + "_" + names_csv.get(k, k)
        return c
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([csv_name(c) for c in csv_cols])
        for r in rows:
            w.writerow(["" if r[c] is None else (("%.3f" % r[c]) if isinstance(r[c], float) else r[c])
                        for c in csv_cols])
    multi = len({r["sessions"] for r in rows}) > 1
    # chart.dat, fixed columns (NaN when a target is not in the run): 1 label, 2-4 IOPS /
    # tgtd of numatgtd, numatgtd-poll, tgtd-null, 5-8 CPU µs/IO of numatgtd, numatgtd-poll,
    # tgtd, tgtd-null, 9-12 fio's CPU µs/IO with each, 13-16 fio's % of one CPU per session,
    # 17-20 numatgtd-null's IOPS / tgtd, CPU µs/IO, fio CPU µs/IO, fio % of a CPU
    with open(os.path.join(out, "chart.dat"), "w") as f:
        for r in rows:
            label = r["label"] + (", %d sess" % r["sessions"] if multi else "")
            vals = [r["vs_tgtd"], r["poll_vs_tgtd"], ratio(r["tgtd-null_iops"], r["tgtd_iops"])]
            for k in ("cpu", "fio_cpu", "fio_pct"):
                vals += [r[t + "_" + k] for t in CHART_TARGETS]
            vals.append(ratio(r["numatgtd-null_iops"], r["tgtd_iops"]))
            vals += [r["numatgtd-null_" + k] for k in ("cpu", "fio_cpu", "fio_pct")]
            f.write('"%s"\t%s\n' % (label, "\t".join("NaN" if v is None else "%.3f" % v for v in vals)))


def medians(runs, s, point, targets, r):
    for t in targets:
        rs = runs.get((s, point, t), [])
        for k in KEYS:
            r[t + "_" + k] = med([x[k] for x in rs])
        r[t + "_runs"] = " ".join(fmt(x["iops"]) for x in rs)


def report_rbd(runs, order, targets, out, meta):
    """RBD=1: numatgtd (cache numa), numatgtd-nocache (cache=off), tgtd-rbd (tgt's bs_rbd)."""
    cols = [t for t in RBD_TARGETS if t in targets]
    names = [SHORT[t] for t in cols]
    rows = []
    for s, point in order:
        r = {"sessions": s, "point": point, "label": LABELS.get(point, point)}
        medians(runs, s, point, RBD_TARGETS, r)
        r["vs_tgtd"] = ratio(r["numatgtd_iops"], r["tgtd-rbd_iops"])
        r["nocache_vs_tgtd"] = ratio(r["numatgtd-nocache_iops"], r["tgtd-rbd_iops"])
        r["cache_on_off"] = ratio(r["numatgtd_iops"], r["numatgtd-nocache_iops"])
        # I/Os per CPU second relative to tgtd-rbd: tgtd's CPU µs/IO over ours
        r["core_vs_tgtd"] = ratio(r["tgtd-rbd_cpu"], r["numatgtd_cpu"])
        r["core_nocache_vs_tgtd"] = ratio(r["tgtd-rbd_cpu"], r["numatgtd-nocache_cpu"])
        rows.append(r)
    md = ["# numatgtd vs Debian's tgtd on RBD (`RBD=1 tools/bench/run.sh`, %s)\n" % meta.get("date", "")]
    md.append("- machine: %s CPUs, kernel %s; numatgtd `%s`; %s with tgt-rbd (bs_rbd); %s" % (
        meta.get("cpus"), meta.get("kernel"), meta.get("numatgtd"), meta.get("tgtd"), meta.get("ceph")))
    md.append("- cluster: tools/ceph/up.sh, 1 monitor + 1 memstore OSD on 127.0.0.1 (the OSD keeps "
              "the data in RAM and shares the machine's CPUs: no disk, no network, no replication; "
              "absolute numbers are not a real cluster's); one image per target, %s MiB of the "
              "same random data (rbd import)" % meta.get("lun_mb"))
    md.append("- `rbd bench` on the same cluster, librbd without iSCSI, 4 KiB random, 32 threads: %s"
              % (meta.get("rbd_bench") or "n/a"))
    md.append("- columns: numatgtd = `--bstype rbd`, default settings (cache numa); nocache = the "
              "same plus `cache=off` in --bsopts; tgtd-rbd = Debian's tgtd, `--bstype rbd` "
              "(tgt-rbd), the same --backing-store/--bsopts; each LUN read once sequentially "
              "before measuring (which fills numatgtd's cache)")
    md.append("- librbd settings each target's client runs with (its admin socket): %s" % (
        meta.get("librbd") or "n/a"))
    if "numatgtd-base" in targets:
        md.append("- numatgtd-base (column base): another numatgtd binary, `%s`, started and given "
                  "its LUN the same way (before/after a change in the same run; numatgtd/base is "
                  "the ratio of IOPS, CPU numatgtd/base of CPU µs per I/O)" % meta.get("numatgtd_base"))
    md.append("- load: %s; %s s per point, median of %s alternated rounds (%s, %s, ...); write "
              "points end with SYNCHRONIZE CACHE (fio `--end_fsync=1`) inside the measured time" % (
                  meta.get("engine"), meta.get("secs"), meta.get("rounds"), ", ".join(targets),
                  targets[0] if targets else ""))
    md.append("- /proc/loadavg before: %s; after: %s" % (meta.get("load_before"), meta.get("load_after")))
    if meta.get("warning"):
        md.append("- **WARNING**: %s" % meta["warning"])
    md.append("- rerun: `%s`\n" % meta.get("rerun"))
    head = ["sess", "workload"] + [n + " IOPS" for n in names]
    head += ["numatgtd/tgtd-rbd", "nocache/tgtd-rbd", "cache on/off"]
    head += ["p50/p99 µs " + n for n in names]
    head += ["CPU µs/IO " + n for n in names]
    head += ["I/Os per CPU-s vs tgtd-rbd: numatgtd · nocache"]
    head += ["OSD CPU µs/IO " + " · ".join(names), "MB/s " + " · ".join(names)]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "---|" * len(head))
    for r in rows:
        cells = [str(r["sessions"]), r["label"]]
        cells += [fmt(r[t + "_iops"]) for t in cols]
        cells += ["**%s**" % fmt(r["vs_tgtd"], 2), "**%s**" % fmt(r["nocache_vs_tgtd"], 2),
                  fmt(r["cache_on_off"], 2)]
        cells += ["%s / %s" % (fmt(r[t + "_p50"], 1), fmt(r[t + "_p99"], 1)) for t in cols]
        cells += [fmt(r[t + "_cpu"], 1) for t in cols]
        cells.append("%s · %s" % (fmt(r["core_vs_tgtd"], 2), fmt(r["core_nocache_vs_tgtd"], 2)))
        cells.append(" · ".join(fmt(r[t + "_osd"], 1) for t in cols))
        cells.append(" · ".join(fmt(r[t + "_mbps"]) for t in cols))
        md.append("| " + " | ".join(cells) + " |")
    md.append("")
    md.append("Ratios are of median IOPS. CPU µs/IO = the target process's utime+stime "
              "(/proc/PID/stat, all threads, librbd's included) over the point / I/Os done; "
              "I/Os per CPU-s vs tgtd-rbd = tgtd-rbd's CPU µs/IO over numatgtd's (above 1: more "
              "I/Os per core than tgtd). OSD CPU µs/IO = the same for the ceph-osd process during "
              "each target's point. numatgtd's cache (column numatgtd) serves reads of the warmed "
              "image from RAM without asking the cluster, so its read rows measure the cache, "
              "not RBD; nocache is numatgtd's own RBD path. Per-round IOPS are in results.csv.")
    for r in rows:
        bound = [(t, r[t + "_fio_pct"]) for t in cols
                 if r[t + "_fio_pct"] is not None and r[t + "_fio_pct"] >= BOUND_PCT]
        if bound:
            md.append("- %s: initiator-bound with %s (fio ≥ %d %% of a CPU per session)" % (
                r["label"], ", ".join("%s (%.0f %%)" % (t, v) for t, v in bound), BOUND_PCT))
    text = "\n".join(md) + "\n"
    open(os.path.join(out, "results.md"), "w").write(text)
    sys.stdout.write(text)

    extra = ["vs_tgtd", "nocache_vs_tgtd", "cache_on_off", "core_vs_tgtd", "core_nocache_vs_tgtd"]
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        keys = KEYS + ("runs",)
        w.writerow(["sessions", "point", "label"] + [t + "_" + k for t in cols for k in keys] + extra)
        for r in rows:
            vals = [r["sessions"], r["point"], r["label"]]
            vals += [r[t + "_" + k] for t in cols for k in keys] + [r[c] for c in extra]
            w.writerow(["" if v is None else (("%.3f" % v) if isinstance(v, float) else v) for v in vals])
    # chart.dat for chart-rbd.gp: 1 label, 2-3 IOPS / tgtd-rbd of numatgtd, nocache, 4-6 CPU
    # µs/IO of numatgtd, nocache, tgtd-rbd, 7-9 OSD CPU µs/IO with each, 10-12 p50 µs of each
    multi = len({r["sessions"] for r in rows}) > 1
    with open(os.path.join(out, "chart.dat"), "w") as f:
        for r in rows:
            label = r["label"] + (", %d sess" % r["sessions"] if multi else "")
            vals = [r["vs_tgtd"], r["nocache_vs_tgtd"]]
            for k in ("cpu", "osd", "p50"):
                vals += [r[t + "_" + k] for t in RBD_TARGETS]
            f.write('"%s"\t%s\n' % (label, "\t".join("NaN" if v is None else "%.3f" % v for v in vals)))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "fio":
        fio_point(*args)
    elif cmd == "perf":
        perf_point(*args)
    elif cmd == "tcp":
        tcp(*args)
    elif cmd == "report":
        report(*args)
    else:
        sys.exit("report.py: unknown command " + cmd)


if __name__ == "__main__":
    main()
