//! The inventory check: each GPU's name, compute capability, memory, PCIe link and NVLink
//! peers; the driver and the CUDA version it supports; the CUDA libraries found and loaded.
//!
//! It never fails the run on its own (a visible GPU is enough); it warns when a link runs
//! narrower than its maximum while under load, which the bandwidth check would then explain.

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
    /// NVLink peers as "GPU <index> ×<links>" or "<bus id> ×<links>" (an NVSwitch), when known.
    pub nvlink_peers: Option<Vec<String>>,
}

impl GpuFacts {
    /// What the link allows in one direction, in bytes per second.
    pub fn link_bytes_per_second(&self) -> Option<f64> {
        crate::rules::pcie_link_bytes_per_second(self.pcie_max_generation?, self.pcie_max_width?)
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
        entry.nvlink_peers = nvml_facts.map(|device| device.nvlink_remote_bus_ids);
        facts.push(entry);
    }
    // Name peers by GPU index where the remote bus id is one of ours.
    let bus_ids: Vec<String> = facts.iter().map(|f| f.pci_bus_id.clone()).collect();
    for entry in &mut facts {
        if let Some(remote_ids) = entry.nvlink_peers.take() {
            entry.nvlink_peers = Some(describe_peers(&remote_ids, &bus_ids));
        }
    }
    Ok(facts)
}

/// Groups NVLink remote ends into "GPU 1 ×18" (a visible GPU) or "0000:c5:00.0 ×2" (another end,
/// such as an NVSwitch), in first-seen order.
pub fn describe_peers(remote_bus_ids: &[String], visible_bus_ids: &[String]) -> Vec<String> {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for remote in remote_bus_ids {
        let label = match visible_bus_ids.iter().position(|id| id == remote) {
            Some(index) => format!("GPU {index}"),
            None => remote.clone(),
        };
        match groups.iter_mut().find(|(known, _)| *known == label) {
            Some((_, count)) => *count += 1,
            None => groups.push((label, 1)),
        }
    }
    groups
        .into_iter()
        .map(|(label, count)| format!("{label} ×{count}"))
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
        .figure("loader", loader_note);
    for gpu in facts {
        let current = match (gpu.pcie_current_generation, gpu.pcie_current_width) {
            (Some(generation), Some(width)) => format!(" (now Gen{generation} x{width})"),
            _ => String::new(),
        };
        let peers = match &gpu.nvlink_peers {
            Some(peers) if peers.is_empty() => "no NVLink".to_string(),
            Some(peers) => format!("NVLink to {}", peers.join(", ")),
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
    if facts.is_empty() {
        result.status = Status::Fail;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_group_by_gpu_or_bus_id() {
        let visible = vec!["0000:18:00.0".to_string(), "0000:2a:00.0".to_string()];
        let mut remote = vec!["0000:2a:00.0".to_string(); 18];
        remote.push("0000:c5:00.0".to_string());
        assert_eq!(
            describe_peers(&remote, &visible),
            vec!["GPU 1 ×18".to_string(), "0000:c5:00.0 ×1".to_string()]
        );
        assert!(describe_peers(&[], &visible).is_empty());
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
            nvlink_peers: Some(vec!["GPU 1 ×18".to_string()]),
        };
        assert_eq!(facts.link_label(), "PCIe Gen5 x16");
        assert!((facts.link_bytes_per_second().unwrap() / 1e9 - 63.0).abs() < 0.1);
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
        );
        assert_eq!(check.status, Status::Pass);
        assert!(check.summary.contains("driver 580.159.04 (CUDA 13.0)"));
        assert!(check.lines[0].contains("PCIe Gen5 x16 (now Gen1 x16), NVLink to GPU 1 ×18"));
    }
}
