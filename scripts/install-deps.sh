#!/usr/bin/env bash
# Installs what unmask needs to build and test, from Debian's packages only (see README
# "Dependencies" for why each one). Safe to run again; skips apt when everything is present.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev            # oneDNN sgemm: the default CPU GEMM (bench/GEMM_CHOICE.md)
  libopenblas-dev        # OpenBLAS: the alternative GEMM (UNMASK_BLAS=openblas)
  nlohmann-json3-dev     # JSON for config.json and safetensors headers
  libgtest-dev           # unit tests
  unicode-data           # UnicodeData.txt etc.: source of the generated tokenizer tables
  python3-torch python3-numpy  # PyTorch (CPU) reference for parity tests and peer benchmarks
  python3-opencv         # OpenCV's resizers: the reference of BEVT's Lanczos tokenizer copy
  python3-torchvision    # torchvision's own 2-D Swin block: an independent reference of the Swin layers
  clang libclang-rt-14-dev  # libFuzzer targets
  libhdf5-dev            # HDF5 C library: DLE's pretraining shards (prepare-text, the loader)
  python3-h5py           # independent reader/writer of HDF5 shards in the data tests
  python3.11-doc         # the English corpus of the main job (reStructuredText sources)
  ccache                 # compiler cache for the several build directories
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # FFmpeg libraries: video decode/encode (src/data/video)
  libturbojpeg0-dev      # JPEG frame folders (video datasets stored as frames)
  ffmpeg                 # the ffmpeg CLI: reference decoder in the video tests and benchmarks
  openmpi-bin libopenmpi-dev  # Open MPI: data-parallel training across processes (src/dist, mpirun)
)

missing=()
# Node.js + npm run tokenizers.js and onnxruntime-node (reference tokenizer, peer benchmark);
# use the machine's own if it has one, else Debian's.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all Debian packages present"
