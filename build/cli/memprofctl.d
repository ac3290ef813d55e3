build/cli/memprofctl.o: cli/memprofctl.c cli/commands.h
cli/commands.h:
