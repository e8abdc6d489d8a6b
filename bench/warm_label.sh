#!/usr/bin/env bash
# Benchmark (issue 21): today's path against imagegen's for the real runtime image (torch 2.13.0
# from PyPI on the debootstrapped Debian trixie base, as tests/it/real_build.rs builds it,
# without the team's additions; `wheels: index`), cold and warm (one matrix label changed), in one
# run, each pushed to an empty registry on 127.0.0.1:
#   today, cold     `docker build` (the classic builder, as imagegen's) of the context imagegen
#                   sends (images/<name>/ as `imagegen render` writes it, the self-test as
#                   gpu-selftest), then `docker push`; each timed
#   today, warm     the label imagegen-bench.round changed, `imagegen render`, `docker build`
#                   again (cached up to the LABEL step), `docker push` (only config + manifest new)
#   imagegen, cold  every image of today's path removed (no layer cache shared), then
#                   `imagegen build --selftest-dir selftest --no-test --push` to a second registry
#   imagegen, warm  the label changed again, the same `imagegen build --push` again
# The warm rounds run three times on each path (labels 2, 3 and 4), each printed, and the ratio of
# their medians. It prints each time, imagegen's peak memory in the cold round (GNU time),
# its phases as its log states them (with the seconds since that build's start), the digests, and
# the ratios imagegen / today, cold and warm. Both paths build the same Dockerfiles (label 1 cold,
# 2 to 4 warm; `-r{revision}` in the full tag, since a full tag is immutable and imagegen refuses
# to push new content under it, so only the revision in imagegen's version
# label differs). Needs the Docker daemon, network to PyPI and Debian, root
# for debootstrap when the base is missing, Debian's docker-registry and `bash
# .ci/install-deps.sh` (uv). Holds /work/.locks/realbuild when that exists. About 18 minutes on 2
# cores. imagegen runs as the README runs it, the release build (IMAGEGEN_BIN names another).
#
#   cargo build --release && bash bench/warm_label.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=warm
IMAGEGEN_BIN=${IMAGEGEN_BIN:-$PWD/target/release/imagegen}
# shellcheck source=bench/lib.sh
. bench/lib.sh

two_registries_and_a_project index

# The label round set to $1, then `imagegen render` (its output shown only when it fails).
render_round() {
  set_round "$1"
  "$bin" render >/dev/null 2>&1 || { "$bin" render; exit 2; }
}

# Today's path for label round $1 (its Dockerfile says revision 1: it records no manifest), pushed
# as $name: sets build_s and push_s (seconds); logs under $work.
today_round() {
  render_round "$1"
  local context=$work/today-context-$1 start
  cp -r "images/$name" "$context"
  rm -f "$context/apt.lock" # not an input: imagegen leaves it out of the context
  cp -p selftest/gpu-selftest-cu13 "$context/gpu-selftest"
  start=$(now)
  DOCKER_BUILDKIT=0 docker build -t "$today/$repository:$name" "$context" > "$work/today-build-$1.log" 2>&1 ||
    { cat "$work/today-build-$1.log" >&2; exit 1; }
  build_s=$(since "$start")
  start=$(now)
  docker push "$today/$repository:$name" > "$work/today-push-$1.log" 2>&1 || { cat "$work/today-push-$1.log" >&2; exit 1; }
  push_s=$(since "$start")
}
today_digest() { grep -o 'digest: sha256:[0-9a-f]*' "$work/today-push-$1.log" | cut -d' ' -f2; }
# "N of M steps cached" of today's build of round $1, "N of M layers already there" of its push.
today_cached() {
  printf '%s of %s steps cached' "$(grep -c 'Using cache' "$work/today-build-$1.log")" "$(grep -c '^Step ' "$work/today-build-$1.log")"
}
today_kept() {
  printf '%s of %s layers already there' "$(grep -c 'Layer already exists' "$work/today-push-$1.log" || true)" \
    "$(grep -c -E ': (Pushed|Layer already exists|Mounted from)' "$work/today-push-$1.log" || true)"
}

# imagegen's path for label round $1: sets imagegen_s; its stderr, each line after the time it
# came ($EPOCHREALTIME), in $work/build-$1.log, its report in $work/report-$1.json.
imagegen_round() {
  render_round "$1"
  local start line
  start=$(now)
  if ! { /usr/bin/time -f 'imagegen peak KiB %M' "$bin" build --selftest-dir selftest --no-test --push --format json 2>&1 > "$work/report-$1.json"; } |
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$work/build-$1.log"; then
    cat "$work/build-$1.log" >&2; exit 1
  fi
  imagegen_s=$(since "$start")
  imagegen_start=$start
}
imagegen_digest() { jq -r '.images[0].digest' "$work/report-$1.json"; }
# imagegen's peak resident memory in round $1 (GNU time's %M, KiB), in GiB.
imagegen_peak() {
  awk '/imagegen peak KiB/ { printf "%.2f GiB", $NF / 1048576 }' "$work/build-$1.log"
}
# The phases of round $1 (started at $2): its built, exported, normalized, loaded and pushed lines.
phases_of() {
  awk -v start="$2" '/== (built|exported|normalized|loaded|relabelled|pushed) / {
    line = $0; sub(/^[^ ]* /, "", line); printf "    %7.1f s  %s\n", $1 - start, line }' "$work/build-$1.log"
}

cleanup
today_round 1
today_cold_build=$build_s today_cold_push=$push_s
# Three warm rounds (labels 2, 3, 4) on each path: the warm figures are seconds, so one run says
# little about their spread.
warm_rounds=(2 3 4)
declare -A today_warm_of imagegen_warm_of imagegen_warm_start_of
for round in "${warm_rounds[@]}"; do
  today_round "$round"
  today_warm_of[$round]=$(echo "$build_s + $push_s" | bc)
  if [ "$round" = 2 ]; then today_warm_build=$build_s today_warm_push=$push_s; fi
done

# imagegen's path from a clean daemon: none of today's images or layers, no manifest, no state.
cleanup
rm -rf imagegen-manifest.json .imagegen
imagegen_round 1
imagegen_cold=$imagegen_s imagegen_cold_start=$imagegen_start
for round in "${warm_rounds[@]}"; do
  imagegen_round "$round"
  imagegen_warm_of[$round]=$imagegen_s imagegen_warm_start_of[$round]=$imagegen_start
done
imagegen_warm=${imagegen_warm_of[2]} imagegen_warm_start=${imagegen_warm_start_of[2]}
# The median of three values.
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }

today_cold=$(echo "$today_cold_build + $today_cold_push" | bc)
today_warm=$(echo "$today_warm_build + $today_warm_push" | bc)
printf 'real runtime image %s (torch 2.13.0, PyPI, trixie, wheels: index), %s cores, %s\n' "$name" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'today, cold:     docker build %7.1f s + docker push %6.2f s = %7.1f s   digest %s\n' \
  "$today_cold_build" "$today_cold_push" "$today_cold" "$(today_digest 1)"
printf '                 (cold: %s; %s)\n' "$(today_cached 1)" "$(today_kept 1)"
printf 'today, warm:     docker build %7.1f s + docker push %6.2f s = %7.1f s   digest %s\n' \
  "$today_warm_build" "$today_warm_push" "$today_warm" "$(today_digest 2)"
printf '                 (label change: %s; %s)\n' "$(today_cached 2)" "$(today_kept 2)"
printf 'imagegen, cold:  build --push --no-test                        %7.1f s   digest %s   peak memory %s\n' "$imagegen_cold" "$(imagegen_digest 1)" "$(imagegen_peak 1)"
phases_of 1 "$imagegen_cold_start"
printf 'imagegen, warm:  build --push --no-test                        %7.1f s   digest %s\n' "$imagegen_warm" "$(imagegen_digest 2)"
phases_of 2 "$imagegen_warm_start"
printf 'ratio imagegen / today, cold: %.2f (%.1f s / %.1f s)\n' "$(echo "$imagegen_cold / $today_cold" | bc -l)" "$imagegen_cold" "$today_cold"
printf 'ratio imagegen / today, warm: %.2f (%.1f s / %.1f s)\n' "$(echo "$imagegen_warm / $today_warm" | bc -l)" "$imagegen_warm" "$today_warm"
for round in "${warm_rounds[@]}"; do
  printf 'warm round %s (label %s): today %5.1f s, imagegen %5.1f s, ratio %.2f\n' "$round" "$round" \
    "${today_warm_of[$round]}" "${imagegen_warm_of[$round]}" "$(echo "${imagegen_warm_of[$round]} / ${today_warm_of[$round]}" | bc -l)"
  [ "$round" = 2 ] || phases_of "$round" "${imagegen_warm_start_of[$round]}"
done
today_median=$(median "${today_warm_of[@]}")
imagegen_median=$(median "${imagegen_warm_of[@]}")
printf 'ratio of the medians of the %s warm rounds: %.2f (%.1f s / %.1f s)\n' "${#warm_rounds[@]}" \
  "$(echo "$imagegen_median / $today_median" | bc -l)" "$imagegen_median" "$today_median"
