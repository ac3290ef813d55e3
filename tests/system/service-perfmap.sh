#!/bin/bash
# A JIT's perf map is read for the profile's owner, never as root: a user who points
# /tmp/perf-PID.map at a file they cannot read (a symlink; or, in a mount namespace of their
# own, a directory of theirs bind-mounted over /tmp, where fs.protected_symlinks does not
# apply) used to see that file's lines as function names in their trace. A FIFO at such a name
# hung memprofd.
. "$(dirname "$0")/lib-service.sh"
svc_start_shared perfmap
JIT=$MP_BUILD/tests/workloads/svc_jit
[ -x "$JIT" ] || { echo "FAIL: missing $JIT (make test-bins)"; exit 1; }
SECRET_DIR=$(mktemp -d /var/tmp/memprofd-secret.XXXXXX)	# root's, 0700, outside /tmp
trap 'svc_cleanup; rm -rf "$SHARED" "$SECRET_DIR"' EXIT
as_nobody() { "${NOBODY[@]}" "$@"; }

# jit_start [PREFIX...] -- [ARGS...]: phases_start with svc_jit, which answers the same way.
jit_start() { PHASES=$JIT phases_start "$@"; }
# secret_for PID: a root-only file in perf-map form naming PID's code SECRET_root_only_name
secret_for() {
	local code size
	read -r _ code size < <(grep '^code' "$MP_TMP/phases.$1")
	umask 077
	echo "$code $size SECRET_root_only_name" > "$SECRET_DIR/map.$1"
	umask 022
	echo "$SECRET_DIR/map.$1"
}
# profile_names PID: profile PID as uid 65534 at rate 1 while it allocates; print the trace's
# function names
profile_names() {
	local id
	id=$("${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" attach -r 1 "$1" | attach_id)
	phases_do "$1" USR1 allocated
	wait_until 10 eval '[ "$(proc_field "$id" sampled_blocks)" -ge 100 ]'
	as_nobody "$MEMPROFCTL" --socket "$SOCK" stop "$id" > /dev/null
	as_nobody "$MEMPROFCTL" --socket "$SOCK" discard "$id" > /dev/null
	as_nobody "$MEMPROFCTL" report --by stack --top 50 "$STATE/profiles/$id/"*.ctf
	# the test means something only if the JIT code's frames are in the trace
	as_nobody "$MEMPROFCTL" report --by stack --top 50 "$STATE/profiles/$id/"*.ctf | \
		grep -q 'jit_alloc' || echo "FAIL: no stack through the JIT code in profile $id"
}

# Its own perf map: the names are its own.
P=$(jit_start "${NOBODY[@]}" -- 100 own)
profile_names "$P" > "$MP_TMP/own.txt"
grep '^FAIL' "$MP_TMP/own.txt"
check "the process' own perf map names its JIT code" grep -q jit_own_function "$MP_TMP/own.txt"
rm -f "/tmp/perf-$P.map"

# A symlink to a root-only file.
P=$(jit_start "${NOBODY[@]}" -- 100)
S=$(secret_for "$P")
as_nobody ln -s "$S" "/tmp/perf-$P.map"
profile_names "$P" > "$MP_TMP/symlink.txt"
grep '^FAIL' "$MP_TMP/symlink.txt"
check "a perf map symlinked to a root-only file is not read" \
	eval "! grep -q SECRET_root_only_name $MP_TMP/symlink.txt"
check "  ... the code is named by its mapping instead" grep -q '\[anon\]' "$MP_TMP/symlink.txt"
rm -f "/tmp/perf-$P.map"

# The same from a mount namespace of the user's own, their directory over /tmp.
if as_nobody unshare -Urm true 2> /dev/null; then
	UTMP=$SHARED/nobody-tmp
	mkdir "$UTMP"
	chown 65534:65534 "$UTMP"
	# the workload runs from its copy there: the build may itself be under /tmp
	P=$(jit_start "${NOBODY[@]}" unshare -Urm sh -c \
		'cp "$2" "$1/svc_jit" && mount --bind "$1" /tmp && shift 2 && exec /tmp/svc_jit "$@"' \
		sh "$UTMP" -- 100)
	S=$(secret_for "$P")
	as_nobody ln -s "$S" "$UTMP/perf-$P.map"
	profile_names "$P" > "$MP_TMP/userns.txt"
	grep '^FAIL' "$MP_TMP/userns.txt"
	check "a user's own /tmp in a user namespace cannot point the perf map at a root-only file" \
		eval "! grep -q SECRET_root_only_name $MP_TMP/userns.txt"
	kill -TERM "$P"
else
	echo "SKIP: unprivileged user namespaces are disabled"
fi

# A perf map that is not its owner's file (root's, in a directory the user controls).
P=$(jit_start "${NOBODY[@]}" -- 100)
S=$(secret_for "$P")
cp "$S" "/tmp/perf-$P.map"	# root's, 0600
profile_names "$P" > "$MP_TMP/owner.txt"
grep '^FAIL' "$MP_TMP/owner.txt"
check "a perf map owned by another uid than the process' is not read" \
	eval "! grep -q SECRET_root_only_name $MP_TMP/owner.txt"
rm -f "/tmp/perf-$P.map"

# A FIFO is never opened (an open for reading would block the daemon).
P=$(jit_start "${NOBODY[@]}" -- 100)
as_nobody mkfifo "/tmp/perf-$P.map"
profile_names "$P" | grep '^FAIL'
check "a FIFO as perf map: memprofd answers list within 1 s" \
	timeout 1 "$MEMPROFCTL" --socket "$SOCK" list
rm -f "/tmp/perf-$P.map"
# The same for a mapped file's name: the loader and the symbolizer read the file mapped, never
# what the process put under its name afterwards (here a FIFO bind-mounted over it, in the
# process' own mount namespace, where /proc/PID/maps still shows the name; an open() of the
# FIFO would block memprofd).
if as_nobody unshare -Urm true 2> /dev/null; then
	UDIR=$SHARED/nobody-lib
	mkdir "$UDIR"
	chown 65534:65534 "$UDIR"
	as_nobody cp /usr/bin/true "$UDIR/obj"
	as_nobody mkfifo "$UDIR/fifo"
	P=$(jit_start "${NOBODY[@]}" unshare -Urm sh -c '"$0" 100 map "$1/obj" &
		until grep -q "^ready" "/proc/self/fd/1"; do sleep 0.05; done
		mount --bind "$1/fifo" "$1/obj" && echo mounted; wait' "$JIT" "$UDIR" --)
	wait_until 10 grep -q '^mounted' "$MP_TMP/phases.$P"
	timeout 10 "${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" attach -r 1 "$P" > "$MP_TMP/out" 2>&1
	check "a FIFO over a mapped file's name: attach completes" grep -q '^Profile' "$MP_TMP/out"
	check "  ... and memprofd answers list within 1 s" \
		timeout 1 "$MEMPROFCTL" --socket "$SOCK" list
fi
exit $((FAILS > 0))
