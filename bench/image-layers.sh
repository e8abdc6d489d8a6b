#!/usr/bin/env bash
# The size of a local image, layer by layer: the bytes each layer adds unpacked (as `docker save`
# stores it) and gzip -6 compressed (about what a registry stores and a pull downloads), beside the
# step that made it. Usage: bash bench/image-layers.sh IMAGE
# It unpacks `docker save` into a temporary folder (as large as the image) and removes it afterwards.
set -euo pipefail
image=${1:?usage: bash bench/image-layers.sh IMAGE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS
mkdir "$work/x"
docker save "$image" | tar -x -C "$work/x"
echo "docker save: $((SECONDS - started)) s"
python3 - "$work/x" <<'PY'
import json, os, sys, time, zlib
root = sys.argv[1]
manifest = json.load(open(os.path.join(root, "manifest.json")))[0]
config = json.load(open(os.path.join(root, manifest["Config"])))
steps = [h.get("created_by", "(imported base)") for h in config["history"] if not h.get("empty_layer")]
total_raw = total_gz = 0
started = time.time()
print(f"{'unpacked MB':>12} {'gzip MB':>9}  step")
for layer, step in zip(manifest["Layers"], steps):
    path = os.path.join(root, layer)
    raw = os.path.getsize(path)
    compressor, gz = zlib.compressobj(6, zlib.DEFLATED, 31), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            gz += len(compressor.compress(block))
    gz += len(compressor.flush())
    total_raw += raw
    total_gz += gz
    step = " ".join(step.replace("/bin/bash -o pipefail -c", "").split())
    print(f"{raw / 1e6:12.1f} {gz / 1e6:9.1f}  {step[:110]}")
print(f"{total_raw / 1e6:12.1f} {total_gz / 1e6:9.1f}  total ({time.time() - started:.0f} s to compress)")
PY
