//! A stand-in for uv, for the offline CLI tests of `imagegen lock`, `render --check` and `bake`
//! (the real uv locks real images in `real_build`).

use std::path::{Path, PathBuf};

/// A stand-in for uv in these offline tests (the real uv locks real images in `real_build`):
/// it answers `--version`, records each call's arguments in `$FAKE_UV_LOG`, and "resolves" by
/// pinning each requirement: an exact pin as written, any other at 1.13.2 by its name alone
/// (`ninja`, `jupyterlab>=4.2,<5` become `ninja==1.13.2`, `jupyterlab==1.13.2`), with a full
/// sha256 derived from the line: a lock the one lock reader (`imagegen_python::lock`) reads.
pub const FAKE_UV: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "uv 0.13.9 (test stand-in)"; exit 0; fi
echo "$*" >> "$FAKE_UV_LOG"
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--output-file" ]; then out="$2"; fi
  shift
done
: > "$out.new"
while read -r requirement; do
  case "$requirement" in
    *==*) pin="$requirement" ;;
    *) pin="$(printf %s "$requirement" | sed 's/[][<>=!~; ].*//')==1.13.2" ;;
  esac
  printf '%s \
    --hash=sha256:%s
    # via -r requirements.in
' "$pin" "$(printf %s "$pin" | sha256sum | cut -d' ' -f1)" >> "$out.new"
done < requirements.in
mv "$out.new" "$out"
"#;

/// Writes the uv stand-in into `dir` and returns its path.
pub fn fake_uv(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-uv");
    std::fs::write(&path, FAKE_UV).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
