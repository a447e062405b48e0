#!/usr/bin/env bash
# bench/gpu/make_video_lib_stubs.sh BINARY OUTDIR: stand-in shared libraries for the video-input
# libraries (FFmpeg's libavformat/libavcodec/libswscale/libavutil and libturbojpeg) that BINARY
# needs. The GPU machine lent on 2026-11-26 had none of them, and their real closure is ~150 MB
# (codecs, X11, ICU), over the 64 MiB carry limit. The GPU benchmarks never decode video, so each
# stand-in defines the symbols BINARY imports, under the same version nodes (the loader checks
# those), as functions that print what was called and abort: a run that reaches video decoding on
# that machine stops with a message instead of a silent wrong answer. unpack_carry.sh puts OUTDIR
# on the library path only for libraries the machine lacks.
set -euo pipefail
BINARY=$1
OUT=$2
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for soname in $(readelf -d "$BINARY" | sed -n 's/.*Shared library: \[\(lib\(avformat\|avcodec\|swscale\|avutil\|turbojpeg\)\.so[.0-9]*\)\]/\1/p'); do
  base=${soname%%.so*}
  # "name@VERSION" of every undefined function BINARY takes from this library's version nodes
  prefix=$(case $base in libavformat) echo LIBAVFORMAT_;; libavcodec) echo LIBAVCODEC_;;
           libswscale) echo LIBSWSCALE_;; libavutil) echo LIBAVUTIL_;; libturbojpeg) echo TURBOJPEG_;; esac)
  readelf --dyn-syms -W "$BINARY" | awk -v p="@$prefix" '$7 == "UND" && index($8, p) {print $8}' \
    | sed 's/ (.*//' | sort -u > "$work/$base.syms"
  {
    echo '#include <stdio.h>'
    echo '#include <stdlib.h>'
    echo "static void stub_called(const char* name) { fprintf(stderr, \"unmask: %s is a stand-in ($soname was not on this machine; bench/gpu/make_video_lib_stubs.sh): video decoding is unavailable here\\n\", name); abort(); }"
    while IFS=@ read -r name version; do echo "void $name(void) { stub_called(\"$name\"); }"; done < "$work/$base.syms"
  } > "$work/$base.c"
  {
    for version in $(cut -d@ -f2 "$work/$base.syms" | sort -u); do
      echo "$version { global: $(awk -F@ -v v="$version" '$2 == v {printf "%s; ", $1}' "$work/$base.syms") };"
    done
    echo "LOCAL_STUB { local: *; };"
  } > "$work/$base.map"
  cc -shared -fPIC -O1 -o "$OUT/$soname" -Wl,-soname,"$soname" -Wl,--version-script="$work/$base.map" "$work/$base.c"
done
ls "$OUT"
