#!/usr/bin/env bash
# The LibTorch 2.x leg: the whole suite (scripts/test.sh: build, CTest, pytest) against Debian
# trixie's LibTorch 2.6 (CPU), inside a trixie root made with debootstrap, from this checkout, into
# build-libtorch2/. The root is made once (about 4 minutes: debootstrap, then the packages of
# scripts/debian-packages.txt) and reused while the package list is unchanged.
#
# Usage: scripts/test-libtorch2.sh [--make-root | COMMAND [ARG...]]
#   With a command, runs that inside the root in this checkout instead of the suite, for example
#   `scripts/test-libtorch2.sh ./build-libtorch2/ddpbench --strategy all`. With --make-root, makes
#   (or checks) the root and stops there: .ci/run makes it so while the 1.13 leg builds.
# Environment: DDPBENCH_TRIXIE_ROOT (default /var/tmp/ddpbench-trixie), DDPBENCH_DEBIAN_MIRROR
#   (default http://deb.debian.org/debian), DDPBENCH_PRESET (passed on to scripts/test.sh).
# Needs root (chroot and mount). Every mount it makes is undone on every way out.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"
root="${DDPBENCH_TRIXIE_ROOT:-/var/tmp/ddpbench-trixie}"
mirror="${DDPBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
say() { echo "test-libtorch2: $*"; }
die() { echo "test-libtorch2: error: $*" >&2; exit 2; }

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "needs root (chroot, mount), and there is no sudo"
  exec sudo --preserve-env=DDPBENCH_TRIXIE_ROOT,DDPBENCH_DEBIAN_MIRROR,DDPBENCH_PRESET,CI "$0" "$@"
fi
make_root_only=0
if [ "${1:-}" = "--make-root" ]; then make_root_only=1; shift; fi
case "$root" in /* ) ;; *) die "DDPBENCH_TRIXIE_ROOT must be an absolute path: $root" ;; esac
[ "$root" != / ] || die "DDPBENCH_TRIXIE_ROOT must not be /"
case "$repo/" in "$root"/*) die "the checkout $repo lies inside DDPBENCH_TRIXIE_ROOT $root" ;; esac

mapfile -t packages < <(sed -e 's/#.*//' scripts/debian-packages.txt | tr -s ' \t' '\n' | sed '/^$/d')
wanted="$(printf '%s\n' "${packages[@]}" | sort)"

# ---- mounts: made by mount_into, all undone by unmount_under on exit ------------------------------
mounts_under() {  # mount points at or below $1, deepest first
  awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r
}
unmount_under() {
  local m
  while IFS= read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "test-libtorch2: warning: could not unmount $m" >&2
  done < <(mounts_under "$1")
}
# Removes a root that is not in use; refuses while anything is still mounted inside it.
remove_root() {
  local dir="$1"
  [ -e "$dir" ] || return 0
  unmount_under "$dir"
  [ -z "$(mounts_under "$dir")" ] || die "$dir still has mounts inside; not removing it"
  rm -rf --one-file-system "$dir"
}
# What runs inside the root runs in a session of its own (started by run_in_session): a signal to
# this script ends that whole session at once, then the mounts go. (A trap does not run
# while bash waits for a foreground child, so the child is waited for in the background.)
inner=""
end_inner() {  # every process of the inner session: ddpbench's ranks run in process groups of their own
  [ -n "$inner" ] || return 0
  pkill -TERM -s "$inner" 2>/dev/null
  for _ in $(seq 50); do pgrep -s "$inner" >/dev/null 2>&1 || break; sleep 0.1; done
  pkill -KILL -s "$inner" 2>/dev/null
  wait "$inner" 2>/dev/null
  inner=""
}
cleanup() {
  set +e  # the way out runs to its end: a pkill that finds nothing must not skip the unmounts
  end_inner
  unmount_under "$root"
  unmount_under "$root.partial"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
run_in_session() {  # run_in_session COMMAND...: its exit status, interruptible by INT/TERM
  # A background job of a non-interactive shell leads no process group, so setsid makes the new
  # session in that very process: its pid is the session id that end_inner ends.
  setsid "$@" &
  inner=$!
  local status=0
  wait "$inner" || status=$?
  inner=""
  return $status
}

mount_into() {  # mount_into ROOT: what the suite needs from the host, and this checkout
  local r="$1"
  mount --bind "$r" "$r"  # the root a mount point of its own: `ip netns` remounts / inside it
  mount -t proc proc "$r/proc"
  mount --bind /dev "$r/dev"
  mount --bind /dev/shm "$r/dev/shm"  # Hogwild's shared memory, and the leak checks that look at it
  mount --bind /dev/pts "$r/dev/pts"
  mount --bind /sys "$r/sys"
  mkdir -p "$r$repo"
  mount --bind "$repo" "$r$repo"      # same path inside: build folders and test paths agree
  # The host's CUDA toolkit, read-only, where it has one: NVTX v3's headers for the NVTX tests, and
  # cuda_runtime_api.h and nccl.h for the syntax check of the CUDA branches against 2.x's headers.
  if [ -d /usr/local/cuda/include ]; then
    mkdir -p "$r/usr/local/cuda"
    mount --bind "$(readlink -f /usr/local/cuda)" "$r/usr/local/cuda"
    mount -o remount,bind,ro "$r/usr/local/cuda"
  fi
}
root_argv() {  # root_argv ROOT: sets `argv` to chroot ROOT in a clean environment, but for what the suite reads
  argv=(chroot "$1" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" DDPBENCH_PRESET="${DDPBENCH_PRESET:-}"
        DEBIAN_FRONTEND=noninteractive)
}
in_root() {  # in_root ROOT COMMAND...
  local argv
  root_argv "$1"
  shift
  "${argv[@]}" "$@"
}
install_packages() {  # install_packages ROOT
  local r="$1"
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  in_root "$r" apt-get update -qq
  in_root "$r" apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$r/var/log/ddpbench-apt.log" 2>&1 || {
    tail -n 5 "$r/var/log/ddpbench-apt.log" >&2
    die "apt-get install in the trixie root failed (log: $r/var/log/ddpbench-apt.log)"
  }
  printf '%s\n' "$wanted" >"$r/.ddpbench-packages"
}

# ---- the root: reused when its packages are the wanted ones, else completed or made -----------------
if [ -f "$root/.ddpbench-packages" ]; then
  if [ "$(cat "$root/.ddpbench-packages")" = "$wanted" ]; then
    say "reusing the trixie root $root"
  else
    say "the package list changed: installing into $root"
    unmount_under "$root"
    mount_into "$root"
    install_packages "$root"
    unmount_under "$root"
  fi
else
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; } ||
      die "cannot install debootstrap"
  fi
  [ ! -e "$root" ] || remove_root "$root"  # a root without the marker is an unfinished one
  remove_root "$root.partial"
  started=$(date +%s)
  say "making a Debian trixie root in $root (debootstrap, then ${#packages[@]} packages)"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase trixie "$root.partial" "$mirror" >"/tmp/ddpbench-debootstrap.log" 2>&1 || {
    tail -n 5 /tmp/ddpbench-debootstrap.log >&2
    die "debootstrap failed (log: /tmp/ddpbench-debootstrap.log)"
  }
  mount_into "$root.partial"
  install_packages "$root.partial"
  unmount_under "$root.partial"
  mv "$root.partial" "$root"
  say "trixie root ready in $(( $(date +%s) - started )) s"
fi

[ "$make_root_only" = 0 ] || exit 0

# ---- the suite (or the given command) inside the root ----------------------------------------------
mount_into "$root"
say "LibTorch $(in_root "$root" /usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?') in $root"
if [ $# -eq 0 ]; then
  set -- env DDPBENCH_BUILD_DIR=build-libtorch2 ./scripts/test.sh
fi
status=0
root_argv "$root"
run_in_session "${argv[@]}" /bin/bash -c 'cd "$0" && exec "$@"' "$repo" "$@" || status=$?
exit $status
