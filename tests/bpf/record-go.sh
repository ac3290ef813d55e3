#!/bin/bash
# A Go program linked with the C library (cgo), in uprobe mode and through libmemprof-preload:
# its C code leaks 64 MiB of malloc'ed blocks while its Go code grows the Go heap by 256 MiB,
# which the runtime reserves (PROT_NONE) and commits (MAP_FIXED) with mmap through cgo. Only
# the malloc'ed bytes are allocations of the program: the summary's allocated and live bytes
# must be within 4 SE of them, not hundreds of MiB of runtime arenas (as they were).
. "$(dirname "$0")/record.lib"

if ! command -v go >/dev/null; then
	echo "SKIP: go not installed (scripts/debian-packages lists golang-go)"
	exit 0
fi
mkdir -p "$T/go"
if ! env HOME="$T/go" GOCACHE="$T/go/cache" GOPATH="$T/go/path" GO111MODULE=off GOFLAGS= \
	CGO_ENABLED=1 go build -o "$T/wl_go" "$SRC/tests/workloads/wl_go/main.go" 2>"$T/build.err"; then
	cat "$T/build.err"
	fail "wl_go builds (go build, cgo)"
	exit 0
fi

go_check() {	# name [record options...]
	local name=$1; shift
	"$CTL" --json record --no-daemon "$@" -o "$T/$name.ctf" -- "$T/wl_go" 64 1048576 \
		>"$T/$name.out" 2>"$T/$name.err"
	ok "$name: exit status 0" [ $? -eq 0 ]
	/usr/bin/python3 - "$name" "$T/$name.out" "$T/$name.err" <<'PY'
import json, sys
name, out, err = sys.argv[1:]
truth = int(next(l.split()[1] for l in open(out) if l.startswith("TRUTH_BYTES")))
d = json.loads([l for l in open(err) if l.startswith("{")][-1])
(p,) = d["processes"]
for what in ("allocated_bytes", "live_bytes"):
    est, se = p[what], p[what + "_se"]
    z = (est - truth) / se
    print("%s: %s: %s %.0f ± %.0f, malloc'ed %d, z %+.2f" %
          ("PASS" if abs(z) <= 4 else "FAIL", name, what, est, se, truth, z))
PY
}
go_check uprobe
go_check preload --preload
ok "preload: sampled in-process" grep -q '"mode":"preload"' "$T/preload.err"
"$CHECK" strict "$T/uprobe.ctf" "$T/preload.ctf"
