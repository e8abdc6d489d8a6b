#!/usr/bin/env bash
# Benchmark: the real runtime image (torch 2.13.0 from PyPI on the debootstrapped Debian trixie
# base, as tests/it/real_build.rs builds it, without the team's additions) built by today's path
# (`wheels: index`: pip inside the build downloads the lock, the templates of main) and by the
# host-side wheel cache (`wheels: cache`: fetched on the host, installed in a venv stage with no
# index, the venv copied), in one run, with `imagegen build --no-test`:
#   cold         no layer cache, empty wheel cache
#   label change the layers of the run before kept, a matrix label changed (what a CI run that
#                keeps its daemon does)
#   fresh daemon no layer cache, the wheel cache kept (a CI job with a fresh daemon and a kept
#                cache); today's path has no host cache, so its figure is the cold one
# and the floor beside them: the time to download the lock's files (the cold fetch phase) and to
# compress the image's venv once (tar | gzip -1, and pigz -1 on every core when installed).
# Push time is not measured here (see the push benchmark); the figures are printed so push
# figures can be added to them. Needs the Docker daemon, network to PyPI and Debian, root for
# debootstrap when the base is missing, and `bash .ci/install-deps.sh` (uv). Holds
# /work/.locks/realbuild when that exists (one real build at a time on a shared machine).
#
#   bash bench/wheel_cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bench=wheels
# shellcheck source=bench/lib.sh
. bench/lib.sh

# The project: the real-build matrix without the team's additions, runtime only.
make_project registry.invalid "$repository"
printf 'wheels: WHEELS\nlabels: {imagegen-bench.round: "1"}\n' >> "$project/matrix.yaml"
cd "$project"
export DOCKER_CONFIG=$project/docker-config CI=true IMAGEGEN_WHEEL_CACHE=$work/wheel-cache
sed -i 's/WHEELS/index/' matrix.yaml
lock_project

# One timed build with the matrix's wheels set to $1 and its label round to $2.
build() {
  sed -i -E "s/^wheels: .*/wheels: $1/" matrix.yaml
  set_round "$2"
  "$bin" render >/dev/null 2>&1
  local start; start=$(now)
  if ! "$bin" build --selftest-dir selftest --no-test > "$work/build-$1-$2.log" 2>&1; then
    cat "$work/build-$1-$2.log" >&2; exit 1
  fi
  since "$start"
}

cleanup
rm -rf "$IMAGEGEN_WHEEL_CACHE"
cache_cold=$(build cache 1)
fetch=$(grep -o 'ready in [0-9.]* s' "$work/build-cache-1.log" | grep -o '[0-9.]*' | head -1)
fetched=$(grep -o 'ready in .*' "$work/build-cache-1.log" | head -1)
cache_label=$(build cache 2)
cleanup
cache_fresh=$(build cache 3)
fresh_fetch=$(grep -o 'ready in [0-9.]* s' "$work/build-cache-3.log" | grep -o '[0-9.]*' | head -1)
cleanup
index_cold=$(build index 4)
index_label=$(build index 5)

# The floor's second part: the venv of the image, compressed once.
image=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep "^registry.invalid/$repository:" | head -1)
venv_bytes=$(docker run --rm --entrypoint du "$image" -sb /opt/venv | cut -f1)
start=$(now); docker run --rm --entrypoint tar "$image" -C /opt -cf - venv | cat > /dev/null; tar_only=$(since "$start")
start=$(now); gzip_bytes=$(docker run --rm --entrypoint tar "$image" -C /opt -cf - venv | gzip -1 | wc -c); gzip1=$(since "$start")
pigz1=""
if command -v pigz >/dev/null; then
  start=$(now); docker run --rm --entrypoint tar "$image" -C /opt -cf - venv | pigz -1 -p "$(nproc)" > /dev/null; pigz1=$(since "$start")
fi
cleanup

printf 'real runtime image (torch 2.13.0, PyPI, trixie), imagegen build --no-test, %s cores, %s\n' "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'today (wheels: index), cold:              %6.1f s\n' "$index_cold"
printf 'today (wheels: index), label change:      %6.1f s\n' "$index_label"
printf 'cache (wheels: cache), cold:              %6.1f s   ratio to today cold %.2f   (fetch phase %s s: %s)\n' "$cache_cold" "$(echo "$cache_cold / $index_cold" | bc -l)" "$fetch" "$fetched"
printf 'cache (wheels: cache), label change:      %6.1f s   ratio to today label change %.2f\n' "$cache_label" "$(echo "$cache_label / $index_label" | bc -l)"
printf 'cache kept, fresh daemon (CI):            %6.1f s   ratio to today cold %.2f   (cache check %s s)\n' "$cache_fresh" "$(echo "$cache_fresh / $index_cold" | bc -l)" "$fresh_fetch"
printf 'floor: download the lock (cold fetch):    %6.1f s\n' "$fetch"
printf 'floor: venv %s MB, tar alone:            %6.1f s\n' "$((venv_bytes / 1000000))" "$tar_only"
printf 'floor: venv tar | gzip -1 (one core):     %6.1f s   -> %s MB\n' "$gzip1" "$((gzip_bytes / 1000000))"
[ -n "$pigz1" ] && printf 'floor: venv tar | pigz -1 -p %s:          %6.1f s\n' "$(nproc)" "$pigz1"
printf 'push: not measured here; add the push figures of the same image to compare build + push\n'
