// SPDX-License-Identifier: LGPL-2.1-or-later
/* Helpers shared by the memtrace writer and reader: the MTF tables. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "userspace-lib/codec/codec.h"

void mtc_mtf_to_front(void *arr, size_t elem, unsigned int i)
{
	uint8_t tmp[32];
	uint8_t *a = arr;

	if (!i || elem > sizeof(tmp))
		return;
	memcpy(tmp, a + i * elem, elem);
	memmove(a + elem, a, i * elem);
	memcpy(a, tmp, elem);
}

static void defs__free(struct mp_mtf_defs *d)
{
	if (!d)
		return;
	for (unsigned int i = 0; i < d->n; i++)
		free(d->s[i]);
	free(d);
}

void mtc_mtf__free(struct mp_mtf *t)
{
	if (!t)
		return;
	for (unsigned int i = 0; i < t->n; i++) {
		free(t->f[i].name);
		defs__free(t->f[i].defs);
	}
	t->n = 0;
}

void mtc_close_keep_errno(int fd)
{
	int err = errno;

	close(fd);
	errno = err;
}
