#!/usr/bin/env python3
"""commands.py SETUP_SH ROOT [FILE...] - every command the tree's shell
code runs, and the Debian package that provides it (test_commands.sh).

The shell files (every *.sh git tracks, .ci/run, debian/rules' and the
Makefile's recipes, or the FILEs given) are parsed by shfmt (Debian's
shfmt: a real shell parser, so here-documents, case patterns, comments
and continuations are what bash makes of them) and every simple
command's first word is taken, looking through the wrappers that run
another command (`command -v X`, `timeout N X`, `env A=B X`, `xargs X`,
`sudo X`, `exec X`, ...). Words that are not commands on the PATH are
dropped: shell builtins and keywords, functions the files define,
variables and other expansions, and paths into the tree.

Each command is then found with `command -v`, its file's package with
`dpkg -S`, and that package must be one scripts/setup.sh installs, one
they pull in by Depends/Pre-Depends (installed without recommends, so
nothing weaker counts), or Essential or Priority: required (on every
Debian system, minbase included). Prints one line per command
("ok CMD PACKAGE (why)" or "MISSING CMD ...: used at FILE:LINE") and
exits 1 when a command is missing.
"""
import json
import os
import re
import shutil
import subprocess
import sys

# Commands that run the command named by their next non-option word(s).
WRAPPERS = {"command", "exec", "env", "nohup", "sudo", "time", "timeout",
            "xargs", "nice", "setsid", "stdbuf", "unbuffer", "fakeroot"}
# Options of the wrappers above that take a value as the next word
# (`timeout -k 10 120 X`, `sudo -u U X`, `xargs -n 1 X`); `env -i` and
# the like take none.
WRAPPER_VALUE_OPTS = {"-k", "-s", "-u", "-g", "-n", "-I", "-P", "-L", "-d"}
# What the Makefile names through variables instead of recipe words: its
# compiler (CC ?= cc) and archiver (AR := gcc-ar or ar).
MAKEFILE_TOOLS = ["cc", "gcc-ar", "ar"]
# Called only where present: setup.sh asks for sudo when it is not root
# and sudo exists, and says what to run as root otherwise.
OPTIONAL = {"sudo"}
# Commands are looked up where Debian's packages put them: a PATH without
# /usr/local or a user's own directories (pyenv, cargo, ...), whose
# programs a fresh machine does not have.
DEBIAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def shell_sources(root, files):
    """(name, text) of each shell file; make recipes converted to shell."""
    if files:
        names = files
    else:
        out = subprocess.run(["git", "-C", root, "ls-files", "*.sh", "*.bash", ".ci/run"],
                             capture_output=True, text=True, check=True).stdout
        names = [os.path.join(root, n) for n in out.split()]
        names += [os.path.join(root, "Makefile"), os.path.join(root, "debian/rules")]
    for name in names:
        if not os.path.exists(name):
            continue
        text = open(name, encoding="utf-8", errors="replace").read()
        if os.path.basename(name) in ("Makefile", "rules"):
            text = make_recipes(text)
        yield name, text


def make_recipes(text):
    """A makefile's recipe lines and $(shell ...) calls as a shell script,
    line numbers kept; make's own references become a plain word."""
    lines = []
    for line in text.split("\n"):
        shell = re.findall(r"\$\(shell ([^()]*(?:\([^()]*\)[^()]*)*)\)", line)
        if line.startswith("\t"):
            body = line[1:].lstrip("@-+")
        elif shell:
            body = "; ".join(shell)
        else:
            body = ""
        body = body.replace("$$", "\0")
        prev = None
        while prev != body:  # innermost $(...) / ${...} first
            prev = body
            body = re.sub(r"\$[({][^(){}]*[)}]", "MAKEVAR", body)
        body = re.sub(r"\$[@<^?*%|+]", "MAKEVAR", body).replace("\0", "$")
        lines.append(body)
    # Recipe lines continued with a backslash stay one shell command.
    return "\n".join(lines)


def parse(text):
    out = subprocess.run(["shfmt", "--to-json"], input=text, capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(out.stderr.strip())
    return json.loads(out.stdout)


def literal(word):
    """The word's text when it is a plain literal (quotes allowed)."""
    text = ""
    for part in word.get("Parts", []):
        if part.get("Type") == "Lit":
            text += part.get("Value", "")
        elif part.get("Type") == "SglQuoted":
            text += part.get("Value", "")
        elif part.get("Type") == "DblQuoted" and all(p.get("Type") == "Lit" for p in part.get("Parts", [])):
            text += "".join(p.get("Value", "") for p in part.get("Parts", []))
        else:
            return None
    return text


def unwrap(words):
    """The command a call runs, looking through wrappers: [(name, line)]."""
    found = []
    i = 0
    while i < len(words):
        name, line = words[i]
        if name is None:
            return found
        found.append((name, line))
        if os.path.basename(name) not in WRAPPERS:
            return found
        i += 1
        # Skip the wrapper's options, assignments (env) and, for timeout,
        # its duration.
        while i < len(words):
            w = words[i][0]
            if w is None:
                return found
            if w.startswith("-"):
                i += 2 if w in WRAPPER_VALUE_OPTS else 1
            elif "=" in w or (os.path.basename(name) == "timeout" and re.fullmatch(r"[0-9.]+[smhd]?", w)):
                i += 1
            else:
                break
    return found


def calls(node, out, functions):
    """Every simple command's words (literal or None) with line numbers
    into out, every function's name into functions."""
    if isinstance(node, dict):
        if node.get("Type") == "CallExpr" and node.get("Args"):
            out.append([(literal(a), a.get("Pos", {}).get("Line", 0)) for a in node["Args"]])
        if node.get("Type") == "FuncDecl":
            functions.add(node["Name"]["Value"])
        for v in node.values():
            calls(v, out, functions)
    elif isinstance(node, list):
        for v in node:
            calls(v, out, functions)


def builtins():
    out = subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True)
    return set(out.stdout.split()) | {"[[", "]]", "{", "}", "!"}


def used_commands(root, files):
    """{command: [FILE:LINE, ...]}; exits on a file shfmt cannot parse."""
    functions, uses = set(), {}
    for name, text in shell_sources(root, files):
        try:
            tree = parse(text)
        except ValueError as e:
            sys.exit("commands: shfmt cannot parse %s: %s" % (name, e))
        found = []
        calls(tree, found, functions)
        rel = os.path.relpath(name, root)
        for words in found:
            for cmd, line in unwrap(words):
                uses.setdefault(cmd, []).append("%s:%d" % (rel, line))
    skip = builtins() | functions
    return {c: u for c, u in uses.items() if is_command(c, skip)}


def is_command(word, skip):
    if not word or word in skip or "=" in word or word.startswith("-"):
        return False
    if "/" in word:
        # An absolute path outside the tree is a program; anything else
        # (build/rateld, scripts/x.sh, "$root/...") is the tree's own.
        return word.startswith(("/usr/", "/bin/", "/sbin/"))
    return re.fullmatch(r"[A-Za-z0-9_.+-]+", word) is not None and word != "MAKEVAR"


def setup_packages(setup_sh):
    """Both sets of setup.sh (base_packages and test_packages): the tree's
    commands are those of the build, the tests and the benchmarks."""
    text = open(setup_sh).read()
    found = set()
    for name in ("base_packages", "test_packages"):
        m = re.search(r"^%s=\((.*?)^\)" % name, text, re.S | re.M)
        if not m:
            sys.exit("commands: no %s=(...) array in %s" % (name, setup_sh))
        found |= set(re.sub(r"#.*", "", m.group(1)).split())
    return found


def installed_packages():
    """{name: (essential, priority, [dependency alternatives], provides)}."""
    fmt = "${Package}\t${db:Status-Status}\t${Essential}\t${Priority}\t${Pre-Depends}, ${Depends}\t${Provides}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True).stdout
    pkgs, providers = {}, {}
    for line in out.splitlines():
        name, status, essential, priority, deps, provides = line.split("\t")
        if status != "installed":
            continue
        alts = []
        for dep in deps.split(","):
            names = [re.sub(r"[\s(:].*", "", a.strip()) for a in dep.split("|")]
            names = [n for n in names if n]
            if names:
                alts.append(names)
        pkgs[name] = (essential == "yes", priority, alts)
        for p in provides.split(","):
            p = re.sub(r"[\s(].*", "", p.strip())
            if p:
                providers.setdefault(p, set()).add(name)
    return pkgs, providers


def closure(roots, pkgs, providers):
    """The installed packages the roots bring by Depends/Pre-Depends."""
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        for real in ({p} if p in pkgs else providers.get(p, set())):
            if real in seen:
                continue
            seen.add(real)
            for alts in pkgs[real][2]:
                todo.extend(a for a in alts if a in pkgs or a in providers)
    return seen


def packages_of(cmds):
    """{command: (package, path)}, or (None, why) for a command no package
    provides; one dpkg -S for all of them."""
    paths, result = {}, {}
    for cmd in cmds:
        path = cmd if cmd.startswith("/") else shutil.which(cmd, path=DEBIAN_PATH)
        if not path or not os.path.exists(path):
            result[cmd] = (None, "not installed")
            continue
        candidates = {path, os.path.realpath(path)}
        for c in list(candidates):  # merged /usr: /bin/x is /usr/bin/x
            candidates.add(c[4:] if c.startswith("/usr/") else "/usr" + c)
        paths[cmd] = (path, candidates)
    every = sorted({c for _, cs in paths.values() for c in cs})
    out = subprocess.run(["dpkg", "-S"] + every, capture_output=True, text=True).stdout if every else ""
    owner = {}
    for line in out.splitlines():
        if not line.startswith("diversion ") and ": " in line:
            pkg, path = line.split(": ", 1)
            owner[path] = pkg.split(",")[0].split(":")[0].strip()
    for cmd, (path, candidates) in paths.items():
        pkgs = [owner[c] for c in sorted(candidates) if c in owner]
        result[cmd] = (pkgs[0], path) if pkgs else (None, "%s belongs to no Debian package" % path)
    return result


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: commands.py SETUP_SH ROOT [FILE...]")
    setup_sh, root, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    uses = used_commands(root, files)
    if not files:
        for tool in MAKEFILE_TOOLS:
            uses.setdefault(tool, []).append("Makefile (CC, AR)")
    listed = setup_packages(setup_sh)
    pkgs, providers = installed_packages()
    brought = closure(listed, pkgs, providers)
    missing = 0
    owners = packages_of(uses)
    for cmd in sorted(uses):
        pkg, where = owners[cmd]
        if cmd in OPTIONAL:
            print("ok %s (optional: used only where present)" % cmd)
            continue
        at = ", ".join(uses[cmd][:3]) + (" ..." if len(uses[cmd]) > 3 else "")
        if pkg is None:
            print("MISSING %s: %s; used at %s" % (cmd, where, at))
            missing += 1
            continue
        essential, priority = pkgs.get(pkg, (False, "", []))[:2]
        if pkg in listed:
            why = "listed in setup.sh"
        elif essential or priority == "required":
            why = "essential" if essential else "priority required"
        elif pkg in brought:
            why = "a dependency of setup.sh's packages"
        else:
            print("MISSING %s: package %s is not installed by setup.sh; used at %s" % (cmd, pkg, at))
            missing += 1
            continue
        print("ok %s %s (%s)" % (cmd, pkg, why))
    print("%d commands, %d missing" % (len(uses), missing))
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
