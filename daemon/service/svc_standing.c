// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Standing profiles: the [Profile] sections of memprofd.conf, each a profile of root's that
 * memprofd starts itself, at its start and whenever a reload finds it missing, of the targets
 * its Target= lines name (a unit, a cgroup, an executable), with the options of Start by their
 * names in CamelCase (Rate=, CallstackSize=, MaxOverhead=, ...). A reload compares each
 * section's settings with those the running profile was started with: a section gone or
 * changed completes its profile's traces (stop, discard), then the new one starts; an
 * unchanged one goes on untouched.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/service/memprofd.h"

#define MP_STANDING_MAX		16
#define MP_STANDING_NAME_MAX	64

/* The option of configuration key @k: CamelCase of its Start key ("callstack_size" ->
 * "CallstackSize", "duration_us" -> "Duration"); files and targets are not settings. */
static const struct mp_option *option_of(const char *k)
{
	for (size_t i = 0; i < MP_OPT__COUNT; i++) {
		const struct mp_option *opt = &mp_options[i];
		char name[64];
		size_t n = 0;
		bool up = true;

		if (opt->type == MP_OPT_T_FILE || opt->type == MP_OPT_T_STRING)
			continue;
		for (const char *s = opt->key; *s && n + 1 < sizeof(name); s++) {
			if (!strcmp(s, "_us"))
				break;
			if (*s == '_') {
				up = true;
				continue;
			}
			name[n++] = up && *s >= 'a' && *s <= 'z' ? (char)(*s - 'a' + 'A') : *s;
			up = false;
		}
		name[n] = '\0';
		if (!strcmp(name, k))
			return opt;
	}
	return NULL;
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > MP_STANDING_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("_.-@", *s)))
			return false;
	return true;
}

int mp_standing__section(struct mp_config *c, unsigned int line, char *err, size_t err_len)
{
	struct mp_standing *s;

	if (c->nstanding == MP_STANDING_MAX) {
		snprintf(err, err_len, "more than %d [Profile] sections", MP_STANDING_MAX);
		return -EINVAL;
	}
	s = realloc(c->standing, (c->nstanding + 1) * sizeof(*s));
	if (!s)
		return -ENOMEM;
	c->standing = s;
	s = &c->standing[c->nstanding++];
	memset(s, 0, sizeof(*s));
	s->line = line;
	mp_opts__init(&s->opts);
	snprintf(s->name, sizeof(s->name), "profile%zu", c->nstanding);
	return 0;
}

/* The setting @k=@v of the last [Profile] section; @err gets the reason (its caller adds the
 * file and line). */
int mp_standing__set(struct mp_config *c, const char *k, const char *v, char *err,
		     size_t err_len)
{
	static const char *const kinds[] = { "unit:", "cgroup:", "exe:" };
	static const enum mp_opt_id ids[] = { MP_OPT_UNIT, MP_OPT_CGROUP, MP_OPT_EXE };
	struct mp_standing *s = &c->standing[c->nstanding - 1];
	const struct mp_option *opt;
	size_t tl = s->text ? strlen(s->text) : 0;
	char *text;
	int r = 0;

	if (!strcmp(k, "Name")) {
		if (!valid_name(v)) {
			snprintf(err, err_len, "invalid profile name '%s': 1 to %d letters, digits "
				 "and _.-@", v, MP_STANDING_NAME_MAX);
			return -EINVAL;
		}
		snprintf(s->name, sizeof(s->name), "%s", v);
	} else if (!strcmp(k, "Target")) {
		size_t i;

		for (i = 0; i < 3 && strncmp(v, kinds[i], strlen(kinds[i])); i++)
			;
		if (i == 3 || !v[strlen(kinds[i])]) {
			snprintf(err, err_len, "invalid target '%s': unit:NAME, cgroup:PATH or "
				 "exe:PATH", v);
			return -EINVAL;
		}
		if (s->strs[i]) {
			snprintf(err, err_len, "a second %s target: one of each kind per profile",
				 kinds[i]);
			return -EINVAL;
		}
		s->strs[i] = strdup(v + strlen(kinds[i]));
		if (!s->strs[i])
			return -ENOMEM;
		r = mp_option__parse(&mp_options[ids[i]], s->strs[i], &s->opts, err, err_len);
	} else if ((opt = option_of(k))) {
		r = mp_option__parse(opt, v, &s->opts, err, err_len);
	} else {
		snprintf(err, err_len, "unknown setting '%s' in a [Profile] section", k);
		return -EINVAL;
	}
	if (r < 0)
		return r;
	/* what the profile was started with: a reload restarts it when this changes */
	text = realloc(s->text, tl + strlen(k) + strlen(v) + 3);
	if (!text)
		return -ENOMEM;
	sprintf(text + tl, "%s=%s\n", k, v);
	s->text = text;
	return 0;
}

int mp_standing__check(const struct mp_config *c, char *err, size_t err_len, unsigned int *line)
{
	for (size_t i = 0; i < c->nstanding; i++) {
		const struct mp_standing *s = &c->standing[i];

		*line = s->line;
		if (!s->strs[0] && !s->strs[1] && !s->strs[2]) {
			snprintf(err, err_len, "[Profile] %s has no Target= (unit:NAME, cgroup:PATH "
				 "or exe:PATH)", s->name);
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(c->standing[j].name, s->name)) {
				snprintf(err, err_len, "a second [Profile] named %s", s->name);
				return -EINVAL;
			}
	}
	return 0;
}

void mp_standing__free_all(struct mp_config *c)
{
	for (size_t i = 0; i < c->nstanding; i++) {
		free(c->standing[i].text);
		for (int k = 0; k < 3; k++)
			free(c->standing[i].strs[k]);
	}
	free(c->standing);
	c->standing = NULL;
	c->nstanding = 0;
}

static const struct mp_standing *section_of(const struct memprofd *d, const char *name)
{
	for (size_t i = 0; i < d->cfg.nstanding; i++)
		if (!strcmp(d->cfg.standing[i].name, name))
			return &d->cfg.standing[i];
	return NULL;
}

/* Complete the traces of standing profile @sp, whose section is gone or changed (@why). */
static void standing_end(struct memprofd *d, struct svc_profile *sp, const char *why)
{
	char err[512] = "";
	int r = 0;

	log_notice("Standing profile %s (profile %" PRIu32 ") %s: completing its traces",
		   sp->standing, sp->id, why);
	if (mp_profile__state(sp->p) == MP_PROFILE_SAMPLING)
		r = svc_profile__stop(d, sp, err, sizeof(err));
	if (r >= 0 && mp_profile__state(sp->p) == MP_PROFILE_STOPPED)
		r = svc_profile__discard(d, sp, err, sizeof(err));
	if (r < 0)
		log_error("Standing profile %s (profile %" PRIu32 "): %s", sp->standing, sp->id,
			  err);
}

void svc_standing__apply(struct memprofd *d)
{
	if (!d->engine)
		return;
	for (struct svc_profile *sp = d->profiles; sp; sp = sp->next) {
		const struct mp_standing *s;

		if (!sp->standing || mp_profile__state(sp->p) == MP_PROFILE_DISCARDED)
			continue;
		s = section_of(d, sp->standing);
		if (!s)
			standing_end(d, sp, "is no longer in the configuration");
		else if (strcmp(s->text ? s->text : "", sp->standing_text))
			standing_end(d, sp, "changed in the configuration");
	}
	for (size_t i = 0; i < d->cfg.nstanding; i++) {
		const struct mp_standing *s = &d->cfg.standing[i];
		struct svc_start_req req = { .uid = 0, .gid = 0, .opts = s->opts };
		struct svc_profile *sp;
		char err[512] = "";
		bool running = false;
		int r;

		for (sp = d->profiles; sp; sp = sp->next)
			if (sp->standing && !strcmp(sp->standing, s->name) &&
			    mp_profile__state(sp->p) != MP_PROFILE_DISCARDED)
				running = true;
		if (running)
			continue;
		r = svc_profile__start(d, &req, &sp, err, sizeof(err));
		if (r < 0) {
			log_error("Standing profile %s (%s:%u) not started: %s", s->name,
				  d->config_path, s->line, err);
			continue;
		}
		sp->standing = strdup(s->name);
		sp->standing_text = strdup(s->text ? s->text : "");
		if (!sp->standing || !sp->standing_text)
			log_error("Standing profile %s: out of memory", s->name);
		log_notice("Standing profile %s started: profile %" PRIu32, s->name, sp->id);
		svc_profile__write_manifest(d, sp);
	}
}
