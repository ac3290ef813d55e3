// SPDX-License-Identifier: LGPL-2.1-or-later
/* memprofctl discard ID: complete a stopped profile's traces and stop tracking its blocks. */
#include <stdbool.h>

#include "cli/commands.h"
#include "cli/ctl_bus.h"

int cmd_discard(int argc, char **argv)
{
	return ctl_stop_or_discard(argc, argv, true);
}
