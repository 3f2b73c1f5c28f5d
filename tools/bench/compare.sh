#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Back-to-back comparison of two builds on the benchmarks of
# docs/benchmarks.md sections 1 and 2 and tests/cluster/fault_steady.sh:
# is the new build within the old build's run-to-run spread?
#
# Usage:
#   tools/bench/compare.sh [-k K] [--only NAMES] [--out DIR] OLD_REF [NEW_REF|worktree]
#   tools/bench/compare.sh --parse-only DIR
#
# OLD_REF (and NEW_REF, a commit) are built in temporary detached git
# worktrees under /tmp; "worktree" (the default) is this checkout as it is,
# uncommitted changes included. Each is built with meson debugoptimized (as
# sections 1 and 2 were measured) in a build folder under the same /tmp
# folder. Then K rounds (default 3), old and new alternating (odd rounds old
# first, even rounds new first, so that a drift of the machine weighs on
# both), of each benchmark (--only local,capped,uncapped,steady: some):
#   local     tools/bench/local-bench.sh BUILD 4 (section 1: 4 ranks, with
#             OpenMPI and Gloo; both r2ccl tables count)
#   capped    tools/bench/cluster-bench.sh -H 4 -R 2 --rate 1gbit (section 2)
#   uncapped  tools/bench/cluster-bench.sh -H 4 -R 2 (section 2)
#   steady    tests/cluster/fault_steady.sh (its phases' time_ms)
# each run by its own tree's script on its own build, under
# flock $LOCK (default /tmp/r2-bench.lock: the shared benchmark lock).
# capped, uncapped and steady need root (network namespaces); without root
# they are left out with a note.
#
# The raw outputs stay in DIR/raw/BENCH.SIDE.ROUND.txt (SIDE old or new;
# DIR: --out, default a new /tmp/r2-compare.XXXXXX), and the tables are
# printed from them: one table per benchmark, one row per size (or phase):
# the old build's min / median / max over every sample, the new build's
# median, and whether that median lies within the old min..max ("within old
# spread"). The measure is the out-of-place time of r2ccl's rows (us; the
# peers' rows are left out) and fault_steady's time_ms: lower is better.
# --parse-only DIR prints the tables of a DIR of such files again (or of
# files saved by hand under those names) and runs nothing.
#
# Environment: LOCK (the lock file; empty: no lock), R2C_PREFIX (cluster
# prefix, default cmp), STEADY_* (passed on to fault_steady.sh), JOBS
# (ninja -j, default 2).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
K=3
ONLY="local,capped,uncapped,steady"
OUT=""
PARSE=""

usage() {
	sed -n '/^# Usage:/,/^# OLD_REF/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

# ---- parsing: "KEY VALUE" lines of one raw output ----

# r2ccl-bench's rows (nccl-tests columns, out-of-place then in-place):
# size count type redop root time algbw busbw #wrong time algbw busbw
# #wrong. Comment lines, '#peer' rows and ratio tables start with '#'.
extract_bench() {
	awk '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ && $6 ~ /^[0-9.]+$/ { print $1, $6 }' "$1"
}

# fault_steady.sh: "steady PHASE: hosts ... time_ms T busbw_GBs ..." (on
# stdout with "# " before it, in its $FAULT_REPORT without)
extract_steady() {
	awk '{ sub(/^# /, "") }
	     $1 == "steady" && $2 ~ /^[a-z]+:$/ {
		for (i = 3; i < NF; i++)
			if ($i == "time_ms" && $(i + 1) ~ /^[0-9.]+$/) {
				ph = $2; sub(/:$/, "", ph); print ph, $(i + 1)
			}
	     }' "$1"
}

extract() { # BENCH FILE
	case $1 in
	steady) extract_steady "$2" ;;
	*) extract_bench "$2" ;;
	esac
}

# One table for BENCH from DIR/raw/BENCH.{old,new}.*.txt.
table() { # DIR BENCH
	local dir=$1 b=$2 f side any=""
	for f in "$dir"/raw/"$b".old.*.txt "$dir"/raw/"$b".new.*.txt; do
		[[ -f $f ]] && any=1
	done
	[[ -n $any ]] || return 0
	for f in "$dir"/raw/"$b".old.*.txt "$dir"/raw/"$b".new.*.txt; do
		[[ -f $f ]] || continue
		side=${f##*/}
		side=${side#"$b".}
		side=${side%%.*}
		extract "$b" "$f" | sed "s/^/$side /"
	done | awk -v bench="$b" -v unit="$([[ $b == steady ]] && echo ms || echo us)" '
		function sortn(a, n,    i, j, t) { # insertion sort, ascending
			for (i = 2; i <= n; i++) {
				t = a[i]
				for (j = i - 1; j >= 1 && a[j] > t; j--)
					a[j + 1] = a[j]
				a[j + 1] = t
			}
		}
		function median(a, n) {
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		{
			if (!(($2) in seen)) { seen[$2] = 1; keys[++nk] = $2 }
			k = $1 SUBSEP $2
			v[k, ++n[k]] = $3 + 0
		}
		END {
			if (bench == "steady")
				printf "## %s (fault_steady.sh time_ms per phase; lower is better)\n", bench
			else
				printf "## %s (r2ccl out-of-place time, %s; lower is better)\n", bench, unit
			printf "%12s  %7s  %10s  %10s  %10s  %7s  %10s  %9s  %s\n",
			       bench == "steady" ? "phase" : "size (B)", "old n",
			       "old min", "old median", "old max", "new n", "new median",
			       "new/old", "within old spread"
			for (i = 1; i <= nk; i++) {
				key = keys[i]
				no = n["old" SUBSEP key]; nn = n["new" SUBSEP key]
				delete o; delete w
				for (j = 1; j <= no; j++) o[j] = v["old" SUBSEP key, j]
				for (j = 1; j <= nn; j++) w[j] = v["new" SUBSEP key, j]
				sortn(o, no); sortn(w, nn)
				if (!no || !nn) {
					printf "%12s  %7d  %10s  %10s  %10s  %7d  %10s  %9s  %s\n", key, no,
					       "-", "-", "-", nn, nn ? sprintf("%.2f", median(w, nn)) : "-",
					       "-", "no data"
					continue
				}
				mo = median(o, no); mn = median(w, nn)
				verdict = "yes"
				if (mn < o[1])
					verdict = "no (faster)"
				else if (mn > o[no])
					verdict = "no (slower)"
				printf "%12s  %7d  %10.2f  %10.2f  %10.2f  %7d  %10.2f  %9.3f  %s\n", key, no,
				       o[1], mo, o[no], nn, mn, (mo > 0 ? mn / mo : 0), verdict
			}
			print ""
		}'
}

report() { # DIR
	local b
	echo "# compare.sh: $1 ($(cat "$1/refs" 2>/dev/null || echo "refs not recorded"))"
	for b in local capped uncapped steady; do
		table "$1" "$b"
	done
}

# ---- building and running ----

build_tree() { # SRC BUILDDIR (set up already: built again, e.g. a second --out run)
	[[ -f $2/build.ninja ]] ||
		meson setup "$2" "$1" --buildtype=debugoptimized >"$2.setup.log" 2>&1 ||
		{ tail -20 "$2.setup.log" >&2; exit 1; }
	ninja -C "$2" -j "${JOBS:-2}" >"$2.build.log" 2>&1 ||
		{ tail -20 "$2.build.log" >&2; exit 1; }
}

locked() {
	if [[ -n ${LOCK-/tmp/r2-bench.lock} ]] && command -v flock >/dev/null; then
		flock "${LOCK-/tmp/r2-bench.lock}" "$@"
	else
		"$@"
	fi
}

run_one() { # BENCH SIDE ROUND SRC BUILDDIR
	local b=$1 out="$W/raw/$1.$2.$3.txt" src=$4 bd=$5
	echo "# round $3: $b, $2 build" >&2
	case $b in
	local) locked "$src/tools/bench/local-bench.sh" "$bd" 4 >"$out" 2>"$out.err" ;;
	capped) BUILD=$bd R2C_PREFIX=${R2C_PREFIX:-cmp} \
		locked "$src/tools/bench/cluster-bench.sh" -H 4 -R 2 --rate 1gbit >"$out" 2>"$out.err" ;;
	uncapped) BUILD=$bd R2C_PREFIX=${R2C_PREFIX:-cmp} \
		locked "$src/tools/bench/cluster-bench.sh" -H 4 -R 2 >"$out" 2>"$out.err" ;;
	steady) R2CCLD=$bd/daemon/r2ccld R2CCL_BENCH=$bd/tools/r2ccl-bench \
		CLUSTER_CLIENT=$bd/tests/cluster/cluster_client \
		R2CCLCTL=$bd/tools/r2cclctl R2CCL_SIM=$bd/tools/r2ccl-sim \
		locked "$src/tests/cluster/fault_steady.sh" >"$out" 2>"$out.err" ;;
	esac || echo "# round $3: $b on the $2 build failed (exit $?): $out.err" >&2
}

while [[ $# -gt 0 ]]; do
	case $1 in
	-k) K=$2; shift 2 ;;
	--only) ONLY=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--parse-only) PARSE=$2; shift 2 ;;
	-h|--help) usage ;;
	-*) echo "compare.sh: unknown option $1" >&2; usage ;;
	*) break ;;
	esac
done

if [[ -n $PARSE ]]; then
	[[ -d $PARSE/raw ]] || { echo "compare.sh: no $PARSE/raw" >&2; exit 2; }
	report "$PARSE"
	exit 0
fi
[[ $# -ge 1 && $# -le 2 ]] || usage
[[ $K =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: -k wants a count" >&2; exit 2; }
OLD_REF=$1
NEW_REF=${2:-worktree}
for b in ${ONLY//,/ }; do
	case $b in local|capped|uncapped|steady) ;; *) echo "compare.sh: unknown benchmark $b" >&2; exit 2 ;; esac
done

W=${OUT:-$(mktemp -d /tmp/r2-compare.XXXXXX)}
mkdir -p "$W/raw"
trees=()
cleanup() {
	for t in "${trees[@]}"; do git -C "$ROOT" worktree remove --force "$t" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# tree DIR REF: a detached worktree of REF at DIR, removed at exit; one
# already there at REF (an earlier --out run's, kept) is used as it is
tree() {
	if [[ -d $1 && $(git -C "$1" rev-parse HEAD 2>/dev/null) == $(git -C "$ROOT" rev-parse "$2^{commit}") ]]; then
		return
	fi
	git -C "$ROOT" worktree add --detach "$1" "$2" >/dev/null
	trees+=("$1")
}
tree "$W/old" "$OLD_REF"
OLD_SRC=$W/old
if [[ $NEW_REF == worktree ]]; then
	NEW_SRC=$ROOT
	new_desc="this worktree at $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo ' with changes')"
else
	tree "$W/new" "$NEW_REF"
	NEW_SRC=$W/new
	new_desc="$NEW_REF ($(git -C "$ROOT" rev-parse --short "$NEW_REF"))"
fi
echo "old $OLD_REF ($(git -C "$ROOT" rev-parse --short "$OLD_REF")), new $new_desc, $K rounds, $(date -u +%FT%TZ), $(nproc) cores" >"$W/refs"
echo "# building old ($OLD_REF) and new ($NEW_REF) in $W" >&2
build_tree "$OLD_SRC" "$W/build-old"
build_tree "$NEW_SRC" "$W/build-new"

BENCHES=()
for b in ${ONLY//,/ }; do
	if [[ $b != local && $(id -u) != 0 ]]; then
		echo "# $b left out: it needs root (network namespaces)" >&2
		continue
	fi
	BENCHES+=("$b")
done
for ((round = 1; round <= K; round++)); do
	for b in "${BENCHES[@]}"; do
		if ((round % 2)); then
			run_one "$b" old "$round" "$OLD_SRC" "$W/build-old"
			run_one "$b" new "$round" "$NEW_SRC" "$W/build-new"
		else
			run_one "$b" new "$round" "$NEW_SRC" "$W/build-new"
			run_one "$b" old "$round" "$OLD_SRC" "$W/build-old"
		fi
	done
done
report "$W"
echo "# raw outputs: $W/raw" >&2
