#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# --help against the man pages and the code, for memprofd, memprofctl and every memprofctl
# command (the commands are read from `memprofctl --help`, never listed here):
#   - the options of each --help and of its man page section are the same: short and long
#     names and argument names (-r, --rate RATE; --preload[=LIB]);
#   - a default --help states is stated by the man page too, with the same value;
#   - the code accepts exactly the options --help lists, with the argument it shows: each
#     long option name in the sources' option tables is tried on each program;
#   - `Usage:` lines, the command table and the man page's command headings agree.
# Man sections: memprofd.8 OPTIONS, memprofctl.1 OPTIONS, memprofctl.1's COMMANDS subsection
# of a command, or memprofctl-CMD.1 OPTIONS when that page exists. -h/--help is listed by
# every --help; memprofctl.1 documents it once for all commands.
set -u

src=${MP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${MP_BUILD:-$src/build}
for f in "$build/bin/memprofctl" "$build/bin/memprofd"; do
	[ -x "$f" ] || { echo "FAIL: missing $f (make all)"; exit 1; }
done
[ -x /usr/bin/python3 ] || { echo "needs /usr/bin/python3"; exit 77; }

exec /usr/bin/python3 - "$src" "$build" <<'EOF'
import os, re, subprocess, sys

src, build = sys.argv[1], sys.argv[2]
CTL, DAEMON = build + "/bin/memprofctl", build + "/bin/memprofd"
fails = 0
block_fails = 0	# failures since the last done()


def result(ok, name, why=""):
    """Each failure is a FAIL line; passes are summed up per program by done()."""
    global fails, block_fails
    if not ok:
        fails += 1
        block_fails += 1
        print("FAIL: " + name + (": " + why if why else ""))


def done(name):
    global block_fails
    if not block_fails:
        print("PASS: %s: --help, man page and code agree" % name)
    block_fails = 0


def run(argv):
    # A socket nobody listens on: no probe may reach a real memprofd.
    env = dict(os.environ, MEMPROFD_SOCKET="/nonexistent/memprofd-test-bus", LC_ALL="C")
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=20,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


# ---- option specs: "-r, --rate RATE" -> ('--rate', '-r', 'RATE') ---------------------------
SPEC = re.compile(r"^(?:(-[A-Za-z0-9]), )?(--[a-z0-9][a-z0-9-]*)(\[=[A-Za-z_.]+\]|[ =][^ ].*)?$")


def parse_spec(text):
    m = SPEC.match(text.strip())
    if not m:
        return None
    arg = (m.group(3) or "").strip()
    return m.group(2), m.group(1) or "", arg.lstrip("=") if not arg.startswith("[") else arg


def defaults_in(text):
    """Values stated as defaults: "(default V", "(default and maximum V", "V (default)",
    "V (the default)"."""
    vals = set()
    for m in re.finditer(r"\(default(?: and maximum)? ([^\s,;)]+)", text):
        vals.add(m.group(1).rstrip(".:").strip('"'))
    for m in re.finditer(r"([^\s(,;]+),? \((?:the )?default[);]", text):
        vals.add(m.group(1).rstrip(".").strip('"'))
    return vals


def help_options(text):
    """{long: (short, arg, description)} from a --help text; continuation lines joined."""
    opts, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^ {1,8}(-.*?)(?:  +(.*))?$", line)
        if m and (m.group(1).startswith("--") or re.match(r"-[A-Za-z0-9], --", m.group(1))):
            spec = parse_spec(m.group(1))
            if not spec:
                result(False, "unparsable --help line", repr(line))
                cur = None
                continue
            cur = spec[0]
            opts[cur] = [spec[1], spec[2], m.group(2) or ""]
        elif cur and re.match(r"^ {9,}\S", line):
            opts[cur][2] += " " + line.strip()
        else:
            cur = None
    return {k: tuple(v) for k, v in opts.items()}


# ---- man pages: a small man(7) renderer, enough for tags and option text ---------------------
def unescape(s):
    s = re.sub(r"\\f(\[[A-Z]*\]|\(..|.)", "", s)
    s = s.replace("\\-", "-").replace("\\(en", "-").replace("\\(em", "-").replace("\\e", "\\")
    s = re.sub(r"\\\((aq)", "'", s)
    s = re.sub(r"\\\(..", "?", s)
    s = s.replace("\\ ", " ").replace("\\&", "").replace("\\|", "")
    return s


def macro_args(rest):
    args, cur, q, i = [], "", False, 0
    while i < len(rest):
        c = rest[i]
        if c == '"':
            q = not q
            i += 1
            continue
        if c == " " and not q:
            if cur:
                args.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        args.append(cur)
    return args


def render(line):
    """One man source line as text; None for requests that print nothing."""
    if line.startswith(".\\\"") or line.startswith("'\\\""):
        return None
    if not line.startswith("."):
        return unescape(line)
    m = re.match(r"^\.([A-Za-z]+)\s*(.*)$", line)
    if not m:
        return None
    name, rest = m.group(1), m.group(2)
    if name in ("B", "I", "SM", "SB"):
        return unescape(" ".join(macro_args(rest)))
    if name in ("BR", "RB", "BI", "IB", "IR", "RI"):
        return unescape("".join(macro_args(rest)))
    return None


def man_sections(path):
    """[(SH title, SS title or '', [lines])] in order."""
    secs, sh, ss = [], "", ""
    with open(path) as f:
        for line in f.read().splitlines():
            m = re.match(r'^\.(SH|SS)\s+"?(.*?)"?\s*$', line)
            if m:
                if m.group(1) == "SH":
                    sh, ss = unescape(m.group(2)), ""
                else:
                    ss = unescape(m.group(2))
                secs.append((sh, ss, []))
            elif secs:
                secs[-1][2].append(line)
    return secs


def man_options(lines, where):
    """{long: (short, arg, body text)} from the .TP/.TQ entries of a section's lines."""
    opts, i, cur = {}, 0, []
    while i < len(lines):
        line = lines[i]
        if line.startswith(".TP") or line.startswith(".TQ"):
            i += 1
            if i >= len(lines):
                break
            tag = render(lines[i]) or ""
            spec = parse_spec(tag) if tag.lstrip().startswith("-") else None
            if spec:
                if line.startswith(".TP"):
                    cur = []
                cur.append(spec[0])
                opts[spec[0]] = [spec[1], spec[2], ""]
            elif tag.lstrip().startswith("-"):
                result(False, "unparsable option tag in " + where, repr(lines[i]))
                cur = []
            else:
                cur = []
        elif line.startswith(".SS") or line.startswith(".SH") or line.startswith(".PP"):
            cur = []
        else:
            t = render(line)
            if t is not None:
                for k in cur:
                    opts[k][2] += " " + t
        i += 1
    return {k: (v[0], v[1], re.sub(r"\s+", " ", v[2]).strip()) for k, v in opts.items()}


def compare(name, helptext, man, where, skip_help_opt=False):
    full = h = help_options(helptext)
    result("--help" in h and h["--help"][0] == "-h", name + " --help lists -h, --help")
    if skip_help_opt:
        h = {k: v for k, v in h.items() if k != "--help"}
        man = {k: v for k, v in man.items() if k != "--help"}
    only_h = sorted(set(h) - set(man))
    only_m = sorted(set(man) - set(h))
    result(not only_h and not only_m, "%s: same options in --help and %s" % (name, where),
           "only in --help: %s; only in the man page: %s" % (only_h, only_m))
    for k in sorted(set(h) & set(man)):
        hs, ha, hd = h[k]
        ms, ma, md = man[k]
        result((hs, ha) == (ms, ma), "%s %s: same short name and argument in --help and %s"
               % (name, k, where), "--help '%s %s', man '%s %s'" % (hs, ha, ms, ma))
        hv, mv = defaults_in(hd), defaults_in(md)
        if hv or mv:
            result(hv == mv, "%s %s: same default in --help and %s" % (name, k, where),
                   "--help says %s, the man page %s" % (sorted(hv) or "nothing",
                                                        sorted(mv) or "nothing"))
    return full


# ---- the code: every option name in the sources' option tables, tried on each program ------
names = set()
for d in ("cli", "daemon", "report"):
    for fn in sorted(os.listdir(os.path.join(src, d))):
        if fn.endswith(".c"):
            with open(os.path.join(src, d, fn)) as f:
                names |= set(re.findall(
                    r'\{\s*"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)_argument', f.read()))


def probe(prefix, opt, value=None):
    """How the program takes --opt: 'unknown', 'none' (no argument), 'required', 'accepted'."""
    # No positional arguments for commands (usage error before any work); memprofd gets a
    # stray one, which stops it after option parsing. The option comes last, so that an
    # option without its value cannot take the stray argument as one.
    stray = ["stray-argument-for-the-test"] if prefix == [DAEMON] else []
    arg = opt if value is None else opt + "=" + value
    rc, out, err = run(prefix + stray + [arg])
    if "unrecognized option" in err or "is ambiguous" in err:
        return "unknown"
    if "doesn't allow an argument" in err:
        return "none"
    if "requires an argument" in err:
        return "required"
    return "accepted"


def check_code(name, prefix, h):
    listed = set(h)
    for n in sorted(names):
        opt = "--" + n
        if opt in listed or any(l.startswith(opt) for l in listed):
            continue	# listed, or a prefix getopt would complete to a listed option
        got = probe(prefix, opt, "x")
        result(got == "unknown", "%s: %s is not accepted unless --help lists it" % (name, opt),
               "the program accepts it")
    for opt, (short, arg, _) in sorted(h.items()):
        if opt in ("--help", "--version"):
            got = probe(prefix, opt, "x")
            result(got == "none", "%s: %s takes no argument" % (name, opt), got)
            continue
        if not arg:
            want, got = "none", probe(prefix, opt, "x")
        elif arg.startswith("["):
            want, got = "accepted", probe(prefix, opt)
        else:
            want, got = "required", probe(prefix, opt)
        result(got == want, "%s: %s %s is accepted as --help shows it" % (name, opt, arg),
               "expected %s, got %s" % (want, got))


# ---- memprofd ------------------------------------------------------------------------------
man8 = os.path.join(src, "man/memprofd.8")
rc, out, _ = run([DAEMON, "--help"])
result(rc == 0, "memprofd --help exits 0")
sec = [s for s in man_sections(man8) if s[0] == "OPTIONS" and not s[1]]
h = compare("memprofd", out, man_options(sec[0][2] if sec else [], "memprofd.8"), "memprofd.8")
check_code("memprofd", [DAEMON], h)
done("memprofd")

# ---- memprofctl and its commands --------------------------------------------------------------
man1 = os.path.join(src, "man/memprofctl.1")
secs = man_sections(man1)
rc, out, _ = run([CTL, "--help"])
result(rc == 0, "memprofctl --help exits 0")
sec = [s for s in secs if s[0] == "OPTIONS" and not s[1]]
h = compare("memprofctl", out, man_options(sec[0][2] if sec else [], "memprofctl.1"),
            "memprofctl.1")
check_code("memprofctl", [CTL], h)

table = {}
m = re.search(r"^Commands:\n((?:  \S.*\n?)+)", out, re.M)
for line in (m.group(1).splitlines() if m else []):
    f = re.match(r"^  (\S+) +(.*?) {2,}(\S.*)$", line) or re.match(r"^  (\S+) {2,}()(\S.*)$", line)
    if f:
        table[f.group(1)] = f.group(2).strip()
result(len(table) >= 2, "memprofctl --help lists its commands", repr(m and m.group(1)))
headings = {s[1].split()[0]: s[1] for s in secs if s[0] == "COMMANDS" and s[1]}
result(set(headings) == set(table), "memprofctl.1 COMMANDS has a subsection per command",
       "only in --help: %s; only in the man page: %s" % (sorted(set(table) - set(headings)),
                                                         sorted(set(headings) - set(table))))
done("memprofctl")
synopsis = " ".join(t for t in (render(l) for s in secs if s[0] == "SYNOPSIS" for l in s[2])
                    if t)
for cmd in sorted(table):
    name = "memprofctl " + cmd
    result(re.search(r"\b%s\b" % re.escape(cmd), synopsis) is not None,
           "memprofctl.1 SYNOPSIS shows " + cmd)
    rc, hout, herr = run([CTL, cmd, "--help"])
    result(rc == 0 and hout, name + " --help exits 0 with the help on stdout")
    u = re.match(r"^Usage: memprofctl %s ?(.*)$" % re.escape(cmd), hout.splitlines()[0] if hout
                 else "")
    usage = u.group(1).strip() if u else None
    result(usage is not None, name + " --help starts with its Usage: line", repr(hout[:80]))
    result(usage == table[cmd], name + ": same arguments in `memprofctl --help` and its Usage",
           "'%s' vs '%s'" % (table[cmd], usage))
    own = os.path.join(src, "man/memprofctl-%s.1" % cmd)
    if os.path.exists(own):
        osecs = man_sections(own)
        sec = [s for s in osecs if s[0] == "OPTIONS" and not s[1]]
        mo = man_options(sec[0][2] if sec else [], os.path.basename(own))
        h = compare(name, hout, mo, os.path.basename(own))
        syn = " ".join(t for t in (render(l) for s in osecs if s[0] == "SYNOPSIS"
                                   for l in s[2]) if t)
        missing = sorted(k for k in h if k != "--help" and k not in syn)
        result(not missing, "%s SYNOPSIS shows every option" % os.path.basename(own),
               "missing %s" % missing)
    else:
        head = headings.get(cmd, "")
        result(usage is not None and head == (cmd + " " + usage).strip(),
               "memprofctl.1 heading '%s' matches the Usage line" % head,
               "Usage: memprofctl %s %s" % (cmd, usage))
        sec = [s for s in secs if s[0] == "COMMANDS" and s[1] == head]
        h = compare(name, hout, man_options(sec[0][2] if sec else [], "memprofctl.1"),
                    "memprofctl.1 (%s)" % cmd, skip_help_opt=True)
    check_code(name, [CTL, cmd], h)
    done(name)

print("%d failures" % fails)
sys.exit(1 if fails else 0)
EOF
