#!/usr/bin/env bash
# Installs the Debian packages cairn needs (idempotent; fast when all are present).
# As root it runs apt-get; otherwise it prints the missing packages and exits 2 (for clusters
# where a site admin or environment modules provide them).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git
  libcli11-dev libtomlplusplus-dev libboost-test-dev
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
  nlohmann-json3-dev libopenblas-dev libopenblas0-openmp libpcre2-dev libutf8proc-dev libxxhash-dev zlib1g-dev libzstd-dev
  libprotobuf-dev protobuf-compiler liblmdb-dev libssl-dev
  python3 python3-numpy python3-h5py python3-torch
  clang-format clang-tidy
  fortunes libxml2-utils nodejs chromium python3-pil zstd time python3-lmdb
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present" >&2
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (install them, or load the equivalent modules):" >&2
  echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 2
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
  apt-get update -qq
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
