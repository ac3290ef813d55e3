/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofd's D-Bus control protocol: the socket, bus name, object paths, interfaces, the
 * names and signatures of their methods and properties, the keys of the per-process status,
 * and the error names. memprofd (daemon/service/bus.c) serves exactly this, libmemprof's
 * client (<memprof/client.h>) speaks it; a program may use it to talk to memprofd with any
 * D-Bus library. memprofd(8) describes what each member does.
 *
 * NAME_SIG is the D-Bus signature of property or key NAME, MEMPROF_BUS_SIG_* those of method
 * arguments and results; NAME_ENTRY is the signature of one element of an array property, a
 * struct's without its parentheses (a reader enters the struct and reads its members).
 */
#ifndef MEMPROF_BUS_H
#define MEMPROF_BUS_H

/* The private socket (D-Bus peer to peer: no Hello, no destination). */
#define MEMPROF_BUS_SOCKET		"/run/memprofd/bus"
/* The name on a bus (memprofd --system-bus, --bus-address). */
#define MEMPROF_BUS_NAME		"org.memprofd"

#define MEMPROF_BUS_PATH		"/org/memprofd"
#define MEMPROF_BUS_PROFILE_PREFIX	"/org/memprofd/profile"	/* + "/<id>", id >= 1 */
#define MEMPROF_BUS_MANAGER_IFACE	"org.memprofd.Manager1"	/* at MEMPROF_BUS_PATH */
#define MEMPROF_BUS_PROFILE_IFACE	"org.memprofd.Profile1"	/* at each profile's path */

/* ---- org.memprofd.Manager1: methods */

/* Start(ai pids, a{sv} options) -> (o profile). The option keys: memprofd(8). */
#define MEMPROF_BUS_START		"Start"
#define MEMPROF_BUS_SIG_PIDS		"ai"
#define MEMPROF_BUS_SIG_OPTIONS		"a{sv}"
#define MEMPROF_BUS_SIG_PATH		"o"
/* ListProfiles() -> (a(usoudau) profiles): id, state, path, owner uid, rate, pids. */
#define MEMPROF_BUS_LIST_PROFILES	"ListProfiles"
#define MEMPROF_BUS_PROFILE_LIST_ENTRY	"usoudau"
#define MEMPROF_BUS_SIG_PROFILE_LIST	"a(" MEMPROF_BUS_PROFILE_LIST_ENTRY ")"
/* Stop(u id), Discard(u id); on Profile1 without the id. */
#define MEMPROF_BUS_STOP		"Stop"
#define MEMPROF_BUS_DISCARD		"Discard"
#define MEMPROF_BUS_SIG_ID		"u"

/* ---- org.memprofd.Manager1: properties (name, signature) */

#define MEMPROF_BUS_VERSION		"Version"
#define MEMPROF_BUS_VERSION_SIG		"s"
#define MEMPROF_BUS_DEFAULT_RATE	"DefaultRate"
#define MEMPROF_BUS_DEFAULT_RATE_SIG	"d"
#define MEMPROF_BUS_DEFAULT_CALLSTACK	"DefaultCallstackSize"
#define MEMPROF_BUS_DEFAULT_CALLSTACK_SIG "u"
#define MEMPROF_BUS_STATE_DIRECTORY	"StateDirectory"
#define MEMPROF_BUS_STATE_DIRECTORY_SIG	"s"
#define MEMPROF_BUS_MAX_PROFILES	"MaxProfiles"
#define MEMPROF_BUS_MAX_PROFILES_SIG	"u"
#define MEMPROF_BUS_CLIENTS		"Clients"
#define MEMPROF_BUS_CLIENTS_SIG		"u"
#define MEMPROF_BUS_REFUSED_CLIENTS	"RefusedClients"
#define MEMPROF_BUS_REFUSED_CLIENTS_SIG	"t"
#define MEMPROF_BUS_MECHANISMS		"Mechanisms"
#define MEMPROF_BUS_MECHANISMS_SIG	"s"
/* Stats: a(st), (counter name, value). */
#define MEMPROF_BUS_STATS		"Stats"
#define MEMPROF_BUS_STATS_ENTRY		"st"
#define MEMPROF_BUS_STATS_SIG		"a(" MEMPROF_BUS_STATS_ENTRY ")"

/* ---- org.memprofd.Profile1: methods (and Stop(), Discard()) */

/* AddProcess(u pid, a{sv} options) -> (b followed); option MEMPROF_BUS_OPT_OUTPUT. */
#define MEMPROF_BUS_ADD_PROCESS		"AddProcess"
#define MEMPROF_BUS_SIG_PID		"u"
#define MEMPROF_BUS_SIG_FOLLOWED	"b"
/* The option of Start and AddProcess that passes a trace's file: h, a regular file open for
 * writing (not appending). */
#define MEMPROF_BUS_OPT_OUTPUT		"output"
#define MEMPROF_BUS_OPT_OUTPUT_SIG		"h"

/* ---- org.memprofd.Profile1: properties (name, signature) */

#define MEMPROF_BUS_ID			"Id"
#define MEMPROF_BUS_ID_SIG		"u"
#define MEMPROF_BUS_STATE		"State"			/* emits PropertiesChanged */
#define MEMPROF_BUS_STATE_SIG		"s"
#define MEMPROF_BUS_OWNER		"Owner"
#define MEMPROF_BUS_OWNER_SIG		"u"
#define MEMPROF_BUS_RATE		"Rate"
#define MEMPROF_BUS_RATE_SIG		"d"
#define MEMPROF_BUS_CALLSTACK_SIZE	"CallstackSize"
#define MEMPROF_BUS_CALLSTACK_SIZE_SIG	"u"
#define MEMPROF_BUS_FOLLOW_FORKS	"FollowForks"
#define MEMPROF_BUS_FOLLOW_FORKS_SIG	"b"
#define MEMPROF_BUS_DURATION		"DurationUSec"
#define MEMPROF_BUS_DURATION_SIG	"t"
#define MEMPROF_BUS_FORMAT_VERSION	"FormatVersion"
#define MEMPROF_BUS_FORMAT_VERSION_SIG	"q"
#define MEMPROF_BUS_COMPRESSED		"Compressed"
#define MEMPROF_BUS_COMPRESSED_SIG	"b"
#define MEMPROF_BUS_DIRECTORY		"Directory"
#define MEMPROF_BUS_DIRECTORY_SIG	"s"
#define MEMPROF_BUS_START_TIMESTAMP	"StartTimestamp"	/* CLOCK_REALTIME µs */
#define MEMPROF_BUS_START_TIMESTAMP_SIG	"t"
/* the name of the memprofd.conf [Profile] section that started it; "" for a client's */
#define MEMPROF_BUS_STANDING		"Standing"
#define MEMPROF_BUS_STANDING_SIG	"s"

/*
 * Targets: a(ssbttt), one per target of the profile (Start's "unit", "cgroup", "exe"): its
 * name ("unit:cron.service", "cgroup:PATH", "exe:PATH"), the executable or the cgroup's v2
 * directory, whether that cgroup exists now, and the processes that joined through it, that
 * were skipped (the owner may not profile them) and that could not be probed.
 */
#define MEMPROF_BUS_TARGETS		"Targets"
#define MEMPROF_BUS_TARGETS_ENTRY	"ssbttt"
#define MEMPROF_BUS_TARGETS_SIG		"a(" MEMPROF_BUS_TARGETS_ENTRY ")"

/* The values of State. */
#define MEMPROF_BUS_STATE_SAMPLING	"sampling"
#define MEMPROF_BUS_STATE_STOPPED	"stopped"
#define MEMPROF_BUS_STATE_DISCARDED	"discarded"

/*
 * ProcessStatus: aa{sv}, one dictionary per process of the profile. A reader takes the keys
 * it knows and ignores the others; a key whose value the daemon does not have is absent.
 */
#define MEMPROF_BUS_PROCESS_STATUS	"ProcessStatus"
#define MEMPROF_BUS_PROCESS_STATUS_ENTRY "a{sv}"
#define MEMPROF_BUS_PROCESS_STATUS_SIG	"a" MEMPROF_BUS_PROCESS_STATUS_ENTRY
/* Its keys, each with the signature of its value. */
#define MEMPROF_PROC_PID		"pid"
#define MEMPROF_PROC_PID_SIG		"u"
#define MEMPROF_PROC_COMM		"comm"
#define MEMPROF_PROC_COMM_SIG		"s"
#define MEMPROF_PROC_EXITED		"exited"
#define MEMPROF_PROC_EXITED_SIG		"b"
#define MEMPROF_PROC_MODE		"mode"			/* "uprobe", "preload" */
#define MEMPROF_PROC_MODE_SIG		"s"
#define MEMPROF_PROC_SAMPLED_BLOCKS	"sampled_blocks"
#define MEMPROF_PROC_SAMPLED_BLOCKS_SIG	"t"
#define MEMPROF_PROC_SAMPLES		"samples"		/* their multiplicities' sum */
#define MEMPROF_PROC_SAMPLES_SIG	"t"
#define MEMPROF_PROC_LIVE_SAMPLES	"live_samples"		/* the same, blocks not freed */
#define MEMPROF_PROC_LIVE_SAMPLES_SIG	"t"
#define MEMPROF_PROC_FREED_BLOCKS	"freed_blocks"		/* sampled blocks freed */
#define MEMPROF_PROC_FREED_BLOCKS_SIG	"t"
#define MEMPROF_PROC_DROPS		"drops"			/* events lost */
#define MEMPROF_PROC_DROPS_SIG		"t"
#define MEMPROF_PROC_EST_ALLOC_BYTES	"est_alloc_bytes"
#define MEMPROF_PROC_EST_ALLOC_BYTES_SIG "d"
#define MEMPROF_PROC_EST_LIVE_BYTES	"est_live_bytes"
#define MEMPROF_PROC_EST_LIVE_BYTES_SIG	"d"
#define MEMPROF_PROC_TRACE		"trace"			/* absent: the client's file */
#define MEMPROF_PROC_TRACE_SIG		"s"
#define MEMPROF_PROC_DETACHED_REASON	"detached_reason"	/* over its overhead budget */
#define MEMPROF_PROC_DETACHED_REASON_SIG "s"
#define MEMPROF_PROC_WRITE_ERROR	"write_error"		/* errno name, or "stalled" */
#define MEMPROF_PROC_WRITE_ERROR_SIG	"s"
#define MEMPROF_PROC_WRITE_ERROR_SINCE	"write_error_since_us"	/* CLOCK_REALTIME µs */
#define MEMPROF_PROC_WRITE_ERROR_SINCE_SIG "t"
#define MEMPROF_PROC_LOST_WRITES	"lost_writes"		/* events not written */
#define MEMPROF_PROC_LOST_WRITES_SIG	"t"

/*
 * Retired: a{sv}, the sums of the profile's exited processes no longer in ProcessStatus (a
 * profile lists its last 64 exited processes whose traces are complete, and those whose files
 * are still being finished): "processes" (t, how many), and of the keys of
 * ProcessStatus those that add up (sampled_blocks, samples, live_samples, freed_blocks, drops,
 * est_alloc_bytes, est_live_bytes). Their traces are in the profile's directory.
 */
#define MEMPROF_BUS_RETIRED		"Retired"
#define MEMPROF_BUS_RETIRED_SIG		"a{sv}"
#define MEMPROF_RETIRED_PROCESSES	"processes"
#define MEMPROF_RETIRED_PROCESSES_SIG	"t"

/*
 * Processes: the same figures as a positional a(usbttttddts) (pid, comm, exited, sampled
 * blocks, samples, live samples, freed blocks, est. allocated bytes, est. live bytes, drops,
 * trace or ""), kept for compatibility: new clients read ProcessStatus.
 */
#define MEMPROF_BUS_PROCESSES		"Processes"
#define MEMPROF_BUS_PROCESSES_ENTRY	"usbttttddts"
#define MEMPROF_BUS_PROCESSES_SIG	"a(" MEMPROF_BUS_PROCESSES_ENTRY ")"

/* ---- errors: each carries a message that says what failed */

#define MEMPROF_BUS_ERR_BUSY		"org.memprofd.Error.Busy"		/* EBUSY */
#define MEMPROF_BUS_ERR_NOT_FOUND	"org.memprofd.Error.NotFound"		/* ENOENT */
#define MEMPROF_BUS_ERR_NO_PROCESS	"org.memprofd.Error.NoSuchProcess"	/* ESRCH */
#define MEMPROF_BUS_ERR_NO_ALLOCATOR	"org.memprofd.Error.NoAllocator"	/* ENOEXEC */
#define MEMPROF_BUS_ERR_PERMISSION	"org.memprofd.Error.PermissionDenied"	/* EACCES */
#define MEMPROF_BUS_ERR_INVALID		"org.memprofd.Error.InvalidArgs"	/* EINVAL */
#define MEMPROF_BUS_ERR_BAD_STATE	"org.memprofd.Error.BadState"		/* EINVAL */
#define MEMPROF_BUS_ERR_LIMIT		"org.memprofd.Error.LimitExceeded"	/* ENOSPC */
#define MEMPROF_BUS_ERR_FAILED		"org.memprofd.Error.Failed"		/* EIO */

#endif /* MEMPROF_BUS_H */
