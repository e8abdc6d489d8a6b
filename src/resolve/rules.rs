//! The rules a cell must pass, one function each, in the order `check_cell` applies them. Each
//! returns the reason a person can act on when the cell fails it: what is wrong, and what would
//! work instead. Pure: the cell and the knowledge in, a verdict out.

use crate::model::axes::Variant;
use crate::model::knowledge::{
    wheel_suffix, CudaField, CudaRelease, Knowledge, OsRelease, TorchCuda, TorchRelease,
    TorchSeries,
};
use crate::model::matrix::{DevelToolkit, Matrix, TorchWheels};
use crate::model::selftest_binary::{binary_for, OLDEST_CUDA};
use crate::model::version::{DottedVersion, VersionText};
use crate::resolve::driver::runtime_floor;
use crate::resolve::image::{Cell, ImageOrder, Resolved, RuntimeFloor};

/// Checks one cell against the knowledge; the error is the reason shown to the user.
pub(super) fn check_cell(
    cell: &Cell,
    matrix: &Matrix,
    knowledge: &Knowledge,
) -> Result<Resolved, String> {
    let allow_unverified = matrix.allow_unverified;
    let base_override = matrix.base_images.covers_os(&cell.os);
    let mut unverified = Vec::new();
    let (series, release) = torch_release(cell, knowledge)?;
    let variant = wheel_variant(
        cell,
        series,
        release,
        knowledge,
        allow_unverified,
        &mut unverified,
    )?;
    if matrix.torch_wheels == TorchWheels::Pypi {
        pypi_variant(cell, release, variant)?;
    }
    let cuda_release = cuda_base_release(
        cell,
        knowledge,
        allow_unverified,
        base_override,
        &mut unverified,
    )?;
    platform_available(cell, release, variant, cuda_release, knowledge)?;
    note_unconfirmed(cell, release, variant, &mut unverified);
    let runtime_floor = wheel_runtime_floor(
        cell,
        release,
        variant,
        cuda_release,
        knowledge,
        &mut unverified,
    );
    note_unconfirmed_driver_min(
        cuda_release,
        runtime_floor.as_ref(),
        knowledge,
        &mut unverified,
    );
    selftest_build(cell, series, release, cuda_release)?;
    let os = os_release(cell, knowledge)?;
    base_image_for_os(cell, series, cuda_release, knowledge, base_override)?;
    glibc_floor(cell, series, release, variant, os)?;
    let python = python_version(cell, series, release, os, knowledge)?;
    let order = ImageOrder {
        torch: release.torch.torch().version.clone(),
        cuda: cuda_release
            .version
            .within("CUDA", 3)
            .map_err(|e| e.to_string())?
            .clone(),
        os: cell.os.release(),
    };
    cudnn_bundled(cell, release, variant, knowledge)?;
    if cell.variant == Variant::Devel {
        devel_toolkit(cell, variant, matrix.devel_toolkit, knowledge)?;
    }
    Ok(Resolved {
        release: release.clone(),
        variant: variant.clone(),
        cuda_release: cuda_release.clone(),
        os: cell.os.clone(),
        glibc: os.glibc.clone(),
        python,
        order,
        variant_kind: cell.variant,
        platform: cell.platform.clone(),
        unverified,
        runtime_floor,
    })
}

/// The torch release a cell names: a series (`2.7`) means its newest known patch.
fn torch_release<'k>(
    cell: &Cell,
    knowledge: &'k Knowledge,
) -> Result<(&'k TorchSeries, &'k TorchRelease), String> {
    let torch = cell.torch.torch();
    let series = knowledge.torch_series(torch).ok_or_else(|| {
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
            .max_by_key(|r| &r.torch.torch().version)
            .ok_or_else(|| format!("torch {} has no releases in the knowledge", series.series))?
    } else {
        knowledge
            .torch_release(torch)
            .map(|(_, release)| release)
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
    Ok((series, release))
}

/// The torch wheel variant of the cell's CUDA (`cu126`); an unverified one only when allowed,
/// noted in `unverified`.
fn wheel_variant<'k>(
    cell: &Cell,
    series: &'k TorchSeries,
    release: &TorchRelease,
    knowledge: &Knowledge,
    allow_unverified: bool,
    unverified: &mut Vec<String>,
) -> Result<&'k TorchCuda, String> {
    let wanted_cuda = cell.cuda.within("CUDA", 3).map_err(|e| e.to_string())?;
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
        if !allow_unverified {
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
    Ok(variant)
}

/// With `torch_wheels: pypi`, the cell's CUDA is the one build PyPI carries for the release on the
/// cell's platform (installed as `torch==X`, the knowledge's `pypi` wheels); any other CUDA
/// variant lives on PyTorch's own index only.
fn pypi_variant(cell: &Cell, release: &TorchRelease, variant: &TorchCuda) -> Result<(), String> {
    let wheel = release
        .pypi
        .wheels
        .iter()
        .find(|wheel| wheel.platform == cell.platform);
    let Some(pypi_cuda) = wheel.and_then(|wheel| wheel.cuda.as_deref()) else {
        return Err(format!(
            "torch {} has no {} CUDA build on PyPI ({}); its {} wheels are only on PyTorch's index: set `torch_wheels: pytorch` with `mirrors.torch_index` pointing at a mirror of https://download.pytorch.org/whl",
            release.torch,
            cell.platform,
            if wheel.is_some() { "PyPI's wheel there is CPU-only" } else { "the knowledge records none" },
            wheel_suffix(&variant.cuda)
        ));
    };
    if pypi_cuda != variant.cuda {
        return Err(format!(
            "torch {} on a plain PyPI index is the CUDA {pypi_cuda} build ({}); its {} wheels are only on PyTorch's index: set `torch_wheels: pytorch` with `mirrors.torch_index` pointing at a mirror of https://download.pytorch.org/whl (which serves /{}), or use CUDA {pypi_cuda}",
            release.torch,
            wheel_suffix(pypi_cuda),
            wheel_suffix(&variant.cuda),
            wheel_suffix(&variant.cuda)
        ));
    }
    Ok(())
}

/// A devel image's toolkit source serves its cell: NVIDIA's apt repository needs a base that
/// configures it (nvidia/cuda, Ubuntu only); PyPI's toolkit wheels need a CUDA major whose wheels
/// lay out one CUDA tree.
fn devel_toolkit(
    cell: &Cell,
    variant: &TorchCuda,
    toolkit: DevelToolkit,
    knowledge: &Knowledge,
) -> Result<(), String> {
    let major = variant
        .cuda
        .within("CUDA", 3)
        .map(|v| v.part(0))
        .map_err(|e| e.to_string())?;
    match toolkit {
        DevelToolkit::Apt if cell.os.is_debian() => Err(format!(
            "a devel image on {} cannot install nvcc from NVIDIA's apt repository, which only nvidia/cuda (Ubuntu) bases configure; set `devel_toolkit: pypi` to install the CUDA {} toolkit from the Python index",
            cell.os, variant.cuda
        )),
        DevelToolkit::Pypi
            if knowledge
                .family(major)
                .and_then(|f| f.pypi_toolkit.as_ref())
                .is_none() =>
        {
            let with: Vec<String> = knowledge
                .cuda_families
                .iter()
                .filter(|f| f.pypi_toolkit.is_some())
                .map(|f| f.major.to_string())
                .collect();
            Err(format!(
                "`devel_toolkit: pypi` needs CUDA toolkit wheels that lay out one CUDA tree, which the knowledge records for CUDA {} only (CUDA {major}'s put each component in its own folder); use `devel_toolkit: apt` on an nvidia/cuda base",
                if with.is_empty() { "none".to_string() } else { with.join(", ") }
            ))
        }
        _ => Ok(()),
    }
}

/// The nvidia/cuda release to build on (`12.6` → `12.6.3`), which must have images unless the
/// matrix brings its own base; an unverified one only when allowed.
fn cuda_base_release<'k>(
    cell: &Cell,
    knowledge: &'k Knowledge,
    allow_unverified: bool,
    base_override: bool,
    unverified: &mut Vec<String>,
) -> Result<&'k CudaRelease, String> {
    let wanted_cuda = cell.cuda.within("CUDA", 3).map_err(|e| e.to_string())?;
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
        if !allow_unverified {
            return Err(format!(
                "CUDA {} is UNVERIFIED in the knowledge ({note}); the driver minimum could be wrong; set `allow_unverified: true` to build it anyway",
                cuda_release.version
            ));
        }
        unverified.push(format!("CUDA {}: {note}", cuda_release.version));
    }
    if cuda_release.ubuntu.is_empty() && !base_override {
        let line = cuda_release.version.dotted().major_minor();
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
    Ok(cuda_release)
}

/// Torch publishes wheels, and nvidia/cuda images, for the cell's platform.
fn platform_available(
    cell: &Cell,
    release: &TorchRelease,
    variant: &TorchCuda,
    cuda_release: &CudaRelease,
    knowledge: &Knowledge,
) -> Result<(), String> {
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
    if !cuda_release.platforms.contains_key(cell.platform.as_str()) {
        return Err(format!(
            "nvidia/cuda {} has no {} images (it has {})",
            cuda_release.version,
            cell.platform,
            cuda_release.platforms().join(", ")
        ));
    }
    Ok(())
}

/// A gpu-selftest build serves the image's CUDA and architecture (the rule the self-test itself
/// uses): an image nothing can test could never move an alias. CUDA 11.4-11.7 are refused by
/// choice (see `selftest_binary::OLDEST_CUDA`): the reason says so and names the torch series'
/// variants a build does serve on the cell's platform.
fn selftest_build(
    cell: &Cell,
    series: &TorchSeries,
    release: &TorchRelease,
    cuda_release: &CudaRelease,
) -> Result<(), String> {
    let arch = cell.platform.rsplit('/').next().unwrap_or(&cell.platform);
    binary_for(&cuda_release.version, arch)
        .map(|_| ())
        .map_err(|why| {
            let served: Vec<String> = series
                .cuda
                .iter()
                .filter(|v| {
                    v.verified
                        && v.platforms().contains(&cell.platform.as_str())
                        && binary_for(&v.cuda, arch).is_ok()
                })
                .map(|v| format!("CUDA {} ({})", v.cuda, wheel_suffix(&v.cuda)))
                .collect();
            let choice = if cuda_release.version.starts_with("11.") {
                format!(
                    " (gpu-selftest's CUDA 11 build uses cudarc's {}.{} bindings and is tested on {}.{} only; cudarc binds 11.4 and later, but imagegen does not ship a self-test never run on this CUDA)",
                    OLDEST_CUDA.0, OLDEST_CUDA.1, OLDEST_CUDA.0, OLDEST_CUDA.1
                )
            } else {
                String::new()
            };
            let instead = if served.is_empty() {
                format!("use CUDA {}.{} or later", OLDEST_CUDA.0, OLDEST_CUDA.1)
            } else {
                format!("use torch {} with {} instead", release.torch, served.join(" or "))
            };
            format!(
                "torch {} CUDA {} cannot be self-tested: {why}{choice}; {instead}",
                release.torch, cuda_release.version
            )
        })
}

/// Notes single fields of the wheel variant that no primary source confirms (such as an arch
/// list): the cell resolves, and the image lists them under `unverified`.
fn note_unconfirmed(
    cell: &Cell,
    release: &TorchRelease,
    variant: &TorchCuda,
    unverified: &mut Vec<String>,
) {
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
}

/// The driver the wheel's own CUDA runtime needs in full, when it is above the base toolkit's
/// (see `driver::runtime_floor`): PyPI's cu130 torch 2.11-2.13 pins the 13.0 Update 2/3 runtime on
/// a 13.0.0 base. The PyPI wheel of a release is the wheel index's wheel of the same variant
/// (promoted as is, ti-promote-*), so both `torch_wheels` settings install it. A runtime the
/// knowledge cannot place is noted under `unverified`; the image then reports the base's minimum.
fn wheel_runtime_floor(
    cell: &Cell,
    release: &TorchRelease,
    variant: &TorchCuda,
    cuda_release: &CudaRelease,
    knowledge: &Knowledge,
    unverified: &mut Vec<String>,
) -> Option<RuntimeFloor> {
    let runtime = release
        .pypi
        .wheels
        .iter()
        .find(|w| w.platform == cell.platform && w.cuda.as_deref() == Some(variant.cuda.as_str()))?
        .cuda_runtime
        .as_ref()?;
    let Some(floor) = runtime_floor(runtime, knowledge) else {
        unverified.push(format!(
            "torch {} {} {} pins CUDA runtime {runtime}, which no CUDA release in the knowledge ships: imagegen.driver.min is the base's",
            release.torch,
            wheel_suffix(&variant.cuda),
            cell.platform
        ));
        return None;
    };
    if !floor.exact {
        unverified.push(format!(
            "torch {} {} {} pins CUDA runtime {runtime}, whose toolkit driver minimum is not in the knowledge: imagegen.driver.min uses CUDA {}'s ({}), a lower bound",
            release.torch,
            wheel_suffix(&variant.cuda),
            cell.platform,
            floor.release,
            floor.driver_min
        ));
    }
    let base = cuda_release.driver_min.as_ref()?;
    (floor.driver_min > *base).then_some(floor)
}

/// Notes a toolkit driver minimum no primary source confirmed, of the release that sets the
/// image's driver minimum: the wheel's runtime's release when that is newer than the base's, else
/// the base's (13.0.3's 580.126.20, read from NVIDIA's installer name through third-party copies).
fn note_unconfirmed_driver_min(
    cuda_release: &CudaRelease,
    floor: Option<&RuntimeFloor>,
    knowledge: &Knowledge,
    unverified: &mut Vec<String>,
) {
    let setting = match floor {
        Some(floor) => knowledge.cuda.iter().find(|c| c.version == floor.release),
        None => Some(cuda_release),
    };
    let Some(release) = setting else {
        return;
    };
    if let (Some(note), Some(driver_min)) = (release.unconfirmed_driver_min(), &release.driver_min)
    {
        unverified.push(format!(
            "CUDA {} {} {driver_min} (imagegen.driver.min) is unconfirmed: {note}",
            release.version,
            CudaField::DriverMin.name()
        ));
    }
}

/// The OS release the cell names.
fn os_release<'k>(cell: &Cell, knowledge: &'k Knowledge) -> Result<&'k OsRelease, String> {
    let os = knowledge.os(&cell.os).ok_or_else(|| {
        let known: Vec<&str> = knowledge.os.iter().map(|o| o.name.as_str()).collect();
        format!(
            "OS {} is not in the knowledge (known: {})",
            cell.os,
            known.join(", ")
        )
    })?;
    Ok(os)
}

/// nvidia/cuda publishes the cell's CUDA release for its Ubuntu (unless the matrix brings its
/// own base); otherwise names the CUDA lines that do.
fn base_image_for_os(
    cell: &Cell,
    series: &TorchSeries,
    cuda_release: &CudaRelease,
    knowledge: &Knowledge,
    base_override: bool,
) -> Result<(), String> {
    if !cell.os.starts_with("ubuntu") && !base_override {
        return Err(format!(
            "nvidia/cuda publishes no {} images (only Ubuntu): name the base of {} cells in matrix.yaml, e.g. `base_images: {{runtime: {{{}: registry.example.com/base:{}}}}}`",
            cell.os, cell.os, cell.os, cell.os
        ));
    }
    let ubuntu = cell.os.trim_start_matches("ubuntu");
    if !cuda_release.ubuntu.iter().any(|u| u == ubuntu) && !base_override {
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
            .map(|c| c.version.dotted().major_minor())
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
    Ok(())
}

/// The OS's glibc is at least the wheels' manylinux floor.
fn glibc_floor(
    cell: &Cell,
    series: &TorchSeries,
    release: &TorchRelease,
    variant: &TorchCuda,
    os: &OsRelease,
) -> Result<(), String> {
    let glibc_min = series.glibc_min_for(Some(variant), &cell.platform);
    let glibc_ok = matches!(
        (os.glibc.within("", 2), glibc_min.within("", 2)),
        (Ok(have), Ok(need)) if have >= need
    );
    if !glibc_ok {
        return Err(format!(
            "torch {} {} wheels need glibc ≥ {glibc_min}; {} has {}",
            release.torch, cell.platform, cell.os, os.glibc
        ));
    }
    Ok(())
}

/// The Python of the image: the OS's own, which must be the one asked for and one torch
/// publishes wheels for; parsed here, once, for the tag and alias rules.
fn python_version(
    cell: &Cell,
    series: &TorchSeries,
    release: &TorchRelease,
    os: &OsRelease,
    knowledge: &Knowledge,
) -> Result<DottedVersion, String> {
    let python = match &cell.python {
        None => os.python.clone(),
        Some(wanted) if *wanted == os.python => wanted.clone(),
        Some(wanted) => {
            let range = python_range(series);
            let fitting: Vec<&str> = knowledge
                .os
                .iter()
                .filter(|o| o.python == *wanted)
                .map(|o| o.name.as_str())
                .collect();
            let os_python = format!(
                "{} ships Python {} and imagegen uses the OS Python",
                cell.os, os.python
            );
            if !series.python.iter().any(|p| p == wanted) {
                // Name torch's own range first: no OS would make this Python work.
                let experimental = if series.python_experimental.iter().any(|p| p == wanted) {
                    " (only experimental wheels)"
                } else {
                    ""
                };
                let serving: Vec<String> = knowledge
                    .os
                    .iter()
                    .filter(|o| series.python.contains(&o.python))
                    .map(|o| format!("{} (Python {})", o.name, o.python))
                    .collect();
                let hint = if serving.is_empty() {
                    String::new()
                } else {
                    format!("; torch {} builds on {}", release.torch, serving.join(", "))
                };
                return Err(format!(
                    "torch {} has no Python {wanted} wheels{experimental} (it supports {range}); {os_python}{hint}",
                    release.torch
                ));
            }
            let hint = if fitting.is_empty() {
                format!("no known OS ships Python {wanted}")
            } else {
                format!("for Python {wanted} use {}", fitting.join(" or "))
            };
            return Err(format!(
                "{os_python}; torch {} supports Python {wanted} (its range is {range}), but {hint}",
                release.torch
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
            "torch {} has no Python {python} wheels{experimental} (it supports {}); {} uses Python {python}",
            release.torch,
            python_range(series),
            cell.os
        ));
    }
    python
        .within("Python", 2)
        .cloned()
        .map_err(|error| error.to_string())
}

/// Torch's Python range as people write it: `3.10–3.14`.
fn python_range(series: &TorchSeries) -> String {
    format!(
        "{}–{}",
        series
            .python
            .first()
            .map(VersionText::as_str)
            .unwrap_or("?"),
        series.python.last().map(VersionText::as_str).unwrap_or("?")
    )
}

/// A cuDNN the cell asks for is the one the wheel bundles (torch pins its cuDNN).
fn cudnn_bundled(
    cell: &Cell,
    release: &TorchRelease,
    variant: &TorchCuda,
    knowledge: &Knowledge,
) -> Result<(), String> {
    if let Some(wanted) = &cell.cudnn {
        let wanted_version = wanted.dotted();
        let bundled = variant.cudnn.dotted();
        if !bundled.starts_with(wanted_version) {
            let matching: Vec<String> = knowledge
                .torch
                .iter()
                .flat_map(|t| t.cuda.iter().filter(|c| c.verified).map(move |c| (t, c)))
                .filter(|(_, c)| c.cudnn.dotted().starts_with(wanted_version))
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
    Ok(())
}
