// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Probes on the loader's own process, at open: the uprobe session self-test and the probe
 * cost calibration, on functions of our own that start like glibc's malloc.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "daemon/probe/loader_internal.h"

/*
 * Functions whose first instruction (push %rbp) the kernel emulates, like glibc's malloc: one
 * for calibrate(), one for the session self-test (its link stays, see mp_bpf.self, and must
 * not add its hits to the calibration's).
 */
#define MP_SELF_FN(name)							\
	__asm__(".pushsection .text\n"						\
		".globl " #name "\n"						\
		".hidden " #name "\n"						\
		".type " #name ", @function\n"					\
		#name ":\n"							\
		"\tpush %rbp\n"							\
		"\tmov %rsp, %rbp\n"						\
		"\tpop %rbp\n"							\
		"\tret\n"							\
		".size " #name ", .-" #name "\n"					\
		".popsection\n")
MP_SELF_FN(mp_bpf_self_target);
MP_SELF_FN(mp_bpf_selftest_target);

static void (*volatile self_target_fn)(void) = mp_bpf_self_target;
static void (*volatile selftest_target_fn)(void) = mp_bpf_selftest_target;

/* The file that maps our function at @a, and its offset there. */
int self_target(uintptr_t a, char *path, size_t len, uint64_t *off)
{
	char line[PATH_MAX + 256];
	FILE *f = fopen("/proc/self/maps", "re");
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, foff;
		int n = 0;

		if (sscanf(line, "%llx-%llx %*s %llx %*x:%*x %*u %n", &lo, &hi, &foff, &n) < 3 ||
		    !n || a < lo || a >= hi || line[n] != '/')
			continue;
		line[n + strcspn(line + n, "\n")] = 0;
		snprintf(path, len, "%s", line + n);
		*off = a - lo + foff;
		err = 0;
		break;
	}
	fclose(f);
	return err;
}

static int self_attach(struct mp_bpf *b, const char *path, uint64_t off,
		       struct bpf_program *prog, bool retprobe, uint64_t cookie, struct plink *out)
{
	if (b->multi)
		return attach_multi(getpid(), path, prog, retprobe, &off, &cookie, NULL, 1, out);
	return attach_perf(b, getpid(), path, off, prog, retprobe, cookie, 0, out);
}

/* Keep links on ourselves until mp_bpf__free() (mp_bpf.self); destroyed at once if they
 * cannot be kept. */
void self_keep(struct mp_bpf *b, const struct plink *links, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct plink l = links[i];

		if (!l.l && l.fd < 0)
			continue;
		if (!b->self && (b->self = calloc(1, sizeof(*b->self))))
			b->self->pid = getpid();
		if (!b->self || target_add_link(b->self, &l))
			plink_destroy(&l);
	}
}

/* Hand links on ourselves to the reaper (closing them waits for grace periods). */
static void self_bury(struct mp_bpf *b, const struct plink *links, size_t n)
{
	struct target *t = calloc(1, sizeof(*t));

	if (t)
		t->links = calloc(n, sizeof(*links));
	if (!t || !t->links) {
		free(t);
		for (size_t i = 0; i < n; i++) {
			struct plink l = links[i];

			plink_destroy(&l);
		}
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (links[i].l || links[i].fd >= 0)
			t->links[t->nlinks++] = links[i];
	t->pid = getpid();
	target_bury(b, t);
}

static uint64_t selftest_get(struct mp_bpf *b, uint32_t idx)
{
	uint64_t v = 0;

	bpf_map_lookup_elem(bpf_map__fd(b->skel->maps.selftest), &idx, &v);
	return v;
}

/*
 * Do uprobe sessions behave as mp_session expects? Two calls of our own mp_bpf_selftest_target
 * under a session link: the first entry returns 0 and must get its return half, the second
 * returns 1 and must not, and bpf_session_is_return() must tell them apart.
 */
int session_selftest(struct mp_bpf *b, const char *path, uint64_t off)
{
	uint64_t cookie = MP_COOKIE(MP_SHAPE_SELFTEST, 0), e0, r0, e, r;
	struct plink l = { .fd = -1 };
	int err;

	e0 = selftest_get(b, MP_SELFTEST_ENTRIES);
	r0 = selftest_get(b, MP_SELFTEST_RETURNS);
	err = attach_multi(getpid(), path, b->skel->progs.mp_session, false, &off, &cookie, NULL, 1,
			   &l);
	if (err) {
		logf_(b, 6, "uprobe sessions unavailable (link on '%s'+%#" PRIx64 ": %s): using "
		      "entry and return probes", path, off, strerror(-err));
		return err;
	}
	if (e0 & 1) /* the next hit must be an odd one */
		selftest_target_fn();
	e0 = selftest_get(b, MP_SELFTEST_ENTRIES);
	r0 = selftest_get(b, MP_SELFTEST_RETURNS);
	selftest_target_fn();
	selftest_target_fn();
	e = selftest_get(b, MP_SELFTEST_ENTRIES) - e0;
	r = selftest_get(b, MP_SELFTEST_RETURNS) - r0;
	if (e != 2 || r != 1) {
		self_bury(b, &l, 1);	/* its programs go with the skeleton */
		logf_(b, 4, "uprobe sessions misbehave (2 calls: %" PRIu64 " entries, %" PRIu64
		      " returns, expected 2 and 1): using entry and return probes", e, r);
		return -EPROTO;
	}
	self_keep(b, &l, 1);
	return 0;
}

static uint64_t ns_between(const struct timespec *a, const struct timespec *z)
{
	return (uint64_t)((z->tv_sec - a->tv_sec) * 1000000000LL + (z->tv_nsec - a->tv_nsec));
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Median time of MP_CALIB_BATCHES batches of MP_CALIB_CALLS calls of the self target, ns. */
static uint64_t time_batches(void)
{
	uint64_t v[MP_CALIB_BATCHES];

	for (int i = 0; i < MP_CALIB_BATCHES; i++) {
		struct timespec a, z;

		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int k = 0; k < MP_CALIB_CALLS; k++)
			self_target_fn();
		clock_gettime(CLOCK_MONOTONIC, &z);
		v[i] = ns_between(&a, &z);
	}
	qsort(v, MP_CALIB_BATCHES, sizeof(v[0]), cmp_u64);
	return v[MP_CALIB_BATCHES / 2];
}

/*
 * The cost of a probe hit on this machine, for the overhead estimate: time our own
 * mp_bpf_self_target without probes, with the entry program (CALIBRATE: about the work of an
 * unsampled allocator call), then with a return probe too, in the mode the targets get.
 * MP_PROBE_COST_NS="<entry>,<return>" sets both instead. Keeps the defaults on failure.
 */
void calibrate(struct mp_bpf *b, const char *path, uint64_t off)
{
	struct plink l[2] = { { .fd = -1 }, { .fd = -1 } };
	const char *env = getenv("MP_PROBE_COST_NS");
	uint64_t t0, t1, t2, ce, cr;
	unsigned long long e, r;
	int err;

	if (env && sscanf(env, "%llu,%llu", &e, &r) == 2) {
		b->entry_cost_ns = e;
		b->return_cost_ns = r;
		return;
	}
	time_batches(); /* warm up: the first batches run cold */
	t0 = time_batches();
	err = self_attach(b, path, off, b->session ? b->skel->progs.mp_session :
			  b->skel->progs.mp_entry, false, MP_COOKIE(MP_SHAPE_CALIBRATE, 0), &l[0]);
	if (err)
		goto out;
	t1 = time_batches();
	/* Both halves on the same probe share its trap: the second link costs the return probe
	 * (sessions: a second session link whose entry keeps its return half). */
	err = self_attach(b, path, off, b->session ? b->skel->progs.mp_session :
			  b->skel->progs.mp_ret, !b->session, MP_COOKIE(MP_SHAPE_CALIBRATE, 1), &l[1]);
	if (err)
		goto out;
	t2 = time_batches();
	ce = t1 > t0 ? (t1 - t0) / MP_CALIB_CALLS : 0;
	cr = t2 > t1 ? (t2 - t1) / MP_CALIB_CALLS : 0;
	if (ce == 0 || cr == 0 || ce > 1000000 || cr > 1000000) {
		err = -ERANGE;
		goto out;
	}
	b->entry_cost_ns = ce;
	b->return_cost_ns = cr;
	b->calibrated = true;
out:
	if (err)
		logf_(b, 6, "Probe cost calibration failed (%s): assuming %" PRIu64 " ns per entry "
		      "and %" PRIu64 " ns per return probe hit", strerror(-err), b->entry_cost_ns,
		      b->return_cost_ns);
	if (err)
		self_bury(b, l, 2);
	else
		self_keep(b, l, 2);
}
