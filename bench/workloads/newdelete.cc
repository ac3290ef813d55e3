// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * newdelete: allocbench's loop with C++ operator new[] / delete[] instead of malloc/free.
 *
 *   newdelete [OPS]
 *
 * A ring of 256 live arrays; each op deletes a pseudo-randomly chosen slot and news 16..4096
 * bytes into it (xorshift64, deterministic). Prints "ns_per_pair <ns> ops <ops> threads 1
 * maxsz 4096", the loop timed with CLOCK_MONOTONIC.
 */
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>

static const unsigned int ring_size = 256;
static const std::size_t min_size = 16, max_size = 4096;

/* Stores here keep the compiler from eliding new/delete pairs (C++14 allows it). */
static char *volatile sink;

static double now_ns()
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	unsigned long ops = 5000000;
	uint64_t x = 0x9E3779B97F4A7C15ull ^ 0xBF58476D1CE4E5B9ull;
	char *ring[ring_size];
	double t0, t1;

	if (argc > 2) {
		std::fprintf(stderr, "usage: %s [OPS]\n", argv[0]);
		return 2;
	}
	if (argc == 2) {
		char *end;
		double v;

		errno = 0;
		v = std::strtod(argv[1], &end);
		if (errno || end == argv[1] || *end || v < 1 || v > 1e12) {
			std::fprintf(stderr, "usage: %s [OPS]\n", argv[0]);
			return 2;
		}
		ops = (unsigned long)v;
	}
	for (unsigned int i = 0; i < ring_size; i++) {
		ring[i] = new char[min_size];
		sink = ring[i];
	}
	t0 = now_ns();
	for (unsigned long op = 0; op < ops; op++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		unsigned int slot = x % ring_size;
		std::size_t size = min_size + (x >> 32) % (max_size - min_size + 1);

		delete[] ring[slot];
		char *p = new char[size];
		p[0] = (char)op;
		ring[slot] = p;
		sink = p;
	}
	t1 = now_ns();
	for (unsigned int i = 0; i < ring_size; i++)
		delete[] ring[i];
	std::printf("ns_per_pair %.2f ops %lu threads 1 maxsz %zu\n", (t1 - t0) / (double)ops, ops,
		    max_size);
	return 0;
}
