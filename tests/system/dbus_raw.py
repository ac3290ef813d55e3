#!/usr/bin/python3
# A raw D-Bus client of memprofd's private socket, for what no well-behaved client does
# (tests/system/service-limits.sh). Messages are built by hand, little-endian, with no
# destination (peer to peer).
#
# dbus_raw.py flood SOCKET COUNT WAIT
#     Pipeline COUNT calls (Introspect and ListProfiles, alternately) and never read a reply.
#     Prints "sent N" when the daemon stops taking calls (a send blocks for 2 s) or all were
#     sent, then "disconnected" once the daemon hangs up (within WAIT seconds) or
#     "still connected".
# dbus_raw.py start SOCKET PID DURATION_US
#     Manager1.Start([PID], {"duration_us": <t DURATION_US>}); prints "reply" or
#     "error NAME: MESSAGE".
import os
import select
import socket
import struct
import sys


class Msg:
    def __init__(self):
        self.b = bytearray()

    def align(self, n):
        self.b.extend(b"\0" * (-len(self.b) % n))

    def u32(self, v):
        self.align(4)
        self.b.extend(struct.pack("<I", v))

    def string(self, v, sig=False):
        v = v.encode()
        if sig:
            self.b.extend(bytes([len(v)]) + v + b"\0")
        else:
            self.u32(len(v))
            self.b.extend(v + b"\0")


def method_call(serial, path, iface, member, sig="", body=b""):
    m = Msg()
    m.b.extend(b"l\x01\x00\x01" + struct.pack("<II", len(body), serial) + b"\0\0\0\0")
    fields = [(1, "o", path), (2, "s", iface), (3, "s", member)]
    if sig:
        fields.append((8, "g", sig))
    for code, t, val in fields:
        m.align(8)
        m.b.extend(bytes([code]))
        m.string(t, sig=True)
        m.string(val, sig=(t == "g"))
    struct.pack_into("<I", m.b, 12, len(m.b) - 16)  # the header fields' array length
    m.align(8)
    return bytes(m.b) + body


def start_body(pid, duration_us):
    m = Msg()  # "aia{sv}": body offsets are 8-aligned in the message, so align from 0
    m.u32(4)
    m.b.extend(struct.pack("<i", pid))
    m.u32(0)
    at = len(m.b)
    m.align(8)
    first = len(m.b)
    m.string("duration_us")
    m.string("t", sig=True)
    m.align(8)
    m.b.extend(struct.pack("<Q", duration_us))
    struct.pack_into("<I", m.b, at - 4, len(m.b) - first)
    return bytes(m.b)


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
    if not s.recv(4096).startswith(b"OK "):
        sys.exit("authentication refused")
    s.sendall(b"BEGIN\r\n")
    return s


def header_fields(h):
    """{code: value} of a message header's fields (strings, paths, signatures, uint32)."""
    out, i = {}, 16
    while i < len(h):
        i += -i % 8
        code, slen = h[i], h[i + 1]
        t = h[i + 2:i + 2 + slen].decode()
        i += 3 + slen
        if t == "g":
            n = h[i]
            out[code] = h[i + 1:i + 1 + n].decode()
            i += n + 2
        else:
            i += -i % 4
            n = struct.unpack_from("<I", h, i)[0]
            if t == "u":
                out[code], i = n, i + 4
            else:
                out[code] = h[i + 4:i + 4 + n].decode()
                i += 5 + n
    return out


def read_message(s):
    buf = b""
    while True:
        if len(buf) >= 16:
            blen, flen = struct.unpack_from("<I", buf, 4)[0], struct.unpack_from("<I", buf, 12)[0]
            start = 16 + flen + (-(16 + flen) % 8)
            if len(buf) >= start + blen:
                return buf[1], header_fields(buf[:16 + flen]), buf[start:start + blen]
        d = s.recv(65536)
        if not d:
            sys.exit("disconnected before the reply")
        buf += d


def flood(path, count, wait):
    s = connect(path)
    calls = [("/org/memprofd", "org.freedesktop.DBus.Introspectable", "Introspect"),
             ("/org/memprofd", "org.memprofd.Manager1", "ListProfiles")]
    s.settimeout(2)
    sent = 0
    try:
        for i in range(count):
            s.sendall(method_call(i + 1, *calls[i % 2]))
            sent += 1
    except (socket.timeout, BrokenPipeError, ConnectionResetError):
        pass
    print("sent", sent, flush=True)
    p = select.poll()
    p.register(s, select.POLLHUP)
    ev = p.poll(wait * 1000)
    print("disconnected" if ev and ev[0][1] & (select.POLLHUP | select.POLLERR)
          else "still connected", flush=True)


def start(path, pid, duration_us):
    s = connect(path)
    s.sendall(method_call(1, "/org/memprofd", "org.memprofd.Manager1", "Start", "aia{sv}",
                          start_body(pid, duration_us)))
    kind, fields, body = read_message(s)
    if kind == 3:  # ERROR: the name is header field 4, the body the message
        n = struct.unpack_from("<I", body, 0)[0]
        print("error %s: %s" % (fields.get(4), body[4:4 + n].decode()))
    else:
        print("reply")


if sys.argv[1] == "flood":
    flood(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
else:
    start(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
