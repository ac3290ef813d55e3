#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Control API calls the way any D-Bus client could make them, not through memprofctl (whose
own checks would stop them first), on memprofd's private socket (peer to peer).

  bus_call.py SOCKET start PID RATE [KIND PATH]  Manager1.Start; KIND: how PATH is opened and
                                                 passed as "output": fifo (read-write, as a
                                                 FIFO opens without blocking), wronly, append
  bus_call.py SOCKET add ID PID KIND PATH        Profile1.AddProcess with that output (KIND
                                                 rate: a "rate" option instead, PATH unused)
Prints the object path (start), the boolean (add), or "ERROR name: message" (exit 1).
"""
import os
import sys

import dbus

FLAGS = {"fifo": os.O_RDWR, "wronly": os.O_WRONLY | os.O_CREAT,
         "append": os.O_WRONLY | os.O_CREAT | os.O_APPEND}


def output(kind, path):
    fd = os.open(path, FLAGS[kind], 0o600)
    return dbus.types.UnixFd(fd)


def main(argv):
    conn = dbus.connection.Connection("unix:path=" + argv[1])
    try:
        if argv[2] == "start":
            opts = dbus.Dictionary({"rate": dbus.Double(float(argv[4]))}, signature="sv")
            if len(argv) > 6:
                opts["output"] = output(argv[5], argv[6])
            mgr = dbus.Interface(conn.get_object(None, "/org/memprofd"),
                                 "org.memprofd.Manager1")
            print(mgr.Start(dbus.Array([int(argv[3])], signature="i"), opts))
        else:
            prof = dbus.Interface(conn.get_object(None, "/org/memprofd/profile/" + argv[3]),
                                  "org.memprofd.Profile1")
            if argv[5] == "rate":
                opts = dbus.Dictionary({"rate": dbus.Double(0.5)}, signature="sv")
            else:
                opts = dbus.Dictionary({"output": output(argv[5], argv[6])}, signature="sv")
            print(bool(prof.AddProcess(dbus.UInt32(int(argv[4])), opts)))
    except dbus.exceptions.DBusException as e:
        print("ERROR %s: %s" % (e.get_dbus_name(), e.get_dbus_message()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
