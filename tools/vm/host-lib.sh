# Shared host-side helpers of the VM tests (sourced, not run). Callers set NAME, HERE, REPO.

# Make the numatgtd binary visible to the guest: sets and exports NUMATGTD, appends it to
# VM_ENV and (when it lives under /tmp, which the guest hides) ships it in VM_FILES.
vm_ship_numatgtd() {
  local bin=${NUMATGTD_BIN:-$REPO/target/debug/numatgtd}
  bin=$(readlink -f "$bin")
  [ -x "$bin" ] || { echo "$NAME: $bin missing: cargo build --workspace first" >&2; exit 1; }
  case "$bin" in
    /tmp/*) VM_FILES="${VM_FILES:-} $bin"; export NUMATGTD=/vmtest/$(basename "$bin") ;;
    *) export NUMATGTD=$bin ;;
  esac
  VM_ENV="${VM_ENV:-} NUMATGTD"
  export VM_ENV VM_FILES
}

# Boot the guest with GUEST_SCRIPT, echo its output, require MARKER in it; exits with the
# guest's status (non-zero when the marker is missing).
vm_run_and_check() {
  local guest_script=$1 marker=$2 log start rc took
  log=$(mktemp "${TMPDIR:-/tmp}/numatgt-vm-log.XXXXXX")
  trap 'rm -f "$log"' EXIT
  start=$(date +%s)
  set +e
  "$HERE/vm-run.sh" "$HERE/$guest_script" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  took=$(( $(date +%s) - start ))
  if [ "$rc" = 0 ] && ! grep -q "$marker" "$log"; then
    echo "$NAME: guest exited 0 but printed no success marker" >&2
    rc=1
  fi
  echo "$NAME: rc=$rc in ${took}s"
  exit "$rc"
}
