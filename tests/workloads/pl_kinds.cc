// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Every interposed entry point under libmemprof-preload at rate 1 (every word sampled, so
 * every block is reported with nsamples = w exactly): after each call, the records the hook
 * appended to MEMPROF_TEST_LOG must be exactly the expected ones (kind, size, address,
 * nsamples), once: no double counting between operator new and malloc, or memalign and
 * malloc, and glibc's own internal calls (strdup) reach the interposer.
 *
 *	MEMPROF_RATE=1 MEMPROF_TEST_LOG=3 LD_PRELOAD=... pl_kinds LOG 3>LOG
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <new>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memprof/preload.h>

static int rfd = -1, failures;
static off_t seen;

struct expect {
	uint32_t type, kind;
	const void *addr;
	uint64_t size;
};

static uint64_t words(uint64_t size)
{
	return (size + 15) / 8;
}

/* Compare the records written since the last call with @ex[0..n). */
static void check(const char *what, const struct expect *ex, int n)
{
	struct memprof_preload_test_rec rec[8];
	ssize_t got = pread(rfd, rec, sizeof(rec), seen);
	int nrec = got > 0 ? (int)(got / (ssize_t)sizeof(rec[0])) : 0;
	bool ok = nrec == n;

	for (int i = 0; ok && i < n; i++) {
		ok = rec[i].type == ex[i].type && rec[i].kind == ex[i].kind &&
		     rec[i].addr == (uint64_t)(uintptr_t)ex[i].addr;
		if (ex[i].type == MEMPROF_PRELOAD_REC_ALLOC)
			ok = ok && rec[i].size == ex[i].size &&
			     rec[i].nsamples == words(ex[i].size);
	}
	if (nrec > 0)
		seen += nrec * (off_t)sizeof(rec[0]);
	printf("%s: kinds: %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok) {
		failures++;
		for (int i = 0; i < nrec; i++)
			fprintf(stderr, "  got type %u kind %u addr %#lx size %lu n %lu\n",
				rec[i].type, rec[i].kind, (unsigned long)rec[i].addr,
				(unsigned long)rec[i].size, (unsigned long)rec[i].nsamples);
		for (int i = 0; i < n; i++)
			fprintf(stderr, "  want type %u kind %u addr %p size %lu\n", ex[i].type,
				ex[i].kind, ex[i].addr, (unsigned long)ex[i].size);
	}
	fflush(stdout);
	/* stdio may have allocated: skip whatever it logged */
	seen = lseek(3, 0, SEEK_CUR);
}

#define A(k, p, s) { MEMPROF_PRELOAD_REC_ALLOC, MEMPROF_PRELOAD_##k, (p), (s) }
#define F(k, p) { MEMPROF_PRELOAD_REC_FREE, MEMPROF_PRELOAD_##k, (p), 0 }
#define CHECK(what, ...)                                                                       \
	do {                                                                                   \
		const struct expect ex_[] = { __VA_ARGS__ };                                   \
		check(what, ex_, sizeof(ex_) / sizeof(ex_[0]));                                \
	} while (0)
#define CHECK_NONE(what) check(what, NULL, 0)

/* @p, a block of @size bytes that was just made: its record (a @kind), then free(@p)'s. */
static __attribute__((noipa)) void then_free(const char *what, const char *freed, uint32_t kind,
					     void *p, uint64_t size)
{
	const struct expect a[] = { { MEMPROF_PRELOAD_REC_ALLOC, kind, p, size } };
	const struct expect f[] = { F(FREE, p) };

	check(what, a, 1);
	free(p);
	check(freed, f, 1);
}

struct alignas(256) Big {
	char c[1000];
};

int main(int argc, char **argv)
{
	void *volatile p, *volatile q;
	volatile size_t huge_n = SIZE_MAX / 2;	/* hidden from -Walloc-size-larger-than */

	if (argc != 2) {
		fprintf(stderr, "usage: pl_kinds LOG (with the log open on fd 3)\n");
		return 2;
	}
	rfd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (rfd < 0) {
		fprintf(stderr, "Failed to open '%s': %s\n", argv[1], strerror(errno));
		return 1;
	}
	printf("start\n");
	fflush(stdout);
	seen = lseek(3, 0, SEEK_CUR);

	then_free("malloc", "free", MEMPROF_PRELOAD_MALLOC, malloc(100), 100);
	then_free("malloc(0) is one header word", "free(malloc(0))", MEMPROF_PRELOAD_MALLOC,
		  malloc(0), 0);
	free(NULL);
	CHECK_NONE("free(NULL)");

	p = calloc(10, 30);
	CHECK("calloc", A(CALLOC, p, 300));
	q = realloc(p, 5000);
	CHECK("realloc grows", F(REALLOC, p), A(REALLOC, q, 5000));
	p = realloc(q, 0);
	CHECK("realloc(p, 0) frees", F(REALLOC, q));
	free(p);
	void *volatile null = NULL;	/* a literal NULL would become malloc() at compile time */
	p = realloc(null, 64);
	CHECK("realloc(NULL, n)", A(REALLOC, p, 64));
	q = reallocarray(p, 10, 100);
	CHECK("reallocarray", F(REALLOCARRAY, p), A(REALLOCARRAY, q, 1000));
	errno = 0;
	p = reallocarray(q, huge_n, 4);
	CHECK_NONE("reallocarray overflow: no record");
	if (p || errno != ENOMEM) {
		printf("FAIL: kinds: reallocarray overflow returns NULL/ENOMEM\n");
		failures++;
	}
	free(q);
	CHECK("free after reallocarray", F(FREE, q));
	errno = 0;
	p = calloc(huge_n, 4);
	CHECK_NONE("calloc overflow: no record");

	void *m_ = NULL;
	if (posix_memalign(&m_, 64, 1000) != 0)
		failures++;
	then_free("posix_memalign", "free posix_memalign", MEMPROF_PRELOAD_POSIX_MEMALIGN, m_,
		  1000);
	then_free("aligned_alloc", "free aligned_alloc", MEMPROF_PRELOAD_ALIGNED_ALLOC,
		  aligned_alloc(4096, 8192), 8192);
	then_free("memalign (one record, not memalign + malloc)", "free memalign",
		  MEMPROF_PRELOAD_MEMALIGN, memalign(128, 100), 100);
	then_free("valloc", "free valloc", MEMPROF_PRELOAD_VALLOC, valloc(100), 100);
	then_free("pvalloc (a page: what the block holds)", "free pvalloc", MEMPROF_PRELOAD_PVALLOC,
		  pvalloc(100), 4096);

	char *s = strdup("glibc calls malloc through the PLT");
	then_free("strdup (glibc-internal malloc)", "free strdup", MEMPROF_PRELOAD_MALLOC, s,
		  strlen(s) + 1);

	int *volatile a = new int(5);
	CHECK("operator new (one record, not new + malloc)", A(NEW, (void *)a, sizeof(int)));
	delete a;
	CHECK("operator delete", F(DELETE, (void *)a));
	int *volatile arr = new int[100];
	CHECK("operator new[]", A(NEW, (void *)arr, 400));
	delete[] arr;
	CHECK("operator delete[]", F(DELETE, (void *)arr));
	char *volatile nt = new (std::nothrow) char[77];
	CHECK("operator new nothrow", A(NEW, (void *)nt, 77));
	::operator delete[](nt, std::nothrow);
	CHECK("operator delete[] nothrow", F(DELETE, (void *)nt));
	Big *volatile big = new Big;
	CHECK("aligned operator new", A(NEW, (void *)big, sizeof(Big)));
	if ((uintptr_t)big % 256) {
		printf("FAIL: kinds: aligned new alignment\n");
		failures++;
	}
	delete big;
	CHECK("aligned sized operator delete", F(DELETE, (void *)big));
	void *volatile sz = ::operator new(48);
	::operator delete(sz, (size_t)48);
	CHECK("sized operator delete", A(NEW, sz, 48), F(DELETE, sz));
	bool threw = false;
	try {
		void *volatile huge = ::operator new(huge_n);
		::operator delete(huge);
	} catch (const std::bad_alloc &) {
		threw = true;
	}
	printf("%s: kinds: operator new throws std::bad_alloc on failure\n",
	       threw ? "PASS" : "FAIL");
	failures += !threw;
	fflush(stdout);
	seen = lseek(3, 0, SEEK_CUR);	/* the exception object itself is allocated */
	void *volatile ntf = ::operator new(huge_n, std::nothrow);
	CHECK_NONE("nothrow new failure returns NULL, no record");
	failures += ntf != NULL;

	void *mm = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK("anonymous mmap", A(MMAP, mm, 1 << 20));
	munmap(mm, 1 << 20);
	CHECK("munmap", F(MUNMAP, mm));
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	void *fm = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK_NONE("file mmap is not sampled");
	if (fm == MAP_FAILED) {
		printf("FAIL: kinds: file mmap\n");
		failures++;
	} else {
		munmap(fm, 4096);
	}
	close(fd);
	CHECK_NONE("munmap of an unsampled mapping");
	errno = 0;
	void *bad = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1);
	printf("%s: kinds: mmap errors as glibc's (EINVAL)\n",
	       bad == MAP_FAILED && errno == EINVAL ? "PASS" : "FAIL");
	failures += !(bad == MAP_FAILED && errno == EINVAL);

	/* The blocks are glibc's own: its introspection still works. */
	p = malloc(1000);
	printf("%s: kinds: malloc_usable_size works on interposed blocks\n",
	       malloc_usable_size(p) >= 1000 ? "PASS" : "FAIL");
	failures += malloc_usable_size(p) < 1000;
	free(p);
	return failures ? 1 : 0;
}
