// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A self-contained interactive SVG flame graph of estimated bytes (or live bytes), widths
 * proportional to the estimate: an icicle (the root on top, allocation sites below) by
 * default, or a flame (the root at the bottom). Each frame is a <g class="f"> with a <title>
 * tooltip (value, share, standard error) and data-x/data-w/data-d attributes (its extent as
 * a fraction of the unzoomed graph, and its depth) from which the embedded script lays the
 * graph out again to the window's width, on zoom, on a flip of the orientation and on search.
 * Levels that hold less than FG_SHOWN of the bytes in view are hidden until a zoom, so a deep
 * thin stack cannot push the bytes below the fold. No external resources, so it works offline
 * and from file://.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "userspace-lib/array.h"

#define FG_WIDTH	1200.0
#define FG_PAD		10.0
#define FG_FRAME_H	16
#define FG_TOP		60	/* title, buttons and the details line above the frames */
#define FG_SHOWN	0.01	/* deepest level shown: the last holding 1% of the view */
#define FG_MIN_W	0.1	/* frames narrower than this (px) are not drawn */
#define FG_CHAR_W	7.0	/* estimated glyph width at 12px for label truncation */
#define FG_MAX_NODES	(4u << 20)

struct fg_node {
	uint32_t frame;		/* UINT32_MAX for the root */
	uint32_t parent;
	uint32_t first_child, next_sibling;	/* UINT32_MAX: none */
	unsigned int depth;
	double value, var;	/* estimate and its variance */
	double base, base_var;	/* the base's (--base) */
};

struct fg {
	const struct rp_model *m;
	struct fg_node *nodes;
	size_t n, cap;
	struct mp_hashmap child;	/* (parent << 24 | frame, 1) -> node */
	uint32_t *canon;		/* frame -> first frame of the same function and file */
	FILE *out;
	double scale;		/* px per unit of value */
	double total;
	unsigned int max_depth;
	unsigned int shown;	/* deepest level drawn at first */
	bool flame;		/* root at the bottom */
	double height;
};

static int64_t fg_child(struct fg *g, uint32_t parent, uint32_t frame)
{
	uint64_t key = (uint64_t)parent << 24 | frame;
	const uint64_t *idx = mp_hashmap__find(&g->child, key, 1);
	struct fg_node *nn;

	if (idx)
		return (int64_t)*idx;
	if (g->n >= FG_MAX_NODES)
		return -E2BIG;
	if (MP_ARRAY_RESERVE(g->nodes, g->cap, g->n + 1, 1024))
		return -ENOMEM;
	nn = &g->nodes[g->n];
	nn->frame = frame;
	nn->parent = parent;
	nn->first_child = UINT32_MAX;
	nn->next_sibling = g->nodes[parent].first_child;
	nn->depth = g->nodes[parent].depth + 1;
	nn->value = nn->var = 0;
	nn->base = nn->base_var = 0;
	g->nodes[parent].first_child = (uint32_t)g->n;
	if (mp_hashmap__put(&g->child, key, 1, g->n))
		return -ENOMEM;
	return (int64_t)g->n++;
}

struct canon_key {
	const struct rp_model *m;
	const char *name, *file;
	char buf[32];
};

static bool canon_eq(const void *ctx, uint64_t idx)
{
	const struct canon_key *k = ctx;
	char buf[32];

	return !strcmp(rp_frame__name(k->m, (uint32_t)idx, buf, sizeof(buf)), k->name) &&
	       !strcmp(k->m->frames[idx].file, k->file);
}

/*
 * A flame graph shows functions: frames of one function at different lines (its call sites)
 * merge into one box. Map each frame to the first frame with its name and file.
 */
static int fg_canon(struct fg *g)
{
	const struct rp_model *m = g->m;
	struct mp_hashmap t = { 0 };

	g->canon = malloc((m->nframes ? m->nframes : 1) * sizeof(*g->canon));
	if (!g->canon)
		return -ENOMEM;
	for (size_t i = 0; i < m->nframes; i++) {
		struct canon_key k = { .m = m, .file = m->frames[i].file };
		uint64_t h;
		int64_t idx;

		k.name = rp_frame__name(m, (uint32_t)i, k.buf, sizeof(k.buf));
		h = rp_hash_str(rp_hash_str(3, k.name), k.file);
		idx = rp_index_find(&t, h, canon_eq, &k);
		if (idx < 0) {
			if (mp_hashmap__add_eq(&t, h, i)) {
				mp_hashmap__clear(&t);
				return -ENOMEM;
			}
			idx = (int64_t)i;
		}
		g->canon[i] = (uint32_t)idx;
	}
	mp_hashmap__clear(&t);
	return 0;
}

static void xml_escape(FILE *f, const char *s)
{
	static const char *const entity[256] = {
		['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;",
		['\''] = "&apos;",
	};

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (entity[c])
			fputs(entity[c], f);
		else if (c < 0x20 && c != '\t')
			fputc('?', f);	/* control characters are not allowed in XML 1.0 */
		else
			fputc(c, f);
	}
}

/* Print at most @max UTF-8 characters of @s (".." marks a cut), escaped. */
static void xml_label(FILE *f, const char *s, size_t max)
{
	size_t chars = 0, i = 0, len = strlen(s);
	char *buf;

	while (i < len && chars < max) {
		i++;
		while (i < len && ((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		chars++;
	}
	if (i >= len) {
		xml_escape(f, s);
		return;
	}
	if (max < 3)
		return;
	/* Leave room for "..": back off two characters. */
	for (int k = 0; k < 2 && i > 0; k++) {
		i--;
		while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80)
			i--;
	}
	buf = strndup(s, i);
	if (!buf)
		return;
	xml_escape(f, buf);
	fputs("..", f);
	free(buf);
}

/* Deterministic warm colour per name, as flame graphs conventionally use. */
static void fg_color(const char *name, char *buf, size_t len)
{
	uint64_t h = rp_hash_str(0x12345, name);
	unsigned int v1 = h & 0xff, v2 = (h >> 8) & 0xff, v3 = (h >> 16) & 0xff;

	snprintf(buf, len, "rgb(%u,%u,%u)", 205 + 50 * v3 / 255, 230 * v1 / 255, 55 * v2 / 255);
}

/*
 * A difference's colour: red where the frame grew from the base, blue where it shrank, paler
 * as the change is smaller relative to the larger of the two values.
 */
static void fg_diff_color(const struct fg_node *nd, char *buf, size_t len)
{
	double big = fmax(nd->value, nd->base);
	double rel = big > 0 ? (nd->value - nd->base) / big : 0;
	unsigned int pale = (unsigned int)lround(235 * (1 - fabs(rel)));

	if (rel >= 0)
		snprintf(buf, len, "rgb(255,%u,%u)", pale, pale);
	else
		snprintf(buf, len, "rgb(%u,%u,255)", pale, pale);
}

static int cmp_child(const void *a, const void *b, void *ctx)
{
	const struct fg *g = ctx;
	const struct fg_node *x = &g->nodes[*(const uint32_t *)a];
	const struct fg_node *y = &g->nodes[*(const uint32_t *)b];
	char b1[32], b2[32];

	return strcmp(rp_frame__name(g->m, x->frame, b1, sizeof(b1)),
		      rp_frame__name(g->m, y->frame, b2, sizeof(b2)));
}

/* "12.3 KiB ± 1.2 KiB" */
static void fg_est(FILE *f, double value, double var)
{
	char vbuf[32], sbuf[32];

	fprintf(f, "%s \u00b1 %s", mp_fmt_bytes(value, vbuf, sizeof(vbuf)),
		mp_fmt_bytes(sqrt(fmax(var, 0)), sbuf, sizeof(sbuf)));
}

static void fg_frame(struct fg *g, uint32_t ni, double x, unsigned int depth)
{
	const struct fg_node *nd = &g->nodes[ni];
	double w = nd->value * g->scale, full = FG_WIDTH - 2 * FG_PAD;
	double y = g->flame ? g->height - FG_PAD - (double)(depth + 1) * FG_FRAME_H
			    : FG_TOP + (double)depth * FG_FRAME_H;
	char nbuf[32], color[32];
	const char *name;
	FILE *f = g->out;

	if (nd->frame == UINT32_MAX) {
		name = "all";
		snprintf(color, sizeof(color), "rgb(200,200,200)");
	} else {
		name = rp_frame__name(g->m, nd->frame, nbuf, sizeof(nbuf));
		fg_color(name, color, sizeof(color));
	}
	if (g->m->has_base)
		fg_diff_color(nd, color, sizeof(color));
	fprintf(f, "<g class=\"f%s\" data-x=\"%.6f\" data-w=\"%.6f\" data-d=\"%u\"><title>",
		depth > g->shown ? " hide" : "", (x - FG_PAD) / full, w / full, depth);
	xml_escape(f, name);
	if (nd->frame != UINT32_MAX) {
		const struct rp_frame *fr = &g->m->frames[nd->frame];

		if (fr->file[0]) {
			fputs(" (", f);
			xml_escape(f, fr->file);
			fputs(")", f);
		}
		fputs(" [", f);
		xml_escape(f, fr->object);
		fputs("]", f);
	}
	fputs(": ", f);
	fg_est(f, nd->value, nd->var);
	fprintf(f, " (SE), %.2f%% of the total", g->total > 0 ? 100.0 * nd->value / g->total : 0.0);
	if (g->m->has_base) {
		char bbuf[32];

		fprintf(f, "; base %s, change %s", mp_fmt_bytes(nd->base, bbuf, sizeof(bbuf)),
			nd->value > nd->base ? "+" : "");
		fg_est(f, nd->value - nd->base, nd->var + nd->base_var);
		fputs(" (SE)", f);
	}
	fputs("</title>", f);
	fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
		"rx=\"2\" ry=\"2\"/><text x=\"%.2f\" y=\"%.1f\">", x, y, w, FG_FRAME_H - 1, color,
		x + 3, y + 11.5);
	xml_label(f, name, w > 3 * FG_CHAR_W ? (size_t)((w - 6) / FG_CHAR_W) : 0);
	fputs("</text></g>\n", f);
}

/* Depth-first layout without recursion: an explicit stack of (node, x, depth). */
static int fg_layout(struct fg *g)
{
	struct item {
		uint32_t node;
		unsigned int depth;
		double x;
	} *stack = NULL;
	uint32_t *kids = NULL;
	size_t sp = 0, cap = 0, kcap = 0;
	int err = 0;

	stack = malloc(64 * sizeof(*stack));
	if (!stack)
		return -ENOMEM;
	cap = 64;
	stack[sp++] = (struct item){ 0, 0, FG_PAD };
	while (sp) {
		struct item it = stack[--sp];
		size_t nk = 0;
		double x;

		fg_frame(g, it.node, it.x, it.depth);
		for (uint32_t c = g->nodes[it.node].first_child; c != UINT32_MAX;
		     c = g->nodes[c].next_sibling) {
			if (g->nodes[c].value * g->scale < FG_MIN_W)
				continue;
			if (MP_ARRAY_RESERVE(kids, kcap, nk + 1, 64)) {
				err = -ENOMEM;
				goto out;
			}
			kids[nk++] = c;
		}
		if (nk > 1)
			qsort_r(kids, nk, sizeof(*kids), cmp_child, g);
		if (MP_ARRAY_RESERVE(stack, cap, sp + nk, 64)) {
			err = -ENOMEM;
			goto out;
		}
		/* Push right to left so the leftmost child is drawn first. */
		x = it.x;
		for (size_t i = 0; i < nk; i++)
			x += g->nodes[kids[i]].value * g->scale;
		for (size_t i = nk; i-- > 0;) {
			x -= g->nodes[kids[i]].value * g->scale;
			stack[sp++] = (struct item){ kids[i], it.depth + 1, x };
		}
	}
out:
	free(stack);
	free(kids);
	return err;
}

/*
 * The embedded viewer: layout to the window's width (again on resize), hover details, click
 * to zoom, flip between icicle and flame, search (button or Ctrl-F), Escape to reset. Plain
 * ES5 so any browser runs it; it only uses the ids and data-* attributes above.
 */
static const char fg_script[] =
	"var fg = { frames: [], charw: 7, pad: 10, top: 60, fh: 16, shown: 0.01, zoom: null };\n"
	"function fg_el(id) { return document.getElementById(id); }\n"
	"function fg_rect(g) { return g.getElementsByTagName('rect')[0]; }\n"
	"function fg_num(g, a) { return parseFloat(g.getAttribute(a)); }\n"
	"function fg_name(g) {\n"
	"  var t = g.getElementsByTagName('title')[0].textContent;\n"
	"  var i = t.lastIndexOf(': ');\n"
	"  if (i >= 0) t = t.substring(0, i);\n"
	"  var j = t.indexOf(' (');\n"
	"  if (j < 0) j = t.indexOf(' [');\n"
	"  return j >= 0 ? t.substring(0, j) : t;\n"
	"}\n"
	"function fg_label(g, x, y, w) {\n"
	"  var txt = g.getElementsByTagName('text')[0], n = Math.floor((w - 6) / fg.charw);\n"
	"  txt.setAttribute('x', x + 3);\n"
	"  txt.setAttribute('y', y + 11.5);\n"
	"  if (w < 3 * fg.charw) { txt.textContent = ''; return; }\n"
	"  var name = g.fg_name;\n"
	"  txt.textContent = name.length <= n ? name : name.substring(0, Math.max(n - 2, 0)) + '..';\n"
	"}\n"
	"function fg_details(s) { fg_el('fg_details').textContent = s; }\n"
	"function fg_place(f, x, y, w, cls) {\n"
	"  var r = fg_rect(f);\n"
	"  r.setAttribute('x', x);\n"
	"  r.setAttribute('y', y);\n"
	"  r.setAttribute('width', w);\n"
	"  f.setAttribute('class', cls);\n"
	"  fg_label(f, x, y, w);\n"
	"}\n"
	"/* Lay everything out for the window's width, the zoomed frame and the orientation. */\n"
	"function fg_draw() {\n"
	"  var W = Math.max(Math.floor(fg.svg.getBoundingClientRect().width), 300);\n"
	"  var full = W - 2 * fg.pad, z = fg.zoom, eps = 0.000001;\n"
	"  var zx = z ? fg_num(z, 'data-x') : 0, zw = z ? fg_num(z, 'data-w') : 1;\n"
	"  var zd = z ? fg_num(z, 'data-d') : 0, level = [], shown = 0, hidden = 0, i, k;\n"
	"  var below = [], under = {};\n"
	"  for (i = 0; i < fg.frames.length; i++) {\n"
	"    var f = fg.frames[i], x = fg_num(f, 'data-x'), w = fg_num(f, 'data-w');\n"
	"    var d = fg_num(f, 'data-d');\n"
	"    f.fg_in = d >= zd && x >= zx - eps && x + w <= zx + zw + eps;\n"
	"    f.fg_up = d < zd && x <= zx + eps && x + w >= zx + zw - eps;\n"
	"    if (f.fg_in) level[d - zd] = (level[d - zd] || 0) + w;\n"
	"  }\n"
	"  /* The deepest level holding a share of the view: thin deep stacks wait for a zoom. */\n"
	"  for (k = 0; k < level.length; k++)\n"
	"    if (level[k] >= fg.shown * zw - eps) shown = k;\n"
	"  var maxd = zd + shown, H = fg.top + (maxd + 1) * fg.fh + fg.pad;\n"
	"  for (i = 0; i < fg.frames.length; i++) {\n"
	"    var f = fg.frames[i], d = fg_num(f, 'data-d');\n"
	"    var y = fg.flame ? H - fg.pad - (d + 1) * fg.fh : fg.top + d * fg.fh;\n"
	"    if (f.fg_in && d > maxd) hidden++;\n"
	"    if (f.fg_in && d == maxd + 1) below.push(fg_num(f, 'data-x'));\n"
	"    if (f.fg_in && d <= maxd)\n"
	"      fg_place(f, (fg_num(f, 'data-x') - zx) / zw * full + fg.pad, y,\n"
	"               fg_num(f, 'data-w') / zw * full, 'f');\n"
	"    else if (f.fg_up)\n"
	"      fg_place(f, fg.pad, y, full, 'f parent');\n"
	"    else\n"
	"      f.setAttribute('class', 'f hide');\n"
	"  }\n"
	"  fg.svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);\n"
	"  fg.svg.setAttribute('height', H);\n"
	"  fg_el('fg_bg').setAttribute('width', W);\n"
	"  fg_el('fg_bg').setAttribute('height', H);\n"
	"  fg_el('fg_title').setAttribute('x', W / 2);\n"
	"  fg_el('fg_search').setAttribute('x', W - fg.pad - 110);\n"
	"  fg_el('fg_reset').setAttribute('x', W - fg.pad - 50);\n"
	"  fg_el('fg_matched').setAttribute('x', W - fg.pad - 130);\n"
	"  /* The frames the hidden ones hang from; clicking the line zooms into the widest. */\n"
	"  fg.more = null;\n"
	"  for (i = 0; i < fg.frames.length; i++) {\n"
	"    var f = fg.frames[i], x = fg_num(f, 'data-x'), w = fg_num(f, 'data-w');\n"
	"    if (!f.fg_in || fg_num(f, 'data-d') != maxd) continue;\n"
	"    for (k = 0; k < below.length; k++)\n"
	"      if (below[k] >= x - eps && below[k] < x + w + eps) {\n"
	"        under[f.fg_name] = 1;\n"
	"        if (!fg.more || w > fg_num(fg.more, 'data-w')) fg.more = f;\n"
	"      }\n"
	"  }\n"
	"  var names = Object.keys(under).sort();\n"
	"  fg_el('fg_more').textContent = hidden ? hidden + ' deeper frames hidden (each ' +\n"
	"    'level under ' + 100 * fg.shown + '% of the view), below ' +\n"
	"    names.slice(0, 3).join(', ') +\n"
	"    (names.length > 3 ? ', ...' : '') + ' (click here to zoom)' : '';\n"
	"  /* The title shrinks to fit between the buttons. */\n"
	"  var t = fg_el('fg_title');\n"
	"  t.style.fontSize = '';\n"
	"  if (t.getComputedTextLength && t.getComputedTextLength() > W - 260)\n"
	"    t.style.fontSize = Math.max(8, 17 * (W - 260) / t.getComputedTextLength()) + 'px';\n"
	"  fg_el('fg_flip').textContent = fg.flame ? 'Icicle' : 'Flame';\n"
	"  fg_el('fg_unzoom').setAttribute('class', z ? '' : 'hide');\n"
	"}\n"
	"function fg_zoom(g) { fg.zoom = g; fg_draw(); }\n"
	"function fg_unzoom() { fg.zoom = null; fg_draw(); }\n"
	"function fg_flip() { fg.flame = !fg.flame; fg_draw(); }\n"
	"function fg_search(term) {\n"
	"  var re, total = 0, spans = [], end = -1;\n"
	"  if (term === undefined) term = prompt('Search frames (regular expression)', '');\n"
	"  if (term === null) return;\n"
	"  try { re = new RegExp(term); } catch (e) { fg_details('bad regular expression'); return; }\n"
	"  var tw = fg_num(fg.frames[0], 'data-w');\n"
	"  for (var i = 0; i < fg.frames.length; i++) {\n"
	"    var f = fg.frames[i], r = fg_rect(f);\n"
	"    if (term !== '' && re.test(f.fg_name)) {\n"
	"      r.setAttribute('fill', 'rgb(230,0,230)');\n"
	"      spans.push([fg_num(f, 'data-x'), fg_num(f, 'data-w')]);\n"
	"    } else {\n"
	"      r.setAttribute('fill', f.fg_fill);\n"
	"    }\n"
	"  }\n"
	"  /* Nested matches count once: sum the outermost spans. */\n"
	"  spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });\n"
	"  for (var k = 0; k < spans.length; k++) {\n"
	"    if (spans[k][0] >= end - 0.000001) {\n"
	"      total += spans[k][1];\n"
	"      end = spans[k][0] + spans[k][1];\n"
	"    }\n"
	"  }\n"
	"  var frac = tw > 0 ? total / tw : 0;\n"
	"  fg_el('fg_matched').textContent =\n"
	"    term === '' ? '' : 'Matched: ' + (100 * frac).toFixed(1) + '%';\n"
	"  fg_el('fg_reset').setAttribute('class', term === '' ? 'hide' : '');\n"
	"  return frac;\n"
	"}\n"
	"function fg_init() {\n"
	"  var gs = document.getElementsByTagName('g');\n"
	"  fg.svg = fg_el('fg_frames').ownerSVGElement;\n"
	"  fg.flame = fg.svg.getAttribute('data-orientation') === 'flame';\n"
	"  for (var i = 0; i < gs.length; i++)\n"
	"    if (gs[i].getAttribute('data-d') !== null) fg.frames.push(gs[i]);\n"
	"  /* The glyph width of the frames' font, for cutting labels. */\n"
	"  var probe = fg.frames[0].getElementsByTagName('text')[0], saved = probe.textContent;\n"
	"  probe.textContent = 'MMMMMMMMMM';\n"
	"  if (probe.getComputedTextLength)\n"
	"    fg.charw = probe.getComputedTextLength() / 10 || fg.charw;\n"
	"  probe.textContent = saved;\n"
	"  fg.frames.forEach(function (f) {\n"
	"    f.fg_name = fg_name(f);\n"
	"    f.fg_fill = fg_rect(f).getAttribute('fill');\n"
	"    f.addEventListener('click', function (e) { fg_zoom(f); e.stopPropagation(); });\n"
	"    f.addEventListener('mouseover', function () {\n"
	"      fg_details(f.getElementsByTagName('title')[0].textContent);\n"
	"    });\n"
	"    f.addEventListener('mouseout', function () { fg_details(' '); });\n"
	"  });\n"
	"  function on(id, fn) { fg_el(id).addEventListener('click', fn); }\n"
	"  on('fg_unzoom', fg_unzoom);\n"
	"  on('fg_flip', fg_flip);\n"
	"  on('fg_more', function () { if (fg.more) fg_zoom(fg.more); });\n"
	"  on('fg_search', function () { fg_search(); });\n"
	"  on('fg_reset', function () { fg_search(''); });\n"
	"  window.addEventListener('resize', fg_draw);\n"
	"  window.addEventListener('keydown', function (e) {\n"
	"    if ((e.ctrlKey || e.metaKey) && e.key === 'f') {\n"
	"      e.preventDefault();\n"
	"      fg_search();\n"
	"    } else if (e.key === 'Escape') {\n"
	"      fg_unzoom();\n"
	"      fg_search('');\n"
	"    }\n"
	"  });\n"
	"  fg_draw();\n"
	"}\n"
	"fg_init();\n";

static void fg_header(struct fg *g, const char *title)
{
	FILE *f = g->out;
	double height = g->height;
	char tb[32];

	/* 100% wide; the script sets the viewBox to the window's width in px (text stays 12px). */
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
		"<svg version=\"1.1\" width=\"100%%\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
		"data-orientation=\"%s\" xmlns=\"http://www.w3.org/2000/svg\">\n", height,
		FG_WIDTH, height, g->flame ? "flame" : "icicle");
	fputs("<style type=\"text/css\">\n"
	      "text { font-family: monospace; font-size: 12px; fill: #000; }\n"
	      "#fg_title { font-size: 17px; text-anchor: middle; }\n"
	      ".f { cursor: pointer; }\n"
	      ".f:hover rect { stroke: #000; stroke-width: 0.5; }\n"
	      ".f text { pointer-events: none; }\n"
	      ".parent { opacity: 0.6; }\n"
	      ".hide { display: none; }\n"
	      ".button { cursor: pointer; fill: #333; }\n"
	      "</style>\n", f);
	fprintf(f, "<rect id=\"fg_bg\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" "
		"fill=\"#f4f4f0\"/>\n", FG_WIDTH, height);
	fprintf(f, "<text id=\"fg_title\" x=\"%.0f\" y=\"24\">", FG_WIDTH / 2);
	xml_escape(f, title);
	fprintf(f, " (total %s)</text>\n", mp_fmt_bytes(g->total, tb, sizeof(tb)));
	fprintf(f, "<text id=\"fg_unzoom\" class=\"hide\" x=\"%.0f\" y=\"24\">"
		"<tspan class=\"button\">Reset zoom</tspan></text>\n", FG_PAD + 60);
	fprintf(f, "<text x=\"%.0f\" y=\"24\"><tspan id=\"fg_flip\" class=\"button\">%s"
		"</tspan></text>\n", FG_PAD, g->flame ? "Icicle" : "Flame");
	fprintf(f, "<text id=\"fg_search\" x=\"%.0f\" y=\"24\"><tspan class=\"button\">"
		"Search</tspan></text>\n", FG_WIDTH - FG_PAD - 110);
	fprintf(f, "<text id=\"fg_reset\" class=\"hide\" x=\"%.0f\" y=\"24\"><tspan "
		"class=\"button\">Clear</tspan></text>\n", FG_WIDTH - FG_PAD - 50);
	fprintf(f, "<text id=\"fg_details\" x=\"%.0f\" y=\"44\"> </text>\n", FG_PAD);
	fprintf(f, "<text id=\"fg_more\" class=\"button\" x=\"%.0f\" y=\"%.0f\"> </text>\n", FG_PAD,
		FG_TOP - 5.0);
	fprintf(f, "<text id=\"fg_matched\" x=\"%.0f\" y=\"44\"> </text>\n",
		FG_WIDTH - FG_PAD - 130);
}

int rp_write_flamegraph(const struct rp_model *m, const char *path)
{
	struct fg g = { .m = m };
	double *level = NULL;
	char *buf = NULL;
	size_t len = 0;
	int err = 0;

	g.nodes = calloc(1024, sizeof(*g.nodes));
	if (!g.nodes) {
		err = -ENOMEM;
		goto out;
	}
	err = fg_canon(&g);
	if (err)
		goto out;
	g.cap = 1024;
	g.nodes[0] = (struct fg_node){ .frame = UINT32_MAX, .parent = UINT32_MAX,
				       .first_child = UINT32_MAX, .next_sibling = UINT32_MAX };
	g.n = 1;
	for (size_t si = 0; si < m->nstacks; si++) {
		const struct rp_stack *s = &m->stacks[si];
		const struct rp_stackval *sv = &m->stack_vals[si];
		double v = m->opts.live ? sv->live_bytes : sv->bytes;
		double bv = m->opts.live ? sv->base_live_bytes : sv->base_bytes;
		double var = m->opts.live ? sv->live_bytes_var : sv->bytes_var;
		double bvar = m->opts.live ? sv->base_live_bytes_var : sv->base_bytes_var;
		uint32_t cur = 0;

		if (!(v > 0) && !(bv > 0))
			continue;
		g.nodes[0].value += v;
		g.nodes[0].var += var;
		g.nodes[0].base += bv;
		g.nodes[0].base_var += bvar;
		for (uint32_t i = 0; i < s->eff_len; i++) {
			int64_t c = fg_child(&g, cur, g.canon[m->stack_frames[s->off + i]]);

			if (c < 0) {
				err = (int)c;
				goto out;
			}
			cur = (uint32_t)c;
			g.nodes[cur].value += v;
			g.nodes[cur].var += var;
			g.nodes[cur].base += bv;
			g.nodes[cur].base_var += bvar;
			if (i + 1 > g.max_depth)
				g.max_depth = i + 1;
		}
	}
	g.total = g.nodes[0].value;
	g.scale = g.total > 0 ? (FG_WIDTH - 2 * FG_PAD) / g.total : 0;
	/* As the script does: the deepest level holding FG_SHOWN of the bytes sets the height. */
	level = calloc(g.max_depth + 1, sizeof(*level));
	if (!level) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < g.n; i++)
		level[g.nodes[i].depth] += g.nodes[i].value;
	for (unsigned int d = 0; d <= g.max_depth; d++)
		if (level[d] >= FG_SHOWN * g.total * (1 - 1e-6))
			g.shown = d;
	g.flame = m->opts.flame;
	g.height = FG_TOP + FG_PAD + (double)(g.shown + 1) * FG_FRAME_H;

	g.out = open_memstream(&buf, &len);
	if (!g.out) {
		err = -errno;
		goto out;
	}
	if (m->has_base)
		fg_header(&g, m->opts.live ?
			  "Live bytes at the end, new vs base: red grew, blue shrank "
			  "(widths: new)" :
			  "Allocated bytes, new vs base: red grew, blue shrank (widths: new)");
	else
		fg_header(&g, m->opts.live ? "Estimated live bytes at the end"
						   : "Estimated allocated bytes");
	fputs("<g id=\"fg_frames\">\n", g.out);
	err = fg_layout(&g);
	fputs("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n", g.out);
	fputs(fg_script, g.out);
	fputs("]]></script>\n</svg>\n", g.out);
	if (fclose(g.out) && !err)
		err = -EIO;
	if (!err)
		err = rp_write_output(path, buf, len);
out:
	free(level);
	free(buf);
	free(g.nodes);
	free(g.canon);
	mp_hashmap__clear(&g.child);
	return err;
}
