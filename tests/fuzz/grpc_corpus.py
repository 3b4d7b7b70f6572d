#!/usr/bin/python3
"""grpc_corpus.py - writes the seeds of fuzz_grpc (tests/fuzz/corpus/grpc/):
byte 0 is the fuzz target's mode (tests/fuzz/fuzz_grpc.c), the rest what a
client sends after the preface, made by python3-h2 (Debian's) so the
frames and their HPACK are right. Run from the top of the tree."""
import os
import struct

import h2.config
import h2.connection

PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OUT = "tests/fuzz/corpus/grpc"


def field(num, payload):
    return bytes([num << 3 | 2, len(payload)]) + payload


def rls(domain=b"ratel", key=b"remote_address", value=b"127.0.0.1", hits=0):
    entry = field(1, key) + field(2, value)
    msg = field(1, domain) + field(2, field(1, entry))
    if hits:
        msg += bytes([3 << 3, hits])
    return msg


def frame(msg, flag=0):
    return struct.pack(">BI", flag, len(msg)) + msg


def client():
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.data_to_send()  # the target adds its own preface and SETTINGS
    return conn


def call(conn, body, path=PATH, reset=False, end=True):
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                            (":path", path), (":authority", "rateld"),
                            ("content-type", "application/grpc"),
                            ("te", "trailers")])
    if body is not None:
        conn.send_data(sid, body, end_stream=end)
    if reset:
        conn.reset_stream(sid, 8)
    return sid


def write(name, mode, conn):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([mode]) + conn.data_to_send())


def main():
    os.makedirs(OUT, exist_ok=True)
    c = client()
    call(c, frame(rls()))
    write("one_call", 0, c)
    c = client()
    call(c, frame(rls(hits=5)))
    call(c, frame(rls(domain=b"other")))
    call(c, frame(b""), path="/grpc.health.v1.Health/Check")
    write("three_at_flush", 2, c)
    c = client()
    call(c, frame(b"\x00" * 200))
    write("oversized_tiny", 16, c)
    c = client()
    call(c, frame(b"\xff\xff\xff\x0f\x12"))
    call(c, frame(rls(), flag=1))
    write("malformed_compressed", 0, c)
    c = client()
    call(c, frame(rls()), reset=True, end=False)
    call(c, frame(rls()))
    write("reset_midway", 128, c)
    c = client()
    for _ in range(4):
        call(c, frame(rls()))
    write("peer_gone_held", 2 | 4, c)
    c = client()
    for _ in range(3):
        call(c, frame(rls()))
    write("drain", 8 | 32, c)
    c = client()
    c.ping(b"12345678")
    c.update_settings({4: 1 << 20})
    call(c, frame(rls(key=b"", value=b"")))
    write("control_frames", 64, c)
    # Streams (fuzz_grpc's /fuzz.Stream/Echo): messages in one DATA frame
    # and across several, a message cut short, a stream the drain ends.
    stream = "/fuzz.Stream/Echo"
    c = client()
    call(c, b"".join(frame(b"m%d" % i) for i in range(5)), path=stream)
    write("stream_five", 0, c)
    c = client()
    sid = call(c, frame(b"first")[:3], path=stream, end=False)
    c.send_data(sid, frame(b"first")[3:] + frame(b"x" * 100)[:7])
    c.send_data(sid, b"", end_stream=True)
    write("stream_split_cut", 16, c)
    c = client()
    call(c, frame(b"open"), path=stream, end=False)
    call(c, frame(rls()))
    write("stream_drain", 8, c)


if __name__ == "__main__":
    main()
