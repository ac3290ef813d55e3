#!/usr/bin/python3
# Seeds for the control API's fuzzer (tests/fuzz/fuzz_bus.c): each file is a byte saying who
# connects (bit 0: uid 65534) and how the rest is read (bit 1: a program of messages built
# with sd-bus, BUILT below), then for the raw mode what that client sends after
# authenticating, one or more little-endian D-Bus method calls without a destination
# (peer to peer), one per call memprofd serves (and a few it refuses), with typical and edge
# arguments. The fuzzer mutates them; tests/unit/fuzz-bus.sh runs it on this directory's
# corpus-bus/. Regenerate with: tests/fuzz/gen-bus-corpus.py tests/fuzz/corpus-bus
import os
import struct
import sys

ALIGN = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8, "h": 4,
         "s": 4, "o": 4, "g": 1, "a": 4, "(": 8, "{": 8, "v": 1}
FMT = {"y": "<B", "b": "<I", "n": "<h", "q": "<H", "i": "<i", "u": "<I", "x": "<q",
       "t": "<Q", "d": "<d", "h": "<I"}


def one_type(sig, i=0):
    """The end of the complete type that starts at sig[i]."""
    c = sig[i]
    if c == "a":
        return one_type(sig, i + 1)
    if c in "({":
        close, depth, j = ")" if c == "(" else "}", 0, i
        while True:
            depth += sig[j] in "({"
            depth -= sig[j] in ")}"
            if depth == 0:
                return j + 1
            j += 1
    return i + 1


def types(sig):
    out, i = [], 0
    while i < len(sig):
        j = one_type(sig, i)
        out.append(sig[i:j])
        i = j
    return out


def pad(b, n):
    b.extend(b"\0" * (-len(b) % n))


def marshal(b, t, v):
    c = t[0]
    pad(b, ALIGN[c])
    if c in FMT:
        b.extend(struct.pack(FMT[c], v))
    elif c in "so":
        e = v.encode()
        b.extend(struct.pack("<I", len(e)) + e + b"\0")
    elif c == "g":
        e = v.encode()
        b.extend(bytes([len(e)]) + e + b"\0")
    elif c == "v":
        vt, vv = v
        marshal(b, "g", vt)
        marshal(b, vt, vv)
    elif c == "a":
        at = len(b)
        b.extend(b"\0\0\0\0")
        et = t[1:]
        pad(b, ALIGN[et[0]])
        start = len(b)
        items = v.items() if et[0] == "{" else v
        for item in items:
            marshal(b, et, item)
        struct.pack_into("<I", b, at, len(b) - start)
    elif c in "({":
        for st, sv in zip(types(t[1:-1]), v):
            marshal(b, st, sv)
    else:
        raise ValueError(t)


def call(serial, path, iface, member, sig="", args=()):
    body = bytearray()
    for t, v in zip(types(sig), args):
        marshal(body, t, v)
    fields = [(1, ("o", path)), (3, ("s", member))]
    if iface:
        fields.insert(1, (2, ("s", iface)))
    if sig:
        fields.append((8, ("g", sig)))
    h = bytearray(b"l\x01\x00\x01" + struct.pack("<II", len(body), serial))
    marshal(h, "a(yv)", fields)
    pad(h, 8)
    return bytes(h) + bytes(body)


M, P, PROPS = "org.memprofd.Manager1", "org.memprofd.Profile1", "org.freedesktop.DBus.Properties"
START_OPTS = {"rate": ("d", 0.01), "callstack_size": ("u", 16), "follow_forks": ("b", 0),
              "duration_us": ("t", 1000000), "format_version": ("q", 3), "zstd": ("b", 1),
              "unwind": ("s", "dwarf"), "stack_copy_size": ("u", 4096),
              "max_overhead": ("d", 5.0)}
pid = 1  # exists everywhere: root passes the access check, others are refused
SEEDS = {
    "introspect-root": [("/", "org.freedesktop.DBus.Introspectable", "Introspect")],
    "introspect-manager": [("/org/memprofd", "org.freedesktop.DBus.Introspectable",
                            "Introspect")],
    "introspect-profiles": [("/org/memprofd/profile", "org.freedesktop.DBus.Introspectable",
                             "Introspect")],
    "list": [("/org/memprofd", M, "ListProfiles")],
    "getall-manager": [("/org/memprofd", PROPS, "GetAll", "s", [M])],
    "get-stats": [("/org/memprofd", PROPS, "Get", "ss", [M, "Stats"])],
    "get-version": [("/org/memprofd", PROPS, "Get", "ss", [M, "Version"])],
    "set-readonly": [("/org/memprofd", PROPS, "Set", "ssv", [M, "MaxProfiles", ("u", 1)])],
    "start-self": [("/org/memprofd", M, "Start", "aia{sv}", [[pid], {}])],
    "start-options": [("/org/memprofd", M, "Start", "aia{sv}", [[pid], START_OPTS])],
    "start-bad-options": [("/org/memprofd", M, "Start", "aia{sv}",
                           [[pid, pid, 0, -1], {"rate": ("d", 2.0), "unwind": ("s", "x"),
                                                "duration_us": ("t", 2**64 - 1),
                                                "output": ("s", "/etc/x")}])],
    "start-no-pids": [("/org/memprofd", M, "Start", "aia{sv}", [[], {"nope": ("y", 1)}])],
    "start-wrong-type": [("/org/memprofd", M, "Start", "as", [["1"]])],
    "stop": [("/org/memprofd", M, "Stop", "u", [1])],
    "discard": [("/org/memprofd", M, "Discard", "u", [4294967295])],
    "profile-stop": [("/org/memprofd/profile/1", P, "Stop")],
    "profile-getall": [("/org/memprofd/profile/1", PROPS, "GetAll", "s", [P])],
    "profile-add": [("/org/memprofd/profile/1", P, "AddProcess", "ua{sv}",
                     [pid, {"output": ("s", "x")}])],
    "profile-bad-path": [("/org/memprofd/profile/01", P, "Discard")],
    "ping": [("/", "org.freedesktop.DBus.Peer", "Ping")],
    "machine-id": [("/", "org.freedesktop.DBus.Peer", "GetMachineId")],
    "managed-objects": [("/org/memprofd", "org.freedesktop.DBus.ObjectManager",
                         "GetManagedObjects")],
    "unknown-method": [("/org/memprofd", M, "Nope", "y", [7])],
    "no-interface": [("/org/memprofd", "", "ListProfiles")],
    "pipelined": [("/org/memprofd", M, "ListProfiles"),
                  ("/org/memprofd", "org.freedesktop.DBus.Introspectable", "Introspect"),
                  ("/org/memprofd", PROPS, "Get", "ss", [M, "Clients"]),
                  ("/org/memprofd", M, "Stop", "u", [2])],
}


# Programs for the fuzzer's other mode (first byte | 2): messages built with sd-bus, each
# [path index, call index, ops...] as tests/fuzz/fuzz_bus.c's tables and build() read them
# (ops: 4 i32, 5 u32, 7 u64, 8 double from a table, 9 string from a table, 12 fd,
# 13 open array, 14 open variant, 15 open dict entry, 17 close, 18 end of message).
def entry(key, vtype, *value):
    return [15, 9, key, 14, vtype, *value, 17, 17]


BUILT = {
    # Start([1], {rate: 1e-4, output: <writable fd>, callstack_size: 16, duration_us: 1 s})
    "built-start": [2, 0, 13, 0, 4, 1, 0, 0, 0, 17, 13, 3,
                    *entry(0, 0, 8, 1), *entry(6, 6, 12, 0), *entry(1, 1, 5, 16, 0, 0, 0),
                    *entry(3, 2, 7, 0x40, 0x42, 0x0f, 0, 0, 0, 0, 0), 17, 18],
    # Start([1], {duration_us: 2^64 - 1})
    "built-start-duration": [2, 0, 13, 0, 4, 1, 0, 0, 0, 17, 13, 3,
                             *entry(3, 2, 7, 255, 255, 255, 255, 255, 255, 255, 255), 17, 18],
    # Start([1], {output: <read-only fd>})
    "built-start-rdonly": [2, 0, 13, 0, 4, 1, 0, 0, 0, 17, 13, 3, *entry(6, 6, 12, 1), 17, 18],
    "built-list": [2, 1, 18],
    # Properties.Get("org.memprofd.Manager1", "Stats"), then GetAll of a profile
    "built-get": [2, 7, 9, 14, 9, 17, 18, 4, 8, 9, 15, 18],
    # Profile1.AddProcess(1, {output: <fd>}) on /org/memprofd/profile/1
    "built-add": [4, 6, 5, 1, 0, 0, 0, 13, 3, *entry(6, 6, 12, 0), 17, 18],
    "built-stop": [2, 2, 5, 1, 0, 0, 0, 18, 2, 3, 5, 255, 255, 255, 255, 18],
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, calls in SEEDS.items():
        stream = b"".join(call(serial, *c) for serial, c in enumerate(calls, 1))
        # the first byte: 0 connects as the fuzzer's user, 1 as uid 65534 (under root)
        for who, suffix in ((b"\0", ""), (b"\1", "-nobody")):
            with open(os.path.join(out, name + suffix), "wb") as f:
                f.write(who + stream)
    for name, prog in BUILT.items():
        for who, suffix in ((2, ""), (3, "-nobody")):
            with open(os.path.join(out, name + suffix), "wb") as f:
                f.write(bytes([who] + prog))


main()
