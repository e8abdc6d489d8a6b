#!/usr/bin/env bash
# Benchmark (issue 48): what a rolling upgrade costs a node and the registry, with the venv's
# layers cut along the wheels (this imagegen, `venv_layers: wheels`) against today's single venv
# layer (the imagegen of $BASE_BIN, built from the commit before issue 48: dd36926), in one run,
# on the real torch 2.13.0 runtime image (`wheels: host`, torch from PyPI, the debootstrapped
# Debian bookworm base, as tests/it/real_build.rs built it before the move to trixie, which the
# imagegen before issue 48 does not know, without the team's additions):
#   A  the image, with einops 0.8.0, built and pushed to an empty registry (one per cut)
#   B  one extra package bumped: einops 0.8.1 (locked again), built and pushed
#   C  B on a rebuilt base: the base with one file changed (/etc/issue; `docker commit`), pushed
# Then, per cut, this daemon is the node: it pulls A, then B, then C (`docker pull` by digest),
# and what each pull downloads is counted from its own output (the layers it says `Pull complete`
# for, sized from the registry's manifest): (a) B on a node holding A, (b) C on a node holding B.
# (c) The registry's blob bytes (`du` of its storage) against the sum of the three images' sizes.
# (d) Each build --push's time, the two cuts' builds interleaved (A one, A wheels, B one, …) so
# that the machine's other load falls on both. For the cut along the wheels it also prints
# `imagegen plan`'s estimate before B and C and `imagegen diff`'s computed pull after, beside the
# measured one. Needs what bench/real_push_rebuild.sh needs, jq, network to PyPI, and 30 GiB free
# on the Docker daemon's disk (checked first). About 45 minutes on 2 cores.
#
#   cargo build --release
#   git worktree add /tmp/before dd36926 && (cd /tmp/before && cargo build --release)
#   BASE_BIN=/tmp/before/target/release/imagegen bash bench/upgrade_pull.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=upgrade-pull
IMAGEGEN_BIN=${IMAGEGEN_BIN:-$PWD/target/release/imagegen}
# On bookworm: the imagegen before issue 48 knows no Debian 13.
export BENCH_SUITE=bookworm
base_bin=${BASE_BIN:?set BASE_BIN to an imagegen built from dd36926, the commit before issue 48}
[ -x "$base_bin" ] || { echo "BASE_BIN=$base_bin is not an executable" >&2; exit 2; }
free=$(df --output=avail -B1G "$(docker info --format '{{.DockerRootDir}}')" | tail -1 | tr -d ' ')
[ "$free" -ge 30 ] || { echo "upgrade_pull.sh: ${free} GiB free on the Docker daemon's disk, 30 GiB needed" >&2; exit 2; }
# shellcheck source=bench/lib.sh
. bench/lib.sh
export IMAGEGEN_WHEEL_CACHE=$work/wheel-cache CI=true
changed_base=imagegen-test/bookworm-minbase-changed:$$
cuts=(one wheels)
declare -A registry binary dir repo seconds digest
binary[one]=$base_bin
binary[wheels]=$bin

# The base with one file changed, as a base rebuilt for a security fix would be.
docker rm -f "imagegen-bench-base-$$" >/dev/null 2>&1 || true
docker run --name "imagegen-bench-base-$$" "$base" sh -c 'echo "rebuilt $(date -u +%F)" >> /etc/issue' >/dev/null
docker commit "imagegen-bench-base-$$" "$changed_base" >/dev/null
docker rm "imagegen-bench-base-$$" >/dev/null
run_repositories+=("${changed_base%%:*}")

for cut in "${cuts[@]}"; do
  start_registry "cut-$cut"
  registry[$cut]=$started
  repo[$cut]=$repository-$cut
  run_repositories+=("${repo[$cut]}")
  make_project "${registry[$cut]}" "${repo[$cut]}"
  mv "$project" "$work/project-$cut"
  dir[$cut]=$work/project-$cut
  (
    cd "${dir[$cut]}"
    sed -i 's/^  latest: false$/&\n  full: "{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}-r{revision}"/' matrix.yaml
    printf 'pip: ["einops==0.8.0"]\n' >> matrix.yaml
    [ "$cut" = one ] || printf 'venv_layers: wheels\n' >> matrix.yaml
    "${binary[$cut]}" lock --uv "$uv" > "$work/lock-$cut.log" 2>&1 || { cat "$work/lock-$cut.log" >&2; exit 2; }
  )
done

# build --push of round $2 with cut $1: its seconds and digest.
build_push() {
  local cut=$1 round=$2 start
  cd "${dir[$cut]}"
  export DOCKER_CONFIG=${dir[$cut]}/docker-config
  start=$(now)
  # Aliases move without a GPU test for the plan's figures, with this imagegen only: the one
  # before issue 48 fails an image pushed from memory after moving its alias (a daemon tag of
  # an image the daemon does not hold; fixed with issue 48).
  local moving=()
  [ "$cut" = one ] || moving=(--move-untested-aliases)
  if ! "${binary[$cut]}" build --selftest-dir selftest --no-test "${moving[@]}" --push --format json > "$work/report-$cut-$round.json" 2> "$work/build-$cut-$round.log"; then
    cat "$work/build-$cut-$round.log" >&2; exit 1
  fi
  seconds[$cut-$round]=$(since "$start")
  digest[$cut-$round]=$(jq -r '.images[0].digest' "$work/report-$cut-$round.json")
  cd "$root"
}

# imagegen plan's line for the runtime alias, for the cut along the wheels, before round $1.
plan_estimate() {
  (cd "${dir[wheels]}" && "${binary[wheels]}" plan --move-untested-aliases 2>/dev/null | sed -n '/^what a node running/,/^$/p' | sed "s/^/    plan before $1: /")
}

for round in A B C; do
  for cut in "${cuts[@]}"; do
    case $round in
      B) (cd "${dir[$cut]}" && sed -i 's/einops==0.8.0/einops==0.8.1/' matrix.yaml &&
           "${binary[$cut]}" lock --uv "$uv" > "$work/lock-$cut-B.log" 2>&1) || { cat "$work/lock-$cut-B.log" >&2; exit 2; } ;;
      C)
        sed -i "s#$base#$changed_base#" "${dir[$cut]}/matrix.yaml"
        if ! (cd "${dir[$cut]}" && "${binary[$cut]}" lock --bases > "$work/render-$cut-C.log" 2>&1); then
          cat "$work/render-$cut-C.log" >&2; exit 2
        fi ;;
    esac
    if [ "$cut" = wheels ] && [ "$round" != A ]; then plan_estimate "$round"; fi
    build_push "$cut" "$round"
    echo "  build --push $round, cut $cut: ${seconds[$cut-$round]} s, ${digest[$cut-$round]}"
  done
done

# What `docker pull` of $2 (a digest) from cut $1's registry downloads: "bytes layers-pulled
# layers seconds", from its output and the registry's manifest.
pull() {
  local cut=$1 image_digest=$2 start log=$work/pull.log manifest=$work/manifest.json
  curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
    "http://${registry[$cut]}/v2/${repo[$cut]}/manifests/$image_digest" > "$manifest"
  start=$(now)
  docker pull "${registry[$cut]}/${repo[$cut]}@$image_digest" > "$log"
  local took
  took=$(since "$start")
  python3 - "$manifest" "$log" "$took" <<'PYTHON'
import json, re, sys
layers = json.load(open(sys.argv[1]))["layers"]
size = {layer["digest"].split(":")[1][:12]: layer["size"] for layer in layers}
pulled = set()
for line in open(sys.argv[2]):
    match = re.match(r"([0-9a-f]{12}): (Pull complete|Download complete)", line.strip())
    if match:
        pulled.add(match.group(1))
unknown = pulled - size.keys()
if unknown:
    sys.exit(f"docker pull named layers the manifest does not hold: {unknown}")
print(sum(size[layer] for layer in pulled), len(pulled), len(layers), round(float(sys.argv[3]), 1))
PYTHON
}

# The compressed size of image $2 (a digest) in cut $1's registry: its layers and config.
size_of() {
  curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
    "http://${registry[$1]}/v2/${repo[$1]}/manifests/$2" | jq '[.layers[].size] | add + 0'
}

declare -A pulled
for cut in "${cuts[@]}"; do
  read -r bytes layers total took < <(pull "$cut" "${digest[$cut-A]}")
  echo "  cut $cut: node pulls A (nothing held): $bytes bytes, $layers of $total layers, $took s"
  for pair in A:B B:C; do
    held=${pair%%:*} new=${pair##*:}
    read -r bytes layers total took < <(pull "$cut" "${digest[$cut-$new]}")
    image=$(size_of "$cut" "${digest[$cut-$new]}")
    pulled[$cut-$new]=$bytes
    echo "  cut $cut: node holding $held pulls $new: $bytes of $image bytes ($(echo "scale=2; 100 * $bytes / $image" | bc)%), $layers of $total layers, $took s"
    if [ "$cut" = wheels ]; then
      (cd "${dir[$cut]}" && "${binary[$cut]}" diff "${digest[$cut-$held]}" "${digest[$cut-$new]}" | grep -E '^(pull|registry):' | sed "s/^/    imagegen diff $held $new: /")
    fi
  done
  for round in A B C; do
    docker rmi "${registry[$cut]}/${repo[$cut]}@${digest[$cut-$round]}" >/dev/null 2>&1 || true
  done
  docker image prune -f >/dev/null 2>&1 || true
  blobs=$(du -sb "$work/cut-$cut-storage/docker/registry/v2/blobs" | cut -f1)
  sum=0
  for round in A B C; do sum=$((sum + $(size_of "$cut" "${digest[$cut-$round]}"))); done
  echo "  cut $cut: registry holds $blobs bytes of blobs for images of $sum bytes together ($(echo "scale=3; $blobs / $sum" | bc))"
done

echo
echo "ratios, along the wheels / one layer (same run):"
for round in A B C; do
  echo "  build --push $round: ${seconds[wheels-$round]:-?} s / ${seconds[one-$round]:-?} s"
done
for round in B C; do
  echo "  pull $round: ${pulled[wheels-$round]} / ${pulled[one-$round]} bytes = $(echo "scale=4; ${pulled[wheels-$round]} / ${pulled[one-$round]}" | bc)"
done
