# shellcheck shell=bash
# Shared by the real-build benchmarks (real_push_rebuild.sh, wheel_cache.sh, warm_label.sh):
# sourced from the repository root, after `set -euo pipefail` and `bench=NAME`. It takes
# /work/.locks/realbuild when that exists (one real build at a time on a shared machine: the
# script runs again under flock), checks the imagegen binary, makes the base (make_base) and sets
#   root, base, bin, uv, work (removed on exit, with every registry started and every image the
#   run made), repository (imagegen-bench/NAME-PID), run_repositories (the repositories whose
#   tags the run makes, on any registry: the script adds its others) and the functions below.
root=$PWD
# The Debian suite of the base (BENCH_SUITE: trixie, or bookworm for a comparison with an imagegen
# older than Debian 13 in the knowledge) and the matrix's os for it.
suite=${BENCH_SUITE:-trixie}
case $suite in
  trixie) bench_os=debian13 ;;
  bookworm) bench_os=debian12 ;;
  *) echo "BENCH_SUITE=$suite: trixie or bookworm" >&2; exit 2 ;;
esac
base=imagegen-test/$suite-minbase:1
if [ -z "${IMAGEGEN_BENCH_LOCKED:-}" ] && [ -d /work/.locks ]; then
  exec env IMAGEGEN_BENCH_LOCKED=1 flock /work/.locks/realbuild bash "$0" "$@"
fi
bin=${IMAGEGEN_BIN:-$root/target/debug/imagegen}
[ -x "$bin" ] || { echo "build imagegen first (cargo build), or set IMAGEGEN_BIN" >&2; exit 2; }
uv=$root/.ci/venv/bin/uv
work=$(mktemp -d)
before=$work/images-before
registry_pids=()
repository=imagegen-bench/${bench:?set bench=NAME before sourcing bench/lib.sh}-$$
run_repositories=("$repository")
trap 'stop_registries; [ ! -f "$before" ] || cleanup; rm -rf "$work"' EXIT
now() { date +%s.%N; }
# The seconds since $1 (a `now`).
since() { echo "$(now) - $1" | bc; }

# The base, as the real-build test makes it (kept: it is shared with that test); then base_id and
# the daemon's images before the run (in $before), which cleanup leaves alone.
make_base() {
  if ! docker image inspect "$base" >/dev/null 2>&1; then
    local rootfs=$work/rootfs
    debootstrap --variant=minbase "$suite" "$rootfs" http://deb.debian.org/debian >/dev/null
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$suite" "$suite" "$suite" > "$rootfs/etc/apt/sources.list.d/debian.sources"
    rm -rf "$rootfs/etc/apt/sources.list" "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/*
    tar --numeric-owner -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$base" >/dev/null
    rm -rf "$rootfs"
  fi
  base_id=$(docker image inspect --format '{{.Id}}' "$base")
  docker images -a -q --no-trunc | sort -u > "$before"
}

# Every image this run made: the tags of run_repositories (on any registry), the images titled
# after one of them (the normalized images, loaded without a parent, whose tag a later load of the
# same tag took), then every image not there before with the base among its ancestors (the layer
# cache of the builds).
cleanup() {
  local patterns=() repository id cursor
  for repository in "${run_repositories[@]}"; do
    patterns+=(-e "/$repository:")
    docker images -a -q --no-trunc --filter "label=org.opencontainers.image.title=${repository##*/}" | sort -u | xargs -r docker rmi -f >/dev/null 2>&1 || true
  done
  if [ ${#patterns[@]} -gt 0 ]; then
    docker images --format '{{.Repository}}:{{.Tag}}' | { grep "${patterns[@]}" || true; } | xargs -r docker rmi -f >/dev/null 2>&1 || true
  fi
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

# A registry on 127.0.0.1 with its own storage ($work/$1-storage; on port $2 when given); its
# address goes into $started (not printed: a command substitution would lose the pid).
start_registry() {
  local name=$1 port=${2:-}
  [ -n "$port" ] || port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -rf "$work/$name-storage"
  printf 'version: 0.1\nlog:\n  accesslog:\n    disabled: true\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
    "$work/$name-storage" "$port" > "$work/$name.yml"
  docker-registry serve "$work/$name.yml" > "$work/$name.log" 2>&1 &
  registry_pids+=($!)
  for _ in $(seq 50); do
    # shellcheck disable=SC2034 # read by the scripts
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

# The project in $project ($work/project): the real-build matrix without the team's additions,
# runtime only, its registry $1, the repository $2; a self-test that passes, an empty Docker
# config and the host's CA bundle. The caller appends its own keys to matrix.yaml.
make_project() {
  project=$work/project
  mkdir -p "$project/selftest" "$project/docker-config"
  echo '{}' > "$project/docker-config/config.json"
  cp /etc/ssl/certs/ca-certificates.crt "$project/host-ca.pem"
  printf '#!/bin/sh\nexit 0\n' > "$project/selftest/gpu-selftest-cu13"
  chmod +x "$project/selftest/gpu-selftest-cu13"
  sed -e "s#REPOSITORY#$2#" -e "s#BASE_IMAGE#$base#" -e "s#REGISTRY#$1#" \
    -e 's/variants: \[runtime, devel\]/variants: [runtime]/' -e "s/debian13/$bench_os/g" \
    "$root/tests/fixtures/real-build/matrix.yaml" | sed -n '/^# The team/q;p' > "$project/matrix.yaml"
}

# In the project: `imagegen lock` (its output shown only when it fails).
lock_project() {
  "$bin" lock --uv "$uv" >/dev/null 2>&1 || { "$bin" lock --uv "$uv"; exit 2; }
}

# Today's registry (its address in $today) and imagegen's, and in it the project ($project) with
# `wheels: $1`, the label imagegen-bench.round "1" and full tags `…-r{revision}` (full tags are
# immutable: a label change gets the next revision; the folder in images/ and the image name stay
# the same); locked, $name its image. Leaves the shell in the project, with its Docker config, in
# CI mode.
two_registries_and_a_project() {
  start_registry today
  # shellcheck disable=SC2034 # read by the scripts
  today=$started
  start_registry imagegen
  make_project "$started" "$repository"
  printf 'wheels: %s\nlabels: {imagegen-bench.round: "1"}\n' "$1" >> "$project/matrix.yaml"
  sed -i 's/^  latest: false$/&\n  full: "{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}-r{revision}"/' "$project/matrix.yaml"
  cd "$project" || exit 1
  export DOCKER_CONFIG=$project/docker-config CI=true
  lock_project
  name=$("$bin" resolve --format json | jq -r '.images[0].name')
}

# Sets the label imagegen-bench.round of the project's matrix.yaml to $1.
set_round() {
  sed -i -E "s/imagegen-bench.round: \"[0-9]+\"/imagegen-bench.round: \"$1\"/" matrix.yaml
}

make_base
