#!/usr/bin/python3
"""h2_hostile.py ADDR - what no gRPC library would send, against rateld's
gRPC listener, with python3-h2 (Debian's pure-Python HTTP/2) and raw
sockets. Each case prints "ok NAME" or "FAIL NAME: why"; after each, a
valid call on a fresh connection must still be answered (the server is
alive and serving). Exit status 0.

The valid call is a ShouldRateLimit for domain "hostile" with one entry,
encoded by hand (protobuf's wire format is small enough to write here; the
real client's encoding is rls_client.py's job).
"""
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

HOST, PORT = sys.argv[1].rsplit(":", 1)
PORT = int(PORT)
PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
failures = 0


def field(num, payload):
    """A length-delimited protobuf field."""
    return bytes([num << 3 | 2, len(payload)]) + payload


def rls_request(domain=b"hostile", key=b"k", value=b"v"):
    entry = field(1, key) + field(2, value)
    return field(1, domain) + field(2, field(1, entry))


def grpc_frame(msg, flag=0, length=None):
    return struct.pack(">BI", flag, len(msg) if length is None else length) + msg


def headers(path=PATH, ctype="application/grpc", method="POST"):
    return [(":method", method), (":scheme", "http"), (":path", path),
            (":authority", "%s:%d" % (HOST, PORT)), ("content-type", ctype),
            ("te", "trailers")]


class Client:
    def __init__(self, validate=True):
        self.sock = socket.create_connection((HOST, PORT), timeout=10)
        cfg = h2.config.H2Configuration(client_side=True,
                                        header_encoding="utf-8",
                                        validate_outbound_headers=validate)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        self.flush()
        self.answers = {}  # stream id -> dict(headers, data, trailers, reset)
        self.goaway = None
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def call(self, body, hdrs=None, end=True):
        """Sends a request; a body larger than the flow control window
        is cut there (the stream left open): enough for the server to see
        an oversized message."""
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, hdrs or headers())
        window = self.conn.local_flow_control_window(sid)
        if body is not None and len(body) > window:
            body, end = body[:window], False
        if body is not None:
            size = self.conn.max_outbound_frame_size
            for i in range(0, max(len(body), 1), size):
                last = i + size >= len(body)
                self.conn.send_data(sid, body[i:i + size],
                                    end_stream=end and last)
        self.flush()
        return sid

    def pump(self, until, deadline=10.0):
        end = time.time() + deadline
        while not until() and not self.closed and time.time() < end:
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                self.closed = True
                break
            if not data:
                self.closed = True
                break
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.closed = True
                break
            for ev in events:
                self.event(ev)
            try:
                self.flush()
            except OSError:
                self.closed = True

    def event(self, ev):
        a = self.answers.setdefault(getattr(ev, "stream_id", 0), {})
        if isinstance(ev, h2.events.ResponseReceived):
            a["headers"] = dict(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            a["data"] = a.get("data", b"") + ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length,
                                                ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            a["trailers"] = dict(ev.headers)
        elif isinstance(ev, h2.events.StreamReset):
            a["reset"] = ev.error_code
        elif isinstance(ev, h2.events.StreamEnded):
            a["ended"] = True
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = ev.error_code

    def status(self, sid):
        """grpc-status of a stream: from trailers, or a trailers-only
        answer's headers; None when none came."""
        a = self.answers.get(sid, {})
        for part in ("trailers", "headers"):
            if "grpc-status" in a.get(part, {}):
                return int(a[part]["grpc-status"])
        return None

    def done(self, sid):
        a = self.answers.get(sid, {})
        return a.get("ended") or "reset" in a

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def check(name, cond, why):
    global failures
    if cond:
        print("ok", name)
    else:
        failures += 1
        print("FAIL %s: %s" % (name, why))


def alive(name):
    c = Client()
    sid = c.call(grpc_frame(rls_request()))
    c.pump(lambda: c.done(sid))
    check(name + "_then_serving", c.status(sid) == 0,
          "a valid call after it got %r" % c.answers.get(sid))
    c.close()


def one(name, body, want, hdrs=None, end=True):
    c = Client()
    sid = c.call(body, hdrs, end)
    c.pump(lambda: c.done(sid))
    got = c.status(sid)
    check(name, got == want, "grpc-status %r, want %r (%r)" %
          (got, want, c.answers.get(sid)))
    c.close()
    alive(name)


def read_all(s):
    got = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except (ConnectionResetError, socket.timeout):
        pass
    return got


def goaway_codes(got):
    """The error codes of the GOAWAY frames (type 7) in a byte stream."""
    codes, i = [], 0
    while i + 9 <= len(got):
        length = int.from_bytes(got[i:i + 3], "big")
        if got[i + 3] == 7 and i + 17 <= len(got):
            codes.append(int.from_bytes(got[i + 13:i + 17], "big"))
        i += 9 + length
    return codes


def raw(name, data, expect_goaway=True):
    """Sends bytes after a valid preface; the server must answer GOAWAY or
    close, and stay up."""
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + data)
    codes = goaway_codes(read_all(s))
    s.close()
    seen = bool(codes)
    check(name, seen or not expect_goaway, "no GOAWAY")
    alive(name)


def main():
    alive("baseline")
    one("malformed_protobuf", grpc_frame(b"\xff\xff\xff\xff\x0f"), 13)
    one("truncated_frame", grpc_frame(rls_request(), length=1000), 13)
    one("two_messages", grpc_frame(rls_request()) * 2, 13)
    one("no_message", b"", 13)
    one("compressed", grpc_frame(rls_request(), flag=1), 12)
    one("oversized", grpc_frame(b"\x00" * (8 << 10)), 8)  # max 4 KiB
    one("unknown_method", grpc_frame(b""), 12,
        headers("/no.such.Service/Method"))
    one("empty_domain", grpc_frame(rls_request(domain=b"")), 3)

    c = Client()
    sid = c.call(grpc_frame(rls_request()), headers(ctype="text/plain"))
    c.pump(lambda: c.done(sid))
    st = c.answers.get(sid, {}).get("headers", {}).get(":status")
    check("not_grpc_content_type", st == "415", "status %r" % st)
    c.close()

    raw("garbage_frame", b"\x00\x00\x08\xfe\xff\x00\x00\x00\x01" + b"x" * 8 +
        b"\x00\x10\x00\x01\x04\x00\x00\x00\x00" + b"\xff" * 32)
    raw("data_on_stream_0", b"\x00\x00\x04\x00\x00\x00\x00\x00\x00abcd")
    raw("settings_bad_length", b"\x00\x00\x05\x04\x00\x00\x00\x00\x00abcde")

    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        gone = s.recv(4096) is not None
    except (ConnectionResetError, socket.timeout):
        gone = True
    s.close()
    check("http1_on_grpc_port", gone, "no answer")
    alive("http1_on_grpc_port")

    # 1,000 streams at once on one connection, sent before the server's
    # SETTINGS (max 100 at once) are read: the excess is refused, the rest
    # answered, nothing hangs.
    c = Client()
    c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE:
                            1 << 20})
    c.conn.local_settings.acknowledge()
    sids = []
    for _ in range(1000):
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, headers())
        c.conn.send_data(sid, grpc_frame(rls_request(value=b"many")),
                         end_stream=True)
        sids.append(sid)
    try:
        c.flush()
    except OSError:
        c.closed = True
    c.pump(lambda: all(c.done(s) for s in sids) or c.goaway is not None,
           deadline=30)
    answered = sum(1 for s in sids if c.status(s) == 0)
    refused = sum(1 for s in sids if "reset" in c.answers.get(s, {}))
    check("thousand_streams",
          answered >= 100 and (answered + refused == 1000 or
                               c.goaway is not None),
          "answered %d, refused %d, goaway %r" % (answered, refused, c.goaway))
    c.close()
    alive("thousand_streams")

    # Rapid reset: open and cancel streams as fast as possible.
    c = Client()
    for _ in range(5000):
        if c.closed:
            break
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, headers())
        c.conn.reset_stream(sid, 8)  # CANCEL
        try:
            c.flush()
        except OSError:
            c.closed = True
    c.pump(lambda: c.goaway is not None, deadline=10)
    check("rapid_reset", c.goaway is not None or c.closed,
          "no GOAWAY after 5000 reset streams")
    c.close()
    alive("rapid_reset")

    # SETTINGS and PING floods (each frame wants an acknowledgement): past
    # rateld's budget, GOAWAY(ENHANCE_YOUR_CALM) and the connection closes.
    for name, frame in (("settings_flood",
                         b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"),
                        ("ping_flood",
                         b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"p" * 8)):
        s = socket.create_connection((HOST, PORT), timeout=5)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                  b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        try:
            for _ in range(100):
                s.sendall(frame * 100)
        except OSError:
            pass
        codes = goaway_codes(read_all(s))
        s.close()
        check(name, 11 in codes, "GOAWAY codes %r, want 11 "
              "(ENHANCE_YOUR_CALM)" % codes)
        alive(name)
    return 0


if __name__ == "__main__":
    main()
    print("done")
    sys.exit(0)
