//! The compatibility knowledge: which torch releases publish wheels for which CUDA versions, the
//! cuDNN and NCCL each wheel pins, their Python range and glibc floor, the one build each platform
//! gets from plain PyPI, the companion torchvision/torchaudio; the minimum NVIDIA driver of each
//! CUDA toolkit (full and minor-version compatibility), the forward-compatibility branches, Ubuntu
//! releases and platforms of the nvidia/cuda base images.
//!
//! It is data, not code: `knowledge.yaml` beside this file is embedded in the binary and a user
//! file given with `--knowledge` is merged over it (an entry with the same key replaces the
//! embedded one). Every entry cites sources by key, and every key names a repository, path and
//! commit or a URL; the checks here refuse an entry without one. This module reads only that data;
//! it does no other I/O. `derive` turns a release's wheel metadata into an entry.

pub(crate) mod derive;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::date::Day;
use crate::model::version::{
    ComputeCapability, DottedVersion, DriverVersion, TorchVersion, VersionError,
};
use crate::model::version::{OsName, TorchText, VersionText};
use crate::model::yaml::{self, Problem, LIMITS};

/// The frozen subset of the knowledge that logic tests run on (see [`Knowledge::test_fixture`]).
#[cfg(test)]
pub(crate) const TEST_FIXTURE: &str =
    include_str!("../../../tests/fixtures/knowledge/frozen-subset.yaml");

/// The embedded knowledge file.
pub(crate) const EMBEDDED: &str = include_str!("knowledge.yaml");

/// The schema this module reads.
pub(crate) const SCHEMA_VERSION: u32 = 2;

pub(crate) const PLATFORM_AMD64: &str = "linux/amd64";
pub(crate) const PLATFORM_ARM64: &str = "linux/arm64";

#[derive(Debug, thiserror::Error)]
pub(crate) enum KnowledgeError {
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {source}")]
    Version {
        origin: String,
        source: VersionError,
    },
    #[error("cannot read knowledge file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

impl KnowledgeError {
    /// A problem the YAML reader found in the file `origin`, at its line and column.
    fn located(origin: &str, problem: Problem) -> KnowledgeError {
        let origin = match problem.at {
            Some(at) => format!("{origin}:{}:{}", at.line, at.column),
            None => origin.to_string(),
        };
        let hint = problem
            .hint
            .map(|hint| format!("\nhint: {hint}"))
            .unwrap_or_default();
        KnowledgeError::Parse {
            origin,
            message: format!("{}{hint}", problem.message),
        }
    }
}

/// Where a fact was read: a file of a repository at a commit, or a URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<String>,
    /// What was read there.
    pub(crate) what: String,
}

impl Source {
    /// `owner/name path @commit`, or the URL.
    pub(crate) fn locator(&self) -> String {
        match (&self.repo, &self.path, &self.commit, &self.url) {
            (Some(repo), Some(path), Some(commit), None) => format!("{repo} {path} @{commit}"),
            (None, None, None, Some(url)) => url.clone(),
            _ => String::from("(incomplete source)"),
        }
    }

    /// Why this source does not locate anything, if it does not.
    fn problem(&self) -> Option<String> {
        match (&self.repo, &self.path, &self.commit, &self.url) {
            (Some(repo), Some(path), Some(commit), None) => {
                if repo.split('/').filter(|part| !part.is_empty()).count() != 2 {
                    Some(format!("repo `{repo}` is not owner/name"))
                } else if path.is_empty() {
                    Some("its path is empty".into())
                } else if commit.len() < 7
                    || commit.len() > 40
                    || !commit.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    Some(format!(
                        "commit `{commit}` is not 7 to 40 hexadecimal digits"
                    ))
                } else {
                    None
                }
            }
            (None, None, None, Some(url)) => {
                if url.starts_with("https://") || url.starts_with("http://") {
                    None
                } else {
                    Some(format!("url `{url}` is not an http(s) URL"))
                }
            }
            _ => Some("it needs either repo, path and commit, or a url".into()),
        }
    }
}

/// A field of a wheel variant that no primary source confirmed (the value is kept, the resolver
/// warns). Whether the variant exists at all is `verified` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Field {
    Archs,
    Cudnn,
    Nccl,
}

impl Field {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::Archs => "GPU arch list",
            Field::Cudnn => "cuDNN pin",
            Field::Nccl => "NCCL pin",
        }
    }
}

/// One torch series (`2.7`) with its wheel variants and releases.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchSeries {
    /// The series (`2.7`), parsed when the knowledge loads.
    pub(crate) series: TorchText,
    pub(crate) python: Vec<VersionText>,
    #[serde(default)]
    pub(crate) python_experimental: Vec<VersionText>,
    pub(crate) glibc_min: VersionText,
    /// Platforms whose every wheel needs a newer glibc than `glibc_min` (torch 2.6's aarch64
    /// wheels are `manylinux_2_28` while its x86_64 ones are `manylinux2014`).
    #[serde(default)]
    pub(crate) platform_glibc_min: BTreeMap<String, VersionText>,
    pub cuda: Vec<TorchCuda>,
    pub releases: Vec<TorchRelease>,
    #[serde(default)]
    pub(crate) note: Option<String>,
    pub(crate) source: Vec<String>,
}

impl TorchSeries {
    /// The glibc the wheels of `platform` need: the highest floor among the series', the
    /// platform's, and (for a CUDA wheel) the variant's and its aarch64 wheels'. Unparsable values
    /// cannot reach here: the loader checks each.
    pub(crate) fn glibc_min_for(&self, variant: Option<&TorchCuda>, platform: &str) -> VersionText {
        let mut floors = vec![&self.glibc_min];
        floors.extend(self.platform_glibc_min.get(platform));
        if let Some(variant) = variant {
            floors.extend(variant.glibc_min.as_ref());
            if platform == PLATFORM_ARM64 {
                floors.extend(variant.aarch64.as_ref().and_then(|a| a.glibc_min.as_ref()));
            }
        }
        floors
            .into_iter()
            .max_by_key(|floor| floor.dotted())
            .unwrap_or(&self.glibc_min)
            .clone()
    }
}

/// One CUDA wheel variant of a torch series (`cu126`) on the PyTorch index.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchCuda {
    pub cuda: VersionText,
    pub(crate) cudnn: VersionText,
    #[serde(default)]
    pub(crate) nccl: Option<VersionText>,
    #[serde(default)]
    pub(crate) glibc_min: Option<VersionText>,
    /// Compute capabilities compiled into the x86_64 wheel.
    #[serde(default)]
    pub(crate) archs: Vec<ComputeCapability>,
    /// Linux aarch64 (SBSA) CUDA wheels of this variant, when PyTorch publishes them.
    #[serde(default)]
    pub(crate) aarch64: Option<Aarch64Wheels>,
    #[serde(default = "default_true")]
    pub(crate) verified: bool,
    #[serde(default)]
    pub(crate) unconfirmed: Vec<Field>,
    #[serde(default)]
    pub(crate) note: Option<String>,
    pub(crate) source: Vec<String>,
}

impl TorchCuda {
    /// The platforms this variant publishes wheels for.
    pub(crate) fn platforms(&self) -> Vec<&'static str> {
        let mut platforms = vec![PLATFORM_AMD64];
        if self.aarch64.is_some() {
            platforms.push(PLATFORM_ARM64);
        }
        platforms
    }

    /// The compute capabilities compiled into the wheel of `platform`.
    pub(crate) fn archs_for(&self, platform: &str) -> Vec<ComputeCapability> {
        match (&self.aarch64, platform) {
            (Some(aarch64), PLATFORM_ARM64) => aarch64.archs.clone(),
            _ => self.archs.clone(),
        }
    }

    /// The fields of the wheel of `platform` that no primary source confirmed, with the note.
    pub(crate) fn unconfirmed_for(&self, platform: &str) -> (Vec<Field>, Option<&str>) {
        match (&self.aarch64, platform) {
            (Some(aarch64), PLATFORM_ARM64) => {
                let mut fields: Vec<Field> = self
                    .unconfirmed
                    .iter()
                    .copied()
                    .filter(|f| *f != Field::Archs)
                    .collect();
                fields.extend(aarch64.unconfirmed.iter().copied());
                let note = aarch64.note.as_deref().or(self.note.as_deref());
                (fields, note)
            }
            _ => (self.unconfirmed.clone(), self.note.as_deref()),
        }
    }
}

/// The aarch64 wheels of a torch CUDA variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Aarch64Wheels {
    pub(crate) archs: Vec<ComputeCapability>,
    /// The glibc floor of these wheels where it is above the series' and the platform's.
    #[serde(default)]
    pub(crate) glibc_min: Option<VersionText>,
    #[serde(default)]
    pub(crate) unconfirmed: Vec<Field>,
    #[serde(default)]
    pub(crate) note: Option<String>,
    pub(crate) source: Vec<String>,
}

/// One torch release with its companions and what plain PyPI serves of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchRelease {
    /// The release (`2.7.1`), parsed when the knowledge loads.
    pub torch: TorchText,
    /// The exact torchvision release that pins this torch.
    pub(crate) torchvision: VersionText,
    /// The exact torchaudio release for this torch, where one is known.
    #[serde(default)]
    pub(crate) torchaudio: Option<VersionText>,
    /// Where the companion versions come from.
    pub(crate) source: Vec<String>,
    pub(crate) pypi: PypiRelease,
}

impl TorchRelease {
    /// The CUDA variant plain PyPI serves for `platform`; `None` for a CPU-only wheel or none.
    pub(crate) fn pypi_cuda(&self, platform: &str) -> Option<&str> {
        self.pypi
            .wheels
            .iter()
            .find(|w| w.platform == platform)
            .and_then(|w| w.cuda.as_deref())
    }
}

/// The Linux wheels of a torch release on PyPI: one build per platform (`pip install torch==X`
/// without a local version), with the CUDA libraries its metadata pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PypiRelease {
    pub(crate) wheels: Vec<PypiWheel>,
    pub(crate) source: Vec<String>,
}

/// The PyPI wheel of one platform. Without `cuda` it pulls no CUDA libraries: a CPU build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PypiWheel {
    pub(crate) platform: String,
    /// The CUDA variant (`13.0`), from the CUDA runtime pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cuda: Option<VersionText>,
    /// The pinned CUDA runtime (`nvidia-cuda-runtime-cu12==…` or `cuda-toolkit[…]==…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cuda_runtime: Option<VersionText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cudnn: Option<VersionText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nccl: Option<VersionText>,
}

/// A field of a CUDA release that no primary source confirmed: the value is used and every image
/// whose driver minimum it sets lists it under `unverified`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CudaField {
    DriverMin,
}

impl CudaField {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CudaField::DriverMin => "toolkit driver minimum",
        }
    }
}

/// One CUDA toolkit release: its driver minimum and the nvidia/cuda images of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CudaRelease {
    pub(crate) version: VersionText,
    /// The toolkit driver minimum (full feature set); absent where NVIDIA's table has no row.
    #[serde(default)]
    pub(crate) driver_min: Option<DriverVersion>,
    /// The CUDA runtime library version the release ships (`12.4.127` for 12.4.1).
    #[serde(default)]
    pub(crate) cudart: Option<VersionText>,
    /// Ubuntu releases nvidia/cuda publishes images of this release for; empty when none are known.
    #[serde(default)]
    pub(crate) ubuntu: Vec<VersionText>,
    /// The cuDNN flavour in nvidia/cuda tags (`cudnn8`, `cudnn9`, `cudnn`).
    #[serde(default)]
    pub(crate) cudnn_tag: Option<String>,
    /// The Ubuntu releases the cuDNN tags exist for, when fewer than `ubuntu`.
    #[serde(default)]
    pub(crate) cudnn_ubuntu: Option<Vec<VersionText>>,
    /// The brand list (under `brands`) NVIDIA_REQUIRE_CUDA repeats per forward-compat branch.
    #[serde(default)]
    pub(crate) brands: Option<String>,
    /// Platforms with images → the driver branches NVIDIA_REQUIRE_CUDA whitelists there for
    /// forward compatibility (the bundled cuda-compat package, data-center GPUs).
    #[serde(default)]
    pub(crate) platforms: BTreeMap<String, Vec<u64>>,
    #[serde(default = "default_true")]
    pub(crate) verified: bool,
    /// Single fields no primary source confirmed (the driver minimum read from a third-party copy
    /// of NVIDIA's installer name, say); `note` says what was read where.
    #[serde(default)]
    pub(crate) unconfirmed: Vec<CudaField>,
    #[serde(default)]
    pub(crate) note: Option<String>,
    pub(crate) source: Vec<String>,
    /// When NVIDIA's images of this release reach end of life (no more updates; NVIDIA's support
    /// policy deletes the tags six months later).
    #[serde(default)]
    pub(crate) images_eol: Option<EndOfLife>,
}

/// An end-of-life date with its sources: the day support (security updates) ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndOfLife {
    /// `YYYY-MM-DD`, checked when the knowledge loads.
    pub(crate) date: Day,
    /// Why this date (a source that gives only the month, say).
    #[serde(default)]
    pub(crate) note: Option<String>,
    /// `false` where the date itself is not read from a primary source.
    #[serde(default = "default_true")]
    pub(crate) verified: bool,
    pub(crate) source: Vec<String>,
}

impl CudaRelease {
    /// The platforms nvidia/cuda publishes this release for.
    pub(crate) fn platforms(&self) -> Vec<&str> {
        self.platforms.keys().map(String::as_str).collect()
    }

    /// Why the toolkit driver minimum is not confirmed by a primary source, when it is not.
    pub(crate) fn unconfirmed_driver_min(&self) -> Option<String> {
        self.unconfirmed
            .contains(&CudaField::DriverMin)
            .then(|| self.note.clone().unwrap_or_default())
    }

    /// The forward-compatibility branches of the images of `platform`.
    pub(crate) fn forward_compat_branches(&self, platform: &str) -> &[u64] {
        self.platforms
            .get(platform)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Read by tests of the data; nothing in imagegen asks it.
    #[cfg(test)]
    /// Ubuntu releases with `cudnn_tag` images.
    pub(crate) fn cudnn_ubuntu(&self) -> &[VersionText] {
        match (&self.cudnn_tag, &self.cudnn_ubuntu) {
            (None, _) => &[],
            (Some(_), Some(list)) => list,
            (Some(_), None) => &self.ubuntu,
        }
    }
}

/// A brand list of NVIDIA_REQUIRE_CUDA.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BrandList {
    pub(crate) names: Vec<String>,
    pub(crate) source: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CudaFamily {
    pub(crate) major: u64,
    pub(crate) driver_min: DriverVersion,
    /// The folder under `site-packages/nvidia/` where PyPI's toolkit wheels of this major lay out
    /// one CUDA tree (`cu13`), usable as CUDA_HOME (`devel_toolkit: pypi`); absent where they do not.
    #[serde(default)]
    pub(crate) pypi_toolkit: Option<String>,
    #[serde(default)]
    pub(crate) note: Option<String>,
    pub(crate) source: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CudaArchChange {
    pub(crate) cuda: VersionText,
    #[serde(default)]
    pub(crate) adds: Vec<String>,
    #[serde(default)]
    pub(crate) drops: Vec<String>,
    #[serde(default = "default_true")]
    pub(crate) verified: bool,
    pub(crate) source: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OsRelease {
    /// `ubuntu24.04`, `debian12`: parsed when the knowledge loads.
    pub(crate) name: OsName,
    pub(crate) base: String,
    pub(crate) codename: String,
    pub(crate) glibc: VersionText,
    pub(crate) python: VersionText,
    pub(crate) source: Vec<String>,
    /// When the release's standard security support ends.
    #[serde(default)]
    pub(crate) eol: Option<EndOfLife>,
}

fn default_true() -> bool {
    true
}

/// The whole knowledge file. Lists are kept in file order; lookups go through the methods.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knowledge {
    pub(crate) schema_version: u32,
    #[serde(default)]
    pub(crate) collected: Option<String>,
    #[serde(default)]
    pub(crate) sources: BTreeMap<String, Source>,
    #[serde(default)]
    pub(crate) wheel_index: String,
    #[serde(default)]
    pub(crate) wheel_index_source: Vec<String>,
    #[serde(default)]
    pub torch: Vec<TorchSeries>,
    #[serde(default)]
    pub(crate) cuda: Vec<CudaRelease>,
    #[serde(default)]
    pub(crate) brands: BTreeMap<String, BrandList>,
    #[serde(default)]
    pub(crate) cuda_families: Vec<CudaFamily>,
    #[serde(default)]
    pub(crate) cuda_archs: Vec<CudaArchChange>,
    #[serde(default)]
    pub(crate) os: Vec<OsRelease>,
}

impl Knowledge {
    /// The embedded knowledge, parsed and checked. Panics only if the embedded file is broken,
    /// which the unit tests rule out.
    pub fn embedded() -> Knowledge {
        Self::parse(EMBEDDED, "embedded knowledge.yaml").expect("embedded knowledge.yaml is valid")
    }

    /// A frozen subset of the knowledge for logic tests (`tests/fixtures/knowledge/`): tests of
    /// the resolver, renderer, planner and generators run on it, so adding a release to the
    /// shipped file never breaks them.
    #[cfg(test)]
    pub(crate) fn test_fixture() -> Knowledge {
        Self::parse(TEST_FIXTURE, "tests/fixtures/knowledge/frozen-subset.yaml")
            .expect("the test fixture knowledge is valid")
    }

    /// The embedded knowledge with the file the loader read from `path` merged over it, held
    /// to [`yaml::LIMITS`] like the matrix.
    pub(crate) fn with_override(path: &Path, bytes: &[u8]) -> Result<Knowledge, KnowledgeError> {
        let origin = path.display().to_string();
        let bytes = yaml::within_size(bytes, &LIMITS)
            .map_err(|problem| KnowledgeError::located(&origin, problem))?;
        let text =
            yaml::decode(bytes).map_err(|problem| KnowledgeError::located(&origin, problem))?;
        let extra = Self::parse_unchecked(text, &origin)?;
        let mut merged = Self::embedded();
        merged.merge(extra);
        merged.check(&path.display().to_string())?;
        Ok(merged)
    }

    pub(crate) fn parse(text: &str, origin: &str) -> Result<Knowledge, KnowledgeError> {
        let knowledge = Self::parse_unchecked(text, origin)?;
        knowledge.check(origin)?;
        Ok(knowledge)
    }

    /// Parses without the cross-reference checks (an override is checked after merging).
    fn parse_unchecked(text: &str, origin: &str) -> Result<Knowledge, KnowledgeError> {
        yaml::locate(text, &LIMITS, origin)
            .map_err(|problem| KnowledgeError::located(origin, problem))?;
        // Name the schema before serde trips over a field an older schema had.
        #[derive(Deserialize)]
        struct Header {
            schema_version: Option<u32>,
        }
        if let Ok(Header {
            schema_version: Some(found),
        }) = serde_yaml::from_str::<Header>(text)
        {
            if found != SCHEMA_VERSION {
                return Err(KnowledgeError::Invalid {
                    origin: origin.to_string(),
                    message: format!(
                        "schema_version {found} is not read by this imagegen (it reads {SCHEMA_VERSION}: sources are keyed locators, `default_cuda` became each release's `pypi` wheels, `platforms` maps a platform to its forward-compat branches)"
                    ),
                });
            }
        }
        let knowledge: Knowledge =
            serde_yaml::from_str(text).map_err(|e| KnowledgeError::Parse {
                origin: match e.location() {
                    Some(at) => format!("{origin}:{}:{}", at.line(), at.column()),
                    None => origin.to_string(),
                },
                message: e.to_string(),
            })?;
        Ok(knowledge)
    }

    /// Entries of `other` replace entries of `self` with the same key; new ones are added.
    fn merge(&mut self, other: Knowledge) {
        fn merge_by<T>(base: &mut Vec<T>, extra: Vec<T>, key: impl Fn(&T) -> String) {
            for item in extra {
                match base.iter().position(|existing| key(existing) == key(&item)) {
                    Some(index) => base[index] = item,
                    None => base.push(item),
                }
            }
        }
        self.sources.extend(other.sources);
        self.brands.extend(other.brands);
        if !other.wheel_index.is_empty() {
            self.wheel_index = other.wheel_index;
            self.wheel_index_source = other.wheel_index_source;
        }
        merge_by(&mut self.torch, other.torch, |t| t.series.to_string());
        merge_by(&mut self.cuda, other.cuda, |c| c.version.to_string());
        merge_by(&mut self.cuda_families, other.cuda_families, |f| {
            f.major.to_string()
        });
        merge_by(&mut self.cuda_archs, other.cuda_archs, |a| {
            a.cuda.to_string()
        });
        merge_by(&mut self.os, other.os, |o| o.name.to_string());
    }

    /// Every entry that states facts, named, with the source keys it cites.
    pub(crate) fn entries(&self) -> Vec<(String, &[String])> {
        let mut entries: Vec<(String, &[String])> =
            vec![("wheel_index".into(), &self.wheel_index_source)];
        for series in &self.torch {
            let what = format!("torch {}", series.series);
            entries.push((what.clone(), &series.source));
            for variant in &series.cuda {
                entries.push((format!("{what} CUDA {}", variant.cuda), &variant.source));
                if let Some(aarch64) = &variant.aarch64 {
                    entries.push((
                        format!("{what} CUDA {} aarch64", variant.cuda),
                        &aarch64.source,
                    ));
                }
            }
            for release in &series.releases {
                entries.push((
                    format!("torch {} torchvision/torchaudio", release.torch),
                    &release.source,
                ));
                entries.push((
                    format!("torch {} PyPI wheels", release.torch),
                    &release.pypi.source,
                ));
            }
        }
        for cuda in &self.cuda {
            entries.push((format!("CUDA {}", cuda.version), &cuda.source));
            if let Some(eol) = &cuda.images_eol {
                entries.push((format!("CUDA {} images_eol", cuda.version), &eol.source));
            }
        }
        for (name, brands) in &self.brands {
            entries.push((format!("brand list {name}"), &brands.source));
        }
        for family in &self.cuda_families {
            entries.push((format!("CUDA {} family", family.major), &family.source));
        }
        for change in &self.cuda_archs {
            entries.push((
                format!("CUDA {} architectures", change.cuda),
                &change.source,
            ));
        }
        for os in &self.os {
            entries.push((format!("OS {}", os.name), &os.source));
            if let Some(eol) = &os.eol {
                entries.push((format!("OS {} eol", os.name), &eol.source));
            }
        }
        entries
    }

    /// The sources `keys` name, as locators.
    pub(crate) fn locate(&self, keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter_map(|key| self.sources.get(key))
            .map(Source::locator)
            .collect()
    }

    /// Every version in the data parses, every entry cites at least one defined source that
    /// locates a file at a commit or a URL, every torch CUDA variant has a CUDA release to build
    /// on, PyPI's wheels agree with the variants, and every brand list named exists.
    fn check(&self, origin: &str) -> Result<(), KnowledgeError> {
        let version = |text: &str, kind: &'static str, parts: usize| {
            DottedVersion::parse_kind(text, kind, parts).map_err(|source| KnowledgeError::Version {
                origin: origin.to_string(),
                source,
            })
        };
        let invalid = |message: String| KnowledgeError::Invalid {
            origin: origin.to_string(),
            message,
        };
        if self.schema_version != SCHEMA_VERSION {
            return Err(invalid(format!(
                "schema_version {} is not {SCHEMA_VERSION}",
                self.schema_version
            )));
        }
        for (key, source) in &self.sources {
            if let Some(problem) = source.problem() {
                return Err(invalid(format!(
                    "source `{key}` locates nothing: {problem}"
                )));
            }
            if source.what.trim().is_empty() {
                return Err(invalid(format!(
                    "source `{key}` does not say what was read"
                )));
            }
        }
        for (what, sources) in self.entries() {
            if sources.is_empty() {
                return Err(invalid(format!("{what} has no source")));
            }
            if let Some(key) = sources.iter().find(|key| !self.sources.contains_key(*key)) {
                return Err(invalid(format!(
                    "{what} cites unknown source `{key}` (define it under `sources` with repo, path and commit, or a url)"
                )));
            }
        }
        let versions = |list: &[VersionText], kind: &'static str, parts: usize| {
            list.iter()
                .try_for_each(|v| version(v, kind, parts).map(drop))
        };
        let exact = |text: &str, kind: &'static str| -> Result<(), KnowledgeError> {
            if version(text, kind, 3)?.parts().len() != 3 {
                return Err(invalid(format!(
                    "{kind} {text} is not an exact release (major.minor.patch)"
                )));
            }
            Ok(())
        };
        let noted = |what: &str, unconfirmed: &[Field], note: &Option<String>| {
            if !unconfirmed.is_empty() && note.is_none() {
                return Err(invalid(format!(
                    "{what} marks fields unconfirmed without a note saying why"
                )));
            }
            Ok(())
        };
        for series in &self.torch {
            let what = format!("torch {}", series.series);
            version(&series.glibc_min, "glibc", 2)?;
            for (platform, glibc) in &series.platform_glibc_min {
                if platform != PLATFORM_AMD64 && platform != PLATFORM_ARM64 {
                    return Err(invalid(format!(
                        "{what}: platform_glibc_min names unknown platform {platform} (known: {PLATFORM_AMD64}, {PLATFORM_ARM64})"
                    )));
                }
                version(glibc, "glibc", 2)?;
            }
            versions(&series.python, "Python", 2)?;
            versions(&series.python_experimental, "Python", 2)?;
            for variant in &series.cuda {
                let what = format!("{what} CUDA {}", variant.cuda);
                version(&variant.cuda, "CUDA", 2)?;
                version(&variant.cudnn, "cuDNN", 4)?;
                if let Some(nccl) = &variant.nccl {
                    version(nccl, "NCCL", 3)?;
                }
                if let Some(glibc) = &variant.glibc_min {
                    version(glibc, "glibc", 2)?;
                }
                noted(&what, &variant.unconfirmed, &variant.note)?;
                if let Some(aarch64) = &variant.aarch64 {
                    if let Some(glibc) = &aarch64.glibc_min {
                        version(glibc, "glibc", 2)?;
                    }
                    noted(
                        &format!("{what} aarch64"),
                        &aarch64.unconfirmed,
                        &aarch64.note,
                    )?;
                    if aarch64.archs.is_empty() && !aarch64.unconfirmed.contains(&Field::Archs) {
                        return Err(invalid(format!(
                            "{what} aarch64 has no arch list and does not mark it unconfirmed"
                        )));
                    }
                }
                if variant.archs.is_empty() && variant.verified {
                    return Err(invalid(format!("{what} has no arch list")));
                }
                if self.cuda_release_for(&variant.cuda).is_none() {
                    return Err(invalid(format!(
                        "{what} has no entry under `cuda` to build on"
                    )));
                }
            }
            if series.releases.is_empty() {
                return Err(invalid(format!("{what} has no releases")));
            }
            for release in &series.releases {
                let parsed = release.torch.torch();
                if parsed.series() != series.series.torch().series() || parsed.is_series {
                    return Err(invalid(format!(
                        "{what}: release {} does not belong to the series",
                        release.torch
                    )));
                }
                exact(&release.torchvision, "torchvision")?;
                if let Some(audio) = &release.torchaudio {
                    exact(audio, "torchaudio")?;
                }
                self.check_pypi(series, release)
                    .map_err(|message| invalid(format!("torch {}: {message}", release.torch)))?;
            }
        }
        for cuda in &self.cuda {
            let what = format!("CUDA {}", cuda.version);
            version(&cuda.version, "CUDA", 3)?;
            if !cuda.unconfirmed.is_empty() && cuda.note.is_none() {
                return Err(invalid(format!(
                    "{what} marks fields unconfirmed without a note saying what was read"
                )));
            }
            if cuda.unconfirmed.contains(&CudaField::DriverMin) && cuda.driver_min.is_none() {
                return Err(invalid(format!(
                    "{what} marks its driver minimum unconfirmed but records none"
                )));
            }
            if let Some(cudart) = &cuda.cudart {
                exact(cudart, "CUDA runtime")?;
            }
            versions(&cuda.ubuntu, "Ubuntu", 2)?;
            if cuda.ubuntu.is_empty() != cuda.platforms.is_empty() {
                return Err(invalid(format!(
                    "{what}: `ubuntu` and `platforms` must both list the images, or both be empty"
                )));
            }
            if let Some(platform) = cuda
                .platforms
                .keys()
                .find(|p| *p != PLATFORM_AMD64 && *p != PLATFORM_ARM64)
            {
                return Err(invalid(format!(
                    "{what} lists unknown platform {platform} (known: {PLATFORM_AMD64}, {PLATFORM_ARM64})"
                )));
            }
            if let Some(list) = &cuda.cudnn_ubuntu {
                if cuda.cudnn_tag.is_none() || list.iter().any(|u| !cuda.ubuntu.contains(u)) {
                    return Err(invalid(format!(
                        "{what}: cudnn_ubuntu needs a cudnn_tag and may only name releases in `ubuntu`"
                    )));
                }
            }
            let whitelists = cuda.platforms.values().any(|branches| !branches.is_empty());
            match &cuda.brands {
                Some(brands) if !self.brands.contains_key(brands) => {
                    return Err(invalid(format!(
                        "{what} names brand list `{brands}` that is not defined"
                    )));
                }
                None if whitelists => {
                    return Err(invalid(format!(
                        "{what} whitelists forward-compat branches but names no brand list"
                    )));
                }
                _ => {}
            }
        }
        for family in &self.cuda_families {
            if let Some(folder) = &family.pypi_toolkit {
                if folder.is_empty() || !folder.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(invalid(format!(
                        "CUDA {} family: pypi_toolkit {folder:?} must be a folder name of letters and digits",
                        family.major
                    )));
                }
            }
        }
        for os in &self.os {
            version(&os.glibc, "glibc", 2)?;
            version(&os.python, "Python", 2)?;
        }
        Ok(())
    }

    /// PyPI's wheels of `release`: one per platform, amd64 among them, each CUDA build one of the
    /// series' variants with the same cuDNN and NCCL pins.
    fn check_pypi(&self, series: &TorchSeries, release: &TorchRelease) -> Result<(), String> {
        let mut seen = Vec::new();
        for wheel in &release.pypi.wheels {
            if wheel.platform != PLATFORM_AMD64 && wheel.platform != PLATFORM_ARM64 {
                return Err(format!(
                    "PyPI wheel for unknown platform {}",
                    wheel.platform
                ));
            }
            if seen.contains(&wheel.platform) {
                return Err(format!("two PyPI wheels for {}", wheel.platform));
            }
            seen.push(wheel.platform.clone());
            let Some(cuda) = &wheel.cuda else {
                if wheel.cuda_runtime.is_some() || wheel.cudnn.is_some() || wheel.nccl.is_some() {
                    return Err(format!(
                        "the {} PyPI wheel pins CUDA libraries but names no CUDA variant",
                        wheel.platform
                    ));
                }
                continue;
            };
            let (Some(runtime), Some(cudnn)) = (&wheel.cuda_runtime, &wheel.cudnn) else {
                return Err(format!(
                    "the {} PyPI wheel is CUDA {cuda} but lacks its cuda_runtime or cudnn pin",
                    wheel.platform
                ));
            };
            let runtime_version =
                DottedVersion::parse_kind(runtime, "CUDA runtime", 4).map_err(|e| e.to_string())?;
            if runtime_version.major_minor() != *cuda {
                return Err(format!(
                    "the {} PyPI wheel pins CUDA runtime {runtime}, not CUDA {cuda}",
                    wheel.platform
                ));
            }
            let variant = series
                .cuda
                .iter()
                .find(|v| v.cuda == *cuda && v.verified)
                .ok_or_else(|| {
                    format!(
                        "the {} PyPI wheel is CUDA {cuda}, which is not a verified variant of the series",
                        wheel.platform
                    )
                })?;
            if wheel.platform == PLATFORM_ARM64 && variant.aarch64.is_none() {
                return Err(format!(
                    "the linux/arm64 PyPI wheel is CUDA {cuda}, but that variant records no aarch64 wheels"
                ));
            }
            if *cudnn != variant.cudnn {
                return Err(format!(
                    "the {} PyPI wheel pins cuDNN {cudnn}, the CUDA {cuda} variant says {}",
                    wheel.platform, variant.cudnn
                ));
            }
            if let (Some(pinned), Some(recorded)) = (&wheel.nccl, &variant.nccl) {
                if pinned != recorded {
                    return Err(format!(
                        "the {} PyPI wheel pins NCCL {pinned}, the CUDA {cuda} variant says {recorded}",
                        wheel.platform
                    ));
                }
            }
        }
        if !seen.iter().any(|p| p == PLATFORM_AMD64) {
            return Err("no linux/amd64 PyPI wheel is recorded".into());
        }
        Ok(())
    }

    /// The torch series `torch` belongs to (`2.7` for `2.7.1` or `2.7`), compared as parsed.
    pub(crate) fn torch_series(&self, torch: &TorchVersion) -> Option<&TorchSeries> {
        let wanted = (torch.version.major, torch.version.minor);
        self.torch.iter().find(|t| {
            let series = &t.series.torch().version;
            (series.major, series.minor) == wanted
        })
    }

    /// Read by tests of the data; nothing in imagegen asks it.
    #[cfg(test)]
    /// The newest torch series in the data.
    pub(crate) fn newest_series(&self) -> Option<&TorchSeries> {
        self.torch.iter().max_by_key(|t| &t.series.torch().version)
    }

    /// The torch release `torch` (`2.7.1`) with its series; a series (`2.7`) names no release.
    pub(crate) fn torch_release(
        &self,
        torch: &TorchVersion,
    ) -> Option<(&TorchSeries, &TorchRelease)> {
        if torch.is_series {
            return None;
        }
        let series = self.torch_series(torch)?;
        let release = series
            .releases
            .iter()
            .find(|r| r.torch.torch().version == torch.version)?;
        Some((series, release))
    }

    /// The CUDA release to build on for `cuda`: the exact release when `cuda` has three parts,
    /// else the newest release of the `major.minor` line that has nvidia/cuda images NVIDIA still
    /// supports (no `images_eol`: `12.6` → `12.6.3`, `13.0` → `13.0.3`), else the newest with
    /// images, or the newest of the line when none has.
    /// Both sides are numbers parsed when they were read (the knowledge's CUDA versions have at
    /// most three parts, checked at load); `cuda` with more than three parts names no release.
    pub(crate) fn cuda_release_for(&self, cuda: &VersionText) -> Option<&CudaRelease> {
        let wanted = cuda.within("CUDA", 3).ok()?;
        let exact = wanted.parts().len() == 3;
        self.cuda
            .iter()
            .map(|release| (release.version.dotted(), release))
            .filter(|(version, _)| {
                if exact {
                    *version == wanted
                } else {
                    version.starts_with(wanted)
                }
            })
            .max_by_key(|(version, release)| {
                let images = !release.ubuntu.is_empty();
                (images, images && release.images_eol.is_none(), *version)
            })
            .map(|(_, release)| release)
    }

    /// The minor-version-compatibility driver floor of CUDA major `major`.
    pub(crate) fn family(&self, major: u64) -> Option<&CudaFamily> {
        self.cuda_families.iter().find(|f| f.major == major)
    }

    /// The release `name` names (`ubuntu24.04`).
    pub(crate) fn os(&self, name: &OsName) -> Option<&OsRelease> {
        self.os.iter().find(|o| o.name == *name)
    }

    /// The brand names of the list `name`.
    pub(crate) fn brand_names(&self, name: &str) -> Option<&[String]> {
        self.brands.get(name).map(|list| list.names.as_slice())
    }

    /// Read by tests of the data; nothing in imagegen asks it.
    #[cfg(test)]
    /// The newest CUDA toolkit (major.minor) whose toolkit driver minimum `driver` meets.
    pub(crate) fn newest_cuda_for_driver(&self, driver: &DriverVersion) -> Option<String> {
        self.cuda
            .iter()
            .filter(|c| c.verified)
            .filter(|c| c.driver_min.as_ref().is_some_and(|min| driver >= min))
            .map(|c| c.version.dotted())
            .max()
            .map(|v| v.major_minor())
    }

    /// Every driver release the knowledge names (toolkit and family minimums), oldest first.
    pub(crate) fn known_drivers(&self) -> Vec<&DriverVersion> {
        let mut drivers: Vec<&DriverVersion> = self
            .cuda
            .iter()
            .filter_map(|c| c.driver_min.as_ref())
            .chain(self.cuda_families.iter().map(|f| &f.driver_min))
            .collect();
        drivers.sort();
        drivers.dedup();
        drivers
    }

    /// A driver given on the command line: a full version (`535.104.05`, `570.26`), or an explicit
    /// branch `R535`, which means the lowest release of that branch the knowledge names (the
    /// release a fleet on that branch runs at least). A bare branch number (`535`) is refused: it
    /// reads as `535.0.0`, older than every release of the branch.
    pub(crate) fn driver_argument(&self, text: &str) -> Result<DriverVersion, String> {
        let text = text.trim();
        if let Some(branch) = text.strip_prefix(['R', 'r']) {
            let Ok(branch) = branch.parse::<u64>() else {
                return Err(format!(
                    "`{text}` is not a driver branch: write R followed by the branch number (e.g. R535)"
                ));
            };
            let known = self.known_drivers();
            return known
                .iter()
                .find(|d| d.branch() == branch && d.part(1) > 0)
                .map(|d| (*d).clone())
                .ok_or_else(|| {
                    let mut branches: Vec<u64> = known.iter().map(|d| d.branch()).collect();
                    branches.dedup();
                    let branches: Vec<String> = branches.iter().map(|b| format!("R{b}")).collect();
                    format!(
                        "the knowledge names no release of driver branch R{branch}; give the full \
                         version (e.g. {branch}.xx.yy) or a branch it knows: {}",
                        branches.join(", ")
                    )
                });
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "`{text}` is a bare driver branch: a driver must be a full version (e.g. \
                 535.104.05) or an explicit branch R{text} (its lowest release the knowledge names)"
            ));
        }
        DriverVersion::parse(text).map_err(|e| e.to_string())
    }

    /// Read by tests of the data; nothing in imagegen asks it.
    #[cfg(test)]
    /// The pip wheel index URL for CUDA `cuda` (`12.6` → `.../whl/cu126`).
    pub(crate) fn wheel_index_url(&self, cuda: &str) -> String {
        self.wheel_index.replace("{suffix}", &wheel_suffix(cuda))
    }
}

/// The wheel index suffix of a CUDA version: `cu` + major.minor without the dot.
pub(crate) fn wheel_suffix(cuda: &str) -> String {
    let parts: Vec<&str> = cuda.split('.').take(2).collect();
    format!("cu{}", parts.concat())
}

#[cfg(test)]
mod tests;
