#!/usr/bin/env bash
# Issue 12 on the GPU machine, in one call: does gpu-selftest fail a slow node, not only a broken
# one, and does its default run finish in under 10 s? Runs, in this order:
#   A  the default run on the fresh machine (first use of the GPUs and of torch; empty Triton and
#      Inductor caches, as in a freshly built image), saving a baseline;
#   -  nccl-tests' all_reduce_perf built from source (sm_90 only) against the system NCCL;
#   B  two warm default runs judged against that baseline;
#   C  two default runs after dropping the page cache, with empty compile caches;
#   P  the framework probe alone, Triton kernel and torch.compile, each with empty caches;
#   E  the default run with NCCL_P2P_DISABLE=1 and the baseline (the NCCL check must fail and
#      name the expected NVLink figure);
#   F  the default run and a matmul-only run while a second process keeps GPU 0 busy with bf16
#      matmuls (the matmul check must fail GPU 0 by the stated rule);
#   N  three alternated rounds of gpu-selftest's NCCL check and all_reduce_perf at 8, 64 and
#      512 MiB (gpu-selftest's back-to-back figure over nccl-tests' out-of-place busbw).
# Nothing changes the GPUs' clocks or settings: the busy run only loads GPU 0.
# Usage, from the repository root there: bash selftest/bench/issue12_device.sh BINARY NCCL_TESTS_SRC
# Writes $OUT/summary.txt (also printed) and $OUT/issue12.tar.gz (every report and log).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
binary="$(realpath "$1")"
nccl_source="$(realpath "$2")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/issue12-out}"
work="$(mktemp -d /tmp/issue12.XXXXXX)"
mkdir -p "$OUT" "$work/runs"
exec > >(tee "$work/log.txt") 2>&1
note() { echo "[$(date +%T)] $*"; }

# Empty compile caches for the next run, as a freshly built image has.
fresh_caches() {
  TRITON_CACHE_DIR="$(mktemp -d /tmp/triton-cache.XXXXXX)"
  TORCHINDUCTOR_CACHE_DIR="$(mktemp -d /tmp/inductor-cache.XXXXXX)"
  export TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR
}

# run NAME ARGS...: one gpu-selftest run, JSON to runs/NAME.json, wall time and exit code beside.
run() {
  local name="$1"; shift
  local started ended code
  started="$(date +%s%N)"
  timeout 120 "$binary" --format json "$@" >"$work/runs/$name.json" 2>"$work/runs/$name.err"
  code=$?
  ended="$(date +%s%N)"
  printf '%s %d.%03d\n' "$code" $(( (ended - started) / 1000000000 )) $(( (ended - started) / 1000000 % 1000 )) >"$work/runs/$name.status"
  note "$name: exit $code, $(cut -d' ' -f2 "$work/runs/$name.status") s wall ($*)"
}

note "machine"
nvidia-smi -L
nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm,power.limit,temperature.gpu,utilization.gpu --format=csv
nvidia-smi topo -m | head -4
nproc

note "A: default run on the fresh machine, saving a baseline"
fresh_caches
run A-fresh --save-baseline "$work/baseline.json"
if [ ! -s "$work/baseline.json" ]; then
  note "A saved no baseline (a check failed); saving one without the framework check"
  run A-baseline --no-framework --save-baseline "$work/baseline.json"
fi

note "building nccl-tests all_reduce_perf (sm_90) against the system NCCL"
nccl_home=""
if [ ! -f /usr/include/nccl.h ]; then
  # No development package: pip's wheel has the header and libnccl.so.2 only, so make a home
  # with the unversioned name the linker wants.
  wheel="$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)"
  nccl_home="$work/nccl-home"
  mkdir -p "$nccl_home/lib"
  ln -sf "$wheel/include" "$nccl_home/include"
  ln -sf "$wheel/lib/libnccl.so.2" "$nccl_home/lib/libnccl.so.2"
  ln -sf "$wheel/lib/libnccl.so.2" "$nccl_home/lib/libnccl.so"
  export LD_LIBRARY_PATH="$nccl_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
note "NCCL for nccl-tests: ${nccl_home:-system (/usr/include/nccl.h)}"
build_started="$(date +%s)"
timeout 300 make -C "$nccl_source/src" -j "$(nproc)" MPI=0 CUDA_HOME=/usr/local/cuda \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$work/nccl-build" \
  ${nccl_home:+NCCL_HOME="$nccl_home"} \
  "$work/nccl-build/all_reduce_perf" >"$work/nccl-build.log" 2>&1 || tail -30 "$work/nccl-build.log"
note "nccl-tests built in $(( $(date +%s) - build_started )) s"
all_reduce_perf="$work/nccl-build/all_reduce_perf"
ldd "$all_reduce_perf" | grep -E "nccl|cudart" || true

note "B: warm default runs against the baseline"
run B-warm-1 --baseline "$work/baseline.json"
run B-warm-2 --baseline "$work/baseline.json"

note "C: default runs with the page cache dropped and empty compile caches (cold disk, warm driver)"
for attempt in 1 2; do
  sync
  if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then note "page cache dropped"; else note "could not drop the page cache"; fi
  fresh_caches
  run "C-cold-$attempt"
done

note "P: the framework probe alone, empty caches each time"
fresh_caches
run P-triton --checks framework
fresh_caches
run P-torch-compile --checks framework --framework-torch-compile
unset TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR

note "E: NCCL_P2P_DISABLE=1 (the all-reduce leaves NVLink)"
export NCCL_P2P_DISABLE=1
run E-p2p-disabled --baseline "$work/baseline.json"
unset NCCL_P2P_DISABLE

note "F: a second process keeps GPU 0 busy with bf16 matmuls"
cat >"$work/busy.py" <<'PY'
import sys, time, torch
seconds = float(sys.argv[1])
device = torch.device("cuda", 0)
a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b
torch.cuda.synchronize(device)
print("busy", flush=True)
end, count, started = time.time() + seconds, 0, time.time()
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize(device)
    count += 20
elapsed = time.time() - started
print(f"done: {count} matmuls in {elapsed:.1f} s, {count * 2 * 8192**3 / elapsed / 1e12:.0f} TFLOP/s on GPU 0", flush=True)
PY
python3 "$work/busy.py" 60 >"$work/busy.log" 2>&1 &
busy_pid=$!
for _ in $(seq 1 120); do grep -q busy "$work/busy.log" && break; sleep 0.5; done
note "busy process $busy_pid: $(head -1 "$work/busy.log")"
nvidia-smi --query-gpu=index,utilization.gpu,clocks.sm,power.draw --format=csv
run F-busy-default --baseline "$work/baseline.json"
run F-busy-matmul --checks matmul --no-framework
kill "$busy_pid" 2>/dev/null
wait "$busy_pid" 2>/dev/null
note "busy process: $(tail -1 "$work/busy.log")"

note "N: NCCL against nccl-tests, three alternated rounds"
for round in 1 2 3; do
  run "N-selftest-$round" --checks nccl --no-framework --nccl-sizes 8M,64M,512M
  timeout 60 "$all_reduce_perf" -b 8M -e 512M -f 8 -g 2 >"$work/runs/N-nccl-tests-$round.txt" 2>&1
  note "all_reduce_perf round $round: exit $?"
done

note "summary"
python3 "$here/issue12_summary.py" "$work" | tee "$work/summary.txt"
cp "$work/summary.txt" "$OUT/summary.txt"
tar -czf "$OUT/issue12.tar.gz" -C "$work" --exclude nccl-build --exclude '*.o' .
ls -la "$OUT"
