#!/usr/bin/env bash
# Benchmark (issue 21): the real runtime image (torch 2.13.0 from PyPI on the debootstrapped Debian
# trixie base, as tests/it/real_build.rs builds it, without the team's additions; `wheels:
# index`) built and pushed twice from clean state, in one run:
#   round 1      `imagegen build --push --no-test` to a registry on 127.0.0.1 (empty): build,
#                normalize, push through the registry API
#   docker push  the same image pushed by `docker push` to a second, empty registry: the push of
#                today's path (the daemon compresses every layer with gzip)
#   round 2      every image of round 1 removed from the daemon (no layer cache), the registry
#                emptied, the manifest and .imagegen/ deleted, the same inputs built and pushed
#                again, minutes later
# and prints both digests (they must match: same inputs, same digest), each phase as the build log
# states it, and the ratio of the normalized push (normalize + push) to `docker push`. Needs the
# Docker daemon, network to PyPI and Debian, root for debootstrap when the base is missing,
# Debian's docker-registry and `bash .ci/install-deps.sh` (uv). Holds /work/.locks/realbuild when
# that exists (one real build at a time on a shared machine). About 20 minutes on 2 cores.
#
#   cargo build && bash bench/real_push_rebuild.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=rebuild
# shellcheck source=bench/lib.sh
. bench/lib.sh
run_repositories+=("today-$$")

# The project: the real-build matrix without the team's additions, runtime only, wheels: index.
start_registry round1
registry=$started
make_project "$registry" "$repository"
printf 'wheels: index\n' >> "$project/matrix.yaml"
cd "$project"
export DOCKER_CONFIG=$project/docker-config CI=true
lock_project

# One timed build --push of round $1 to $registry: prints the seconds; the JSON report and the log
# are kept under $work.
build_push() {
  local start
  start=$(now)
  if ! "$bin" build --selftest-dir selftest --no-test --push --format json > "$work/report-$1.json" 2> "$work/build-$1.log"; then
    cat "$work/build-$1.log" >&2; exit 1
  fi
  since "$start"
}
digest_of() { jq -r '.images[0].digest' "$work/report-$1.json"; }
phases_of() { grep -E '== (exported|normalized|pushed) ' "$work/build-$1.log" | sed 's/^/    /' || true; }
# The seconds of the log's first line of round $1 holding $2 ("exported", "normalized", "== pushed").
seconds_of() { grep -m1 -F "$2 " "$work/build-$1.log" | grep -o 'in [0-9.]* s (' | grep -o '[0-9.]*' | head -1; }

cleanup
round1=$(build_push 1)
digest1=$(digest_of 1)
name=$(jq -r '.images[0].name' "$work/report-1.json")
reference=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -m1 -F "/$repository:$name") || { echo "no image tagged $repository:$name after round 1" >&2; exit 1; }

# Today's push: the same image through docker push, to a registry that has none of its blobs.
start_registry today
today=$started
docker tag "$reference" "$today/today-$$:$name"
start=$(now)
docker push "$today/today-$$:$name" > "$work/docker-push.log" 2>&1 || { cat "$work/docker-push.log" >&2; exit 1; }
docker_push=$(since "$start")
docker_push_bytes=$(du -sb "$work/today-storage" | cut -f1)
normalized_push_bytes=$(du -sb "$work/round1-storage" | cut -f1)

# Round 2: nothing of round 1 left but the inputs (matrix, images/ with its lock, the base).
stop_registries
cleanup
rm -rf imagegen-manifest.json .imagegen
start_registry round1 "${registry#127.0.0.1:}"
sleep 60 # a minute apart at least, so no clock can line the two rounds up
round2=$(build_push 2)
digest2=$(digest_of 2)

export1=$(seconds_of 1 exported)
normalize1=$(seconds_of 1 normalized)
push1=$(seconds_of 1 '== pushed')

printf 'real runtime image %s (torch 2.13.0, PyPI, trixie), %s cores, %s\n' "$name" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'round 1, build --push --no-test:        %7.1f s   digest %s\n' "$round1" "$digest1"
phases_of 1
printf 'round 2, same inputs, clean daemon:     %7.1f s   digest %s\n' "$round2" "$digest2"
phases_of 2
printf 'docker push of the same image:          %7.1f s   registry holds %s MB (the normalized push: %s MB)\n' \
  "$docker_push" "$((docker_push_bytes / 1000000))" "$((normalized_push_bytes / 1000000))"
if [ -n "$export1" ] && [ -n "$normalize1" ] && [ -n "$push1" ]; then
  # The export streams into the normalizing (one pass): both times run from the same start, and
  # the normalizing ends last, so its time is the two together.
  total=$(echo "$normalize1 + $push1" | bc)
  printf 'export+normalize (one pass) + push (1): %7.1f s   (%s, the export alone %s, + %s) ratio to docker push %.2f\n' \
    "$total" "$normalize1" "$export1" "$push1" "$(echo "$total / $docker_push" | bc -l)"
else
  echo "the round-1 log did not state its export, normalize and push times: $work/build-1.log" >&2
  exit 1
fi
if [ "$digest1" = "$digest2" ]; then
  echo "same inputs, same digest: yes"
else
  echo "same inputs, same digest: NO ($digest1 against $digest2)"
  exit 1
fi
