#!/bin/bash
# The long fuzz run of issue 15 ("Reliability"): every cargo-fuzz target (or the ones
# named) for 10 minutes each, with the same build, corpora, crash report and exit status as
# tools/fuzz.sh (which this calls), so it fails on any crash.
#   tools/fuzz-long.sh [TARGET...]
# Env: FUZZ_LONG_SECS overrides the 600 s per target; FUZZ_JOBS / FUZZ_ARGS as for
# tools/fuzz.sh (targets run FUZZ_JOBS at a time: 10 targets on 2 CPUs take ~50 min).
set -euo pipefail
exec "$(dirname "$0")/fuzz.sh" "${FUZZ_LONG_SECS:-600}" "$@"
