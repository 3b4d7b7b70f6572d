#!/usr/bin/env python3
"""timed_requests.py SPEC... - requests sent from threads on one clock.

Each SPEC is DELAY_MS:TIMEOUT_S:URL: its thread waits DELAY_MS from the
common start, sends GET URL (a new connection) and waits at most
TIMEOUT_S seconds for the answer, then gives up and closes the
connection (a client going away). Prints one line per SPEC, in the order
given: "STATUS START_MS END_MS", the times in ms from the common start,
STATUS 0 for a request given up.
"""
import http.client
import sys
import threading
import time
import urllib.parse


def one(spec, t0, out, i):
    delay, timeout, url = spec.split(":", 2)
    u = urllib.parse.urlsplit(url)
    time.sleep(max(0.0, t0 + int(delay) / 1000 - time.monotonic()))
    start = time.monotonic()
    status = 0
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=float(timeout))
    try:
        conn.request("GET", u.path + ("?" + u.query if u.query else ""))
        r = conn.getresponse()
        r.read()
        status = r.status
    except OSError:
        pass
    finally:
        conn.close()
    out[i] = "%d %.1f %.1f" % (status, (start - t0) * 1000, (time.monotonic() - t0) * 1000)


def main():
    specs = sys.argv[1:]
    out = [None] * len(specs)
    t0 = time.monotonic() + 0.05
    threads = [threading.Thread(target=one, args=(s, t0, out, i)) for i, s in enumerate(specs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("\n".join(out))


main()
