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

/// `None` when `driver` runs the image, else the reason it does not.
pub(super) fn driver_verdict(
    image: &ImageSpec,
    driver: &DriverVersion,
    forward_compat: bool,
    knowledge: &Knowledge,
) -> Option<String> {
    if *driver >= image.driver_min {
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
