#!/usr/bin/python3
"""notify_listen.py SOCKET OUT - plays systemd's side of sd_notify(3): binds
a Unix datagram socket at SOCKET and appends every datagram it receives to
OUT, one line per message (newlines inside a message become '|'), until
it is killed. test_systemd.sh reads OUT."""
import os
import socket
import sys

path, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
open(out, "a").close()
while True:
    data = s.recv(4096).decode("utf-8", "replace").strip().replace("\n", "|")
    with open(out, "a") as f:
        f.write(data + "\n")
        f.flush()
        os.fsync(f.fileno())
