/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * memprofd's D-Bus control protocol: the socket, bus name, object paths, interfaces, the
 * names and signatures of their methods and properties, the keys of the per-process status,
 * and the error names. memprofd (daemon/service/bus.c) serves exactly this, libmemprof's
 * client (<memprof/client.h>) speaks it; a program may use it to talk to memprofd with any
 * D-Bus library. memprofd(8) describes what each member does.
 *
 * Signatures are D-Bus type strings; a struct's contents are given without parentheses
 * (..._ENTRY) where a reader enters the struct and reads its members.
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
#define MEMPROF_BUS_SIG_PROFILE_ENTRY	"usoudau"
#define MEMPROF_BUS_SIG_PROFILE_LIST	"a(" MEMPROF_BUS_SIG_PROFILE_ENTRY ")"
/* Stop(u id), Discard(u id); on Profile1 without the id. */
#define MEMPROF_BUS_STOP		"Stop"
#define MEMPROF_BUS_DISCARD		"Discard"
#define MEMPROF_BUS_SIG_ID		"u"

/* ---- org.memprofd.Manager1: properties (name, signature) */

#define MEMPROF_BUS_VERSION		"Version"		/* s */
#define MEMPROF_BUS_DEFAULT_RATE	"DefaultRate"		/* d */
#define MEMPROF_BUS_DEFAULT_CALLSTACK	"DefaultCallstackSize"	/* u */
#define MEMPROF_BUS_STATE_DIRECTORY	"StateDirectory"	/* s */
#define MEMPROF_BUS_MAX_PROFILES	"MaxProfiles"		/* u */
#define MEMPROF_BUS_CLIENTS		"Clients"		/* u */
#define MEMPROF_BUS_REFUSED_CLIENTS	"RefusedClients"	/* t */
#define MEMPROF_BUS_MECHANISMS		"Mechanisms"		/* s */
/* Stats: a(st), (counter name, value). */
#define MEMPROF_BUS_STATS		"Stats"
#define MEMPROF_BUS_SIG_STAT_ENTRY	"st"
#define MEMPROF_BUS_SIG_STATS		"a(" MEMPROF_BUS_SIG_STAT_ENTRY ")"

/* ---- org.memprofd.Profile1: methods (and Stop(), Discard()) */

/* AddProcess(u pid, a{sv} options) -> (b followed); option MEMPROF_BUS_OPT_OUTPUT. */
#define MEMPROF_BUS_ADD_PROCESS		"AddProcess"
#define MEMPROF_BUS_SIG_PID		"u"
#define MEMPROF_BUS_SIG_FOLLOWED	"b"
/* The option of Start and AddProcess that passes a trace's file: h, a regular file open for
 * writing (not appending). */
#define MEMPROF_BUS_OPT_OUTPUT		"output"
#define MEMPROF_BUS_SIG_OUTPUT		"h"

/* ---- org.memprofd.Profile1: properties (name, signature) */

#define MEMPROF_BUS_ID			"Id"			/* u */
#define MEMPROF_BUS_STATE		"State"			/* s; emits PropertiesChanged */
#define MEMPROF_BUS_OWNER		"Owner"			/* u */
#define MEMPROF_BUS_RATE		"Rate"			/* d */
#define MEMPROF_BUS_CALLSTACK_SIZE	"CallstackSize"		/* u */
#define MEMPROF_BUS_FOLLOW_FORKS	"FollowForks"		/* b */
#define MEMPROF_BUS_DURATION		"DurationUSec"		/* t */
#define MEMPROF_BUS_FORMAT_VERSION	"FormatVersion"		/* q */
#define MEMPROF_BUS_COMPRESSED		"Compressed"		/* b */
#define MEMPROF_BUS_DIRECTORY		"Directory"		/* s */
#define MEMPROF_BUS_START_TIMESTAMP	"StartTimestamp"	/* t, CLOCK_REALTIME µs */

/* The values of State. */
#define MEMPROF_BUS_STATE_SAMPLING	"sampling"
#define MEMPROF_BUS_STATE_STOPPED	"stopped"
#define MEMPROF_BUS_STATE_DISCARDED	"discarded"

/*
 * ProcessStatus: aa{sv}, one dictionary per process of the profile. A reader takes the keys
 * it knows and ignores the others; a key whose value the daemon does not have is absent.
 */
#define MEMPROF_BUS_PROCESS_STATUS	"ProcessStatus"
#define MEMPROF_BUS_SIG_PROCESS_STATUS	"aa{sv}"
#define MEMPROF_BUS_SIG_PROCESS		"a{sv}"
/* Its keys, each with the signature of its value. */
#define MEMPROF_PROC_PID		"pid"			/* u */
#define MEMPROF_PROC_COMM		"comm"			/* s */
#define MEMPROF_PROC_EXITED		"exited"		/* b */
#define MEMPROF_PROC_MODE		"mode"			/* s: "uprobe", "preload" */
#define MEMPROF_PROC_SAMPLED_BLOCKS	"sampled_blocks"	/* t */
#define MEMPROF_PROC_SAMPLES		"samples"		/* t: their multiplicities' sum */
#define MEMPROF_PROC_LIVE_SAMPLES	"live_samples"		/* t: the same, blocks not freed */
#define MEMPROF_PROC_FREED_BLOCKS	"freed_blocks"		/* t: sampled blocks freed */
#define MEMPROF_PROC_DROPS		"drops"			/* t: events lost */
#define MEMPROF_PROC_EST_ALLOC_BYTES	"est_alloc_bytes"	/* d */
#define MEMPROF_PROC_EST_LIVE_BYTES	"est_live_bytes"	/* d */
#define MEMPROF_PROC_TRACE		"trace"			/* s; absent: the client's file */
#define MEMPROF_PROC_DETACHED_REASON	"detached_reason"	/* s: over its overhead budget */
#define MEMPROF_PROC_WRITE_ERROR	"write_error"		/* s: errno name, or "stalled" */
#define MEMPROF_PROC_WRITE_ERROR_SINCE	"write_error_since_us"	/* t, CLOCK_REALTIME µs */
#define MEMPROF_PROC_LOST_WRITES	"lost_writes"		/* t: events not written */

/*
 * Processes: the same figures as a positional a(usbttttddts) (pid, comm, exited, sampled
 * blocks, samples, live samples, freed blocks, est. allocated bytes, est. live bytes, drops,
 * trace or ""), kept for compatibility: new clients read ProcessStatus.
 */
#define MEMPROF_BUS_PROCESSES		"Processes"
#define MEMPROF_BUS_SIG_PROCESS_TUPLE	"usbttttddts"
#define MEMPROF_BUS_SIG_PROCESSES	"a(" MEMPROF_BUS_SIG_PROCESS_TUPLE ")"

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
