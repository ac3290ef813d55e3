#!/bin/bash
# memprofd(8) documents the whole control protocol that <memprof/bus.h> defines: every name
# there (the socket, bus name, paths, interfaces, methods, properties, State values,
# ProcessStatus keys, error names) appears in the man page's D-BUS INTERFACE section.
set -u
cd "$MP_SRC" || exit 1
hdr=userspace-lib/include/memprof/bus.h
page=man/memprofd.8
fail=0 n=0
# the D-BUS INTERFACE section as text, roff escapes and font macros removed
text=$(sed -n '/^\.SH D-BUS INTERFACE/,/^\.SH [^D]/p' "$page" | sed -e 's/\\-/-/g' -e 's/\\(->/->/g')
# names: the string values of the header's defines, but not signatures (NAME_SIG, NAME_ENTRY,
# MEMPROF_BUS_SIG_*), and the error names' last component after "org.memprofd.Error"
while read -r name value; do
	case $name in *_SIG | *_ENTRY | MEMPROF_BUS_SIG_*) continue ;; esac
	n=$((n + 1))
	word=$value
	case $name in MEMPROF_BUS_ERR_*) word=.${value##*.} ;; esac
	if ! grep -qF -- "$word" <<< "$text"; then
		echo "FAIL: bus-doc: $name ('$value') is not in $page's D-BUS INTERFACE section"
		fail=1
	fi
done < <(sed -n 's/^#define \(MEMPROF_[A-Z_]*\)[[:space:]]*"\([^"]*\)".*/\1 \2/p' "$hdr")
[ "$n" -gt 60 ] || { echo "FAIL: bus-doc: only $n names read from $hdr"; exit 1; }
[ "$fail" = 0 ] && echo "PASS: bus-doc: the $n names of the protocol are documented in $page"
exit "$fail"
