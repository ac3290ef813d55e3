#!/bin/bash
# memprofctl report --flamegraph: the SVG is well-formed XML (xmllint), each frame's tooltip
# carries its value, standard error and share (checked against the JSON report), and headless
# Debian chromium renders it: a wrapper page reads the frames through the DOM, clicks a frame
# (zoom), hovers one (details line) and searches; on a trace with one deep thin stack, both
# orientations keep the heaviest frames in the first 800x600 screen; screenshots at 800x600
# and 1600x900 show flame colours in the top half and across the whole window width.
. "$(dirname "$0")/report.inc"
"$gen" -s 3 -r 0.001 -n 100000 "$tmp/a.ctf" "$tmp/a.json" || { echo "FAIL: gen_trace"; exit 1; }
"$ctl" report -q --json --flamegraph "$tmp/a.svg" "$tmp/a.ctf" >"$tmp/a.rep.json" ||
	{ echo "FAIL: report --flamegraph"; exit 1; }
"$ctl" report -q --live --flamegraph "$tmp/live.svg" "$tmp/a.ctf" >/dev/null ||
	{ echo "FAIL: report --live --flamegraph"; exit 1; }
"$ctl" report -q --flamegraph "$tmp/v3.svg" "$fx/upstream-v3.ctf" >/dev/null ||
	{ echo "FAIL: report --flamegraph fixture"; exit 1; }
# One thin (0.1%) stack 300 frames deep, as an interpreter's recursion makes.
"$gen" -s 3 -r 0.001 -n 100000 -D tiny_nodes=300 -W tiny_nodes=3 "$tmp/deep.ctf" "$tmp/deep.json" ||
	{ echo "FAIL: gen_trace -D"; exit 1; }
"$ctl" report -q --flamegraph "$tmp/deep.svg" "$tmp/deep.ctf" >/dev/null ||
	{ echo "FAIL: report --flamegraph deep"; exit 1; }
"$ctl" report -q --flame-orientation flame --flamegraph "$tmp/deepf.svg" "$tmp/deep.ctf" \
	>/dev/null || { echo "FAIL: report --flame-orientation flame"; exit 1; }
if "$ctl" report -q --flame-orientation up --flamegraph "$tmp/x.svg" "$tmp/deep.ctf" \
	2>"$tmp/orient.err" >/dev/null || ! grep -q "invalid --flame-orientation 'up'" "$tmp/orient.err"
then
	echo "FAIL: flame-orientation-invalid"
else
	echo "PASS: flame-orientation-invalid"
fi

if command -v xmllint >/dev/null; then
	if xmllint --noout "$tmp/a.svg" "$tmp/live.svg" "$tmp/v3.svg" "$tmp/deep.svg" \
		"$tmp/deepf.svg"; then
		echo "PASS: svg-xml"
	else
		echo "FAIL: svg-xml"
	fi
else
	echo "SKIP: svg-xml (xmllint is not installed)"
fi

# Self-contained: no external references.
if grep -Eq '(href|src)=|https?://[^w]|@import|url\(' "$tmp/a.svg"; then
	echo "FAIL: svg-self-contained"; grep -Eo '(href|src)=[^ ]*|https?://[^ "]*' "$tmp/a.svg" | head
else
	echo "PASS: svg-self-contained"
fi

# Structure: one frame per tree node with a tooltip; the sites are the leaves.
if "$py" - "$tmp/a.svg" "$tmp/a.rep.json" <<'EOF'; then echo "PASS: svg-frames"; else echo "FAIL: svg-frames"; fi
import json, sys, xml.etree.ElementTree as ET
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(sys.argv[1]).getroot()
rep = json.load(open(sys.argv[2]))
frames = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("data-d") is not None]
names = {}
for g in frames:
    t = g.find("s:title", ns).text
    names.setdefault(int(g.get("data-d")), []).append((t.split(" (")[0].split(":")[0], float(g.get("data-w"))))
assert names[0][0][0] == "all", names[0]
assert [n for n, _ in names[1]] == ["main"], names[1]
sites = {s["site"]: s["bytes"]["estimate"] for s in rep["sites_by_bytes"]}
leaves = {n: w for d in names for n, w in names[d]}
total = rep["totals"]["bytes"]["estimate"]
full = names[0][0][1]
for s, v in sites.items():
    assert s in leaves, (s, leaves)
    assert abs(leaves[s] / full - v / total) < 0.002, (s, leaves[s] / full, v / total)
assert not any(n in ("malloc", "calloc") or n.startswith("operator new") for n in leaves), leaves
EOF

# Tooltips: "NAME (FILE) [OBJECT]: VALUE ± SE (SE), SHARE% of the total"; a site's leaf frame
# shows the JSON report's estimate, standard error and share (to the printed precision).
if "$py" - "$tmp/a.svg" "$tmp/a.rep.json" <<'EOF'; then echo "PASS: svg-title-se"; else echo "FAIL: svg-title-se"; fi
import json, re, sys, xml.etree.ElementTree as ET
S = "{http://www.w3.org/2000/svg}"
units = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
pat = re.compile(r"^(\S+)[^:]*: ([0-9.]+) (\S+) \u00b1 ([0-9.]+) (\S+) \(SE\), ([0-9.]+)% of the total$")
rep = json.load(open(sys.argv[2]))
total = rep["totals"]["bytes"]["estimate"]
seen = {}
for g in ET.parse(sys.argv[1]).getroot().iter(S + "g"):
    if g.get("data-d") is None:
        continue
    t = g.find(S + "title").text
    m = pat.match(t)
    assert m, t
    # printed with one decimal: within 0.05 of the unit
    seen[m.group(1)] = (float(m.group(2)) * units[m.group(3)], 0.051 * units[m.group(3)],
                        float(m.group(4)) * units[m.group(5)], 0.051 * units[m.group(5)],
                        float(m.group(6)))
def check(name, e):
    v, dv, se, dse, share = seen[name]
    assert abs(v - e["estimate"]) <= dv, (name, v, e)
    assert abs(se - e["se"]) <= dse, (name, se, e)
    assert abs(share - 100 * e["estimate"] / total) < 0.006, (name, share)
for s in rep["sites_by_bytes"]:
    check(s["site"], s["bytes"])
check("all", rep["totals"]["bytes"])
EOF

if ! command -v chromium >/dev/null; then
	echo "SKIP: svg-render (chromium is not installed)"
	exit 0
fi
chrome() {
	timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync \
		--disable-dev-shm-usage --user-data-dir="$tmp/chrome" "$@" 2>>"$tmp/chrome.log"
}

# The wrapper inlines the SVG (its script runs in the page) and reports through the DOM.
{
	echo '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
	sed '1{/^<?xml/d}' "$tmp/a.svg"
	cat <<'EOF'
<pre id="result"></pre>
<script>
var out = [], frames = [], gs = document.getElementsByTagName('g');
for (var i = 0; i < gs.length; i++) if (gs[i].getAttribute('data-d') !== null) frames.push(gs[i]);
function byName(n) { for (var i = 0; i < frames.length; i++) if (frames[i].fg_name === n) return frames[i]; }
function width(f) { return parseFloat(f.getElementsByTagName('rect')[0].getAttribute('width')); }
var d1 = [], all = {};
for (var i = 0; i < frames.length; i++) {
  if (frames[i].getAttribute('data-d') === '1') d1.push(frames[i].fg_name);
  all[frames[i].fg_name] = 1;
}
out.push('RESULT frames=' + frames.length);
out.push('RESULT depth1=' + d1.join(','));
out.push('RESULT names=' + Object.keys(all).sort().join(','));
var t = byName('leak_session'), before = width(t);
t.dispatchEvent(new MouseEvent('click', { bubbles: true }));
var hidden = 0;
for (var i = 0; i < frames.length; i++) if (/hide/.test(frames[i].getAttribute('class'))) hidden++;
var full = fg.svg.getBoundingClientRect().width - 2 * fg.pad;
out.push('RESULT zoom=' + (before < full / 4 && Math.abs(width(t) - full) < 1 ? 'ok' : 'bad ' + before + ' ' + width(t)));
out.push('RESULT hidden=' + hidden);
fg_unzoom();
t.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
out.push('RESULT hover=' + (document.getElementById('fg_details').textContent ===
  t.getElementsByTagName('title')[0].textContent ? 'ok' : 'bad'));
out.push('RESULT unzoom=' + (Math.abs(width(t) - before) < 0.01 ? 'ok' : 'bad'));
out.push('RESULT search=' + fg_search('^(leak_session|cache_grow)$').toFixed(4));
out.push('RESULT matched=' + document.getElementById('fg_matched').textContent);
document.getElementById('result').textContent = '\n' + out.join('\n') + '\n';
</script></body></html>
EOF
} >"$tmp/wrap.html"
chrome --dump-dom "file://$tmp/wrap.html" >"$tmp/dom.html"
grep '^RESULT' "$tmp/dom.html" | sed 's/^/  /'
want=$("$py" -c '
import json, sys
r = json.load(open(sys.argv[1]))
s = {x["site"]: x["bytes"]["estimate"] for x in r["sites_by_bytes"]}
print("%.4f" % ((s["leak_session"] + s["cache_grow"]) / r["totals"]["bytes"]["estimate"]))
print(",".join(sorted(s)))' "$tmp/a.rep.json")
want_search=$(echo "$want" | sed -n 1p)
want_sites=$(echo "$want" | sed -n 2p)
if grep -q '^RESULT depth1=main$' "$tmp/dom.html" &&
   grep -q "^RESULT names=.*$(echo "$want_sites" | sed 's/,/.*/g')" "$tmp/dom.html" &&
   grep -q '^RESULT zoom=ok$' "$tmp/dom.html" && grep -q '^RESULT unzoom=ok$' "$tmp/dom.html" &&
   grep -q '^RESULT hover=ok$' "$tmp/dom.html" &&
   grep -Eq '^RESULT hidden=[1-9]' "$tmp/dom.html" &&
   "$py" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) < 0.002 else 1)' \
	"$(sed -n 's/^RESULT search=//p' "$tmp/dom.html")" "$want_search" &&
   grep -q '^RESULT matched=Matched: ' "$tmp/dom.html"; then
	echo "PASS: svg-render-dom"
else
	echo "FAIL: svg-render-dom (want search $want_search)"; tail -5 "$tmp/chrome.log"
fi

# A PNG decoder with zlib only (no PIL on the machine): decode(path) -> width, height, rows of
# (r, g, b).
cat >"$tmp/png.py" <<'EOF'
import struct, zlib
def decode(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return w, h, rows
def warm(p):
    return p[0] >= 200 and p[2] <= 70 and p[1] <= 235
EOF

# Screenshot of the SVG itself: count flame-coloured pixels.
rm -f "$tmp/shot.png"
chrome --screenshot="$tmp/shot.png" --window-size=1200,160 "file://$tmp/a.svg" >/dev/null
if [ -s "$tmp/shot.png" ] && "$py" - "$tmp/shot.png" "$tmp" <<'EOF'; then echo "PASS: svg-render-screenshot"; else echo "FAIL: svg-render-screenshot"; fi
import sys
sys.path.insert(0, sys.argv[2])
from png import decode, warm
w, h, rows = decode(sys.argv[1])
px = [p for r in rows for p in r]
hot = sum(1 for p in px if warm(p))
white = sum(1 for p in px if p[0] > 240 and p[1] > 240 and p[2] > 230)
colours = len(set(px))
total = w * h
print("  %dx%d: %d flame-coloured pixels (%.1f%%), %d near-white, %d colours" %
      (w, h, hot, 100.0 * hot / total, white, colours))
# 4 full-width levels of 16 px cover ~30% of a 1200x160 shot.
sys.exit(0 if hot > 0.2 * total and colours > 20 else 1)
EOF
cp "$tmp/shot.png" "${MP_SCREENSHOT:-$tmp/shot.png}" 2>/dev/null || true

# The deep thin stack, in both orientations and at two window sizes: the top half of the
# first screen holds flame colours (the bytes), and they reach across the window's width.
ok=1
for o in deep deepf; do
	for size in 800,600 1600,900; do
		shot=$tmp/$o-${size%,*}.png
		rm -f "$shot"
		chrome --screenshot="$shot" --window-size=$size "file://$tmp/$o.svg" >/dev/null
		[ -s "$shot" ] && "$py" - "$shot" "$tmp" <<'EOF' || ok=0
import sys
sys.path.insert(0, sys.argv[2])
from png import decode, warm
w, h, rows = decode(sys.argv[1])
top = rows[:h // 2]
hot = sum(1 for r in top for p in r if warm(p))
right = max((x for r in top for x, p in enumerate(r) if warm(p)), default=-1)
print("  %s %dx%d: %.1f%% of the top half flame-coloured, rightmost at x=%d" %
      (sys.argv[1].rsplit("/", 1)[-1], w, h, 100.0 * hot / (w * len(top)), right))
sys.exit(0 if hot > 0.04 * w * len(top) and right >= 0.97 * w else 1)
EOF
	done
done
[ $ok = 1 ] && echo "PASS: svg-deep-screenshots" || echo "FAIL: svg-deep-screenshots"

# The same trace through the DOM in an 800x600 window: the heaviest sites are in the first
# screen in both orientations (flipped by the in-graph button), the deep frames are hidden
# and said to be, below which frame, and a click on that line zooms in to show the site.
{
	echo '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
	sed '1{/^<?xml/d}' "$tmp/deepf.svg"
	cat <<'EOF'
<pre id="result"></pre>
<script>
var out = [];
function byName(n) { for (var i = 0; i < fg.frames.length; i++) if (fg.frames[i].fg_name === n) return fg.frames[i]; }
function seen(n) {
  var f = byName(n), r = f.getElementsByTagName('rect')[0].getBoundingClientRect();
  return !/hide/.test(f.getAttribute('class')) && r.width > 0 && r.top >= 0 &&
    r.bottom <= window.innerHeight;
}
function check(what) {
  out.push('RESULT ' + what + '=' + (seen('build_index') && seen('cache_grow') ? 'ok' : 'bad') +
           ' tiny=' + (seen('tiny_nodes') ? 'shown' : 'hidden') +
           ' more=' + (/^[0-9]+ deeper frames hidden .* below descend /.test(document.getElementById('fg_more').textContent) ? 'ok' : 'none'));
}
check(fg.flame ? 'flame' : 'icicle');
document.getElementById('fg_flip').dispatchEvent(new MouseEvent('click', { bubbles: true }));
check(fg.flame ? 'flame' : 'icicle');
document.getElementById('fg_more').dispatchEvent(new MouseEvent('click', { bubbles: true }));
out.push('RESULT zoomed=' + (!/hide/.test(byName('tiny_nodes').getAttribute('class')) ? 'ok' : 'bad'));
document.getElementById('result').textContent = '\n' + out.join('\n') + '\n';
</script></body></html>
EOF
} >"$tmp/deep.html"
chrome --window-size=800,600 --dump-dom "file://$tmp/deep.html" >"$tmp/deep.dom"
grep '^RESULT' "$tmp/deep.dom" | sed 's/^/  /'
if grep -q '^RESULT flame=ok tiny=hidden more=ok$' "$tmp/deep.dom" &&
   grep -q '^RESULT icicle=ok tiny=hidden more=ok$' "$tmp/deep.dom" &&
   grep -q '^RESULT zoomed=ok$' "$tmp/deep.dom"; then
	echo "PASS: svg-deep-first-screen"
else
	echo "FAIL: svg-deep-first-screen"
fi
