#!/bin/bash
# Builds here what tests/nccl/run-on-device.sh needs on the GPU machine, into
# bundle/nccl (ignored), beside bundle/gpu (tests/gpu/make-bundle.sh: r2ccld,
# r2cclctl, their libraries):
#   bundle/nccl/lib/libnccl.so.2       R2CCL's NCCL API, built with CUDA
#   bundle/nccl/include/nccl.h         its header
#   bundle/nccl/bin/nccl_gpu_test      the C test of the GPU paths
#   bundle/nccl/bin/nccl_gpu_ctx       each communicator in its device's CUDA context
#   bundle/nccl/bin/nccl_gpu_p2p       grouped send/recv of GPU buffers across hosts
#   bundle/nccl/nccl-tests/*_perf      nccl-tests 2.19 built UNCHANGED against
#       bundle/nccl by tests/nccl/build-nccl-tests.sh (its public source,
#       exported into fetched/nccl-tests, never committed), when nvcc and
#       the nccl-tests mirror are here
#   bundle/nccl/lib/libmpi.so          minimpi (tests/nccl/minimpi), for them,
#   bundle/nccl/lib/libcudart.so.13    and their CUDA runtime
# Then: run(command="bash tests/nccl/run-on-device.sh all", carry=["bundle/gpu", "bundle/nccl"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-gpu}
[ -f "$B/build.ninja" ] || meson setup "$B" -Dcuda=enabled -Dtests=enabled >/dev/null
ninja -C "$B" -j2 libclient/nccl/libnccl.so.2.28.9 $(ninja -C "$B" -t targets all |
	awk -F: '$1 ~ /nccl_gpu_(test|p2p|ctx)$/ { print $1 }')
O=bundle/nccl
rm -rf "$O"
mkdir -p "$O/lib" "$O/include" "$O/bin"
cp -L "$B/libclient/nccl/libnccl.so.2" "$O/lib/libnccl.so.2"
ln -s libnccl.so.2 "$O/lib/libnccl.so"
cp libclient/nccl/nccl.h "$O/include/"
for t in nccl_gpu_test nccl_gpu_ctx nccl_gpu_p2p; do
	[ -x "$B/tests/nccl/$t" ] && cp "$B/tests/nccl/$t" "$O/bin/"
done
r=0
NCCL_PREFIX=$PWD/$O bash tests/nccl/build-nccl-tests.sh > "$B/nccl-tests-build.log" 2>&1 || r=$?
if [ "$r" = 0 ]; then
	mkdir -p "$O/nccl-tests"
	for t in all_reduce all_gather reduce_scatter broadcast sendrecv alltoall; do
		strip -o "$O/nccl-tests/${t}_perf" "fetched/nccl-tests/build/${t}_perf"
	done
	# found through the binaries' runpath ($ORIGIN) and LD_LIBRARY_PATH
	strip -o "$O/nccl-tests/libverifiable.so.0" fetched/nccl-tests/build/verifiable/libverifiable.so.0
	cp fetched/nccl-tests-mpi/lib/libmpi.so "$O/lib/"
	cp -L "${CUDA_HOME:-/usr/local/cuda}/lib64/libcudart.so.13" "$O/lib/"
else
	echo "nccl-tests not built (rc $r, $B/nccl-tests-build.log)"
	[ "$r" = 77 ] || exit 1
fi
du -sh "$O"
