#!/usr/bin/env bash
# Installs what ddpbench needs from Debian's packages, and nothing else. Idempotent: when every
# package is present it only checks, and says so. Needs root (or sudo) only when something is missing.
set -euo pipefail

# The list is shared with scripts/test-libtorch2.sh, which installs it into a Debian trixie root.
mapfile -t PACKAGES < <(sed -e 's/#.*//' "$(dirname "$0")/debian-packages.txt" | tr -s ' \t' '\n' | sed '/^$/d')

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
else
  echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "setup: error: need root (or sudo) to install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get update -qq; then
    echo "setup: error: apt-get update failed; cannot install: ${missing[*]}" >&2
    exit 1
  fi
  if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/ddpbench-setup-apt.log 2>&1; then
    echo "setup: error: apt-get install failed for: ${missing[*]} (log: /tmp/ddpbench-setup-apt.log)" >&2
    tail -n 5 /tmp/ddpbench-setup-apt.log >&2 || true
    exit 1
  fi
  still=()
  for p in "${missing[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || still+=("$p")
  done
  if [ ${#still[@]} -ne 0 ]; then
    echo "setup: error: still missing after install: ${still[*]}" >&2
    exit 1
  fi
fi

# LibTorch calls whatever libblas.so.3 the alternatives system selects; make sure it is OpenBLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: warning: libblas.so.3 is '$blas', not OpenBLAS: CPU results will be ~20x slower." >&2
     echo "       fix: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2 ;;
esac
