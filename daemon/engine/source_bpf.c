// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The BPF loader (daemon/probe/bpf_loader.h) as the engine's event source (struct
 * mp_engine_source in engine.h): its ring records reach on_event() from libbpf's callback, so
 * the record path has no call of its own here; each operation is the loader's, on the
 * struct mp_bpf that is the source's context.
 */
#include <limits.h>

#include "daemon/engine/engine_int.h"

static int bpf_consume(void *ctx, struct mp_engine *e, uint64_t max_ns)
{
	(void)e;	/* the loader's callback has it */
	return max_ns ? mp_bpf__consume_max(ctx, UINT_MAX, max_ns) : mp_bpf__consume(ctx);
}

static int bpf_fd(void *ctx)
{
	return mp_bpf__fd(ctx);
}

static int bpf_proc_set(void *ctx, pid_t pid, const struct mp_proc_cfg *cfg)
{
	return mp_bpf__proc_set(ctx, pid, cfg);
}

static int bpf_proc_get(void *ctx, pid_t pid, struct mp_proc_cfg *cfg)
{
	return mp_bpf__proc_get(ctx, pid, cfg);
}

static int bpf_proc_del(void *ctx, pid_t pid)
{
	return mp_bpf__proc_del(ctx, pid);
}

static int bpf_attach(void *ctx, pid_t pid, char *why, size_t why_len)
{
	return mp_bpf__attach(ctx, pid, why, why_len);
}

static int bpf_attach_exec(void *ctx, pid_t pid, char *why, size_t why_len)
{
	return mp_bpf__attach_exec(ctx, pid, why, why_len);
}

static int bpf_detach(void *ctx, pid_t pid)
{
	return mp_bpf__detach(ctx, pid);
}

static int bpf_mode(void *ctx, pid_t pid)
{
	int mode = mp_bpf__mode(ctx, pid);

	if (mode < 0)
		return mode;
	return mode == MP_BPF_MODE_PRELOAD ? MP_PROC_MODE_PRELOAD : MP_PROC_MODE_UPROBE;
}

static int bpf_preload_stats(void *ctx, pid_t pid, uint64_t *out, size_t n)
{
	return mp_bpf__preload_stats(ctx, pid, out, n);
}

static int bpf_preload_pull(void *ctx, pid_t pid, void *buf, size_t len, bool last)
{
	return mp_bpf__preload_pull(ctx, pid, buf, len, last);
}

static int bpf_proc_hits(void *ctx, pid_t pid, struct mp_proc_hits *out)
{
	return mp_bpf__proc_hits(ctx, pid, out);
}

static void bpf_hit_costs(void *ctx, uint64_t *entry_ns, uint64_t *return_ns)
{
	struct mp_bpf_counters c;

	mp_bpf__counters(ctx, &c);
	*entry_ns = c.entry_cost_ns;
	*return_ns = c.return_cost_ns;
}

static int bpf_stats(void *ctx, uint64_t out[MP_STAT__MAX])
{
	return mp_bpf__stats(ctx, out);
}

static const char *bpf_mechanisms(void *ctx)
{
	return mp_bpf__mechanisms(ctx);
}

static int bpf_watch(void *ctx, int kind, uint64_t a, uint64_t b, uint32_t profile)
{
	return mp_bpf__watch(ctx, kind == MP_TARGET_EXE ? MP_WATCH_EXE : MP_WATCH_CGROUP, a, b,
			     profile);
}

const struct mp_engine_source mp_engine_bpf_source = {
	.consume = bpf_consume,
	.fd = bpf_fd,
	.proc_set = bpf_proc_set,
	.proc_get = bpf_proc_get,
	.proc_del = bpf_proc_del,
	.attach = bpf_attach,
	.attach_exec = bpf_attach_exec,
	.detach = bpf_detach,
	.mode = bpf_mode,
	.preload_stats = bpf_preload_stats,
	.preload_pull = bpf_preload_pull,
	.proc_hits = bpf_proc_hits,
	.hit_costs = bpf_hit_costs,
	.stats = bpf_stats,
	.mechanisms = bpf_mechanisms,
	.watch = bpf_watch,
};
