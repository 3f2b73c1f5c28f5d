#!/bin/bash
# The main job: build if needed, start r2ccld with its defaults, run
# collectives through it (4 ranks on this host, AllReduce float32, nccl-tests
# columns), show `r2cclctl status`, stop the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
BUILD=${BUILD:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=release >/dev/null
ninja -C "$BUILD" >/dev/null

SOCK=/run/r2ccl/r2ccld.sock
LOG=$(mktemp /tmp/r2ccld-demo.XXXXXX.log)
"$BUILD/daemon/r2ccld" 2>"$LOG" &
DPID=$!
trap 'kill -TERM $DPID 2>/dev/null; wait $DPID 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { cat "$LOG"; echo "r2ccld did not start" >&2; exit 1; }
echo "r2ccld running (pid $DPID, log $LOG)"
LD_LIBRARY_PATH="$BUILD/libclient" "$BUILD/tools/r2ccl-bench" allreduce \
	--local-ranks 4 -b 8 -e 64M -f 4 -n 20 -w 5 &
BPID=$!
sleep 1
"$BUILD/tools/r2cclctl" status
wait $BPID
"$BUILD/tools/r2cclctl" status
kill -TERM $DPID
wait $DPID
trap - EXIT
echo "r2ccld stopped (exit 0)"
