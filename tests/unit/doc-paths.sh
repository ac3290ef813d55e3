#!/bin/bash
# The tree stands alone: its users never have our notes, our tracker or our history, so
#  - every path into the tree that a comment, a doc or a script names must exist (a file that
#    ends in a source or document extension, or a folder written with its trailing slash);
#  - nothing may point at the team's notes beside the checkout;
#  - nothing may cite a tracker entry ("issue #N", "issue N", "hole N"): say what it guards;
#  - no comment may be a history note ("Added (...):", "New:"): say what the thing is.
# A path counts when it starts with a top-level folder of ours; <system/headers.h> do not, and
# generated files are checked against the build rules that make them. Each check prints one
# result, with every place it found.
set -u
cd "$MP_SRC" || exit 1
command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
	{ echo "not a git checkout"; exit 77; }

# the files checked: all that git tracks but the fixtures (foreign traces, byte for byte)
tracked() { git ls-files -z -- . ':!tests/fixtures'; }
# grep_tree [GREP-OPTIONS] ERE: every line of the tracked text files that matches
grep_tree() { tracked | xargs -0 grep -nIE "$@" 2>/dev/null; }
# result NAME WHAT-PASSED PLACES...: one PASS line, or a FAIL line and the places
fail=0
result() {
	local name=$1 ok=$2 places=$3
	if [ -z "$places" ]; then
		echo "PASS: doc-paths: $ok"
	else
		echo "FAIL: doc-paths: $name:"
		printf '%s\n' "$places" | sed 's/^/  /'
		fail=1
	fi
}

top='bpf|daemon|userspace-lib|systemd|man|tests|cli|report|bench|docs|scripts|examples|debian'
top="$top|\\.ci"
ext='c|h|cc|md|sh|mk|py|lib|inc|service|socket|conf|in|map|[1-8]'
file="[A-Za-z0-9_./-]*\.($ext)\b"
folder='([A-Za-z0-9_-]+/)+([^A-Za-z0-9_.*%/-]|$)'
n=0 missing=
while IFS= read -r hit; do
	loc=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; path=${rest#*:}
	case $path in '<'*) continue ;; esac
	path=${path#[^a-z.]}
	path=${path%[^A-Za-z0-9_/-]}
	n=$((n + 1))
	[ -e "$path" ] && continue
	# a file the build generates (into $(B)/gen/PATH) is named by its path in the tree
	grep -qsF "gen/$path" -- */build.mk */*.mk */*/*.mk Makefile && continue
	missing+="$loc:$line names '$path'"$'\n'
done < <(tracked | xargs -0 grep -noE "(^|[^A-Za-z0-9_./\$-])($top)/($file|$folder)" 2>/dev/null)
result "paths that are not in the tree" "$n paths named in the tree exist" "${missing%$'\n'}"

# the team's notes sit in a folder beside the checkout (the pattern is split so that this
# file does not name it)
notes=shared
result "files point outside the repository" "no file points outside the repository" \
	"$(grep_tree "\.\./$notes/|$notes/reference")"

# a tracker's numbers: "issue #N", "issues N and M", "holes N, M", "hole N"
num='#?[0-9]'
result "files cite tracker entries instead of saying what they mean" \
	"no file cites a tracker entry" "$(grep_tree -i "\b(issues?|holes?) +$num")"

# a comment that is only a history word: an "Added (why):", a "New:"
w='Added|New|Changed|Moved|Removed|Renamed|Fixed'
result "comments are history notes instead of saying what follows" \
	"no comment is a history note" \
	"$(grep_tree "(/\*|//|#) *($w)( *\([^)]*\))? *(:|\*/|$)|(/\*|//|#) *($w) +since\b")"
exit $fail
