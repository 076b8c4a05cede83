# tools/bench/run.sh's chart:
#   gnuplot -e "dir='RUN_DIR'; poll=BUSY_POLL; nnull=1; fio=1; title='...'" tools/bench/chart.gp
# reads RUN_DIR/chart.dat (written by report.py; NaN where a target is not in the run):
#   1 label, 2-4 IOPS / tgtd IOPS of numatgtd, numatgtd-poll, tgtd-null,
#   5-8 target CPU µs/IO of numatgtd, numatgtd-poll, tgtd, tgtd-null,
#   9-12 fio's CPU µs/IO with each, 13-16 fio's % of one CPU per session with each,
#   17-20 the same four of numatgtd-null (IOPS / tgtd, CPU, fio CPU, fio %);
# writes RUN_DIR/chart.png. poll = 0: no numatgtd-poll bars; nnull = 0: no numatgtd-null bars;
# fio = 0 (iscsi-perf, no initiator CPU figure): no third panel. Each panel's plot command is
# built from the bars of the run and evaluated.
if (!exists("poll")) poll = 0
if (!exists("nnull")) nnull = 0
if (!exists("fio")) fio = 1
if (!exists("title")) title = "numatgtd vs tgtd"
panels = (fio ? 3 : 2)
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1600,(fio ? 1450 : 1050) font "Sans,11"
} else {
  set terminal png size 1600,(fio ? 1450 : 1050)
}
set output dir."/chart.png"
set datafile separator "\t"
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by 25 right nomirror
set yrange [0:*]
set key outside right top vertical Left reverse
set lmargin 12
set rmargin 40
set bmargin 7
stats dir."/chart.dat" using 0 nooutput
set xrange [-0.6:STATS_records - 0.4]
c_numa = "#1f77b4"; c_poll = "#2ca02c"; c_tgtd = "#d62728"; c_null = "#aaaaaa"; c_nnull = "#9ecae1"
t_poll = sprintf("numatgtd --busy-poll %d", poll)
t_null = "tgtd --bstype null (no storage)"
t_nnull = "numatgtd --bstype null (no storage)"
data = dir."/chart.dat"
# bars(numatgtd, poll, tgtd, tgtd-null, numatgtd-null): the plot command's bars, by column
# (0: not in this panel); the first bar labels the x axis
bar(col, t, c) = sprintf("'' using %d title %s lc rgb %s", col, t, c)
bars(a, b, c, d, e) = sprintf("plot data using %d:xtic(1) title 'numatgtd' lc rgb c_numa", a) \
  . ((poll > 0 && b > 0) ? ", ".bar(b, "t_poll", "c_poll") : "") \
  . (c > 0 ? ", ".bar(c, "'tgtd (rdwr)'", "c_tgtd") : "") \
  . (d > 0 ? ", ".bar(d, "t_null", "c_null") : "") \
  . ((nnull > 0 && e > 0) ? ", ".bar(e, "t_nnull", "c_nnull") : "")
set multiplot layout panels,1 title title

set title "IOPS relative to Debian's tgtd (rdwr LUN) = 1, median per point"
set ylabel "IOPS / tgtd IOPS"
eval bars(2, 3, 0, 4, 17).", 1 with lines dt 2 lw 2 lc rgb c_tgtd title 'tgtd (rdwr) = 1'"

set title "Target CPU time per I/O (utime+stime from /proc/PID/stat), lower is better"
set ylabel "CPU µs per I/O (log scale)"
set logscale y
set yrange [1:*]
eval bars(5, 6, 7, 8, 18)

if (fio) {
  set title "Initiator (fio) CPU per session against each target, % of one CPU: at 90 % and above fio, not the target, sets the IOPS"
  set ylabel "fio usr+sys, % of one CPU"
  unset logscale y
  set yrange [0:110]
  set ytics 0,20,100
  eval bars(13, 14, 15, 16, 20).", 90 with lines dt 2 lw 2 lc rgb 'black' title '90 %: initiator-bound'"
}
unset multiplot
