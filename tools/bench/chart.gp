# tools/bench/run.sh's chart:
#   gnuplot -e "dir='RUN_DIR'; poll=BUSY_POLL; fio=1; title='...'" tools/bench/chart.gp
# reads RUN_DIR/chart.dat (written by report.py; NaN where a target is not in the run):
#   1 label, 2-4 IOPS / tgtd IOPS of numatgtd, numatgtd-poll, tgtd-null,
#   5-8 target CPU µs/IO of numatgtd, numatgtd-poll, tgtd, tgtd-null,
#   9-12 fio's CPU µs/IO with each, 13-16 fio's % of one CPU per session with each;
# writes RUN_DIR/chart.png. poll = 0: no numatgtd-poll bars; fio = 0 (iscsi-perf, no initiator
# CPU figure): no third panel.
if (!exists("poll")) poll = 0
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
c_numa = "#1f77b4"; c_poll = "#2ca02c"; c_tgtd = "#d62728"; c_null = "#aaaaaa"
t_poll = sprintf("numatgtd --busy-poll %d", poll)
t_null = "tgtd --bstype null (no storage)"
set multiplot layout panels,1 title title

set title "IOPS relative to Debian's tgtd (rdwr LUN) = 1, median per point"
set ylabel "IOPS / tgtd IOPS"
if (poll > 0) {
  plot dir."/chart.dat" using 2:xtic(1) title "numatgtd" lc rgb c_numa, \
       "" using 3 title t_poll lc rgb c_poll, \
       "" using 4 title t_null lc rgb c_null, \
       1 with lines dt 2 lw 2 lc rgb c_tgtd title "tgtd (rdwr) = 1"
} else {
  plot dir."/chart.dat" using 2:xtic(1) title "numatgtd" lc rgb c_numa, \
       "" using 4 title t_null lc rgb c_null, \
       1 with lines dt 2 lw 2 lc rgb c_tgtd title "tgtd (rdwr) = 1"
}

set title "Target CPU time per I/O (utime+stime from /proc/PID/stat), lower is better"
set ylabel "CPU µs per I/O (log scale)"
set logscale y
set yrange [1:*]
if (poll > 0) {
  plot dir."/chart.dat" using 5:xtic(1) title "numatgtd" lc rgb c_numa, \
       "" using 6 title t_poll lc rgb c_poll, \
       "" using 7 title "tgtd (rdwr)" lc rgb c_tgtd, \
       "" using 8 title t_null lc rgb c_null
} else {
  plot dir."/chart.dat" using 5:xtic(1) title "numatgtd" lc rgb c_numa, \
       "" using 7 title "tgtd (rdwr)" lc rgb c_tgtd, \
       "" using 8 title t_null lc rgb c_null
}

if (fio) {
  set title "Initiator (fio) CPU per session against each target, % of one CPU: at 90 % and above fio, not the target, sets the IOPS"
  set ylabel "fio usr+sys, % of one CPU"
  unset logscale y
  set yrange [0:110]
  set ytics 0,20,100
  if (poll > 0) {
    plot dir."/chart.dat" using 13:xtic(1) title "numatgtd" lc rgb c_numa, \
         "" using 14 title t_poll lc rgb c_poll, \
         "" using 15 title "tgtd (rdwr)" lc rgb c_tgtd, \
         "" using 16 title t_null lc rgb c_null, \
         90 with lines dt 2 lw 2 lc rgb "black" title "90 %: initiator-bound"
  } else {
    plot dir."/chart.dat" using 13:xtic(1) title "numatgtd" lc rgb c_numa, \
         "" using 15 title "tgtd (rdwr)" lc rgb c_tgtd, \
         "" using 16 title t_null lc rgb c_null, \
         90 with lines dt 2 lw 2 lc rgb "black" title "90 %: initiator-bound"
  }
}
unset multiplot
