//! A lock as `imagegen lock` writes it: a pip requirements file from `uv pip compile
//! --generate-hashes`, one exact pin per package (`name==version`, markers allowed), each
//! followed by its `--hash=sha256:<hex>` options on continuation lines and by comments, of
//! which `# from <index URL>` (uv's `--emit-index-annotation`) says where uv took the package.
//!
//! Read as pip reads the file: continuation lines (`\`) joined, comments apart, options split
//! from the requirement, the requirement parsed by PEP 508 ([`parse_requirement`]) and its pin
//! read as a PEP 440 [`Version`]. A line that is not PEP 508, or a hash that is not 64 hex
//! digits, is an error naming its line; an option line (`--index-url`), a requirement that is
//! not an exact pin and a direct reference (`name @ URL`) are not packages an index pins, and
//! are passed over, as pip-compile's other readers do.

use std::fmt;
use std::str::FromStr;

use pep508_rs::pep440_rs::Version;
use pep508_rs::{PackageName, VersionOrUrl};

use crate::requirement::{parse_requirement, pinned_version};

/// A sha256 as a lock's `--hash=sha256:<hex>` writes it: 64 lowercase hex digits, checked when
/// parsed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256(String);

/// Why a text is not a sha256.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a sha256 (64 lowercase hex digits)")]
pub struct Sha256Error(String);

impl FromStr for Sha256 {
    type Err = Sha256Error;

    fn from_str(hex: &str) -> Result<Sha256, Sha256Error> {
        if hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(Sha256(hex.to_string()))
        } else {
            Err(Sha256Error(hex.chars().take(80).collect()))
        }
    }
}

impl Sha256 {
    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The 32 hash bytes (for handing the hash to a crate with a digest type of its own).
    pub fn bytes(&self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            // Checked when parsed: 64 lowercase hex digits.
            *byte = u8::from_str_radix(&self.0[index * 2..index * 2 + 2], 16).unwrap_or(0);
        }
        bytes
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// One package a lock pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedPackage {
    pub name: PackageName,
    pub version: Version,
    /// Every file of it the lock allows, by sha256.
    pub sha256: Vec<Sha256>,
    /// The index uv took it from (`# from URL`), as uv wrote it.
    pub index: Option<String>,
    /// The line (1-based) its requirement starts on, for messages about it.
    pub line: usize,
}

/// Why a lock cannot be read: its line (1-based) and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LockError {
    pub line: usize,
    pub reason: String,
}

/// The packages of a lock's text, in its order.
pub fn parse_lock(text: &str) -> Result<Vec<LockedPackage>, LockError> {
    let mut packages: Vec<LockedPackage> = Vec::new();
    // A requirement and its continuation lines, with the number of its first line.
    let mut logical: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        if logical.is_none() {
            if let Some(comment) = trimmed.strip_prefix('#') {
                if let (Some(url), Some(last)) =
                    (comment.trim().strip_prefix("from "), packages.last_mut())
                {
                    last.index = Some(url.trim().to_string());
                }
                continue;
            }
            if trimmed.is_empty() {
                continue;
            }
        }
        let (first, mut joined) = logical.take().unwrap_or((number, String::new()));
        let (content, continues) = match trimmed.strip_suffix('\\') {
            Some(content) => (content, true),
            None => (trimmed, false),
        };
        joined.push(' ');
        joined.push_str(content);
        if continues {
            logical = Some((first, joined));
        } else if let Some(package) = package(&joined, first)? {
            packages.push(package);
        }
    }
    if let Some((first, joined)) = logical {
        if let Some(package) = package(&joined, first)? {
            packages.push(package);
        }
    }
    Ok(packages)
}

/// The package of one logical line (a requirement and its options); `None` for an option line
/// or a requirement that is no exact pin from an index.
fn package(line: &str, number: usize) -> Result<Option<LockedPackage>, LockError> {
    let error = |reason: String| LockError {
        line: number,
        reason,
    };
    let mut words = line.split_whitespace().peekable();
    let mut requirement = Vec::new();
    while let Some(word) = words.next_if(|word| !word.starts_with("--")) {
        requirement.push(word);
    }
    let mut sha256 = Vec::new();
    for option in words {
        if let Some(hex) = option.strip_prefix("--hash=sha256:") {
            sha256.push(
                hex.parse::<Sha256>()
                    .map_err(|problem| error(problem.to_string()))?,
            );
        }
    }
    if requirement.is_empty() {
        return Ok(None);
    }
    let text = requirement.join(" ");
    let parsed = parse_requirement(&text).map_err(|reason| error(format!("{text}: {reason}")))?;
    if matches!(parsed.version_or_url, Some(VersionOrUrl::Url(_))) {
        return Ok(None);
    }
    let Some(version) = pinned_version(&parsed).cloned() else {
        return Ok(None);
    };
    Ok(Some(LockedPackage {
        name: parsed.name,
        version,
        sha256,
        index: None,
        line: number,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(digit: char) -> String {
        digit.to_string().repeat(64)
    }

    #[test]
    fn a_lock_gives_each_package_its_hashes_and_index() {
        let text = format!(
            "# imagegen-lock-inputs: sha256:00\n\
             --index-url https://pypi.org/simple\n\
             cuda-bindings==13.0.3 \\\n    --hash=sha256:{a} \\\n    --hash=sha256:{b}\n    # via\n    #   torch\n    # from https://pypi.org/simple\n\
             nvidia-nccl-cu13==2.29.7 ; platform_machine == 'x86_64' \\\n    --hash=sha256:{c}\n\
             Team_Lib==0.1.0 --hash=sha256:{c}\n    # from http://127.0.0.1:9/simple\n\
             local @ file:///wheels/local-1.0-py3-none-any.whl\n\
             ranged>=1\n",
            a = hex('a'),
            b = hex('b'),
            c = hex('c')
        );
        let packages = parse_lock(&text).unwrap();
        let names: Vec<String> = packages.iter().map(|p| p.name.to_string()).collect();
        assert_eq!(names, ["cuda-bindings", "nvidia-nccl-cu13", "team-lib"]);
        assert_eq!(packages[0].version.to_string(), "13.0.3");
        assert_eq!(
            packages[0].sha256,
            [hex('a').parse().unwrap(), hex('b').parse().unwrap()]
        );
        assert_eq!(
            packages[0].index.as_deref(),
            Some("https://pypi.org/simple")
        );
        assert_eq!(packages[1].sha256, [hex('c').parse().unwrap()]);
        assert_eq!(packages[1].sha256[0].bytes(), [0xcc; 32]);
        assert_eq!(packages[1].index, None);
        assert_eq!(
            packages[2].index.as_deref(),
            Some("http://127.0.0.1:9/simple")
        );
    }

    #[test]
    fn a_line_that_is_no_requirement_or_a_short_hash_is_an_error_naming_its_line() {
        let error = parse_lock("torch==2.12.1 \\\n    --hash=sha256:abc\n").unwrap_err();
        assert_eq!(error.line, 1);
        assert!(error.reason.contains("\"abc\""), "{error}");
        let error = parse_lock("# header\ntorch===\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert!(
            error.to_string().starts_with("line 2: torch===: "),
            "{error}"
        );
    }
}
