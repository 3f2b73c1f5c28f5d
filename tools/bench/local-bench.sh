#!/bin/bash
# Issue-2 benchmark: K ranks on this host, AllReduce float32 sum through a
# private r2ccld, with OpenMPI (shared memory) and Gloo run on the same sizes
# in the same command. Prints the nccl-tests tables and the ratio tables.
# Usage: tools/bench/local-bench.sh [BUILD_DIR] [K]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
K=${2:-4}
dir=$(mktemp -d /tmp/r2ccl-bench.XXXXXX)
"$B/daemon/r2ccld" --socket "$dir/s.sock" --config /dev/null 2>"$dir/d.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/s.sock" ] && break; sleep 0.1; done
export R2CCL_SOCKET="$dir/s.sock" LD_LIBRARY_PATH="$B/libclient"
echo "# $(date -u +%F) $(nproc) cores, $(uname -r); K=$K"
for peer in mpi gloo; do
	"$B/tools/r2ccl-bench" allreduce --local-ranks "$K" -b 8 -e 64M -f 2 -n 20 -w 5 \
		--peer "$peer"
done
