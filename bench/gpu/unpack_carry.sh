# bench/gpu/unpack_carry.sh: sourced by run_full_build.sh and compare_videomae_gpu.sh with BIN (the
# carried folder) and W (a scratch folder) set. pack_full_build.sh ships the binaries in
# bins.tar.xz (xz makes the 63 MB of the two binaries about 10 MB: the carry limit is 64 MiB) and
# the libraries the GPU machine lacked in libs.tar.xz. Unpacks both into W, points BIN at the
# binaries and LD_LIBRARY_PATH at the libraries. A folder with plain binaries (a local build
# directory, for DEVICE=cpu dry runs) is used as it is.
if [ -f "$BIN/bins.tar.xz" ]; then
  mkdir -p "$W/bin" && tar -xJf "$BIN/bins.tar.xz" -C "$W/bin"
  if [ -f "$BIN/libs.tar.xz" ]; then
    mkdir -p "$W/lib" && tar -xJf "$BIN/libs.tar.xz" -C "$W/lib" && export LD_LIBRARY_PATH="$W/lib:${LD_LIBRARY_PATH:-}"
  fi
  # video-input stand-ins (make_video_lib_stubs.sh) for the libraries this machine lacks, only those
  if [ -f "$BIN/stubs.tar.xz" ] && [ -d "$W/lib" ]; then
    mkdir -p "$W/stubs" && tar -xJf "$BIN/stubs.tar.xz" -C "$W/stubs"
    for lib in $(ldd "$W/bin/unmask" 2>/dev/null | awk '$3 == "not" {print $1}'); do
      [ -f "$W/stubs/$lib" ] && cp "$W/stubs/$lib" "$W/lib/" && echo "unpack_carry: $lib is a stand-in here (no video decoding)" >&2
    done
  fi
  BIN="$W/bin"
fi
