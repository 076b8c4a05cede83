# tools/bench/run.sh's chart with RBD=1:
#   gnuplot -e "dir='RUN_DIR'; title='...'" tools/bench/chart-rbd.gp
# reads RUN_DIR/chart.dat (written by report.py's RBD report; NaN where a value is missing):
#   1 label, 2-3 IOPS / tgtd-rbd IOPS of numatgtd (cache numa) and numatgtd-nocache,
#   4-6 target CPU µs/IO of numatgtd, numatgtd-nocache, tgtd-rbd,
#   7-9 the OSD's CPU µs/IO during each one's points, 10-12 p50 completion latency (µs);
# writes RUN_DIR/chart.png.
if (!exists("title")) title = "numatgtd vs tgtd on RBD"
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
set xtics nomirror
set key outside right top vertical Left reverse
set lmargin 12
set rmargin 44
stats dir."/chart.dat" using 0 nooutput
set xrange [-0.6:STATS_records - 0.4]
c_numa = "#1f77b4"; c_off = "#ff7f0e"; c_tgtd = "#d62728"
t_numa = "numatgtd (cache numa: reads from RAM)"
t_off = "numatgtd cache=off"
t_tgtd = "tgtd --bstype rbd (tgt-rbd)"
set multiplot layout 3,1 title title

set title "IOPS relative to tgtd --bstype rbd = 1, median per point (log scale)"
set ylabel "IOPS / tgtd-rbd IOPS"
set logscale y
set yrange [0.1:*]
plot dir."/chart.dat" using 2:xtic(1) title t_numa lc rgb c_numa, \
     "" using 3 title t_off lc rgb c_off, \
     1 with lines dt 2 lw 2 lc rgb c_tgtd title "tgtd-rbd = 1"

set title "Target CPU time per I/O (utime+stime from /proc/PID/stat, librbd's threads included), lower is better"
set ylabel "CPU µs per I/O (log scale)"
set yrange [1:*]
plot dir."/chart.dat" using 4:xtic(1) title t_numa lc rgb c_numa, \
     "" using 5 title t_off lc rgb c_off, \
     "" using 6 title t_tgtd lc rgb c_tgtd

set title "Completion latency p50 (fio), lower is better"
set ylabel "µs (log scale)"
set yrange [10:*]
plot dir."/chart.dat" using 10:xtic(1) title t_numa lc rgb c_numa, \
     "" using 11 title t_off lc rgb c_off, \
     "" using 12 title t_tgtd lc rgb c_tgtd
unset multiplot
