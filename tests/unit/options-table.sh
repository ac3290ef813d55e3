#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A profile option is defined once, in the table of userspace-lib/options.h:
#   - no other C file names an option's key or flag as a string of its own ("rate",
#     "stack-copy-size", "--rate"), as a getopt entry, an a{sv} key or a comparison would
#     (the tests and benchmarks aside: they use options, they define none);
#     JSON printers (json_object_object_add) name output fields, not options, memprofctl
#     top's sort keys (sort_names) name columns of its view, and the
#     protocol header's MEMPROF_BUS_OPT_ names are checked equal to the table by test_options;
#   - the default rate's literal 1e-4 is written in the table only (and as the public
#     MEMPROF_PRELOAD_DEFAULT_RATE of <memprof/preload.h>, checked equal by test_options);
#   - the man pages document the table: memprofctl.1 each flag with its short flag and
#     argument, and in its attach section each flag's key in Start's options with its D-Bus
#     signature; memprofd.8's Start points there; every default and maximum the pages state
#     for an option (memprofctl.1's attach item, memprofd.8's note on a key) is the table's.
# The table comes from `test_options --table`: key, signature, flag, short flag, argument,
# default, maximum.
set -u
src=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${MP_BUILD:-$src/build}
bin=$build/tests/unit/test_options
[ -x "$bin" ] || { echo "FAIL: missing $bin (make test-bins)"; exit 1; }
[ -x /usr/bin/python3 ] || { echo "needs /usr/bin/python3"; exit 77; }
cd "$src" || exit 1
command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
	{ echo "not a git checkout"; exit 77; }

"$bin" --table > "${TMPDIR:-/tmp}/options-table.$$" || { echo "FAIL: $bin --table"; exit 1; }
git ls-files -z -- '*.c' '*.h' ':!tests' ':!bench' ':!userspace-lib/options.c' \
	':!userspace-lib/options.h' > "${TMPDIR:-/tmp}/options-files.$$"
exec /usr/bin/python3 - "${TMPDIR:-/tmp}/options-table.$$" "${TMPDIR:-/tmp}/options-files.$$" <<'EOF'
import os, re, sys

rows = [l.split() for l in open(sys.argv[1])]
files = [f for f in open(sys.argv[2]).read().split("\0") if f]
os.unlink(sys.argv[1])
os.unlink(sys.argv[2])
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL: options-table: " + msg)


def code_of(text):
    """The text without its comments (strings kept), line numbers kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text[i] == '"':
            m = re.compile(r'"(?:[^"\\\n]|\\.)*"').match(text, i)
            j = m.end() if m else i + 1
            out.append(text[i:j])
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


names = {}
for key, sig, flag, short, arg, default, top in rows:
    names['"%s"' % key] = "key of option %s" % key
    names['"%s"' % flag] = "flag of option %s" % key
    names['"--%s"' % flag] = "flag of option %s" % key
lit = re.compile(r'"(?:[^"\\\n]|\\.)*"')
for f in files:
    try:
        text = open(f, errors="replace").read()
    except OSError:
        continue
    for no, line in enumerate(code_of(text).split("\n"), 1):
        if "json_object_object_add" in line or "sort_names[]" in line or re.match(r"\s*#define MEMPROF_BUS_OPT_", line):
            continue
        for m in lit.finditer(line):
            if m.group(0) in names:
                fail("%s:%d defines %s outside the table: %s" % (f, no, names[m.group(0)],
                                                                 line.strip()))
    for no, line in enumerate(text.split("\n"), 1):
        if re.search(r"(?<![\w.])1e-4(?![\w.])", line) and \
                not re.match(r"#define MEMPROF_PRELOAD_DEFAULT_RATE\s", line):
            fail("%s:%d writes the default rate 1e-4 outside the table" % (f, no))

ctl = open("man/memprofctl.1").read()
daemon = open("man/memprofd.8").read()
m = re.search(r'^\.SS "attach .*?(?=^\.SS )', ctl, re.M | re.S)
attach = m.group(0) if m else ""
if not attach:
    fail("memprofctl.1 has no attach section")
# the items of the attach section: its tag line, then its text up to the next .TP
items = {}
for it in attach.split("\n.TP\n")[1:]:
    tag, _, text = it.partition("\n")
    fm = re.search(r"\\-\\-((?:[a-z0-9]|\\-)+)", tag)
    if fm:
        items[fm.group(1).replace("\\-", "-")] = text.replace("\n", " ")
if "memprofctl (1)" not in daemon or "profile options of" not in daemon:
    fail("memprofd.8's Start does not point to memprofctl(1) for its options")
for key, sig, flag, short, arg, default, top in rows:
    mflag = r"\-\-" + flag.replace("-", r"\-")
    if mflag not in ctl:
        fail("memprofctl.1 does not document --%s" % flag)
    if short != "-" and not re.search(r'\\%s ", " %s\b' % (re.escape(short), re.escape(mflag)),
                                      ctl):
        fail("memprofctl.1 does not document --%s as %s" % (flag, short))
    if arg != "-" and not re.search(re.escape(mflag) + r' " (\\fI)?%s\b' % arg, ctl):
        fail("memprofctl.1 does not give --%s its argument %s" % (flag, arg))
    text = items.get(flag)
    if text is None:
        fail("memprofctl.1's attach section has no item for --%s" % flag)
        continue
    if not re.search(r"\.B %s \(%s[,)]" % (re.escape(key), re.escape(sig)), text):
        fail("memprofctl.1's attach --%s does not name its Start key %s (%s)" % (flag, key, sig))
    texts = [text]
    dm = re.search(r"^\.B %s\n(.*?)(?=^\.B [a-z_]+\n|^\.TP|^\.PP)" % re.escape(key), daemon,
                   re.M | re.S)
    if dm:
        texts.append(dm.group(1).replace("\n", " "))
    for t in texts:
        said = re.findall(r"\bdefault (\S+?)[,;)]|(\S+?),? the default\b|(\w+)\W+\(default\)", t)
        for d in ["".join(g) for g in said]:
            if d.rstrip("us") != default.rstrip("us") and not (
                    re.match(r"^[0-9.e+-]+$", d) and re.match(r"^[0-9.e+-]+(us)?$", default) and
                    float(d) == float(default.rstrip("us"))):
                fail("the man pages say %s's default is %s, the table %s" % (key, d, default))
        for most in re.findall(r"\bat most (\d+)", t):
            if float(most) != float(top):
                fail("the man pages say %s is at most %s, the table %s" % (key, most, top))

if fails:
    sys.exit(1)
print("PASS: options-table: %d options defined once, in the table and memprofctl.1" %
      len(rows))
EOF
