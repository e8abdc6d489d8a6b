//! PEP 508 requirements through `pep508_rs` (uv's parser, published): an [`IndexRequirement`]
//! is one that names a package an index serves (no direct URL); [`pinned_version`] reads an
//! exact `==` pin; [`linux_cpython`] is the marker environment wheels of a Linux image are
//! judged in. Markers are parsed with the requirement, so an unknown variable or a malformed
//! marker is an error when the text is read, not when it is evaluated.

use std::fmt;
use std::str::FromStr;

use pep508_rs::pep440_rs::{Operator, Version};
use pep508_rs::{MarkerEnvironment, MarkerEnvironmentBuilder, Requirement, VersionOrUrl};

/// Why a text is not an [`IndexRequirement`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// Not PEP 508; the parser's message (one line).
    #[error("is not a PEP 508 requirement: {0}")]
    Syntax(String),
    /// `name @ URL`: a direct reference, which no index serves.
    #[error("is a direct reference (`@ URL`), which the lock cannot take from an index")]
    DirectReference,
}

/// A PEP 508 requirement naming a package an index serves: a name, optional `[extras]`,
/// optional version specifiers, optional `; markers`, and no URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRequirement(Requirement);

/// `text` as a PEP 508 requirement, or the parser's message (one line).
///
/// pep508_rs 0.9.2 panics (an `expect` in its name and extras parsers) on a package or extra
/// name that ends in `.`, `-` or `_` before another character (`pkg-~`, `pkg[x-]`): such a name
/// is refused here first, with the parser's own message for a name ending so. This is a guard
/// around that panic, not a second parser: everything else is the parser's.
pub fn parse_requirement(text: &str) -> Result<Requirement, String> {
    let separator_last = |name: &str| match name.chars().last() {
        Some(last @ ('.' | '-' | '_')) => Some(last),
        _ => None,
    };
    let rest = text.trim_start();
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
        .unwrap_or(rest.len());
    if let Some(last) = separator_last(&rest[..name_end]) {
        return Err(format!(
            "Package name must end with an alphanumeric character, not '{last}'"
        ));
    }
    if let Some(extras) = rest[name_end..].trim_start().strip_prefix('[') {
        let extras = extras.split(']').next().unwrap_or_default();
        if let Some(last) = extras
            .split(',')
            .find_map(|extra| separator_last(extra.trim()))
        {
            return Err(format!(
                "Extra name must end with an alphanumeric character, not '{last}'"
            ));
        }
    }
    Requirement::from_str(text).map_err(|error| {
        // The parser's message is the text, then a caret line: the first line says it.
        let message = error.message.to_string();
        message.lines().next().unwrap_or_default().to_string()
    })
}

impl FromStr for IndexRequirement {
    type Err = RequirementError;

    fn from_str(text: &str) -> Result<IndexRequirement, RequirementError> {
        let requirement = parse_requirement(text).map_err(RequirementError::Syntax)?;
        if matches!(requirement.version_or_url, Some(VersionOrUrl::Url(_))) {
            return Err(RequirementError::DirectReference);
        }
        Ok(IndexRequirement(requirement))
    }
}

impl IndexRequirement {
    pub fn requirement(&self) -> &Requirement {
        &self.0
    }
}

impl fmt::Display for IndexRequirement {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(formatter)
    }
}

/// The version of an exact pin (`==13.0.3`, `(==8.9.2.26)`); `None` for anything else (a range,
/// a wildcard, several clauses, a URL).
pub fn pinned_version(requirement: &Requirement) -> Option<&Version> {
    let Some(VersionOrUrl::VersionSpecifier(specifiers)) = &requirement.version_or_url else {
        return None;
    };
    match specifiers.iter().collect::<Vec<_>>().as_slice() {
        [only] if *only.operator() == Operator::Equal => Some(only.version()),
        _ => None,
    }
}

/// The marker environment of CPython `python_version` (`3.12`) on Linux on `machine` (`x86_64`,
/// `aarch64`), as the wheels of an image are judged: no extra is requested, the full version is
/// the minor's first release (`3.12.0`). An unparsable Python version is an error naming it.
pub fn linux_cpython(machine: &str, python_version: &str) -> Result<MarkerEnvironment, String> {
    let full_version = format!("{python_version}.0");
    MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
        implementation_name: "cpython",
        implementation_version: &full_version,
        os_name: "posix",
        platform_machine: machine,
        platform_python_implementation: "CPython",
        platform_release: "",
        platform_system: "Linux",
        platform_version: "",
        python_full_version: &full_version,
        python_version,
        sys_platform: "linux",
    })
    .map_err(|error| format!("Python {python_version:?}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(text: &str) -> Requirement {
        Requirement::from_str(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn requirements_split_name_extras_specifier_marker() {
        let toolkit =
            requirement("cuda-toolkit[cublas,cudart,nvrtc]==13.0.3; platform_system == \"Linux\"");
        assert_eq!(toolkit.name.as_ref(), "cuda-toolkit");
        let extras: Vec<&str> = toolkit.extras.iter().map(AsRef::as_ref).collect();
        assert_eq!(extras, ["cublas", "cudart", "nvrtc"]);
        assert_eq!(pinned_version(&toolkit).unwrap().to_string(), "13.0.3");
        let old = requirement("nvidia_cudnn_cu12 (==8.9.2.26) ; platform_system == \"Linux\"");
        assert_eq!(old.name.as_ref(), "nvidia-cudnn-cu12");
        assert_eq!(pinned_version(&old).unwrap().to_string(), "8.9.2.26");
        assert_eq!(
            pinned_version(&requirement("cuda-bindings<14,>=13.0.3")),
            None
        );
        assert_eq!(pinned_version(&requirement("torch>=2.11")), None);
        assert_eq!(pinned_version(&requirement("torch==2.*")), None);
    }

    #[test]
    fn markers_evaluate_like_pep_508() {
        let environment = linux_cpython("aarch64", "3.10").unwrap();
        let applies = |marker: &str| {
            requirement(&format!("pkg; {marker}")).evaluate_markers(&environment, &[])
        };
        assert!(applies("platform_system == \"Linux\""));
        assert!(!applies(
            "platform_system == \"Linux\" and platform_machine == \"x86_64\""
        ));
        assert!(applies(
            "platform_machine == 'x86_64' or (sys_platform == 'linux' and python_version >= '3.9')"
        ));
        assert!(applies("python_version < \"3.15\""));
        assert!(
            !applies("python_version < \"3.9\""),
            "3.10 > 3.9 numerically"
        );
        assert!(!applies("extra == \"optree\""));
        assert!(applies("'arch' in platform_machine"));
        assert!(applies("python_full_version ~= '3.10.0'"));
        // Unknown variables and unclosed parentheses are refused when the text is read.
        assert!(Requirement::<pep508_rs::VerbatimUrl>::from_str("pkg; os == 'linux'").is_err());
        assert!(
            Requirement::<pep508_rs::VerbatimUrl>::from_str("pkg; (python_version > '3'").is_err()
        );
    }

    #[test]
    fn index_requirements_are_pep_508_without_urls() {
        for good in [
            "einops",
            "rich>=13,<15",
            "team-lib==0.1.0",
            "pandas[parquet]~=2.2",
            "tomli; python_version < \"3.11\"",
            "uvloop>=0.19; sys_platform == 'linux' and platform_machine == \"x86_64\"",
        ] {
            IndexRequirement::from_str(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        assert_eq!(
            IndexRequirement::from_str("team @ https://git.example/team.whl").unwrap_err(),
            RequirementError::DirectReference
        );
        for bad in [
            "",
            "rich=>13",
            "rich[x",
            "rich; $(id)",
            "rich>=13 && curl",
            "-r x.txt",
            // pep508_rs panics on these: refused before it sees them.
            "pkg-~",
            "pkg_ [x]",
            "pkg. ==1",
            "pkg[x-]",
            "pkg[a, b_ ]==1",
        ] {
            assert!(
                matches!(
                    IndexRequirement::from_str(bad),
                    Err(RequirementError::Syntax(_))
                ),
                "{bad:?} passed"
            );
        }
    }
}

#[cfg(test)]
mod hostile {
    use proptest::prelude::*;

    use super::*;

    /// Names, extras, operators and markers in pieces, separators and brackets where they hurt.
    fn requirement_text() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "pkg",
            "a",
            "0",
            "-",
            ".",
            "_",
            "~",
            "[",
            "]",
            ",",
            " ",
            "==",
            ">=",
            "<",
            "!=",
            "~=",
            "1.0",
            "*",
            ";",
            "python_version",
            "extra",
            "'3.10'",
            "\"x\"",
            "and",
            "or",
            "(",
            ")",
            "@",
            "https://x.example/p.whl",
            "é",
            "\t",
        ]);
        prop::collection::vec(pieces, 0..14).prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn no_text_panics_the_requirement_parser(text in requirement_text()) {
            let _ = parse_requirement(&text);
            let _ = IndexRequirement::from_str(&text);
        }

        #[test]
        fn no_text_panics_the_wheel_filename_parser(text in requirement_text()) {
            let _ = crate::WheelFilename::from_str(&format!("{text}.whl"));
        }
    }
}
