#!/bin/bash
# Builds here what tests/nccl/run-on-device.sh needs on the GPU machine, into
# bundle/nccl (ignored), beside bundle/gpu (tests/gpu/make-bundle.sh: r2ccld,
# r2cclctl, their libraries):
#   bundle/nccl/lib/libnccl.so.2       R2CCL's NCCL API, built with CUDA
#   bundle/nccl/include/nccl.h         its header
#   bundle/nccl/bin/nccl_gpu_test      the C test of the GPU paths
#   bundle/nccl/nccl-tests/*_perf      nccl-tests 2.19 built UNCHANGED against
#       bundle/nccl/include, when fetched/nccl-tests (public source, never
#       committed) is there: nccl_device.h, nccl_device/ and doca_gpunetio/
#       come from NVIDIA's NCCL 2.28 headers (NCCL_DEVICE_INC, e.g. the
#       wheel's include dir; in NCCL's source doca_gpunetio/ is
#       src/transport/gdaki/doca-gpunetio/include):
#         make -C fetched/nccl-tests CUDA_HOME=/usr/local/cuda \
#           NCCL_HOME=$PWD/bundle/nccl NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90
# Then: run(command="bash tests/nccl/run-on-device.sh all", carry=["bundle/gpu", "bundle/nccl"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-gpu}
[ -f "$B/build.ninja" ] || meson setup "$B" -Dcuda=enabled -Dtests=enabled >/dev/null
ninja -C "$B" libclient/nccl/libnccl.so.2.28.9 $(ninja -C "$B" -t targets all |
	awk -F: '$1 ~ /nccl_gpu_test$/ { print $1 }')
O=bundle/nccl
rm -rf "$O"
mkdir -p "$O/lib" "$O/include" "$O/bin"
cp -L "$B/libclient/nccl/libnccl.so.2" "$O/lib/libnccl.so.2"
ln -s libnccl.so.2 "$O/lib/libnccl.so"
cp libclient/nccl/nccl.h "$O/include/"
[ -x "$B/tests/nccl/nccl_gpu_test" ] && cp "$B/tests/nccl/nccl_gpu_test" "$O/bin/"
if [ -n "${NCCL_DEVICE_INC:-}" ]; then
	cp -r "$NCCL_DEVICE_INC/nccl_device.h" "$NCCL_DEVICE_INC/nccl_device" "$O/include/"
	[ -d "$NCCL_DEVICE_INC/doca_gpunetio" ] && cp -r "$NCCL_DEVICE_INC/doca_gpunetio" "$O/include/"
fi
NT=fetched/nccl-tests/build
if [ -x "$NT/all_reduce_perf" ]; then
	mkdir -p "$O/nccl-tests"
	for t in all_reduce all_gather reduce_scatter broadcast sendrecv alltoall; do
		cp "$NT/${t}_perf" "$O/nccl-tests/" 2>/dev/null || echo "no ${t}_perf"
	done
fi
du -sh "$O"
