#!/bin/bash
# SPDX-License-Identifier: MIT
# The GPU path's parameters (daemon/gpu/README.md) go through the daemon's
# registry: r2ccld --check-config shows each with its default, takes the
# R2CCL_GPU_* variables and the command line, and refuses values out of
# bounds or unknown. Needs no GPU (the table exists in every build).
#   params.sh R2CCLD
set -u
D=${1:?usage: params.sh R2CCLD}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# check_config OUTFILE [VAR=VALUE...] -- [OPTION...]: r2ccld's exit status
check_config() {
	local out=$1 envs=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	env -u R2CCL_GPU_COPY -u R2CCL_GPU_BLOCKS -u R2CCL_GPU_SPLIT_MIN \
		-u R2CCL_GPU_STAGE_CACHE -u R2CCL_GPU_STAGE_PIECES "${envs[@]}" \
		"$D" --check-config --config /dev/null --socket "$tmp/s" "$@" >"$out" 2>&1
}
expect_line() { # FILE TEXT
	if ! grep -qF -- "$2" "$1"; then
		echo "FAIL: no line '$2' in:"
		sed 's/^/  /' "$1"
		fail=1
	fi
}
expect_rc() { # WHAT GOT WANT(0 or nonzero)
	if { [ "$3" = 0 ] && [ "$2" != 0 ]; } || { [ "$3" != 0 ] && [ "$2" = 0 ]; }; then
		echo "FAIL: $1: exit $2"
		fail=1
	fi
}

check_config "$tmp/def" --
expect_rc defaults $? 0
expect_line "$tmp/def" "gpu_copy = ce [default]"
expect_line "$tmp/def" "gpu_blocks = 0 [default]"
expect_line "$tmp/def" "gpu_split_min = 262144 bytes [default]"
expect_line "$tmp/def" "gpu_stage_cache = 8589934592 bytes [default]"
expect_line "$tmp/def" "gpu_stage_pieces = true [default]"

# the variables the GPU path always read keep working; the command line wins
check_config "$tmp/env" R2CCL_GPU_COPY=kernel R2CCL_GPU_BLOCKS=96 R2CCL_GPU_SPLIT_MIN=1M \
	R2CCL_GPU_STAGE_CACHE=64M R2CCL_GPU_STAGE_PIECES=0 -- --gpu-blocks 32
expect_rc env $? 0
expect_line "$tmp/env" "gpu_copy = kernel [env]"
expect_line "$tmp/env" "gpu_blocks = 32 [cli]"
expect_line "$tmp/env" "gpu_split_min = 1048576 bytes [env]"
expect_line "$tmp/env" "gpu_stage_cache = 67108864 bytes [env]"
expect_line "$tmp/env" "gpu_stage_pieces = false [env]"

# malformed or out of bounds: refused, naming the variable
for bad in R2CCL_GPU_COPY=dma R2CCL_GPU_BLOCKS=-1 R2CCL_GPU_BLOCKS=70000 \
	R2CCL_GPU_SPLIT_MIN=lots R2CCL_GPU_STAGE_CACHE=-5 R2CCL_GPU_STAGE_PIECES=maybe; do
	check_config "$tmp/bad" "$bad" --
	expect_rc "$bad" $? 1
	expect_line "$tmp/bad" "${bad%%=*}"
done

[ $fail = 0 ] && echo "PASSED: GPU parameters"
exit $fail
