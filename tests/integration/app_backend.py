#!/usr/bin/env python3
"""app_backend.py PORT - the application behind nginx and HAProxy in the
tests: one thread per request, on 127.0.0.1:PORT.

Any GET or POST reads its parameters from the query and from an
urlencoded body together:

    ms=N      answers after N milliseconds (a slow request);
    pw=P      a login: 200 when P is "good", else 401;
              without pw, 200 "got N", N the bytes of the body it
              received (a gateway that read the body still sends it).

GET /started answers how many requests it has begun (itself not
counted), so a test knows a request reached the application.
"""
import http.server
import sys
import threading
import time
import urllib.parse

started = 0
lock = threading.Lock()


class App(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.handle_one(b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.handle_one(self.rfile.read(n))

    def handle_one(self, body):
        global started
        u = urllib.parse.urlsplit(self.path)
        if u.path == "/started":
            self.answer(200, str(started).encode())
            return
        with lock:
            started += 1
        q = urllib.parse.parse_qs(u.query)
        for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items():
            q.setdefault(k, []).extend(v)
        time.sleep(int(q.get("ms", ["0"])[0]) / 1000)
        if "pw" in q:
            good = q["pw"][0] == "good"
            self.answer(200 if good else 401, b"welcome\n" if good else b"wrong password\n")
        else:
            self.answer(200, b"got %d" % len(body))

    def answer(self, status, body):
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client went away

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer.daemon_threads = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
