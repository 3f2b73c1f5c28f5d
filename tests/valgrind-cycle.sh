#!/bin/bash
# valgrind over r2ccld's start / serve / SIGTERM cycle: no leaks, no errors.
# Usage: valgrind-cycle.sh R2CCLD CLIENT   (CLIENT: a program that runs collectives)
set -u
R2CCLD=$1
CLIENT=$2
command -v valgrind >/dev/null || { echo "valgrind not installed: skipped"; exit 77; }
dir=$(mktemp -d /tmp/r2ccl-vg.XXXXXX)
trap 'rm -rf "$dir"' EXIT
valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible \
	--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
	--track-fds=no --suppressions="$(dirname "$0")/valgrind.supp" --log-file="$dir/vg.log" \
	"$R2CCLD" --socket "$dir/s.sock" --config /dev/null 2>"$dir/d.log" &
pid=$!
for _ in $(seq 300); do [ -S "$dir/s.sock" ] && break; sleep 0.1; done
[ -S "$dir/s.sock" ] || { cat "$dir/d.log" "$dir/vg.log"; echo "daemon did not start"; exit 1; }
R2CCL_SOCKET="$dir/s.sock" "$CLIENT" 2>&1 || { echo "client failed"; kill -9 $pid; exit 1; }
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -ne 0 ]; then
	echo "r2ccld under valgrind exited $rc"
	cat "$dir/vg.log"
	tail -20 "$dir/d.log"
	exit 1
fi
grep -E "definitely lost|indirectly lost|possibly lost|ERROR SUMMARY" "$dir/vg.log"
echo "valgrind: clean start/serve/stop cycle"
