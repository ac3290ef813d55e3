#!/bin/bash
# Every path into the tree that a comment, a doc or a script names must exist, and nothing may
# point outside the repository (the project stands alone: its users never have our notes).
# A path counts when it starts with a top-level folder of ours and ends in a source or
# document extension; <system/headers.h> do not, and generated files are checked against the
# build rules that make them.
set -u
cd "$MP_SRC" || exit 1
command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
	{ echo "not a git checkout"; exit 77; }

top='bpf|daemon|userspace-lib|systemd|man|tests|cli|report|bench|docs|scripts|examples|\.ci'
ext='c|h|cc|md|sh|mk|py|lib|service|socket|conf|in|map|[1-8]'
fail=0 n=0
while IFS= read -r hit; do
	loc=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; path=${rest#*:}
	case $path in '<'*) continue ;; esac
	path=${path#[^a-z.]}
	n=$((n + 1))
	# a file the build generates (into $(B)/gen/PATH) is named by its path in the tree
	if [ ! -e "$path" ] && ! grep -qsF "gen/$path" -- */build.mk */*.mk Makefile; then
		echo "FAIL: doc-paths: $loc:$line names '$path', which is not in the tree"
		fail=1
	fi
done < <(git ls-files -z -- . ':!tests/fixtures' | xargs -0 grep -noE \
	"(^|[^A-Za-z0-9_./-])($top)/[A-Za-z0-9_./-]*\.($ext)\b" 2>/dev/null)

# the team's notes sit in a folder beside the checkout; no file may name it
notes=shared
outside=$(git ls-files -z -- . | xargs -0 grep -nE "\.\./$notes/|$notes/reference" 2>/dev/null)
if [ -n "$outside" ]; then
	echo "FAIL: doc-paths: files point outside the repository:"
	echo "$outside"
	fail=1
fi
[ $fail = 0 ] && echo "PASS: doc-paths: $n paths named in the tree exist, none points outside it"
exit $fail
