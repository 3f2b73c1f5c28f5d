#!/bin/bash
# Builds here what tests/gpu/run-on-device.sh runs on the GPU machine (which
# builds nothing and has no libuv/protobuf-c/ip/tc) into bundle/gpu (ignored):
#   bundle/gpu/libexec  r2ccld r2ccl-bench r2cclctl gpu_test gpu_release, ip, tc,
#                       tcp_pingpong, relay_floor and test_tenants (run-on-device.sh lat)
#   bundle/gpu/libexec  gloo_peer too where Gloo is built (R2CCL_PEER_DIR=bundle/gpu/bin)
#   bundle/gpu/lib      their shared libraries (not glibc's, not CUDA's)
#   bundle/gpu/libexec/perf  with BUNDLE_PERF=1 (nsdiag's profile)
#   bundle/gpu/nccl-tests  NCCL's own benchmarks, when built beside:
#       fetched/nccl-tests (public source, never committed), built with
#       make CUDA_HOME=/usr/local/cuda NCCL_HOME=<nccl.h + libnccl.so.2 to link>
#            NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"
# Then: run(command="bash tests/gpu/run-on-device.sh all", carry=["bundle/gpu"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-gpu}
SHARED=${SHARED:-../shared}
[ -f "$B/build.ninja" ] || meson setup "$B" -Dcuda=enabled -Dtests=enabled >/dev/null
ninja -C "$B" daemon/r2ccld tools/r2ccl-bench tools/r2cclctl tests/gpu/gpu_test tests/gpu/gpu_release \
	tools/peers/tcp_pingpong tools/peers/relay_floor tests/integration/test_tenants \
	tests/gpu/copy_lat
# Gloo's peer benchmark where it was built (libgloo-dev here): r2ccl-bench
# --peer gloo on the GPU machine, with R2CCL_PEER_DIR=bundle/gpu/bin
peers=()
if ninja -C "$B" -t targets all | grep -c '^tools/peers/gloo_peer:' >/dev/null; then
	ninja -C "$B" tools/peers/gloo_peer
	peers+=("$B/tools/peers/gloo_peer")
fi
O=bundle/gpu
rm -rf "$O"
# BUNDLE_PERF=1: perf too, for run-on-device.sh nsdiag (about 30 MB more)
extra=()
[ "${BUNDLE_PERF:-0}" = 1 ] && command -v perf >/dev/null && extra+=("$(command -v perf)")
bash "$SHARED/device/bundle.sh" "$O" "$B/daemon/r2ccld" "$B/tools/r2ccl-bench" \
	"$B/tools/r2cclctl" "$B/tests/gpu/gpu_test" "$B/tests/gpu/gpu_release" "$B/tools/peers/tcp_pingpong" \
	"$B/tools/peers/relay_floor" \
	"$B/tests/integration/test_tenants" "$B/tests/gpu/copy_lat" "${peers[@]}" "${extra[@]}" >/dev/null
NT=fetched/nccl-tests/build
if [ -x "$NT/all_reduce_perf" ]; then
	mkdir -p "$O/nccl-tests"
	for t in all_reduce all_gather reduce_scatter broadcast; do
		cp "$NT/${t}_perf" "$O/nccl-tests/"
	done
fi
du -sh "$O"
