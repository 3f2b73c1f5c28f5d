#!/bin/bash
# Issue-3 benchmark: AllReduce float32 on the simulated cluster (network
# namespaces, tests/cluster/cluster.sh), R2CCL over every rail and Gloo (on
# rail 0) in the same command, nccl-tests columns and a ratio table.
# Usage: tools/bench/cluster-bench.sh [-H 4] [-R 2] [--rate 1gbit] [--mtu 9000] [-b 16M] [-e 64M]
# Environment: BUILD (build directory, default build), R2C_PREFIX (cluster
# prefix, default r2bench), extra r2ccld options in R2CCLD_OPTS.
set -euo pipefail
cd "$(dirname "$0")/../.."
H=4 R=2 RATE="" MTU=1500 B=16M E=64M ITERS=5 BUILD=${BUILD:-build}
while [ $# -gt 0 ]; do
	case $1 in
	-H) H=$2; shift 2 ;;
	-R) R=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--mtu) MTU=$2; shift 2 ;;
	-b) B=$2; shift 2 ;;
	-e) E=$2; shift 2 ;;
	-n) ITERS=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
PREFIX=${R2C_PREFIX:-r2bench} # several benchmarks on one machine stay apart
C="tests/cluster/cluster.sh --prefix $PREFIX"
trap '$C down >/dev/null 2>&1 || true' EXIT
$C up -H "$H" -R "$R" ${RATE:+--rate "$RATE"} --mtu "$MTU" >/dev/null
R2CCLD="$BUILD/daemon/r2ccld" $C daemons start ${R2CCLD_OPTS:-} >/dev/null
echo "# $(date -u +%F) cluster: $H hosts x $R rails${RATE:+, each NIC capped at $RATE}, MTU $MTU; $(nproc) cores"
mkdir -p "/tmp/$PREFIX/gloo"
$C run --timeout 900 -- sh -c "LD_LIBRARY_PATH=$BUILD/libclient $BUILD/tools/r2ccl-bench allreduce \
	-b $B -e $E -f 4 -n $ITERS -w 1 --nranks $H --first-rank \$R2CCL_HOST_INDEX --local-ranks 1 \
	--uid-file \$R2CCL_CLUSTER_DIR/uid --peer gloo --peer-addr 198.18.0.\$((R2CCL_HOST_INDEX+1)) \
	--peer-store \$R2CCL_CLUSTER_DIR/gloo" |
	# host 0's lines are the table; another host's failure goes to stderr
	# (a Gloo rank of host 1 that failed said why only there)
	awk '/^\[h0\] / { sub(/^\[h0\] /, ""); print; next }
	     /^\[h[0-9]+\] .*(gloo_peer|[Ff]ail|[Ee]rror)/ { print > "/dev/stderr" }'
$C daemons stop >/dev/null
