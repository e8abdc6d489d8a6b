//! An image spec from a resolved cell: tags, base image, wheel index, driver minimums and the
//! content fingerprint over everything that determines the image's bytes. Pure.

use std::collections::BTreeMap;

use crate::model::axes::Platform;
use crate::model::digest::Digest;
use crate::model::knowledge::{wheel_suffix, Knowledge, PLATFORM_AMD64};
use crate::model::matrix::Matrix;
use crate::model::selftest_binary::binary_for;
use crate::model::version::{DottedVersion, TorchVersion};
use crate::resolve::driver::require_cuda;
use crate::resolve::fingerprint::fingerprint;
use crate::resolve::image::{ImageSpec, ResolveOptions, Resolved};
use crate::resolve::tags::{self, TagFields};

pub(super) fn build_spec(
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
        .expect("rules::cuda_base_release refuses releases without a driver minimum");
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
        platform: Platform(found.platform.clone()),
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
        selftest: binary_for(&found.cuda_release.version, &arch)
            .expect("rules::selftest_build checked the cell"),
        unverified: found.unverified.clone(),
        // Replaced below, once the inputs it covers are known.
        fingerprint: Digest::of(b""),
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
    inputs.insert("platform", spec.platform.to_string());
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
    inputs.insert("driver_min", spec.driver_min.to_string());
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
