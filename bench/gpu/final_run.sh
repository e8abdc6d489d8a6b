#!/usr/bin/env bash
# The whole GPU-machine session of issue 3 in one call: the default-run timing first (its first
# run meets cold caches, as in a freshly built image), then the PyTorch comparison and the
# discovery, framework and per-major checks. Figures go to $OUT and into BENCHMARKS.md by hand.
bash bench/gpu/default_run.sh 2>&1 | tee "$OUT/default_run.log"
bash bench/gpu/run_on_device.sh 2>&1 | tee "$OUT/device.log"
