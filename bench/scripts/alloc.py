# bench/scripts/alloc.py: an allocation-heavy Python workload for bench/run.
#
#   /usr/bin/python3 alloc.py [ROUNDS]
#
# Builds and drops containers of objects of mixed sizes. Objects over 512 bytes (bytes, long str,
# big lists and dicts) come from the C library's malloc; smaller ones from pymalloc's arenas.
# Deterministic (fixed seed); prints a checksum so the work cannot be skipped.
import random
import sys


def round_of_work(rng, live):
    total = 0
    for i in range(2000):
        n = rng.randrange(16, 4096)
        b = bytes(n)                       # malloc'd buffer
        s = "x" * rng.randrange(8, 2048)   # str, malloc'd when large
        row = {"id": i, "name": s, "blob": b, "tags": [i, n, s[:8]]}
        slot = rng.randrange(len(live))
        live[slot] = row                   # drops the previous row: frees
        total += len(b) + len(s)
    big = [list(range(rng.randrange(64, 512))) for _ in range(50)]
    total += sum(len(x) for x in big)
    text = ",".join(str(x) for x in range(3000)).split(",")
    total += len(text)
    return total


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rng = random.Random(1234)
    live = [None] * 256
    checksum = 0
    for _ in range(rounds):
        checksum = (checksum + round_of_work(rng, live)) % (1 << 61)
    print("checksum", checksum)


if __name__ == "__main__":
    main()
