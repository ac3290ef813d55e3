// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Processes of the symbolizer (see symbolize.c): the snapshot of a process' executable
 * mappings (/proc/PID/maps), re-read on a miss while it lives, and its JIT perf map.
 */
#include "daemon/stacks/symbolize_int.h"

static void maps_release(struct mp_symbolizer *s, struct proc_map *maps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sym_module_unref(s, maps[i].mod);
	free(maps);
}

static void perfmap_close(struct perfmap *pm)
{
	if (pm->fd >= 0)
		close(pm->fd);
	free(pm->syms);
	*pm = (struct perfmap){ .fd = -1 };
}

/* The pid of @pid in its own pid namespace (the number in its perf map's name) and its
 * effective uid. -errno if its status cannot be read. */
static int proc_ids(pid_t pid, pid_t *nspid, uid_t *euid)
{
	char path[64], line[256];
	bool have_uid = false;
	FILE *f;

	*nspid = pid;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long ruid, uid;
		char *last;

		if (!strncmp(line, "Uid:", 4) && sscanf(line + 4, "%lu %lu", &ruid, &uid) == 2) {
			*euid = (uid_t)uid;
			have_uid = true;
		}
		if (strncmp(line, "NSpid:", 6))
			continue;
		last = strrchr(line, '\t');
		if (last && strtol(last + 1, NULL, 10) > 0)
			*nspid = (pid_t)strtol(last + 1, NULL, 10);
		break;	/* after Uid: */
	}
	fclose(f);
	return have_uid ? 0 : -EIO;
}

/* A perf map the process may read itself: its effective uid's file, readable by its owner.
 * A file of anyone else (a hard link, a bind mount of a root-only file) is not read. */
static bool owned_by(const struct stat *st, const void *arg)
{
	return st->st_uid == *(const uid_t *)arg && (st->st_mode & S_IRUSR);
}

void sym_perfmap_open(struct proc *p)
{
	char path[64];
	pid_t nspid;
	uid_t euid;
	int fd;

	if (p->perfmap.fd >= 0 || p->gone || proc_ids(p->pid, &nspid, &euid))
		return;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)nspid);
	fd = mp_target_open(p->pid, path, owned_by, &euid);
	p->perfmap.fd = fd >= 0 ? fd : -1;
}

static int perfsym_cmp(const void *a, const void *b)
{
	const struct perfmap_sym *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int perfmap_add(struct mp_symbolizer *s, struct perfmap *pm, uint64_t start, uint64_t size,
		       const char *name, uint64_t seq)
{
	struct perfmap_sym *sym;

	if (pm->n == MP_PERFMAP_MAX) {
		s->st.perfmap_dropped++;
		return 0;
	}
	if (MP_ARRAY_RESERVE(pm->syms, pm->cap, pm->n + 1, 256))
		return -ENOMEM;
	sym = &pm->syms[pm->n];
	sym->name = sym_intern(s, name);
	if (!sym->name)
		return -ENOMEM;
	sym->start = start;
	sym->end = start + size;
	sym->seq = seq;
	pm->n++;
	pm->sorted = false;
	s->st.perfmap_syms++;
	return 0;
}

/* Parse what was appended to the perf map since the last call. */
void sym_perfmap_update(struct mp_symbolizer *s, struct perfmap *pm)
{
	char buf[16384];
	struct stat st;

	if (pm->fd < 0 || fstat(pm->fd, &st) || !S_ISREG(st.st_mode))
		return;
	while ((uint64_t)st.st_size > pm->parsed) {
		ssize_t n = pread(pm->fd, buf, sizeof(buf) - 1, (off_t)pm->parsed);
		char *line = buf, *nl;

		if (n <= 0)
			return;
		buf[n] = 0;
		if (pm->skipping) {
			nl = memchr(buf, '\n', (size_t)n);
			if (!nl) {
				pm->parsed += (uint64_t)n;
				continue;
			}
			pm->skipping = false;
			line = nl + 1;
		}
		while ((nl = memchr(line, '\n', (size_t)(buf + n - line)))) {
			unsigned long long start, size;
			char *end, *name;
			uint64_t seq;

			*nl = 0;
			start = strtoull(line, &end, 16);
			size = strtoull(end, &name, 16);
			while (*name == ' ' || *name == '\t')
				name++;
			seq = pm->parsed + (uint64_t)(line - buf);
			if (end != line && name != end && *name && size &&
			    perfmap_add(s, pm, start, size, name, seq))
				return;
			line = nl + 1;
		}
		if (line == buf) {
			/* no newline in a full buffer: skip that line */
			pm->skipping = true;
			pm->parsed += (uint64_t)n;
			continue;
		}
		pm->parsed += (uint64_t)(line - buf);
		if ((size_t)n < sizeof(buf) - 1 && line != buf + n)
			break;	/* a partial last line: the writer is not done with it */
	}
}

const struct perfmap_sym *sym_perfmap_find(struct perfmap *pm, uint64_t pc)
{
	size_t lo;

	if (!pm->n)
		return NULL;
	if (!pm->sorted) {
		qsort(pm->syms, pm->n, sizeof(pm->syms[0]), perfsym_cmp);
		pm->sorted = true;
	}
	lo = SYM_UPPER_BOUND(pm->syms, pm->n, start, pc);	/* first entry starting after pc */
	/* the latest of the entries starting at or before pc that contain it (code reused) */
	for (size_t i = lo, k = 0; i > 0 && k < 64; i--, k++) {
		const struct perfmap_sym *sym = &pm->syms[i - 1];

		if (pc < sym->end)
			return sym;
	}
	return NULL;
}

void sym_proc_free(struct mp_symbolizer *s, struct proc *p)
{
	mp_hashmap__remove(&s->procs, (uint64_t)p->pid + 1, 0);
	lru_unlink(&s->proc_lru, &p->lru);
	maps_release(s, p->maps, p->nmaps);
	mp_hashmap__clear(&p->addrs);
	mp_hashmap__clear(&p->misses);
	perfmap_close(&p->perfmap);
	free(p);
	s->nprocs--;
}

static int map_cmp(const void *a, const void *b)
{
	const struct proc_map *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Field 28 of /proc/@pid/stat, startstack: 0 if it cannot be read or is hidden. */
static uint64_t proc_start_stack(pid_t pid)
{
	unsigned long long v = 0;
	char path[64], buf[1024], *q;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	q = strrchr(buf, ')');	/* comm may hold anything but this is its end */
	if (!q)
		return 0;
	/* after ") ": state is field 3, startstack field 28 */
	for (int field = 3; field <= 28 && q; field++)
		q = strchr(q + 1, ' ');
	if (!q || sscanf(q + 1, "%llu", &v) != 1)
		return 0;
	return v;
}

/* Snapshot @p's executable mappings (and the image they are of). -ESRCH if the process is gone. */
int sym_proc_read_maps(struct mp_symbolizer *s, struct proc *p)
{
	uint64_t image = proc_start_stack(p->pid);
	struct proc_map *maps = NULL;
	size_t n = 0, cap = 0, len = 0;
	char path[64], *line = NULL;
	FILE *f;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)p->pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT || errno == ESRCH ? -ESRCH : -errno;
	s->st.maps_reads++;
	while (getline(&line, &len, f) > 0) {
		unsigned long long start, end, pgoff, ino;
		unsigned int maj, min;
		char perms[8];
		int name_at = 0;
		char *name, *nl;
		struct proc_map *pm;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &pgoff,
			   &maj, &min, &ino, &name_at) < 7 || !strchr(perms, 'x'))
			continue;
		name = line + name_at;
		nl = strchr(name, '\n');
		if (nl)
			*nl = 0;
		if (MP_ARRAY_RESERVE(maps, cap, n + 1, 64)) {
			r = -ENOMEM;
			break;
		}
		pm = &maps[n];
		*pm = (struct proc_map){ .start = start, .end = end, .pgoff = pgoff };
		if (name[0] == '/') {
			size_t l = strlen(name);

			if (l > 10 && !strcmp(name + l - 10, " (deleted)"))
				name[l - 10] = 0;
			pm->mod = sym_module_get(s, p->pid, name, makedev(maj, min), (ino_t)ino,
						 start, end);
			if (pm->mod) {
				pm->mod->refs++;
				lru_touch(&s->mod_lru, &pm->mod->lru);
			}
			pm->name = sym_intern(s, name);
		} else {
			pm->name = sym_intern(s, name[0] ? name : "[anon]");
		}
		n++;
		if (!pm->name) {
			r = -ENOMEM;
			break;
		}
	}
	if (!r && ferror(f))
		r = errno == ESRCH ? -ESRCH : -EIO;
	free(line);
	fclose(f);
	if (!r && !n)
		r = -ESRCH;	/* a zombie or kernel thread: nothing mapped */
	if (r) {
		maps_release(s, maps, n);
		return r;
	}
	qsort(maps, n, sizeof(*maps), map_cmp);
	maps_release(s, p->maps, p->nmaps);
	p->maps = maps;
	p->nmaps = n;
	p->generation = ++s->generation;
	p->image = image && proc_start_stack(p->pid) == image ? image : 0;
	p->read_ns = now_ns();
	/* A library unloaded and another loaded in its place would make cached pcs wrong. */
	mp_hashmap__clear(&p->addrs);
	return 0;
}

/* @pid's snapshot, taken now if there is none (*@created set then). */
struct proc *sym_proc_get(struct mp_symbolizer *s, pid_t pid, int *err, bool *created)
{
	struct proc *p = hmap_get(&s->procs, (uint64_t)pid + 1, 0);
	int r;

	if (p) {
		lru_touch(&s->proc_lru, &p->lru);
		return p;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	p->pid = pid;
	p->perfmap.fd = -1;
	r = sym_proc_read_maps(s, p);
	if (!r)
		sym_perfmap_open(p);
	if (r || hmap_put(&s->procs, (uint64_t)pid + 1, 0, p)) {
		maps_release(s, p->maps, p->nmaps);
		mp_hashmap__clear(&p->addrs);
		free(p);
		*err = r ? r : -ENOMEM;
		return NULL;
	}
	lru_push(&s->proc_lru, &p->lru);
	s->nprocs++;
	*created = true;
	while (s->nprocs > s->opts.max_procs && s->proc_lru.tail != &p->lru) {
		sym_proc_free(s, lru_entry(s->proc_lru.tail, struct proc));
		s->st.procs_evicted++;
	}
	return p;
}

static struct proc_map *proc_find(struct proc *p, uint64_t pc)
{
	size_t lo = 0, hi = p->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pc < p->maps[mid].start)
			hi = mid;
		else if (pc >= p->maps[mid].end)
			lo = mid + 1;
		else
			return &p->maps[mid];
	}
	return NULL;
}

/*
 * The mapping of @pc, re-reading the maps on a miss while the process lives (dlopen, JIT code).
 * A pc still unmapped after a re-read is remembered, so it costs one re-read only; re-reads
 * are at most every opts.reread_ms, since garbage return addresses (frame-pointer walks through
 * code without frame pointers) would otherwise each cost one. *@final is false when a re-read
 * was skipped for that reason: the answer may change later, do not cache it.
 */
struct proc_map *sym_proc_lookup(struct mp_symbolizer *s, struct proc *p, uint64_t pc,
				 bool fresh, bool *final)
{
	struct proc_map *pm = proc_find(p, pc);

	*final = true;
	if (pm || p->gone || hmap_get(&p->misses, pc | 1ULL << 63, 0))
		return pm;
	if (!fresh) {
		if (now_ns() - p->read_ns < (uint64_t)s->opts.reread_ms * 1000000) {
			s->st.rereads_skipped++;
			*final = false;
			return NULL;
		}
		if (sym_proc_read_maps(s, p) == -ESRCH)
			p->gone = true;
		pm = proc_find(p, pc);
	}
	if (!pm) {
		if (p->misses.len >= s->opts.max_addrs)
			mp_hashmap__clear(&p->misses);
		hmap_put(&p->misses, pc | 1ULL << 63, 0, p);	/* best effort: ENOMEM = re-read */
	}
	return pm;
}

/* Code in anonymous memory named by the process' perf map, or NULL. */
