# daemon/: the components between the ring buffer and the files, one folder each, in the order
# a sample meets them:
#   probe/    finds allocator symbols, places and attaches the uprobes, loads the BPF programs
#   engine/   reads the ring buffer: samples, entry tables, frees matched, traces written
#   stacks/   turns a sample's stack into frames (DWARF unwinding of copied stacks, symbols)
#   service/  memprofd: the system service, its D-Bus API and its profiles
# The probe fragment is bpf/build.mk (the programs and their loader are built together).
include daemon/stacks/build.mk
include daemon/engine/build.mk
include daemon/service/build.mk
