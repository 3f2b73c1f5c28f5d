#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A chunk delivered twice or out of order is applied once: 3 hosts x 2 rails
# x 2 local ranks, daemons started with --inject-dup 3 (every 3rd chunk is
# sent twice and each transfer's chunks go out in reverse order),
# --chunk-size 65536 (many chunks per transfer) and --log-level debug.
# cluster_client runs allreduce, allgather and send/recv from 1 element to
# 1M+3 elements (4-8 MB: about 100 chunks per transfer): every element must
# be exact, and the daemons' logs must show duplicates dropped ("applied
# once") on every host. Exits 77 when not root or without iproute2.

set -u -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lib_init cdup

H=3 R=2 L=2
"$C" up -H $H -R $R >/dev/null || { fail "cluster up"; finish; }
"$C" daemons start --inject-dup 3 --chunk-size 65536 --log-level debug >/dev/null ||
	{ fail "daemons start"; dump_logs; finish; }

t0=$(now)
out=$("$C" run --timeout 150 -- "$CC" --local-ranks $L --uid-file "$DIR/uid-dup-$RANDOM" \
	--ops allreduce,allgather,sendrecv --max-bytes 9M --timeout 140 2>&1)
rc=$?
npass=$(grep -c "cluster_client: PASS" <<<"$out")
if ((rc == 0 && npass == H)); then
	ok "allreduce/allgather/sendrecv exact with duplicated and reordered chunks ($(elapsed "$t0") s)"
else
	fail "cluster_client failed with duplicated/reordered chunks (run exit $rc, $npass of $H hosts passed)"
	grep -E "FAIL|error|failed|timed out|killed" <<<"$out" | head -n 20 | sed 's/^/# /'
	dump_logs
fi

total=0
for ((i = 0; i < H; i++)); do
	n=$(grep -c "applied once" "$DIR/h$i/r2ccld.log")
	total=$((total + n))
	if ((n > 0)); then
		ok "h$i: $n duplicate chunks dropped (\"applied once\" in its log)"
	else
		fail "h$i: no \"applied once\" in its log: duplicates were not seen or not dropped"
	fi
done
echo "# $total duplicates dropped in all"
check_sanitizer "dupchunks"
daemons_stop_ok "dupchunks" || dump_logs
"$C" down >/dev/null || fail "down"
finish
