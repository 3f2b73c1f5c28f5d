#!/bin/bash
# Per-thread CPU use of a process over an interval (what `top -H` shows, as
# text): thread-cpu.sh PID [SECONDS]. r2ccld names its threads: r2-dispatch,
# r2-exec-<comm>, r2-rails, r2-reduce (pool), r2-gpu, tcp progress threads.
set -eu
pid=$1 secs=${2:-5}
hz=$(getconf CLK_TCK)
snap() {
	for t in /proc/"$pid"/task/*; do
		# fields after the command name (which may hold spaces): utime stime
		read -r line < "$t/stat" || continue
		rest=${line##*) }
		set -- $rest
		echo "${t##*/} $(( ${12} + ${13} )) $(tr ' ' _ < "$t/comm")"
	done
}
a=$(snap); sleep "$secs"; b=$(snap)
join <(echo "$a" | sort) <(echo "$b" | sort) |
	awk -v hz="$hz" -v s="$secs" '{ u = ($4 - $2) / hz / s * 100; if (u >= 1) printf "%6.1f%%  %s (tid %s)\n", u, $3, $1 }' |
	sort -rn
