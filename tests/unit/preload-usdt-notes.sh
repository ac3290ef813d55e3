#!/bin/bash
# libmemprof-preload's USDT probes: memprof:alloc, memprof:free and memprof:free_batch notes
# with their semaphores in .probes, argument specs as the ABI says, and each probe site a 5-byte nop
# (0f 1f 44 00 00) so that Linux 6.18 optimises the uprobe; the config block is exported;
# malloc's and free's unsampled paths stay a handful of instructions ending in a tail jump to
# the next allocator (glibc's, or the program's own: one memory-indirect jmp through the
# resolved pointer, as the -fno-plt GOT jump to __libc_malloc was; docs/probe-costs.md): no
# call, no stack frame, no lock, no mode test.
. "$(dirname "$0")/preload.inc"

notes=$(readelf -n "$PL_LIB")
# x86-64: the arguments sit in the calling convention's registers (memprofd reads them there)
for probe in "alloc:8@%rdi" "free:8@%rdi 8@%rsi 4@%edx" "free_batch:8@%rdi 4@%esi"; do
	name=${probe%%:*} args=${probe#*:}
	block=$(echo "$notes" | grep -A2 "Name: $name\$")
	check "usdt: memprof:$name note present" grep -q "Provider: memprof" <<<"$(echo "$notes" |
		grep -B1 "Name: $name\$")"
	sem=$(echo "$block" | sed -n 's/.*Semaphore: \(0x[0-9a-f]*\).*/\1/p')
	check "usdt: memprof:$name has a semaphore" test -n "$sem" -a "$((sem))" -ne 0
	check "usdt: memprof:$name arguments ($args)" grep -Eq "Arguments: $args\$" <<<"$block"
	loc=$(echo "$block" | sed -n 's/.*Location: \(0x[0-9a-f]*\),.*/\1/p')
	bytes=$(objdump -d --start-address="$loc" --stop-address=$((loc + 5)) "$PL_LIB" |
		awk -F'\t' '/^ *[0-9a-f]+:/ {print $2}' | tr -d ' \n')
	check "usdt: memprof:$name site is a nop5 ($bytes)" test "$bytes" = 0f1f440000
	secs=$(readelf -S -W "$PL_LIB" | awk '$2 == ".probes" {print $4, $6}')
	read -r addr size <<<"$secs"
	check "usdt: memprof:$name semaphore lies in .probes" \
		test -n "$addr" -a $((sem >= 0x$addr && sem < 0x$addr + 0x$size)) -eq 1
done
check "config block exported" grep -q ' memprof_preload_config$' <<<"$(nm -D --defined-only "$PL_LIB")"
check "no internal symbol exported" test "$(nm -D --defined-only "$PL_LIB" | grep -c ' pl_')" -eq 0
fastpath() {	# symbol -> instructions up to and including the first "jmp *" (tail call)
	objdump -d --no-show-raw-insn "$PL_LIB" | awk -v s="<$1>:" '
		$2 == s { on = 1; next }
		on && /^$/ { exit }
		on { n++; if ($0 ~ /(call|push|lock|xchg)/) bad = 1; if ($0 ~ /jmp +\*/) { print (bad ? -n : n); exit } }'
}
idlepath() {	# symbol -> instructions when the gate is closed: up to the first je, then its target,
		# which must be the tail call itself (-1 if not)
	objdump -d --no-show-raw-insn "$PL_LIB" | awk -v s="<$1>:" '
		$2 == s { on = 1; next }
		on && /^$/ { exit }
		on { n++; a = $1; sub(":", "", a); ins[a] = $0
		     if (!je && $2 == "je") { je = n; tgt = $3 } }
		END { if (!je || !(tgt in ins) || ins[tgt] !~ /jmp +\*/) print -1; else print je + 1 }'
}
# With profiling armed: the gate, the countdown (malloc) or the filter (free), the tail call.
# free's filter index is three shifted copies of the address XORed (pl_filter_index()): 17.
for f in malloc:9 free:17; do
	n=$(fastpath "${f%:*}")
	check "fast path: ${f%:*} forwards to the next allocator in $n instructions (<= ${f#*:}, no call/push/lock)" \
		test -n "$n" -a "${n:-0}" -gt 0 -a "${n:-99}" -le "${f#*:}"
done
# Idle (nothing attached, nothing ever sampled): the gate and the tail call, nothing else.
for f in malloc free; do
	n=$(idlepath $f)
	check "idle path: $f forwards to the next allocator in $n instructions (<= 4)" \
		test -n "$n" -a "${n:-0}" -gt 0 -a "${n:-99}" -le 4
done
pl_exit
