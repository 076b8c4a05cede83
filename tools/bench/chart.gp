# tools/bench/run.sh's chart: gnuplot -e "dir='RUN_DIR'; title='...'" tools/bench/chart.gp
# reads RUN_DIR/chart.dat (label, numatgtd/tgtd, null/tgtd, CPU µs/IO of numatgtd, tgtd, null),
# writes RUN_DIR/chart.png.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1600,1050 font "Sans,11"
} else {
  set terminal png size 1600,1050
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
set rmargin 36
set bmargin 7
stats dir."/chart.dat" using 0 nooutput
set xrange [-0.6:STATS_records - 0.4]
set multiplot layout 2,1 title title
set title "IOPS relative to Debian's tgtd (rdwr LUN) = 1, median per point"
set ylabel "IOPS / tgtd IOPS"
plot dir."/chart.dat" using 2:xtic(1) title "numatgtd" lc rgb "#1f77b4", \
     "" using 3 title "tgtd --bstype null (no storage)" lc rgb "#aaaaaa", \
     1 with lines dt 2 lw 2 lc rgb "#d62728" title "tgtd (rdwr) = 1"
set title "Target CPU time per I/O (utime+stime from /proc/PID/stat), lower is better"
set ylabel "CPU µs per I/O (log scale)"
set logscale y
set yrange [1:*]
plot dir."/chart.dat" using 4:xtic(1) title "numatgtd" lc rgb "#1f77b4", \
     "" using 5 title "tgtd (rdwr)" lc rgb "#d62728", \
     "" using 6 title "tgtd --bstype null (no storage)" lc rgb "#aaaaaa"
unset multiplot
