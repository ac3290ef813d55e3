#!/bin/bash
# kernel tier: Debian 12's stock kernel (linux-image-amd64, 6.1), booted once in QEMU over this
# machine's root filesystem (scripts/kernel-vm), runs a representative subset of the bpf and
# system tiers against this build ($MP_BUILD). Each of their results is relayed as one result
# line, named kernel-RELEASE/TIER/TEST, so tests/run counts them one by one.
#
# The subset (tests/README): what a user does first, with the same statistical checks and the
# strict reader as on the host: record in uprobe mode (C, C++, Debian's python3) and through
# libmemprof-preload (C, python3), memprofd with attach/stop/discard and with --exe/--cgroup
# targets (BPF's cgroup and exec programs on 6.1), fork/exec following, and
# the kernel probes with a program the verifier rejects. About 4 minutes of emulation.
# Skipped (exit 77) when QEMU or the kernel package is not available.
set -u

src=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${MP_BUILD:-$src/build}
subset=(
	bpf/kernel-mechanisms
	bpf/record-stats
	bpf/probe-cxx
	bpf/stacks-python
	bpf/preload-first
	bpf/follow-procs
	system/service-profile
	system/service-targets
)

if [ "$(id -u)" -ne 0 ]; then
	echo "needs root (QEMU's 9p export of / and the tests inside)"
	exit 77
fi
release=$("$src/scripts/kernel-vm" -p 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
	echo "$release"
	exit $rc
fi
tag=kernel-$(echo "$release" | cut -d. -f1,2)

# Inside, the tests run slower (emulated), never timed; each still has a limit.
"$src/scripts/kernel-vm" -t 840 -- env MP_BUILD="$build" MP_TEST_TIMEOUT=600 \
	"$src/tests/run" -t "bpf system" "${subset[@]}" >"${MP_TMP:-/tmp}/guest.out" 2>&1
rc=$?
sed -E "s#^(PASS|FAIL|SKIP) ((bpf|system)/)#\1: $tag/\2#" "${MP_TMP:-/tmp}/guest.out"
grep -q '^[0-9]* passed, 0 failed' "${MP_TMP:-/tmp}/guest.out" || exit $((rc ? rc : 1))
exit 0
