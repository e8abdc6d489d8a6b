#!/usr/bin/env bash
# Issue 47 on the GPU machine, in one call: the health counters as NVML reads them on a real GPU,
# and the default run's time against torch's own floor, both with a cold page cache and warm.
#   F  the first command on the fresh machine: the default run of BINARY (empty page cache of
#      torch's files, first use of the GPU);
#   R  ROUNDS rounds, each: the floor cold then warm, the default run cold then warm,
#      [BASELINE's default run cold then warm], [with PIP=1: the default run with
#      --prefer-pip-libraries cold (the cuBLAS torch loads, as imagegen's images have it)]. "Cold"
#      is `sync; echo 3 > /proc/sys/vm/drop_caches` right before the command; "warm" is the same
#      command again right after, with its files in the page cache (a warm run after another
#      program's cold one would read the files that program did not, e.g. another cuBLAS).
#      The floor is torch's own start, the least any torch check can take:
#        python3 -c 'import os, torch; torch.cuda.init(); torch.ones(1024, device="cuda").add_(1);
#                    torch.cuda.synchronize(); os._exit(0)'
#      (os._exit: without it Python's teardown with torch loaded adds most of a second).
#      The default run is `BINARY --format json --output FILE` with nothing else set.
#   I  `python3 -X importtime -c 'import torch'` (warm), and a table-format run for the record.
# Every wall time is the shell's clock around the command, which starts 1 s after the one before
# (the driver tears the last process's context down meanwhile). Nothing changes the GPU's
# settings.
# Usage, from the repository root there:
#   bash selftest/bench/issue47_device.sh BINARY [BASELINE_BINARY] [ROUNDS]
# Writes $OUT/summary.txt (also printed), $OUT/health.txt (the health check's table) and
# $OUT/issue47.tar.gz (every report and log).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
binary="$(realpath "$1")"
baseline="${2:+$(realpath "$2")}"
rounds="${3:-3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/issue47-out}"
work="$(mktemp -d /tmp/issue47.XXXXXX)"
mkdir -p "$OUT" "$work/runs"
exec > >(tee "$work/log.txt") 2>&1
note() { echo "[$(date +%T)] $*"; }
floor_code='import os, torch; torch.cuda.init(); torch.ones(1024, device="cuda").add_(1); torch.cuda.synchronize(); os._exit(0)'

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# timed NAME COMMAND...: wall time and exit code to runs/NAME.status, output to runs/NAME.out.
# Each command starts after a pause: a process that used the GPU and just exited leaves the
# driver tearing its context down, which the next process's own start would pay (seen: 0.3 s).
timed() {
  local name="$1"; shift
  local started ended code
  sleep 1
  started="$(date +%s%N)"
  timeout 120 "$@" >"$work/runs/$name.out" 2>"$work/runs/$name.err"
  code=$?
  ended="$(date +%s%N)"
  printf '%s %d.%03d\n' "$code" $(( (ended - started) / 1000000000 )) $(( (ended - started) / 1000000 % 1000 )) >"$work/runs/$name.status"
  note "$name: exit $code, $(cut -d' ' -f2 "$work/runs/$name.status") s"
}
floor() { timed "$1" python3 -c "$floor_code"; }
selftest() { local name="$1" program="$2"; shift 2; timed "$name" "$program" --format json --output "$work/runs/$name.json" "$@"; }

note "machine"
nvidia-smi -L
nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,pcie.link.gen.max,pcie.link.width.max,ecc.mode.current,clocks.max.sm,power.limit --format=csv
nproc
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT,PERFORMANCE >"$work/nvidia-smi-q.txt" 2>&1
nvidia-smi -q >"$work/nvidia-smi-q-all.txt" 2>&1

note "F: the default run as the first command on the fresh machine"
selftest F-new "$binary"

for round in $(seq 1 "$rounds"); do
  note "round $round"
  cold; floor "R$round-floor-cold"
  floor "R$round-floor-warm"
  cold; selftest "R$round-new-cold" "$binary"
  selftest "R$round-new-warm" "$binary"
  if [ -n "$baseline" ]; then
    cold; selftest "R$round-main-cold" "$baseline"
    selftest "R$round-main-warm" "$baseline"
  fi
  # The libraries torch loads (pip's wheels), as an image made by imagegen has them first.
  if [ "${PIP:-0}" = 1 ]; then cold; selftest "R$round-pip-cold" "$binary" --prefer-pip-libraries; fi
done

note "I: where import torch spends its time, and the record runs"
python3 -X importtime -c 'import torch' 2>"$work/importtime.txt"
selftest T-new-no-health "$binary" --skip health
"$binary" --format table >"$work/table.txt" 2>&1
"$binary" --format prometheus >"$work/prometheus.txt" 2>&1
sed -n '/\[.*\] health/,/^\[/p' "$work/table.txt" | sed '$d' >"$OUT/health.txt"

python3 "$here/issue47_summary.py" "$work" | tee "$work/summary.txt"
cp "$work/summary.txt" "$OUT/summary.txt"
cp "$work/table.txt" "$OUT/table.txt"
tar -C "$work" -czf "$OUT/issue47.tar.gz" .
