#!/bin/bash
# Processes whose allocator cannot be probed are named with the reason, and no trace is left:
# a statically linked stripped program, and a Go program (its runtime does not use malloc).
. "$(dirname "$0")/record.lib"

expect() {	# name pattern -- command...
	local name=$1 pat=$2
	shift 3
	"$CTL" record -o "$T/$name.ctf" -- "$@" >"$T/$name.out" 2>"$T/$name.err"
	local got=$?
	if [ "$got" -eq 1 ] && grep -Eq "$pat" "$T/$name.err"; then
		pass "$name (exit $got: $(head -n 1 "$T/$name.err"))"
	else
		fail "$name: exit $got (want 1), stderr: $(cat "$T/$name.err")"
	fi
	ok "$name: no trace left" [ ! -e "$T/$name.ctf" ]
}

# A static program without libc, stripped: nothing to probe, and no symbols to look at.
cp "$WL/wl_nolibc" "$T/stripped_static"
strip "$T/stripped_static"
expect stripped "Process [0-9]+ \(stripped_static\) has no allocator memprofd can probe: no allocator symbols found in $T/stripped_static \(statically linked and stripped\?\)" \
	-- "$T/stripped_static"

# A Go program without cgo (golang-go is in scripts/debian-packages).
if command -v go >/dev/null; then
	mkdir -p "$T/go"
	cat > "$T/go/main.go" <<'GO'
package main

import "fmt"

var sink [][]byte

func main() {
	for i := 0; i < 1000; i++ {
		sink = append(sink, make([]byte, 100))
	}
	fmt.Println(len(sink))
}
GO
	if (cd "$T/go" && HOME=$T/go GOCACHE=$T/go/cache GOPATH=$T/go/path GO111MODULE=off \
		CGO_ENABLED=0 go build -o goprog main.go) >"$T/go/build.log" 2>&1; then
		expect go "Process [0-9]+ \(goprog\) has no allocator memprofd can probe: no allocator symbols found in $T/go/goprog \(a Go program" \
			-- "$T/go/goprog"
	else
		fail "go build: $(cat "$T/go/build.log")"
	fi
else
	echo "go not installed: Go case skipped"
fi
exit 0
