// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Objects of the symbolizer (see symbolize.c): executables and libraries opened by fd from a
 * process' mappings, identified by build-id, cached and unloaded least recently used first,
 * loaded into a libdwfl session of their own; and the search for their separate debuginfo.
 */
#include "daemon/stacks/symbolize_int.h"

static void module_unload(struct mp_symbolizer *s, struct module *m)
{
	sym_cu_indexes_free(m);
	free(m->syms);
	m->syms = NULL;
	m->nsyms = 0;
	m->syms_built = false;
	if (m->dwfl) {
		dwfl_end(m->dwfl);
		m->dwfl = NULL;
		m->dmod = NULL;
		s->nloaded--;
	}
	m->dwfl_failed = false;
}

void sym_module_free(struct mp_symbolizer *s, struct module *m)
{
	uint64_t dev = (uint64_t)m->maps_dev | 1ULL << 63;

	module_unload(s, m);
	lru_unlink(&s->mod_lru, &m->lru);
	mp_hashmap__remove(&s->mods_by_key, (uintptr_t)m->key, 0);
	if (hmap_get(&s->mods_by_ino, dev, m->maps_ino) == m)
		mp_hashmap__remove(&s->mods_by_ino, dev, m->maps_ino);
	if (m->elf)
		elf_end(m->elf);
	if (m->fd >= 0)
		close(m->fd);
	free(m->segs);
	free(m);
	s->nmodules--;
}

/* Enforce the limits, least recently used first: unload libdwfl sessions beyond max_modules,
 * free objects no process refers to beyond max_modules. */
static void modules_trim(struct mp_symbolizer *s, struct module *keep)
{
	struct module *m, *prev;

	for (m = lru_entry(s->mod_lru.tail, struct module); m && s->nloaded > s->opts.max_modules;
	     m = lru_entry(m->lru.prev, struct module)) {
		if (m != keep && m->dwfl) {
			module_unload(s, m);
			s->st.modules_unloaded++;
		}
	}
	for (m = lru_entry(s->mod_lru.tail, struct module); m && s->nmodules > s->opts.max_modules;
	     m = prev) {
		prev = lru_entry(m->lru.prev, struct module);
		if (m != keep && !m->refs)
			sym_module_free(s, m);
	}
}

void sym_module_unref(struct mp_symbolizer *s, struct module *m)
{
	if (m && !--m->refs)
		modules_trim(s, NULL);
}

/* Hex of the object's NT_GNU_BUILD_ID note, interned, or NULL. */
static const char *read_build_id(struct mp_symbolizer *s, Elf *elf)
{
	const void *id;
	ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
	char hex[2 * 64 + 1];

	if (n <= 0)
		return NULL;
	if (n > 64)
		n = 64;
	for (ssize_t i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
	return sym_intern(s, hex);
}

static int read_segments(Elf *elf, struct load_seg **out, size_t *nout)
{
	size_t phnum, n = 0;
	struct load_seg *segs;

	if (elf_getphdrnum(elf, &phnum))
		return -EINVAL;
	segs = calloc(phnum ? phnum : 1, sizeof(*segs));
	if (!segs)
		return -ENOMEM;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		segs[n++] = (struct load_seg){ ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_flags };
	}
	*out = segs;
	*nout = n;
	return 0;
}

/* Open a mapped file the way the process sees it (its mount namespace, deleted files):
 * map_files gives the mapped file itself (it needs CAP_SYS_ADMIN, which the unit does not
 * grant); else its name in the process' root, then in ours, if it is still that file. */
static int open_mapped(pid_t pid, const char *path, ino_t ino, uint64_t start, uint64_t end)
{
	char buf[PATH_MAX + 64];
	int fd;

	snprintf(buf, sizeof(buf), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, start, end);
	fd = open(buf, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	fd = mp_target_open(pid, path, mp_same_inode, &ino);
	if (fd >= 0)
		return fd;
	fd = mp_target_open(0, path, mp_same_inode, &ino);
	return fd < 0 ? -1 : fd;
}

/* The object behind a file mapping: found by maps identity, else opened and found by build-id,
 * else created. NULL if the file cannot be opened or is not ELF (counted). */
struct module *sym_module_get(struct mp_symbolizer *s, pid_t pid, const char *path,
			      dev_t dev, ino_t ino, uint64_t start, uint64_t end)
{
	struct module *m = hmap_get(&s->mods_by_ino, (uint64_t)dev | 1ULL << 63, ino);
	const char *build_id, *key;
	struct stat stb;
	Elf *elf;
	int fd;

	if (m)
		return m;
	fd = open_mapped(pid, path, ino, start, end);
	if (fd < 0)
		goto fail;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || fstat(fd, &stb)) {
		if (elf)
			elf_end(elf);
		close(fd);
		goto fail;
	}
	build_id = read_build_id(s, elf);
	if (build_id)
		key = build_id;
	else
		key = sym_internf(s, "file:%ju:%ju:%jd:%jd.%09ld", (uintmax_t)stb.st_dev,
				  (uintmax_t)stb.st_ino, (intmax_t)stb.st_size,
				  (intmax_t)stb.st_mtim.tv_sec, stb.st_mtim.tv_nsec);
	m = key ? hmap_get(&s->mods_by_key, (uintptr_t)key, 0) : NULL;
	if (m || !key) {
		/* Same object under another identity (hard link, bind mount, container). */
		elf_end(elf);
		close(fd);
		if (!m)
			goto fail;
		return m;
	}
	m = calloc(1, sizeof(*m));
	if (!m || read_segments(elf, &m->segs, &m->nsegs)) {
		free(m);
		elf_end(elf);
		close(fd);
		goto fail;
	}
	m->key = key;
	m->build_id = build_id;
	m->path = sym_intern(s, path);
	m->base = sym_intern(s, basename_of(path));
	m->maps_dev = dev;
	m->maps_ino = ino;
	m->fd = fd;
	m->elf = elf;
	if (!m->path || !m->base || hmap_put(&s->mods_by_key, (uintptr_t)key, 0, m) ||
	    hmap_put(&s->mods_by_ino, (uint64_t)dev | 1ULL << 63, ino, m)) {
		mp_hashmap__remove(&s->mods_by_key, (uintptr_t)key, 0);
		free(m->segs);
		free(m);
		elf_end(elf);
		close(fd);
		goto fail;
	}
	lru_push(&s->mod_lru, &m->lru);
	s->nmodules++;
	s->st.objects_opened++;
	return m;
fail:
	s->st.objects_failed++;
	return NULL;
}

int sym_module_load(struct mp_symbolizer *s, struct module *m)
{
	Dwfl_Module *dm;
	int fd;

	if (m->dwfl)
		return 0;
	if (m->dwfl_failed)
		return -ENOENT;
	m->dwfl = dwfl_begin(&s->cbs);
	if (!m->dwfl)
		goto fail;
	fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);	/* libdwfl consumes it */
	if (fd < 0)
		goto fail;
	dwfl_report_begin(m->dwfl);
	dm = dwfl_report_elf(m->dwfl, m->base, m->path, fd, 0, false);
	if (!dm) {
		close(fd);
		goto fail;
	}
	if (s->debuginfo_path) {	/* for mp_find_debuginfo() */
		void **ud;

		if (dwfl_module_info(dm, &ud, NULL, NULL, NULL, NULL, NULL, NULL))
			*ud = s->debuginfo_path;
	}
	if (dwfl_report_end(m->dwfl, NULL, NULL) || !dwfl_module_getelf(dm, &m->bias))
		goto fail;
	m->dmod = dm;
	s->nloaded++;
	s->st.modules_loaded++;
	modules_trim(s, m);
	return 0;
fail:
	if (m->dwfl)
		dwfl_end(m->dwfl);
	m->dwfl = NULL;
	m->dwfl_failed = true;
	return -ENOENT;
}

/* The PT_LOAD overlapping file offsets [@lo, @hi), executable segments first (a page may hold
 * the end of one segment and the start of the next). */
const struct load_seg *sym_module_seg(const struct module *m, uint64_t lo, uint64_t hi)
{
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < m->nsegs; i++) {
			const struct load_seg *sg = &m->segs[i];

			if (!pass != !!(sg->flags & PF_X))
				continue;
			if (lo < sg->offset + sg->filesz && hi > sg->offset)
				return sg;
		}
	}
	return NULL;
}

/* ELF virtual address of file offset @off. */
bool sym_module_vaddr(const struct module *m, uint64_t off, uint64_t *vaddr)
{
	const struct load_seg *sg = sym_module_seg(m, off, off + 1);

	if (!sg)
		return false;
	*vaddr = off - sg->offset + sg->vaddr;
	return true;
}


/* A separate debug file named by an object: readable by everyone (the object may belong to a
 * user who could not read a file of root's or of another user's that it names). */
static bool world_readable(const struct stat *st, const void *arg)
{
	(void)arg;
	return st->st_mode & S_IROTH;
}

/* Is @fd the debug file of @mod: the same build-id, else the CRC its .gnu_debuglink gives? */
static bool debuginfo_matches(Dwfl_Module *mod, int fd, GElf_Word crc)
{
	const unsigned char *want;
	const void *have;
	GElf_Addr vaddr;
	int nwant = dwfl_module_build_id(mod, &want, &vaddr);
	bool ok = false;

	if (nwant > 0) {
		Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
		ssize_t nhave = elf ? dwelf_elf_gnu_build_id(elf, &have) : -1;

		ok = nhave == nwant && !memcmp(have, want, (size_t)nwant);
		if (elf)
			elf_end(elf);
	} else {
		unsigned char buf[65536];
		uLong c = crc32(0, NULL, 0);
		off_t off = 0;
		ssize_t n;

		while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
			c = crc32(c, buf, (uInt)n);
			off += n;
		}
		ok = n == 0 && (GElf_Word)c == crc;
	}
	return ok;
}

/*
 * libdwfl's own search, by build-id (the debug directories' .build-id trees, debuginfod), then
 * the name in the object's .gnu_debuglink (or BASENAME.debug), which the object chooses: a
 * plain name (no '/'), looked for where libdwfl would (beside the object, in .debug/ there, and
 * under each absolute debug directory plus the object's directory), and opened by
 * mp_target_open()'s rules: no symlinks, a regular file, readable by everyone, never a FIFO or a
 * device. libdwfl's own search of those names would follow symlinks and block on a FIFO.
 */
int mp_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
		      const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
		      char **debuginfo_file_name)
{
	/* sym_module_load() puts our search path there; NULL: libdwfl's default */
	const char *p = *userdata ? *userdata : ":.debug:/usr/lib/debug";
	char name[NAME_MAX + 1], dir[PATH_MAX], cand[PATH_MAX];
	const char *slash;
	int fd;

	/* no file name: the build-id search and debuginfod only */
	fd = dwfl_standard_find_debuginfo(mod, userdata, modname, base, NULL, NULL, 0,
					  debuginfo_file_name);
	if (fd >= 0) {
		/* libdwfl opens without O_CLOEXEC: our fds must not leak into programs we start */
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		return fd;
	}
	slash = file_name ? strrchr(file_name, '/') : NULL;
	if (!slash || slash == file_name)
		return -1;
	if (debuglink_file)
		snprintf(name, sizeof(name), "%s", debuglink_file);
	else
		snprintf(name, sizeof(name), "%s.debug", slash + 1);
	if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -1;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - file_name), file_name);
	for (;;) {
		size_t len = strcspn(p, ":");
		const char *e = p;
		int n;

		if (*e == '+' || *e == '-') {	/* libdwfl's CRC-check flags */
			e++;
			len--;
		}
		if (!len)
			n = snprintf(cand, sizeof(cand), "%s/%s", dir, name);
		else if (*e == '/')
			n = snprintf(cand, sizeof(cand), "%.*s%s/%s", (int)len, e, dir, name);
		else
			n = snprintf(cand, sizeof(cand), "%s/%.*s/%s", dir, (int)len, e, name);
		if (n > 0 && (size_t)n < sizeof(cand)) {
			fd = mp_target_open(0, cand, world_readable, NULL);
			if (fd >= 0 && debuginfo_matches(mod, fd, debuglink_crc)) {
				*debuginfo_file_name = strdup(cand);
				return fd;
			}
			if (fd >= 0)
				close(fd);
		}
		p += strcspn(p, ":");
		if (!*p++)
			break;
	}
	return -1;
}
