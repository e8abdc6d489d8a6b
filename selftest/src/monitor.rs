//! Samples NVML on a helper thread while the GPU checks run: the clock event reasons while the
//! matmul check loads the GPUs, the current PCIe link while the copy checks load the link, and
//! NVML's time counters of clock events at the start and end of each check. The run tells the
//! monitor which check is running (`enter`); the monitor keeps what it saw per check and hands
//! the health check one `LoadObservation` per GPU (`finish`). Only NVML is called here: the
//! checks' own figures are timed by CUDA events on the GPUs, which these reads do not touch.

use crate::health::{LoadObservation, Reading, CLOCK_REASONS};
use crate::nvml::{Nvml, NvmlDevice};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The check whose load the clock event reasons are judged under.
pub const CLOCK_EVENT_CHECK: &str = "matmul";
/// The checks that copy between host and GPU, under whose load the PCIe link is judged.
pub const LINK_CHECKS: [&str; 2] = ["bandwidth", "overlap"];
/// Time between two samples of every GPU.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(20);

/// What was seen of one GPU during one check.
#[derive(Clone, Debug, Default)]
struct CheckRecord {
    reason_samples: u32,
    reason_active: [u32; CLOCK_REASONS.len()],
    reason_failure: Option<Reading<()>>,
    link_samples: u32,
    link_generation: Option<u32>,
    link_width: Option<u32>,
    link_failure: Option<Reading<()>>,
    times_at_start: Vec<Reading<u64>>,
    times_at_end: Vec<Reading<u64>>,
}

/// The state the run's thread and the sampling thread share.
struct Shared {
    stop: AtomicBool,
    /// The check running now, if any.
    check: Mutex<Option<&'static str>>,
    /// Per GPU, per check.
    records: Mutex<Vec<BTreeMap<&'static str, CheckRecord>>>,
}

/// A running monitor; `finish` stops it.
pub struct Monitor {
    nvml: Arc<Nvml>,
    devices: Vec<Option<NvmlDevice>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Starts sampling `devices` (one per GPU, `None` where NVML has no handle for it).
    pub fn start(nvml: Arc<Nvml>, devices: Vec<Option<NvmlDevice>>) -> Monitor {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            check: Mutex::new(None),
            records: Mutex::new(vec![BTreeMap::new(); devices.len()]),
        });
        let thread = {
            let (nvml, devices, shared) = (nvml.clone(), devices.clone(), shared.clone());
            std::thread::spawn(move || sample_until_stopped(&nvml, &devices, &shared))
        };
        Monitor {
            nvml,
            devices,
            shared,
            thread: Some(thread),
        }
    }

    /// Reads the clock event time counters of every GPU: the end of the check before, the start
    /// of `check`.
    fn mark(&self, check: Option<&'static str>) {
        let times: Vec<Vec<Reading<u64>>> = self
            .devices
            .iter()
            .map(|device| match device {
                Some(device) => self.nvml.clock_event_times(*device),
                None => Vec::new(),
            })
            .collect();
        let mut current = lock(&self.shared.check);
        let mut records = lock(&self.shared.records);
        for (gpu, times) in records.iter_mut().zip(times) {
            if let Some(previous) = *current {
                gpu.entry(previous).or_default().times_at_end = times.clone();
            }
            if let Some(next) = check {
                gpu.entry(next).or_default().times_at_start = times;
            }
        }
        *current = check;
    }

    /// The run is about to start `check`.
    pub fn enter(&self, check: &'static str) {
        self.mark(Some(check));
    }

    /// Stops sampling and returns what was seen of each GPU.
    pub fn finish(mut self) -> Vec<LoadObservation> {
        self.mark(None);
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let records = lock(&self.shared.records);
        records.iter().map(observation).collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A mutex's guard, also when a panicking holder poisoned it (the data is counts only).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn sample_until_stopped(nvml: &Nvml, devices: &[Option<NvmlDevice>], shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let check = *lock(&shared.check);
        let wants_reasons = check == Some(CLOCK_EVENT_CHECK);
        let wants_link = check.is_some_and(|name| LINK_CHECKS.contains(&name));
        if let (Some(check), true) = (check, wants_reasons || wants_link) {
            // Read outside the lock, then record.
            let readings: Vec<_> = devices
                .iter()
                .map(|device| {
                    device.map(|device| {
                        (
                            wants_reasons.then(|| nvml.clock_event_reasons(device)),
                            wants_link.then(|| nvml.current_link(device)),
                        )
                    })
                })
                .collect();
            let mut records = lock(&shared.records);
            for (gpu, reading) in records.iter_mut().zip(readings) {
                let Some((reasons, link)) = reading else {
                    continue;
                };
                let record = gpu.entry(check).or_default();
                record_sample(record, reasons, link);
            }
        }
        std::thread::sleep(SAMPLE_INTERVAL);
    }
}

/// Adds one sample to a check's record.
fn record_sample(
    record: &mut CheckRecord,
    reasons: Option<Reading<u64>>,
    link: Option<(Reading<u32>, Reading<u32>)>,
) {
    match reasons {
        Some(Reading::Value(mask)) => {
            record.reason_samples += 1;
            for (count, reason) in record.reason_active.iter_mut().zip(&CLOCK_REASONS) {
                if mask & reason.bit != 0 {
                    *count += 1;
                }
            }
        }
        Some(failure) => record.reason_failure = Some(failure.map(|_| ())),
        None => {}
    }
    match link {
        Some((Reading::Value(generation), Reading::Value(width))) => {
            record.link_samples += 1;
            record.link_generation = record.link_generation.max(Some(generation));
            record.link_width = record.link_width.max(Some(width));
        }
        Some((Reading::Value(_), failure)) | Some((failure, _)) => {
            record.link_failure = Some(failure.map(|_| ()));
        }
        None => {}
    }
}

/// One GPU's records folded into what the health check judges.
fn observation(records: &BTreeMap<&'static str, CheckRecord>) -> LoadObservation {
    let mut result = LoadObservation::default();
    if let Some(record) = records.get(CLOCK_EVENT_CHECK) {
        result.matmul_samples = record.reason_samples;
        result.reason_active = record.reason_active;
        if record.reason_samples == 0 {
            result.reasons_unreadable = record.reason_failure;
        }
        result.event_nanoseconds = record
            .times_at_start
            .iter()
            .zip(&record.times_at_end)
            .map(|(start, end)| match (start, end) {
                (Reading::Value(start), Reading::Value(end)) => {
                    Reading::Value(end.saturating_sub(*start))
                }
                (Reading::Value(_), other) | (other, _) => *other,
            })
            .collect();
    }
    for check in LINK_CHECKS {
        if let Some(record) = records.get(check) {
            result.link_samples += record.link_samples;
            result.link_generation = result.link_generation.max(record.link_generation);
            result.link_width = result.link_width.max(record.link_width);
            if record.link_samples == 0 && result.link_unreadable.is_none() {
                result.link_unreadable = record.link_failure;
            }
        }
    }
    if result.link_samples > 0 {
        result.link_unreadable = None;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_fold_into_an_observation_per_check() {
        let mut records: BTreeMap<&'static str, CheckRecord> = BTreeMap::new();
        let matmul = records.entry("matmul").or_default();
        // Power cap (0x4) in both samples, hardware slowdown (0x8) in one.
        record_sample(matmul, Some(Reading::Value(0x4)), None);
        record_sample(matmul, Some(Reading::Value(0x4 | 0x8)), None);
        matmul.times_at_start = vec![Reading::Value(100), Reading::Unsupported];
        matmul.times_at_end = vec![Reading::Value(350), Reading::Unsupported];
        let bandwidth = records.entry("bandwidth").or_default();
        // The link trains up as the copies start: the best sample counts.
        record_sample(
            bandwidth,
            None,
            Some((Reading::Value(1), Reading::Value(16))),
        );
        record_sample(
            bandwidth,
            None,
            Some((Reading::Value(5), Reading::Value(16))),
        );
        // A failed read of the link elsewhere does not hide the samples that succeeded.
        record_sample(
            records.entry("overlap").or_default(),
            None,
            Some((Reading::Error(999), Reading::Value(16))),
        );
        let seen = observation(&records);
        assert_eq!(seen.matmul_samples, 2);
        assert_eq!(seen.reason_active[2], 2, "power cap");
        assert_eq!(seen.reason_active[3], 1, "hardware slowdown");
        assert_eq!(seen.reason_active[6], 0);
        assert_eq!(
            seen.event_nanoseconds,
            vec![Reading::Value(250), Reading::Unsupported]
        );
        assert_eq!(seen.link_samples, 2);
        assert_eq!((seen.link_generation, seen.link_width), (Some(5), Some(16)));
        assert_eq!(seen.link_unreadable, None);
    }

    #[test]
    fn unreadable_reasons_and_links_say_why() {
        let mut records: BTreeMap<&'static str, CheckRecord> = BTreeMap::new();
        record_sample(
            records.entry("matmul").or_default(),
            Some(Reading::Unsupported),
            None,
        );
        record_sample(
            records.entry("bandwidth").or_default(),
            None,
            Some((Reading::Value(5), Reading::Unsupported)),
        );
        let seen = observation(&records);
        assert_eq!(seen.matmul_samples, 0);
        assert_eq!(seen.reasons_unreadable, Some(Reading::Unsupported));
        assert_eq!(seen.link_samples, 0);
        assert_eq!(seen.link_unreadable, Some(Reading::Unsupported));
        // Nothing recorded for a check that never ran.
        let nothing = observation(&BTreeMap::new());
        assert_eq!(nothing, LoadObservation::default());
    }
}
