//! Resolution: matrix + knowledge → image specs, and rejected cells with reasons a person can act
//! on. Pure: values in, values out, no I/O.
//!
//! A cell is one combination of the axes (torch × cuda × cudnn × python × os × variant), minus
//! `exclude` rules, plus `include` rules. Each cell is checked against the knowledge: does this
//! torch publish wheels for this CUDA, which cuDNN do they bundle, does the Python fit, does
//! NVIDIA publish a base image of that CUDA for that OS, is the glibc new enough, and (with
//! `--driver`) does the fleet's driver run it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::compat::{
    wheel_suffix, CudaRelease, Knowledge, TorchCuda, TorchRelease, PLATFORM_AMD64,
};
use crate::fingerprint::fingerprint;
use crate::matrix::{CellRule, Matrix, Variant};
use crate::tags::{self, TagFields};
use crate::version::{DottedVersion, DriverVersion, TorchVersion};

/// One image imagegen will render and build.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageSpec {
    /// Directory name under `images/`; equal to the full tag.
    pub name: String,
    /// `registry/repository`, e.g. `ghcr.io/acme/pytorch`.
    pub repository: String,
    /// The immutable full tag.
    pub tag: String,
    /// Moving aliases this image currently earns.
    pub aliases: Vec<String>,
    pub variant: Variant,
    /// `linux/amd64` or `linux/arm64`.
    pub platform: String,
    /// With several platforms: the full tag of the OCI image index this per-platform image
    /// belongs to (`imagegen publish` assembles it); `tag` then carries an `-amd64`/`-arm64` suffix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    pub torch: String,
    /// The exact torchvision release that pins this torch.
    pub torchvision: String,
    pub torchaudio: Option<String>,
    /// CUDA of the torch wheel, major.minor.
    pub cuda: String,
    /// The CUDA toolkit release of the base image (`12.6.3`).
    pub cuda_full: String,
    /// cuDNN bundled by the torch wheel.
    pub cudnn: String,
    pub nccl: Option<String>,
    pub python: String,
    pub os: String,
    /// The image this one is built `FROM`.
    pub base_image: String,
    /// For devel images, the name of the runtime image it builds on.
    pub parent: Option<String>,
    /// Toolkit driver minimum for `cuda_full` (full feature set).
    pub driver_min: String,
    /// Minor-version-compatibility driver minimum of the CUDA major (limited feature set).
    pub driver_min_compat: String,
    /// Driver branches that run the image through forward compatibility on data-center GPUs.
    pub forward_compat_branches: Vec<u64>,
    /// The `NVIDIA_REQUIRE_CUDA` value.
    pub require_cuda: String,
    /// GPU compute capabilities compiled into the torch wheel.
    pub archs: Vec<String>,
    /// The pip index the torch wheels come from.
    pub wheel_index: String,
    /// Which gpu-selftest build the image carries (one per CUDA major).
    pub selftest: String,
    /// Knowledge used that no primary source confirms: entries marked unverified (allowed by
    /// `allow_unverified`) and single unconfirmed fields (such as an arch list).
    pub unverified: Vec<String>,
    /// sha256 over everything that determines the image's content.
    pub fingerprint: String,
    /// What the fingerprint covers, by name (kept in the manifest so `plan` can say what changed).
    #[serde(skip)]
    pub inputs: BTreeMap<String, String>,
    /// What the tag and alias rules read, kept so aliases are computed from the same values.
    #[serde(skip)]
    pub tag_fields: TagFields,
}

/// A cell that cannot be built, with the values it was given and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    pub torch: String,
    pub cuda: String,
    pub cudnn: Option<String>,
    pub python: Option<String>,
    pub os: String,
    pub variant: Variant,
    pub platform: String,
    /// `axes` or `include[N]`.
    pub origin: String,
    /// `matrix.yaml:LINE` of the include rule that asked for the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub reason: String,
}

impl Rejection {
    /// A resolved image rejected after the fact (by the driver filter or a tag collision).
    fn of_image(image: &ImageSpec, origin: &str, reason: String) -> Rejection {
        Rejection {
            torch: image.torch.clone(),
            cuda: image.cuda.clone(),
            cudnn: Some(image.cudnn.clone()),
            python: Some(image.python.clone()),
            os: image.os.clone(),
            variant: image.variant,
            platform: image.platform.clone(),
            origin: origin.into(),
            location: None,
            reason,
        }
    }
}

/// The outcome of resolving a matrix.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Resolution {
    pub images: Vec<ImageSpec>,
    pub rejected: Vec<Rejection>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Settings that are not part of the matrix.
#[derive(Debug, Clone, Default)]
pub struct ResolveOptions {
    /// Only keep images this driver runs.
    pub driver: Option<DriverVersion>,
    /// With `driver`: accept older driver branches that forward compatibility serves
    /// (data-center GPUs with the cuda-compat package, which nvidia/cuda bases carry).
    pub forward_compat: bool,
    /// Digest of the templates in use, so a template change changes every fingerprint.
    pub template_digest: String,
}

/// One requested combination before it is checked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Cell {
    torch: String,
    cuda: String,
    cudnn: Option<String>,
    python: Option<String>,
    os: String,
    variant: Variant,
    platform: String,
    origin: String,
    location: Option<String>,
}

impl Cell {
    fn reject(&self, reason: String) -> Rejection {
        Rejection {
            torch: self.torch.clone(),
            cuda: self.cuda.clone(),
            cudnn: self.cudnn.clone(),
            python: self.python.clone(),
            os: self.os.clone(),
            variant: self.variant,
            platform: self.platform.clone(),
            origin: self.origin.clone(),
            location: self.location.clone(),
            reason,
        }
    }
}

/// Resolves `matrix` against `knowledge`.
pub fn resolve(matrix: &Matrix, knowledge: &Knowledge, options: &ResolveOptions) -> Resolution {
    let mut resolution = Resolution::default();
    let mut resolved: Vec<(Cell, Resolved)> = Vec::new();
    for cell in expand(matrix, &mut resolution) {
        match check_cell(&cell, matrix, knowledge) {
            Ok(found) => resolved.push((cell, found)),
            Err(reason) => resolution.rejected.push(cell.reject(reason)),
        }
    }

    // Devel images build on their runtime image: make sure it is there.
    let runtime_keys: BTreeSet<_> = resolved
        .iter()
        .filter(|(c, _)| c.variant == Variant::Runtime)
        .map(|(_, r)| r.key())
        .collect();
    let mut implied = Vec::new();
    for (cell, found) in &resolved {
        if cell.variant == Variant::Devel && !runtime_keys.contains(&found.key()) {
            let mut runtime_cell = cell.clone();
            runtime_cell.variant = Variant::Runtime;
            resolution.warnings.push(format!(
                "torch {} CUDA {} {}: the runtime image is added because the devel image builds on it",
                found.release.torch, found.variant.cuda, cell.os
            ));
            implied.push((
                runtime_cell,
                Resolved {
                    variant_kind: Variant::Runtime,
                    ..found.clone()
                },
            ));
        }
    }
    resolved.extend(implied);
    for (cell, found) in &mut resolved {
        found.variant_kind = cell.variant;
    }

    // The same image may be asked for twice (`2.7` and `2.7.1`): keep the first.
    let mut seen = BTreeSet::new();
    resolved.retain(|(_, found)| seen.insert((found.key(), found.variant_kind)));
    resolved.sort_by_key(|(_, found)| sort_key(found));

    let mut images: Vec<ImageSpec> = resolved
        .iter()
        .map(|(_, found)| build_spec(found, matrix, knowledge, options))
        .collect();

    // Devel images point at their runtime image, and their fingerprint covers the parent's.
    let runtime_by_key: BTreeMap<_, (String, String, String)> = images
        .iter()
        .zip(&resolved)
        .filter(|(image, _)| image.variant == Variant::Runtime)
        .map(|(image, (_, found))| {
            (
                found.key(),
                (
                    image.name.clone(),
                    format!("{}:{}", image.repository, image.tag),
                    image.fingerprint.clone(),
                ),
            )
        })
        .collect();
    for (image, (_, found)) in images.iter_mut().zip(&resolved) {
        if image.variant == Variant::Devel {
            if let Some((name, reference, parent_fingerprint)) = runtime_by_key.get(&found.key()) {
                image.parent = Some(name.clone());
                image.base_image = reference.clone();
                image.inputs.insert("base_image".into(), reference.clone());
                image
                    .inputs
                    .insert("parent_fingerprint".into(), parent_fingerprint.clone());
                image.fingerprint = fingerprint(&image.inputs);
            }
        }
    }

    reject_tag_collisions(&mut images, &mut resolution);

    if let Some(driver) = &options.driver {
        let mut kept = Vec::new();
        for image in images {
            match driver_verdict(&image, driver, options.forward_compat, knowledge) {
                None => kept.push(image),
                Some(reason) => resolution
                    .rejected
                    .push(Rejection::of_image(&image, "driver", reason)),
            }
        }
        images = kept;
    }

    assign_aliases(&mut images, matrix);
    resolution.images = images;
    resolution
}

/// What a cell resolved to in the knowledge.
#[derive(Debug, Clone)]
struct Resolved {
    release: TorchRelease,
    variant: TorchCuda,
    cuda_release: CudaRelease,
    os: String,
    python: String,
    variant_kind: Variant,
    platform: String,
    unverified: Vec<String>,
}

impl Resolved {
    /// Identity of the image apart from its variant.
    fn key(&self) -> (String, String, String, String, String) {
        (
            self.release.torch.clone(),
            self.cuda_release.version.clone(),
            self.os.clone(),
            self.python.clone(),
            self.platform.clone(),
        )
    }
}

fn sort_key(
    found: &Resolved,
) -> (
    semver::Version,
    DottedVersion,
    DottedVersion,
    String,
    Variant,
    String,
) {
    let version = |text: &str| {
        DottedVersion::parse_kind(text, "", 4)
            .unwrap_or_else(|_| DottedVersion::parse_kind("0", "", 1).unwrap())
    };
    (
        TorchVersion::parse(&found.release.torch)
            .map(|t| t.version)
            .unwrap_or_else(|_| semver::Version::new(0, 0, 0)),
        version(&found.cuda_release.version),
        version(found.os.trim_start_matches("ubuntu")),
        found.python.clone(),
        found.variant_kind,
        found.platform.clone(),
    )
}

/// The cells the matrix asks for: axes minus excludes, plus includes.
fn expand(matrix: &Matrix, resolution: &mut Resolution) -> Vec<Cell> {
    let optional = |values: &[crate::matrix::VersionText]| -> Vec<Option<String>> {
        if values.is_empty() {
            vec![None]
        } else {
            values.iter().map(|v| Some(v.0.clone())).collect()
        }
    };
    let mut cells = Vec::new();
    for torch in &matrix.torch {
        for cuda in &matrix.cuda {
            for cudnn in optional(&matrix.cudnn) {
                for python in optional(&matrix.python) {
                    for os in &matrix.os {
                        for variant in &matrix.variants {
                            for platform in &matrix.platforms {
                                let cell = Cell {
                                    torch: torch.0.clone(),
                                    cuda: cuda.0.clone(),
                                    cudnn: cudnn.clone(),
                                    python: python.clone(),
                                    os: os.0.clone(),
                                    variant: *variant,
                                    platform: platform.0.clone(),
                                    origin: "axes".into(),
                                    location: None,
                                };
                                if !matrix.exclude.iter().any(|rule| rule_matches(rule, &cell)) {
                                    cells.push(cell);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for (index, rule) in matrix.include.iter().enumerate() {
        let origin = format!("include[{index}]");
        let (Some(torch), Some(cuda), Some(os)) = (&rule.torch, &rule.cuda, &rule.os) else {
            resolution.warnings.push(format!(
                "{origin} is ignored: an include must name torch, cuda and os"
            ));
            continue;
        };
        for variant in rule
            .variants
            .clone()
            .unwrap_or_else(|| matrix.variants.clone())
        {
            for platform in rule
                .platforms
                .clone()
                .unwrap_or_else(|| matrix.platforms.clone())
            {
                cells.push(Cell {
                    torch: torch.0.clone(),
                    cuda: cuda.0.clone(),
                    cudnn: rule.cudnn.as_ref().map(|v| v.0.clone()),
                    python: rule.python.as_ref().map(|v| v.0.clone()),
                    os: os.0.clone(),
                    variant,
                    platform: platform.0.clone(),
                    origin: origin.clone(),
                    location: matrix.include_locations.get(index).cloned(),
                });
            }
        }
    }
    cells
}

/// Whether an exclude rule covers a cell. Versions match by prefix (`2.7` covers `2.7.1`).
fn rule_matches(rule: &CellRule, cell: &Cell) -> bool {
    let version_matches = |rule_value: &Option<crate::matrix::VersionText>,
                           value: &Option<String>| match (
        rule_value, value,
    ) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(wanted), Some(value)) => match (
            DottedVersion::parse_kind(&wanted.0, "", 4),
            DottedVersion::parse_kind(value, "", 4),
        ) {
            (Ok(wanted), Ok(value)) => value.starts_with(&wanted) || wanted.starts_with(&value),
            _ => false,
        },
    };
    version_matches(&rule.torch, &Some(cell.torch.clone()))
        && version_matches(&rule.cuda, &Some(cell.cuda.clone()))
        && version_matches(&rule.cudnn, &cell.cudnn)
        && version_matches(&rule.python, &cell.python)
        && rule.os.as_ref().is_none_or(|os| os.0 == cell.os)
        && rule
            .variants
            .as_ref()
            .is_none_or(|variants| variants.contains(&cell.variant))
        && rule
            .platforms
            .as_ref()
            .is_none_or(|platforms| platforms.iter().any(|p| p.0 == cell.platform))
}

/// Checks one cell against the knowledge; the error is the reason shown to the user.
fn check_cell(cell: &Cell, matrix: &Matrix, knowledge: &Knowledge) -> Result<Resolved, String> {
    let mut unverified = Vec::new();
    let torch = TorchVersion::parse(&cell.torch).map_err(|e| e.to_string())?;
    let series = knowledge.torch_series(&torch.series()).ok_or_else(|| {
        let known: Vec<&str> = knowledge.torch.iter().map(|t| t.series.as_str()).collect();
        format!(
            "torch {} is not in the compatibility knowledge (it knows {}); add it to a --knowledge file with its source",
            cell.torch,
            known.join(", ")
        )
    })?;
    let release = if torch.is_series {
        series
            .releases
            .iter()
            .max_by_key(|r| TorchVersion::parse(&r.torch).map(|t| t.version).ok())
            .ok_or_else(|| format!("torch {} has no releases in the knowledge", series.series))?
    } else {
        series
            .releases
            .iter()
            .find(|r| r.torch == torch.version.to_string())
            .ok_or_else(|| {
                let known: Vec<&str> = series.releases.iter().map(|r| r.torch.as_str()).collect();
                format!(
                    "torch {} is not a known release (torch {} has {})",
                    cell.torch,
                    series.series,
                    known.join(", ")
                )
            })?
    };
    let wanted_cuda =
        DottedVersion::parse_kind(&cell.cuda, "CUDA", 3).map_err(|e| e.to_string())?;
    let published: Vec<String> = series
        .cuda
        .iter()
        .filter(|c| c.verified)
        .map(|c| wheel_suffix(&c.cuda))
        .collect();
    let variant = series
        .cuda
        .iter()
        .find(|c| c.cuda == wanted_cuda.major_minor())
        .ok_or_else(|| {
            let other_torch: Vec<&str> = knowledge
                .torch
                .iter()
                .filter(|t| {
                    t.cuda
                        .iter()
                        .any(|c| c.verified && c.cuda == wanted_cuda.major_minor())
                })
                .map(|t| t.series.as_str())
                .collect();
            let alternative = if other_torch.is_empty() {
                String::new()
            } else {
                format!(
                    "; CUDA {} wheels exist for torch {}",
                    wanted_cuda.major_minor(),
                    other_torch.join(", ")
                )
            };
            format!(
                "torch {} has no CUDA {} wheels (it publishes {}){alternative}",
                release.torch,
                cell.cuda,
                published.join(", ")
            )
        })?;
    if !variant.verified {
        let note = variant.note.clone().unwrap_or_default();
        if !matrix.allow_unverified {
            return Err(format!(
                "torch {} CUDA {} wheels are UNVERIFIED in the knowledge ({note}); verified variants: {}; set `allow_unverified: true` to build it anyway",
                release.torch,
                variant.cuda,
                published.join(", ")
            ));
        }
        unverified.push(format!(
            "torch {} {}: {note}",
            release.torch,
            wheel_suffix(&variant.cuda)
        ));
    }
    let cuda_release = knowledge.cuda_release_for(&cell.cuda).ok_or_else(|| {
        let known: Vec<&str> = knowledge
            .cuda
            .iter()
            .filter(|c| c.version.starts_with(&wanted_cuda.major_minor()))
            .map(|c| c.version.as_str())
            .collect();
        format!(
            "CUDA {} has no nvidia/cuda base release in the knowledge (known for {}: {})",
            cell.cuda,
            wanted_cuda.major_minor(),
            known.join(", ")
        )
    })?;
    if cuda_release.driver_min.is_none() {
        return Err(format!(
            "CUDA {} has no toolkit driver minimum in NVIDIA's release notes (Table 3 has no row for it), so imagegen cannot say which drivers run it; use another {} release",
            cuda_release.version,
            wanted_cuda.major_minor()
        ));
    }
    if !cuda_release.verified {
        let note = cuda_release.note.clone().unwrap_or_default();
        if !matrix.allow_unverified {
            return Err(format!(
                "CUDA {} is UNVERIFIED in the knowledge ({note}); the driver minimum could be wrong; set `allow_unverified: true` to build it anyway",
                cuda_release.version
            ));
        }
        unverified.push(format!("CUDA {}: {note}", cuda_release.version));
    }
    if cuda_release.ubuntu.is_empty() && matrix.base_images.runtime.is_none() {
        let line = DottedVersion::parse_kind(&cuda_release.version, "CUDA", 3)
            .map(|v| v.major_minor())
            .unwrap_or_default();
        let with_images: Vec<&str> = knowledge
            .cuda
            .iter()
            .filter(|c| !c.ubuntu.is_empty() && c.version.starts_with(&format!("{line}.")))
            .map(|c| c.version.as_str())
            .collect();
        return Err(format!(
            "nvidia/cuda publishes no images of CUDA {} in the knowledge (CUDA {line} images: {})",
            cuda_release.version,
            if with_images.is_empty() {
                "none".to_string()
            } else {
                with_images.join(", ")
            }
        ));
    }
    if !variant.platforms().contains(&cell.platform.as_str()) {
        let with_platform: Vec<&str> = knowledge
            .torch
            .iter()
            .filter(|t| {
                t.cuda
                    .iter()
                    .any(|c| c.verified && c.platforms().contains(&cell.platform.as_str()))
            })
            .map(|t| t.series.as_str())
            .collect();
        return Err(format!(
            "torch {} publishes no {} CUDA {} wheels in the knowledge ({} CUDA wheels are recorded for torch {})",
            release.torch,
            cell.platform,
            variant.cuda,
            cell.platform,
            if with_platform.is_empty() { "none".to_string() } else { with_platform.join(", ") }
        ));
    }
    if !cuda_release.platforms.contains_key(&cell.platform) {
        return Err(format!(
            "nvidia/cuda {} has no {} images (it has {})",
            cuda_release.version,
            cell.platform,
            cuda_release.platforms().join(", ")
        ));
    }
    let (unconfirmed, note) = variant.unconfirmed_for(&cell.platform);
    if !unconfirmed.is_empty() {
        let fields: Vec<&str> = unconfirmed.iter().map(|f| f.name()).collect();
        unverified.push(format!(
            "torch {} {} {} {}: {}",
            release.torch,
            wheel_suffix(&variant.cuda),
            cell.platform,
            fields.join(", "),
            note.unwrap_or("not confirmed by a primary source")
        ));
    }
    let os = knowledge.os(&cell.os).ok_or_else(|| {
        let known: Vec<&str> = knowledge.os.iter().map(|o| o.name.as_str()).collect();
        format!(
            "OS {} is not in the knowledge (known: {})",
            cell.os,
            known.join(", ")
        )
    })?;
    let ubuntu = cell.os.trim_start_matches("ubuntu");
    if !cuda_release.ubuntu.iter().any(|u| u == ubuntu) && matrix.base_images.runtime.is_none() {
        let mut others: Vec<String> = knowledge
            .cuda
            .iter()
            .filter(|c| {
                c.verified
                    && c.ubuntu.iter().any(|u| u == ubuntu)
                    && series
                        .cuda
                        .iter()
                        .any(|v| v.verified && c.version.starts_with(&format!("{}.", v.cuda)))
            })
            .map(|c| {
                DottedVersion::parse_kind(&c.version, "", 3)
                    .map(|v| v.major_minor())
                    .unwrap_or_default()
            })
            .collect();
        // Several patch releases of a line can have images: name the line once.
        others.dedup();
        let hint = if others.is_empty() {
            String::new()
        } else {
            format!(
                ", or CUDA {} with torch {}",
                others.join("/"),
                series.series
            )
        };
        return Err(format!(
            "nvidia/cuda {} has no {} images (it has {}); use {}{hint}",
            cuda_release.version,
            cell.os,
            cuda_release
                .ubuntu
                .iter()
                .map(|u| format!("ubuntu{u}"))
                .collect::<Vec<_>>()
                .join(", "),
            cuda_release
                .ubuntu
                .iter()
                .map(|u| format!("ubuntu{u}"))
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    let glibc_min = variant.glibc_min.as_deref().unwrap_or(&series.glibc_min);
    let glibc_ok = matches!(
        (DottedVersion::parse_kind(&os.glibc, "", 2), DottedVersion::parse_kind(glibc_min, "", 2)),
        (Ok(have), Ok(need)) if have >= need
    );
    if !glibc_ok {
        return Err(format!(
            "torch {} wheels need glibc ≥ {glibc_min}; {} has {}",
            release.torch, cell.os, os.glibc
        ));
    }
    let python = match &cell.python {
        None => os.python.clone(),
        Some(wanted) if *wanted == os.python => wanted.clone(),
        Some(wanted) => {
            let fitting: Vec<&str> = knowledge
                .os
                .iter()
                .filter(|o| o.python == *wanted)
                .map(|o| o.name.as_str())
                .collect();
            let hint = if fitting.is_empty() {
                String::from("no known OS ships it")
            } else {
                format!("for Python {wanted} use {}", fitting.join(" or "))
            };
            return Err(format!(
                "{} ships Python {} and imagegen uses the OS Python; {hint}",
                cell.os, os.python
            ));
        }
    };
    if !series.python.contains(&python) {
        let experimental = if series.python_experimental.contains(&python) {
            " (only experimental wheels)"
        } else {
            ""
        };
        return Err(format!(
            "torch {} has no Python {python} wheels{experimental} (it supports {}–{}); {} uses Python {python}",
            release.torch,
            series.python.first().map(String::as_str).unwrap_or("?"),
            series.python.last().map(String::as_str).unwrap_or("?"),
            cell.os
        ));
    }
    if let Some(wanted) = &cell.cudnn {
        let wanted_version =
            DottedVersion::parse_kind(wanted, "cuDNN", 4).map_err(|e| e.to_string())?;
        let bundled =
            DottedVersion::parse_kind(&variant.cudnn, "cuDNN", 4).map_err(|e| e.to_string())?;
        if !bundled.starts_with(&wanted_version) {
            let matching: Vec<String> = knowledge
                .torch
                .iter()
                .flat_map(|t| t.cuda.iter().filter(|c| c.verified).map(move |c| (t, c)))
                .filter(|(_, c)| {
                    DottedVersion::parse_kind(&c.cudnn, "", 4)
                        .is_ok_and(|v| v.starts_with(&wanted_version))
                })
                .map(|(t, c)| format!("{}+{}", t.series, wheel_suffix(&c.cuda)))
                .collect();
            let hint = if matching.is_empty() {
                String::new()
            } else {
                format!("; cuDNN {wanted} comes with torch {}", matching.join(", "))
            };
            return Err(format!(
                "torch {}+{} bundles cuDNN {}, not {wanted} (torch pins its cuDNN; a different one cannot be swapped in){hint}",
                release.torch,
                wheel_suffix(&variant.cuda),
                variant.cudnn
            ));
        }
    }
    Ok(Resolved {
        release: release.clone(),
        variant: variant.clone(),
        cuda_release: cuda_release.clone(),
        os: cell.os.clone(),
        python,
        variant_kind: cell.variant,
        platform: cell.platform.clone(),
        unverified,
    })
}

/// The `NVIDIA_REQUIRE_CUDA` value: the CUDA floor, OR a whitelisted forward-compatibility branch
/// for each brand NVIDIA lists (space = OR, comma = AND, per nvidia-container-toolkit).
pub fn require_cuda(
    cuda_major_minor: &str,
    release: &CudaRelease,
    platform: &str,
    knowledge: &Knowledge,
) -> String {
    let mut value = format!("cuda>={cuda_major_minor}");
    if let Some(brands) = release
        .brands
        .as_ref()
        .and_then(|name| knowledge.brand_names(name))
    {
        for branch in release.forward_compat_branches(platform) {
            for brand in brands {
                value.push_str(&format!(
                    " brand={brand},driver>={branch},driver<{}",
                    branch + 1
                ));
            }
        }
    }
    value
}

fn build_spec(
    found: &Resolved,
    matrix: &Matrix,
    knowledge: &Knowledge,
    options: &ResolveOptions,
) -> ImageSpec {
    let cuda_version = DottedVersion::parse_kind(&found.cuda_release.version, "CUDA", 3)
        .expect("checked knowledge");
    let major = cuda_version.part(0);
    let driver_min = found
        .cuda_release
        .driver_min
        .clone()
        .expect("check_cell refuses releases without a driver minimum");
    let tag_fields = tag_fields(found);
    let full_tag = tags::full_tag(&matrix.tags.full, &tag_fields);
    let arch = found
        .platform
        .rsplit('/')
        .next()
        .unwrap_or(&found.platform)
        .to_string();
    // Per platform, images get an `-amd64`/`-arm64` tag; the full tag becomes their index.
    let (tag, index) = if matrix.multi_platform() {
        (format!("{full_tag}-{arch}"), Some(full_tag))
    } else {
        (full_tag, None)
    };
    let repository = format!("{}/{}", matrix.registry, matrix.repository);
    let base_registry = matrix
        .mirrors
        .base_registry
        .as_ref()
        .map(|r| format!("{r}/"))
        .unwrap_or_default();
    let base_image = match &matrix.base_images.runtime {
        Some(base) => base.clone(),
        None => format!(
            "{base_registry}nvidia/cuda:{}-base-{}",
            found.cuda_release.version, found.os
        ),
    };
    let torch_index_base = matrix
        .mirrors
        .torch_index
        .clone()
        .unwrap_or_else(|| knowledge.wheel_index.replace("/{suffix}", ""));
    let wheel_index = format!(
        "{}/{}",
        torch_index_base.trim_end_matches('/'),
        wheel_suffix(&found.variant.cuda)
    );
    let mut spec = ImageSpec {
        name: tag.clone(),
        repository,
        tag,
        aliases: Vec::new(),
        variant: found.variant_kind,
        platform: found.platform.clone(),
        index,
        torch: found.release.torch.clone(),
        torchvision: found.release.torchvision.clone(),
        torchaudio: found.release.torchaudio.clone(),
        cuda: found.variant.cuda.clone(),
        cuda_full: found.cuda_release.version.clone(),
        cudnn: found.variant.cudnn.clone(),
        nccl: found.variant.nccl.clone(),
        python: found.python.clone(),
        os: found.os.clone(),
        base_image,
        parent: None,
        driver_min: driver_min.clone(),
        driver_min_compat: knowledge
            .family(major)
            .map(|f| f.driver_min.clone())
            .unwrap_or(driver_min),
        forward_compat_branches: found
            .cuda_release
            .forward_compat_branches(&found.platform)
            .to_vec(),
        require_cuda: require_cuda(
            &found.variant.cuda,
            &found.cuda_release,
            &found.platform,
            knowledge,
        ),
        archs: found.variant.archs_for(&found.platform),
        wheel_index,
        selftest: if arch == "amd64" {
            format!("gpu-selftest-cu{major}")
        } else {
            format!("gpu-selftest-cu{major}-{arch}")
        },
        unverified: found.unverified.clone(),
        fingerprint: String::new(),
        inputs: BTreeMap::new(),
        tag_fields,
    };
    spec.inputs = fingerprint_inputs(&spec, matrix, options);
    spec.fingerprint = fingerprint(&spec.inputs);
    spec
}

fn tag_fields(found: &Resolved) -> TagFields {
    TagFields {
        torch: TorchVersion::parse(&found.release.torch)
            .map(|t| t.version)
            .unwrap_or_else(|_| semver::Version::new(0, 0, 0)),
        cuda: found.variant.cuda.clone(),
        cudnn: found.variant.cudnn.clone(),
        python: found.python.clone(),
        variant: found.variant_kind,
        os: found.os.clone(),
        // The default CUDA of a release is the one plain PyPI serves (`pip install torch==X`).
        is_default_cuda: found.release.pypi_cuda(PLATFORM_AMD64)
            == Some(found.variant.cuda.as_str()),
    }
}

/// Everything that determines the image's bytes, apart from the parent (added for devel images).
fn fingerprint_inputs(
    spec: &ImageSpec,
    matrix: &Matrix,
    options: &ResolveOptions,
) -> BTreeMap<String, String> {
    let mut inputs: BTreeMap<&str, String> = BTreeMap::new();
    inputs.insert("variant", spec.variant.to_string());
    inputs.insert("platform", spec.platform.clone());
    inputs.insert("torch", spec.torch.clone());
    inputs.insert("torchvision", spec.torchvision.clone());
    inputs.insert("torchaudio", spec.torchaudio.clone().unwrap_or_default());
    inputs.insert("cuda", spec.cuda.clone());
    inputs.insert("cuda_full", spec.cuda_full.clone());
    inputs.insert("cudnn", spec.cudnn.clone());
    inputs.insert("python", spec.python.clone());
    inputs.insert("os", spec.os.clone());
    inputs.insert("base_image", spec.base_image.clone());
    inputs.insert("require_cuda", spec.require_cuda.clone());
    inputs.insert("driver_min", spec.driver_min.clone());
    inputs.insert("wheel_index", spec.wheel_index.clone());
    inputs.insert("selftest", spec.selftest.clone());
    inputs.insert(
        "pip_index",
        matrix.mirrors.pip_index.clone().unwrap_or_default(),
    );
    inputs.insert("apt_mirror", matrix.mirrors.apt.clone().unwrap_or_default());
    inputs.insert(
        "labels",
        matrix
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect(),
    );
    inputs.insert("templates", options.template_digest.clone());
    inputs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// Two images must never share a full tag; when a custom template makes them, both are rejected.
fn reject_tag_collisions(images: &mut Vec<ImageSpec>, resolution: &mut Resolution) {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for image in images.iter() {
        *count.entry(image.tag.clone()).or_default() += 1;
    }
    images.retain(|image| {
        if count[&image.tag] == 1 {
            return true;
        }
        let reason = format!("several images would share the full tag {}; add the differing placeholder (e.g. {{python}}, {{cudnn}}) to tags.full", image.tag);
        resolution.rejected.push(Rejection::of_image(image, "tags", reason));
        false
    });
}

/// `None` when `driver` runs the image, else the reason it does not.
fn driver_verdict(
    image: &ImageSpec,
    driver: &DriverVersion,
    forward_compat: bool,
    knowledge: &Knowledge,
) -> Option<String> {
    let minimum = DriverVersion::parse(&image.driver_min).ok()?;
    if *driver >= minimum {
        return None;
    }
    if forward_compat && image.forward_compat_branches.contains(&driver.branch()) {
        return None;
    }
    let newest = knowledge.newest_cuda_for_driver(driver);
    let runs: Vec<String> = match &newest {
        Some(newest_cuda) => {
            let limit = DottedVersion::parse_kind(newest_cuda, "", 2).ok()?;
            knowledge
                .torch
                .iter()
                .filter_map(|t| {
                    let cudas: Vec<&str> = t
                        .cuda
                        .iter()
                        .filter(|c| {
                            c.verified
                                && DottedVersion::parse_kind(&c.cuda, "", 2)
                                    .is_ok_and(|v| v <= limit)
                        })
                        .map(|c| c.cuda.as_str())
                        .collect();
                    cudas
                        .last()
                        .map(|c| format!("{}+{}", t.series, wheel_suffix(c)))
                })
                .collect()
        }
        None => Vec::new(),
    };
    let mut reason = format!(
        "needs NVIDIA driver ≥ {} (CUDA {} toolkit driver); driver {driver} is older",
        image.driver_min, image.cuda_full
    );
    match &newest {
        Some(cuda) => reason.push_str(&format!(" and runs CUDA ≤ {cuda} images")),
        None => reason.push_str(" than every CUDA toolkit in the knowledge"),
    }
    if !runs.is_empty() {
        let shown: Vec<&String> = runs.iter().rev().take(3).collect();
        reason.push_str(&format!(
            " (e.g. torch {})",
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !forward_compat && image.forward_compat_branches.contains(&driver.branch()) {
        reason.push_str(&format!(
            "; on data-center GPUs forward compatibility serves R{} (pass --forward-compat)",
            driver.branch()
        ));
    } else if forward_compat && !image.forward_compat_branches.is_empty() {
        let branches: Vec<String> = image
            .forward_compat_branches
            .iter()
            .map(|b| format!("R{b}"))
            .collect();
        reason.push_str(&format!(
            "; forward compatibility covers only {}",
            branches.join(", ")
        ));
    }
    Some(reason)
}

fn assign_aliases(images: &mut [ImageSpec], matrix: &Matrix) {
    // Aliases name what a user pulls: the image, or with several platforms the index. Compute
    // them once per published tag, then give them to every platform image of that tag.
    let published = |image: &ImageSpec| image.index.clone().unwrap_or_else(|| image.tag.clone());
    let mut unique: Vec<&ImageSpec> = Vec::new();
    for image in images.iter() {
        if !unique.iter().any(|u| published(u) == published(image)) {
            unique.push(image);
        }
    }
    let fields: Vec<TagFields> = unique
        .iter()
        .map(|image| image.tag_fields.clone())
        .collect();
    let default_os = tags::default_os(
        &fields,
        matrix.tags.default_os.as_ref().map(|o| o.0.as_str()),
    );
    let by_published: BTreeMap<String, Vec<String>> =
        tags::aliases(&fields, default_os.as_deref(), matrix.tags.latest)
            .into_iter()
            .map(|(index, list)| (published(unique[index]), list))
            .collect();
    for image in images.iter_mut() {
        if let Some(list) = by_published.get(&published(image)) {
            image.aliases = list.clone();
        }
    }
}

#[cfg(test)]
mod tests;
