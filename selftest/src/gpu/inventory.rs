//! The inventory check: each GPU's name, compute capability, memory, PCIe link and NVLink
//! peers; the driver and the CUDA version it supports; the CUDA libraries found and loaded.
//!
//! It never fails the run on its own (a visible GPU is enough). The link it reads here is the
//! idle one, which may train down to save power; the health check judges the link sampled while
//! the copies load it.

use super::Gpu;
use crate::discovery::Discovery;
use crate::loader::LoadedLibrary;
use crate::nvml::{self, Nvml};
use crate::report::{Check, Metric, Status};
use anyhow::Result;
use cudarc::driver::sys;
use serde::Serialize;
use std::path::Path;

/// What is known about one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct GpuFacts {
    pub index: usize,
    pub name: String,
    pub compute_capability: String,
    pub memory_bytes: u64,
    pub pci_bus_id: String,
    /// Maximum PCIe generation and width of the link (NVML, else sysfs).
    pub pcie_max_generation: Option<u32>,
    pub pcie_max_width: Option<u32>,
    pub pcie_current_generation: Option<u32>,
    pub pcie_current_width: Option<u32>,
    /// Where the link figures came from: "nvml", "sysfs" or "unknown".
    pub pcie_source: String,
    /// Active NVLinks of this GPU (NVML), when known.
    pub nvlink_active_links: Option<u32>,
    /// NVLink peers: "GPU <index>" for visible GPUs reachable over NVLink, "<bus id> ×<links>"
    /// for other ends such as an NVSwitch; `None` without NVML.
    pub nvlink_peers: Option<Vec<String>>,
}

impl GpuFacts {
    /// Indices of the visible GPUs NVML reports joined to this one by NVLink; `None` without
    /// NVML.
    pub fn nvlink_peer_indices(&self) -> Option<Vec<usize>> {
        let peers = self.nvlink_peers.as_ref()?;
        Some(
            peers
                .iter()
                .filter_map(|peer| peer.strip_prefix("GPU ")?.parse().ok())
                .collect(),
        )
    }

    pub fn link_label(&self) -> String {
        match (self.pcie_max_generation, self.pcie_max_width) {
            (Some(generation), Some(width)) => format!("PCIe Gen{generation} x{width}"),
            _ => "PCIe link unknown".to_string(),
        }
    }
}

/// Driver-level facts.
#[derive(Clone, Debug, Serialize)]
pub struct DriverFacts {
    pub driver_version: Option<String>,
    pub driver_cuda_version: String,
}

/// Reads the facts of every GPU; NVML, when present, supplies the link and NVLink figures.
pub fn gather(gpus: &[Gpu], nvml: Option<&Nvml>) -> Result<Vec<GpuFacts>> {
    let mut facts = Vec::new();
    let mut raw_bus_ids: Vec<String> = Vec::new();
    for gpu in gpus {
        let context = &gpu.context;
        let (major, minor) = context.compute_capability()?;
        let mut bus_buffer = [0 as std::ffi::c_char; 32];
        unsafe {
            sys::cuDeviceGetPCIBusId(
                bus_buffer.as_mut_ptr(),
                bus_buffer.len() as i32,
                context.cu_device(),
            )
            .result()?;
        }
        let raw_bus_id = unsafe { std::ffi::CStr::from_ptr(bus_buffer.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let pci_bus_id = nvml::normalize_bus_id(&raw_bus_id).unwrap_or(raw_bus_id.clone());
        let mut entry = GpuFacts {
            index: gpu.ordinal,
            name: context.name()?,
            compute_capability: format!("{major}.{minor}"),
            memory_bytes: context.total_mem()? as u64,
            pci_bus_id: pci_bus_id.clone(),
            pcie_max_generation: None,
            pcie_max_width: None,
            pcie_current_generation: None,
            pcie_current_width: None,
            pcie_source: "unknown".to_string(),
            nvlink_active_links: None,
            nvlink_peers: None,
        };
        let nvml_facts = nvml.and_then(|library| library.device_facts(&raw_bus_id));
        if let Some(device) = &nvml_facts {
            entry.pcie_max_generation = device.max_link_generation;
            entry.pcie_max_width = device.max_link_width;
            entry.pcie_current_generation = device.current_link_generation;
            entry.pcie_current_width = device.current_link_width;
            entry.pcie_source = "nvml".to_string();
        }
        if entry.pcie_max_generation.is_none() || entry.pcie_max_width.is_none() {
            let folder = Path::new("/sys/bus/pci/devices").join(&pci_bus_id);
            if let Some((generation, width)) = nvml::sysfs_link(&folder, "max") {
                entry.pcie_max_generation = Some(generation);
                entry.pcie_max_width = Some(width);
                entry.pcie_source = "sysfs".to_string();
            }
            if let Some((generation, width)) = nvml::sysfs_link(&folder, "current") {
                entry.pcie_current_generation = Some(generation);
                entry.pcie_current_width = Some(width);
            }
        }
        entry.nvlink_active_links = nvml_facts.as_ref().map(|device| device.active_nvlinks);
        entry.nvlink_peers = nvml_facts.map(|device| device.nvlink_remote_bus_ids);
        raw_bus_ids.push(raw_bus_id);
        facts.push(entry);
    }
    // Name peers by GPU index: NVML's peer-to-peer status first (it works where a virtual
    // machine hides the remote bus ids), then remote bus ids that are ours.
    let bus_ids: Vec<String> = facts.iter().map(|f| f.pci_bus_id.clone()).collect();
    for (index, entry) in facts.iter_mut().enumerate() {
        if let (Some(remote_ids), Some(library)) = (entry.nvlink_peers.take(), nvml) {
            let linked: Vec<usize> = (0..raw_bus_ids.len())
                .filter(|other| *other != index)
                .filter(|other| {
                    library.nvlink_between(&raw_bus_ids[index], &raw_bus_ids[*other]) == Some(true)
                })
                .collect();
            entry.nvlink_peers = Some(describe_peers(&remote_ids, &bus_ids, &linked));
        }
    }
    Ok(facts)
}

/// NVLink peers: the visible GPUs in `linked` (NVML peer-to-peer over NVLink) or whose bus id
/// is a remote end ("GPU 1"), then other remote ends with their link counts ("0000:c5:00.0 ×2",
/// an NVSwitch); remote ends hidden as `ffffffff:ff:ff.0` are left out.
pub fn describe_peers(
    remote_bus_ids: &[String],
    visible_bus_ids: &[String],
    linked: &[usize],
) -> Vec<String> {
    let mut peers: Vec<usize> = linked.to_vec();
    let mut others: Vec<(String, usize)> = Vec::new();
    for remote in remote_bus_ids {
        if remote.starts_with("ffffffff") {
            continue;
        }
        match visible_bus_ids.iter().position(|id| id == remote) {
            Some(index) => {
                if !peers.contains(&index) {
                    peers.push(index);
                }
            }
            None => match others.iter_mut().find(|(known, _)| known == remote) {
                Some((_, count)) => *count += 1,
                None => others.push((remote.clone(), 1)),
            },
        }
    }
    peers.sort_unstable();
    peers
        .into_iter()
        .map(|index| format!("GPU {index}"))
        .chain(
            others
                .into_iter()
                .map(|(id, count)| format!("{id} ×{count}")),
        )
        .collect()
}

/// cuBLAS version as "major.minor.patch" through cublasGetProperty (needs no handle).
pub fn cublas_version() -> Option<String> {
    use cudarc::cublas::sys as blas;
    let mut parts = [0i32; 3];
    let properties = [
        blas::libraryPropertyType::MAJOR_VERSION,
        blas::libraryPropertyType::MINOR_VERSION,
        blas::libraryPropertyType::PATCH_LEVEL,
    ];
    for (part, property) in parts.iter_mut().zip(properties) {
        let status = unsafe { blas::cublasGetProperty(property, part) };
        if status != blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return None;
        }
    }
    Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

/// NCCL version as "major.minor.patch" (ncclGetVersion 22803 → "2.28.3").
pub fn nccl_version() -> Option<String> {
    let mut code = 0;
    let status = unsafe { cudarc::nccl::sys::ncclGetVersion(&mut code) };
    if status != cudarc::nccl::sys::ncclResult_t::ncclSuccess {
        return None;
    }
    Some(nccl_version_from_code(code as u32))
}

/// Decodes ncclGetVersion's integer: major·10000 + minor·100 + patch since 2.9, major·1000 +
/// minor·100 + patch before.
pub fn nccl_version_from_code(code: u32) -> String {
    if code >= 20_900 {
        format!("{}.{}.{}", code / 10_000, (code % 10_000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1_000, (code % 1_000) / 100, code % 100)
    }
}

/// Library versions the APIs report, keyed like the discovery ("cublas", "nccl").
#[derive(Clone, Debug, Default, Serialize)]
pub struct LibraryVersions {
    pub cublas: Option<String>,
    pub nccl: Option<String>,
}

/// Builds the inventory check from what was gathered.
pub fn check(
    facts: &[GpuFacts],
    driver: &DriverFacts,
    discovery: &Discovery,
    loaded: &[LoadedLibrary],
    versions: &LibraryVersions,
    loader_note: &str,
    build_major: &str,
) -> Check {
    let names: Vec<String> = facts.iter().map(|f| f.name.clone()).collect();
    let mut distinct = names.clone();
    distinct.dedup();
    let summary = format!(
        "{} GPU(s): {}; driver {} (CUDA {})",
        facts.len(),
        distinct.join(", "),
        driver.driver_version.as_deref().unwrap_or("unknown"),
        driver.driver_cuda_version
    );
    let mut result = Check::new("inventory", Status::Pass, summary)
        .with_rule("pass when at least one GPU is visible; facts only")
        .figure("gpus", facts)
        .figure("driver_version", &driver.driver_version)
        .figure("driver_cuda_version", &driver.driver_cuda_version)
        .figure("libraries_found", &discovery.found)
        .figure(
            "libraries_missing",
            discovery
                .missing
                .iter()
                .map(|spec| spec.file_names.join(" or "))
                .collect::<Vec<_>>(),
        )
        .figure("libraries_loaded", loaded)
        .figure("library_versions", versions)
        .figure("loader", loader_note)
        .figure(
            "models",
            facts
                .iter()
                .map(|gpu| {
                    let model = crate::expected::find(&gpu.name);
                    serde_json::json!({
                        "gpu": gpu.index,
                        "model": model.map(|m| &m.model),
                        "source": model.map(|m| &m.source.url),
                    })
                })
                .collect::<Vec<_>>(),
        );
    for gpu in facts {
        let current = match (gpu.pcie_current_generation, gpu.pcie_current_width) {
            (Some(generation), Some(width)) => format!(" (now Gen{generation} x{width})"),
            _ => String::new(),
        };
        let links = gpu.nvlink_active_links.unwrap_or(0);
        let peers = match &gpu.nvlink_peers {
            Some(_) if links == 0 => "no NVLink".to_string(),
            Some(peers) if peers.is_empty() => format!("{links} NVLinks active, peers hidden"),
            Some(peers) => format!("{links} NVLinks active to {}", peers.join(", ")),
            None => "NVLink unknown (no NVML)".to_string(),
        };
        result.lines.push(format!(
            "GPU {}: {}, CC {}, {:.1} GiB, {} {}{}, {}",
            gpu.index,
            gpu.name,
            gpu.compute_capability,
            gpu.memory_bytes as f64 / (1u64 << 30) as f64,
            gpu.pci_bus_id,
            gpu.link_label(),
            current,
            peers
        ));
        result.lines.push(match crate::expected::find(&gpu.name) {
            Some(model) => format!(
                "  expected figures: {} from {} <{}>",
                model.model, model.source.document, model.source.url
            ),
            None => format!(
                "  expected figures: none ({} is not in data/gpu-models.json; speed rules warn, use --baseline)",
                gpu.name
            ),
        });
        result.metrics.push(
            Metric::new(
                "gpu_memory_bytes",
                "Memory of each GPU.",
                gpu.memory_bytes as f64,
            )
            .label("gpu", gpu.index)
            .label("name", &gpu.name),
        );
        if let (Some(generation), Some(width)) = (gpu.pcie_max_generation, gpu.pcie_max_width) {
            result.metrics.push(
                Metric::new(
                    "pcie_link_max_generation",
                    "Maximum PCIe generation of each GPU's link.",
                    generation as f64,
                )
                .label("gpu", gpu.index),
            );
            result.metrics.push(
                Metric::new(
                    "pcie_link_max_width",
                    "Maximum PCIe width (lanes) of each GPU's link.",
                    width as f64,
                )
                .label("gpu", gpu.index),
            );
        }
    }
    for library in loaded {
        let version = match library.key.as_str() {
            "cublas" => versions.cublas.clone(),
            "nccl" => versions.nccl.clone(),
            _ => None,
        };
        result.lines.push(format!(
            "loaded {}: {}{}",
            library.key,
            library.path,
            version
                .map(|v| format!(" (reports {v})"))
                .unwrap_or_default()
        ));
    }
    for spec in &discovery.missing {
        result
            .lines
            .push(format!("not found: {}", spec.file_names.join(" or ")));
    }
    result.lines.push(format!("loader: {loader_note}"));
    let mismatches = major_mismatches(loaded, build_major);
    if !mismatches.is_empty() {
        result.status = Status::Warn;
        result.summary = format!("{}; {}", mismatches.join("; "), result.summary);
    }
    result = result.figure("library_major_mismatches", &mismatches);
    if facts.is_empty() {
        result.status = Status::Fail;
    }
    result
}

/// CUDA libraries loaded with a major other than the binary's (cudarc falls back to the
/// unversioned `libcublas.so` of another CUDA): the figures still mean something, but the image
/// wants the binary of that major.
pub fn major_mismatches(loaded: &[LoadedLibrary], build_major: &str) -> Vec<String> {
    loaded
        .iter()
        .filter(|library| library.key == "cublas" || library.key == "cublasLt")
        .filter_map(|library| {
            let version = library.file_version.as_deref()?;
            let major = version.split('.').next()?;
            (major != build_major).then(|| {
                format!(
                    "{} {version} loaded by a CUDA {build_major} build (use gpu-selftest-cu{major})",
                    library.key
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_group_by_gpu_or_bus_id() {
        let visible = vec!["0000:18:00.0".to_string(), "0000:2a:00.0".to_string()];
        let mut remote = vec!["0000:2a:00.0".to_string(); 18];
        remote.push("0000:c5:00.0".to_string());
        remote.push("0000:c5:00.0".to_string());
        assert_eq!(
            describe_peers(&remote, &visible, &[]),
            vec!["GPU 1".to_string(), "0000:c5:00.0 ×2".to_string()]
        );
        assert!(describe_peers(&[], &visible, &[]).is_empty());
        // A virtual machine hides the remote ends; NVML's peer-to-peer status still names GPU 1.
        let hidden = vec!["ffffffff:ff:ff.0".to_string(); 18];
        assert_eq!(
            describe_peers(&hidden, &visible, &[1]),
            vec!["GPU 1".to_string()]
        );
        assert!(describe_peers(&hidden, &visible, &[]).is_empty());
    }

    #[test]
    fn a_cublas_of_another_major_is_named() {
        let loaded = vec![
            LoadedLibrary {
                key: "cublas".to_string(),
                path: "/usr/local/cuda/lib64/libcublas.so.13.1.0.3".to_string(),
                file_version: Some("13.1.0.3".to_string()),
            },
            LoadedLibrary {
                key: "cuda".to_string(),
                path: "/usr/lib/libcuda.so.580.159.04".to_string(),
                file_version: Some("580.159.04".to_string()),
            },
        ];
        assert_eq!(
            major_mismatches(&loaded, "12"),
            vec!["cublas 13.1.0.3 loaded by a CUDA 12 build (use gpu-selftest-cu13)".to_string()]
        );
        assert!(major_mismatches(&loaded, "13").is_empty());
    }

    #[test]
    fn nccl_codes_decode() {
        assert_eq!(nccl_version_from_code(22803), "2.28.3");
        assert_eq!(nccl_version_from_code(21805), "2.18.5");
        assert_eq!(nccl_version_from_code(2708), "2.7.8");
    }

    #[test]
    fn link_label_and_rate() {
        let facts = GpuFacts {
            index: 0,
            name: "NVIDIA H200".to_string(),
            compute_capability: "9.0".to_string(),
            memory_bytes: 150_754_820_096,
            pci_bus_id: "0000:18:00.0".to_string(),
            pcie_max_generation: Some(5),
            pcie_max_width: Some(16),
            pcie_current_generation: Some(1),
            pcie_current_width: Some(16),
            pcie_source: "nvml".to_string(),
            nvlink_active_links: Some(18),
            nvlink_peers: Some(vec!["GPU 1".to_string()]),
        };
        assert_eq!(facts.link_label(), "PCIe Gen5 x16");
        assert_eq!(facts.nvlink_peer_indices(), Some(vec![1]));
        let driver = DriverFacts {
            driver_version: Some("580.159.04".to_string()),
            driver_cuda_version: "13.0".to_string(),
        };
        let check = check(
            &[facts],
            &driver,
            &Discovery::default(),
            &[],
            &LibraryVersions::default(),
            "test",
            "13",
        );
        assert_eq!(check.status, Status::Pass);
        assert!(check.summary.contains("driver 580.159.04 (CUDA 13.0)"));
        assert!(check.lines[0].contains("PCIe Gen5 x16 (now Gen1 x16), 18 NVLinks active to GPU 1"));
        assert!(check.lines[1].starts_with("  expected figures: H200 SXM from NVIDIA H200"));
        assert_eq!(check.figures["models"][0]["model"], "H200 SXM");
    }
}
