#!/bin/bash
# Installs the Debian 12 packages R2CCL builds and tests with (as root), only
# those missing. Safe to run again. clang and libclang-rt-14-dev (libFuzzer,
# a Recommends of clang that --no-install-recommends leaves out) build the
# fuzzing harnesses (tests/fuzz/).
set -euo pipefail
PKGS=(build-essential g++ meson ninja-build pkg-config
      libuv1-dev libprotobuf-c-dev protobuf-c-compiler
      libhwloc-dev hwloc-nox libnuma-dev libsystemd-dev systemd
      libibverbs-dev rdma-core ibverbs-providers
      check libsubunit-dev valgrind prometheus
      iproute2 procps kmod
      qemu-system-x86 debootstrap e2fsprogs
      openmpi-bin libopenmpi-dev libgloo-dev
      systemd-container python3-matplotlib
      clang libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}"
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: run as root (or install: ${missing[*]})" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
