#!/usr/bin/env bash
# Rehearses the README on a fresh machine: a minimal Debian 12
# (debootstrap --variant=minbase bookworm) in a chroot, the current
# checkout copied in, and the README's two set-ups run there as a new
# user would (docs/testing.md, "Rehearsing a fresh machine"): first
# `scripts/setup.sh && make` (the build on the base set, which must
# install none of nginx, caddy, haproxy, prometheus, redis-server), then
# the test command, `scripts/setup.sh --test && make test`.
#
#   scripts/rehearse-minbase.sh [--all | --base | --setup] [--keep] [DIR]
#
#   DIR     where the chroot goes (default /var/tmp/ratel-minbase; it is
#           created afresh, and removed at the end unless --keep)
#   --all   the whole test command (make test && make asan && make
#           valgrind), not only `scripts/setup.sh --test && make test`
#   --base  the base set-up alone (`scripts/setup.sh && make`, a few
#           minutes): what `make run` needs, and no test server
#   --setup the two set-ups without building: `scripts/setup.sh`, no test
#           server installed; `scripts/setup.sh --test`, none of them
#           enabled (the links a boot follows) or running
#   --keep  keep DIR, to look around (chroot DIR) after a failure
#
# Needs root (debootstrap, chroot, mounts) and the Debian archive; it
# installs debootstrap on the host when it is missing. The chroot gets
# /proc, /sys (with the cgroup mounts), /dev, /dev/pts, /dev/shm and a
# tmpfs /tmp, all unmounted
# at the end whatever happens, and a policy-rc.d that keeps the packages
# setup.sh installs (redis-server, nginx, ...) from starting their
# services on the host's ports, as in any chroot or container image. The
# output goes to DIR.log beside DIR; the last line printed is the suite's
# "N passed, N failed" (with --base or --setup, the set-ups' verdicts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

all=0 base_only=0 setup_only=0 keep=0 dir=/var/tmp/ratel-minbase
for arg in "$@"; do
    case $arg in
    --all) all=1 ;;
    --base) base_only=1 ;;
    --setup) setup_only=1 ;;
    --keep) keep=1 ;;
    -*) echo "usage: scripts/rehearse-minbase.sh [--all | --base | --setup] [--keep] [DIR]" >&2; exit 2 ;;
    *) dir=$arg ;;
    esac
done
if [ "$(id -u)" -ne 0 ]; then
    echo "rehearse: needs root (debootstrap, chroot and mounts): sudo $0 $*" >&2
    exit 1
fi
if [ -e "$dir" ]; then
    echo "rehearse: $dir exists; remove it or name another directory" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    echo "rehearse: installing debootstrap (apt-get install debootstrap)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

# The host's Debian mirror (its deb822 or one-line sources), so that the
# rehearsal needs no other network than the machine's own archive.
mirror=$(sed -n 's|^URIs: *\(http[^ ]*debian\)/*$|\1|p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
if [ -z "$mirror" ]; then
    mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
log=$dir.log

mounts=()
# shellcheck disable=SC2317 # reached: the EXIT trap below runs it
finish() {
    # Processes left in the chroot (a server a test did not stop) hold
    # its mounts: they go first.
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$dir" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
        umount -R "${mounts[i]}" 2>/dev/null || umount -R -l "${mounts[i]}" 2>/dev/null || true
    done
    if findmnt -rn -o TARGET | grep -qF "$dir/"; then
        echo "rehearse: mounts left under $dir:" >&2
        findmnt -rn -o TARGET | grep -F "$dir/" >&2
    elif [ "$keep" -eq 0 ]; then
        rm -rf "$dir"
    fi
}
trap finish EXIT

start=$(date +%s)
echo "rehearse: debootstrap --variant=minbase bookworm $dir $mirror"
debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$log" 2>&1 ||
    { tail -20 "$log" >&2; echo "rehearse: debootstrap failed (log: $log)" >&2; exit 1; }
printf '#!/bin/sh\n# rehearse-minbase.sh: no service starts in this chroot\nexit 101\n' \
    >"$dir/usr/sbin/policy-rc.d"
chmod 755 "$dir/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
# The machine's own certificate authorities (a TLS-inspecting proxy's, for
# npm's registry) are the machine's, not Debian's: the chroot trusts them
# too once setup.sh's ca-certificates runs update-ca-certificates.
if [ -d /usr/local/share/ca-certificates ]; then
    mkdir -p "$dir/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$dir/usr/local/share/ca-certificates/"
fi

# The checkout: tracked files and untracked ones git does not ignore
# (uncommitted work is rehearsed too), never build/.
mkdir -p "$dir/root/ratel"
(cd "$root" && scripts/tree-files.sh | tar --null -T - -cf -) | tar -xf - -C "$dir/root/ratel"
cp -a "$root/.git" "$dir/root/ratel/.git"
if [ -d "$root/../shared" ]; then
    cp -a "$root/../shared" "$dir/root/shared"
fi

# The chroot's root a mount point of its own (systemd-nspawn, which
# test_deb_systemd.sh would run, needs one).
mount --bind "$dir" "$dir"
mounts+=("$dir")
for m in proc sys dev dev/pts dev/shm tmp; do
    mkdir -p "$dir/$m"
    case $m in
    proc) mount -t proc proc "$dir/proc" ;;
    # /sys with its cgroup hierarchies (systemd-nspawn needs them:
    # test_deb_systemd.sh boots a container).
    sys) mount --rbind /sys "$dir/sys" && mount --make-rslave "$dir/sys" ;;
    dev) mount --bind /dev "$dir/dev" ;;
    dev/pts) mount -t devpts -o newinstance,ptmxmode=0666 devpts "$dir/dev/pts" ;;
    dev/shm | tmp) mount -t tmpfs tmpfs "$dir/$m" ;;
    esac
    mounts+=("$dir/$m")
done

# The base set-up first: it builds, and installs no test server.
servers='nginx caddy haproxy prometheus redis-server'
base="scripts/setup.sh && make && for p in $servers; do
    if dpkg-query -W -f='\${db:Status-Status}' \$p 2>/dev/null | grep -qx installed; then
        echo \"rehearse: the base set-up installed \$p\"; exit 1
    fi
done && echo 'rehearse: the base set-up installed no test server'"
if [ "$all" -eq 1 ]; then
    command='scripts/setup.sh --test && make test && make asan && make valgrind'
else
    command='scripts/setup.sh --test && make test'
fi
command="$base && $command"
if [ "$base_only" -eq 1 ]; then
    command=$base
fi
if [ "$setup_only" -eq 1 ]; then
    command="${base/scripts\/setup.sh && make &&/scripts/setup.sh \&\&} && scripts/setup.sh --test &&
    for p in $servers; do
        for l in /etc/systemd/system/*.wants/\$p.service /etc/rc[2-5].d/S[0-9][0-9]\$p; do
            if [ -L \"\$l\" ]; then echo \"rehearse: the test set-up left \$l\"; exit 1; fi
        done
        if [ -x /etc/init.d/\$p ] && /etc/init.d/\$p status >/dev/null 2>&1; then
            echo \"rehearse: the test set-up left \$p running\"; exit 1
        fi
    done && echo 'rehearse: the test set-up left no test server enabled or running'"
fi
echo "rehearse: in the chroot: cd /root/ratel && $command (log: $log)"
set +e
chroot "$dir" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/ratel && $command" >>"$log" 2>&1
rc=$?
set -e
grep -E '^FAIL ' "$log" | head -40 || true
echo "rehearse: exit $rc after $(($(date +%s) - start)) s (log: $log)"
grep -E '^rehearse: the (base|test) set-up' "$log" || echo "rehearse: the base set-up did not finish: $(tail -3 "$log")"
if [ "$base_only" -eq 0 ] && [ "$setup_only" -eq 0 ]; then
    grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1 || echo "rehearse: no test result line: $(tail -3 "$log")"
fi
exit "$rc"
