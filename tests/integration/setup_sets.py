#!/usr/bin/env python3
"""setup_sets.py SETUP_SH ROOT - the two package sets of scripts/setup.sh
checked (test_setup.sh): `ok NAME: why` or `FAIL NAME: why` per check.

  - both sets are there, not empty, and share no package;
  - the base set (what `make`, `make run` and `make install` need) holds
    none of the servers only the tests start (nginx, Caddy, HAProxy,
    Prometheus, Redis), neither itself nor through its packages'
    Depends/Pre-Depends (nginx-dev depends on nginx);
  - every package of the base set is used by the build or by running
    ratel, as found in the tree: a command the Makefile's recipes or the
    scripts they run call (tests/integration/commands.py's parser), a
    pkg-config module or an -l library the Makefile links, a header the
    sources outside tests/ and bench/ include, a .proto file proto/
    imports; a package of no files of its own by what its Depends bring
    (build-essential, pkg-config); or one of EXCEPTIONS, whose use is a reader's
    command in the README. A package only the tests use fails here.

Packages are looked up in the dpkg database: run it where the test set is
installed (after `scripts/setup.sh --test`).
"""
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import commands  # noqa: E402  (tests/integration/commands.py)

# Servers the tests start on ports of their own, never for the base set.
TEST_SERVERS = ["nginx", "caddy", "haproxy", "prometheus", "redis-server"]
# Base packages used by a reader's command rather than by a build file.
EXCEPTIONS = {
    "curl": "README: the first minute's requests to `make run`",
    "openssl": "README: `openssl rand -hex 32` makes the tokens",
}
# The files of the build, `make run` and `make install`: the Makefile and
# the scripts its recipes run for them.
BUILD_FILES = ["Makefile", "scripts/lua-build.sh", "scripts/embed-lua.sh", "scripts/man.sh",
               "scripts/redismodule-h.sh", "scripts/install.sh"]
SOURCE_DIRS = ["include", "lib", "server", "rateld", "captchad", "cli", "module"]
INCLUDE_DIRS = ["/usr/include", "/usr/include/x86_64-linux-gnu"]


def array(text, name):
    m = re.search(r"^%s=\((.*?)^\)" % name, text, re.S | re.M)
    if not m:
        return None
    return re.sub(r"#.*", "", m.group(1)).split()


def owners(paths):
    """{path: package} for the paths dpkg knows (one dpkg -S)."""
    paths = sorted(set(paths))
    if not paths:
        return {}
    out = subprocess.run(["dpkg", "-S"] + paths, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        if line.startswith("diversion ") or ": " not in line:
            continue
        pkgs, path = line.split(": ", 1)
        found[path] = pkgs.split(",")[0].split(":")[0].strip()
    return found


def with_usr(path):
    """A path and its merged-/usr twin (/lib/x is /usr/lib/x)."""
    if path.startswith("/usr/"):
        return [path, path[4:]]
    return [path, "/usr" + path]


def build_uses(root):
    """{package: why} for every package the build files reach."""
    uses = {}
    makefile = open(os.path.join(root, "Makefile")).read()

    # Commands of the recipes and scripts.
    files = [os.path.join(root, f) for f in BUILD_FILES if os.path.exists(os.path.join(root, f))]
    cmds = commands.used_commands(root, files)
    for tool in commands.MAKEFILE_TOOLS:
        cmds.setdefault(tool, ["Makefile (CC, AR)"])
    for cmd, (pkg, _) in commands.packages_of(cmds).items():
        if pkg:
            uses.setdefault(pkg, "runs %s (%s)" % (cmd, cmds[cmd][0]))

    # pkg-config modules, -l libraries.
    paths = {}
    for group in re.findall(r"pkg-config --(?:libs|cflags)((?: [-\w.]+)+)", makefile):
        for mod in group.split():
            if mod.startswith("-"):
                continue
            pc = subprocess.run(["pkg-config", "--path", mod], capture_output=True, text=True).stdout.strip()
            if pc:
                for p in with_usr(os.path.realpath(pc)):
                    paths[p] = "pkg-config %s" % mod
    for lib in set(re.findall(r"(?<![\w-])-l([\w+]+)", makefile)):
        for so in glob.glob("/usr/lib/x86_64-linux-gnu/lib%s.so" % lib) + glob.glob("/usr/lib/lib%s.so" % lib):
            for p in with_usr(so):
                paths[p] = "links -l%s" % lib

    # Headers of the sources, .proto imports.
    cflags = subprocess.run(["bash", "-c", "pkg-config --cflags-only-I hiredis libevent yaml-0.1 libcjson "
                             "libsystemd libnghttp2 libprotobuf-c openssl sqlite3 libcurl 2>/dev/null"],
                            capture_output=True, text=True).stdout
    dirs = INCLUDE_DIRS + [d[2:] for d in cflags.split() if d.startswith("-I")]
    wanted = set()
    for d in SOURCE_DIRS:
        for f in glob.glob(os.path.join(root, d, "**", "*.*"), recursive=True):
            if f.endswith((".c", ".h", ".cc")):
                wanted |= set(re.findall(r'^\s*#\s*include\s*<([^>]+)>', open(f, errors="replace").read(), re.M))
    for f in glob.glob(os.path.join(root, "proto", "**", "*.proto"), recursive=True):
        wanted |= set(re.findall(r'^import "([^"]+)"', open(f, errors="replace").read(), re.M))
    for h in wanted:
        for d in dirs:
            p = os.path.join(d, h)
            if os.path.exists(p):
                for q in with_usr(os.path.realpath(p)) + with_usr(p):
                    paths[q] = "includes <%s>" % h
                break
    for path, pkg in owners(list(paths)).items():
        uses.setdefault(pkg, paths[path])
    return uses


def own_files(pkg):
    """A package's programs, libraries and headers: none for a package
    that only depends on others (its files all under /usr/share)."""
    out = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True).stdout.split()
    return [f for f in out if os.path.isfile(f) and not f.startswith("/usr/share/")]


def main():
    setup_sh, root = sys.argv[1], sys.argv[2]
    text = open(setup_sh).read()
    base, test = array(text, "base_packages"), array(text, "test_packages")
    results = []

    def check(name, good, why):
        results.append(("ok" if good else "FAIL", name, why))

    check("sets_parsed", bool(base) and bool(test),
          "base_packages=(...) and test_packages=(...) in %s" % setup_sh)
    if not base or not test:
        return report(results)
    both = sorted(set(base) & set(test))
    check("sets_disjoint", not both, "in both sets: %s" % " ".join(both) if both else "no package in both")

    servers = [s for s in TEST_SERVERS if s in base]
    check("base_has_no_test_server", not servers,
          "base set lists %s" % " ".join(servers) if servers else "none of %s" % " ".join(TEST_SERVERS))
    pkgs, providers = commands.installed_packages()
    brought = commands.closure(base, pkgs, providers)
    pulled = [s for s in TEST_SERVERS if s in brought]
    check("base_pulls_no_test_server", not pulled,
          "base set's Depends bring %s" % " ".join(pulled) if pulled
          else "%d packages brought by the base set, none a test server" % len(brought))

    uses = build_uses(root)
    for p in base:
        real = p if p in pkgs else next(iter(sorted(providers.get(p, set()))), p)
        if real in uses:
            check("base_used_" + p, True, uses[real])
        elif p in EXCEPTIONS:
            check("base_used_" + p, True, EXCEPTIONS[p])
        elif real in pkgs and not own_files(real):
            deps = commands.closure([real], pkgs, providers) - {real}
            used = sorted(d for d in deps if d in uses)
            check("base_used_" + p, bool(used),
                  "brings %s" % ", ".join("%s (%s)" % (d, uses[d]) for d in used[:3]) if used
                  else "a package of no files whose Depends the build does not use")
        else:
            check("base_used_" + p, False,
                  "the build, `make run` and `make install` use nothing of it: a test set package?")
    return report(results)


def report(results):
    failed = 0
    for word, name, why in results:
        print("%s %s: %s" % (word, name, why))
        failed += word == "FAIL"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
