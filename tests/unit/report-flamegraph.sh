#!/bin/bash
# memprofctl report --flamegraph: the SVG is well-formed XML (xmllint), and headless Debian
# chromium renders it: a wrapper page reads the frames through the DOM, clicks a frame
# (zoom) and searches, and a screenshot shows the flame colours over a good part of the image.
set -u
ctl=$MP_BUILD/bin/memprofctl
gen=$MP_BUILD/tests/unit/gen_trace
fx=$MP_SRC/tests/fixtures/memtrace
py=/usr/bin/python3
tmp=${MP_TMP:-$(mktemp -d)}

for f in "$ctl" "$gen"; do
	[ -x "$f" ] || { echo "FAIL: setup ($f is not built)"; exit 1; }
done
"$gen" -s 3 -r 0.001 -n 100000 "$tmp/a.ctf" "$tmp/a.json" || { echo "FAIL: gen_trace"; exit 1; }
"$ctl" report -q --json --flamegraph "$tmp/a.svg" "$tmp/a.ctf" >"$tmp/a.rep.json" ||
	{ echo "FAIL: report --flamegraph"; exit 1; }
"$ctl" report -q --live --flamegraph "$tmp/live.svg" "$tmp/a.ctf" >/dev/null ||
	{ echo "FAIL: report --live --flamegraph"; exit 1; }
"$ctl" report -q --flamegraph "$tmp/v3.svg" "$fx/upstream-v3.ctf" >/dev/null ||
	{ echo "FAIL: report --flamegraph fixture"; exit 1; }

if command -v xmllint >/dev/null; then
	if xmllint --noout "$tmp/a.svg" "$tmp/live.svg" "$tmp/v3.svg"; then
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
out.push('RESULT zoom=' + (before < 300 && width(t) > 1100 ? 'ok' : 'bad ' + before + ' ' + width(t)));
out.push('RESULT hidden=' + hidden);
fg_unzoom();
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
   grep -Eq '^RESULT hidden=[1-9]' "$tmp/dom.html" &&
   "$py" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) < 0.002 else 1)' \
	"$(sed -n 's/^RESULT search=//p' "$tmp/dom.html")" "$want_search" &&
   grep -q '^RESULT matched=Matched: ' "$tmp/dom.html"; then
	echo "PASS: svg-render-dom"
else
	echo "FAIL: svg-render-dom (want search $want_search)"; tail -5 "$tmp/chrome.log"
fi

# Screenshot of the SVG itself: decode the PNG (zlib only) and count flame-coloured pixels.
rm -f "$tmp/shot.png"
chrome --screenshot="$tmp/shot.png" --window-size=1200,160 "file://$tmp/a.svg" >/dev/null
if [ -s "$tmp/shot.png" ] && "$py" - "$tmp/shot.png" <<'EOF'; then echo "PASS: svg-render-screenshot"; else echo "FAIL: svg-render-screenshot"; fi
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
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
warm = white = 0
colours = set()
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
    for x in range(0, stride, bpp):
        r, g, bl = line[x], line[x + 1], line[x + 2]
        colours.add((r, g, bl))
        if r >= 200 and bl <= 70 and g <= 235:
            warm += 1
        if r > 240 and g > 240 and bl > 230:
            white += 1
    prev = line
total = w * h
print("  %dx%d: %d flame-coloured pixels (%.1f%%), %d near-white, %d colours" %
      (w, h, warm, 100.0 * warm / total, white, len(colours)))
# The graph is 150 px high: 4 full-width levels of 16 px cover ~30% of a 1200x160 shot.
sys.exit(0 if warm > 0.2 * total and len(colours) > 20 else 1)
EOF
cp "$tmp/shot.png" "${MP_SCREENSHOT:-$tmp/shot.png}" 2>/dev/null || true
