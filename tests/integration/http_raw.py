#!/usr/bin/env python3
"""Raw HTTP/1.1 over a socket, for the strict-HTTP tests (test_http_strict.sh).

  http_raw.py send PORT BYTES [SOURCE]
      Sends BYTES (Python escapes: \\r \\n \\x01 ...) from SOURCE (default
      127.0.0.1) to 127.0.0.1:PORT and reads for at most 2 s. Prints one
      line per response, "STATUS json|notjson close|keep", then "CLOSED"
      if the server closed the connection, else "OPEN". A response is
      "json" when its Content-Type is application/json and its body parses
      as a JSON object whose "error" is a non-empty string (only checked
      for statuses >= 400; a 2xx prints "-").

  http_raw.py hold PORT SPEC... -- PROBE...
      SPEC is SOURCE:N: N connections from SOURCE, each answered one
      request (prints "held STATUS" if that was not 200) and kept idle.
      Then each PROBE (SOURCE) opens one more connection, sends a GET
      /healthz and prints "SOURCE STATUS json|notjson|- TEXT" (TEXT: the
      error's text, or "-"). Everything is closed at the end.
"""
import json
import socket
import sys
import time


def connect(port, source):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s, deadline):
    """Bytes until the peer closes or the deadline; (data, closed)."""
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk


def responses(data):
    """Splits data into (status, headers dict, body) triples."""
    out = []
    while data.startswith(b"HTTP/1.1 "):
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        head = data[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        body = data[end + 4:end + 4 + n]
        out.append((int(head[0].split()[1]), headers, body))
        data = data[end + 4 + n:]
    return out


def error_json(headers, body):
    """The error's text if the body is the JSON error, else None."""
    if headers.get("content-type") != "application/json":
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("error"), str):
        return None
    return doc["error"] or None


def describe(status, headers, body):
    if status < 400:
        kind = "-"
    else:
        kind = "json" if error_json(headers, body) else "notjson"
    close = "close" if headers.get("connection") == "close" else "keep"
    return "%d %s %s" % (status, kind, close)


def send(port, text, source="127.0.0.1"):
    raw = text.encode("latin-1").decode("unicode_escape").encode("latin-1")
    s = connect(port, source)
    s.sendall(raw)
    data, closed = read_all(s, time.monotonic() + 2)
    s.close()
    for r in responses(data):
        print(describe(*r))
    print("CLOSED" if closed else "OPEN")


def hold(port, args):
    sep = args.index("--")
    held = []
    for spec in args[:sep]:
        source, _, n = spec.rpartition(":")
        for _ in range(int(n)):
            held.append(connect(port, source))
    # One request on each: answered means accepted and counted (and then
    # idle, kept alive), with no sleep guessing when the server got them.
    for s in held:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    for s in held:
        data = b""
        while not responses(data):
            s.settimeout(2)
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        status = responses(data)[0][0] if responses(data) else "none"
        if status != 200:
            print("held", status)
    for source in args[sep + 1:]:
        s = connect(port, source)
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
        except OSError:
            pass
        data, _ = read_all(s, time.monotonic() + 2)
        s.close()
        rs = responses(data)
        if not rs:
            print(source, "none - -")
            continue
        status, headers, body = rs[0]
        text = error_json(headers, body) if status >= 400 else None
        kind = "-" if status < 400 else ("json" if text else "notjson")
        print(source, status, kind, text or "-")
    for s in held:
        s.close()


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "send":
        send(port, *sys.argv[3:])
    elif mode == "hold":
        hold(port, sys.argv[3:])
    else:
        sys.exit("usage: http_raw.py send|hold PORT ...")


if __name__ == "__main__":
    main()
