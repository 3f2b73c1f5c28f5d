#!/bin/bash
# The NCCL API on the GPU machine (docs/nccl.md), building nothing there.
# Build here first: bash tests/gpu/make-bundle.sh && bash tests/nccl/make-bundle.sh
# then run(command="bash tests/nccl/run-on-device.sh [what]", carry=["bundle/gpu", "bundle/nccl"]).
#   what: ops | ddp | graph | ctest | hosttime | p2p | nccltests | ns | all (default: all but ns)
#   ops     torch_ops.py: every torch.distributed op and type, 2 ranks (one
#           GPU each when there are two, else both on GPU 0), library preloaded
#   ddp     torch_ddp.py 200 steps with the library, then with PyTorch's NCCL
#           in the same command; losses compared; steps/s of both
#   graph   torch_graph.py: a captured all_reduce must be refused
#   ctest   nccl_gpu_test: the C test of the GPU paths (registration cache,
#           reuse after free, staging of unexportable cuMem memory, groups,
#           capture refused, host time per call); then nccl_gpu_ctx: each
#           communicator in its device's CUDA context (a thread with none
#           current; one thread driving ranks on GPUs 0 and 1, skipped with
#           a line on a one-GPU machine)
#   hosttime  torch_hosttime.py: host time of a 1 KB all_reduce call in
#           PyTorch, bursts of 100, 2 ranks on this host: the library with
#           PyTorch's default allocator (cudaMalloc: staged), with
#           PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMem memory
#           with a POSIX fd: r2ccld opens it), and PyTorch's NCCL with each,
#           in one command; HT_ROUNDS rounds (default 3)
#   p2p     nccl_gpu_p2p on two namespace hosts x 2 rails, one rank each
#           (GPU 0 on a one-GPU machine): grouped send+recv of GPU buffers
#           in a ring, both call orders, 1 to 16M int32, every element
#           checked (the cross-host failure of issue 19)
#   nccltests  nccl-tests 2.19 built UNCHANGED against our header
#           (tests/nccl/build-nccl-tests.sh), -c 1, -b 8 -e 64M -f 4: all_reduce,
#           all_gather, reduce_scatter, broadcast, sendrecv, alltoall _perf,
#           each with 1 rank, 2 ranks on this host (minimpi's mpirun; both on
#           GPU 0 on a one-GPU machine: NCCL_TESTS_DEVICE), and 2 ranks on two
#           namespace hosts x 2 rails (the cross-host path of grouped GPU
#           send/recv, issue 19); a summary line per run with its #wrong
#           total; exits non-zero on any wrong or failed run.
#           NT_RUNS="1rank 2ranks 2hosts" (the default) picks which; NT_BINS
#           which binaries (to stay within a 10-minute command)
#   ns      two namespace hosts x 2 rails, one GPU each (GPU 0 on a one-GPU
#           machine): torch_ops, torch_bw beside r2ccl-bench --gpu (busbw at
#           64 MB-1 GB, NSBW_ROUNDS rounds of both, default 3), then the DDP loop with rail 1 of host 1 set
#           down at step 100 (R2CCL must finish with the same losses), then
#           PyTorch's NCCL in the same setup (it hangs until its timeout)
# Logs go to $OUT (or ./nccl-logs); summary.txt has one line per step.
# Exit status: non-zero when p2p or nccltests failed.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BD=$ROOT/bundle/gpu
NB=$ROOT/bundle/nccl
OUT=${OUT:-$ROOT/nccl-logs}
mkdir -p "$OUT"
LIB=$NB/lib/libnccl.so.2
export LD_LIBRARY_PATH=$BD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
summary=$OUT/summary.txt
bad=0 # p2p or nccltests failed: the exit status
: > "$summary"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
T=$ROOT/tests/nccl
what=${1:-all}
has() { { [ "$what" = all ] && [ "$1" != ns ]; } || [ "$what" = "$1" ]; }

step() { # name timeout cmd...
	local name=$1 tmo=$2; shift 2
	local t0=$(date +%s%N)
	timeout "$tmo" "$@" > "$OUT/$name.log" 2>&1
	local rc=$?
	printf '%-24s rc=%-3d %6d ms\n' "$name" "$rc" $((($(date +%s%N) - t0) / 1000000)) >> "$summary"
	return $rc
}
gpu_of() { [ "$ngpu" -ge 2 ] && echo "$1" || echo 0; }

# one r2ccld for the one-host modes
daemon_start() {
	D=$(mktemp -d /tmp/r2ccl-nccl-XXXXXX)
	"$BD/libexec/r2ccld" --socket "$D/r2ccld.sock" --config /dev/null > "$OUT/r2ccld.log" 2>&1 &
	DPID=$!
	for _ in $(seq 100); do [ -S "$D/r2ccld.sock" ] && break; sleep 0.1; done
	export R2CCL_SOCKET=$D/r2ccld.sock
}
daemon_stop() { kill "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; }

# two ranks of a python program on this host; $PRELOAD decides the library
two() { # name timeout script args...
	local name=$1 tmo=$2 script=$3; shift 3
	step "$name" "$tmo" bash -c '
		pids=()
		for r in 0 1; do
			g=$r; [ "'"$ngpu"'" -ge 2 ] || g=0
			env ${PRELOAD:+LD_PRELOAD=$PRELOAD} NCCL_HOSTID=h$r python3 "$0" --rank $r \
				--nranks 2 --gpu $g "$@" > "'"$OUT/$name"'.rank$r.log" 2>&1 &
			pids+=($!)
		done
		rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done; exit $rc' "$T/$script" "$@"
}

if has ops || has ddp || has graph || has ctest || has hosttime; then
	daemon_start
fi
if has ops; then
	PRELOAD=$LIB two torch-ops 600 torch_ops.py
fi
if has ddp; then
	PRELOAD=$LIB two ddp-r2 600 torch_ddp.py --losses "$OUT/losses-r2.txt"
	# PyTorch's NCCL: one GPU for both ranks needs a host id each and no P2P/SHM
	NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 PRELOAD= two ddp-nccl 600 torch_ddp.py \
		--port 29542 --losses "$OUT/losses-nccl.txt"
	python3 - "$OUT/losses-r2.txt" "$OUT/losses-nccl.txt" >> "$summary" 2>&1 <<'PY'
import sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
d = max(abs(x - y) / max(abs(y), 1e-6) for x, y in zip(a, b))
print(f"ddp losses: {len(a)} vs {len(b)} steps, max relative difference {d:.2e}",
      "OK" if len(a) == len(b) and d < 1e-3 else "DIFFER")
PY
	grep -h "steps/s" "$OUT"/ddp-*.rank0.log >> "$summary"
fi
if has graph; then
	PRELOAD=$LIB two graph 300 torch_graph.py --expect error
fi
if has ctest; then
	# our libnccl.so.2 first (the binary's build-tree runpath does not hold in
	# the bundle); NCCL_DEBUG=WARN: every failure's sentence in the log
	step nccl-gpu-test 300 env R2CCLD="$BD/libexec/r2ccld" NCCL_DEBUG=WARN \
		LD_LIBRARY_PATH="$NB/lib:$LD_LIBRARY_PATH" "$NB/bin/nccl_gpu_test"
	grep -h "host time\|sustained" "$OUT/nccl-gpu-test.log" >> "$summary"
	step nccl-gpu-ctx 300 env R2CCLD="$BD/libexec/r2ccld" NCCL_DEBUG=WARN \
		LD_LIBRARY_PATH="$NB/lib:$LD_LIBRARY_PATH" "$NB/bin/nccl_gpu_ctx"
	grep -h "ok$\|SKIP\|FAIL\|nccl_gpu_ctx:" "$OUT/nccl-gpu-ctx.log" >> "$summary"
fi
if has hosttime; then
	EXP=expandable_segments:True
	for k in $(seq "${HT_ROUNDS:-3}"); do
		NCCL_DEBUG=INFO PRELOAD=$LIB two ht-r2-$k 300 torch_hosttime.py --label r2ccl
		NCCL_DEBUG=INFO PYTORCH_CUDA_ALLOC_CONF=$EXP PRELOAD=$LIB two ht-r2exp-$k 300 \
			torch_hosttime.py --label r2ccl-expandable --port 29572
		NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 PRELOAD= two ht-nccl-$k 300 torch_hosttime.py \
			--label nccl --port 29573
		NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 PYTORCH_CUDA_ALLOC_CONF=$EXP PRELOAD= \
			two ht-ncclexp-$k 300 torch_hosttime.py --label nccl-expandable --port 29574
	done
	grep -h "^hosttime" "$OUT"/ht-*.rank*.log | sort >> "$summary"
	# how the library shared each allocation with r2ccld (staged or opened)
	for f in "$OUT"/ht-r2-1.rank0.log "$OUT"/ht-r2exp-1.rank0.log; do
		echo "$(basename "$f"): $(grep -c "staged" "$f") lines on staging" >> "$summary"
	done
fi
if has ops || has ddp || has graph || has ctest || has hosttime; then
	daemon_stop
fi

if has p2p; then
	C="bash $ROOT/tests/cluster/cluster.sh --prefix ncclpp"
	export PATH=$BD/libexec:$PATH R2CCLD=$BD/libexec/r2ccld
	$C up -H 2 -R 2 > "$OUT/p2p-up.log" 2>&1
	$C daemons start >> "$OUT/p2p-up.log" 2>&1
	g='$R2CCL_HOST_INDEX'; [ "$ngpu" -ge 2 ] || g=0
	rm -f /tmp/ncclpp/uid
	step p2p-2hosts 300 $C run --timeout 295 -- sh -c "LD_PRELOAD=$LIB \
		LD_LIBRARY_PATH=$NB/lib:$LD_LIBRARY_PATH $NB/bin/nccl_gpu_p2p \
		\$R2CCL_HOST_INDEX 2 /tmp/ncclpp/uid $g" || bad=1
	grep -h "nccl_gpu_p2p" "$OUT/p2p-2hosts.log" >> "$summary"
	$C daemons stop >> "$OUT/p2p-up.log" 2>&1
	for i in 0 1; do cp "/tmp/ncclpp/h$i/r2ccld.log" "$OUT/p2p-r2ccld-h$i.log" 2>/dev/null; done
	$C down >> "$OUT/p2p-up.log" 2>&1
fi

# nccl-tests: the #wrong columns of every result line (out of place, in
# place; found from the header) summed; -1 when the run failed or printed no
# result line
nt_wrong() { # log rc
	awk -v rc="$2" '
		{ sub(/^\[h[0-9]+\] /, "") } # cluster.sh run: the host'"'"'s prefix
		/^#/ && /#wrong/ { nw = 0; for (i = 2; i <= NF; i++) if ($i == "#wrong") col[++nw] = i - 1 }
		nw && /^ *[0-9]/ { lines++; for (k = 1; k <= nw; k++) if ($col[k] ~ /^[0-9]/) w += $col[k] }
		END { print (rc != 0 || !lines) ? -1 : w + 0 }' "$1"
}
NT_BINS=${NT_BINS:-all_reduce all_gather reduce_scatter broadcast sendrecv alltoall}
NT_RUNS=${NT_RUNS:-1rank 2ranks 2hosts}
nt_run() { case " $NT_RUNS " in *" $1 "*) return 0 ;; esac; return 1; }
NT_ARGS="-b 8 -e 64M -f 4 -c 1 -n 5 -w 2 -g 1"
nt_note() { # name
	local w
	w=$(nt_wrong "$OUT/$1.log" "$(awk -v n="$1" '$1 == n { sub("rc=", "", $2); print $2 }' "$summary" | tail -1)")
	printf 'nccltests %-28s #wrong %s%s\n' "$1" "$w" "$([ "$w" = 0 ] && echo " OK" || echo " FAILED")" >> "$summary"
	[ "$w" = 0 ] || bad=1
}
if has nccltests; then
	daemon_start
	export LD_LIBRARY_PATH=$NB/lib:$LD_LIBRARY_PATH # libmpi.so (minimpi), libnccl.so.2
	# one GPU: both ranks on GPU 0 (nccl-tests would give the second rank GPU 1)
	dev1=; [ "$ngpu" -ge 2 ] || dev1=NCCL_TESTS_DEVICE=0
	for t in $NT_BINS; do
		[ -x "$NB/nccl-tests/${t}_perf" ] || { echo "nccltests: no ${t}_perf (tests/nccl/build-nccl-tests.sh)" >> "$summary"; bad=1; continue; }
		if nt_run 1rank; then
			step "nt-$t-1rank" 300 env LD_PRELOAD="$LIB" "$NB/nccl-tests/${t}_perf" $NT_ARGS
			nt_note "nt-$t-1rank"
		fi
		if nt_run 2ranks; then
			step "nt-$t-2ranks" 300 "$T/minimpi/mpirun" -np 2 env LD_PRELOAD="$LIB" $dev1 \
				"$NB/nccl-tests/${t}_perf" $NT_ARGS
			nt_note "nt-$t-2ranks"
		fi
	done
	daemon_stop
fi
if has nccltests && nt_run 2hosts; then
	# two namespace hosts, one rank each (GPU 0 on a one-GPU machine)
	C="bash $ROOT/tests/cluster/cluster.sh --prefix ncclnt"
	export PATH=$BD/libexec:$PATH R2CCLD=$BD/libexec/r2ccld
	$C up -H 2 -R 2 > "$OUT/nt-ns-up.log" 2>&1
	$C daemons start >> "$OUT/nt-ns-up.log" 2>&1
	g='$R2CCL_HOST_INDEX'; [ "$ngpu" -ge 2 ] || g=0
	for t in $NT_BINS; do
		[ -x "$NB/nccl-tests/${t}_perf" ] || continue
		rm -rf "/tmp/ncclnt/mpi-$t"
		step "nt-$t-2hosts" 300 $C run --timeout 295 -- sh -c "MINIMPI_SIZE=2 \
			MINIMPI_RANK=\$R2CCL_HOST_INDEX MINIMPI_DIR=/tmp/ncclnt/mpi-$t \
			NCCL_TESTS_DEVICE=$g LD_PRELOAD=$LIB $NB/nccl-tests/${t}_perf $NT_ARGS"
		nt_note "nt-$t-2hosts"
	done
	$C daemons stop >> "$OUT/nt-ns-up.log" 2>&1
	for i in 0 1; do cp "/tmp/ncclnt/h$i/r2ccld.log" "$OUT/nt-ns-r2ccld-h$i.log" 2>/dev/null; done
	$C down >> "$OUT/nt-ns-up.log" 2>&1
fi
if has nccltests; then
	for f in "$OUT"/nt-*.log; do echo "==== $f"; cat "$f"; done
fi

if [ "$what" = ns ]; then
	C="bash $ROOT/tests/cluster/cluster.sh --prefix ncclns"
	export PATH=$BD/libexec:$PATH R2CCLD=$BD/libexec/r2ccld
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	$C daemons start --log-level info >> "$OUT/ns-up.log" 2>&1
	g='$R2CCL_HOST_INDEX'; [ "$ngpu" -ge 2 ] || g=0
	nsrun() { # name timeout preload script args...
		local name=$1 tmo=$2 pre=$3 script=$4; shift 4
		step "$name" "$tmo" $C run --timeout $((tmo - 5)) -- sh -c \
			"${pre:+LD_PRELOAD=$pre} NCCL_HOSTID=ncclns\$R2CCL_HOST_INDEX python3 $T/$script \
			--rank \$R2CCL_HOST_INDEX --nranks 2 --addr 198.18.0.1 --gpu $g $*"
	}
	nsrun ns-torch-ops 600 "$LIB" torch_ops.py
	# busbw: torch all_reduce through the library beside r2ccl-bench --gpu
	# NSBW_ROUNDS (default 3) rounds, torch then r2ccl-bench in each, so
	# that the two are compared over the same spread of the machine
	for rd in $(seq "${NSBW_ROUNDS:-3}"); do
		nsrun ns-torch-bw-$rd 300 "$LIB" torch_bw.py -b 64M -e 1G -f 4 -n 10 -w 3
		rm -f /tmp/ncclns/uid
		step ns-r2-bench-$rd 300 $C run --timeout 295 -- sh -c "$BD/libexec/r2ccl-bench allreduce \
			--gpu=$g --nranks 2 --first-rank \$R2CCL_HOST_INDEX --local-ranks 1 \
			--uid-file /tmp/ncclns/uid -b 64M -e 1G -f 4 -n 10 -w 3"
		{ echo "== busbw round $rd: torch through libnccl (first, in place) and r2ccl-bench --gpu"
		  grep -hE "^(\[h0\] )? *[0-9]" "$OUT/ns-torch-bw-$rd.log" "$OUT/ns-r2-bench-$rd.log"; } >> "$summary"
	done
	nsrun ns-ddp-r2 600 "$LIB" torch_ddp.py --losses /tmp/ncclns/losses-r2-healthy.txt
	# rail 1 of host 1 down when the loop reaches step 100
	rm -f /tmp/ncclns/mark
	( for _ in $(seq 3000); do [ -e /tmp/ncclns/mark ] && break; sleep 0.1; done
	  $C link 1 1 down; echo "rail 1 of host 1 down at $(date +%T.%N)" ) > "$OUT/ns-linkdown-event.log" 2>&1 &
	nsrun ns-ddp-r2-linkdown 600 "$LIB" torch_ddp.py --mark-step 100 \
		--mark-file /tmp/ncclns/mark --losses /tmp/ncclns/losses-r2-linkdown.txt
	wait
	$C link 1 1 up >> "$OUT/ns-up.log" 2>&1
	cp /tmp/ncclns/losses-*.txt "$OUT/" 2>/dev/null
	cmp -s /tmp/ncclns/losses-r2-healthy.txt /tmp/ncclns/losses-r2-linkdown.txt &&
		echo "ns: losses with the rail down identical to the healthy run" >> "$summary"
	grep -h "steps/s" "$OUT"/ns-ddp-*.log >> "$summary"
	# PyTorch's NCCL, same loop, same rail down: it hangs until its process
	# group's timeout (30 s here, PyTorch's default is 10 min), when its
	# watchdog aborts the job
	rm -f /tmp/ncclns/mark
	( for _ in $(seq 3000); do [ -e /tmp/ncclns/mark ] && break; sleep 0.1; done
	  $C link 1 1 down ) >> "$OUT/ns-linkdown-event.log" 2>&1 &
	NCCL_SOCKET_IFNAME=rail NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
		nsrun ns-ddp-nccl-linkdown 120 "" torch_ddp.py --port 29543 --mark-step 100 \
		--mark-file /tmp/ncclns/mark --pg-timeout 30
	wait
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	for i in 0 1; do cp "/tmp/ncclns/h$i/r2ccld.log" "$OUT/ns-r2ccld-h$i.log" 2>/dev/null; done
	$C down >> "$OUT/ns-up.log" 2>&1
fi
cat "$summary"
[ "$bad" = 0 ]
