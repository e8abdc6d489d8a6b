#!/usr/bin/env bash
# `imagegen verify` over N recorded full tags (default 50000) against a local docker-registry,
# one HEAD at a time (--concurrency 1: how verify asked before issue 19) and with the default
# concurrency (16), in one invocation; prints the wall times and their ratio.
#
#   bash bench/verify_50k.sh [N]        (needs /usr/bin/docker-registry and python3; builds
#                                        target/release/imagegen if it is missing)
set -euo pipefail
count="${1:-50000}"
root="$(cd "$(dirname "$0")/.." && pwd)"
binary="$root/target/release/imagegen"
[ -x "$binary" ] || (cd "$root" && cargo build --release --locked --bin imagegen)
work="$(mktemp -d)"
registry_pid=""
cleanup() {
    [ -n "$registry_pid" ] && kill "$registry_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/config.yml" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/storage
http:
  addr: 127.0.0.1:$port
log:
  level: error
YAML
/usr/bin/docker-registry serve "$work/config.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v2/')" 2>/dev/null && break
    sleep 0.1
done

# One image (a config blob, no layers) under N tags, and a manifest recording each tag with its
# digest: what a large, long-lived manifest looks like to verify.
python3 - "$port" "$count" "$work/imagegen-manifest.json" <<'PY'
import hashlib, http.client, json, sys
port, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
repo = "bench/verify"
connection = http.client.HTTPConnection("127.0.0.1", port)
def call(method, path, body=b"", headers=None):
    connection.request(method, path, body=body, headers=headers or {})
    answer = connection.getresponse()
    answer.read()
    assert answer.status < 300, (method, path, answer.status)
    return answer
config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}, "config": {}}).encode()
config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
location = call("POST", f"/v2/{repo}/blobs/uploads/").getheader("Location")
location = location.split(f"127.0.0.1:{port}")[-1]
call("PUT", f"{location}{'&' if '?' in location else '?'}digest={config_digest}", config, {"Content-Type": "application/octet-stream"})
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config)},
    "layers": []}).encode()
digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
images = {}
for i in range(count):
    tag = f"2.7.{i}-cuda12.6-cudnn9-runtime-ubuntu24.04"
    call("PUT", f"/v2/{repo}/manifests/{tag}", manifest, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    images[tag] = {
        "repository": f"127.0.0.1:{port}/{repo}", "tag": tag, "aliases": [], "digest": digest,
        "fingerprint": digest, "build_key": digest, "variant": "runtime", "torch": f"2.7.{i}",
        "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9.5.1.17",
        "python": "3.12", "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
        "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6", "built_at": "2026-12-01T00:00:00Z",
        "status": "ok"}
with open(out, "w") as f:
    json.dump({"schema_version": 1, "images": images, "aliases": {}}, f)
PY

measure() {
    local start end code
    start=$(date +%s.%N)
    set +e
    (cd "$work" && DOCKER_CONFIG="$work" "$binary" verify --format json "$@" >"$work/out.json")
    code=$?
    set -e
    end=$(date +%s.%N)
    [ "$code" = 0 ] || { echo "verify exited $code" >&2; exit 1; }
    python3 -c "import json,sys; r=json.load(open('$work/out.json')); assert r['checked']==$count and r['drift']==0, (r['checked'], r['drift'])"
    python3 -c "print(f'{$end-$start:.2f}')"
}
echo "{}" > "$work/config.json"
sequential=$(measure --concurrency 1)
concurrent=$(measure)
echo "records: $count (one local docker-registry, $(nproc) cores)"
echo "verify --concurrency 1 (one HEAD at a time, as before): ${sequential} s"
echo "verify (default --concurrency 16):                      ${concurrent} s"
python3 -c "print(f'ratio (default / one at a time): {$concurrent/$sequential:.2f}')"
