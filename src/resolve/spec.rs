//! An image spec from a resolved cell: tags, base image, wheel index and what the image installs
//! (its lock's inputs), the apt mirrors of its build, driver minimums and the content fingerprint
//! over everything that determines the image's bytes. Pure.

use std::collections::BTreeMap;

use crate::model::axes::{Variant, VersionText};
use crate::model::digest::Digest;
use crate::model::extensions::Extensions;
use crate::model::http_url::HttpUrl;
use crate::model::knowledge::{wheel_suffix, Knowledge, PLATFORM_AMD64};
use crate::model::matrix::{BaseImageFields, DevelToolkit, Matrix, TorchWheels};
use crate::model::selftest_binary::binary_for;
use crate::resolve::bases::{pinned_from, BasePin};
use crate::resolve::driver::require_cuda;
use crate::resolve::fingerprint::fingerprint;
use crate::resolve::image::{ImageSpec, ResolveOptions, Resolved, ToolkitSource};
use crate::resolve::lock::{cuda_line_constraints, python_platform, LockSpec, ParentLock};
use crate::resolve::sources::{apt_rewrites, pip_indexes, plain_index};
use crate::resolve::tags::{self, TagFields};

/// The extras of NVIDIA's `cuda-toolkit` wheel a devel image installs with `devel_toolkit: pypi`:
/// nvcc and what it runs (crt, nvvm), the runtime headers and libraries, CCCL (Thrust, CUB),
/// the profiler API and culibos, which `torch.utils.cpp_extension` builds need.
pub(crate) const PYPI_TOOLKIT_EXTRAS: &str = "cccl,crt,cudart,culibos,nvcc,nvvm,profiler";

/// Whether an image reference names NVIDIA's CUDA base (`nvidia/cuda:13.0.0-base-ubuntu24.04`, or
/// the same repository under a mirror's host or path: `registry.example.com/hub/nvidia/cuda:…`).
fn is_nvidia_cuda(reference: &str) -> bool {
    let Ok(reference) = reference.parse::<imagegen_oci::Reference>() else {
        return false;
    };
    let repository = reference.name();
    repository == "nvidia/cuda" || repository.ends_with("/nvidia/cuda")
}

pub(super) fn build_spec(
    found: &Resolved,
    matrix: &Matrix,
    knowledge: &Knowledge,
    options: &ResolveOptions,
) -> ImageSpec {
    let major = found.cuda_release.version.major();
    // The base toolkit's Table 3 driver, or the wheel's own runtime's when that is newer.
    let driver_min = found
        .runtime_floor
        .as_ref()
        .map(|floor| floor.driver_min.clone())
        .or_else(|| found.cuda_release.driver_min.clone())
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
    let named_base = matrix.base_images.runtime_for(&BaseImageFields {
        cuda: &found.variant.cuda,
        cuda_full: &found.cuda_release.version,
        os: &found.os,
        arch: &arch,
    });
    // Forward compatibility needs NVIDIA's cuda-compat libraries, which nvidia/cuda bases (and
    // copies of them under another registry) install; a base of the team's own is not known to,
    // nor to hold a CUDA toolkit: only nvidia/cuda's is known to (its version.json).
    let compat_libraries = named_base.as_deref().is_none_or(is_nvidia_cuda);
    let base_cuda_toolkit = compat_libraries.then(|| found.cuda_release.version.clone());
    let base_reference = named_base.unwrap_or_else(|| {
        format!(
            "{base_registry}nvidia/cuda:{}-base-{}",
            found.cuda_release.version, found.os
        )
    });
    // A pinned base: its digest goes into `FROM`, or (daemon only) its image ID is checked.
    let base_pin = options.base_pins.get(&base_reference);
    let base_image = pinned_from(&base_reference, base_pin);
    let base_image_id = match base_pin {
        Some(BasePin::Daemon { image_id }) => Some(image_id.clone()),
        _ => None,
    };
    let wheel_index = match matrix.torch_wheels {
        TorchWheels::Pypi => plain_index(&matrix.mirrors),
        TorchWheels::Pytorch => {
            let torch_index_base = matrix.mirrors.torch_index.as_ref().map_or_else(
                || knowledge.wheel_index.replace("/{suffix}", ""),
                HttpUrl::to_string,
            );
            format!(
                "{}/{}",
                torch_index_base.trim_end_matches('/'),
                wheel_suffix(&found.variant.cuda)
            )
        }
    };
    let pip = pip_indexes(matrix.torch_wheels, &wheel_index, &matrix.mirrors);
    let requirements = match found.variant_kind {
        Variant::Runtime => runtime_requirements(found, matrix.torch_wheels),
        Variant::Devel => devel_requirements(found, matrix.devel_toolkit),
    };
    let toolkit = (found.variant_kind == Variant::Devel).then(|| match matrix.devel_toolkit {
        DevelToolkit::Apt => ToolkitSource::Apt,
        DevelToolkit::Pypi => ToolkitSource::Pypi {
            folder: knowledge
                .family(major)
                .and_then(|family| family.pypi_toolkit.clone())
                .unwrap_or_default(),
        },
    });
    // Debian has no nvidia/cuda images, so no NVIDIA repository in its sources; Ubuntu bases
    // (nvidia/cuda or a copy of it) have one.
    let apt_rewrites = apt_rewrites(&found.os, &arch, !found.os.is_debian(), &matrix.mirrors);
    let mut spec = ImageSpec {
        name: tags::folder_name(&tag),
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
        base_cuda_toolkit,
        cuda_runtime: None,
        cuda_nvcc: None,
        ensurepip_pinned: Vec::new(),
        cudnn: found.variant.cudnn.clone(),
        nccl: found.variant.nccl.clone(),
        python: VersionText::of(&found.python),
        os: found.os.clone(),
        base_image,
        base_image_id,
        parent: None,
        parent_tag: None,
        driver_min: driver_min.clone(),
        driver_min_from: match &found.runtime_floor {
            Some(floor) => format!("torch wheel's CUDA {} runtime", floor.release),
            None => format!("CUDA {} toolkit", found.cuda_release.version),
        },
        driver_min_compat: knowledge
            .family(major)
            .map(|f| f.driver_min.clone())
            .unwrap_or(driver_min),
        forward_compat_branches: if compat_libraries {
            found
                .cuda_release
                .forward_compat_branches(&found.platform)
                .to_vec()
        } else {
            Vec::new()
        },
        require_cuda: require_cuda(
            &found.variant.cuda,
            &found.cuda_release,
            &found.platform,
            compat_libraries,
            knowledge,
        ),
        archs: found.variant.archs_for(&found.platform),
        wheel_index,
        torch_wheels: matrix.torch_wheels,
        pip,
        requirements,
        lock: None,
        lock_digest: None,
        apt_rewrites,
        toolkit,
        selftest: binary_for(&found.cuda_release.version, &arch)
            .expect("rules::selftest_build checked the cell"),
        unverified: found.unverified.clone(),
        extensions: matrix.extensions_for(
            found.release.torch.torch(),
            &found.variant.cuda,
            found.python.as_str(),
            &found.os,
            found.variant_kind,
            &found.platform,
        ),
        flavour: None,
        // Replaced below, once the inputs it covers are known.
        fingerprint: Digest::of(b""),
        inputs: BTreeMap::new(),
        tag_fields,
    };
    if !options.no_lock {
        // A devel image's parent is known only once every spec is built: `resolve` sets it then.
        let platform = python_platform(&arch, &found.glibc);
        spec.lock = Some(lock_spec(&spec, platform, None));
        spec.lock_digest = options.locks.get(&spec.name).cloned();
        if let Some(locked) = options.locked_cuda.get(&spec.name) {
            spec.cuda_runtime = locked.runtime.clone();
            spec.cuda_nvcc = locked.nvcc.clone();
        }
        if let Some(pinned) = options.locked_ensurepip.get(&spec.name) {
            spec.ensurepip_pinned = pinned.clone();
        }
    }
    spec.inputs = fingerprint_inputs(&spec, matrix, options);
    spec.fingerprint = fingerprint(&spec.inputs);
    spec
}

/// torch and its companions, exact: with PyTorch's index the `+cuXYZ` builds, from a plain index
/// the release itself (its CUDA is the one PyPI carries, checked by the rules).
fn runtime_requirements(found: &Resolved, torch_wheels: TorchWheels) -> Vec<String> {
    let local = match torch_wheels {
        TorchWheels::Pytorch => format!("+{}", wheel_suffix(&found.variant.cuda)),
        TorchWheels::Pypi => String::new(),
    };
    let mut requirements = vec![
        format!("torch=={}{local}", found.release.torch),
        format!("torchvision=={}{local}", found.release.torchvision),
    ];
    if let Some(audio) = &found.release.torchaudio {
        requirements.push(format!("torchaudio=={audio}{local}"));
    }
    requirements
}

/// What a devel image adds: ninja for `torch.utils.cpp_extension`, and with `devel_toolkit: pypi`
/// the CUDA toolkit's wheels of the image's CUDA line (the runtime lock pins the exact release).
fn devel_requirements(found: &Resolved, toolkit: DevelToolkit) -> Vec<String> {
    let mut requirements = Vec::new();
    if toolkit == DevelToolkit::Pypi {
        requirements.push(format!(
            "cuda-toolkit[{PYPI_TOOLKIT_EXTRAS}]=={}.*",
            found.variant.cuda
        ));
    }
    requirements.push("ninja".to_string());
    requirements
}

/// The lock spec of `spec`. A devel image's lock installs its runtime image's requirements too
/// (pip finds them installed, so nothing changes) and is resolved against the runtime's lock.
pub(super) fn lock_spec(
    spec: &ImageSpec,
    python_platform: String,
    parent: Option<(ParentLock, Vec<String>)>,
) -> LockSpec {
    let (parent, mut requirements) = match parent {
        Some((parent, runtime_requirements)) => (Some(parent), runtime_requirements),
        None => (None, Vec::new()),
    };
    requirements.extend(spec.requirements.iter().cloned());
    LockSpec::new(
        requirements,
        cuda_line_constraints(&spec.cuda),
        spec.pip.clone(),
        &spec.python,
        python_platform,
        parent,
    )
    .with_extras(
        spec.extensions.pip.clone(),
        spec.extensions.extra_indexes.clone(),
    )
}

/// The fingerprint inputs of an image's additions, each present only when the image has it, so
/// an image without additions keeps its fingerprint and changing one addition rebuilds exactly
/// the images that have it (`plan` names the input).
pub(super) fn extension_inputs(
    extensions: &Extensions,
    options: &ResolveOptions,
) -> Vec<(String, String)> {
    let mut inputs = Vec::new();
    let mut add = |key: &str, value: String| {
        if !value.is_empty() {
            inputs.push((format!("ext.{key}"), value));
        }
    };
    add("pip", extensions.pip.join("\n"));
    add(
        "extra_indexes",
        extensions
            .extra_indexes
            .iter()
            .map(|index| index.url.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    add("apt", extensions.apt.join("\n"));
    if let Some(steps) = &extensions.steps {
        add(
            "steps",
            format!(
                "{steps} {}",
                options
                    .fragments
                    .get(steps)
                    .map(Digest::as_str)
                    .unwrap_or("unread")
            ),
        );
    }
    let lines = |map: &BTreeMap<String, String>| -> String {
        map.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    };
    add("env", lines(&extensions.env));
    add("labels", lines(&extensions.labels));
    if let Some(user) = &extensions.user {
        add(
            "user",
            format!("{} {}:{} {}", user.name, user.uid, user.gid, user.home()),
        );
    }
    add("workdir", extensions.workdir.clone().unwrap_or_default());
    inputs
}

fn tag_fields(found: &Resolved) -> TagFields {
    TagFields {
        torch: found.order.torch.clone(),
        cuda: found.variant.cuda.clone(),
        cudnn: found.variant.cudnn.clone(),
        python: found.python.clone(),
        variant: found.variant_kind,
        os: found.os.clone(),
        os_release: found.order.os.clone(),
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
    inputs.insert("torch", spec.torch.to_string());
    inputs.insert("torchvision", spec.torchvision.to_string());
    inputs.insert(
        "torchaudio",
        spec.torchaudio
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    );
    inputs.insert("cuda", spec.cuda.to_string());
    inputs.insert("cuda_full", spec.cuda_full.to_string());
    inputs.insert("cudnn", spec.cudnn.to_string());
    inputs.insert("python", spec.python.to_string());
    inputs.insert("os", spec.os.to_string());
    inputs.insert("base_image", spec.base_image.clone());
    if let Some(image_id) = &spec.base_image_id {
        inputs.insert("base_image_id", image_id.to_string());
    }
    inputs.insert("require_cuda", spec.require_cuda.clone());
    inputs.insert("driver_min", spec.driver_min.to_string());
    inputs.insert("wheel_index", spec.wheel_index.clone());
    inputs.insert("selftest", spec.selftest.clone());
    inputs.insert("pip_indexes", spec.pip.all().join(" "));
    inputs.insert("requirements", spec.requirements.join(" "));
    inputs.insert(
        "apt_mirrors",
        spec.apt_rewrites
            .iter()
            .map(|rewrite| format!("{}\n", rewrite.expression))
            .collect(),
    );
    inputs.insert(
        "lock",
        match (&spec.lock, &spec.lock_digest) {
            (None, _) => "none".to_string(),
            (Some(_), None) => "missing".to_string(),
            (Some(_), Some(digest)) => digest.to_string(),
        },
    );
    inputs.insert(
        "ca_bundle",
        options
            .ca_bundle
            .as_ref()
            .map(Digest::to_string)
            .unwrap_or_default(),
    );
    if let Some(toolkit) = &spec.toolkit {
        inputs.insert(
            "toolkit",
            match toolkit {
                ToolkitSource::Apt => "apt".to_string(),
                ToolkitSource::Pypi { folder } => format!("pypi {folder}"),
            },
        );
    }
    inputs.insert(
        "labels",
        matrix
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect(),
    );
    inputs.insert("templates", options.template_digest.clone());
    let mut inputs: BTreeMap<String, String> = inputs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    inputs.extend(extension_inputs(&spec.extensions, options));
    inputs
}
