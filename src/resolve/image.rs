//! What resolution produces: the spec of every image imagegen will render and build, the cells
//! it rejected with the reason, and the settings that are not part of the matrix.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::axes::TorchWheels;
use crate::model::axes::{OsName, Platform, Variant, VersionText};
use crate::model::digest::Digest;
use crate::model::extensions::{Extensions, ExtraIndex};
use crate::model::flavours::Flavour;
use crate::model::knowledge::{CudaRelease, TorchCuda, TorchRelease};
use crate::model::version::{ComputeCapability, DottedVersion, DriverVersion, TorchText};

/// One image imagegen will render and build.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageSpec {
    /// Directory name under `images/`; equal to the full tag.
    pub(crate) name: String,
    /// `registry/repository`, e.g. `ghcr.io/acme/pytorch`.
    pub(crate) repository: String,
    /// The immutable full tag.
    pub(crate) tag: String,
    /// Moving aliases this image currently earns.
    pub(crate) aliases: Vec<String>,
    pub(crate) variant: Variant,
    /// `linux/amd64` or `linux/arm64`.
    pub(crate) platform: Platform,
    /// With several platforms: the full tag of the OCI image index this per-platform image
    /// belongs to (`imagegen publish` assembles it); `tag` then carries an `-amd64`/`-arm64` suffix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<String>,
    /// The torch release, as the knowledge writes it and parsed when it was read.
    pub(crate) torch: TorchText,
    /// The torchvision released beside this torch, exact (`0.28.0`).
    pub(crate) torchvision: VersionText,
    pub(crate) torchaudio: Option<VersionText>,
    /// CUDA of the torch wheel, major.minor.
    pub(crate) cuda: VersionText,
    /// The CUDA release line of the knowledge the cell resolved to (`12.6.3`): the nvidia/cuda
    /// base's tag, whatever base the image is built on.
    pub(crate) cuda_full: VersionText,
    /// The CUDA toolkit the base image holds (`/usr/local/cuda/version.json` of an nvidia/cuda
    /// base, `cuda_full`); `None` on a base the matrix names (`base_images`), whose contents
    /// imagegen does not know.
    pub(crate) base_cuda_toolkit: Option<VersionText>,
    /// The CUDA runtime torch loads: the version of the lock's `nvidia-cuda-runtime` wheel.
    pub(crate) cuda_runtime: Option<VersionText>,
    /// The nvcc a devel image holds from the toolkit wheels: the lock's `nvidia-cuda-nvcc`.
    pub(crate) cuda_nvcc: Option<VersionText>,
    /// The packages of `python3 -m venv` (pip, setuptools, wheel) the lock pins: a venv made on
    /// the host (`wheels: host`) has them uninstalled in the build, before the lock's come.
    pub(crate) ensurepip_pinned: Vec<String>,
    /// cuDNN bundled by the torch wheel.
    pub(crate) cudnn: VersionText,
    /// NCCL pinned by the torch wheel, where the knowledge records it.
    pub(crate) nccl: Option<VersionText>,
    pub(crate) python: VersionText,
    pub(crate) os: OsName,
    /// The image this one is built `FROM`: with a registry pin (`images/bases.lock`), the
    /// reference and its digest (`nvidia/cuda:13.0.0-base-ubuntu24.04@sha256:…`).
    pub(crate) base_image: String,
    /// The image ID a base only the daemon holds is pinned to; `build` checks it first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) base_image_id: Option<Digest>,
    /// For devel images, the name of the runtime image it builds on; for a flavour, the runtime
    /// or devel image it builds on.
    pub(crate) parent: Option<String>,
    /// The full tag of `parent` as it is pushed (its `{revision}` and `{date}` filled): the tag
    /// this image is built `FROM`, which a flavour's record names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) parent_tag: Option<String>,
    /// Toolkit driver minimum (full feature set) of `cuda_full`, or of the torch wheel's own CUDA
    /// runtime when that is a newer release (`driver_min_from`).
    pub(crate) driver_min: DriverVersion,
    /// What `driver_min` is the Table 3 driver of, for people: `CUDA 13.0.0 toolkit` or
    /// `torch wheel's CUDA 13.0.2 runtime`.
    pub(crate) driver_min_from: String,
    /// Minor-version-compatibility driver minimum of the CUDA major (limited feature set).
    pub(crate) driver_min_compat: DriverVersion,
    /// Driver branches that run the image through forward compatibility on data-center GPUs.
    pub(crate) forward_compat_branches: Vec<u64>,
    /// The `NVIDIA_REQUIRE_CUDA` value.
    pub(crate) require_cuda: String,
    /// GPU compute capabilities compiled into the torch wheel.
    pub(crate) archs: Vec<ComputeCapability>,
    /// The pip index the torch wheels come from.
    pub(crate) wheel_index: String,
    /// Where torch comes from: PyTorch's index (`torch==X+cuXYZ`) or a plain one (`torch==X`).
    pub(crate) torch_wheels: TorchWheels,
    /// The Python package indexes pip installs from (and uv locks against).
    pub(crate) pip: PipIndexes,
    /// What this image adds from the Python index, before locking: torch and its companions for
    /// runtime images, the build tools (and with `devel_toolkit: pypi` the CUDA toolkit) for devel.
    pub(crate) requirements: Vec<String>,
    /// What its lock is resolved from; `None` when the matrix's templates install without one.
    pub(crate) lock: Option<LockSpec>,
    /// sha256 of the lock on disk (`images/<name>/requirements.lock`), covered by the fingerprint.
    pub(crate) lock_digest: Option<Digest>,
    /// The apt hosts its build reaches that are rewritten to mirrors.
    pub(crate) apt_rewrites: Vec<AptRewrite>,
    /// Devel images: where nvcc and the CUDA headers come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) toolkit: Option<ToolkitSource>,
    /// Which gpu-selftest build the image carries (one per CUDA major).
    pub(crate) selftest: String,
    /// Knowledge entries used that are marked unverified (allowed by `allow_unverified`).
    pub(crate) unverified: Vec<String>,
    /// The team's own additions (`pip`, `apt`, `steps`, ...). A devel image holds only what it
    /// adds beyond its runtime image, which installed the rest.
    #[serde(skip_serializing_if = "Extensions::is_empty")]
    pub(crate) extensions: Extensions,
    /// A flavour image (`…-runtime-jupyter`): what it adds to its runtime image (`parent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) flavour: Option<Flavour>,
    /// sha256 over everything that determines the image's content.
    pub(crate) fingerprint: Digest,
    /// What the fingerprint covers, by name (kept in the manifest so `plan` can say what changed).
    #[serde(skip)]
    pub(crate) inputs: BTreeMap<String, String>,
    /// What the tag and alias rules read, kept so aliases are computed from the same values.
    #[serde(skip)]
    pub(crate) tag_fields: TagFields,
}

/// One apt host rewritten to a mirror.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct AptRewrite {
    /// The host as apt sources name it (`archive.ubuntu.com/ubuntu`), for the Dockerfile's comment.
    pub(crate) host: String,
    /// The `mirrors.*` key that names the mirror.
    pub(crate) key: String,
    /// A `sed -E` expression, `#`-delimited, that rewrites the host's URLs in apt's sources.
    pub(crate) expression: String,
}

/// The Python package indexes of an image: the one pip and uv read first, and the second one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PipIndexes {
    /// `--index-url`: PyTorch's index of the wheel's CUDA (`.../whl/cu130`), or the plain index.
    pub(crate) index_url: String,
    /// `--extra-index-url`: the plain index beside PyTorch's, when `mirrors.pip_index` is set.
    pub(crate) extra_index_url: Option<String>,
}

impl PipIndexes {
    /// Every index, first the one torch comes from.
    pub(crate) fn all(&self) -> Vec<&str> {
        let mut all = vec![self.index_url.as_str()];
        all.extend(self.extra_index_url.as_deref());
        all
    }
}

/// What an image's lock is resolved from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LockSpec {
    /// What the image installs, one requirement each (`torch==2.13.0`, `ninja`).
    pub(crate) requirements: Vec<String>,
    /// Versions the resolver must stay within (`nvidia-nvjitlink==13.0.*`).
    pub(crate) constraints: Vec<String>,
    /// Where the packages come from, as the Dockerfile's pip reads them.
    pub(crate) indexes: PipIndexes,
    /// The image's Python (`3.12`).
    pub(crate) python: String,
    /// uv's target platform: architecture and the OS's glibc (`x86_64-manylinux_2_39`).
    pub(crate) python_platform: String,
    /// For devel images: the runtime image whose lock constrains this one (its packages are
    /// installed already, so the devel lock keeps every one of them as it is).
    pub(crate) parent: Option<ParentLock>,
    /// The matrix's extra requirements (`pip:`), resolved together with `requirements` and
    /// within the pins the lock of `requirements` alone has, so they never move the torch stack.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) extras: Vec<String>,
    /// The matrix's extra indexes (`extra_indexes:`): URLs without credentials, and the names
    /// of the variables that hold them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) extra_indexes: Vec<ExtraIndex>,
    /// sha256 over all of the above: the first line of the lock.
    pub(crate) inputs_digest: Digest,
}

/// The runtime lock a devel lock is resolved against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ParentLock {
    /// The runtime image's name (its directory under `images/`).
    pub(crate) image: String,
    /// sha256 of its lock file; `None` while it has none.
    pub(crate) digest: Option<Digest>,
}

/// Where a devel image's CUDA compiler and headers come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub(crate) enum ToolkitSource {
    /// NVIDIA's apt repository: `cuda-nvcc-13-0` and friends.
    Apt,
    /// NVIDIA's toolkit wheels, which lay out one CUDA tree in `site-packages/nvidia/<folder>`.
    Pypi { folder: String },
}

/// A cell that cannot be built, with the values it was given and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    pub(crate) torch: TorchText,
    pub(crate) cuda: VersionText,
    pub(crate) cudnn: Option<VersionText>,
    pub(crate) python: Option<VersionText>,
    pub(crate) os: OsName,
    pub(crate) variant: Variant,
    pub(crate) platform: Platform,
    /// `axes` or `include[N]`.
    pub(crate) origin: String,
    /// `matrix.yaml:LINE` of the include rule that asked for the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) location: Option<String>,
    pub(crate) reason: String,
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
    pub(crate) warnings: Vec<String>,
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
    /// The images' templates install without a lock (templates of your own, `lock: false`).
    pub no_lock: bool,
    /// sha256 of each image's lock on disk, by image name: the fingerprint covers it, and a devel
    /// image's lock is resolved against its runtime image's.
    pub locks: BTreeMap<String, Digest>,
    /// sha256 of the matrix's CA bundle (`ca_bundle`), which goes into every image.
    pub ca_bundle: Option<Digest>,
    /// The CUDA wheels each image's lock pins, by image name (read from the locks on disk).
    pub locked_cuda: BTreeMap<String, LockedCuda>,
    /// The packages of `python3 -m venv` each image's lock pins (`resolve::lock::locked_ensurepip`).
    pub locked_ensurepip: BTreeMap<String, Vec<String>>,
    /// Today, in days since 1970-01-01, to judge ends of life by (`None` judges none), and the
    /// day `{date}` gives new content (1970-01-01 when `None`).
    pub today: Option<i64>,
    /// The fingerprint of every image the manifest records as built, by full tag: `{revision}`
    /// and `{date}` keep the recorded ones for the same content and move on for new content.
    pub recorded: BTreeMap<String, Digest>,
    /// The base images' pins (`images/bases.lock`), by base reference.
    pub base_pins: BTreeMap<String, crate::model::bases::BasePin>,
    /// sha256 of each step fragment (`steps:`), by its path as the matrix writes it: the
    /// fingerprint of each image that uses one covers it.
    pub fragments: BTreeMap<String, Digest>,
}

/// The CUDA wheels a lock pins, for the image's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockedCuda {
    /// `nvidia-cuda-runtime` (`-cu12` before CUDA 13): the runtime torch loads.
    pub(crate) runtime: Option<VersionText>,
    /// `nvidia-cuda-nvcc`: the compiler of the toolkit wheels (devel images, `devel_toolkit: pypi`).
    pub(crate) nvcc: Option<VersionText>,
}

/// What the tag rules need to know about one image.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TagFields {
    pub(crate) torch: semver::Version,
    pub(crate) cuda: VersionText,
    pub(crate) cudnn: VersionText,
    pub(crate) python: DottedVersion,
    pub(crate) variant: Variant,
    pub(crate) os: OsName,
    /// `os` as (family, release), for choosing the newest.
    pub(crate) os_release: (String, DottedVersion),
    /// Whether `cuda` is the default CUDA of this torch series.
    pub(crate) is_default_cuda: bool,
}

impl TagFields {
    pub(crate) fn series(&self) -> String {
        format!("{}.{}", self.torch.major, self.torch.minor)
    }
}

/// One requested combination before it is checked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cell {
    /// The torch series or release asked for, parsed when the matrix was read.
    pub(crate) torch: TorchText,
    pub(crate) cuda: VersionText,
    pub(crate) cudnn: Option<VersionText>,
    pub(crate) python: Option<VersionText>,
    pub(crate) os: OsName,
    pub(crate) variant: Variant,
    pub(crate) platform: Platform,
    pub(crate) origin: String,
    pub(crate) location: Option<String>,
}

impl Cell {
    pub(crate) fn reject(&self, reason: String) -> Rejection {
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

/// The toolkit release a torch wheel's pinned CUDA runtime belongs to, and its driver minimum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeFloor {
    /// What the wheel pins: a toolkit version (`cuda-toolkit[cudart]==13.0.2`) or a runtime
    /// library version (`nvidia-cuda-runtime-cu12==12.4.127`).
    pub(crate) runtime: String,
    /// The CUDA release whose Table 3 row gives `driver_min`.
    pub(crate) release: VersionText,
    pub(crate) driver_min: DriverVersion,
    /// `false` when the runtime's own release has no row in the knowledge and `release` is the
    /// newest older release of its line that has one: then `driver_min` is a lower bound.
    pub(crate) exact: bool,
}

/// What a cell resolved to in the knowledge.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) release: TorchRelease,
    pub(crate) variant: TorchCuda,
    pub(crate) cuda_release: CudaRelease,
    pub(crate) os: OsName,
    /// The OS's glibc, for the platform the lock is resolved for.
    pub(crate) glibc: VersionText,
    pub(crate) python: DottedVersion,
    /// The versions the images are ordered by, parsed once when the cell was checked.
    pub(crate) order: ImageOrder,
    pub(crate) variant_kind: Variant,
    pub(crate) platform: Platform,
    pub(crate) unverified: Vec<String>,
    /// The wheel's own CUDA runtime, when it needs a newer driver than the base's toolkit.
    pub(crate) runtime_floor: Option<RuntimeFloor>,
}

/// What images are ordered by: torch, the CUDA release line, the OS (family, release), each
/// parsed once, when its cell is checked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ImageOrder {
    pub(crate) torch: semver::Version,
    pub(crate) cuda: DottedVersion,
    pub(crate) os: (String, DottedVersion),
}

impl Resolved {
    /// Identity of the image apart from its variant.
    pub(crate) fn key(&self) -> (String, String, String, String, String) {
        (
            self.release.torch.to_string(),
            self.cuda_release.version.to_string(),
            self.os.to_string(),
            self.python.to_string(),
            self.platform.to_string(),
        )
    }
}
