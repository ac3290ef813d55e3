#!/bin/bash
# libmemprof-preload's config block driven from another process the way memprofd will drive
# it (process_vm_readv/writev, fields then generation): magic/version/size, rate change with
# generation tagging and estimates at both rates, disarm by flags and by an invalid rate,
# counters read back. See tests/workloads/pl_config.c.
. "$(dirname "$0")/preload.inc"

# immediate reports (MEMPROF_BATCH=1): the hook counters are checked against the log
MEMPROF_BATCH=1 "$PL_BIN/pl_config" "$PL_LIB" || pl_failures=$((pl_failures + 1))
pl_exit
