#!/usr/bin/env bash
# Lints the files CI hands to other tools: every workflow with actionlint (which runs shellcheck on
# their `run:` scripts, and fails on an action whose runtime GitHub deprecated or a runner label
# .github/actionlint.yaml does not declare), every generated Dockerfile with hadolint (rules
# ignored in .hadolint.yaml), and CI's own scripts with shellcheck. Needs `bash .ci/install-deps.sh`
# first: a missing linter is an error, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned linters of .ci/install-deps.sh come before any other copy on PATH.
PATH="$PWD/.ci/venv/bin:$PATH"
for tool in actionlint shellcheck hadolint; do
    if ! command -v "$tool" >/dev/null; then
        echo "error: $tool not found" >&2
        echo "hint: bash .ci/install-deps.sh installs it" >&2
        exit 1
    fi
done

# No nullglob: with no workflow or no Dockerfile the pattern itself reaches the linter, which fails.
workflows=(.github/workflows/*.yml)
dockerfiles=(images/*/Dockerfile)

# What else is on PATH cannot change the result: the config by its path (actionlint looks for it
# beside .git, which a copy without it lacks), the checker of `run:` scripts found above, and
# pyflakes off (no workflow has a python step).
actionlint -config-file .github/actionlint.yaml -shellcheck="$(command -v shellcheck)" -pyflakes= "${workflows[@]}"
echo "actionlint: ${#workflows[@]} workflows clean"
hadolint "${dockerfiles[@]}"
echo "hadolint: ${#dockerfiles[@]} Dockerfiles clean"
shellcheck .ci/run .ci/*.sh
shellcheck -x selftest/build.sh examples/offline/make-base.sh
echo "shellcheck: CI's scripts, selftest/build.sh and examples/offline/make-base.sh clean"
