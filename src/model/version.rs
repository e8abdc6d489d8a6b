//! Version numbers as imagegen meets them: dotted numeric versions (CUDA `12.6.3`, cuDNN
//! `9.5.1.17`, Python `3.12`, glibc `2.35`), torch releases (semver `2.7.1`, or a series `2.7`),
//! and NVIDIA driver versions (`535.104.05`, `570.26`), which are not semver: `05` is a legal
//! component and the third part is often missing.
//!
//! OS names (`ubuntu24.04`, `debian12`) live here too: a family and a release number, parsed
//! once. Every version parser here accepts only digits and dots, so a parsed version is also safe
//! to place in a Dockerfile. This module does no I/O.

use std::cmp::Ordering;
use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

/// Why a version string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a valid {kind} version: {why}")]
pub struct VersionError {
    pub(crate) text: String,
    pub(crate) kind: &'static str,
    pub(crate) why: String,
}

/// A version made of 1 to `max_parts` numeric components separated by dots. Ordering compares the
/// components numerically, padding the shorter one with zeros (`12.6` == `12.6.0`); the original
/// text is kept for display, so `535.104.05` prints as written.
#[derive(Debug, Clone)]
pub(crate) struct DottedVersion {
    parts: Vec<u64>,
    text: String,
}

impl DottedVersion {
    /// Parses `text` as a version of `kind` (used in the error) with at most `max_parts` parts.
    pub(crate) fn parse_kind(
        text: &str,
        kind: &'static str,
        max_parts: usize,
    ) -> Result<Self, VersionError> {
        let error = |why: &str| VersionError {
            text: text.to_string(),
            kind,
            why: why.to_string(),
        };
        if text.is_empty() {
            return Err(error("it is empty"));
        }
        let mut parts = Vec::new();
        for part in text.split('.') {
            if part.is_empty() {
                return Err(error(
                    "it has an empty component (two dots, or a leading or trailing dot)",
                ));
            }
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(error("only digits separated by dots are allowed"));
            }
            if part.len() > 9 {
                return Err(error("a component is too long"));
            }
            parts.push(
                part.parse::<u64>()
                    .map_err(|_| error("a component is not a number"))?,
            );
        }
        if parts.len() > max_parts {
            return Err(error(&format!("it has more than {max_parts} components")));
        }
        Ok(Self {
            parts,
            text: text.to_string(),
        })
    }

    /// The numeric components as parsed.
    pub(crate) fn parts(&self) -> &[u64] {
        &self.parts
    }

    /// The component at `index`, 0 when absent.
    pub(crate) fn part(&self, index: usize) -> u64 {
        self.parts.get(index).copied().unwrap_or(0)
    }

    /// The text as the user or the data file wrote it.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// `major.minor` of this version (`12.6.3` → `12.6`).
    pub(crate) fn major_minor(&self) -> String {
        format!("{}.{}", self.part(0), self.part(1))
    }

    /// True when every component of `prefix` equals the same component here
    /// (`9` and `9.5` are prefixes of `9.5.1.17`).
    pub(crate) fn starts_with(&self, prefix: &DottedVersion) -> bool {
        prefix.parts.len() <= self.parts.len()
            && prefix.parts.iter().zip(&self.parts).all(|(a, b)| a == b)
    }
}

impl PartialEq for DottedVersion {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for DottedVersion {}
impl PartialOrd for DottedVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for DottedVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        let length = self.parts.len().max(other.parts.len());
        (0..length)
            .map(|i| self.part(i).cmp(&other.part(i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}
impl fmt::Display for DottedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An NVIDIA Linux driver version such as `535.104.05` or `570.26`: a branch number, then one or
/// two numeric parts. Ordered numerically (`535.104.05` < `535.161.07` < `550.54.14`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriverVersion(DottedVersion);

impl DriverVersion {
    pub(crate) fn parse(text: &str) -> Result<Self, VersionError> {
        let version = DottedVersion::parse_kind(text, "NVIDIA driver", 3)?;
        if version.part(0) < 100 {
            return Err(VersionError {
                text: text.to_string(),
                kind: "NVIDIA driver",
                why: "driver branches are three-digit numbers such as 535 or 570 (did you give a CUDA version?)".into(),
            });
        }
        Ok(Self(version))
    }

    /// The driver branch (`535` for `535.104.05`).
    pub(crate) fn branch(&self) -> u64 {
        self.0.part(0)
    }

    /// Component `index` (branch, minor, revision), 0 when absent (`570.26` has revision 0).
    pub(crate) fn part(&self, index: usize) -> u64 {
        self.0.part(index)
    }

    pub(crate) fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq<str> for DriverVersion {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for DriverVersion {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::str::FromStr for DriverVersion {
    type Err = VersionError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DriverVersion::parse(text)
    }
}

impl serde::Serialize for DriverVersion {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for DriverVersion {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        DriverVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A torch release (`2.7.1`) or series (`2.7`), ordered as semver. A series parses to `x.y.0` with
/// `is_series` set, so the resolver can pick the newest known patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TorchVersion {
    pub(crate) version: semver::Version,
    pub(crate) is_series: bool,
}

impl TorchVersion {
    pub(crate) fn parse(text: &str) -> Result<Self, VersionError> {
        let dotted = DottedVersion::parse_kind(text, "torch", 3)?;
        let error = |why: &str| VersionError {
            text: text.to_string(),
            kind: "torch",
            why: why.to_string(),
        };
        if dotted.parts().len() < 2 {
            return Err(error(
                "give a series such as 2.7 or a release such as 2.7.1",
            ));
        }
        let padded = format!("{}.{}.{}", dotted.part(0), dotted.part(1), dotted.part(2));
        let version = semver::Version::parse(&padded).map_err(|e| error(&e.to_string()))?;
        Ok(Self {
            version,
            is_series: dotted.parts().len() == 2,
        })
    }

    /// `major.minor`, the series this release belongs to.
    pub(crate) fn series(&self) -> String {
        format!("{}.{}", self.version.major, self.version.minor)
    }
}

impl fmt::Display for TorchVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_series {
            f.write_str(&self.series())
        } else {
            write!(f, "{}", self.version)
        }
    }
}

/// A torch version as the knowledge writes it (a series `2.7`, a release `2.7.1`), with its
/// [`TorchVersion`] parsed once when it was read: lookups compare the parsed value, never the text
/// parsed again. Equality is that of the text, as for [`VersionText`].
#[derive(Debug, Clone)]
pub struct TorchText(VersionText, TorchVersion);

impl TorchText {
    /// A torch series or release, refused with the reason as [`TorchVersion::parse`] refuses it.
    pub(crate) fn parse(text: &str) -> Result<TorchText, VersionError> {
        let torch = TorchVersion::parse(text)?;
        let written = VersionText::parse(text)?;
        Ok(TorchText(written, torch))
    }

    /// A checked version read as torch: a series or a release, refused with the reason as
    /// [`TorchVersion::parse`] refuses it (`2` names no series, `2.7.1.1` is no release).
    pub(crate) fn of_version(written: VersionText) -> Result<TorchText, VersionError> {
        let torch = TorchVersion::parse(written.as_str())?;
        Ok(TorchText(written, torch))
    }

    /// Whether `release` is this torch: the same release, or one of this series' releases
    /// (`2.7` covers `2.7.1`), compared as numbers.
    pub(crate) fn covers(&self, release: &TorchVersion) -> bool {
        if self.1.is_series {
            (release.version.major, release.version.minor)
                == (self.1.version.major, self.1.version.minor)
        } else {
            !release.is_series && release.version == self.1.version
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The text as written, as a checked version.
    pub(crate) fn text(&self) -> &VersionText {
        &self.0
    }

    /// The torch version, parsed when it was read.
    pub(crate) fn torch(&self) -> &TorchVersion {
        &self.1
    }
}

impl PartialEq for TorchText {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for TorchText {}
impl PartialOrd for TorchText {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TorchText {
    /// The order of the text, as written (as for [`VersionText`]); compare `torch()` for the
    /// order of releases.
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

impl fmt::Display for TorchText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for TorchText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TorchText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TorchText::parse(&text).map_err(|e| de::Error::custom(e.to_string()))
    }
}

/// A version string checked at load time (digits and dots only), kept exactly as written, with
/// its numbers parsed once. Equality and ordering are those of the text (as written); compare
/// `dotted()` for numeric order.
#[derive(Debug, Clone)]
pub struct VersionText(String, DottedVersion);

impl VersionText {
    /// A version as written (digits and dots, at most four parts), refused with the reason.
    pub(crate) fn parse(text: &str) -> Result<VersionText, VersionError> {
        let parsed = DottedVersion::parse_kind(text, "", 4)?;
        Ok(VersionText(text.to_string(), parsed))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The text of a parsed version (a Python release, a padded torch series).
    pub(crate) fn of(version: &DottedVersion) -> VersionText {
        VersionText(version.to_string(), version.clone())
    }

    /// `major.minor` of this version (`12.6.3` → `12.6`), numbers as parsed.
    pub(crate) fn major_minor(&self) -> VersionText {
        let text = self.1.major_minor();
        let parsed = DottedVersion {
            parts: vec![self.1.part(0), self.1.part(1)],
            text: text.clone(),
        };
        VersionText(text, parsed)
    }

    /// The version as numbers, parsed when it was made.
    pub(crate) fn dotted(&self) -> &DottedVersion {
        &self.1
    }

    /// The parsed version as a `kind` of at most `max_parts` parts (CUDA `12.6.3`), refused as
    /// the parser refuses one with more.
    pub(crate) fn within(
        &self,
        kind: &'static str,
        max_parts: usize,
    ) -> Result<&DottedVersion, VersionError> {
        if self.1.parts().len() > max_parts {
            return Err(VersionError {
                text: self.0.clone(),
                kind,
                why: format!("it has more than {max_parts} components"),
            });
        }
        Ok(&self.1)
    }

    /// The first number (`9` of cuDNN `9.5.1.17`).
    pub(crate) fn major(&self) -> u64 {
        self.1.part(0)
    }
}

impl PartialEq for VersionText {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for VersionText {}
impl PartialOrd for VersionText {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for VersionText {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}
impl std::hash::Hash for VersionText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}
impl Serialize for VersionText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl fmt::Display for VersionText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for VersionText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        VersionText::parse(&text)
            .map_err(|e| de::Error::custom(format!("malformed version {:?}: {}", text, e.why)))
    }
}

/// An OS name such as `ubuntu24.04` or `debian12`, with its family and release number parsed
/// when it was read. Equality, ordering and hashing are those of the text, as written.
#[derive(Debug, Clone)]
pub struct OsName(String, OsFamily, DottedVersion);

/// The distributions imagegen builds on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OsFamily {
    Ubuntu,
    Debian,
}

impl OsFamily {
    fn as_str(self) -> &'static str {
        match self {
            OsFamily::Ubuntu => "ubuntu",
            OsFamily::Debian => "debian",
        }
    }
}

impl OsName {
    /// An OS name as written, `ubuntuYY.MM` or `debianN`; anything else is refused with how to
    /// write it.
    pub(crate) fn parse(text: &str) -> Result<OsName, String> {
        let ubuntu = text.strip_prefix("ubuntu").and_then(|rest| {
            DottedVersion::parse_kind(rest, "Ubuntu", 2)
                .ok()
                .filter(|v| v.parts().len() == 2)
        });
        let debian = text.strip_prefix("debian").and_then(|rest| {
            if !rest.is_empty() && rest.len() <= 3 && rest.chars().all(|c| c.is_ascii_digit()) {
                DottedVersion::parse_kind(rest, "Debian", 1).ok()
            } else {
                None
            }
        });
        match (ubuntu, debian) {
            (Some(release), _) => Ok(OsName(text.to_string(), OsFamily::Ubuntu, release)),
            (None, Some(release)) => Ok(OsName(text.to_string(), OsFamily::Debian, release)),
            (None, None) => Err(format!(
                "malformed OS {text:?}: write it as ubuntuYY.MM (ubuntu24.04) or debianN (debian12)"
            )),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The family and release of this OS, for ordering: `ubuntu24.04` is (`ubuntu`, 24.04),
    /// `debian12` is (`debian`, 12), as parsed when the name was read.
    pub(crate) fn release(&self) -> (String, DottedVersion) {
        (self.1.as_str().to_string(), self.2.clone())
    }

    /// Whether this is a Debian release (`debian12`), whose images use Debian's archive.
    pub(crate) fn is_debian(&self) -> bool {
        self.1 == OsFamily::Debian
    }
}

impl PartialEq for OsName {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for OsName {}
impl PartialOrd for OsName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OsName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}
impl std::hash::Hash for OsName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Serialize for OsName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl fmt::Display for OsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for OsName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        OsName::parse(&text).map_err(de::Error::custom)
    }
}

/// Reading a value as the text it was written as (`&os`, `os.starts_with("ubuntu")`); the text
/// cannot be changed, and a new value comes only through its parser.
macro_rules! read_as_text {
    ($($name:ident),*) => {$(
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    )*};
}

pub(crate) use read_as_text;

read_as_text!(VersionText, ComputeCapability, OsName, TorchText);

/// A GPU compute capability compiled into a wheel, as torch lists it: `major.minor` (`8.6`),
/// with `+PTX` where PTX for it is compiled in too (`12.0+PTX`). Checked when the knowledge loads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub(crate) struct ComputeCapability(String);

impl ComputeCapability {
    /// `major.minor`, optionally `+PTX`; anything else is refused with the reason.
    pub(crate) fn parse(text: &str) -> Result<ComputeCapability, VersionError> {
        let number = text.strip_suffix("+PTX").unwrap_or(text);
        let parsed = DottedVersion::parse_kind(number, "compute capability", 2).map_err(|e| {
            VersionError {
                text: text.to_string(),
                ..e
            }
        })?;
        if parsed.parts().len() != 2 {
            return Err(VersionError {
                text: text.to_string(),
                kind: "compute capability",
                why: "it must be major.minor (`8.6`), optionally with `+PTX`".to_string(),
            });
        }
        Ok(ComputeCapability(text.to_string()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for ComputeCapability {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ComputeCapability::parse(&text).map_err(|e| {
            de::Error::custom(format!(
                "malformed compute capability {:?}: {}",
                text, e.why
            ))
        })
    }
}

#[cfg(test)]
impl From<&str> for VersionText {
    /// A test's literal, parsed as the loader parses it: a malformed one fails its test.
    fn from(text: &str) -> VersionText {
        VersionText::parse(text).expect("a test's version literal")
    }
}

#[cfg(test)]
impl From<&str> for TorchText {
    /// A test's torch literal, parsed as the loader parses it: a malformed one fails its test.
    fn from(text: &str) -> TorchText {
        TorchText::parse(text).expect("a test's torch literal")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(text: &str) -> DriverVersion {
        DriverVersion::parse(text).unwrap()
    }

    #[test]
    fn compute_capabilities_are_major_minor_with_an_optional_ptx() {
        for good in ["8.6", "12.0+PTX", "10.0"] {
            assert_eq!(ComputeCapability::parse(good).unwrap(), good);
        }
        for bad in ["8", "8.6.1", "sm_86", "8.6+ptx", "12.0+PTX\nRUN x", ""] {
            assert!(ComputeCapability::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn driver_versions_order_numerically_not_lexically() {
        assert!(driver("535.104.05") < driver("535.161.07"));
        assert!(driver("535.161.07") < driver("550.54.14"));
        assert!(driver("570.26") < driver("570.124.06"));
        assert!(driver("570.26") > driver("570.9"));
        assert!(driver("580") < driver("580.65.06"));
        assert_eq!(driver("570.26"), driver("570.26.0"));
        assert_eq!(driver("535.104.05").branch(), 535);
        assert_eq!(driver("535.104.05").to_string(), "535.104.05");
    }

    #[test]
    fn driver_versions_reject_garbage() {
        for bad in [
            "",
            "535..1",
            "535.a",
            "12.6",
            "535.104.05.1",
            "535.104.05\nRUN x",
            "-535",
            "535.",
        ] {
            assert!(
                DriverVersion::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        let error = DriverVersion::parse("12.4").unwrap_err();
        assert!(
            error.to_string().contains("did you give a CUDA version"),
            "{error}"
        );
    }

    #[test]
    fn dotted_versions_keep_text_and_compare_by_number() {
        let twelve_ten = DottedVersion::parse_kind("12.10", "CUDA", 3).unwrap();
        let twelve_one = DottedVersion::parse_kind("12.1", "CUDA", 3).unwrap();
        assert!(twelve_ten > twelve_one, "12.10 must not become 12.1");
        assert_eq!(twelve_ten.as_str(), "12.10");
        assert_eq!(
            DottedVersion::parse_kind("12.6.3", "CUDA", 3)
                .unwrap()
                .major_minor(),
            "12.6"
        );
        let cudnn = DottedVersion::parse_kind("9.5.1.17", "cuDNN", 4).unwrap();
        assert!(cudnn.starts_with(&DottedVersion::parse_kind("9", "cuDNN", 4).unwrap()));
        assert!(cudnn.starts_with(&DottedVersion::parse_kind("9.5", "cuDNN", 4).unwrap()));
        assert!(!cudnn.starts_with(&DottedVersion::parse_kind("9.1", "cuDNN", 4).unwrap()));
        assert!(DottedVersion::parse_kind("1.2.3.4.5", "cuDNN", 4).is_err());
        assert!(DottedVersion::parse_kind("2.7.0\nRUN curl x", "torch", 3).is_err());
    }

    #[test]
    fn torch_versions_parse_series_and_releases() {
        let series = TorchVersion::parse("2.7").unwrap();
        assert!(series.is_series);
        assert_eq!(series.to_string(), "2.7");
        let release = TorchVersion::parse("2.10.0").unwrap();
        assert!(!release.is_series);
        assert_eq!(release.series(), "2.10");
        assert!(
            TorchVersion::parse("2.10.0").unwrap().version
                > TorchVersion::parse("2.9.1").unwrap().version
        );
        assert!(TorchVersion::parse("2").is_err());
        assert!(TorchVersion::parse("2.7.1rc1").is_err());
    }

    #[test]
    fn os_releases_order_by_family_then_number_and_refuse_other_names() {
        let release = |name: &str| OsName::parse(name).unwrap().release();
        assert!(release("ubuntu24.04") > release("ubuntu22.04"));
        assert!(release("ubuntu24.10") > release("ubuntu24.04"));
        assert!(release("debian13") > release("debian12"));
        assert_eq!(release("debian12").0, "debian");
        for bad in [
            "fedora40",
            "ubuntu",
            "debian",
            "debian12.1",
            "ubuntu24",
            "ubuntu24.04.1",
        ] {
            assert!(OsName::parse(bad).is_err(), "{bad}");
        }
        let error = OsName::parse("fedora40").unwrap_err();
        assert!(error.contains("malformed OS \"fedora40\""), "{error}");
    }

    #[test]
    fn debian_is_told_apart_from_ubuntu() {
        assert!(OsName::parse("debian12").unwrap().is_debian());
        assert!(!OsName::parse("ubuntu24.04").unwrap().is_debian());
    }

    #[test]
    fn os_names_compare_as_written() {
        let name = OsName::parse("ubuntu24.04").unwrap();
        assert_eq!(name, OsName::parse("ubuntu24.04").unwrap());
        assert_ne!(name, OsName::parse("ubuntu22.04").unwrap());
        assert_eq!(name, "ubuntu24.04");
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"ubuntu24.04\"");
    }
}
