#!/usr/bin/env python3
"""pipeline_flood.py - clients that pipeline requests and never read.

    pipeline_flood.py PORT CONNECTIONS SECONDS [HEALTHZ_EVERY]

Opens CONNECTIONS sockets to 127.0.0.1:PORT; every HEALTHZ_EVERY-th one
(default 5) pipelines `GET /healthz`, the others `GET /metrics`. Each
writes as fast as its socket takes bytes and never reads an answer, for
SECONDS; then all of them close at once (with answers still unread, so
the kernel resets them, as an abandoning client's would).

Prints one line at the end, for tests/integration/test_rateld_pipeline.sh:

    connected=N requests=N stalled=N

`requests` is how many whole requests the server's socket buffers took;
`stalled` counts the connections that could send nothing during the last
second (a server that stops reading stalls them all).
"""
import selectors
import socket
import sys
import time


def main():
    port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    every = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    metrics = b"GET /metrics HTTP/1.1\r\nHost: flood\r\n\r\n"
    healthz = b"GET /healthz HTTP/1.1\r\nHost: flood\r\n\r\n"
    sel = selectors.DefaultSelector()
    conns = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        req = healthz if i % every == every - 1 else metrics
        # A state per socket: the request, the whole bytes sent, and when
        # it last sent anything.
        st = {"sock": s, "chunk": req * (65536 // len(req)), "req": len(req),
              "sent": 0, "pending": b"", "last": time.monotonic()}
        conns.append(st)
        sel.register(s, selectors.EVENT_WRITE, st)
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        for key, _ in sel.select(timeout=min(left, 0.2)):
            st = key.data
            data = st["pending"] or st["chunk"]
            try:
                n = st["sock"].send(data)
            except BlockingIOError:
                continue
            except OSError:
                sel.unregister(st["sock"])
                continue
            st["pending"] = data[n:]
            st["sent"] += n
            st["last"] = time.monotonic()
    now = time.monotonic()
    requests = sum(st["sent"] // st["req"] for st in conns)
    stalled = sum(1 for st in conns if now - st["last"] >= 1.0)
    for st in conns:
        st["sock"].close()
    print("connected=%d requests=%d stalled=%d" % (len(conns), requests, stalled))


if __name__ == "__main__":
    main()
