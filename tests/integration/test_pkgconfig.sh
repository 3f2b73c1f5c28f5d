#!/bin/bash
# SPDX-License-Identifier: MIT
# Builds a program with `pkg-config --cflags --libs r2ccl` two ways and runs
# it against a private r2ccld (issue 24; docs/client.md "Building"):
#  1. from the build tree: PKG_CONFIG_PATH=BUILD/meson-uninstalled; its
#     Cflags must name the public header's folder only;
#  2. from an install: `meson install --destdir` into a temporary folder,
#     found with PKG_CONFIG_SYSROOT_DIR (pkg-config prefixes the .pc's paths
#     with it) and PKG_CONFIG_LIBDIR (that .pc only).
# Usage: test_pkgconfig.sh BUILD_ROOT SOURCE_ROOT R2CCLD [B_SANITIZE]
# (a library built with sanitizers needs programs built with them too)
set -eu
build=$1 src=$2 daemon=$3 san=${4:-none}
prog=$src/examples/onehost.c
command -v pkg-config >/dev/null || { echo "no pkg-config: skipped"; exit 77; }
cc=${CC:-cc}
[ "$san" = none ] || cc="$cc -fsanitize=$san"
tmp=$(mktemp -d /tmp/r2ccl-pkgconfig.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# 1. build tree
flags=$(PKG_CONFIG_PATH=$build/meson-uninstalled pkg-config --cflags --libs r2ccl)
echo "build tree: $flags"
for f in $flags; do
	case $f in
	-I*)
		d=${f#-I}
		[[ $d == */libclient/include ]] || { echo "FAIL: Cflags name $d"; exit 1; }
		# nothing there but the public header
		[ ! -d "$d" ] || [ -z "$(find "$d" -maxdepth 1 -name '*.h' ! -name r2ccl.h)" ] ||
			{ echo "FAIL: other headers in $d"; exit 1; }
		;;
	-L*) libdir=${f#-L} ;;
	esac
done
grep -q -- "-lr2ccl" <<<"$flags" || { echo "FAIL: no -lr2ccl"; exit 1; }
[ -e "$libdir/libr2ccl.so" ] || { echo "FAIL: no libr2ccl.so in $libdir"; exit 1; }
# shellcheck disable=SC2086
$cc -Wall -Werror -o "$tmp/prog-build" "$prog" $flags
LD_LIBRARY_PATH=$libdir bash "$src/examples/run-example.sh" "$daemon" onehost "$tmp/prog-build"

# 2. an install
DESTDIR= meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
pc=$(find "$tmp/stage" -name r2ccl.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no r2ccl.pc installed"; exit 1; }
flags=$(PKG_CONFIG_SYSROOT_DIR=$tmp/stage PKG_CONFIG_LIBDIR=$(dirname "$pc") \
	pkg-config --cflags --libs r2ccl)
echo "install: $flags"
libdir=
for f in $flags; do
	case $f in
	-I*) [ -f "${f#-I}/r2ccl.h" ] || { echo "FAIL: no r2ccl.h in ${f#-I}"; exit 1; } ;;
	-L*) libdir=${f#-L} ;;
	esac
done
[[ $libdir == "$tmp/stage"/* ]] || { echo "FAIL: -L outside the staged install: $libdir"; exit 1; }
# shellcheck disable=SC2086
$cc -Wall -Werror -o "$tmp/prog-install" "$prog" $flags
LD_LIBRARY_PATH=$libdir bash "$src/examples/run-example.sh" "$daemon" onehost "$tmp/prog-install"
LD_LIBRARY_PATH=$libdir ldd "$tmp/prog-install" | grep -q "$tmp/stage.*libr2ccl" ||
	{ echo "FAIL: the program did not use the installed library"; exit 1; }
echo "PASS"
