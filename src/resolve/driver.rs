//! Driver verdicts: the `NVIDIA_REQUIRE_CUDA` value an image carries, and whether a given NVIDIA
//! driver runs an image (its toolkit minimum, or a forward-compatibility branch), with what that
//! driver does run when it does not. Pure.

use crate::model::knowledge::{wheel_suffix, CudaRelease, Knowledge};
use crate::model::version::{DottedVersion, DriverVersion};
use crate::resolve::image::ImageSpec;

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
    cuda: &str,
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
        .filter_map(|c| DottedVersion::parse_kind(&c.version, "CUDA", 3).ok())
        .map(|v| v.major_minor())
        .filter_map(|line| DottedVersion::parse_kind(&line, "CUDA", 2).ok())
        .collect();
    let newest_line = lines
        .into_iter()
        .filter(|line| {
            runs_line(
                knowledge,
                line.as_str(),
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
                .filter_map(|c| Some((DottedVersion::parse_kind(&c.cuda, "", 2).ok()?, c)))
                .max_by(|a, b| a.0.cmp(&b.0))
                .map(|(_, c)| format!("{}+{}", t.series, wheel_suffix(&c.cuda)))
        })
        .collect();
    let mut reason = format!(
        "needs NVIDIA driver ≥ {} (CUDA {} toolkit driver); driver {driver} is older",
        image.driver_min, image.cuda_full
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
