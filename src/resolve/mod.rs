//! Resolution: matrix + knowledge → image specs, and rejected cells with reasons a person can act
//! on. Pure: values in, values out, no I/O.
//!
//! A cell is one combination of the axes (torch × cuda × cudnn × python × os × variant), minus
//! `exclude` rules, plus `include` rules. Each cell is checked against the knowledge: does this
//! torch publish wheels for this CUDA, which cuDNN do they bundle, does the Python fit, does
//! NVIDIA publish a base image of that CUDA for that OS, is the glibc new enough, and (with
//! `--driver`) does the fleet's driver run it.

mod cells;
pub mod driver;
pub mod fingerprint;
pub mod lookup;
mod rules;
mod spec;
pub mod tags;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::knowledge::{CudaRelease, Knowledge, TorchCuda, TorchRelease, TorchSeries};
use crate::model::matrix::{Matrix, Variant};
use crate::model::version::{DottedVersion, DriverVersion, TorchVersion};
use cells::{expand, Cell};
use driver::driver_verdict;
use fingerprint::fingerprint;
use rules::check_cell;
use spec::build_spec;
use tags::TagFields;

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
    /// Pip requirement version for torchvision: exact, or `0.28.*` where only the series is known.
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
    /// Knowledge entries used that are marked unverified (allowed by `allow_unverified`).
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
    pub(crate) fn of_image(image: &ImageSpec, origin: &str, reason: String) -> Rejection {
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
pub(crate) struct Resolved {
    pub(crate) series: TorchSeries,
    pub(crate) release: TorchRelease,
    pub(crate) variant: TorchCuda,
    pub(crate) cuda_release: CudaRelease,
    pub(crate) os: String,
    pub(crate) python: String,
    pub(crate) variant_kind: Variant,
    pub(crate) platform: String,
    pub(crate) unverified: Vec<String>,
}

impl Resolved {
    /// Identity of the image apart from its variant.
    pub(crate) fn key(&self) -> (String, String, String, String, String) {
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
