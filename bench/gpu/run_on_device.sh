#!/usr/bin/env bash
# Everything measured on the GPU machine for issue 3, in one call (see BENCHMARKS.md): the
# comparison with PyTorch first (so its first default run meets a cold torch.compile cache),
# then the library discovery through pip's wheels, the framework check with right and wrong
# claims, a CUDA 12 build meeting CUDA 13 libraries, and smoke tests of the three binaries.
# Expects the zig-built binaries in .gpubin/ (copied from target/selftest/) and $OUT set.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/selftest-out}"; mkdir -p "$OUT"
bin=.gpubin
section() { echo; echo "=== $*"; }
section machine
nvidia-smi --query-gpu=index,name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
nvidia-smi topo -m 2>/dev/null | head -3
python3 -c 'import torch, sys; print(sys.executable, torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.nccl.version(), torch.cuda.device_count())'
section "compare with PyTorch"
python3 bench/gpu/compare.py --binary "$bin/gpu-selftest-cu13" --out "$OUT" 2>&1 | tee "$OUT/compare.txt"
section "cu13: pip wheels preferred (site-packages/nvidia/*/lib; NCCL as libnccl.so.2 only)"
"$bin/gpu-selftest-cu13" --prefer-pip-libraries --checks matmul,nccl --matmul-size 4096 --nccl-sizes 64M --no-framework; echo "exit $?"
section "cu13: framework check with claims taken from this machine's torch (expect pass)"
claims=$(python3 -c 'import torch; v=torch.cuda.nccl.version(); print(torch.__version__.split("+")[0], torch.version.cuda, torch.backends.cudnn.version(), ".".join(map(str, v)) if isinstance(v, tuple) else v)')
read -r t c d n <<<"$claims"
cudnn_claim="$((d/10000)).$((d%10000/100)).$((d%100)).0"
IMAGEGEN_TORCH=$t IMAGEGEN_CUDA=$c IMAGEGEN_CUDNN=$cudnn_claim IMAGEGEN_NCCL=$n "$bin/gpu-selftest-cu13" --checks framework; echo "exit $?"
section "cu13: framework check with a wrong torch claim (expect exit 1)"
"$bin/gpu-selftest-cu13" --checks framework --expect-torch 2.7.1 --format prometheus | grep -E "framework|overall"; echo "exit ${PIPESTATUS[0]}"
section "cu12 and cu11 on CUDA 13 libraries (expect a warning naming the cuBLAS major)"
"$bin/gpu-selftest-cu12" --checks matmul --matmul-size 2048; echo "exit $?"
"$bin/gpu-selftest-cu11" --checks bandwidth,nccl --bandwidth-sizes 256M --nccl-sizes 64M; echo "exit $?"
section "cu13: the default table"
"$bin/gpu-selftest-cu13"; echo "exit $?"
