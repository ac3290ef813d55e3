#!/usr/bin/python3
# stacks_check.py: checks on the backtraces of a trace, read through `memprofctl dump --json`
# (tests/bpf/stacks-*.sh). Prints "PASS: ..." / "FAIL: ..." lines; exit status 1 if any failed.
#
#   stacks_check.py CTL TRACE chain SITE 'F1|F2|...'   allocations whose innermost location is
#                                                    SITE: at least 90% (STACKS_MIN_FRAC)
#                                                    (and >= 5) have the
#                                                    functions F1..Fn consecutively in their
#                                                    locations (outermost first)
#   stacks_check.py CTL TRACE via NAME 'F1|F2|...'   the same over the allocations whose
#                                                    backtrace names NAME anywhere
#   stacks_check.py CTL TRACE inline OUTER INNER     one frame (location code) holds OUTER then
#                                                    INNER, both with a file and line
#   stacks_check.py CTL TRACE fileline FUNC REGEX    FUNC's locations have a file matching
#                                                    REGEX and a line > 0
#   stacks_check.py CTL TRACE names NAME...          each NAME is some location's function
#   stacks_check.py CTL TRACE outermost NAME...      at least 90% of the allocations' outermost
#                                                    location is one of the NAMEs
#   stacks_check.py CTL TRACE count NAME...          prints allocations whose backtrace names
#                                                    any NAME (no check)
import json
import os
import re
import subprocess
import sys

failures = 0
# the fraction "chain", "via" and "outermost" need (stack copies lost to bursts the daemon
# could not absorb leave frame-pointer walks: counted as ustack_lost, tolerated up to this)
MIN_FRAC = float(os.environ.get("STACKS_MIN_FRAC", "0.9"))


def result(ok, msg):
    global failures
    print("%s: %s" % ("PASS" if ok else "FAIL", msg))
    if not ok:
        failures += 1


def load(ctl, path):
    out = subprocess.run([ctl, "dump", "--json", path], check=True, capture_output=True,
                         text=True).stdout
    d = json.loads(out)
    return [e for e in d["events"] if e["event"] == "alloc"]


def locs(ev):
    return [l for fr in ev["backtrace"] for l in fr["locations"]]


def names(ev):
    return [l["defname"] for l in locs(ev)]


def has_run(seq, run):
    n = len(run)
    return any(seq[i:i + n] == run for i in range(len(seq) - n + 1))


def main():
    ctl, path, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    allocs = load(ctl, path)
    base = path.rsplit("/", 1)[-1]
    if cmd in ("chain", "via"):
        site, chain = args[0], args[1].split("|")
        if cmd == "chain":
            at = [e for e in allocs if e["backtrace"] and names(e)[-1] == site]
        else:
            at = [e for e in allocs if site in names(e)]
        good = [e for e in at if has_run(names(e), chain)]
        if at and len(good) < len(at):
            bad = [e for e in at if e not in good][0]
            print("    not matching, e.g.: " + " > ".join(names(bad)))
        result(len(at) >= 5 and len(good) >= MIN_FRAC * len(at),
               "%s: %d of %d allocations %s %s have %s" % (base, len(good), len(at),
                                                          "at" if cmd == "chain" else "via",
                                                          site, " > ".join(chain)))
    elif cmd == "inline":
        outer, inner = args
        found = None
        for e in allocs:
            for fr in e["backtrace"]:
                ls = fr["locations"]
                for i in range(len(ls) - 1):
                    if ls[i]["defname"] == outer and ls[i + 1]["defname"] == inner:
                        found = ls
        ok = found is not None and all(l["line"] > 0 and l["filename"] for l in found)
        if found:
            print("    frame: " + "; ".join("%s@%s:%d" % (l["defname"], l["filename"],
                                                          l["line"]) for l in found))
        result(ok, "%s: one frame holds %s then inlined %s, with file:line" % (base, outer,
                                                                               inner))
    elif cmd == "fileline":
        func, rx = args
        ls = [l for e in allocs for l in locs(e) if l["defname"] == func]
        ok = bool(ls) and all(re.search(rx, l["filename"]) and l["line"] > 0 for l in ls)
        if ls:
            print("    e.g. %s@%s:%d" % (func, ls[0]["filename"], ls[0]["line"]))
        result(ok, "%s: %s has file:line (%s)" % (base, func, rx))
    elif cmd == "names":
        seen = {n for e in allocs for n in names(e)}
        for n in args:
            result(n in seen, "%s: a backtrace names %s" % (base, n))
    elif cmd == "outermost":
        outer = [names(e)[0] for e in allocs if e["backtrace"]]
        good = [n for n in outer if n in args]
        result(len(outer) >= 5 and len(good) >= MIN_FRAC * len(outer),
               "%s: %d of %d backtraces start at %s" % (base, len(good), len(outer),
                                                        " or ".join(args)))
    elif cmd == "count":
        n = sum(1 for e in allocs if set(names(e)) & set(args))
        print("%d" % n)
    else:
        print("stacks_check.py: unknown command %s" % cmd, file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
