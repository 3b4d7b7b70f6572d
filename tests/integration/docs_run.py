#!/usr/bin/env python3
"""docs_run.py - runs the shell examples of the documentation as printed.

Usage: docs_run.py ROOT BUILD [PAGE...]

Every fenced block of the pages named below that is a shell block (```sh,
```console, ```bash, or any block holding a `$ ` or a redis-cli
`HOST:PORT> ` prompt, whatever its tag) is run, unless the line before it is a marker:

    <!-- not run: WHY -->        deliberately not run (needs a product that
                                 is not installed here, root, the whole
                                 test suite, ...); the reason is printed
    <!-- snippet: NAME -->       run by another test (the gateway tests)

and a block of a file's text (a configuration shown on a page) is checked
against that file when the line before it says where it comes from:

    <!-- from: PATH -->           the block's lines are lines of PATH (in
                                 the repository), in order and together:
                                 the whole file, or a part of it

A shell block is neither skipped silently nor guessed at: unmarked, it runs,
and it fails when it does not work as printed.

How a block runs: all blocks of one page run in order in one bash session
(so a variable or a key set by one block is there for the next), in a
scratch directory holding links to the repository's top-level entries, with
standard output and error on a pseudo-terminal, as a reader's terminal
(redis-cli formats its replies there, and stderr interleaves as on a
screen). Only ports, scratch paths and tokens are substituted (SUBSTITUTE),
in the commands and in the shown output alike: servers run on free
loopback ports.

  - A block with `$ ` lines is a session: each `$ ` line (with its `\\`
    continuation lines) is a command and the lines up to the next `$ ` its
    output, compared with what the command prints. A shown line `...`,
    alone or followed by prose in parentheses or after `#`, stands for any
    number of lines; `... LINE` for any lines and then LINE. A shown line's
    trailing `  # comment` is prose too.
  - A `HOST:PORT> COMMAND` line runs `redis-cli COMMAND` (its reply shown
    below it, as redis-cli prints it on a terminal).
  - A block with neither is a script: each line must exit 0.

Variable parts (times, versions, SHAs) match by pattern: VARY lists, for
all pages and per page, regular expressions over the shown lines; the part
they match (or their groups) matches any number (when it is a number) or
any text in the real output. The page itself shows real output.

Prints, per page, how many blocks were run, skipped by a marker and run
elsewhere, then "N passed, N failed" (one check per command); exit 1 on a
failure.
"""

import os
import pty
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tty

SHELL_LANGS = ("sh", "bash", "shell", "console")
MARK_RE = re.compile(r"^<!--\s*(not run|snippet|from):\s*(.*?)\s*-->\s*$")
PROMPT_RE = re.compile(r"^(127\.0\.0\.1|localhost):(\d+)> (.*)$")
COMMENT_RE = re.compile(r"\s{2,}#\s.*$")

# Servers the harness starts before a page runs, by the port a page shows.
# "dead" is a free port nothing listens on.
SERVER_PORTS = {
    "rateld": 8080,
    "redis": 6379,
    "redis_plain": 6380,
    "dead": 6390,
    "captchad": 8090,
}

# Variable parts on every page: SHA-1s, ISO times, Unix-millisecond times.
VARY_ALL = [
    r"\b[0-9a-f]{40}\b",
    r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z",
    r"_ms\":(\d{13})",
    # The Lua library's version: ratel's and a checksum of the Lua sources.
    r"\b\d+\.\d+\.\d+\+(\d+)\b",
]

# Per page: the servers it needs started, the servers it starts itself
# (waited for after its `&` command), substitutions beyond the ports, and
# the variable parts of its output. A page not listed gets the servers
# whose ports its commands show (Page.servers_needed).
PAGES = {
    "README.md": {
        "servers": ["rateld"],
        "starts": ["redis", "captchad"],
        "subs": [(r"captchad/captchad\.yaml", "{tmp}/captchad.yaml")],
        "vary": [
            r"r=0;t=(\d+)",
            r"Retry-After: (\d+)",
            r"Content-Length: (\d+)",
            r"_ms\":(\d+)",
            r"\(integer\) (\d{3,})",
            r"Your code is (\d+)",
        ],
    },
    "README.zh-CN.md": {
        "servers": ["rateld"],
        "starts": ["redis"],
        "vary": [r"r=0;t=(\d+)", r"Retry-After: (\d+)", r"\(integer\) (\d{3,})"],
    },
    "docs/cli.md": {
        "servers": ["redis", "redis_plain", "dead"],
        "vary": [
            # Times in milliseconds since the first request of a key: a run
            # takes a few more or less.
            r"^[01]\t\d+\t(\d+)\t(\d+)\t\d\t(\d+)\tstore",
            r"retry_after_ms\":(\d+),\"reset_after_ms\":(\d+)",
            r"reset_after_ms\":(\d+)",
            r"^\S+\t\w+\t\d+\t\d+\t(\d+)\t",
            # gcra's count drains as time passes: slower builds (ASan,
            # valgrind) see less of it used by the time inspect runs.
            r"^10/1s:gcra\tgcra\t(\d+)\t(\d+)\t(\d+)\ttat_us=(\d+)",
            r"\t(\d+)\tstore$",
        ],
    },
    "docs/commands.md": {
        "servers": ["redis"],
        "vary": [r"\(integer\) (\d{4,})"],
    },
    # No server: its 127.0.0.1:8080 is an example config's address.
    "docs/config.md": {},
    # No server: the page's 127.0.0.1:8080 is what --check-config prints.
    "docs/install.md": {"vary": [r"libratel\.so\.(\d+\.\d+\.\d+)$"]},
    "docs/lua.md": {
        "servers": ["redis"],
        "vary": [r"\(integer\) (\d{4,})", r"^(\d{4,})$"],
    },
    "docs/deployment.md": {"starts": ["redis"]},
    # Starts rateld on the SMS-pumping recipe (a copy: its port, a token).
    "docs/keys.md": {
        "starts": ["rateld"],
        "rateld_config": "examples/sms-pumping.yaml",
        "subs": [(r"examples/sms-pumping\.yaml", "{tmp}/sms-pumping.yaml")],
    },
    # No server: its 127.0.0.1:8080 is what --check-config prints.
    "docs/envoy.md": {},
    # Starts rateld on the login recipe (a copy: its port).
    "docs/login.md": {
        "starts": ["rateld"],
        "rateld_config": "examples/login.yaml",
        "subs": [(r"examples/login\.yaml", "{tmp}/login.yaml")],
        "vary": [r"_ms\":([1-9]\d*)"],
    },
    "docs/rateld.md": {
        "servers": ["rateld"],
        # --check-config of the copy the harness runs (its port, its tokens).
        "subs": [(r"examples/rateld\.yaml", "{tmp}/rateld.yaml")],
        "vary": [
            r"r=0;t=(\d+)",
            r"Retry-After: (\d+)",
            r"Content-Length: (\d+)",
            # Times left: a run takes a few milliseconds more or less. A
            # shown 0 is a 0.
            r"_ms\":([1-9]\d*)",
            # What the page's earlier requests left: their 4xx, their keys.
            r"code=\"4xx\"\} (\d+)$",
            r"^ratel_store_keys (\d+)$",
        ],
    },
    "docs/testing.md": {"servers": ["redis"]},
    "captchad/README.md": {
        "servers": ["captchad"],
        # --check-config of the copy the harness runs (its port, its token).
        "subs": [(r"captchad/captchad\.yaml", "{tmp}/captchad.yaml")],
        "vary": [
            r"Your code is (\d+)",
            r"\"code\":\"(\d+)\"",
            r"_ms\": (\d+)",
            r"r=0;t=(\d+)",
            r"Retry-After: (\d+)",
            r"retry_after_s\":(\d+)",
        ],
    },
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_listening(port, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        if listening(port):
            return True
        time.sleep(0.05)
    return False


class Block:
    def __init__(self, page, line, lang, body, mark):
        self.page, self.line, self.lang, self.body, self.mark = page, line, lang, body, mark

    def is_shell(self):
        # A prompt makes a session whatever the block is tagged (```text,
        # ```shell-session): a tag cannot hide an example from the test.
        if self.lang in SHELL_LANGS:
            return True
        return any(l.startswith("$ ") or PROMPT_RE.match(l) for l in self.body)


def blocks_of(page, text):
    """The fenced blocks of a page, each with the marker line before it."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mark = MARK_RE.match(lines[k]) if k >= 0 else None
        out.append(Block(page, i + 1, m.group(1), lines[i + 1 : j], mark))
        i = j + 1
    return out


class Command:
    """One command of a block and what the page shows it printing."""

    def __init__(self, block, line, text, shown):
        self.block, self.line, self.text, self.shown = block, line, text, shown


def commands_of(block):
    body = block.body
    session = any(l.startswith("$ ") for l in body)
    prompts = any(PROMPT_RE.match(l) for l in body)
    cmds = []
    if not session and not prompts:
        for n, l in enumerate(body):
            if l.strip() and not l.lstrip().startswith("#"):
                cmds.append(Command(block, block.line + 1 + n, l, None))
        # A script line ending in `\` continues on the next.
        merged = []
        for c in cmds:
            if merged and merged[-1].text.endswith("\\"):
                merged[-1].text += "\n" + c.text
            else:
                merged.append(c)
        return merged
    i = 0
    while i < len(body):
        l = body[i]
        m = PROMPT_RE.match(l) if prompts else None
        if session and l.startswith("$ "):
            text, start = l[2:], i
            while text.endswith("\\") and i + 1 < len(body):
                i += 1
                text += "\n" + body[i]
        elif m:
            # redis-cli's own quoting ("..." and '...'), not the shell's: a
            # `>password` of ACL SETUSER is an argument, not a redirection.
            text, start = "redis-cli " + " ".join(shlex.quote(a) for a in shlex.split(m.group(3))), i
        else:
            i += 1
            continue
        shown = []
        i += 1
        while i < len(body) and not (
            (session and body[i].startswith("$ ")) or (prompts and PROMPT_RE.match(body[i]))
        ):
            shown.append(body[i])
            i += 1
        cmds.append(Command(block, block.line + 1 + start, text, shown))
    return cmds


def pattern_of(shown, vary):
    """A regular expression matching what a command printed, from the page."""
    lines = list(shown)
    while lines and not lines[-1].strip():
        lines.pop()
    parts = []
    for l in lines:
        if l.startswith("..."):
            # "..." alone or followed by prose ("(20 times 200)", "# note")
            # stands for any lines; followed by output ("... 8) (integer) 1"),
            # for any lines and then that line.
            parts.append(r"(?:[^\n]*\n)*?")
            rest = COMMENT_RE.sub("", l[3:]).strip()
            if not rest or rest.startswith(("(", "\uff08", "#")):
                continue
            l = rest
        l = COMMENT_RE.sub("", l).rstrip()
        spans = []
        for v in vary:
            for m in re.finditer(v, l):
                groups = range(1, len(m.groups()) + 1) if m.groups() else [0]
                spans += [m.span(g) for g in groups if m.span(g)[0] >= 0]
        spans.sort()
        out, at = "", 0
        for a, b in spans:
            if a < at:
                continue
            piece = l[a:b]
            out += re.escape(l[at:a])
            out += r"\d+" if piece.isdigit() else (r"[\d.]+" if re.fullmatch(r"[\d.]+", piece) else r".*?")
            at = b
        out += re.escape(l[at:])
        parts.append(out + r"\n")
    return re.compile("".join(parts) + r"\Z")


class Page:
    def __init__(self, root, build, name):
        self.root, self.build, self.name = root, build, name
        self.conf = PAGES.get(name, {})
        self.tmp = tempfile.mkdtemp(prefix="ratel-docs.")
        self.ports = {}
        self.pids = []
        self.token = os.urandom(32).hex()  # as `openssl rand -hex 32`
        self.api_token = os.urandom(32).hex()

    # -- servers -----------------------------------------------------------
    def config_copy(self, src, port):
        """The example config with only its port (and token) changed."""
        with open(os.path.join(self.root, src)) as f:
            text = f.read()
        text = re.sub(r"(?m)^listen: .*$", "listen: 127.0.0.1:%d" % port, text)
        if re.search(r"(?m)^admin_token:", text):
            text = re.sub(r"(?m)^admin_token:.*$", 'admin_token: "%s"' % self.token, text)
        else:
            text += '\nadmin_token: "%s"\n' % self.token
        # rateld's application token, where the example has the field
        # (captchad has none): what a reader who followed the comment above
        # it put there.
        text = re.sub(r"(?m)^api_token:.*$", 'api_token: "%s"' % self.api_token, text)
        dst = os.path.join(self.tmp, os.path.basename(src))
        # It holds a token: readable by its owner only, as the docs advise.
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return dst

    def spawn(self, argv, log):
        with open(os.path.join(self.tmp, log), "w") as out:
            p = subprocess.Popen(argv, cwd=self.tmp, stdout=out, stderr=out, start_new_session=True)
        self.pids.append(p)
        return p

    def start(self, kind, port):
        b = self.build
        if kind == "rateld":
            cfg = self.config_copy("examples/rateld.yaml", port)
            self.spawn([os.path.join(b, "rateld"), "--config", cfg], "rateld.log")
        elif kind == "captchad":
            cfg = self.config_copy("captchad/captchad.yaml", port)
            self.spawn([os.path.join(b, "captchad"), "--config", cfg], "captchad.log")
        elif kind in ("redis", "redis_plain"):
            argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            if kind == "redis":
                argv += ["--loadmodule", os.path.join(b, "ratel.so")]
            self.spawn(argv, kind + ".log")
        if kind != "dead" and not wait_listening(port):
            raise RuntimeError("%s did not start on port %d (see its log)" % (kind, port))

    def servers_needed(self, cmds):
        """A page without an entry in PAGES gets the servers whose ports
        its commands show (a redis-cli prompt or command: the module's)."""
        if self.name in PAGES:
            return self.conf.get("servers", [])
        text = "\n".join(c.text + "\n" + "\n".join(c.shown or []) for c in cmds)
        need = [k for k, port in SERVER_PORTS.items() if re.search(r":%d\b" % port, text)]
        if re.search(r"(?<![\w-])redis-cli(?![\w-])", text) and "redis" not in need:
            need.append("redis")
        return need

    def setup(self, cmds):
        self.conf = dict(self.conf, servers=self.servers_needed(cmds))
        # The pages say build/: it is the build under test ($BUILD, e.g.
        # build-asan under `make asan`).
        for entry in os.listdir(self.root):
            if not entry.startswith(".") and entry != "build":
                os.symlink(os.path.join(self.root, entry), os.path.join(self.tmp, entry))
        os.symlink(self.build, os.path.join(self.tmp, "build"))
        for kind in self.conf.get("servers", []) + self.conf.get("starts", []):
            self.ports[kind] = free_port()
        for kind in self.conf.get("starts", []):
            if kind == "captchad":
                self.config_copy("captchad/captchad.yaml", self.ports[kind])
            elif kind == "rateld" and self.conf.get("rateld_config"):
                self.config_copy(self.conf["rateld_config"], self.ports[kind])
        for kind in self.conf.get("servers", []):
            self.start(kind, self.ports[kind])

    def teardown(self):
        for p in self.pids:
            stop_group(p)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- substitution ------------------------------------------------------
    def substitute(self, text):
        for kind, port in self.ports.items():
            shown = SERVER_PORTS[kind]
            text = re.sub(r"(127\.0\.0\.1|localhost):%d\b" % shown, r"\g<1>:%d" % port, text)
        if "redis" in self.ports:
            text = re.sub(r"(?<![\w-])redis-cli(?![\w-])", "redis-cli -p %d" % self.ports["redis"], text)
            text = re.sub(r"(?<![\w-])redis-server (?!--port)", "redis-server --port %d " % self.ports["redis"], text)
            text = re.sub(r"(--port|-p) 6379\b", r"\g<1> %d" % self.ports["redis"], text)
        text = re.sub(r"(?<![\w.])/tmp/", self.tmp + "/", text)
        for pat, rep in self.conf.get("subs", []):
            text = re.sub(pat, rep.format(tmp=self.tmp, token=self.token), text)
        return text


def stop_group(p):
    """Stops a process and everything it left in its group (servers a page
    started with `&`): SIGTERM, then SIGKILL for what is still there after
    a few seconds (a redis-server whose final save fails never exits)."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        end = time.time() + grace
        while time.time() < end:
            p.poll()
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    p.wait()


def run_session(page, cmds, timeout=120):
    """Runs the commands in one bash on a pseudo-terminal; their outputs."""
    script = ["__docs_wait() { local p; for p in \"$@\"; do for __i in $(seq 200); do"
              " (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.05; done; done; }"]
    own = [page.ports[k] for k in page.conf.get("starts", [])]
    for n, c in enumerate(cmds):
        script.append("__s=$?; printf '\\n@@DOCS %d %%d@@\\n' $__s; (exit $__s)" % n)
        script.append(page.substitute(c.text))
        if c.text.rstrip().endswith("&") and own:
            script.append("__docs_wait %s" % " ".join(map(str, own)))
    script.append("__s=$?; printf '\\n@@DOCS %d %%d@@\\n' $__s" % len(cmds))
    path = os.path.join(page.tmp, ".docs-session.sh")
    with open(path, "w") as f:
        f.write("\n".join(script) + "\n")
    master, slave = pty.openpty()
    tty.setraw(slave)
    # $TOKEN and $API_TOKEN: the admin and the application token the
    # harness put in the configs it wrote, as a reader exports the ones
    # they put in theirs.
    env = dict(os.environ, TERM="dumb", LC_ALL="C.UTF-8", COLUMNS="200", TOKEN=page.token,
               API_TOKEN=page.api_token)
    # A reader's shell has none of the test suite's variables.
    # Nor make's (a `make` a page runs would look for the suite's jobserver).
    for name in ("BUILD", "RATEL_STORE", "RATEL_TEST_SCALE", "RATEL_TEST_SEED", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(name, None)
    p = subprocess.Popen(["bash", path], cwd=page.tmp, stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, start_new_session=True, env=env)
    os.close(slave)
    data, end = b"", time.time() + timeout
    last = ("\n@@DOCS %d " % len(cmds)).encode()
    while time.time() < end:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
            if last in data and data.rstrip().endswith(b"@@"):
                break
        elif p.poll() is not None and last in data:
            break
    stop_group(p)
    os.close(master)
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    # What a terminal shows: no escape sequences (curl's bold header names).
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    outs, status = {}, {}
    pieces = re.split(r"\n@@DOCS (\d+) (\d+)@@\n", "\n" + text)
    for k in range(1, len(pieces) - 1, 3):
        n, rc, body = int(pieces[k]), int(pieces[k + 1]), pieces[k + 2]
        outs[n] = body
        if n > 0:
            status[n - 1] = rc
    return outs, status


def check_command(page, c, got, rc, vary, tally):
    """One command: its output against the page's (a script line: its exit
    status)."""
    where = "%s:%d" % (page.name, c.line)
    got = "\n".join(l.rstrip() for l in got.split("\n")).strip("\n")
    got = got + "\n" if got else ""
    if c.shown is None:
        if rc == 0:
            tally.ok(where)
        else:
            tally.fail(where, "exit %s: %s\n%s" % (rc, c.text, got[-1500:]))
        return
    shown = [page.substitute(l) for l in c.shown]
    if pattern_of(shown, vary).match(got):
        tally.ok(where)
    else:
        want = "\n".join(shown).rstrip("\n")
        tally.fail(where, "$ %s\n--- shown:\n%s\n--- printed:\n%s" % (c.text, want, got[:3000].rstrip("\n")))


def check_copy(root, block, tally):
    """A block marked `from: PATH`: its lines are consecutive lines of
    PATH, so a page never shows a configuration the file no longer has."""
    where = "%s:%d" % (block.page, block.line)
    path = block.mark.group(2)
    try:
        with open(os.path.join(root, path)) as f:
            lines = f.read().split("\n")
    except OSError as e:
        tally.fail(where, "from: %s: %s" % (path, e))
        return
    want = block.body
    n = len(want)
    if n and any(lines[i : i + n] == want for i in range(len(lines) - n + 1)):
        tally.ok(where)
        return
    # Say where it departs: the longest run of the block's first lines that
    # the file has.
    best = 0
    for i in range(len(lines)):
        k = 0
        while k < n and i + k < len(lines) and lines[i + k] == want[k]:
            k += 1
        best = max(best, k)
    tally.fail(where, "not the text of %s: its line %d (%r) is not there after the ones before it"
               % (path, block.line + 1 + best, want[best] if best < n else ""))


def check_page(root, build, name, tally, quiet=False):
    with open(os.path.join(root, name)) as f:
        blocks = blocks_of(name, f.read())
    # Marks count on any block (a config snippet that needs Envoy, a
    # gateway's snippet run by its test); unmarked, only shell blocks run.
    run = [b for b in blocks if b.is_shell() and not b.mark]
    skipped = [b for b in blocks if b.mark and b.mark.group(1) == "not run"]
    elsewhere = [b for b in blocks if b.mark and b.mark.group(1) == "snippet"]
    copies = [b for b in blocks if b.mark and b.mark.group(1) == "from"]
    if not quiet:
        print("== %s: %d run, %d not run (marked), %d run by other tests, %d checked against their file, "
              "%d other blocks (config, output, prose)"
              % (name, len(run), len(skipped), len(elsewhere), len(copies),
                 len(blocks) - len(run) - len(skipped) - len(elsewhere) - len(copies)))
        for b in skipped:
            print("   not run %s:%d: %s" % (name, b.line, b.mark.group(2)))
    for b in copies:
        check_copy(root, b, tally)
    if not run:
        return
    page = Page(root, build, name)
    try:
        cmds = [c for b in run for c in commands_of(b)]
        page.setup(cmds)
        outs, status = run_session(page, cmds)
        vary = VARY_ALL + page.conf.get("vary", [])
        for n, c in enumerate(cmds):
            if n not in outs:
                tally.fail("%s:%d" % (name, c.line), "did not run (the session stopped before it): %s" % c.text)
                break
            check_command(page, c, outs[n], status.get(n), vary, tally)
    except (RuntimeError, OSError) as e:
        tally.fail(name, str(e))
    finally:
        page.teardown()


class Tally:
    def __init__(self, quiet=False):
        self.passed = self.failed = 0
        self.quiet, self.lines = quiet, []

    def ok(self, name):
        self.lines.append("ok %s" % name)
        if not self.quiet:
            print("ok %s" % name)
        self.passed += 1

    def fail(self, name, why):
        self.lines.append("FAIL %s" % name)
        if not self.quiet:
            print("FAIL %s: %s" % (name, why))
        self.failed += 1


SELF_TEST_PAGE = """# A page
```sh
$ echo right
right
$ echo wrong
what the page claims
```

```sh
false
```

<!-- not run: would fail -->

```sh
$ false
never compared
```

```console
$ printf '1\\n2\\n3\\n'
...
3
```

```text
$ echo tagged
tagged
```

<!-- from: conf.yaml -->

```yaml
b: 2
c: 3
```

<!-- from: conf.yaml -->

```yaml
a: 1
c: 3
```
"""


def self_test(build, tally):
    """The runner itself: a wrong output and a failing script line fail, a
    marked block is not run, `...` matches lines, a tag hides no session,
    a block shown as a file's text must be that text."""
    root = tempfile.mkdtemp(prefix="ratel-docs-self.")
    try:
        with open(os.path.join(root, "page.md"), "w") as f:
            f.write(SELF_TEST_PAGE)
        with open(os.path.join(root, "conf.yaml"), "w") as f:
            f.write("a: 1\nb: 2\nc: 3\n")
        inner = Tally(quiet=True)
        check_page(root, build, "page.md", inner, quiet=True)
        want = ["ok page.md:33", "FAIL page.md:40", "ok page.md:3", "FAIL page.md:5", "FAIL page.md:10",
                "ok page.md:21", "ok page.md:27"]
        if inner.lines == want:
            tally.ok("runner self-test")
        else:
            tally.fail("runner self-test", "got %s, want %s" % (inner.lines, want))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    root, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    pages = sys.argv[3:]
    if not pages:
        pages = ["README.md", "README.zh-CN.md"]
        pages += sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
        pages.append("captchad/README.md")
        ex = os.path.join(root, "examples")
        pages += sorted("examples/%s/README.md" % d for d in os.listdir(ex)
                        if os.path.exists(os.path.join(ex, d, "README.md")))
    tally = Tally()
    self_test(build, tally)
    for name in pages:
        check_page(root, build, name, tally)
    print("%d passed, %d failed" % (tally.passed, tally.failed))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
