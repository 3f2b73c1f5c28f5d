#!/bin/bash
# meson test --suite rdma: runs MODE in two soft-RoCE guests (guest.sh).
#   run.sh MODE BINARY [FILE...]
# BINARY (r2-vpingpong) and every FILE (r2ccld, r2cclctl, cluster_client,
# libr2ccl.so.0 for the daemon modes) are copied into both guests.
# The guest image is built once (root, debootstrap, about 2 minutes) and cached
# in R2_RDMA_VM_CACHE (default: BINARY's folder/vm). Exit 77 (skip) where
# qemu cannot run: not root, no qemu and none installable, no image buildable;
# and (vm.sh) when a guest's emulated NIC stopped sending mid-run (README.md,
# Known problem: qemu's, and the run tells nothing of the code).
set -uo pipefail
mode=$1 bin=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
export R2_RDMA_VM_CACHE=${R2_RDMA_VM_CACHE:-$(cd "$(dirname "$bin")" && pwd)/vm}
[ "$(id -u)" = 0 ] || { echo "skip: needs root (debootstrap, image)"; exit 77; }
# once per recipe (vm.sh keys the cache); a second call returns at once
bash "$here/vm.sh" build || { echo "skip: cannot build the guest image"; exit 77; }
command -v qemu-system-x86_64 >/dev/null ||
  apt-get install -y -qq qemu-system-x86 >/dev/null 2>&1 ||
  { echo "skip: no qemu-system-x86_64"; exit 77; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/r2-vpingpong"
for f in "$@"; do
  cp -L "$f" "$stage/"
  case $f in */libr2ccl.so.*) cp -L "$f" "$stage/libr2ccl.so.0" ;; esac
done
cp "$here/guest.sh" "$here/daemon-guest.sh" "$stage/"
echo "$mode" > "$stage/mode"
bash "$here/vm.sh" run "$stage" guest.sh 900
