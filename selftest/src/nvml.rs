//! A thin NVML binding, opened with `dlopen` at run time: driver version, PCIe link generation
//! and width, and NVLink peers. NVML is optional: without it the inventory falls back to sysfs
//! for the PCIe link and reports NVLink as unknown. Also the sysfs readers for the PCIe link.

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::Path;

type Device = *mut c_void;

/// nvmlPciInfo_t: the remote end of an NVLink.
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// Per-GPU facts NVML gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmlDeviceFacts {
    pub max_link_generation: Option<u32>,
    pub max_link_width: Option<u32>,
    pub current_link_generation: Option<u32>,
    pub current_link_width: Option<u32>,
    /// Normalised PCI bus ids of the remote ends of active NVLinks, one entry per link (a
    /// virtual machine may hide them as `ffffffff:ff:ff.0`).
    pub nvlink_remote_bus_ids: Vec<String>,
    /// Number of NVLinks in the active state.
    pub active_nvlinks: u32,
}

/// An initialised NVML library; shut down on drop.
pub struct Nvml {
    library: Library,
}

const NVML_SUCCESS: c_int = 0;
/// NVML_NVLINK_MAX_LINKS in nvml.h (Hopper has 18 links).
const MAX_NVLINKS: c_uint = 18;

impl Nvml {
    /// Opens NVML at `path` and initialises it; `None` on any failure (NVML is optional).
    pub fn open(path: &Path) -> Option<Nvml> {
        let library = unsafe { Library::new(path) }.ok()?;
        let nvml = Nvml { library };
        let status = unsafe {
            let init: Symbol<unsafe extern "C" fn() -> c_int> =
                nvml.library.get(b"nvmlInit_v2\0").ok()?;
            init()
        };
        (status == NVML_SUCCESS).then_some(nvml)
    }

    /// The driver version string ("580.159.04").
    pub fn driver_version(&self) -> Option<String> {
        let mut buffer = [0 as c_char; 96];
        unsafe {
            let function: Symbol<unsafe extern "C" fn(*mut c_char, c_uint) -> c_int> =
                self.library.get(b"nvmlSystemGetDriverVersion\0").ok()?;
            if function(buffer.as_mut_ptr(), buffer.len() as c_uint) != NVML_SUCCESS {
                return None;
            }
            Some(
                CStr::from_ptr(buffer.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            )
        }
    }

    fn device_by_bus_id(&self, bus_id: &str) -> Option<Device> {
        let bus_id = CString::new(bus_id).ok()?;
        let mut device: Device = std::ptr::null_mut();
        unsafe {
            let function: Symbol<unsafe extern "C" fn(*const c_char, *mut Device) -> c_int> = self
                .library
                .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
                .ok()?;
            (function(bus_id.as_ptr(), &mut device) == NVML_SUCCESS).then_some(device)
        }
    }

    fn unsigned_query(&self, symbol: &[u8], device: Device) -> Option<u32> {
        let mut value: c_uint = 0;
        unsafe {
            let function: Symbol<unsafe extern "C" fn(Device, *mut c_uint) -> c_int> =
                self.library.get(symbol).ok()?;
            (function(device, &mut value) == NVML_SUCCESS).then_some(value)
        }
    }

    /// Facts about the GPU at PCI bus id `bus_id` (as CUDA reports it, "0000:18:00.0").
    pub fn device_facts(&self, bus_id: &str) -> Option<NvmlDeviceFacts> {
        let device = self.device_by_bus_id(bus_id)?;
        let mut facts = NvmlDeviceFacts {
            max_link_generation: self
                .unsigned_query(b"nvmlDeviceGetMaxPcieLinkGeneration\0", device),
            max_link_width: self.unsigned_query(b"nvmlDeviceGetMaxPcieLinkWidth\0", device),
            current_link_generation: self
                .unsigned_query(b"nvmlDeviceGetCurrPcieLinkGeneration\0", device),
            current_link_width: self.unsigned_query(b"nvmlDeviceGetCurrPcieLinkWidth\0", device),
            nvlink_remote_bus_ids: Vec::new(),
            active_nvlinks: 0,
        };
        unsafe {
            let state: Option<Symbol<unsafe extern "C" fn(Device, c_uint, *mut c_int) -> c_int>> =
                self.library.get(b"nvmlDeviceGetNvLinkState\0").ok();
            let remote: Option<
                Symbol<unsafe extern "C" fn(Device, c_uint, *mut PciInfo) -> c_int>,
            > = self
                .library
                .get(b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0")
                .ok();
            if let (Some(state), Some(remote)) = (state, remote) {
                for link in 0..MAX_NVLINKS {
                    let mut active: c_int = 0;
                    if state(device, link, &mut active) != NVML_SUCCESS || active == 0 {
                        continue;
                    }
                    facts.active_nvlinks += 1;
                    let mut info: PciInfo = std::mem::zeroed();
                    if remote(device, link, &mut info) == NVML_SUCCESS {
                        let text = CStr::from_ptr(info.bus_id.as_ptr()).to_string_lossy();
                        facts
                            .nvlink_remote_bus_ids
                            .push(normalize_bus_id(&text).unwrap_or(text.into_owned()));
                    }
                }
            }
        }
        Some(facts)
    }
}

impl Nvml {
    /// Whether NVML reports NVLink peer-to-peer between the GPUs at these two bus ids
    /// (nvmlDeviceGetP2PStatus with NVML_P2P_CAPS_INDEX_NVLINK).
    pub fn nvlink_between(&self, first_bus_id: &str, second_bus_id: &str) -> Option<bool> {
        const CAPS_INDEX_NVLINK: c_int = 2;
        const STATUS_OK: c_int = 0;
        let first = self.device_by_bus_id(first_bus_id)?;
        let second = self.device_by_bus_id(second_bus_id)?;
        let mut status: c_int = -1;
        unsafe {
            let function: Symbol<unsafe extern "C" fn(Device, Device, c_int, *mut c_int) -> c_int> =
                self.library.get(b"nvmlDeviceGetP2PStatus\0").ok()?;
            if function(first, second, CAPS_INDEX_NVLINK, &mut status) != NVML_SUCCESS {
                return None;
            }
        }
        Some(status == STATUS_OK)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        unsafe {
            if let Ok(shutdown) = self
                .library
                .get::<unsafe extern "C" fn() -> c_int>(b"nvmlShutdown\0")
            {
                shutdown();
            }
        }
    }
}

/// Normalises a PCI bus id to `dddd:bb:dd.f` in lower case: CUDA says "0000:18:00.0", NVML
/// "00000000:18:00.0".
pub fn normalize_bus_id(text: &str) -> Option<String> {
    let text = text.trim().trim_end_matches('\0');
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let number = |part: &str| u32::from_str_radix(part, 16).ok();
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        number(domain)?,
        number(bus)?,
        number(device)?,
        number(function)?
    ))
}

/// The PCIe generation of a sysfs link speed ("32.0 GT/s PCIe" → 5).
pub fn generation_from_link_speed(text: &str) -> Option<u32> {
    let rate: f64 = text.split_whitespace().next()?.parse().ok()?;
    [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
    ]
    .into_iter()
    .find(|(speed, _)| (rate - speed).abs() < 0.01)
    .map(|(_, generation)| generation)
}

/// Reads (generation, width) of a PCIe link from sysfs: `kind` is "max" or "current".
pub fn sysfs_link(device_folder: &Path, kind: &str) -> Option<(u32, u32)> {
    let speed = std::fs::read_to_string(device_folder.join(format!("{kind}_link_speed"))).ok()?;
    let width = std::fs::read_to_string(device_folder.join(format!("{kind}_link_width"))).ok()?;
    Some((
        generation_from_link_speed(&speed)?,
        width.trim().parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_from_cuda_and_nvml_agree() {
        assert_eq!(
            normalize_bus_id("00000000:18:00.0").as_deref(),
            Some("0000:18:00.0")
        );
        assert_eq!(
            normalize_bus_id("0000:9A:00.0").as_deref(),
            Some("0000:9a:00.0")
        );
        assert_eq!(normalize_bus_id("garbage"), None);
    }

    #[test]
    fn sysfs_link_speeds_map_to_generations() {
        assert_eq!(generation_from_link_speed("32.0 GT/s PCIe\n"), Some(5));
        assert_eq!(generation_from_link_speed("2.5 GT/s PCIe"), Some(1));
        assert_eq!(generation_from_link_speed("16.0 GT/s"), Some(4));
        assert_eq!(generation_from_link_speed("Unknown"), None);
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("max_link_speed"), "32.0 GT/s PCIe\n").unwrap();
        std::fs::write(folder.path().join("max_link_width"), "16\n").unwrap();
        assert_eq!(sysfs_link(folder.path(), "max"), Some((5, 16)));
        assert_eq!(sysfs_link(folder.path(), "current"), None);
    }

    #[test]
    fn missing_nvml_is_none_not_a_panic() {
        assert!(Nvml::open(Path::new("/nonexistent/libnvidia-ml.so.1")).is_none());
    }
}
