#!/usr/bin/python3
"""acquire_load.py BASE_URL POLICY RATE OUT KEY... - a steady load of
acquires on rateld's decision API: RATE requests a second (one at a time,
on one kept-alive connection), cycling over the KEYs, until it is killed.
Each answer is appended to OUT as one line, `UNIX_MS KEY SOURCE ALLOWED`
(the decision's source: store, cache, local, open, closed, or `error`
when no decision came; ALLOWED 1 or 0), flushed at once so that a test
reads it while the load runs. test_fault_cluster.sh and
test_fault_sentinel.sh read OUT."""
import http.client
import json
import sys
import time
import urllib.parse

base, policy, rate, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
keys = sys.argv[5:]
host = urllib.parse.urlsplit(base).netloc
conn = None
period = 1.0 / rate
due = time.monotonic()
with open(out, "a", buffering=1) as f:
    i = 0
    while True:
        key = keys[i % len(keys)]
        i += 1
        path = "/v1/acquire?" + urllib.parse.urlencode({"policy": policy, "key": key})
        source, allowed = "error", 0
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, timeout=5)
            conn.request("GET", path)
            body = conn.getresponse().read()
            answer = json.loads(body)
            source = answer.get("source", "error")
            allowed = 1 if answer.get("allowed") else 0
        except (OSError, http.client.HTTPException, ValueError):
            if conn is not None:
                conn.close()
            conn = None
        f.write("%d %s %s %d\n" % (int(time.time() * 1000), key, source, allowed))
        due += period
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            due = time.monotonic()
