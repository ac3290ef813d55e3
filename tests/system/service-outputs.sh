#!/bin/bash
# What an output a hostile caller chooses can do to memprofd, as uid 65534: a FIFO or pipe is
# refused (memprofctl and the API, Start and AddProcess), so are an O_APPEND descriptor and
# rates below the minimum (the same sentence from memprofctl and from the API); a write-only
# descriptor gets its drop counts patched in. A regular output
# that is stuck (a file on a frozen filesystem) holds up its own trace only: `list` keeps
# answering within 1 s, and SIGTERM completes the other profiles' traces. Traces in the state
# directory are readable by their owner only.
. "$(dirname "$0")/lib-service.sh"
command -v fsfreeze > /dev/null && command -v mkfs.ext4 > /dev/null ||
	{ echo "fsfreeze or mkfs.ext4 missing"; exit 77; }
svc_start_shared outputs
as_nobody() { "${NOBODY[@]}" "$MEMPROFCTL" --socket "$SOCK" "$@"; }
api_nobody() { "${NOBODY[@]}" /usr/bin/python3 "$BUSCALL" "$SOCK" "$@"; }
answers() { timeout 1 "$MEMPROFCTL" --socket "$SOCK" list > /dev/null; }	# within 1 s
complete() { grep -Eq '"complete": ?true' "$STATE/profiles/$1/manifest.json"; }
D=$SHARED/out
mkdir -m 0777 "$D"

N=$(phases_start "${NOBODY[@]}" -- 1000 1000)

# --- a FIFO as output would block the daemon: refused, by memprofctl and by the API ------
"${NOBODY[@]}" mkfifo "$D/fifo"
as_nobody attach -r 0.01 -o "$D/fifo" "$N" > /dev/null 2> "$MP_TMP/err"
check "attach -o FIFO as uid 65534: refused (exit 1)" [ $? = 1 ]
check "  ... saying it is not a regular file" \
	grep -q "Failed to use '$D/fifo': The output is a pipe or FIFO, not a regular file" \
	"$MP_TMP/err"
api_nobody start "$N" 0.01 fifo "$D/fifo" > "$MP_TMP/api" 2>&1
check "Start with a FIFO descriptor: InvalidArgs naming the problem" \
	grep -q "ERROR org.memprofd.Error.InvalidArgs: The output is a pipe or FIFO, not a" \
	"$MP_TMP/api"
check "  ... and nothing started" eval "[ -z \"\$(ctl list)\" ] || ! ctl list | grep -q ' $N\$'"
ID=$(as_nobody attach -r 0.01 "$N" | attach_id)
api_nobody add "$ID" "$N" fifo "$D/fifo" > "$MP_TMP/api" 2>&1
check "AddProcess with a FIFO descriptor: InvalidArgs" \
	grep -q "InvalidArgs: The output is a pipe or FIFO" "$MP_TMP/api"
api_nobody add "$ID" "$N" rate - > "$MP_TMP/api" 2>&1
check "AddProcess with another option than output: InvalidArgs naming both" \
	grep -q "InvalidArgs: Unknown option 'rate' (known: output)" "$MP_TMP/api"
check "the service answers list within 1 s" answers
as_nobody stop "$ID" > /dev/null && as_nobody discard "$ID" > /dev/null

# --- a rate the sampler cannot draw; an fd that cannot be rewritten or is write-only -----
as_nobody attach -r 1e-300 "$N" > /dev/null 2> "$MP_TMP/err"
check "attach -r 1e-300: a usage error (exit 2)" [ $? = 2 ]
check "  ... naming the minimum" \
	grep -q "Invalid sampling rate '1e-300': in \[1e-9, 1\]" "$MP_TMP/err"
api_nobody start "$N" 4.9e-324 > "$MP_TMP/api" 2>&1
check "Start with rate 4.9e-324: InvalidArgs, the same sentence" \
	grep -q "InvalidArgs: Invalid sampling rate '5e-324': in \[1e-9, 1\]" \
	"$MP_TMP/api"
api_nobody start "$N" 0.01 append "$D/append.ctf" > "$MP_TMP/api" 2>&1
check "Start with an O_APPEND descriptor: InvalidArgs naming O_APPEND" \
	grep -q "InvalidArgs: The output file descriptor is open for appending (O_APPEND)" \
	"$MP_TMP/api"
P=$(api_nobody start "$N" 0.01 wronly "$D/wronly.ctf")
check "Start with a write-only descriptor: accepted" [ -n "$P" ]
IW=${P##*/}
phases_do "$N" USR1 allocated
wait_until 10 eval '[ "$(proc_field "$IW" sampled_blocks)" -gt 0 ]'
as_nobody stop "$IW" > /dev/null && as_nobody discard "$IW" > /dev/null
wait_until 10 complete "$IW"
check "  ... its trace has the final drop counts (patched through O_WRONLY)" \
	eval "'$MEMPROFCTL' dump '$D/wronly.ctf' | grep -q '^info context.*; drops: table_full=0 '"

# --- other users may not read a trace: readable by its owner only ------------------------
R=$(phases_start -- 100 1000)
IR=$(ctl attach -r 0.01 "$R" | attach_id)
phases_do "$R" USR1 allocated
ctl stop "$IR" > /dev/null && ctl discard "$IR" > /dev/null
TR=$STATE/profiles/$IR/$R-svc_phases.ctf
check "root's trace is mode 0600" [ "$(stat -c %a "$TR")" = 600 ]
check "uid 65534 cannot read root's trace" eval "! \"\${NOBODY[@]}\" cat '$TR' > /dev/null 2>&1"
check "root's manifest is not world-readable" \
	eval "! \"\${NOBODY[@]}\" cat '$STATE/profiles/$IR/manifest.json' > /dev/null 2>&1"
TN=$STATE/profiles/$ID/$N-svc_phases.ctf
check "uid 65534's trace is its own, mode 0600" \
	[ "$(stat -c %u:%a "$TN")" = 65534:600 ]

# --- a user's stuck output (a frozen file system) stalls its own trace only ---------------
IMG=$MP_TMP/frozen.img FRZ=$MP_TMP/frozen
truncate -s 64M "$IMG" && mkfs.ext4 -q -F "$IMG" && mkdir -p "$FRZ" &&
	mount -o loop "$IMG" "$FRZ" || { fail "cannot mount an ext4 image"; exit 1; }
thaw() { fsfreeze -u "$FRZ" 2>/dev/null; }
trap 'thaw; svc_cleanup; umount "$FRZ"; rm -rf "$SHARED"' EXIT
S=$(phases_start -- 200000 100)
O=$(phases_start -- 2000 1000)
IS=$(ctl attach -r 1 -o "$FRZ/stuck.ctf" "$S" | attach_id)
IO=$(ctl attach -r 0.01 "$O" | attach_id)
check "two profiles: one to a file on the filesystem to freeze, one to the state directory" \
	eval "[ -n '$IS' ] && [ -n '$IO' ]"
fsfreeze -f "$FRZ"
phases_do "$S" USR1 allocated && phases_do "$S" USR2 freed && phases_do "$S" USR1 allocated
ok=1
for i in 1 2 3 4 5; do answers || ok=0; sleep 0.2; done
check "output frozen, 400000 samples on their way to it: list answers within 1 s" [ $ok = 1 ]
phases_do "$O" USR1 allocated
wait_until 10 eval '[ "$(proc_field "$IO" sampled_blocks)" -gt 0 ]'
check "  ... the other profile samples on" [ "$(proc_field "$IO" sampled_blocks)" -gt 0 ]
wait_until 10 eval '[ "$(proc_field "$IS" write_error)" = stalled ]'
check "  ... status --json names the stalled output" \
	[ "$(proc_field "$IS" write_error)" = stalled ]
check "  ... status says since when and how many events were not written" \
	eval "ctl status $IS | grep -q 'OUTPUT STALLED since 20[0-9-]* [0-9:]*: [1-9][0-9]* events not written'"
kill -TERM "$DPID"
wait_until 8 complete "$IO"
check "SIGTERM: the other profile's trace is complete while the output is frozen" complete "$IO"
check "  ... the stuck one's is not (yet)" eval "! complete $IS"
TO=$STATE/profiles/$IO/$O-svc_phases.ctf
check "  ... and valid, with its drop counts" \
	eval "'$MEMPROFCTL' dump '$TO' | grep -q '^info context.*; drops: table_full=0 '"
thaw
wait "$DPID"
rc=$?
DPID=
check "thawed: memprofd exits 0" [ "$rc" = 0 ]
check "  ... the stuck trace is complete up to its losses (strict reader)" \
	eval "'$MEMPROFCTL' dump '$FRZ/stuck.ctf' | grep -q '^info context.*stalled_output=[1-9]'"
umount "$FRZ"
trap 'svc_cleanup; rm -rf "$SHARED"' EXIT
[ "$FAILS" = 0 ]
