//! The compatibility knowledge: which torch releases publish wheels for which CUDA versions, the
//! cuDNN each wheel bundles, their Python range and glibc floor; the minimum NVIDIA driver of each
//! CUDA toolkit (full and minor-version compatibility), forward-compatibility branches, nvidia/cuda
//! base tags and the Ubuntu releases they exist for.
//!
//! It is data, not code: `knowledge.yaml` beside this file is embedded in the binary, every entry
//! names its source, and a user file given with `--knowledge` is merged over it (an entry with the
//! same key replaces the embedded one). This module reads only that data; it does no other I/O.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::version::{DottedVersion, DriverVersion, TorchVersion, VersionError};
use crate::model::yaml::{self, Problem, LIMITS};

/// The embedded knowledge file.
pub const EMBEDDED: &str = include_str!("knowledge.yaml");

#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
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

/// One torch series (`2.7`) with its wheel variants and releases.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchSeries {
    pub series: String,
    pub python: Vec<String>,
    #[serde(default)]
    pub python_experimental: Vec<String>,
    pub glibc_min: String,
    pub default_cuda: String,
    pub cuda: Vec<TorchCuda>,
    pub releases: Vec<TorchRelease>,
    #[serde(default)]
    pub note: Option<String>,
    pub source: Vec<String>,
}

/// One CUDA wheel variant of a torch series (`cu126`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchCuda {
    pub cuda: String,
    pub cudnn: String,
    #[serde(default)]
    pub nccl: Option<String>,
    #[serde(default)]
    pub glibc_min: Option<String>,
    #[serde(default)]
    pub archs: Vec<String>,
    /// Linux aarch64 (SBSA) CUDA wheels of this variant, when PyTorch publishes them.
    #[serde(default)]
    pub aarch64: Option<Aarch64Wheels>,
    #[serde(default = "default_true")]
    pub verified: bool,
    #[serde(default)]
    pub note: Option<String>,
    pub source: Vec<String>,
}

impl TorchCuda {
    /// The platforms this variant publishes wheels for.
    pub fn platforms(&self) -> Vec<&'static str> {
        let mut platforms = vec![PLATFORM_AMD64];
        if self.aarch64.is_some() {
            platforms.push(PLATFORM_ARM64);
        }
        platforms
    }

    /// The compute capabilities compiled into the wheel of `platform`.
    pub fn archs_for(&self, platform: &str) -> Vec<String> {
        match (&self.aarch64, platform) {
            (Some(aarch64), PLATFORM_ARM64) => aarch64.archs.clone(),
            _ => self.archs.clone(),
        }
    }
}

/// The aarch64 wheels of a torch CUDA variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aarch64Wheels {
    pub archs: Vec<String>,
    pub source: Vec<String>,
}

pub const PLATFORM_AMD64: &str = "linux/amd64";
pub const PLATFORM_ARM64: &str = "linux/arm64";

/// One torch release with the torchvision/torchaudio versions published beside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchRelease {
    pub torch: String,
    pub torchvision: String,
    #[serde(default)]
    pub torchaudio: Option<String>,
}

/// One CUDA toolkit release that nvidia/cuda publishes images for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaRelease {
    pub version: String,
    pub driver_min: DriverVersion,
    /// Ubuntu releases nvidia/cuda publishes images of this release for; empty when none are known.
    #[serde(default)]
    pub ubuntu: Vec<String>,
    /// The cuDNN flavour in nvidia/cuda tags (`cudnn8`, `cudnn9`, `cudnn`).
    #[serde(default)]
    pub cudnn_tag: Option<String>,
    #[serde(default)]
    pub brands: Option<String>,
    #[serde(default)]
    pub forward_compat_branches: Vec<u64>,
    /// Platforms nvidia/cuda publishes this release for.
    #[serde(default = "default_platforms")]
    pub platforms: Vec<String>,
    #[serde(default = "default_true")]
    pub verified: bool,
    #[serde(default)]
    pub note: Option<String>,
    pub source: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaFamily {
    pub major: u64,
    pub driver_min: DriverVersion,
    #[serde(default)]
    pub note: Option<String>,
    pub source: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaArchChange {
    pub cuda: String,
    #[serde(default)]
    pub adds: Vec<String>,
    #[serde(default)]
    pub drops: Vec<String>,
    #[serde(default = "default_true")]
    pub verified: bool,
    pub source: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsRelease {
    pub name: String,
    pub base: String,
    pub codename: String,
    pub glibc: String,
    pub python: String,
    pub source: Vec<String>,
}

fn default_true() -> bool {
    true
}

fn default_platforms() -> Vec<String> {
    vec![PLATFORM_AMD64.to_string()]
}

/// The whole knowledge file. Lists are kept in file order; lookups go through the methods.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knowledge {
    pub schema_version: u32,
    #[serde(default)]
    pub collected: Option<String>,
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    #[serde(default)]
    pub wheel_index: String,
    #[serde(default)]
    pub torch: Vec<TorchSeries>,
    #[serde(default)]
    pub cuda: Vec<CudaRelease>,
    #[serde(default)]
    pub brands: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub cuda_families: Vec<CudaFamily>,
    #[serde(default)]
    pub cuda_archs: Vec<CudaArchChange>,
    #[serde(default)]
    pub os: Vec<OsRelease>,
}

impl Knowledge {
    /// The embedded knowledge, parsed and checked. Panics only if the embedded file is broken,
    /// which the unit tests rule out.
    pub fn embedded() -> Knowledge {
        Self::parse(EMBEDDED, "embedded knowledge.yaml").expect("embedded knowledge.yaml is valid")
    }

    /// The embedded knowledge with the file at `path` merged over it. The file is read within
    /// [`yaml::LIMITS`], like the matrix.
    pub fn with_override(path: &Path) -> Result<Knowledge, KnowledgeError> {
        let origin = path.display().to_string();
        let bytes = yaml::read_bounded(path, &LIMITS)
            .map_err(|source| KnowledgeError::Read {
                path: origin.clone(),
                source,
            })?
            .map_err(|problem| KnowledgeError::located(&origin, problem))?;
        let text =
            yaml::decode(&bytes).map_err(|problem| KnowledgeError::located(&origin, problem))?;
        let extra = Self::parse_unchecked(text, &origin)?;
        let mut merged = Self::embedded();
        merged.merge(extra);
        merged.check(&path.display().to_string())?;
        Ok(merged)
    }

    pub fn parse(text: &str, origin: &str) -> Result<Knowledge, KnowledgeError> {
        let knowledge = Self::parse_unchecked(text, origin)?;
        knowledge.check(origin)?;
        Ok(knowledge)
    }

    /// Parses without the cross-reference checks (an override is checked after merging).
    fn parse_unchecked(text: &str, origin: &str) -> Result<Knowledge, KnowledgeError> {
        yaml::locate(text, &LIMITS, origin)
            .map_err(|problem| KnowledgeError::located(origin, problem))?;
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
        }
        merge_by(&mut self.torch, other.torch, |t| t.series.clone());
        merge_by(&mut self.cuda, other.cuda, |c| c.version.clone());
        merge_by(&mut self.cuda_families, other.cuda_families, |f| {
            f.major.to_string()
        });
        merge_by(&mut self.cuda_archs, other.cuda_archs, |a| a.cuda.clone());
        merge_by(&mut self.os, other.os, |o| o.name.clone());
    }

    /// Every version in the data parses, every source key is defined, every torch CUDA variant has
    /// a CUDA release to build on, and every brand list named exists.
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
        let check_sources = |what: &str, sources: &[String]| -> Result<(), KnowledgeError> {
            if sources.is_empty() {
                return Err(invalid(format!("{what} has no source")));
            }
            for source in sources {
                let key = source.split_whitespace().next().unwrap_or_default();
                if !self.sources.contains_key(key) {
                    return Err(invalid(format!(
                        "{what} cites unknown source `{key}` (define it under `sources`)"
                    )));
                }
            }
            Ok(())
        };
        for series in &self.torch {
            let what = format!("torch {}", series.series);
            TorchVersion::parse(&series.series).map_err(|source| KnowledgeError::Version {
                origin: origin.into(),
                source,
            })?;
            check_sources(&what, &series.source)?;
            version(&series.glibc_min, "glibc", 2)?;
            for python in series.python.iter().chain(&series.python_experimental) {
                version(python, "Python", 2)?;
            }
            for variant in &series.cuda {
                version(&variant.cuda, "CUDA", 2)?;
                version(&variant.cudnn, "cuDNN", 4)?;
                check_sources(&format!("{what} CUDA {}", variant.cuda), &variant.source)?;
                if let Some(aarch64) = &variant.aarch64 {
                    check_sources(
                        &format!("{what} CUDA {} aarch64", variant.cuda),
                        &aarch64.source,
                    )?;
                }
                if self.cuda_release_for(&variant.cuda).is_none() {
                    return Err(invalid(format!(
                        "{what} CUDA {} has no entry under `cuda` to build on",
                        variant.cuda
                    )));
                }
            }
            if !series.cuda.iter().any(|c| c.cuda == series.default_cuda) {
                return Err(invalid(format!(
                    "{what}: default_cuda {} is not one of its variants",
                    series.default_cuda
                )));
            }
            for release in &series.releases {
                let parsed = TorchVersion::parse(&release.torch).map_err(|source| {
                    KnowledgeError::Version {
                        origin: origin.into(),
                        source,
                    }
                })?;
                if parsed.series() != series.series || parsed.is_series {
                    return Err(invalid(format!(
                        "{what}: release {} does not belong to the series",
                        release.torch
                    )));
                }
                version(&release.torchvision, "torchvision", 3)?;
                if let Some(audio) = &release.torchaudio {
                    version(audio, "torchaudio", 3)?;
                }
            }
        }
        for cuda in &self.cuda {
            version(&cuda.version, "CUDA", 3)?;
            check_sources(&format!("CUDA {}", cuda.version), &cuda.source)?;
            if let Some(platform) = cuda
                .platforms
                .iter()
                .find(|p| *p != PLATFORM_AMD64 && *p != PLATFORM_ARM64)
            {
                return Err(invalid(format!("CUDA {} lists unknown platform {platform} (known: {PLATFORM_AMD64}, {PLATFORM_ARM64})", cuda.version)));
            }
            if let Some(brands) = &cuda.brands {
                if !self.brands.contains_key(brands) {
                    return Err(invalid(format!(
                        "CUDA {} names brand list `{brands}` that is not defined",
                        cuda.version
                    )));
                }
            }
        }
        for family in &self.cuda_families {
            check_sources(&format!("CUDA {} family", family.major), &family.source)?;
        }
        for os in &self.os {
            version(&os.glibc, "glibc", 2)?;
            version(&os.python, "Python", 2)?;
            check_sources(&format!("OS {}", os.name), &os.source)?;
        }
        Ok(())
    }

    /// The torch series `series` (`2.7`).
    pub fn torch_series(&self, series: &str) -> Option<&TorchSeries> {
        self.torch.iter().find(|t| t.series == series)
    }

    /// The newest torch series in the data.
    pub fn newest_series(&self) -> Option<&TorchSeries> {
        self.torch
            .iter()
            .max_by_key(|t| TorchVersion::parse(&t.series).map(|v| v.version).ok())
    }

    /// The CUDA release to build on for `cuda`: the exact release when `cuda` has three parts,
    /// else the newest release of the `major.minor` line that has nvidia/cuda images (`12.6` →
    /// `12.6.3`), or the newest of the line when none has.
    pub fn cuda_release_for(&self, cuda: &str) -> Option<&CudaRelease> {
        let wanted = DottedVersion::parse_kind(cuda, "CUDA", 3).ok()?;
        let exact = wanted.parts().len() == 3;
        self.cuda
            .iter()
            .filter_map(|release| {
                Some((
                    DottedVersion::parse_kind(&release.version, "CUDA", 3).ok()?,
                    release,
                ))
            })
            .filter(|(version, _)| {
                if exact {
                    *version == wanted
                } else {
                    version.starts_with(&wanted)
                }
            })
            .max_by(|a, b| (!a.1.ubuntu.is_empty(), &a.0).cmp(&(!b.1.ubuntu.is_empty(), &b.0)))
            .map(|(_, release)| release)
    }

    /// The minor-version-compatibility driver floor of CUDA major `major`.
    pub fn family(&self, major: u64) -> Option<&CudaFamily> {
        self.cuda_families.iter().find(|f| f.major == major)
    }

    pub fn os(&self, name: &str) -> Option<&OsRelease> {
        self.os.iter().find(|o| o.name == name)
    }

    /// The newest CUDA toolkit (major.minor) whose toolkit driver minimum `driver` meets.
    pub fn newest_cuda_for_driver(&self, driver: &DriverVersion) -> Option<String> {
        self.cuda
            .iter()
            .filter(|c| c.verified)
            .filter(|c| *driver >= c.driver_min)
            .filter_map(|c| DottedVersion::parse_kind(&c.version, "CUDA", 3).ok())
            .max()
            .map(|v| v.major_minor())
    }

    /// The pip wheel index URL for CUDA `cuda` (`12.6` → `.../whl/cu126`).
    pub fn wheel_index_url(&self, cuda: &str) -> String {
        self.wheel_index.replace("{suffix}", &wheel_suffix(cuda))
    }
}

/// The wheel index suffix of a CUDA version: `cu` + major.minor without the dot (PT-GBBM).
pub fn wheel_suffix(cuda: &str) -> String {
    let parts: Vec<&str> = cuda.split('.').take(2).collect();
    format!("cu{}", parts.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_knowledge_is_valid_and_covers_torch_2_0_to_2_13() {
        let knowledge = Knowledge::embedded();
        for series in [
            "2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11",
            "2.12", "2.13",
        ] {
            assert!(
                knowledge.torch_series(series).is_some(),
                "torch {series} missing"
            );
        }
        assert_eq!(knowledge.newest_series().unwrap().series, "2.13");
        for family in [11, 12, 13] {
            assert!(knowledge.family(family).is_some());
        }
    }

    #[test]
    fn cuda_lines_resolve_to_the_newest_patch() {
        let knowledge = Knowledge::embedded();
        assert_eq!(
            knowledge.cuda_release_for("12.6").unwrap().version,
            "12.6.3"
        );
        assert_eq!(
            knowledge.cuda_release_for("12.6.3").unwrap().version,
            "12.6.3"
        );
        assert!(
            knowledge
                .cuda_release_for("12.6.1")
                .unwrap()
                .ubuntu
                .is_empty(),
            "12.6.1 has a driver minimum but no nvidia/cuda images"
        );
        assert_eq!(
            knowledge.cuda_release_for("13.0").unwrap().version,
            "13.0.0",
            "the newest 13.0 with images, not 13.0.2"
        );
        assert_eq!(
            knowledge.cuda_release_for("11.0").unwrap().version,
            "11.0.3"
        );
        assert!(
            knowledge.cuda_release_for("12.7").is_none(),
            "there was no CUDA 12.7"
        );
        assert_eq!(
            knowledge
                .cuda_release_for("13.0")
                .unwrap()
                .driver_min
                .as_str(),
            "580.65.06"
        );
    }

    #[test]
    fn driver_to_newest_cuda() {
        let knowledge = Knowledge::embedded();
        let newest = |d: &str| knowledge.newest_cuda_for_driver(&DriverVersion::parse(d).unwrap());
        assert_eq!(newest("535.104.05").as_deref(), Some("12.2"));
        assert_eq!(newest("590.44.01").as_deref(), Some("13.1"));
        assert_eq!(newest("450.80.02").as_deref(), Some("11.0"));
        assert_eq!(newest("440.33.01"), None);
        assert_eq!(newest("550.54.15").as_deref(), Some("12.4"));
        assert_eq!(newest("570.124.06").as_deref(), Some("12.8"));
        assert_eq!(newest("580.95.05").as_deref(), Some("13.0"));
    }

    #[test]
    fn wheel_suffixes() {
        assert_eq!(wheel_suffix("11.8"), "cu118");
        assert_eq!(wheel_suffix("12.6.3"), "cu126");
        assert_eq!(wheel_suffix("13.0"), "cu130");
        assert_eq!(
            Knowledge::embedded().wheel_index_url("12.8"),
            "https://download.pytorch.org/whl/cu128"
        );
    }

    #[test]
    fn overrides_replace_and_extend() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("extra.yaml");
        std::fs::write(
            &path,
            r#"schema_version: 1
sources: {MINE: "our internal wheel mirror audit"}
torch:
  - series: "2.14"
    python: ["3.10", "3.11", "3.12", "3.13", "3.14"]
    glibc_min: "2.28"
    default_cuda: "13.0"
    cuda:
      - {cuda: "13.0", cudnn: "9.24.0.43", source: [MINE]}
    releases:
      - {torch: "2.14.0", torchvision: "0.29.0"}
    source: [MINE]
"#,
        )
        .unwrap();
        let knowledge = Knowledge::with_override(&path).unwrap();
        assert_eq!(knowledge.newest_series().unwrap().series, "2.14");
        assert!(knowledge.torch_series("2.7").is_some());

        std::fs::write(
            &path,
            "schema_version: 1\ntorch:\n  - series: \"2.14\"\n    pythn: []\n",
        )
        .unwrap();
        let error = Knowledge::with_override(&path).unwrap_err().to_string();
        assert!(error.contains("extra.yaml:4:5"), "{error}");
        assert!(error.contains("pythn"), "{error}");
    }

    #[test]
    fn entries_without_a_known_source_are_refused() {
        let text = EMBEDDED.replace("source: [CUDA-RN, NVCUDA-IMG]}", "source: [NOWHERE]}");
        let error = Knowledge::parse(&text, "k.yaml").unwrap_err().to_string();
        assert!(error.contains("unknown source `NOWHERE`"), "{error}");
    }
}
