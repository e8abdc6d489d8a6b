#!/usr/bin/env bash
# Times gpu-selftest's default run on the GPU machine, three times (the first meets cold
# torch.compile and Triton caches), and prints each check's duration and the torch probe's
# phases (import, CUDA start, compile), to see what the < 20 s target depends on.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
binary="${1:-.gpubin/gpu-selftest-cu13}"
OUT="${OUT:-/tmp/selftest-out}"; mkdir -p "$OUT"
for attempt in 1 2 3; do
  started=$(date +%s.%N)
  "$binary" --format json > "$OUT/default-$attempt.json"; code=$?
  ended=$(date +%s.%N)
  python3 - "$OUT/default-$attempt.json" "$code" "$started" "$ended" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
wall = float(sys.argv[4]) - float(sys.argv[3])
checks = {check["name"]: check for check in report["checks"]}
found = checks.get("framework", {}).get("found", {})
print(f"default run: exit {sys.argv[2]}, {wall:.1f} s wall, report {report['duration_seconds']:.1f} s, setup {report['setup_seconds']:.1f} s")
print("  checks: " + ", ".join(f"{name} {check['duration_seconds']:.1f} s" for name, check in checks.items()))
print(f"  torch probe: import {found.get('import_seconds', 0):.1f} s, CUDA start {found.get('cuda_init_seconds', 0):.1f} s, compile {found.get('compile_seconds', 0):.1f} s")
PY
done
echo "--- torch probe alone, compile workers pool (TORCHINDUCTOR_COMPILE_THREADS=32) vs one thread"
for threads in 32 1; do
  TORCHINDUCTOR_COMPILE_THREADS=$threads "$binary" --checks framework --format json | python3 -c "
import json, sys; r = json.load(sys.stdin); c = [x for x in r['checks'] if x['name'] == 'framework'][0]; f = c['found']
print('threads $threads:', c['status'], f\"check {c['duration_seconds']:.1f} s, import {f.get('import_seconds', 0):.1f} s, CUDA {f.get('cuda_init_seconds', 0):.1f} s, compile {f.get('compile_seconds', 0):.1f} s\")"
done
