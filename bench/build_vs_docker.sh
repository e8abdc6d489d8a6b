#!/usr/bin/env bash
# Benchmark: `imagegen build` against a shell loop of `docker build` on the same Dockerfiles and
# contexts, both cold (no cached layers), in one invocation; then a no-op `imagegen build`.
# Prints wall times and ratios. Needs the Docker daemon and `bash .ci/install-deps.sh`.
#
#   bash bench/build_vs_docker.sh [JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-4}
cargo build --release -q
cargo test -q --test build -- --exact an_unreachable_daemon_is_one_error_and_exit_2 >/dev/null  # loads the busybox base image
bin=$PWD/target/release/imagegen
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r bench/build-fixture/. "$work/"
mkdir -p "$work/selftest"
printf '#!/bin/sh\necho '"'"'{"schema_version":1,"overall":"pass","checks":[]}'"'"'\n' > "$work/selftest/gpu-selftest-cu12"
chmod +x "$work/selftest/gpu-selftest-cu12"
cd "$work"
"$bin" render >/dev/null
repo=127.0.0.1:5000/imagegen-bench/torch
names=$("$bin" resolve --format json | python3 -c 'import json,sys; [print(i["name"]) for i in json.load(sys.stdin)["images"]]')
count=$(echo "$names" | wc -l)

clean() {
  docker images --format '{{.Repository}}:{{.Tag}}' | { grep "^$repo" || true; } | xargs -r docker rmi -f >/dev/null
  docker image prune -f >/dev/null
}
now() { date +%s.%N; }

# Reference: a shell loop of docker build, runtime images first (devel builds FROM them).
clean
for name in $names; do
  mkdir -p "loop/$name"; cp "images/$name/Dockerfile" "loop/$name/"; cp selftest/gpu-selftest-cu12 "loop/$name/gpu-selftest"
done
start=$(now)
for name in $(echo "$names" | grep runtime) $(echo "$names" | grep devel); do
  DOCKER_BUILDKIT=0 docker build -q -t "$repo:$name" "loop/$name" >/dev/null
done
loop=$(echo "$(now) - $start" | bc)

clean
start=$(now)
"$bin" build --selftest-dir selftest --jobs "$jobs" --no-test >/dev/null 2>&1
cold=$(echo "$(now) - $start" | bc)

clean
start=$(now)
"$bin" build --selftest-dir selftest --jobs "$jobs" >/dev/null 2>&1
cold_tested=$(echo "$(now) - $start" | bc)

start=$(now)
"$bin" build --selftest-dir selftest --jobs "$jobs" > noop.txt 2>&1
noop=$(echo "$(now) - $start" | bc)
built=$(grep -c ' built ' noop.txt || true)
clean

printf 'images: %s, imagegen --jobs %s, %s cores\n' "$count" "$jobs" "$(nproc)"
printf 'docker build loop (cold):            %6.1f s\n' "$loop"
printf 'imagegen build --no-test (cold):     %6.1f s   ratio to loop %.2f\n' "$cold" "$(echo "$cold / $loop" | bc -l)"
printf 'imagegen build with self-test (cold):%6.1f s   ratio to loop %.2f\n' "$cold_tested" "$(echo "$cold_tested / $loop" | bc -l)"
printf 'imagegen build, nothing changed:     %6.1f s   ratio to loop %.3f (%s images rebuilt)\n' "$noop" "$(echo "$noop / $loop" | bc -l)" "$built"
