#!/bin/bash
# Release build time, test time and the resolve/render benchmark of two checkouts, on this
# machine, alone: `bash bench/before_after.sh BEFORE_DIR AFTER_DIR` (issue 44 compared 06ffc1f, a
# `git worktree add` of it, with main). Each tree's release build starts from an empty target
# folder of its own; the tests run with the same 4 threads and the slow ones skipped, in two
# rounds, the trees alternating. Both trees need .ci/venv and target/tools (.ci/install-deps.sh).
set -u
before="$1"
after="$2"
out="${OUT:-/tmp/before_after.out}"
: > "$out"
say() { echo "$*" | tee -a "$out"; }
skip=(--skip real_build --skip host_venv --skip apt_lock_records --skip knowledge_derive_agrees_with_pypi --skip services_of_flavour_images_given_by_name)
for dir in "$before" "$after"; do
    tree=$(basename "$dir")
    target=/tmp/before-after-target-$tree
    rm -rf "$target"
    cd "$dir" || exit 1
    start=$(date +%s.%N)
    CARGO_TARGET_DIR=$target cargo build --release --locked -p imagegen >/dev/null 2>&1 || say "$tree: release build failed"
    end=$(date +%s.%N)
    say "$tree release build from clean: $(echo "$end - $start" | bc) s"
    CARGO_TARGET_DIR=$target cargo bench --locked --bench resolve_render 2>/dev/null | tee -a "$out" | tail -3
done
for dir in "$before" "$after"; do (cd "$dir" && cargo test --workspace --locked --no-run >/dev/null 2>&1); done
for round in 1 2; do
for dir in "$before" "$after"; do
    tree=$(basename "$dir")
    cd "$dir" || exit 1
    log="/tmp/before-after-$tree-$round.log"
    start=$(date +%s.%N)
    RUST_TEST_THREADS=4 cargo test --workspace --locked >"$log" 2>&1 -- "${skip[@]}"
    status=$?
    end=$(date +%s.%N)
    say "$tree round $round cargo test --workspace (slow ones skipped, 4 threads): $(echo "$end - $start" | bc) s, exit $status, $(grep -c '^test .* ok$' "$log") ok, $(grep -c '^test .* FAILED$' "$log") failed"
done
done
