#!/bin/bash
# Copied by imagegen into devel images whose CUDA toolkit comes from PyPI (devel_toolkit: pypi).
# Builds a link-time stub libcuda.so (SONAME libcuda.so.1) from the toolkit's cuda.h: every
# driver API entry point the header declares (with and without per-thread default streams), as an
# empty function. It lets `-lcuda` link without a GPU, as the libcuda stub of NVIDIA's
# cuda-driver-dev package does; it is put on LIBRARY_PATH only, never in the loader cache, so the
# driver's own libcuda.so.1 is the one loaded at run time.
# Usage: make-cuda-stub.sh CUDA_HOME OUT_DIR
set -euo pipefail
cuda_home=$1
out_dir=$2
mkdir -p "$out_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for defines in "" "-DCUDA_API_PER_THREAD_DEFAULT_STREAM"; do
  gcc -E -P ${defines:+"$defines"} -I"$cuda_home/include" -x c "$cuda_home/include/cuda.h"
done | grep -oE '\bCUresult[[:space:]]+(CUDAAPI[[:space:]]+)?cu[A-Za-z0-9_]+[[:space:]]*\(' \
  | grep -oE 'cu[A-Za-z0-9_]+[[:space:]]*\($' | tr -d ' (' | sort -u > "$work/symbols"
test -s "$work/symbols" || { echo "make-cuda-stub: no driver API entry points in $cuda_home/include/cuda.h" >&2; exit 1; }
sed 's/.*/int &(void) { return 999; }/' "$work/symbols" > "$work/stub.c"
gcc -shared -fPIC -o "$out_dir/libcuda.so" -Wl,-soname,libcuda.so.1 "$work/stub.c"
echo "make-cuda-stub: $(wc -l < "$work/symbols") entry points -> $out_dir/libcuda.so"
