#!/bin/bash
# Runs the gpu suite and the GPU benchmarks on the GPU machine, building
# nothing there. Build here first:
#   meson setup build-gpu -Dcuda=enabled && ninja -C build-gpu
#   ../shared/device/bundle.sh build-gpu/bundle     (libuv, protobuf-c, ...)
# then run this script there with the build folder carried (carry: build-gpu).
# Logs go to $OUT (or ./gpu-logs); the short table comes last.
set -u
B=${B:-build-gpu}
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export R2CCLD=$PWD/$B/daemon/r2ccld
export NCCL_NVLS_ENABLE=0
T=$PWD/$B/tests/gpu/gpu_test
summary=$OUT/summary.txt
: > "$summary"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
nvidia-smi topo -m >> "$OUT/gpus.txt" 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)

step() { # name timeout cmd...
  local name=$1 tmo=$2; shift 2
  local t0=$(date +%s%N)
  timeout "$tmo" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-28s rc=%-3d %6d ms\n' "$name" "$rc" "$ms" >> "$summary"
  return $rc
}

what=${1:-all}   # suite | bench | copies | all
if [ "$what" = suite ] || [ "$what" = all ]; then
  step gpu-suite 300 env R2CCL_GPU_TEST_LOG="$OUT/daemon-suite.log" "$T"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  step bench-allreduce-g$ngpu 200 env R2CCL_GPU_TEST_LOG="$OUT/daemon-bench.log" "$T" --bench -c allreduce -g "$ngpu"
  if [ "$ngpu" -ge 2 ]; then
    step bench-allreduce-g1 100 "$T" --bench -c allreduce -g 1 -e $((1<<30))
  fi
fi
if [ "$what" = copies ] || [ "$what" = all ]; then
  for c in allgather reducescatter broadcast; do
    step bench-$c-ce 120 env R2CCL_GPU_COPY=ce "$T" --bench -c $c -g "$ngpu" -e $((1<<30))
  done
  step bench-allgather-kernel 120 env R2CCL_GPU_COPY=kernel "$T" --bench -c allgather -g "$ngpu" -e $((1<<30))
  step bench-broadcast-kernel 120 env R2CCL_GPU_COPY=kernel "$T" --bench -c broadcast -g "$ngpu" -e $((1<<30))
fi

i=0
for f in /tmp/r2ccl-test-*/r2ccld.log; do
  [ -f "$f" ] && cp "$f" "$OUT/daemon-left-$((i++)).log"
done
{
  echo "== steps"; cat "$summary"
  [ -f "$OUT/gpu-suite.log" ] && echo "== gpu suite" && grep -E "^(matrix|order|cuMem|client killed|PASSED|FAILED|FAIL )" "$OUT/gpu-suite.log" | head -40
  for f in "$OUT"/bench-*.log; do
    echo "== $(basename "$f" .log)"
    grep -E "^#|^ *[0-9]" "$f" | grep -vE "^#\s+\(B\)" | awk '{ if ($1 ~ /^#/ || $1==8 || $1==32768 || $1>=1048576) print }'
  done
} | tee "$OUT/table.txt"
