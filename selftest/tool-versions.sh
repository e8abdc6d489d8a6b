# shellcheck shell=bash
# The versions of the tools selftest/build.sh installs under target/tools/ (and .ci/install-deps.sh,
# for cargo-auditable), checked together (shared/reference/crates.md §4). Sourced, not run.
# shellcheck disable=SC2034 # read by the scripts that source this file
ziglang_version="0.17.1"
# shellcheck disable=SC2034
zigbuild_version="0.24.1"
# cargo-auditable 0.7.3 and later wraps cargo-zigbuild (`cargo auditable zigbuild`).
# shellcheck disable=SC2034
auditable_version="0.7.7"
