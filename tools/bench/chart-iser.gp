# tools/bench/iser.sh's chart:
#   gnuplot -e "dir='RUN_DIR'; has_base=0|1; has_tgtd=0|1; has_lio=0|1; ref='tgtd'; title='...'" tools/bench/chart-iser.gp
# reads RUN_DIR/chart.dat (written by iser-report.py; NaN where a target is not in the run):
#   1 label ("transport workload"), 2-4 IOPS / ref IOPS of numatgtd, numatgtd-base, LIO (ref:
#   tgtd; numatgtd-base or LIO in a run without tgtd; iser.sh passes its name as ref),
#   5-8 guest CPU µs/IO of numatgtd, numatgtd-base, tgtd, LIO,
#   9-12 target process CPU µs/IO of numatgtd, numatgtd-base, tgtd (LIO: NaN);
# writes RUN_DIR/chart.png; has_base / has_lio: bars for numatgtd-base / LIO.
if (!exists("title")) title = "numatgtd vs tgtd vs LIO, iSER and TCP"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1600,1450 font "Sans,11"
} else {
  set terminal png size 1600,1450
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
set rmargin 34
set bmargin 8
data = dir."/chart.dat"
stats data using 0 nooutput
set xrange [-0.6:STATS_records - 0.4]
# base, tgtd and LIO are optional columns (given by iser.sh: 1 when the run had them)
if (!exists("has_tgtd")) has_tgtd = 1
if (!exists("ref")) ref = "tgtd"
if (!exists("has_base")) has_base = 0
if (!exists("has_lio")) has_lio = 0
c_numa = "#1f77b4"; c_base = "#9ecae1"; c_tgtd = "#d62728"; c_lio = "#2ca02c"
bar(col, t, c) = sprintf(", '' using %d title '%s' lc rgb '%s'", col, t, c)
set multiplot layout 3,1 title title

set title "IOPS relative to ".ref." = 1 (median per point; TCG guest: ratios only)"
set ylabel "IOPS / ".ref." IOPS"
eval "plot data using 2:xtic(1) title 'numatgtd' lc rgb c_numa" \
  . (has_base ? bar(3, "numatgtd-base", c_base) : "") . (has_lio ? bar(4, "LIO (kernel)", c_lio) : "") \
  . ", 1 with lines dt 2 lw 2 lc rgb 'black' title ref.' = 1'"

set title "Whole-guest busy CPU per I/O (/proc/stat: target + initiator + soft-RoCE), lower is better"
set ylabel "guest CPU µs per I/O (log)"
set logscale y
set yrange [*:*]
eval "plot data using 5:xtic(1) title 'numatgtd' lc rgb c_numa" \
  . (has_base ? bar(6, "numatgtd-base", c_base) : "") . (has_tgtd ? bar(7, "tgtd", c_tgtd) : "") \
  . (has_lio ? bar(8, "LIO (kernel)", c_lio) : "")

set title "Target process CPU per I/O (utime+stime, /proc/PID/stat; not for LIO), lower is better"
set ylabel "target CPU µs per I/O (log)"
eval "plot data using 9:xtic(1) title 'numatgtd' lc rgb c_numa" \
  . (has_base ? bar(10, "numatgtd-base", c_base) : "") . (has_tgtd ? bar(11, "tgtd", c_tgtd) : "")
unset multiplot
