// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A profile's figures (daemon/engine/summary.h, cli/summary.c): filled from the engine, driven by
 * synthetic records (tests/unit/test_engine.h), and from memprofd's answer, they give the same
 * JSON keys, the glossary's (sampled_blocks are blocks, samples their draws), with the values
 * the records imply; what the bus does not carry is null, not absent.
 */
#include <math.h>

#include <json-c/json.h>

#include "cli/summary.h"
#include "tests/unit/test_engine.h"

static int64_t get_i64(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	if (!json_object_object_get_ex(o, key, &v) || !v)
		return -1;
	return json_object_get_int64(v);
}

static bool is_null(struct json_object *o, const char *key)
{
	struct json_object *v = (struct json_object *)1;

	return json_object_object_get_ex(o, key, &v) && !v;
}

/* Every key of @a is in @b and the other way round. */
static bool same_keys(struct json_object *a, struct json_object *b, const char *what)
{
	bool ok = json_object_object_length(a) == json_object_object_length(b);

	json_object_object_foreach(a, key, val) {
		(void)val;
		if (!json_object_object_get_ex(b, key, NULL)) {
			fprintf(stderr, "%s: '%s' is in one and not the other\n", what, key);
			ok = false;
		}
	}
	return ASSERT_TRUE(ok, what);
}

static struct json_object *first_proc(struct json_object *summary)
{
	struct json_object *a = NULL;

	if (!json_object_object_get_ex(summary, "processes", &a) || !a ||
	    json_object_array_length(a) < 1)
		return NULL;
	return json_object_array_get_idx(a, 0);
}

/* Three blocks of 2, 3 and 4 samples, the second freed; then the exit. */
static struct json_object *engine_summary(struct fixture *fx, uint64_t *base)
{
	struct json_object *j = NULL;
	struct mp_summary s;

	for (unsigned int i = 0; i < 3; i++)
		queue_block(fx, &fx->a, i, i + 1);
	queue_free(fx->id, fx->a.pid, fx->a.pid, fx->a.addr[1]);
	queue_proc(MP_EV_EXIT, fx->id, fx->a.pid, fx->a.pid, 0, 0);
	fake.stats[MP_STAT_CALLS] = base[MP_STAT_CALLS] + 40;
	fake.stats[MP_STAT_SAMPLED] = base[MP_STAT_SAMPLED] + 3;
	fake.stats[MP_STAT_RINGBUF_DROPS] = base[MP_STAT_RINGBUF_DROPS] + 2;
	ASSERT_EQ(mp_engine__process(fx->e), 5, "records consumed");
	if (!ASSERT_OK(mp_summary__from_profile(&s, fx->e, fx->p, base), "from the engine"))
		return NULL;
	ASSERT_EQ(s.nprocs, 1, "one process");
	ASSERT_EQ(s.total.sampled_blocks, 3, "sampled blocks");
	ASSERT_EQ(s.total.samples, 2 + 3 + 4, "samples: their draws");
	ASSERT_EQ(s.total.freed_blocks, 1, "freed");
	ASSERT_EQ(s.probed_calls, 40, "calls since the start");
	j = mp_summary__json(&s, 0);
	mp_summary__free(&s);
	return j;
}

static struct json_object *client_summary(pid_t pid)
{
	struct memprof_client_process c = {
		.pid = pid, .comm = "child", .mode = "uprobe", .exited = true, .samples = 3,
		.nsamples = 9, .live_nsamples = 6, .frees = 1, .est_alloc_bytes = 1000,
		.est_live_bytes = 600, .trace = "",
	};
	struct memprof_client_profile p = { .id = 7, .rate = 1.0, .nprocs = 1, .procs = &c };
	struct json_object *j = NULL;
	struct mp_summary s;

	if (!ASSERT_OK(ctl_summary__from_client(&s, &p), "from the client"))
		return NULL;
	ASSERT_EQ(s.procs[0].sampled_blocks, 3, "the bus' samples are blocks");
	ASSERT_EQ(s.procs[0].samples, 9, "the bus' nsamples are samples");
	ASSERT_TRUE(s.procs[0].trace == NULL, "a client's file: no path");
	s.losses_daemon_wide = true;
	j = mp_summary__json(&s, 0);
	mp_summary__free(&s);
	return j;
}

static void test_one_scheme(void)
{
	uint64_t base[MP_STAT__MAX] = { 0 };
	struct json_object *e = NULL, *c = NULL, *ep, *cp;
	struct mp_proc_stats ps;
	struct trace_read t;
	struct fixture fx;

	if (!fixture_start(&fx, "summary.ctf", false, 0))
		goto out;
	base[MP_STAT_CALLS] = 100;	/* counters before the profile: not its own */
	base[MP_STAT_RINGBUF_DROPS] = 5;
	e = engine_summary(&fx, base);
	c = client_summary(fx.a.pid);
	if (!ASSERT_TRUE(e && c, "both summaries"))
		goto out;
	same_keys(e, c, "record's summary, either way");
	ep = first_proc(e);
	cp = first_proc(c);
	if (!ASSERT_TRUE(ep && cp, "their processes"))
		goto out;
	same_keys(ep, cp, "a process, either way");
	ASSERT_EQ(get_i64(ep, "sampled_blocks"), 3, "engine: sampled_blocks");
	ASSERT_EQ(get_i64(ep, "samples"), 9, "engine: samples");
	ASSERT_EQ(get_i64(ep, "live_samples"), 2 + 4, "engine: live_samples");
	ASSERT_EQ(get_i64(ep, "freed_blocks"), 1, "engine: freed_blocks");
	ASSERT_EQ(get_i64(ep, "allocated_words"), 9, "engine: Σ n / rate");
	ASSERT_EQ(get_i64(e, "sampled_blocks"), 3, "engine: the sum");
	ASSERT_EQ(get_i64(e, "sampled_calls"), 3, "engine: sampled calls since the start");
	ASSERT_EQ(get_i64(ep, "truncated_stacks"), 0, "engine: its own counts are known");
	ASSERT_TRUE(is_null(ep, "preload_samples"), "engine: no preload counts for uprobes");
	ASSERT_EQ(get_i64(cp, "sampled_blocks"), 3, "client: sampled_blocks");
	ASSERT_EQ(get_i64(cp, "samples"), 9, "client: samples");
	ASSERT_EQ(get_i64(c, "daemon_profile"), 7, "client: the daemon's profile");
	ASSERT_TRUE(is_null(e, "daemon_profile"), "engine: no daemon profile");
	ASSERT_TRUE(is_null(cp, "truncated_stacks") && is_null(cp, "probe_hits") &&
		    is_null(c, "probed_calls") && is_null(c, "stacks"),
		    "client: what the bus does not carry is null");
	ASSERT_TRUE(is_null(cp, "trace"), "client: a client's file is null");
	{
		struct json_object *d = NULL, *scope = NULL;

		ASSERT_TRUE(json_object_object_get_ex(e, "drops", &d) && d &&
			    get_i64(d, "ringbuf_drops") == 2, "engine: drops since the start");
		ASSERT_TRUE(json_object_object_get_ex(c, "drops_scope", &scope) && scope &&
			    !strcmp(json_object_get_string(scope), "memprofd"), "client: scope");
	}
	if (ASSERT_TRUE(proc_stats(fx.p, fx.a.pid, &ps), "the engine's figures")) {
		ASSERT_EQ(get_i64(ep, "sampled_blocks"), ps.samples, "the engine's blocks");
		ASSERT_EQ(get_i64(ep, "samples"), ps.nsamples, "the engine's multiplicities");
	}
	ASSERT_OK(mp_profile__discard(fx.p), "discard");
	if (trace_read(fx.path, &t)) {
		ASSERT_EQ(get_i64(ep, "sampled_blocks"), t.allocs, "the trace's allocs");
		ASSERT_EQ(get_i64(ep, "samples"), t.nsamples, "the trace's nsamples");
		ASSERT_EQ(get_i64(ep, "freed_blocks"), t.collects, "the trace's collects");
	}
out:
	json_object_put(e);
	json_object_put(c);
	fixture_end(&fx);
}

int main(void)
{
	RUN(test_one_scheme);
	return test_exit();
}
