#!/bin/bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS_PER_TARGET seconds each (default 20).
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Installs cargo-fuzz from crates.io when it is missing. Only the stable toolchain exists
# here, so the nightly-only flags cargo-fuzz needs (-Zsanitizer=address, sancov) are
# unlocked with RUSTC_BOOTSTRAP=1. Builds once (release, debug assertions on, ASan), then
# runs the targets one after the other on fuzz/corpus/<target> (grown, git-ignored) plus
# the committed seeds fuzz/seeds/<target>.
# Fails when any target crashes (panic, sanitizer report, timeout, OOM): prints the crash
# input's path, its hexdump and how to reproduce it. Bounded in time: each run is killed
# after SECONDS + 120 s.
# Env: FUZZ_JOBS=N runs N targets at once (default: the number of CPUs, at most 4);
#      FUZZ_ARGS adds libFuzzer flags.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
FUZZ="$REPO/fuzz"
SECS=${1:-20}
shift || true
case "$SECS" in '' | *[!0-9]*) echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2; exit 2 ;; esac
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
export RUSTC_BOOTSTRAP=1
NCPU=$(nproc 2>/dev/null || echo 1)
JOBS=${FUZZ_JOBS:-$((NCPU < 4 ? NCPU : 4))}
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=1
# the workspace-level CARGO_TARGET_DIR must not mix instrumented and plain builds
unset CARGO_TARGET_DIR

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked || { echo "fuzz: cannot install cargo-fuzz" >&2; exit 1; }
fi
cargo fuzz --version

cd "$FUZZ" || exit 1
if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <(cargo fuzz list)
fi
[ ${#TARGETS[@]} -gt 0 ] || { echo "fuzz: no targets" >&2; exit 1; }

# One build for all targets (same flags as `cargo fuzz run -a`, so the runs do not rebuild).
t0=$(date +%s)
echo "fuzz: building ${TARGETS[*]}"
cargo fuzz build -a "${TARGETS[@]:0:1}" >/dev/null || { echo "fuzz: build failed" >&2; cargo fuzz build -a; exit 1; }
for t in "${TARGETS[@]:1}"; do
  cargo fuzz build -a "$t" >/dev/null 2>&1 || { echo "fuzz: build of $t failed" >&2; cargo fuzz build -a "$t"; exit 1; }
done
echo "fuzz: built in $(( $(date +%s) - t0 ))s"

LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

hexdump_of() {
  if command -v xxd >/dev/null; then xxd "$1" | head -64; else od -A x -t x1z -v "$1" | head -64; fi
  local n
  n=$(wc -c <"$1")
  [ "$n" -le 1024 ] || echo "... ($n bytes in all)"
}

run_one() { # TARGET -> writes $LOGS/TARGET.log and $LOGS/TARGET.rc
  local t=$1
  mkdir -p "corpus/$t" "artifacts/$t"
  local seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  # shellcheck disable=SC2086
  timeout --kill-after=10 $((SECS + 120)) \
    cargo fuzz run -a "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 ${FUZZ_ARGS:-} >"$LOGS/$t.log" 2>&1
  echo $? >"$LOGS/$t.rc"
}

FAILED=()
t0=$(date +%s)
i=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  i=$((i + 1))
  if [ $((i % JOBS)) = 0 ]; then wait; fi
done
wait

for t in "${TARGETS[@]}"; do
  rc=$(cat "$LOGS/$t.rc" 2>/dev/null || echo 1)
  log="$LOGS/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -E '^#[0-9]+' "$log" | grep -o 'cov: [0-9]* ft: [0-9]*' | tail -1)
  corp=$(find "corpus/$t" -type f | wc -l)
  if [ "$rc" = 0 ]; then
    echo "fuzz: $t ok: ${execs:-?} executions, ${cov:-no coverage line}, corpus $corp files"
    continue
  fi
  FAILED+=("$t")
  echo "fuzz: $t FAILED (rc=$rc) after ${execs:-?} executions"
  echo "----- what went wrong ($t log):"
  grep -E -A3 "panicked at|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|SUMMARY:|==[0-9]+== ?ERROR" "$log" | head -40
  echo "----- last lines of the $t log:"
  grep -v '^#[0-9]' "$log" | grep -v -E '^ +[0-9]+: |^ +at ' | tail -15
  crash=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -1 | sed 's/Test unit written to //')
  if [ -n "$crash" ] && [ -f "$crash" ]; then
    crash=$(cd "$(dirname "$crash")" && pwd)/$(basename "$crash")
    echo "----- crash input: $crash"
    hexdump_of "$crash"
    echo "----- reproduce: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -a $t $crash"
    echo "      (NUMATGT_FUZZ_TRACE=1 prints the connection's events and PDUs)"
  else
    echo "----- no crash input written (timeout of the whole run or build problem)"
  fi
done
echo "fuzz: ran ${#TARGETS[@]} targets x ${SECS}s in $(( $(date +%s) - t0 ))s"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${FAILED[*]}"
  exit 1
fi
echo "fuzz: all targets passed"
