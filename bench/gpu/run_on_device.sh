#!/usr/bin/env bash
# Everything measured on the GPU machine for issue 3, in one call (see BENCHMARKS.md):
# smoke tests of the three per-major binaries, the library discovery through pip's wheels,
# the framework check with right and wrong claims, then bench/gpu/compare.py.
# Expects the zig-built binaries in .gpubin/ (copied from target/selftest/) and $OUT set.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/selftest-out}"; mkdir -p "$OUT"
bin=.gpubin
section() { echo; echo "=== $*"; }
section machine
nvidia-smi --query-gpu=index,name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
nvidia-smi topo -m 2>/dev/null | head -5
python3 -c 'import torch, sys; print(sys.executable, torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.nccl.version(), torch.cuda.device_count())'
ldd --version | head -1
for major in cu11 cu12 cu13; do
  section "$major: bandwidth and shm only (needs the driver alone)"
  "$bin/gpu-selftest-$major" --checks bandwidth,shm --bandwidth-sizes 64M,256M; echo "exit $?"
done
section "cu12: full default run (this machine has CUDA 13 libraries only: expect exit 2 naming libcublas.so.12)"
"$bin/gpu-selftest-cu12" --no-framework --matmul-size 2048 --format json > "$OUT/cu12.json"; echo "exit $?"; head -c 1500 "$OUT/cu12.json"
section "cu11: same"
"$bin/gpu-selftest-cu11" --no-framework --matmul-size 2048; echo "exit $?"
section "cu13: pip wheels preferred (site-packages/nvidia/*/lib; NCCL as libnccl.so.2 only)"
"$bin/gpu-selftest-cu13" --prefer-pip-libraries --checks matmul,nccl --matmul-size 4096 --nccl-sizes 64M --no-framework; echo "exit $?"
section "cu13: framework check with claims taken from this machine's torch (expect pass)"
claims=$(python3 -c 'import torch; v=torch.cuda.nccl.version(); print(torch.__version__.split("+")[0], torch.version.cuda, torch.backends.cudnn.version(), ".".join(map(str, v)) if isinstance(v, tuple) else v)')
read -r t c d n <<<"$claims"
cudnn_claim="$((d/10000)).$((d%10000/100)).$((d%100)).0"
IMAGEGEN_TORCH=$t IMAGEGEN_CUDA=$c IMAGEGEN_CUDNN=$cudnn_claim IMAGEGEN_NCCL=$n "$bin/gpu-selftest-cu13" --checks framework; echo "exit $?"
section "cu13: framework check with a wrong torch claim (expect exit 1)"
"$bin/gpu-selftest-cu13" --checks framework --expect-torch 2.7.1 --format prometheus | grep -E "framework|overall"; echo "exit ${PIPESTATUS[0]}"
section "cu13: the default table"
time "$bin/gpu-selftest-cu13"; echo "exit $?"
section "compare with PyTorch"
python3 bench/gpu/compare.py --binary "$bin/gpu-selftest-cu13" --out "$OUT" 2>&1 | tee "$OUT/compare.txt"
