#!/usr/bin/python3
"""engine_corpus.py - writes the seeds of fuzz_engine (tests/fuzz/corpus/
engine/): programs in the target's input language (tests/fuzz/fuzz_engine.c
says it) that take the engine through its paths: a standalone node, the
EVAL script and NOSCRIPT, the library, a cluster's MOVED and ASK, a
READONLY failover, Sentinel and +switch-master, timeouts, AUTH and SELECT,
garbage, the store's batches and groups. The well-formed replies are named
here by their place in the target's `canned` table, read from the C file,
so a seed stays right when the table grows. Run from the top of the tree."""
import os
import re

OUT = "tests/fuzz/corpus/engine"
SRC = "tests/fuzz/fuzz_engine.c"


def canned_table():
    src = open(SRC).read()
    block = src[src.index("static const char *const canned[] = {"):]
    body = block[block.index("{") + 1:block.index("};")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    entries, cur = [], ""
    for tok in re.finditer(r'"((?:[^"\\]|\\.)*)"|,', body):
        if tok.group(0) == ",":
            entries.append(cur)
            cur = ""
        else:
            cur += bytes(tok.group(1), "ascii").decode("unicode_escape")
    return entries


CANNED = canned_table()
NAMES = {"pong": "+PONG\r\n", "module": "*1\r\n*0\r\n",
         "nomodule": "*1\r\n*-1\r\n", "one": ":1\r\n", "ok": "+OK\r\n",
         "nilbulk": "$-1\r\n", "arr": "*2\r\n:1\r\n:0\r\n",
         "fdisabled": "-ERR Functions are disabled\r\n",
         "wrongpass": "-WRONGPASS invalid username-password pair\r\n",
         "master": "*1\r\n$6\r\nmaster\r\n", "slave": "*1\r\n$5\r\nslave\r\n"}


def index_of(name):
    prefixes = {"sha": "$40\r\n", "ver": "$1\r\n1", "load": "$5\r\nratel",
                "moved": "-MOVED 15495", "ask": "-ASK ",
                "noscript": "-NOSCRIPT", "readonly": "-READONLY",
                "slots1": "*1\r\n*3\r\n:0\r\n:16383",
                "sent7000": "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n7000",
                "subscribed": "*3\r\n$9\r\nsubscribe",
                "switch": "*3\r\n$7\r\nmessage",
                "allow": "*7\r\n:1\r\n", "deny": "*7\r\n:0\r\n",
                "ratelerr": "-ERR ratel:", "slotsneg": "*1\r\n*3\r\n:-"}
    for i, text in enumerate(CANNED):
        if name in NAMES and text == NAMES[name]:
            return i
        if name in prefixes and text.startswith(prefixes[name]):
            return i
    raise KeyError(name)


# Each operation: a byte that is not 0xff, the operation, its argument.
def upall():
    return [1, 9, 0]


def chunks(length, chunk):
    size = 1 + chunk % 16
    return [chunk] * ((length + size - 1) // size)


def reply(conn, name, chunk=15):
    i = index_of(name)
    return [1, 1, conn, i] + chunks(len(CANNED[i]), chunk)


def raw(conn, data, chunk=3):
    return [1, 0, conn, len(data)] + list(data) + chunks(len(data), chunk)


def adv(n):
    return [1, 6, n]


def sub(d):
    return [1, 7, d]


SEEDS = {
    "standalone": [0, 3, 0, 8, 3] + upall() + reply(0, "pong") +
    reply(0, "one") + reply(0, "module") + reply(0, "one", 0) +
    reply(0, "arr", 2) + reply(0, "nilbulk"),
    "lua_noscript": [8, 1, 0] + upall() + reply(0, "pong") +
    reply(0, "sha") + reply(0, "noscript") + reply(0, "sha", 1) +
    reply(0, "one"),
    "function": [16, 2, 0, 2] + upall() + reply(0, "pong") +
    reply(0, "nomodule") + reply(0, "ver") + reply(0, "fdisabled") +
    reply(0, "sha") + reply(0, "one") + reply(0, "one"),
    "cluster_moved_ask": [2, 2, 0, 16] + upall() + reply(0, "pong") +
    reply(0, "slots1") + reply(0, "module") + reply(0, "moved") + upall() +
    reply(1, "pong") + reply(1, "module") + reply(1, "one") +
    reply(0, "ask") + reply(1, "ok") + reply(1, "one"),
    "cluster_slots_negative": [2, 1, 0] + upall() + reply(0, "pong") +
    reply(0, "slotsneg") + reply(0, "module") + reply(0, "allow"),
    "failover_readonly": [1, 1, 0] + upall() + reply(0, "pong") +
    reply(0, "module") + reply(0, "readonly") + upall() +
    reply(0, "slave") + reply(1, "pong") + reply(1, "master") +
    reply(1, "module") + reply(1, "one"),
    "sentinel": [3, 2, 0, 8] + upall() + reply(0, "sent7000") + upall() +
    reply(1, "subscribed") + reply(2, "pong") + reply(2, "module") +
    reply(2, "one") + reply(2, "one") + reply(1, "switch") + sub(0) +
    upall() + reply(3, "pong"),
    "timeouts": [0, 2, 0, 1] + adv(250) + upall() + adv(40) + sub(0) +
    adv(200) + sub(0) + upall() + reply(1, "pong") + reply(1, "module") +
    adv(60),
    "auth_select": [4, 1, 0] + upall() + reply(0, "ok") + reply(0, "ok") +
    reply(0, "pong") + reply(0, "module") + reply(0, "one") + sub(0) +
    reply(0, "wrongpass"),
    "garbage": [0, 4, 0, 3, 4, 5] + upall() + reply(0, "pong") +
    raw(0, b"*2\r\n:1\r\n$3\r\nab"),
    "down_free": [1, 5, 0, 1, 2, 3, 4] + upall() + reply(0, "pong") +
    [1, 5, 0] + sub(0) + [0xff],
    # The store's layer: setup | 0x40, then its options byte.
    "store_batch": [0x40, 2, 1, 0, 0x85] + upall() + reply(0, "pong") +
    reply(0, "module") + reply(0, "allow") + reply(0, "deny", 2) +
    reply(0, "allow") + reply(0, "allow") + sub(3) + sub(7) +
    reply(0, "one") + reply(0, "nilbulk"),
    "store_group_denied": [0x40, 1, 6, 0x84] + upall() + reply(0, "pong") +
    reply(0, "module") + reply(0, "allow") + reply(0, "deny") +
    reply(0, "one") + sub(0x87) + reply(0, "ratelerr") + reply(0, "allow"),
    "store_failures": [0x43, 3, 7, 0, 1, 2] + adv(250) + sub(0) +
    sub(0x85) + upall() + reply(0, "pong") + adv(100),
    "store_lua_local": [0x48, 1, 2, 0] + upall() + reply(0, "pong") +
    reply(0, "sha") + reply(0, "noscript") + reply(0, "sha") +
    reply(0, "allow") + adv(60) + sub(0) + sub(0x13) + sub(0x17) +
    upall() + reply(1, "pong") + reply(1, "sha") + reply(1, "allow") +
    reply(1, "nilbulk") + reply(1, "one"),
    # A denied group's charges given back as the engine is freed.
    "store_free_give_back": [0x40, 1, 6, 0x8C] + upall() +
    reply(0, "pong") + reply(0, "module") + reply(0, "allow") +
    reply(0, "deny") + [0xff],
}

os.makedirs(OUT, exist_ok=True)
for name, program in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes(b & 0xff for b in program))
