# The benchmark points by name, shared by tools/bench/run.sh, tools/bench/iser.sh and the
# guest side of the latter (tools/vm/guest-iser-bench.sh, shipped as /vmtest/points.sh).
# Sourced, not run; POSIX sh.

point_spec() { # POINT -> "rw bs_bytes qd" (fio's --rw, --bs in bytes, --iodepth)
  case $1 in
    rr4k-qd1) echo "randread 4096 1" ;;
    rr4k-qd32) echo "randread 4096 32" ;;
    rw4k-qd32) echo "randwrite 4096 32" ;;
    sr64k-qd8) echo "read 65536 8" ;;
    sr64k-qd32) echo "read 65536 32" ;;
    sr512k-qd8) echo "read 524288 8" ;;
    sr512k-qd32) echo "read 524288 32" ;;
    sw128k-qd8) echo "write 131072 8" ;;
    sw128k-qd8-fua) echo "write 131072 8" ;;
    *) return 1 ;;
  esac
}

# point_fio_flags POINT -> fio options the point adds, for fio on a kernel block device:
# "-fua" points open it O_SYNC, so the block layer sends every WRITE with FUA (a disk that
# reports DPOFUA): writes that must be durable before their status.
point_fio_flags() {
  case $1 in
    *-fua) echo "--sync=1" ;;
  esac
}
