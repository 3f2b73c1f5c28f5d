#!/bin/bash
# Builds nccl-tests 2.19 UNCHANGED against R2CCL's nccl.h and libnccl.so.2
# (docs/nccl.md "nccl-tests"), for the GPU machine, which has no compiler:
#   1. exports the public source (a bare git mirror, never committed) into
#      the ignored folder fetched/nccl-tests;
#   2. builds minimpi (tests/nccl/minimpi: the ten MPI calls nccl-tests makes,
#      over files in a shared folder) as fetched/nccl-tests-mpi/lib/libmpi.so,
#      so that the binaries run as several processes (2 ranks on one GPU, or
#      one per namespace host) with no MPI installed;
#   3. make MPI=1 DSO=1 of all_reduce, all_gather, reduce_scatter, broadcast,
#      sendrecv and alltoall _perf, NCCL_HOME a prefix of our header and
#      library, sm_90, into fetched/nccl-tests/build. DSO=1 (nccl-tests'
#      option): the 6 MB of verification kernels once, in
#      build/verifiable/libverifiable.so.0, not in each binary; so the CUDA
#      runtime is the shared libcudart.so.13 (make-bundle.sh carries it).
# nccl_device.h (nccl-tests includes it from NCCL 2.28 on) and nccl_device/
# come from CUDA's include folder (CUDA 13 ships NCCL's headers there); our
# nccl.h is found first (-I$NCCL_HOME/include). Their device API is not
# called unless -D is given (R2CCL refuses it).
#   NCCL_TESTS_GIT  the mirror (default /work/.mirror/NVIDIA+nccl-tests/repo)
#   NCCL_PREFIX     include/nccl.h + lib/libnccl.so (default bundle/nccl,
#                   else a prefix made from build-test's library)
#   CUDA_HOME       default /usr/local/cuda
#   JOBS            make -j (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
GITDIR=${NCCL_TESTS_GIT:-/work/.mirror/NVIDIA+nccl-tests/repo}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
SRC=$ROOT/fetched/nccl-tests
MPI=$ROOT/fetched/nccl-tests-mpi
TESTS="all_reduce all_gather reduce_scatter broadcast sendrecv alltoall"

[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "no nvcc in $CUDA_HOME/bin" >&2; exit 77; }
git --git-dir="$GITDIR" rev-parse --verify -q HEAD >/dev/null ||
	{ echo "no nccl-tests mirror at $GITDIR" >&2; exit 77; }

if [ -z "${NCCL_PREFIX:-}" ]; then
	if [ -f bundle/nccl/include/nccl.h ] && [ -e bundle/nccl/lib/libnccl.so ]; then
		NCCL_PREFIX=$ROOT/bundle/nccl
	else
		# compile-only here: build-test's library has the same symbols
		L=$(ls build-test/libclient/nccl/libnccl.so.2 2>/dev/null) ||
			{ echo "no libnccl.so.2: run tests/nccl/make-bundle.sh or build build-test" >&2; exit 1; }
		NCCL_PREFIX=$ROOT/fetched/nccl-prefix
		rm -rf "$NCCL_PREFIX"
		mkdir -p "$NCCL_PREFIX/include" "$NCCL_PREFIX/lib"
		cp libclient/nccl/nccl.h "$NCCL_PREFIX/include/"
		cp -L "$L" "$NCCL_PREFIX/lib/libnccl.so.2"
		ln -s libnccl.so.2 "$NCCL_PREFIX/lib/libnccl.so"
	fi
fi

# 1. the source, exactly as published
want=$(git --git-dir="$GITDIR" rev-parse HEAD)
if [ "$(cat "$SRC/.commit" 2>/dev/null)" != "$want" ]; then
	rm -rf "$SRC"
	mkdir -p "$SRC"
	git --git-dir="$GITDIR" archive HEAD | tar -x -C "$SRC"
	echo "$want" > "$SRC/.commit"
fi
ver=$(sed -n 's/^#define NCCL_TESTS_VERSION "\(.*\)"/\1/p' "$SRC/src/common.h")
echo "nccl-tests $ver ($want)"

# 2. minimpi
mkdir -p "$MPI/include" "$MPI/lib"
cp tests/nccl/minimpi/mpi.h "$MPI/include/"
cc -O2 -Wall -shared -fPIC -Wl,-soname,libmpi.so -o "$MPI/lib/libmpi.so" tests/nccl/minimpi/minimpi.c

# 3. the binaries (make's own rules; only the six we run). Their rules do
# not depend on nccl.h: another header (or library ABI) builds afresh.
h=$(cat "$NCCL_PREFIX/include/nccl.h" | sha1sum | cut -d' ' -f1)
[ "$(cat "$SRC/build/.nccl_h" 2>/dev/null)" = "$h" ] || rm -rf "$SRC/build"
mkdir -p "$SRC/build"
echo "$h" > "$SRC/build/.nccl_h"
targets=()
for t in $TESTS; do targets+=("$SRC/build/${t}_perf"); done
make -C "$SRC/src" -j"${JOBS:-2}" MPI=1 MPI_HOME="$MPI" NCCL_HOME="$NCCL_PREFIX" \
	CUDA_HOME="$CUDA_HOME" DSO=1 NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 \
	BUILDDIR="$SRC/build" "${targets[@]}"
for t in $TESTS; do
	f=$SRC/build/${t}_perf
	# linked to libnccl.so.2 (found at run time: LD_LIBRARY_PATH or LD_PRELOAD)
	readelf -d "$f" | grep -q 'NEEDED.*libnccl.so.2' || { echo "$f: not linked to libnccl.so.2" >&2; exit 1; }
done
ls -l "$SRC"/build/*_perf
