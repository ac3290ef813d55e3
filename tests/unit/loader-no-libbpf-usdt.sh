#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# memprofd and memprofctl attach libmemprof-preload's USDT probes as plain uprobes with their
# semaphores (daemon/probe/preload_attach.c, pl_read_lib()), never through libbpf's
# bpf_program__attach_usdt(): libbpf keeps the spec ids of every USDT link of an object in one
# array that each detach reallocates, and the loader destroys links from concurrent threads
# (links_destroy()) while it attaches others, which freed that array twice (memprofctl record
# of a forking program aborted with "corrupted size vs. prev_size" about one run in 30).
set -u
bad=0
for b in bin/memprofctl bin/memprofd; do
	f=$MP_BUILD/$b
	if [ ! -x "$f" ]; then
		echo "FAIL: $b is not built"
		bad=1
	elif nm -D --undefined-only "$f" | grep -qw bpf_program__attach_usdt; then
		echo "FAIL: $b: calls bpf_program__attach_usdt"
		bad=1
	else
		echo "PASS: $b: no libbpf USDT links"
	fi
done
exit $bad
