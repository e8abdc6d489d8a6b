//! The value types of a matrix's axes: image variants, versions as written, OS names and
//! platforms. Each parses strictly (a value that could not reach a Dockerfile safely never
//! parses) and prints as written.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use crate::model::version::read_as_text;
pub use crate::model::version::{OsName, VersionText};

/// The image variants imagegen knows how to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Lean, to run: torch and its pip-provided CUDA libraries, a C compiler for Triton, no nvcc.
    Runtime,
    /// Built on the runtime image, adds the CUDA compiler and headers to build extensions.
    Devel,
}

impl Variant {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Variant::Runtime => "runtime",
            Variant::Devel => "devel",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a cell past (or within 90 days of) an end of life gets: a warning, or a rejection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EndOfLifePolicy {
    #[default]
    Warn,
    Refuse,
}

/// Where torch, torchvision and torchaudio come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TorchWheels {
    /// PyTorch's own index (download.pytorch.org/whl/cuXYZ or `mirrors.torch_index`): every CUDA
    /// variant, installed as `torch==X+cuXYZ`.
    #[default]
    Pytorch,
    /// A plain PyPI-style index (PyPI or `mirrors.pip_index`): only the CUDA variant PyPI carries
    /// for the release (the knowledge's `pypi_cuda`), installed as `torch==X`.
    Pypi,
}

/// Where a devel image's CUDA compiler and headers come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DevelToolkit {
    /// NVIDIA's apt repository (`cuda-nvcc-13-0`, ...), which nvidia/cuda bases configure.
    #[default]
    Apt,
    /// NVIDIA's toolkit wheels from the Python index, locked like everything else (CUDA majors
    /// whose wheels lay out one CUDA tree: 13 and later).
    Pypi,
}

/// Where an image's Python wheels are installed from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WheelSource {
    /// `imagegen build` fetches the lock's files on the host into a content-addressed cache
    /// (sha256-checked, shared by every image and run) and places them in the build context; a
    /// build stage installs them with no index and no network, and the image copies the venv,
    /// so the wheels never become a layer of it.
    #[default]
    Cache,
    /// As `cache`, and a runtime image's venv is not made by pip in the Docker build: imagegen
    /// installs the cached wheels on the host itself (pip's files, modes, scripts and RECORD;
    /// `pipeline::wheel_install`) into a layer of their own, written and compressed in one pass,
    /// byte-compiles them and builds the loader cache in a container of the image, and adds the
    /// two layers above the Docker build's. Nothing of the venv passes through the daemon's
    /// build. An image with the team's steps (`steps:`, which run on the installed venv) cannot:
    /// refused when rendered.
    Host,
    /// pip inside the build downloads them from the indexes (each build again): for a remote
    /// daemon whose network reaches the indexes while the host running imagegen does not, or
    /// where sending gigabytes of context to it is slower than its own download.
    Index,
}

/// How a `wheels: host` runtime image's venv is cut into layers (`venv_layers:` in matrix.yaml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VenvLayers {
    /// Along the wheels (`pipeline::venv_cut`): a layer of its own for each large wheel, below
    /// the base, and the small ones in eight groups by name, above the build; each wheel's
    /// bytecode and RECORD in a layer beside. A layer's bytes depend only on the wheels it holds,
    /// so an upgrade pulls only what changed.
    #[default]
    Wheels,
    /// The whole venv in one layer above the build (with its bytecode in a second): the layout
    /// before issue 48, for a registry or runtime that counts layers tightly.
    One,
}

/// A target platform: `linux/amd64` or `linux/arm64` (SBSA: Grace Hopper, Grace Blackwell).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Platform(String);

impl Platform {
    pub(crate) fn amd64() -> Platform {
        Platform("linux/amd64".into())
    }

    /// A platform as written; the aliases Docker accepts (`linux/aarch64`, `linux/arm64/v8`,
    /// `linux/x86_64`) become the two names imagegen builds.
    pub(crate) fn parse(text: &str) -> Result<Platform, String> {
        match text {
            "linux/amd64" | "linux/arm64" => Ok(Platform(text.to_string())),
            "linux/aarch64" | "linux/arm64/v8" => Ok(Platform("linux/arm64".into())),
            "linux/x86_64" => Ok(Platform("linux/amd64".into())),
            _ => Err(format!(
                "unknown platform {text:?}: imagegen builds linux/amd64 and linux/arm64"
            )),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `amd64` or `arm64`.
    pub(crate) fn arch(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Platform::parse(&text).map_err(de::Error::custom)
    }
}

read_as_text!(Platform);

/// Test values written as literals (`"2.7.0".into()`), parsed as the loader parses them: a
/// malformed one fails the test that wrote it.
#[cfg(test)]
mod literals {
    use super::{OsName, Platform};

    impl From<&str> for OsName {
        fn from(text: &str) -> OsName {
            OsName::parse(text).expect("a test's OS literal")
        }
    }

    impl From<&str> for Platform {
        fn from(text: &str) -> Platform {
            Platform::parse(text).expect("a test's platform literal")
        }
    }
}
