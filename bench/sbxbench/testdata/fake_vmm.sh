#!/bin/sh
# TEST ONLY: a stand-in for sbx-vmm for sbx-bench's unit tests, run as
# `sbx-bench run boot --test-generic-sbx --vmm sbx=THIS`. It prints what
# sbx-vmm prints on a boot (its log lines on stderr, the guest's marker on
# stdout) after a short sleep, and exits 0. FAKE_VMM_FAIL=1 makes it fail.
echo "sbx-vmm: info: VM set up in 1.250 ms; starting 1 vCPU(s)" >&2
sleep 0.05
echo "sbx-vmm: info: guest boot time: 40.500 ms" >&2
echo "SBX-BOOTED"
echo "SBX-TS: init_done 12.5"
if [ "${FAKE_VMM_FAIL:-0}" = 1 ]; then
    exit 3
fi
sleep 0.02
echo "sbx-vmm: info: exit: reboot (guest reset); boot time 40.500 ms" >&2
exit 0
