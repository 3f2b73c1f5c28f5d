#!/bin/bash
# libr2ccl's own host time per stream-ordered submission, here (no GPU):
# tests/nccl/bench_submit.c against build-gpu's libr2ccl (built with CUDA
# support) and a fake libcuda.so.1 (fake_libcuda.c: every driver call
# succeeds at once, so the driver's time is not in the figure), talking to
# build-test's r2ccld (no CUDA: it fails each operation, which the bench
# does not wait for). A figure, not a test (docs/nccl.md "Host time").
#   tests/nccl/bench-submit.sh [DIR]   DIR: another libr2ccl.so.0 to measure
set -euo pipefail
cd "$(dirname "$0")/../.."
G=${B:-build-gpu} T=${BT:-build-test}
O=$G/bench-submit
[ -f "$G/build.ninja" ] || meson setup "$G" -Dcuda=enabled -Dtests=enabled >/dev/null
ninja -C "$G" -j2 libclient/include/libr2ccl.so.0.1.0 >/dev/null
ninja -C "$T" -j2 daemon/r2ccld >/dev/null
mkdir -p "$O"
cc -O2 -Wall -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$O/libcuda.so.1" tests/nccl/fake_libcuda.c
cc -O2 -Wall -Ilibclient/include -o "$O/bench_submit" tests/nccl/bench_submit.c \
	-L"$G/libclient/include" -l:libr2ccl.so.0
LIB=$(cd "${1:-$G/libclient/include}" && pwd)
D=$(mktemp -d)
"$T/daemon/r2ccld" --socket "$D/s" --config /dev/null --log-level err > "$D/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 100); do [ -S "$D/s" ] && break; sleep 0.1; done
R2CCL_SOCKET=$D/s LD_LIBRARY_PATH=$LIB:$PWD/$O "$O/bench_submit"
