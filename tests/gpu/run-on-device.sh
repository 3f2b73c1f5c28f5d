#!/bin/bash
# Runs on the GPU machine, building nothing there: the gpu suite, and every
# GPU benchmark with NCCL in the same command. Build here first:
#   bash tests/gpu/make-bundle.sh          (bundle/gpu: programs + libraries)
# then run(command="bash tests/gpu/run-on-device.sh [what]", carry=["bundle/gpu"]).
#   what: suite | ar | copies | ns | nsops | all (default)
#   suite   the gpu suite (tests/gpu/gpu_test.cu), then gpu_release (a
#           communicator's GPU state freed at destroy, tests/gpu/gpu_release.c)
#   ar      AllReduce float32 on 2 GPUs, 8 B .. 4 GB: r2ccl and nccl-tests
#   copies  AllGather, ReduceScatter, Broadcast at 1 GB: r2ccl and nccl-tests
#   nstune  the ns AllReduce with daemon options: NS_ARGS="set1;set2;..."
#   nsops   every collective with --gpu over the 2 namespace hosts, 4 B..16 MB,
#           the clients' small staging by the copy engines, then by the kernel
#   ns      2 namespace hosts x 1 GPU, 2 TCP rails: r2ccl-bench --gpu and
#           PyTorch's NCCL (socket transport, 4 threads x 4 sockets), then a
#           rail set down in the middle of a loop (exact results required)
#   nslink  that last part alone
#   nsdiag  host vs GPU buffers per daemon option set (NS_ARGS), perf profile
#   nsprof2 r2ccld's per-operation debug line (idle, applying, staging...) for
#           host then GPU buffers, NCCL beside
#   latprof a small GPU AllReduce's parts (stream wait, copies, rail phase),
#           host buffers beside, r2ccld --log-level debug
#   plan    tools/bench/plan-check.sh (PLAN_ARGS, PLAN_OPTS): the planner's
#           predicted times against the measured ones on namespace hosts
#   lat     issues 20 and 21 on 16 cores: tools/bench/small-bench.sh on 2 and
#           4 hosts (ping-pong, R2CCL, Gloo, decode loop), small AllReduces
#           with host then GPU buffers (p50/p99), tenant-bench.sh --only
#           react twice, and the integration test tenants (neighbour's p99)
# Logs go to $OUT (or ./gpu-logs); the short tables come last.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
BD=$ROOT/bundle/gpu
OUT=${OUT:-$ROOT/gpu-logs}
mkdir -p "$OUT"
export PATH=$BD/bin:$PATH
export NCCL_NVLS_ENABLE=0
NCCL_LIB=$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$BD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export R2CCLD=$BD/libexec/r2ccld
T=$BD/libexec/gpu_test
NT=$BD/nccl-tests
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
nccl() { # name timeout binary args...: nccl-tests with PyTorch's NCCL
	local name=$1 tmo=$2 bin=$3; shift 3
	[ -x "$NT/$bin" ] || { echo "$name: no $NT/$bin (make-bundle.sh)" >> "$summary"; return 1; }
	step "$name" "$tmo" env LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH" "$NT/$bin" "$@"
}
# cmp R2LOG NCCLLOG TITLE: out-of-place time and busbw side by side
cmp() {
	echo "== $3 (out-of-place; ratio = r2ccl/NCCL busbw, time ratio = r2ccl/NCCL time)"
	awk 'FNR == 1 { f++ }
	     /^ *[0-9]/ && NF >= 9 { t[f, $1] = $6; b[f, $1] = $8; if (f == 1) s[++n] = $1 }
	     END {
		printf "%12s %10s %10s %9s %9s %7s %7s\n", "size", "r2 us", "nccl us", "r2 GB/s", "nccl GB/s", "ratio", "t-ratio"
		for (i = 1; i <= n; i++) {
			k = s[i]; if (!((2, k) in b)) continue
			printf "%12.0f %10.1f %10.1f %9.2f %9.2f %7.2f %7.2f\n", k, t[1, k], t[2, k], b[1, k], b[2, k],
			       (b[2, k] > 0 ? b[1, k] / b[2, k] : 0), (t[2, k] > 0 ? t[1, k] / t[2, k] : 0)
		}
	     }' "$1" "$2"
}

what=${1:-all}
has() { [ "$what" = all ] || [ "$what" = "$1" ]; }

if has suite; then
	step gpu-suite 300 env R2CCL_GPU_TEST_LOG="$OUT/daemon-suite.log" "$T"
	step gpu-release 300 "$BD/libexec/gpu_release"
	# gpu_legacy_ipc=gpu-access's premise: another user opens a handle
	step ipc-cross-uid 60 python3 "$ROOT/tests/gpu/ipc_cross_uid.py"
fi
if has ar; then
	step r2-allreduce 240 env R2CCL_GPU_TEST_LOG="$OUT/daemon-bench.log" "$T" --bench -c allreduce -g "$ngpu"
	nccl nccl-allreduce 240 all_reduce_perf -b 8 -e 4G -f 2 -g "$ngpu" -n 20 -w 5
fi
if has copies; then
	for c in allgather:all_gather reducescatter:reduce_scatter broadcast:broadcast; do
		r=${c%%:*} n=${c##*:}
		if [ "$r" = allgather ]; then cp=kernel; else cp=ce; fi
		step "r2-$r" 120 env R2CCL_GPU_COPY=$cp "$T" --bench -c "$r" -g "$ngpu" -e $((1 << 30))
		nccl "nccl-$r" 120 "${n}_perf" -b 1G -e 1G -g "$ngpu" -n 20 -w 5
	done
fi
# two namespace hosts x 2 rails (tests/cluster/cluster.sh), one GPU each
C="bash $ROOT/tests/cluster/cluster.sh --prefix gpuns"
ns_r2() { # ARGS...: the command each host runs (r2ccl-bench allreduce --gpu;
	# NS_GPU=0: host buffers, to tell the rail phase from the GPU staging)
	local g="--gpu=\$R2CCL_HOST_INDEX"
	[ "${NS_GPU:-1}" = 0 ] && g=
	# NS_GPU=h0: GPU buffers on host 0 only (host 1's rank on host memory:
	# one CUDA context of a client on the shared GPU, not two)
	[ "${NS_GPU:-1}" = h0 ] && g='$([ $R2CCL_HOST_INDEX = 0 ] && echo --gpu=0)'

	echo "$BD/libexec/r2ccl-bench allreduce $g --nranks 2 \
		--first-rank \$R2CCL_HOST_INDEX --local-ranks 1 --uid-file /tmp/gpuns/uid $*"
}
bench() { # name timeout args...
	local name=$1 tmo=$2; shift 2
	rm -f /tmp/gpuns/uid
	step "$name" "$tmo" $C run --timeout $((tmo - 5)) -- sh -c "$(ns_r2 "$@")"
}

# PyTorch's NCCL on the two namespace hosts (socket transport, 4 threads x 4
# sockets, P2P and SHM off so it goes through the namespaces' NICs). On a
# one-GPU machine both ranks use GPU 0: NCCL refuses two ranks of one host on
# one GPU ("Duplicate GPU"), so each rank gets its own NCCL_HOSTID (the
# namespaces are two hosts for it then, as they are for r2ccl).
ns_nccl() { # name
	local g='--gpu $R2CCL_HOST_INDEX'
	[ "$ngpu" -ge 2 ] || g='--gpu 0'
	step "$1" 200 $C run --timeout 190 -- env NCCL_SOCKET_IFNAME=rail NCCL_IB_DISABLE=1 \
		NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4 \
		NCCL_DEBUG=WARN sh -c "NCCL_HOSTID=gpuns\$R2CCL_HOST_INDEX python3 \
		$ROOT/tools/peers/torch_nccl_peer.py --rank \$R2CCL_HOST_INDEX \
		--nranks 2 --addr 198.18.0.1 $g -b 64M -e 1G -f 4 -n 10 -w 3"
}

# a rail set down while 64 MB AllReduces run: the loop must finish, exact.
# The bench writes the trace of a pass when the pass ends: the rail goes down
# 2 s after the out-of-place pass's trace appears, in the in-place pass (1000
# AllReduces of 64 MB: 15-20 s there), not at a fixed time from the start.
ns_linkdown() {
	rm -f /tmp/gpuns/trace.csv
	( for _ in $(seq 900); do
		[ "$(cat /tmp/gpuns/trace.csv 2>/dev/null | wc -l)" -gt 500 ] && break
		sleep 0.1
	  done
	  sleep 2
	  $C link 1 1 down; echo "rail 1 of host 1 down at $(date +%T.%N)" ) > "$OUT/ns-linkdown-event.log" 2>&1 &
	bench ns-r2-linkdown 200 -b 64M -e 64M -n 1000 -w 2 --trace /tmp/gpuns/trace.csv
	wait
	cp /tmp/gpuns/trace.csv "$OUT/ns-linkdown-trace.csv" 2>/dev/null
	$C exec 0 "$BD/libexec/r2cclctl" rails > "$OUT/ns-rails-after.txt" 2>&1
	bench ns-r2-after 200 -b 1M -e 256M -f 16 -n 5 -w 1
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	for i in 0 1; do cp "/tmp/gpuns/h$i/r2ccld.log" "$OUT/ns-r2ccld-h$i.log" 2>/dev/null; done
	$C down >> "$OUT/ns-up.log" 2>&1
}

if has ns; then
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	$C daemons start --log-level info >> "$OUT/ns-up.log" 2>&1
	bench ns-r2-allreduce 200 -b 64M -e 1G -f 4 -n 10 -w 3
	ns_nccl ns-nccl-allreduce
	ns_linkdown
fi
if [ "$what" = nslink ]; then # the link-down part of ns alone
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	$C daemons start --log-level info >> "$OUT/ns-up.log" 2>&1
	ns_linkdown
fi
if [ "$what" = nsops ]; then
	# every collective on GPU buffers across the two namespace hosts, 4 B to
	# 16 MB, in and out of place, every element checked (runs on one GPU too:
	# both hosts then share it)
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	$C daemons start --log-level info >> "$OUT/ns-up.log" 2>&1
	# each op twice: the clients' staging (up to 256 KiB) by the copy
	# engines (the default), then by the kernel (R2CCL_GPU_STAGE_KERNEL=1)
	for k in 0 1; do
		for op in allreduce allgather reducescatter broadcast reduce; do
			rm -f /tmp/gpuns/uid
			step "nsops-$op-k$k" 120 env R2CCL_GPU_STAGE_KERNEL=$k $C run --timeout 115 -- \
				sh -c "$(ns_r2 -b 4 -e 16M -f 4 -n 3 -w 1 |
				sed "s/r2ccl-bench allreduce/r2ccl-bench $op/")"
		done
	done
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	for i in 0 1; do cp "/tmp/gpuns/h$i/r2ccld.log" "$OUT/ns-r2ccld-h$i.log" 2>/dev/null; done
	$C down >> "$OUT/ns-up.log" 2>&1
	for k in 0 1; do
		for op in allreduce allgather reducescatter broadcast reduce; do
			echo "== nsops-$op-k$k"
			grep -E "^\[h[01]\] *([0-9]|# Out)|error|wrong|failed" "$OUT/nsops-$op-k$k.log" | head -30
		done
	done > "$OUT/table.txt"
	cat "$summary" "$OUT/table.txt"
	tar -C "$OUT" -czf "$OUT/../logs-${what}.tgz" --exclude=table.txt . 2>/dev/null
	exit 0
fi
if [ "$what" = nsprof ]; then
	# where the CPU goes in the two-namespace AllReduce (1 GB, GPU buffers):
	# per-thread CPU of host 0's r2ccld and rank over 8 s (tools/thread-cpu.sh)
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	# shellcheck disable=SC2086
	$C daemons start ${NS_ARGS:-} >> "$OUT/ns-up.log" 2>&1
	rm -f /tmp/gpuns/uid
	$C run --timeout 120 -- sh -c "$(ns_r2 -b 1G -e 1G -n 30 -w 2)" > "$OUT/nsprof-bench.log" 2>&1 &
	sleep 12
	dp=$(cat /tmp/gpuns/h0/r2ccld.pid)
	{ echo "== r2ccld (host 0)"; bash "$ROOT/tools/thread-cpu.sh" "$dp" 8
	  echo "== all processes, 8 s"; top -b -n 1 -d 8 | head -20; } > "$OUT/nsprof.txt" 2>&1
	wait
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	$C down >> "$OUT/ns-up.log" 2>&1
	cat "$OUT/nsprof.txt" "$OUT/nsprof-bench.log" | grep -v "^\[h1\]" | tail -40 > "$OUT/table.txt"
	cat "$OUT/table.txt"
	exit 0
fi
if [ "$what" = nsdiag ]; then
	# where the two-namespace AllReduce spends its time: per option set
	# ($NS_ARGS, ';'-separated), host buffers then GPU buffers, then a perf
	# profile of host 0's r2ccld (1 GB, GPU buffers, last set) when perf runs
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	IFS=';' read -ra sets <<< "${NS_ARGS:-}"
	k=0
	for a in "${sets[@]}"; do
		k=$((k + 1))
		# shellcheck disable=SC2086
		$C daemons start $a >> "$OUT/ns-up.log" 2>&1
		echo "set $k: $a" >> "$summary"
		NS_GPU=0 bench "diag-$k-host" 100 -b 64M -e 1G -f 4 -n 5 -w 2
		bench "diag-$k-gpu" 100 -b 64M -e 1G -f 4 -n 5 -w 2
		[ "$k" = "${#sets[@]}" ] || $C daemons stop >> "$OUT/ns-up.log" 2>&1
	done
	rm -f /tmp/gpuns/uid
	$C run --timeout 60 -- sh -c "$(ns_r2 -b 1G -e 1G -n 25 -w 2)" > "$OUT/diag-prof-bench.log" 2>&1 &
	sleep 8
	dp=$(cat /tmp/gpuns/h0/r2ccld.pid)
	PERF=$BD/libexec/perf
	if [ -x "$PERF" ]; then
		"$PERF" record -F 999 -g -p "$dp" -o "$OUT/perf.data" -- sleep 5 > "$OUT/perf-rec.log" 2>&1
		"$PERF" report -i "$OUT/perf.data" --no-children --sort comm,dso,sym --stdio 2>/dev/null |
			grep -v "^$" | head -150 > "$OUT/perf-top.txt"
		"$PERF" report -i "$OUT/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null |
			grep -E "^ +[0-9]" | head -40 > "$OUT/perf-flat.txt"
		rm -f "$OUT/perf.data"
	fi
	bash "$ROOT/tools/thread-cpu.sh" "$dp" 4 > "$OUT/diag-threads.txt" 2>&1
	wait
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	$C down >> "$OUT/ns-up.log" 2>&1
	{ cat "$summary"
	  for f in "$OUT"/diag-*-*.log; do echo "== $(basename "$f")"; grep -E "^\[h0\] *[0-9]" "$f"; done
	  echo "== threads"; cat "$OUT/diag-threads.txt"
	  echo "== perf"; tail -3 "$OUT/perf-rec.log" 2>/dev/null; cat "$OUT/perf-flat.txt" 2>/dev/null
	} > "$OUT/table.txt"
	cat "$OUT/table.txt"
	cp "$OUT/perf-top.txt" "$OUT/table-perf.txt" 2>/dev/null
	exit 0
fi
if [ "$what" = nsprof2 ]; then
	# where a large two-namespace AllReduce spends its time, by r2ccld's
	# per-operation line (--log-level debug: idle, applying, settle,
	# staging, messages), host buffers then GPU buffers, NCCL beside
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	# shellcheck disable=SC2086
	$C daemons start --log-level debug ${NS_ARGS:-} >> "$OUT/ns-up.log" 2>&1
	NS_GPU=0 bench prof-host 100 -b 256M -e 1G -f 4 -n 5 -w 2
	grep "bytes:" /tmp/gpuns/h0/r2ccld.log > "$OUT/prof-host-ops.txt"
	bench prof-gpu 100 -b 256M -e 1G -f 4 -n 5 -w 2
	grep "bytes:" /tmp/gpuns/h0/r2ccld.log > "$OUT/prof-all-ops.txt"
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	ns_nccl prof-nccl
	$C down >> "$OUT/ns-up.log" 2>&1
	{ cat "$summary"
	  for f in prof-host prof-gpu prof-nccl; do echo "== $f"; grep -E "^\[h0\] *([0-9]|# torch)" "$OUT/$f.log"; done
	  echo "== ops (host 0)"; grep -E "(268435456|1073741824) bytes" "$OUT/prof-all-ops.txt" | sed 's/^.*op /op /' | tail -40
	  grep -iE "error|warn" "$OUT/prof-nccl.log" | head -5
	} > "$OUT/table.txt"
	cat "$OUT/table.txt"
	exit 0
fi
if [ "$what" = lat ] || [ "$what" = plan ]; then
	# the bench scripts run programs from a build folder ($BUILD/tools/...):
	# a folder of links to the bundle's wrappers stands in for it
	L=/tmp/r2bb
	rm -rf "$L"
	mkdir -p "$L/daemon" "$L/tools/peers"
	ln -s "$BD/lib" "$L/libclient"
	wrap() { printf '#!/bin/sh\nexec %s "$@"\n' "$BD/bin/$1" > "$2"; chmod +x "$2"; }
	wrap r2ccld "$L/daemon/r2ccld"
	for p in r2ccl-bench r2cclctl; do wrap "$p" "$L/tools/$p"; done
	for p in tcp_pingpong relay_floor gloo_peer; do
		if [ -e "$BD/bin/$p" ]; then wrap "$p" "$L/tools/peers/$p"; fi
	done
	export R2CCL_PEER_DIR=$L/tools/peers
	if [ "$what" = plan ]; then
		# tools/bench/plan-check.sh with PLAN_ARGS (its options) and
		# PLAN_OPTS (r2ccld's), e.g. PLAN_ARGS='-H 8 --logsteps rd
		# --sizes "256K 1M"' PLAN_OPTS="--logstep-hosts 8"
		eval "set -- ${PLAN_ARGS:-}"
		step plan 580 env BUILD=$L R2CCLD=$L/daemon/r2ccld bash "$ROOT/tools/bench/plan-check.sh" "$@"
		{ cat "$summary"; tail -30 "$OUT/plan.log"; } > "$OUT/table.txt"
		cat "$OUT/table.txt"
		exit 0
	fi
	# LAT_PARTS: which parts (default all); R2CCLD_OPTS: r2ccld options
	# of the small-bench runs and the GPU part (e.g. "--logstep hd");
	# LAT_RAILS: the small-bench runs' rails (default 2); LAT_SMALL_ARGS:
	# more small-bench options (e.g. "-b 128K -e 1M": those sizes only)
	part() { [[ " ${LAT_PARTS:-small2 small4 gpu react tenants} " == *" $1 "* ]]; }
	part small2 && step small-2h 300 env BUILD=$L R2CCLD=$L/daemon/r2ccld R2C_PREFIX=sm2 \
		bash "$ROOT/tools/bench/small-bench.sh" -H 2 -R "${LAT_RAILS:-2}" -n 1000 ${LAT_SMALL_ARGS:-}
	part small4 && step small-4h 400 env BUILD=$L R2CCLD=$L/daemon/r2ccld R2C_PREFIX=sm4 \
		bash "$ROOT/tools/bench/small-bench.sh" -H 4 -R "${LAT_RAILS:-2}" -n 1000 ${LAT_SMALL_ARGS:-}
	if part gpu; then
		$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
		# shellcheck disable=SC2086
		$C daemons start ${R2CCLD_OPTS:-} >> "$OUT/ns-up.log" 2>&1
		NS_GPU=0 bench lat-host 120 -b 8 -e 1M -f 2 -n 1000 -w 50 --pct
		# LAT_GPU: whose buffers are on the GPU (default every host's;
		# h0: host 0's only, as with a GPU per host on a one-GPU machine)
		NS_GPU=${LAT_GPU:-1} bench lat-gpu 120 -b 8 -e 1M -f 2 -n 1000 -w 50 --pct
		$C daemons stop >> "$OUT/ns-up.log" 2>&1
		$C down >> "$OUT/ns-up.log" 2>&1
	fi
	# REACT_RUNS runs (default 2), REACT_ARGS more tenant-bench options
	# (e.g. "--loops 4": every tenant backlogged)
	for k in $(seq 1 "${REACT_RUNS:-2}"); do
		# shellcheck disable=SC2086
		part react && step "react-$k" 200 env BUILD=$L R2CCLD=$L/daemon/r2ccld R2C_PREFIX=tr \
			bash "$ROOT/tools/bench/tenant-bench.sh" --only react -n 12 ${REACT_ARGS:-}
	done
	part tenants && step tenants-test 300 env CK_FORK=yes CK_DEFAULT_TIMEOUT=280 \
		R2CCLD=$L/daemon/r2ccld R2CCLCTL=$L/tools/r2cclctl "$BD/bin/test_tenants"
	{ cat "$summary"
	  for f in small-2h small-4h react-1 react-2 react-3 react-4; do
		[ -f "$OUT/$f.log" ] && echo "== $f" && tail -40 "$OUT/$f.log"
	  done
	  for f in lat-host lat-gpu; do
		[ -f "$OUT/$f.log" ] && echo "== $f" && grep -E "^\[h0\] *([0-9]|#pct)" "$OUT/$f.log"
	  done
	  [ -f "$OUT/tenants-test.log" ] && echo "== tenants-test" &&
		grep -E "victim|[0-9]+%:|Checks|fail" "$OUT/tenants-test.log" | head -20
	} > "$OUT/table.txt"
	cat "$OUT/table.txt"
	tar -C "$OUT" -czf "$OUT/../logs-${what}.tgz" --exclude=table.txt . 2>/dev/null
	exit 0
fi
if [ "$what" = latprof ]; then
	# where a small GPU AllReduce across the two namespace hosts spends its
	# time: r2ccld's per-operation debug lines (stream wait, device->host,
	# rail phase, host->device; the rail phase's plan and profile), medians
	# per size, host buffers beside (issue 21: GPU within 20 us of host)
	step copy-lat 120 "$BD/bin/copy_lat" -n 500
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	# shellcheck disable=SC2086
	$C daemons start --log-level debug ${R2CCLD_OPTS:-} >> "$OUT/ns-up.log" 2>&1
	NS_GPU=0 bench latprof-host 120 -b "${LATPROF_B:-4K}" -e "${LATPROF_E:-128K}" -f 2 -n 300 -w 20 --pct
	grep -aE " bytes(:| staged| eager)" /tmp/gpuns/h0/r2ccld.log > "$OUT/latprof-host-ops.txt"
	grep -aE " bytes(:| staged| eager)" /tmp/gpuns/h1/r2ccld.log > "$OUT/latprof-host-ops-h1.txt"
	: > /tmp/gpuns/h0/r2ccld.log
	: > /tmp/gpuns/h1/r2ccld.log
	NS_GPU=${LATPROF_GPU:-1} bench latprof-gpu 120 -b "${LATPROF_B:-4K}" -e "${LATPROF_E:-128K}" -f 2 -n 300 -w 20 --pct
	grep -aE " bytes(:| staged| eager)" /tmp/gpuns/h0/r2ccld.log > "$OUT/latprof-gpu-ops.txt"
	grep -aE " bytes(:| staged| eager)" /tmp/gpuns/h1/r2ccld.log > "$OUT/latprof-gpu-ops-h1.txt"
	$C daemons stop >> "$OUT/ns-up.log" 2>&1
	$C down >> "$OUT/ns-up.log" 2>&1
	med() { sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f", v[int((NR + 1) / 2)]; else printf "-" }'; }
	{ cat "$summary"
	  echo "== copy_lat"; cat "$OUT/copy-lat.log"
	  for f in latprof-host latprof-gpu; do echo "== $f"; grep -E "^\[h0\] #pct" "$OUT/$f.log"; done
	  for g in latprof-gpu-ops.txt latprof-gpu-ops-h1.txt; do
	  echo "== GPU staging parts, $g, medians (us): size wait d2h rail h2d"
	  for sz in $(sed -n 's/.*GPU op of \([0-9]*\) bytes staged.*/\1/p' "$OUT/$g" | sort -nu); do
		l=$(grep "GPU op of $sz bytes staged" "$OUT/$g")
		printf '%8s %6s %6s %6s %6s\n' "$sz" \
			"$(sed -n 's/.*stream wait \([0-9]*\) us.*/\1/p' <<<"$l" | med)" \
			"$(sed -n 's/.*device->host \([0-9]*\) us.*/\1/p' <<<"$l" | med)" \
			"$(sed -n 's/.*rail phase \([0-9]*\) us.*/\1/p' <<<"$l" | med)" \
			"$(sed -n 's/.*host->device \([0-9]*\) us.*/\1/p' <<<"$l" | med)"
	  done
	  done
	  for f in host gpu host-ops-h1 gpu-ops-h1; do
		case $f in *-h1) g=latprof-$f.txt ;; *) g=latprof-$f-ops.txt ;; esac
		echo "== eager operations, ${f%-ops-h1} buffers, host ${f##*-h}, medians (us): size queued->start posted last-in taken end"
		for sz in $(sed -n 's/.*op [0-9]*, \([0-9]*\) bytes eager.*/\1/p' "$OUT/$g" | sort -nu); do
			l=$(grep "op [0-9]*, $sz bytes eager" "$OUT/$g")
			printf '%8s' "$sz"
			for k in "queued->start" "posted +" "last in +" "taken +" "end +"; do
				printf ' %6s' "$(sed -n "s/.*$k *\(-*[0-9]*\).*/\1/p" <<<"$l" | med)"
			done
			echo
		done
	  done
	  for f in host gpu; do
		echo "== rail lines, $f buffers: a sample per size"
		for sz in 4096 16384 32768 131072; do grep -m2 "op [0-9]*, $sz bytes:" "$OUT/latprof-$f-ops.txt" | tail -1 | sed 's/^.*op /op /'; done
	  done
	} > "$OUT/table.txt"
	cat "$OUT/table.txt"
	tar -C "$OUT" -czf "$OUT/../logs-${what}.tgz" --exclude=table.txt . 2>/dev/null
	exit 0
fi
if [ "$what" = nstune ]; then
	# the two-namespace AllReduce with daemon options ($NS_ARGS, e.g.
	# "--tcp-streams 8 --chunk-size 4M"), one run per ';'-separated set
	$C up -H 2 -R 2 > "$OUT/ns-up.log" 2>&1
	k=0
	IFS=';' read -ra sets <<< "${NS_ARGS:-}"
	for a in "${sets[@]}"; do
		k=$((k + 1))
		# shellcheck disable=SC2086
		$C daemons start $a >> "$OUT/ns-up.log" 2>&1
		echo "ns-tune-$k: $a" >> "$summary"
		bench "ns-tune-$k" 150 -b 64M -e 1G -f 4 -n 5 -w 2
		$C daemons stop >> "$OUT/ns-up.log" 2>&1
	done
	$C down >> "$OUT/ns-up.log" 2>&1
fi

{
	echo "== steps"; cat "$summary"
	[ -f "$OUT/gpu-suite.log" ] && echo "== gpu suite" &&
		grep -E "^(matrix|count 0|order|cuMem|client killed|legacy IPC|our own legacy|another process|the same with|its memory|PASSED|FAILED|FAIL )" "$OUT/gpu-suite.log" | head -40
	[ -f "$OUT/gpu-release.log" ] && echo "== gpu_release" && cat "$OUT/gpu-release.log"
	[ -f "$OUT/ipc-cross-uid.log" ] && echo "== ipc_cross_uid.py" && cat "$OUT/ipc-cross-uid.log"
	[ -f "$OUT/nccl-allreduce.log" ] && cmp "$OUT/r2-allreduce.log" "$OUT/nccl-allreduce.log" "AllReduce 2 GPUs"
	for c in allgather reducescatter broadcast; do
		[ -f "$OUT/nccl-$c.log" ] && cmp "$OUT/r2-$c.log" "$OUT/nccl-$c.log" "$c 2 GPUs"
	done
	for f in ns-r2-allreduce ns-nccl-allreduce ns-r2-linkdown ns-r2-after ns-tune-1 ns-tune-2 ns-tune-3 ns-tune-4; do
		[ -f "$OUT/$f.log" ] && echo "== $f" && grep -E "^\[h0\] *([0-9]|# Out|# torch)" "$OUT/$f.log"
	done
	[ -f "$OUT/ns-linkdown-trace.csv" ] && awk -F, 'NR > 2 && $5 == ip { g = $3 - p; if (g > m) m = g } NR > 1 { p = $3; ip = $5; n++ }
		END { printf "linkdown loop: %d iterations, longest gap between completions %.1f ms (within a pass)\n", n, m / 1000 }' \
		"$OUT/ns-linkdown-trace.csv"
} | tee "$OUT/table.txt"
# few files come back from the GPU machine: the logs travel as one archive
tar -C "$OUT" -czf "$OUT/../logs-${what}.tgz" --exclude=table.txt . 2>/dev/null && \
	find "$OUT" -type f ! -name table.txt -delete
