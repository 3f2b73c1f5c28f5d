#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs one example against a private r2ccld (the one just built) and checks
# what it printed. Usage: run-example.sh R2CCLD CASE EXAMPLE_BINARY
#   CASE: onehost | multihost-file | multihost-env | multihost-2daemons | gpu
#   (multihost-2daemons: rank 1 on a second r2ccld of this host, the two
#   daemons joined over this host's NIC as two hosts would be; skipped
#   without a NIC that has an IPv4 address)
# Exit: 0 pass, 1 fail, 77 skipped (the gpu example without a GPU).
set -u
daemon=$1 case=$2 bin=$3
dir=$(mktemp -d /tmp/r2ccl-example.XXXXXX)
pid= pid2=
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	[ -n "$pid2" ] && kill -KILL "$pid2" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	echo "--- r2ccld log:"
	cat "$dir/r2ccld.log"
	[ -f "$dir/b/r2ccld.log" ] && { echo "--- second r2ccld's log:"; cat "$dir/b/r2ccld.log"; }
	exit 1
}

# the daemons of a cluster share a key (docs/security.md): one for this run
(umask 077 && head -c 32 /dev/urandom | base64 >"$dir/cluster.key")
"$daemon" --socket "$dir/r2ccld.sock" --config /dev/null --cluster-key-file "$dir/cluster.key" \
	>"$dir/r2ccld.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	[ -S "$dir/r2ccld.sock" ] && break
	sleep 0.1
done
[ -S "$dir/r2ccld.sock" ] || fail "r2ccld did not start"
export R2CCL_SOCKET=$dir/r2ccld.sock

case $case in
onehost)
	out=$("$bin" 3 2>&1) || fail "onehost exited $?: $out"
	echo "$out"
	for r in 0 1 2; do
		grep -q "rank $r of 3: allreduce, allgather, broadcast ok" <<<"$out" ||
			fail "rank $r did not report"
	done
	grep -q "all 3 ranks ok" <<<"$out" || fail "no summary line"
	;;
multihost-2daemons)
	ip -4 -o addr show scope global 2>/dev/null | grep -q . ||
		{ echo "no NIC with an IPv4 address: skipped"; exit 77; }
	mkdir "$dir/b"
	"$daemon" --socket "$dir/b/r2ccld.sock" --config /dev/null \
		--cluster-key-file "$dir/cluster.key" >"$dir/b/r2ccld.log" 2>&1 &
	pid2=$!
	for _ in $(seq 100); do
		[ -S "$dir/b/r2ccld.sock" ] && break
		sleep 0.1
	done
	[ -S "$dir/b/r2ccld.sock" ] || fail "the second r2ccld did not start"
	R2CCL_SOCKET=$dir/b/r2ccld.sock "$bin" --rank 1 --nranks 2 --id-file "$dir/job.id" \
		>"$dir/r1.out" 2>&1 &
	r1=$!
	"$bin" --rank 0 --nranks 2 --id-file "$dir/job.id" >"$dir/r0.out" 2>&1 ||
		fail "rank 0 exited $?: $(cat "$dir/r0.out")"
	wait "$r1" || fail "rank 1 exited $?: $(cat "$dir/r1.out")"
	cat "$dir/r0.out" "$dir/r1.out"
	grep -q "rank 0 of 2: allreduce ok" "$dir/r0.out" || fail "rank 0 did not report"
	grep -q "rank 1 of 2: allreduce ok" "$dir/r1.out" || fail "rank 1 did not report"
	# each rank used its own daemon: the AllReduce went between the two
	grep -q "comm_failed" "$dir/b/r2ccld.log" && fail "a communicator failed on the second daemon"
	kill -TERM "$pid2"
	wait "$pid2" || fail "the second r2ccld exited $? on SIGTERM"
	pid2=
	;;
multihost-file | multihost-env)
	if [ "$case" = multihost-env ]; then
		R2CCL_EXAMPLE_ID=$("$bin" --print-id) || fail "--print-id exited $?"
		[ ${#R2CCL_EXAMPLE_ID} -eq 256 ] || fail "id of ${#R2CCL_EXAMPLE_ID} hex digits"
		export R2CCL_EXAMPLE_ID
		args=()
	else
		args=(--id-file "$dir/job.id")
	fi
	# rank 1 first: it waits for the id (file) or for rank 0 (bootstrap)
	"$bin" --rank 1 --nranks 2 "${args[@]}" >"$dir/r1.out" 2>&1 &
	r1=$!
	"$bin" --rank 0 --nranks 2 "${args[@]}" >"$dir/r0.out" 2>&1 || fail "rank 0 exited $?: $(cat "$dir/r0.out")"
	wait "$r1" || fail "rank 1 exited $?: $(cat "$dir/r1.out")"
	cat "$dir/r0.out" "$dir/r1.out"
	grep -q "rank 0 of 2: allreduce ok" "$dir/r0.out" || fail "rank 0 did not report"
	grep -q "rank 1 of 2: allreduce ok" "$dir/r1.out" || fail "rank 1 did not report"
	[ ! -e "$dir/job.id" ] || fail "rank 0 left the id file"
	;;
gpu)
	out=$("$bin" 2>&1)
	rc=$?
	echo "$out"
	[ $rc -eq 77 ] && exit 77
	[ $rc -eq 0 ] || fail "gpu exited $rc"
	grep -q "rank 1: GPU allreduce on a stream ok" <<<"$out" || fail "rank 1 did not report"
	;;
*)
	fail "unknown case $case"
	;;
esac
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || fail "r2ccld exited $rc on SIGTERM"
grep -q "comm_failed" "$dir/r2ccld.log" && fail "a communicator failed"
echo "PASS $case"
