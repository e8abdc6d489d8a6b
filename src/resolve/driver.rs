//! Driver verdicts: the `NVIDIA_REQUIRE_CUDA` value an image carries, and whether a given NVIDIA
//! driver runs an image (its toolkit minimum, or a forward-compatibility branch), with what that
//! driver does run when it does not. Pure.

use crate::model::knowledge::{wheel_suffix, CudaRelease, Knowledge};
use crate::model::version::{DottedVersion, DriverVersion, VersionText};
use crate::resolve::image::{ImageSpec, RuntimeFloor};

/// The `NVIDIA_REQUIRE_CUDA` value: the CUDA floor, OR a whitelisted forward-compatibility branch
/// for each brand NVIDIA lists (space = OR, comma = AND, per nvidia-container-toolkit). The
/// branches only with `compat_libraries`: they are true only where NVIDIA's cuda-compat libraries
/// are in the image (nvidia/cuda bases install them); elsewhere an old driver would pass the check
/// and fail at CUDA initialisation.
pub(crate) fn require_cuda(
    cuda_major_minor: &str,
    release: &CudaRelease,
    platform: &str,
    compat_libraries: bool,
    knowledge: &Knowledge,
) -> String {
    let mut value = format!("cuda>={cuda_major_minor}");
    if !compat_libraries {
        return value;
    }
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

/// Whether `driver` runs an image built on a base that needs `driver_min`, or (with
/// `forward_compat`) on one whose forward-compatibility branches include the driver's branch.
/// The one check behind the verdict and behind every image its hint names.
fn runs(
    driver: &DriverVersion,
    driver_min: &DriverVersion,
    branches: &[u64],
    forward_compat: bool,
) -> bool {
    *driver >= *driver_min || (forward_compat && branches.contains(&driver.branch()))
}

/// Whether `driver` runs images of the CUDA line `cuda` (`12.6`), built on the base release
/// resolution picks for that line (`12.6.3`, whose driver minimum may be above the line's first
/// release's).
fn runs_line(
    knowledge: &Knowledge,
    cuda: &VersionText,
    platform: &str,
    driver: &DriverVersion,
    forward_compat: bool,
) -> bool {
    knowledge.cuda_release_for(cuda).is_some_and(|release| {
        release.verified
            && release.driver_min.as_ref().is_some_and(|driver_min| {
                runs(
                    driver,
                    driver_min,
                    release.forward_compat_branches(platform),
                    forward_compat,
                )
            })
    })
}

/// `None` when `driver` runs the image, else the reason it does not, with the newest CUDA line
/// and up to three torch wheels that the same driver does run (each passing this same check on
/// the base release it would be built on).
pub(super) fn driver_verdict(
    image: &ImageSpec,
    driver: &DriverVersion,
    forward_compat: bool,
    knowledge: &Knowledge,
) -> Option<String> {
    if runs(
        driver,
        &image.driver_min,
        &image.forward_compat_branches,
        forward_compat,
    ) {
        return None;
    }
    let lines: Vec<DottedVersion> = knowledge
        .cuda
        .iter()
        .map(|c| c.version.major_minor().dotted().clone())
        .collect();
    let newest_line = lines
        .into_iter()
        .filter(|line| {
            runs_line(
                knowledge,
                &VersionText::of(line),
                image.platform.as_str(),
                driver,
                forward_compat,
            )
        })
        .max();
    let runs_wheels: Vec<String> = knowledge
        .torch
        .iter()
        .filter_map(|t| {
            t.cuda
                .iter()
                .filter(|c| {
                    c.verified
                        && runs_line(
                            knowledge,
                            &c.cuda,
                            image.platform.as_str(),
                            driver,
                            forward_compat,
                        )
                })
                .map(|c| (c.cuda.dotted(), c))
                .max_by(|a, b| a.0.cmp(b.0))
                .map(|(_, c)| format!("{}+{}", t.series, wheel_suffix(&c.cuda)))
        })
        .collect();
    let mut reason = format!(
        "needs NVIDIA driver ≥ {} ({} driver); driver {driver} is older",
        image.driver_min, image.driver_min_from
    );
    match &newest_line {
        Some(line) => reason.push_str(&format!(" and runs CUDA ≤ {line} images")),
        None => reason.push_str(" than every CUDA toolkit in the knowledge"),
    }
    if !runs_wheels.is_empty() {
        let shown: Vec<&String> = runs_wheels.iter().rev().take(3).collect();
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

/// Maps a pinned runtime to its toolkit release: a toolkit version names the release itself, a
/// runtime library version the first release that ships it (`cudart`, from NVIDIA's Dockerfiles).
/// NVIDIA's rule (CUDA Compatibility, minor version compatibility): an application built with a
/// toolkit runs with its full feature set on that toolkit's Table 3 driver or newer, and with a
/// limited one on the family's minimum; the runtime torch loads is the wheel's, so its release's
/// Table 3 driver is what the image needs in full, whatever toolkit the base image carries.
pub(crate) fn runtime_floor(runtime: &VersionText, knowledge: &Knowledge) -> Option<RuntimeFloor> {
    let wanted = runtime.dotted();
    let with_minimum = |release: &CudaRelease| {
        release
            .driver_min
            .clone()
            .filter(|_| release.verified)
            .map(|driver_min| (release.version.clone(), driver_min))
    };
    if let Some((release, driver_min)) = knowledge
        .cuda
        .iter()
        .find(|c| c.version == *runtime || c.cudart.as_ref() == Some(runtime))
        .and_then(with_minimum)
    {
        return Some(RuntimeFloor {
            runtime: runtime.to_string(),
            release,
            driver_min,
            exact: true,
        });
    }
    // A toolkit version (patch below 10, e.g. 13.0.3) the knowledge has no row for: the newest
    // older release of its line that has one bounds it from below.
    if wanted.parts().len() != 3 || wanted.part(2) >= 10 {
        return None;
    }
    let line = wanted.major_minor();
    knowledge
        .cuda
        .iter()
        .map(|c| (c.version.dotted(), c))
        .filter(|(version, _)| version.major_minor() == line && *version < wanted)
        .filter_map(|(version, c)| Some((version, with_minimum(c)?)))
        .max_by(|a, b| a.0.cmp(b.0))
        .map(|(_, (release, driver_min))| RuntimeFloor {
            runtime: runtime.to_string(),
            release,
            driver_min,
            exact: false,
        })
}
