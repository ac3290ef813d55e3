# stk_script.py: a known Python workload for tests/bpf/stacks-python.sh. Nested Python calls
# that build large strings, lists and bytearrays (allocated by CPython through malloc).
#   stk_script.py [ROUNDS [DEPTH]]   (defaults 150 rounds, 3 levels of Python recursion)
import sys


def leaf(n):
    return ["%08d" % i * 40 for i in range(n)]


def middle(n, depth):
    if depth:
        return middle(n, depth - 1)
    return leaf(n)


def grow(n):
    b = bytearray()
    for i in range(n):
        b += b"x" * 1000
    return len(b)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    keep = []
    for r in range(rounds):
        keep.append(middle(100, depth))
        if r % 10 == 0:
            grow(50)
        if len(keep) > 20:
            keep.pop(0)
    return len(keep)


if __name__ == "__main__":
    main()
