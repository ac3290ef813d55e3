#!/bin/bash
# C++ backtraces (tests/workloads/stk_cxx.cc, no frame pointers): demangled names with their
# parameters (ns::Class::method(int), a template instance with its return type), file:line.
. "$(dirname "$0")/stacks.lib"

SITE="char* ns::make_buffer<char>(unsigned long)"
record cxx --unwind=auto -r 1e-3 -- "$WL/stk_cxx" 1500 100
ok "exit status 0" [ "$rc" -eq 0 ]
check "$T/cxx.ctf" chain "$SITE" "main|ns::Class::method(int)|$SITE"
check "$T/cxx.ctf" names "ns::Class::method(int)" "$SITE"
check "$T/cxx.ctf" fileline "ns::Class::method(int)" 'tests/workloads/stk_cxx\.cc$'
ok "no mangled name left" bash -c '! "$1" dump "$2" | grep -q "\"_Z"' _ "$CTL" "$T/cxx.ctf"
exit 0
