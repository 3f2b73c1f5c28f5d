#!/bin/bash
# meson test --suite rdma: runs r2-vpingpong MODE in two soft-RoCE guests.
#   run.sh MODE BINARY
# The guest image is built once (root, debootstrap, about 2 minutes) and cached
# in R2_RDMA_VM_CACHE (default: BINARY's folder/vm). Exit 77 (skip) where
# qemu cannot run: not root, no qemu and none installable, no image buildable.
set -uo pipefail
mode=$1 bin=$2
here=$(cd "$(dirname "$0")" && pwd)
export R2_RDMA_VM_CACHE=${R2_RDMA_VM_CACHE:-$(cd "$(dirname "$bin")" && pwd)/vm}
[ "$(id -u)" = 0 ] || { echo "skip: needs root (debootstrap, image)"; exit 77; }
if [ ! -f "$R2_RDMA_VM_CACHE/root.img" ]; then
  bash "$here/vm.sh" build || { echo "skip: cannot build the guest image"; exit 77; }
fi
command -v qemu-system-x86_64 >/dev/null ||
  apt-get install -y -qq qemu-system-x86 >/dev/null 2>&1 ||
  { echo "skip: no qemu-system-x86_64"; exit 77; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/r2-vpingpong"
cp "$here/guest.sh" "$stage/guest.sh"
echo "$mode" > "$stage/mode"
bash "$here/vm.sh" run "$stage" guest.sh 900
