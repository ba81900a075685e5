# shellcheck shell=bash disable=SC2154 # src: set by the test that sources this
# Shared helpers for the shell-level tests (sourced, not run).
# Every test prints what it checked and fails with a reason.

# The test, for reports: its script and the arguments that are not paths.
sbx_test_name=$(basename "$0")
for a in "$@"; do case "$a" in /*) ;; *) sbx_test_name+=" $a" ;; esac; done
unset a

fail() {
  echo "FAIL: $*" >&2
  # the harness's verdict on level 1 and a level-1 oops, if any (tests/run
  # repeats these lines at its end)
  printf '%s\n' "${log:-}" | grep -E '^nested: (error|level-1 oops): ' >&2 || true
  # a guest triple fault's last exits (tests/nested, SBX_HARNESS_KVM_TRACE)
  case "${log:-}" in
    *"nested: level-1 KVM trace ("*) printf '%s\n' "$log" | awk '/^nested: level-1 KVM trace \(/ { p = 1; print; next } p && /^  \| / { print; next } { p = 0 }' >&2
      walk_crash_dumps ;;
  esac
  exit 1
}
# The guest's own page tables, from the memory sbx-vmm dumped at a triple
# fault (SBX_VMM_CRASH_DUMP_DIR), for the IDT entries the trace's last
# shutdown was delivering (#DF, #PF, the event) and its rip: a walk that
# succeeds here means the guest's memory was intact and the fault came
# from below it. A raw snapshot the session kept beside the dump (*.snap)
# is compared page by page with the tables walked.
# walk_crash_dumps [--check] [LOG]: with --check, quiet, and the status
# says whether there was a dump and every walk mapped (0) or not (1).
walk_crash_dumps() {
  local line cr3 idtr rip vector dump check=() found=1
  if [ "${1:-}" = --check ]; then check=(--check); shift; fi
  line=$(printf '%s\n' "${1:-$log}" | grep -o 'svm_shutdown: .*' | tail -n 1)
  cr3=$(printf '%s' "$line" | sed -n 's/.* cr3=\(0x[0-9a-f]*\).*/\1/p')
  idtr=$(printf '%s' "$line" | sed -n 's/.* idtr=\(0x[0-9a-f]*\).*/\1/p')
  rip=$(printf '%s' "$line" | sed -n 's/.* rip=\(0x[0-9a-f]*\).*/\1/p')
  vector=$(printf '%s' "$line" | sed -n 's/.* intinfo=\(0x[0-9a-f]*\).*/\1/p')
  [ -n "$cr3" ] && [ -n "$idtr" ] || return "${#check[@]}"
  vector=$(( ${vector:-0} & 0xff ))
  local snap=()
  [ ${#check[@]} -eq 0 ] && for dump in "${work:-/nonexistent}"/*.snap; do [ -f "$dump" ] && snap=(--snapshot "$dump"); done
  if [ ${#check[@]} -eq 0 ]; then
    for dump in "${work:-/nonexistent}"/sbx-vmm-*.mem.partial; do
      [ -f "$dump" ] && echo "== $dump: never finished (level 1 ended while sbx-vmm wrote it)" >&2
    done
  fi
  for dump in "${work:-/nonexistent}"/sbx-vmm-*.mem; do
    [ -f "$dump" ] || continue
    if [ ${#check[@]} -eq 0 ]; then
      echo "== $dump: cr3 $cr3" >&2
      python3 "$src/tests/guest/tools/walk_dump.py" "${snap[@]}" "$dump" "$cr3" "$idtr" \
        $((idtr + 8 * 16)) $((idtr + 14 * 16)) $((idtr + vector * 16)) ${rip:+"$rip"} >&2 || true
    else
      python3 "$src/tests/guest/tools/walk_dump.py" --check "$dump" "$cr3" "$idtr" \
        $((idtr + 8 * 16)) $((idtr + 14 * 16)) $((idtr + vector * 16)) ${rip:+"$rip"} >/dev/null 2>&1 || return 1
      found=0
    fi
  done
  [ ${#check[@]} -eq 0 ] || return "$found"
}
pass() { echo "ok: $*"; }
# skip REASON : this test cannot run here; exit 77 (meson counts it as
# SKIP) with a one-line reason. Only for what the machine lacks, never for a
# failure of the thing under test.
skip() { echo "SKIP: $*"; exit 77; }

# need_cmd CMD WHAT : skip unless CMD is on PATH (or in /usr/sbin, /sbin).
need_cmd() {
  PATH=$PATH:/usr/sbin:/sbin command -v "$1" >/dev/null 2>&1 || skip "no $1 here ($2)"
}

# need_harness : skip unless tests/nested can run guests here, with the
# same choice of mode as tests/nested: direct (hardware KVM, or already in
# the harness) needs /dev/kvm; nested needs QEMU and busybox on this machine.
need_harness() {
  local mode=${SBX_HARNESS:-}
  if [ -z "$mode" ]; then
    if [ "${SBX_NESTED:-}" = 1 ] || [ -d /sys/module/kvm_amd ] || [ -d /sys/module/kvm_intel ]; then
      mode=direct
    else
      mode=nested
    fi
  fi
  if [ "$mode" = direct ]; then
    [ -c /dev/kvm ] || skip "no /dev/kvm for tests/nested's direct mode"
  else
    need_cmd qemu-system-x86_64 "tests/nested boots its level-1 machine with it"
    need_cmd busybox "tests/nested's level-1 init"
  fi
}

# expect_contains HAYSTACK NEEDLE WHAT
expect_contains() {
  case "$1" in
    *"$2"*) pass "$3" ;;
    *) printf '%s\n' "$1" | tail -n 40 >&2; fail "$3: output lacks '$2'" ;;
  esac
}

# run_nested OUT_FILE ARGS... : runs ARGS through tests/nested with stdout and
# stderr in OUT_FILE; sets $status and $log.
# When level 1 itself fails — the harness's "level 1 wedged" (249) or "the
# level-1 kernel panicked" (250), which QEMU microvm and kvmtool runs hit as
# well (tests/harness/README.md, "Lifetimes and the references") — the run
# is repeated, up to SBX_HARNESS_RETRIES (2) times. So is a failed run in
# which a guest triple-faulted although its page tables, in the memory
# sbx-vmm dumped (SBX_VMM_CRASH_DUMP_DIR=$work), map the IDT entries and
# the rip the CPU faulted on: no x86 CPU faults on present mappings, so the
# fault came from below the VMM (level 1's KVM or QEMU's emulated SVM;
# tests/harness/README.md, "Triple faults"). So is a failed run that printed
# a `HARNESS-BELOW:` line: a guest spinning on page faults level 1's KVM
# injects at a rip the guest's CPU keeps executing (tests/guest/tools/
# pf_spin.py; the README's "Page-fault spins"). The failed run's output
# is kept as OUT_FILE.l1-failed-N (its dumps in $work/l1-failed-N), said on
# stderr, and appended to $SBX_HARNESS_RETRY_LOG (tests/run lists them),
# with a copy of the output in the folder beside it (RETRY_LOG without
# .tsv) that outlives the test's own folder.
# Any other failure of CMD, whatever its status, is never repeated.
run_nested() {
  local out=$1; shift
  local attempt=0 retries=${SBX_HARNESS_RETRIES:-2} why
  while :; do
    set +e
    "$src/tests/nested" "$@" >"$out" 2>&1
    status=$?
    set -e
    why=$(l1_failure "$status" "$out")
    if [ -z "$why" ] && [ "$status" -ne 0 ] && [ -n "${work:-}" ] && walk_crash_dumps --check "$(cat "$out")"; then
      why="a guest triple fault below the VMM: the guest's page tables in sbx-vmm's memory map the IDT and rip it faulted on"
    fi
    if [ -z "$why" ] || [ "$attempt" -ge "$retries" ]; then break; fi
    attempt=$((attempt + 1))
    mv "$out" "$out.l1-failed-$attempt"
    # that run's dumps (and a kept snapshot) stay with its output
    # (a session that keeps no raw snapshot has no *.snap: nullglob, so
    # that a missing one cannot end this script under set -e)
    if compgen -G "$work/sbx-vmm-*.mem" >/dev/null; then
      mkdir -p "$work/l1-failed-$attempt"
      (shopt -s nullglob; mv -- "$work"/sbx-vmm-*.mem "$work"/*.snap "$work/l1-failed-$attempt/")
    fi
    local kept=$out.l1-failed-$attempt
    if [ -n "${SBX_HARNESS_RETRY_LOG:-}" ]; then
      # the test's folder goes when a later attempt passes: keep a copy
      # of the output beside the retry log (dumps stay in the folder)
      kept=${SBX_HARNESS_RETRY_LOG%.tsv}/${sbx_test_name:-test}.$$.l1-failed-$attempt
      mkdir -p "${kept%/*}"
      cp -- "$out.l1-failed-$attempt" "$kept"
      printf '%s\t%s\t%s\t%s\n' "$sbx_test_name" "$status" "$why" "$kept" \
        >>"$SBX_HARNESS_RETRY_LOG"
    fi
    echo "HARNESS: $why (status $status); running it again ($attempt of $retries); that run's output: $kept" >&2
  done
  log=$(cat "$out")
}

# l1_failure STATUS OUT_FILE : prints what failed when STATUS and the
# harness's last error line in OUT_FILE say level 1 itself failed, or when
# a failed CMD printed a HARNESS-BELOW line (a fault from below the VMM).
l1_failure() {
  local line
  case "$1" in
    0) return 0 ;;
    249|250)
      line=$(grep -E '^nested: error: (level 1 wedged|the level-1 kernel panicked)' "$2" | tail -n1) || true
      line=${line#nested: error: } ;;
    253)
      # level 1 never reached CMD: a boot stall of level 1 itself (seen in
      # boot-4cpu-vmlinux, 2026-12-06, two level-1 machines side by side
      # and other compiles on the 2-core host, load ~10); nothing ran
      line=$(grep -E '^nested: error: level 1 did not start CMD' "$2" | tail -n1) || true
      line=${line#nested: error: } ;;
    *)
      line=$(grep -E '^HARNESS-BELOW: ' "$2" | head -n1) || true
      line=${line#HARNESS-BELOW: } ;;
  esac
  [ -n "$line" ] && printf '%s\n' "$line" | cut -c1-240
  return 0
}

# expect_status WANT WHAT : checks $status from run_nested, showing the log's tail on failure.
expect_status() {
  [ "$status" -eq "$1" ] || { printf '%s\n' "$log" | tail -n 60 >&2; fail "$2: exit status $status, expected $1"; }
  pass "$2"
}
