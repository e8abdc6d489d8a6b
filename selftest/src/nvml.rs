//! A thin NVML binding, opened with `dlopen` at run time: driver version, PCIe link generation
//! and width, NVLink peers, and the health counters (ECC, row remapping, page retirement,
//! repairs, recovery action, clock event reasons and their time counters). NVML is optional:
//! without it the inventory falls back to sysfs for the PCIe link and reports NVLink as unknown,
//! and the health check warns that it could read nothing. A function the driver's NVML lacks
//! (an older driver) reads as unsupported. Also the sysfs readers for the PCIe link.

use crate::health::{
    HealthReadout, Reading, RemapHistogram, RemappedRows, RepairStatus, CLOCK_EVENT_TIME_FIELDS,
};
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
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;
/// NVML_ERROR_FUNCTION_NOT_FOUND: the driver lacks what this NVML library exports.
const NVML_ERROR_FUNCTION_NOT_FOUND: c_int = 13;

/// An NVML device handle. NVML is thread-safe and its handles stay valid until nvmlShutdown,
/// which runs only when the `Nvml` that made them is dropped, so they may cross threads.
#[derive(Clone, Copy, Debug)]
pub struct NvmlDevice(Device);
// SAFETY: see above; the handle is an opaque token NVML resolves under its own lock.
unsafe impl Send for NvmlDevice {}
unsafe impl Sync for NvmlDevice {}

/// nvmlFieldValue_t.
#[repr(C)]
#[derive(Clone, Copy)]
struct FieldValue {
    field_id: c_uint,
    scope_id: c_uint,
    timestamp: i64,
    latency_microseconds: i64,
    value_type: c_int,
    nvml_return: c_int,
    value: u64,
}

/// NVML_VALUE_TYPE_*: how a field's 8 bytes are to be read.
fn field_as_u64(field: &FieldValue) -> Option<u64> {
    match field.value_type {
        // double
        0 => Some(f64::from_bits(field.value) as u64),
        // unsigned int, unsigned short
        1 | 6 => Some(field.value & 0xffff_ffff),
        // unsigned long, unsigned long long, signed long long
        2..=4 => Some(field.value),
        // signed int
        5 => Some((field.value & 0xffff_ffff) as u32 as i32 as i64 as u64),
        _ => None,
    }
}

/// An NVML return code as a reading.
fn reading<T>(status: c_int, value: T) -> Reading<T> {
    match status {
        NVML_SUCCESS => Reading::Value(value),
        NVML_ERROR_NOT_SUPPORTED | NVML_ERROR_FUNCTION_NOT_FOUND => Reading::Unsupported,
        code => Reading::Error(code),
    }
}
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

    /// The handle of the GPU at PCI bus id `bus_id`.
    pub fn device(&self, bus_id: &str) -> Option<NvmlDevice> {
        self.device_by_bus_id(bus_id).map(NvmlDevice)
    }

    /// Calls `symbol`, a function of (device, out pointer); a missing symbol is unsupported.
    fn query<T: Default>(&self, symbol: &[u8], device: NvmlDevice) -> Reading<T> {
        let mut value = T::default();
        unsafe {
            let Ok(function) = self
                .library
                .get::<unsafe extern "C" fn(Device, *mut T) -> c_int>(symbol)
            else {
                return Reading::Unsupported;
            };
            let status = function(device.0, &mut value);
            reading(status, value)
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

impl Nvml {
    /// The clock event (throttle) reasons active now, a bit mask of nvmlClocksEventReason*
    /// (the function's older name on drivers before 535).
    pub fn clock_event_reasons(&self, device: NvmlDevice) -> Reading<u64> {
        match self.query::<u64>(b"nvmlDeviceGetCurrentClocksEventReasons\0", device) {
            Reading::Unsupported => {
                self.query::<u64>(b"nvmlDeviceGetCurrentClocksThrottleReasons\0", device)
            }
            other => other,
        }
    }

    /// The current PCIe link generation and width.
    pub fn current_link(&self, device: NvmlDevice) -> (Reading<u32>, Reading<u32>) {
        (
            self.query::<c_uint>(b"nvmlDeviceGetCurrPcieLinkGeneration\0", device),
            self.query::<c_uint>(b"nvmlDeviceGetCurrPcieLinkWidth\0", device),
        )
    }

    /// Field values by id, each with its own reading (nvmlDeviceGetFieldValues).
    pub fn field_values(&self, device: NvmlDevice, ids: &[u32]) -> Vec<Reading<u64>> {
        let mut fields: Vec<FieldValue> = ids
            .iter()
            .map(|&field_id| FieldValue {
                field_id,
                scope_id: 0,
                timestamp: 0,
                latency_microseconds: 0,
                value_type: 0,
                nvml_return: 0,
                value: 0,
            })
            .collect();
        let status = unsafe {
            let Ok(function) =
                self.library
                    .get::<unsafe extern "C" fn(Device, c_int, *mut FieldValue) -> c_int>(
                        b"nvmlDeviceGetFieldValues\0",
                    )
            else {
                return vec![Reading::Unsupported; ids.len()];
            };
            function(device.0, fields.len() as c_int, fields.as_mut_ptr())
        };
        if status != NVML_SUCCESS {
            // The call as a whole failed: every field shares its answer.
            return vec![reading(status, 0u64); ids.len()];
        }
        fields
            .iter()
            .map(|field| match reading(field.nvml_return, ()) {
                Reading::Value(()) => field_as_u64(field)
                    .map(Reading::Value)
                    .unwrap_or(Reading::Unsupported),
                Reading::Unsupported => Reading::Unsupported,
                Reading::Error(code) => Reading::Error(code),
            })
            .collect()
    }

    /// The time counters of clock events (`CLOCK_EVENT_TIME_FIELDS`), in nanoseconds.
    pub fn clock_event_times(&self, device: NvmlDevice) -> Vec<Reading<u64>> {
        let ids: Vec<u32> = CLOCK_EVENT_TIME_FIELDS.iter().map(|(id, _)| *id).collect();
        self.field_values(device, &ids)
    }

    /// The health counters of one GPU.
    pub fn health(&self, device: NvmlDevice) -> HealthReadout {
        // nvmlMemoryErrorType_t, nvmlEccCounterType_t, nvmlPageRetirementCause_t.
        const CORRECTED: c_int = 0;
        const UNCORRECTED: c_int = 1;
        const VOLATILE: c_int = 0;
        const AGGREGATE: c_int = 1;
        const CAUSE_SINGLE_BIT: c_int = 0;
        const CAUSE_DOUBLE_BIT: c_int = 1;
        const FIELD_RECOVERY_ACTION: u32 = 230;
        let handle = device.0;
        let ecc_total = |error_type: c_int, counter_type: c_int| -> Reading<u64> {
            let mut count: u64 = 0;
            unsafe {
                let Ok(function) =
                    self.library
                        .get::<unsafe extern "C" fn(Device, c_int, c_int, *mut u64) -> c_int>(
                            b"nvmlDeviceGetTotalEccErrors\0",
                        )
                else {
                    return Reading::Unsupported;
                };
                reading(
                    function(handle, error_type, counter_type, &mut count),
                    count,
                )
            }
        };
        let ecc_enabled = unsafe {
            match self
                .library
                .get::<unsafe extern "C" fn(Device, *mut c_int, *mut c_int) -> c_int>(
                    b"nvmlDeviceGetEccMode\0",
                ) {
                Err(_) => Reading::Unsupported,
                Ok(function) => {
                    let (mut current, mut pending) = (0, 0);
                    reading(function(handle, &mut current, &mut pending), current == 1)
                }
            }
        };
        let remapped_rows = unsafe {
            match self.library.get::<unsafe extern "C" fn(
                Device,
                *mut c_uint,
                *mut c_uint,
                *mut c_uint,
                *mut c_uint,
            ) -> c_int>(b"nvmlDeviceGetRemappedRows\0")
            {
                Err(_) => Reading::Unsupported,
                Ok(function) => {
                    let (mut correctable, mut uncorrectable, mut pending, mut failed) =
                        (0, 0, 0, 0);
                    let status = function(
                        handle,
                        &mut correctable,
                        &mut uncorrectable,
                        &mut pending,
                        &mut failed,
                    );
                    reading(
                        status,
                        RemappedRows {
                            correctable,
                            uncorrectable,
                            pending: pending != 0,
                            failed: failed != 0,
                        },
                    )
                }
            }
        };
        let remap_histogram = self
            .query::<[c_uint; 5]>(b"nvmlDeviceGetRowRemapperHistogram\0", device)
            .map(|[max, high, partial, low, none]| RemapHistogram {
                max,
                high,
                partial,
                low,
                none,
            });
        let retired_count = |cause: c_int| -> Reading<u32> {
            let mut count: c_uint = 0;
            unsafe {
                let Ok(function) =
                    self.library
                        .get::<unsafe extern "C" fn(Device, c_int, *mut c_uint, *mut u64) -> c_int>(
                            b"nvmlDeviceGetRetiredPages\0",
                        )
                else {
                    return Reading::Unsupported;
                };
                // A count of 0 asks for the number only; with pages to list NVML says the
                // buffer is too small and sets the count.
                let status = function(handle, cause, &mut count, std::ptr::null_mut());
                if status == NVML_ERROR_INSUFFICIENT_SIZE {
                    Reading::Value(count)
                } else {
                    reading(status, count)
                }
            }
        };
        // nvmlRepairStatus_v1_t: its version word is its size with the version in the top byte.
        let repair = unsafe {
            match self
                .library
                .get::<unsafe extern "C" fn(Device, *mut [c_uint; 3]) -> c_int>(
                    b"nvmlDeviceGetRepairStatus\0",
                ) {
                Err(_) => Reading::Unsupported,
                Ok(function) => {
                    let mut status_struct: [c_uint; 3] = [
                        (std::mem::size_of::<[c_uint; 3]>() as c_uint) | (1 << 24),
                        0,
                        0,
                    ];
                    let status = function(handle, &mut status_struct);
                    reading(
                        status,
                        RepairStatus {
                            channel_pending: status_struct[1] != 0,
                            tpc_pending: status_struct[2] != 0,
                        },
                    )
                }
            }
        };
        HealthReadout {
            ecc_enabled,
            ecc_uncorrected_volatile: ecc_total(UNCORRECTED, VOLATILE),
            ecc_uncorrected_aggregate: ecc_total(UNCORRECTED, AGGREGATE),
            ecc_corrected_volatile: ecc_total(CORRECTED, VOLATILE),
            ecc_corrected_aggregate: ecc_total(CORRECTED, AGGREGATE),
            remapped_rows,
            remap_histogram,
            retired_pages_pending: self
                .query::<c_int>(b"nvmlDeviceGetRetiredPagesPendingStatus\0", device)
                .map(|state| state == 1),
            retired_pages_single_bit: retired_count(CAUSE_SINGLE_BIT),
            retired_pages_double_bit: retired_count(CAUSE_DOUBLE_BIT),
            repair,
            // Newer drivers only (not in driver 580's NVML): a missing symbol is unsupported.
            unrepairable_memory: self
                .query::<c_uint>(b"nvmlDeviceGetUnrepairableMemoryFlag_v1\0", device)
                .map(|flag| flag != 0),
            recovery_action: self
                .field_values(device, &[FIELD_RECOVERY_ACTION])
                .pop()
                .unwrap_or(Reading::Unsupported)
                .map(|code| code as u32),
        }
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
