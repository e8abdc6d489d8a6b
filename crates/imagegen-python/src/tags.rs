//! Which wheel files of a locked package an image can install: a wheel's file name carries its
//! compatibility tags (PEP 427, PEP 425, PEP 600), and the image's lock says its Python and its
//! platform (`3.12`, `x86_64-manylinux_2_39`, as uv was asked for them). A lock allows every file
//! of a version (every platform's sha256); the host-side wheel cache fetches only the ones that
//! fit the image. Pure: parsed file names and the lock's values in, a verdict out.

use crate::wheel_filename::{manylinux_glibc, WheelFilename};

/// The Python and platform of one image's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `3.12` as (3, 12).
    pub python: (u32, u32),
    /// `x86_64` or `aarch64`.
    pub machine: String,
    /// The glibc the platform allows, `manylinux_2_39` as (2, 39).
    pub glibc: (u32, u32),
}

impl Target {
    /// The target of a lock's `python` (`3.12`) and `python_platform` (`x86_64-manylinux_2_39`);
    /// `None` when either is not in that form.
    pub fn parse(python: &str, python_platform: &str) -> Option<Target> {
        let (major, minor) = python.split_once('.')?;
        let (machine, manylinux) = python_platform.split_once('-')?;
        let (glibc_major, glibc_minor) = manylinux.strip_prefix("manylinux_")?.split_once('_')?;
        Some(Target {
            python: (major.parse().ok()?, minor.parse().ok()?),
            machine: machine.to_string(),
            glibc: (glibc_major.parse().ok()?, glibc_minor.parse().ok()?),
        })
    }

    /// Whether pip on this target would install `wheel`.
    pub fn accepts(&self, wheel: &WheelFilename) -> bool {
        let interpreter_fits = wheel.python_tags().iter().any(|python_tag| {
            wheel
                .abi_tags()
                .iter()
                .any(|abi_tag| self.interpreter_accepts(python_tag, abi_tag))
        });
        interpreter_fits
            && wheel
                .platform_tags()
                .iter()
                .any(|platform_tag| self.platform_accepts(platform_tag))
    }

    /// Whether `filename` is a wheel pip on this target would install; not a wheel: false.
    pub fn accepts_filename(&self, filename: &str) -> bool {
        filename
            .parse::<WheelFilename>()
            .is_ok_and(|wheel| self.accepts(&wheel))
    }

    fn interpreter_accepts(&self, python_tag: &str, abi_tag: &str) -> bool {
        let (major, minor) = self.python;
        let cpython = format!("cp{major}{minor}");
        // `cp312`, `py3`, `py312`, `py31` as (kind, major, optional minor).
        let version_of = |tag: &str, prefix: &str| -> Option<(u32, Option<u32>)> {
            let digits = tag.strip_prefix(prefix)?;
            let tag_major = digits.get(..1)?.parse().ok()?;
            let tag_minor = match digits.get(1..) {
                Some("") | None => None,
                Some(rest) => Some(rest.parse().ok()?),
            };
            Some((tag_major, tag_minor))
        };
        match abi_tag {
            "none" => {
                python_tag == cpython
                    || matches!(version_of(python_tag, "py"),
                        Some((tag_major, tag_minor)) if tag_major == major && tag_minor.is_none_or(|m| m <= minor))
            }
            "abi3" => matches!(version_of(python_tag, "cp"),
                Some((tag_major, Some(tag_minor))) if tag_major == major && tag_minor <= minor),
            abi => abi == cpython && python_tag == cpython,
        }
    }

    fn platform_accepts(&self, platform_tag: &str) -> bool {
        if platform_tag == "any" {
            return true;
        }
        let Some(rest) = platform_tag.strip_suffix(&format!("_{}", self.machine)) else {
            return false;
        };
        if rest == "linux" {
            return true;
        }
        let Some(glibc) = manylinux_glibc(platform_tag) else {
            return false;
        };
        glibc <= self.glibc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target::parse("3.12", "x86_64-manylinux_2_39").unwrap()
    }

    #[test]
    fn the_wheels_pip_would_take_on_the_target_are_accepted() {
        let target = target();
        for accepted in [
            "torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            "einops-0.8.1-py3-none-any.whl",
            "six-1.17.0-py2.py3-none-any.whl",
            "cuda_bindings-13.0.3-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
            "markupsafe-3.0.2-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "cryptography-44.0.0-cp39-abi3-manylinux_2_34_x86_64.whl",
            "numpy-2.1.0-cp312-cp312-manylinux1_x86_64.whl",
            "pkg-1.0-1build-py312-none-any.whl",
            "ninja-1.13.0-py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.whl",
        ] {
            assert!(target.accepts_filename(accepted), "{accepted}");
        }
    }

    #[test]
    fn other_pythons_machines_and_newer_glibcs_are_refused() {
        let target = target();
        for refused in [
            "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.13.0-cp312-cp312-manylinux_2_28_aarch64.whl",
            "torch-2.13.0-cp312-cp312-win_amd64.whl",
            "torch-2.13.0-cp312-cp312-macosx_11_0_arm64.whl",
            "torch-2.13.0-cp312-cp312-manylinux_2_40_x86_64.whl",
            "torch-2.13.0-cp313-cp313t-manylinux_2_28_x86_64.whl",
            "cryptography-44.0.0-cp313-abi3-manylinux_2_34_x86_64.whl",
            "pkg-1.0-py2-none-any.whl",
            "pkg-1.0-py313-none-any.whl",
            "torch-2.13.0.tar.gz",
            "not-a-wheel.whl",
        ] {
            assert!(!target.accepts_filename(refused), "{refused}");
        }
    }

    #[test]
    fn targets_are_read_from_the_locks_values_only_in_their_form() {
        let arm = Target::parse("3.10", "aarch64-manylinux_2_35").unwrap();
        assert_eq!(arm.python, (3, 10));
        assert_eq!(arm.glibc, (2, 35));
        assert!(arm.accepts_filename("torch-2.12.1-cp310-cp310-manylinux_2_28_aarch64.whl"));
        assert!(Target::parse("3", "x86_64-manylinux_2_39").is_none());
        assert!(Target::parse("3.12", "x86_64-musllinux_1_2").is_none());
    }
}
