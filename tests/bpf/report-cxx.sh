#!/bin/bash
# memprofctl report on a recorded C++ workload whose every allocation goes through libstdc++
# (tests/workloads/wl_vector.cc: vector::resize, std::string, make_shared): each site is the
# user's function, not a std:: wrapper, with estimates within 4.65 SE of the printed truth;
# --no-trim names the wrappers; --focus, --ignore, --hide and --show-from follow pprof;
# --by stack lines are folded before 100 columns.
. "$(dirname "$0")/report.lib" wl_vector
rate=0.002
record_truth vec.ctf -r $rate --unwind dwarf -- "$wl"

rep() {	# name args...
	local name=$1; shift
	"$ctl" report -q --json --top 100 "$@" "$tmp/vec.ctf" >"$tmp/$name.json" 2>"$tmp/$name.err" ||
		{ echo "FAIL: $name (report exited non-zero)"; cat "$tmp/$name.err"; }
}
rep trim
rep notrim --no-trim
rep focus --focus '^wl_string$'
rep ignore --ignore 'wl_string|wl_shared'
rep hide --hide '^wl_vec_fill$'
rep from --by stack --show-from '^wl_shared$'

RATE=$rate "$py" - "$tmp" <<'EOF'
import json, math, os, sys
tmp = sys.argv[1]
lam = float(os.environ["RATE"])
truth = {}
for line in open(tmp + "/truth"):
    f = line.split()
    if f and f[0] == "TRUTH":
        truth[f[1]] = {k: int(v) for k, v in (x.split("=") for x in f[2:])}
def load(name):
    return {s["site"]: s for s in json.load(open("%s/%s.json" % (tmp, name)))["sites_by_bytes"]}
fails = []
def result(name, ok, why=""):
    print("%s: %s%s" % ("PASS" if ok else "FAIL", name, "" if ok else " (%s)" % why))
def z(est, words):
    se = math.sqrt(64 * words * (1 - lam) / lam)
    return (est - 8 * words) / se

trim = load("trim")
bad = []
for name, t in sorted(truth.items()):
    s = trim.get(name)
    if not s:
        bad.append("%s is not a site" % name)
        continue
    zz = z(s["bytes"]["estimate"], t["words"])
    print("  %-12s bytes %11.0f truth %9d z %+5.2f" % (name, s["bytes"]["estimate"], 8 * t["words"], zz))
    if abs(zz) > 4.65:
        bad.append("%s bytes z %.2f" % (name, zz))
top = [s for s in sorted(trim.values(), key=lambda s: -s["bytes"]["estimate"])][:4]
if {s["site"] for s in top} != set(truth):
    bad.append("top 4 sites %s" % [s["site"] for s in top])
for s in trim.values():
    if s["site"].startswith(("std::", "__gnu_cxx::", "operator new")) and s["bytes"]["estimate"] > 0.01 * 8 * truth["wl_vec_fill"]["words"]:
        bad.append("wrapper site %s" % s["site"])
result("cxx-sites-are-user-functions", not bad, "; ".join(bad))

notrim = load("notrim")
top = max(notrim.values(), key=lambda s: s["bytes"]["estimate"])
result("no-trim-shows-wrappers", top["site"].startswith("std::") and "wl_vec_fill" not in notrim,
       "top site %s" % top["site"])

focus = load("focus")
ok = set(focus) == {"wl_string"} and abs(z(focus["wl_string"]["bytes"]["estimate"], truth["wl_string"]["words"])) <= 4.65
result("focus", ok, "sites %s" % sorted(focus))

ignore = load("ignore")
ok = not {"wl_string", "wl_shared"} & set(ignore) and {"wl_vec_fill", "wl_vec_leak"} <= set(ignore)
result("ignore", ok, "sites %s" % sorted(ignore))

hide = load("hide")
ok = "wl_vec_fill" not in hide and "main" in hide and \
    abs(z(hide["main"]["bytes"]["estimate"], truth["wl_vec_fill"]["words"])) <= 4.65
result("hide", ok, "sites %s" % sorted(hide))

fr = load("from")
ok = list(fr) == ["wl_shared"] and abs(z(fr["wl_shared"]["bytes"]["estimate"], truth["wl_shared"]["words"])) <= 4.65
result("show-from", ok, "sites %s" % sorted(fr))
EOF

# --by stack: folded lines, continuation lines indented; only a single long frame name may
# run past 100 columns.
"$ctl" report -q --by stack --no-trim --top 5 "$tmp/vec.ctf" >"$tmp/stack.txt" 2>&1
if awk '/ <-( |$)/ || /^        [^ ]/ {
		# a line of a stack: past 100 columns only when it holds one (long) frame
		if (length($0) > 100 && split($0, parts, " <- ") > 1) bad = 1
	}
	/^        [^ ]/ { cont = 1 }
	END { exit bad || !cont }' "$tmp/stack.txt"; then
	echo "PASS: by-stack-folded"
else
	echo "FAIL: by-stack-folded"; cat "$tmp/stack.txt"
fi
