#!/bin/bash
# Unit test: libnccl.so.2 exports every symbol of libclient/nccl/symbols.txt
# (and its pnccl* twin), as functions, under the SONAME libnccl.so.2, and
# nothing outside nccl*/pnccl*.
# usage: check_symbols.sh LIBRARY SYMBOLS_TXT
set -u
lib=$1 list=$2
command -v nm >/dev/null || { echo "SKIP: nm not found"; exit 77; }
fail=0
soname=$(objdump -p "$lib" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
if [ "$soname" != "libnccl.so.2" ]; then
	echo "FAIL: SONAME is '$soname', not libnccl.so.2"
	fail=1
fi
# defined dynamic symbols: "ADDR TYPE NAME"
exported=$(nm -D --defined-only "$lib" | awk '{ print $2, $3 }')
want=$(sed 's/#.*//' "$list" | awk 'NF { print $1 }' | sort -u)
n=0
for s in $want; do
	n=$((n + 1))
	for name in "$s" "p$s"; do
		if ! grep -qx "T $name" <<<"$exported"; then
			echo "FAIL: $name is not exported as a function"
			fail=1
		fi
	done
done
# nothing else leaks (libr2ccl's r2ccl_*, the common code's r2_*)
other=$(awk '$2 !~ /^p?nccl/ { print $2 }' <<<"$exported")
if [ -n "$other" ]; then
	echo "FAIL: exported outside nccl*/pnccl*:" $other
	fail=1
fi
[ $n -ge 38 ] || { echo "FAIL: only $n names in $list"; fail=1; }
[ $fail = 0 ] && echo "ok: $n symbols (and their pnccl twins), SONAME $soname"
exit $fail
