//! A wheel's file name, parsed once (PEP 427):
//! `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`, each tag field a `.`-separated set
//! of tags (PEP 425). The name is normalized (PEP 503) and the version is a PEP 440 version, so
//! `cuda_bindings-13.0.3-…` is the package `cuda-bindings` and `torch-2.7-…` is torch `2.7.0`.

use std::fmt;
use std::str::FromStr;

use pep508_rs::pep440_rs::Version;
use pep508_rs::PackageName;

/// Why a text is not a wheel filename; shows the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{filename}` is not a wheel filename: {reason}")]
pub struct WheelFilenameError {
    filename: String,
    reason: String,
}

impl WheelFilenameError {
    fn new(filename: &str, reason: impl Into<String>) -> WheelFilenameError {
        WheelFilenameError {
            filename: filename.to_string(),
            reason: reason.into(),
        }
    }

    /// The text that was refused.
    pub fn filename(&self) -> &str {
        &self.filename
    }
}

/// A wheel's file name, split into its fields; shown as it was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WheelFilename {
    text: String,
    name: PackageName,
    version: Version,
    /// The build tag's number (`torch-2.10.0-3-cp310-…` re-uploads as build 3).
    build: Option<u64>,
    python_tags: Vec<String>,
    abi_tags: Vec<String>,
    platform_tags: Vec<String>,
}

impl FromStr for WheelFilename {
    type Err = WheelFilenameError;

    fn from_str(filename: &str) -> Result<WheelFilename, WheelFilenameError> {
        let error = |reason: &str| WheelFilenameError::new(filename, reason);
        let stem = filename
            .strip_suffix(".whl")
            .ok_or_else(|| error("it does not end in .whl"))?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, build, python, abi, platform) = match parts.as_slice() {
            [name, version, python, abi, platform] => {
                (*name, *version, None, *python, *abi, *platform)
            }
            [name, version, build, python, abi, platform] => {
                (*name, *version, Some(*build), *python, *abi, *platform)
            }
            _ => return Err(error("it does not have 5 or 6 dash-separated fields")),
        };
        if name.is_empty() {
            return Err(error("its name is empty"));
        }
        let build = build
            .map(|build| {
                let digits: String = build.chars().take_while(char::is_ascii_digit).collect();
                digits
                    .parse::<u64>()
                    .map_err(|_| error("its build tag does not start with a digit"))
            })
            .transpose()?;
        let tags = |field: &str, what: &str| {
            let tags: Vec<String> = field.split('.').map(str::to_string).collect();
            if tags.iter().any(String::is_empty) {
                return Err(error(&format!("its {what} tags have an empty one")));
            }
            Ok(tags)
        };
        Ok(WheelFilename {
            text: filename.to_string(),
            name: PackageName::from_str(name).map_err(|why| error(&format!("its name: {why}")))?,
            version: Version::from_str(version)
                .map_err(|why| error(&format!("its version: {why}")))?,
            build,
            python_tags: tags(python, "python")?,
            abi_tags: tags(abi, "ABI")?,
            platform_tags: tags(platform, "platform")?,
        })
    }
}

impl fmt::Display for WheelFilename {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.text)
    }
}

impl WheelFilename {
    /// The file name as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The package, normalized (`cuda_bindings` is `cuda-bindings`).
    pub fn name(&self) -> &PackageName {
        &self.name
    }

    pub fn version(&self) -> &Version {
        &self.version
    }

    /// The build tag's number, if the name has a build tag.
    pub fn build(&self) -> Option<u64> {
        self.build
    }

    pub fn python_tags(&self) -> &[String] {
        &self.python_tags
    }

    pub fn abi_tags(&self) -> &[String] {
        &self.abi_tags
    }

    pub fn platform_tags(&self) -> &[String] {
        &self.platform_tags
    }

    /// `{python}-{abi}-{platform}`: two wheels with the same key differ only in name, version
    /// or build tag.
    pub fn tags_key(&self) -> String {
        format!(
            "{}-{}-{}",
            self.python_tags.join("."),
            self.abi_tags.join("."),
            self.platform_tags.join(".")
        )
    }

    /// The machine (`x86_64`, `aarch64`) of a manylinux or plain Linux wheel; `None` for other
    /// operating systems and machines.
    pub fn linux_machine(&self) -> Option<&'static str> {
        let tag = self
            .platform_tags
            .iter()
            .find(|tag| tag.starts_with("manylinux") || tag.starts_with("linux_"))?;
        if tag.ends_with("_x86_64") {
            Some("x86_64")
        } else if tag.ends_with("_aarch64") {
            Some("aarch64")
        } else {
            None
        }
    }

    /// The lowest glibc any of the manylinux tags asks for, as (major, minor) (PEP 600; the
    /// legacy aliases of PEP 513, 571 and 599).
    pub fn glibc_floor(&self) -> Option<(u32, u32)> {
        self.platform_tags
            .iter()
            .filter_map(|tag| manylinux_glibc(tag))
            .min()
    }

    /// The CPython versions of the tags (`cp312` → `3.12`), each with whether the ABI is
    /// free-threaded (`cp313t`).
    pub fn cpython(&self) -> Vec<(String, bool)> {
        let free_threaded = self.abi_tags.iter().any(|abi| abi.ends_with('t'));
        self.python_tags
            .iter()
            .filter_map(|tag| {
                let digits = tag.strip_prefix("cp")?;
                let (major, minor) = digits.split_at(1);
                (!minor.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| (format!("{major}.{minor}"), free_threaded))
            })
            .collect()
    }
}

/// The glibc a manylinux platform tag names (`manylinux_2_28_x86_64`, `manylinux2014_aarch64`);
/// `None` for any other tag.
pub(crate) fn manylinux_glibc(tag: &str) -> Option<(u32, u32)> {
    if tag.starts_with("manylinux1_") {
        Some((2, 5))
    } else if tag.starts_with("manylinux2010_") {
        Some((2, 12))
    } else if tag.starts_with("manylinux2014_") {
        Some((2, 17))
    } else {
        let mut fields = tag.strip_prefix("manylinux_")?.splitn(3, '_');
        let major = fields.next()?.parse().ok()?;
        let minor = fields.next()?.parse().ok()?;
        fields.next()?;
        Some((major, minor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel(text: &str) -> WheelFilename {
        text.parse().unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn wheel_filenames_split_into_tags() {
        let name = wheel("torch-2.10.0-3-cp313-cp313t-manylinux_2_28_x86_64.whl");
        assert_eq!(name.name().as_ref(), "torch");
        assert_eq!(name.version(), &Version::from_str("2.10.0").unwrap());
        assert_eq!(name.build(), Some(3));
        assert_eq!(name.cpython(), vec![("3.13".to_string(), true)]);
        assert_eq!(name.linux_machine(), Some("x86_64"));
        assert_eq!(name.glibc_floor(), Some((2, 28)));
        assert_eq!(
            name.to_string(),
            "torch-2.10.0-3-cp313-cp313t-manylinux_2_28_x86_64.whl"
        );

        let old = wheel("torch-2.1.2-cp310-cp310-manylinux1_x86_64.whl");
        assert_eq!(old.glibc_floor(), Some((2, 5)), "manylinux1 is glibc 2.5");
        let arm = wheel("torch-2.0.0-1-cp38-cp38-manylinux2014_aarch64.whl");
        assert_eq!(arm.linux_machine(), Some("aarch64"));
        assert_eq!(arm.glibc_floor(), Some((2, 17)));
        let compound =
            wheel("numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
        assert_eq!(compound.glibc_floor(), Some((2, 17)));
        let mac = wheel("torch-2.13.0-cp310-none-macosx_14_0_arm64.whl");
        assert_eq!(mac.linux_machine(), None);
    }

    #[test]
    fn names_are_normalized_and_versions_compared_as_pep_440() {
        let escaped = wheel("Cuda_Bindings-13.0.3-cp312-cp312-manylinux_2_28_x86_64.whl");
        assert_eq!(escaped.name().as_ref(), "cuda-bindings");
        let short = wheel("torch-2.7-cp312-cp312-manylinux_2_28_x86_64.whl");
        assert_eq!(short.version(), &Version::from_str("2.7.0").unwrap());
        assert!(short.version() < &Version::from_str("2.10").unwrap());
    }

    #[test]
    fn what_is_not_a_wheel_filename_is_refused_saying_why() {
        for (bad, why) in [
            ("torch-2.13.0.tar.gz", "does not end in .whl"),
            ("torch-2.13.0-cp310.whl", "5 or 6"),
            ("not-a-wheel.whl", "5 or 6"),
            ("torch-2.13.0-x1-cp310-cp310-any.whl", "build tag"),
            ("torch-two-cp310-cp310-any.whl", "its version"),
            ("-2.0-cp310-cp310-any.whl", "its name"),
            ("torch-2.0-cp310..cp311-cp310-any.whl", "empty"),
        ] {
            let error = WheelFilename::from_str(bad).unwrap_err();
            assert!(error.to_string().contains(why), "{bad}: {error}");
            assert_eq!(error.filename(), bad);
        }
    }
}
