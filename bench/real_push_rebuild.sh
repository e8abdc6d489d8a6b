#!/usr/bin/env bash
# Benchmark (issue 21): the real runtime image (torch 2.13.0 from PyPI on the debootstrapped Debian
# bookworm base, as tests/it/real_build.rs builds it, without the team's additions; `wheels:
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
root=$PWD
base=imagegen-test/bookworm-minbase:1
if [ -z "${IMAGEGEN_BENCH_LOCKED:-}" ] && [ -d /work/.locks ]; then
  exec env IMAGEGEN_BENCH_LOCKED=1 flock /work/.locks/realbuild bash "$0" "$@"
fi
bin=${IMAGEGEN_BIN:-$root/target/debug/imagegen}
[ -x "$bin" ] || { echo "build imagegen first (cargo build), or set IMAGEGEN_BIN" >&2; exit 2; }
uv=$root/.ci/venv/bin/uv
work=$(mktemp -d)
repository=imagegen-bench/rebuild-$$
before=$work/images-before
registry_pids=()
now() { date +%s.%N; }

# A registry on 127.0.0.1 with its own storage (on port $2 when given); its address goes into
# $started (not printed: a command substitution would lose the pid).
start_registry() {
  local name=$1 port=${2:-}
  [ -n "$port" ] || port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -rf "$work/$name-storage"
  printf 'version: 0.1\nlog:\n  accesslog:\n    disabled: true\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
    "$work/$name-storage" "$port" > "$work/$name.yml"
  docker-registry serve "$work/$name.yml" > "$work/$name.log" 2>&1 &
  registry_pids+=($!)
  for _ in $(seq 50); do
    curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && { started="127.0.0.1:$port"; return; }
    sleep 0.1
  done
  echo "registry $name did not start: $(cat "$work/$name.log")" >&2
  exit 1
}
stop_registries() {
  local pid
  for pid in "${registry_pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  registry_pids=()
}

# The base, as the real-build test makes it (kept: it is shared with that test).
if ! docker image inspect "$base" >/dev/null 2>&1; then
  rootfs=$work/rootfs
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$rootfs/etc/apt/sources.list.d/debian.sources"
  rm -rf "$rootfs/etc/apt/sources.list" "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/*
  tar --numeric-owner -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$rootfs"
fi
base_id=$(docker image inspect --format '{{.Id}}' "$base")
docker images -a -q --no-trunc | sort -u > "$before"

# Every image this run made: its tags, then every image not there before with the base among its
# ancestors, and the normalized images (loaded, so without a parent) named by this run's tags.
cleanup() {
  docker images --format '{{.Repository}}:{{.Tag}}' | { grep -e "/$repository:" -e "/today-$$:" || true; } | xargs -r docker rmi -f >/dev/null 2>&1 || true
  local id cursor
  for _ in 1 2 3; do
    for id in $(docker images -a -q --no-trunc | sort -u | comm -13 "$before" -); do
      cursor=$id
      while [ -n "$cursor" ] && [ "$cursor" != "$base_id" ]; do
        cursor=$(docker image inspect --format '{{.Parent}}' "$cursor" 2>/dev/null || true)
      done
      if [ "$cursor" = "$base_id" ]; then docker rmi -f "$id" >/dev/null 2>&1 || true; fi
    done
  done
}
trap 'stop_registries; cleanup; rm -rf "$work"' EXIT

# The project: the real-build matrix without the team's additions, runtime only, wheels: index.
project=$work/project
mkdir -p "$project/selftest" "$project/docker-config"
echo '{}' > "$project/docker-config/config.json"
cp /etc/ssl/certs/ca-certificates.crt "$project/host-ca.pem"
printf '#!/bin/sh\nexit 0\n' > "$project/selftest/gpu-selftest-cu13"
chmod +x "$project/selftest/gpu-selftest-cu13"
start_registry round1
registry=$started
sed -e "s#REPOSITORY#$repository#" -e "s#BASE_IMAGE#$base#" -e "s#REGISTRY#$registry#" \
  -e 's/variants: \[runtime, devel\]/variants: [runtime]/' \
  "$root/tests/fixtures/real-build/matrix.yaml" | sed -n '/^# The team/q;p' > "$project/matrix.yaml"
printf 'wheels: index\n' >> "$project/matrix.yaml"
cd "$project"
export DOCKER_CONFIG=$project/docker-config CI=true
"$bin" lock --uv "$uv" >/dev/null 2>&1 || { "$bin" lock --uv "$uv"; exit 2; }

# One timed build --push of round $1 to $registry: prints the seconds; the JSON report and the log
# are kept under $work.
build_push() {
  local start
  start=$(now)
  if ! "$bin" build --selftest-dir selftest --no-test --push --format json > "$work/report-$1.json" 2> "$work/build-$1.log"; then
    cat "$work/build-$1.log" >&2; exit 1
  fi
  echo "$(now) - $start" | bc
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
docker_push=$(echo "$(now) - $start" | bc)
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

printf 'real runtime image %s (torch 2.13.0, PyPI, bookworm), %s cores, %s\n' "$name" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'round 1, build --push --no-test:        %7.1f s   digest %s\n' "$round1" "$digest1"
phases_of 1
printf 'round 2, same inputs, clean daemon:     %7.1f s   digest %s\n' "$round2" "$digest2"
phases_of 2
printf 'docker push of the same image:          %7.1f s   registry holds %s MB (the normalized push: %s MB)\n' \
  "$docker_push" "$((docker_push_bytes / 1000000))" "$((normalized_push_bytes / 1000000))"
if [ -n "$export1" ] && [ -n "$normalize1" ] && [ -n "$push1" ]; then
  total=$(echo "$export1 + $normalize1 + $push1" | bc)
  printf 'export + normalize + push (round 1):    %7.1f s   (%s + %s + %s) ratio to docker push %.2f\n' \
    "$total" "$export1" "$normalize1" "$push1" "$(echo "$total / $docker_push" | bc -l)"
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
