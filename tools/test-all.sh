#!/bin/bash
# THE test command of numatgt: every check CI runs, in order, each as a stage.
#   install-test-deps (when root) -> toolchain components -> cargo build -> cargo fmt --check
#   -> cargo clippy -D warnings -> layers (tools/check-layers.py) -> cargo test --workspace (unit + integration against the
#   built numatgtd and real initiators) -> deb (tools/build-deb.sh, a release build, and the
#   package's checks: files, Depends, man pages, completions, lintian) -> fuzz smoke (every
#   cargo-fuzz target of fuzz/ for 15 s, tools/fuzz.sh) -> VM test (Linux kernel initiator in QEMU)
#   -> VM crash test (numatgtd SIGKILLed under fsync'ed ext4 writes; files and e2fsck checked)
#   -> VM upgrade (numatgtadm --upgrade three times under fio verify on ext4, two builds)
#   -> VM NUMA test (cache placement and local share on a real two-node guest kernel)
#   -> VM multipath (two ALUA gateways under dm-multipath; the owner SIGKILLed under
#   fsync'ed ext4 writes, which go on through the other one; files and e2fsck checked)
#   -> VM RDMA echo (the rdma crate's CM, Send, RDMA READ/WRITE over soft-RoCE in the guest)
#   -> VM iSER (the kernel's ib_iser over soft-RoCE) -> VM systemd (the .deb of the deb
#   stage installed in a Debian 12 guest whose PID 1 is systemd: tools/vm/test-vm-systemd.sh)
# All stages run even after a failure; the last line is `test-all: N passed, M failed`, and the
# exit status is non-zero when any stage failed.
# Env: SKIP_VM=1 skips the VM stages (they are then reported as failed: CI never sets it).
#      CARGO_TARGET_DIR is honoured.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
if [ -d "${HOME:-/root}/.cargo/bin" ]; then PATH="${HOME:-/root}/.cargo/bin:$PATH"; fi
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export NUMATGTD_BIN=${NUMATGTD_BIN:-$TARGET_DIR/debug/numatgtd}
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}

PASSED=()
FAILED=()
stage() { # NAME CMD...
  local name=$1; shift
  local t0 rc
  t0=$(date +%s)
  echo
  echo "=================== test-all: stage $name: $* ==================="
  "$@"
  rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ "$rc" = 0 ]; then
    PASSED+=("$name")
    echo "=================== test-all: stage $name PASSED (${dt}s) ==================="
  else
    FAILED+=("$name")
    echo "=================== test-all: stage $name FAILED rc=$rc (${dt}s) ==================="
  fi
}

deps() {
  if [ "$(id -u)" = 0 ]; then
    "$REPO/tools/install-test-deps.sh"
  else
    echo "not root: not installing packages (tests that need missing tools will fail)"
  fi
}

toolchain() {
  command -v cargo >/dev/null || { echo "cargo not found in PATH" >&2; return 1; }
  local missing=()
  cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
  cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
  if [ ${#missing[@]} -gt 0 ]; then
    command -v rustup >/dev/null || { echo "missing ${missing[*]} and no rustup to add them" >&2; return 1; }
    rustup component add "${missing[@]}" || return 1
  fi
  cargo --version && cargo clippy --version && cargo fmt --version
}

cargo_test() {
  local rc=0
  # unit tests, integration tests (they start $NUMATGTD_BIN), doc tests
  cargo test --workspace --no-fail-fast || rc=$?
  local table
  for table in "$TARGET_DIR"/test-reports/iscsi-test-cu-numatgtd*.txt; do
    [ -f "$table" ] || continue
    echo "--- $table"
    cat "$table"
  done
  return $rc
}

deb_test() {
  # builds target/debian/numatgt_*.deb and checks it (tests/tests/deb_package.rs; its tests
  # are #[ignore]d in `cargo test --workspace` because of the release build)
  cargo test -p tests --test deb_package -- --ignored
}

fuzz_smoke() {
  # builds fuzz/ (its own workspace and target dir) and runs each target 15 s; fails on a crash
  "$REPO/tools/fuzz.sh" 15
}

vm_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM test not run (counted as failed)"
    return 1
  fi
  "$REPO/tools/vm/test-vm-iscsi-tcp.sh"
}

vm_crash_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM crash test not run (counted as failed)"
    return 1
  fi
  # kernel initiator + ext4 across SIGKILLs of numatgtd (issue 15)
  "$REPO/tools/vm/test-vm-crash.sh"
}

vm_multipath_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM multipath test not run (counted as failed)"
    return 1
  fi
  # dm-multipath (prio alua) over two numatgtd gateways; failover and failback (issue 16)
  "$REPO/tools/vm/test-vm-multipath.sh"
}

vm_multipath_rbd_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM RBD multipath test not run (counted as failed)"
    return 1
  fi
  # the same over an RBD image on a mini Ceph cluster in the guest: explicit ALUA, the
  # kernel's STPG makes gateway 2 fence the SIGKILLed owner and take the LUN over; then
  # sg_get_lba_status on a thin RBD LUN against rbd diff, before and after a blkdiscard
  MPATH_BACKEND=rbd "$REPO/tools/vm/test-vm-multipath.sh" || return 1
  # I/O shipping: both gateways active/non-optimized to each other, both paths in one path
  # group round robin; gateway 2 ships its half to the owner (issue 26)
  MPATH_BACKEND=rbd MPATH_MODE=ship "$REPO/tools/vm/test-vm-multipath.sh"
}

vm_rdma_echo_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM RDMA echo test not run (counted as failed)"
    return 1
  fi
  "$REPO/tools/vm/test-vm-rdma-echo.sh"
}

vm_iser_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM iSER test not run (counted as failed)"
    return 1
  fi
  # numatgtd over iSER with the kernel ib_iser initiator on soft-RoCE (issue 13)
  TARGET=numatgtd "$REPO/tools/vm/test-vm-iser.sh"
}

vm_numa_test() {
  if [ "${SKIP_VM:-0}" = 1 ]; then
    echo "SKIP_VM=1: VM NUMA test not run (counted as failed)"
    return 1
  fi
  "$REPO/tools/vm/test-vm-numa.sh"
}

T0=$(date +%s)
stage install-test-deps deps
stage toolchain toolchain
stage build cargo build --workspace --all-targets
stage fmt cargo fmt --all -- --check
stage clippy cargo clippy --workspace --all-targets -- -D warnings
stage layers python3 tools/check-layers.py
stage test cargo_test
stage deb deb_test
stage fuzz-smoke fuzz_smoke
stage vm-iscsi-tcp vm_test
stage vm-crash vm_crash_test
stage vm-upgrade "$REPO/tools/vm/test-vm-upgrade.sh"
stage vm-numa vm_numa_test
stage vm-multipath vm_multipath_test
stage vm-multipath-rbd vm_multipath_rbd_test
stage vm-rdma-echo vm_rdma_echo_test
stage vm-iser vm_iser_test
stage vm-systemd "$REPO/tools/vm/test-vm-systemd.sh"

echo
echo "test-all: passed stages: ${PASSED[*]:-none}"
echo "test-all: failed stages: ${FAILED[*]:-none}"
echo "test-all: total $(( $(date +%s) - T0 ))s"
echo "test-all: ${#PASSED[@]} passed, ${#FAILED[@]} failed"
[ ${#FAILED[@]} = 0 ]
