//! The health check: the counters through which a GPU says it is failing before it is slow.
//! Uncorrectable ECC errors, row remapping (Ampere and later) or page retirement (older GPUs),
//! the repairs Hopper keeps pending until a reset, the driver's recommended recovery action, the
//! clock event (throttle) reasons seen while the matmul check loads the GPU, and the PCIe link
//! while copies load it.
//!
//! Pure: NVML's answers come in as values (`HealthReadout`, read at the end of the run, and
//! `LoadObservation`, sampled by `monitor.rs` while the checks ran), verdicts go out. A counter
//! the GPU or the driver does not support is `unsupported`, never a pass: the check warns when a
//! counter it needs to call the node healthy cannot be read.

use crate::report::{Check, Metric, Status};
use serde::Serialize;

/// One answer of NVML: a value, or why there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading<T> {
    Value(T),
    /// NVML_ERROR_NOT_SUPPORTED, or the driver's NVML lacks the function.
    Unsupported,
    /// Any other NVML return code (15 = the GPU is lost).
    Error(i32),
}

impl<T: Copy> Reading<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Reading::Value(value) => Some(value),
            _ => None,
        }
    }

    pub fn map<U>(self, convert: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Value(value) => Reading::Value(convert(value)),
            Reading::Unsupported => Reading::Unsupported,
            Reading::Error(code) => Reading::Error(code),
        }
    }
}

/// NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus.
pub const NVML_ERROR_GPU_IS_LOST: i32 = 15;

/// nvmlDeviceGetRemappedRows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failed: bool,
}

/// nvmlDeviceGetRowRemapperHistogram: banks by how many spare rows they have left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemapHistogram {
    pub max: u32,
    pub high: u32,
    pub partial: u32,
    pub low: u32,
    pub none: u32,
}

/// nvmlDeviceGetRepairStatus: repairs that wait for a GPU reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairStatus {
    pub channel_pending: bool,
    pub tpc_pending: bool,
}

/// What NVML says of one GPU at the end of the run (after the GPU checks loaded it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthReadout {
    pub ecc_enabled: Reading<bool>,
    pub ecc_uncorrected_volatile: Reading<u64>,
    pub ecc_uncorrected_aggregate: Reading<u64>,
    pub ecc_corrected_volatile: Reading<u64>,
    pub ecc_corrected_aggregate: Reading<u64>,
    pub remapped_rows: Reading<RemappedRows>,
    pub remap_histogram: Reading<RemapHistogram>,
    pub retired_pages_pending: Reading<bool>,
    pub retired_pages_single_bit: Reading<u32>,
    pub retired_pages_double_bit: Reading<u32>,
    pub repair: Reading<RepairStatus>,
    pub unrepairable_memory: Reading<bool>,
    /// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
    /// 4 drain and reset.
    pub recovery_action: Reading<u32>,
}

impl HealthReadout {
    /// A GPU whose NVML answers nothing (no NVML in the container).
    pub fn unsupported() -> Self {
        HealthReadout {
            ecc_enabled: Reading::Unsupported,
            ecc_uncorrected_volatile: Reading::Unsupported,
            ecc_uncorrected_aggregate: Reading::Unsupported,
            ecc_corrected_volatile: Reading::Unsupported,
            ecc_corrected_aggregate: Reading::Unsupported,
            remapped_rows: Reading::Unsupported,
            remap_histogram: Reading::Unsupported,
            retired_pages_pending: Reading::Unsupported,
            retired_pages_single_bit: Reading::Unsupported,
            retired_pages_double_bit: Reading::Unsupported,
            repair: Reading::Unsupported,
            unrepairable_memory: Reading::Unsupported,
            recovery_action: Reading::Unsupported,
        }
    }
}

/// How a clock event reason is judged when it is seen while the matmul check runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonKind {
    /// A hardware slowdown (clocks cut by half or more): fails from
    /// `HARDWARE_SLOWDOWN_SHARE` of the samples, warns below (NVML may report one briefly
    /// during a change of performance state).
    Hardware,
    /// The GPU holds itself at its maximum operating temperature: warns.
    Thermal,
    /// Expected under full load or set by an administrator: reported, not judged.
    Reported,
}

/// One bit of nvmlClocksEventReasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReason {
    pub bit: u64,
    /// The counter's name in the report (`clock_event_<name>`).
    pub name: &'static str,
    pub words: &'static str,
    pub kind: ReasonKind,
}

/// nvml.h's nvmlClocksEventReason* bits, in bit order.
pub const CLOCK_REASONS: [ClockReason; 9] = [
    ClockReason {
        bit: 0x1,
        name: "gpu_idle",
        words: "GPU idle",
        kind: ReasonKind::Reported,
    },
    ClockReason {
        bit: 0x2,
        name: "applications_clocks_setting",
        words: "application clocks setting",
        kind: ReasonKind::Reported,
    },
    ClockReason {
        bit: 0x4,
        name: "sw_power_cap",
        words: "software power cap",
        kind: ReasonKind::Reported,
    },
    ClockReason {
        bit: 0x8,
        name: "hw_slowdown",
        words: "hardware slowdown",
        kind: ReasonKind::Hardware,
    },
    ClockReason {
        bit: 0x10,
        name: "sync_boost",
        words: "sync boost",
        kind: ReasonKind::Reported,
    },
    ClockReason {
        bit: 0x20,
        name: "sw_thermal_slowdown",
        words: "software thermal slowdown",
        kind: ReasonKind::Thermal,
    },
    ClockReason {
        bit: 0x40,
        name: "hw_thermal_slowdown",
        words: "hardware thermal slowdown",
        kind: ReasonKind::Hardware,
    },
    ClockReason {
        bit: 0x80,
        name: "hw_power_brake_slowdown",
        words: "hardware power brake slowdown",
        kind: ReasonKind::Hardware,
    },
    ClockReason {
        bit: 0x100,
        name: "display_clock_setting",
        words: "display clock setting",
        kind: ReasonKind::Reported,
    },
];

/// A hardware slowdown seen in at least this share of the matmul check's samples fails.
pub const HARDWARE_SLOWDOWN_SHARE: f64 = 0.05;

/// The NVML time counters of clock events (nanoseconds since the driver loaded), by field id:
/// the time each reason held the clocks down, read at the start and end of a check.
pub const CLOCK_EVENT_TIME_FIELDS: [(u32, &str); 4] = [
    (74, "sw_power_cap"),
    (269, "sw_thermal_slowdown"),
    (270, "hw_thermal_slowdown"),
    (271, "hw_power_brake_slowdown"),
];

/// What the monitor saw of one GPU while the checks loaded it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadObservation {
    /// Samples of the clock event reasons taken while the matmul check ran.
    pub matmul_samples: u32,
    /// Per entry of `CLOCK_REASONS`: in how many of those samples the reason was active.
    pub reason_active: [u32; CLOCK_REASONS.len()],
    /// Why the reasons could not be read, when no sample succeeded.
    pub reasons_unreadable: Option<Reading<()>>,
    /// Per entry of `CLOCK_EVENT_TIME_FIELDS`: nanoseconds the reason held the clocks over the
    /// matmul check (end minus start), when NVML counts it.
    pub event_nanoseconds: Vec<Reading<u64>>,
    /// Samples of the PCIe link taken while a check copied between host and GPU (bandwidth,
    /// overlap), and the fastest generation and widest width among them.
    pub link_samples: u32,
    pub link_generation: Option<u32>,
    pub link_width: Option<u32>,
    pub link_unreadable: Option<Reading<()>>,
}

/// One counter's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Judged and healthy.
    Ok,
    /// Read and reported, not judged (correctable errors, power capping under load).
    Reported,
    Warn,
    Fail,
    /// The GPU or the driver does not support it: never a pass.
    Unsupported,
    /// Not measured in this run (the check that loads the GPU for it did not run).
    NotMeasured,
    /// NVML answered with an error.
    Error,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Reported => "reported",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::Unsupported => "unsupported",
            Verdict::NotMeasured => "not measured",
            Verdict::Error => "ERROR",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Reported => "reported",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
            Verdict::Unsupported => "unsupported",
            Verdict::NotMeasured => "not_measured",
            Verdict::Error => "error",
        }
    }
}

/// What to do with the node when a counter fails or warns (README.md's check table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Keep the node; watch the counter in later runs.
    Watch,
    /// Drain the node's GPU jobs, reset the GPU (`nvidia-smi -r`, or reboot), run again.
    DrainAndReset,
    /// Drain and reboot the node.
    DrainAndReboot,
    /// Drain peer-to-peer (multi-GPU) work until the GPU is reset.
    DrainPeerToPeer,
    /// Drain the node and return the GPU (or board) to the vendor.
    Rma,
    /// Drain and check the node's cooling and power delivery.
    CheckCoolingAndPower,
    /// Drain and reseat the GPU, check the riser, slot and BIOS link settings.
    CheckPcieLink,
}

impl Action {
    pub fn words(self) -> &'static str {
        match self {
            Action::Watch => "watch it",
            Action::DrainAndReset => "drain, reset the GPU",
            Action::DrainAndReboot => "drain, reboot the node",
            Action::DrainPeerToPeer => "drain multi-GPU work, reset the GPU",
            Action::Rma => "drain, RMA the GPU",
            Action::CheckCoolingAndPower => "drain, check cooling and power",
            Action::CheckPcieLink => "drain, reseat the GPU / check riser, slot and BIOS",
        }
    }
}

/// One counter of one GPU as the report carries it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Counter {
    pub counter: &'static str,
    /// The value read (a count, 0/1 for a flag, a share of samples, seconds); null when there
    /// is none.
    pub value: Option<f64>,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    /// What the value means, in words.
    pub note: String,
    /// Needed to call the GPU healthy: the check warns when it is unsupported or not measured.
    #[serde(skip)]
    pub essential: bool,
}

impl Counter {
    fn new(counter: &'static str, value: Option<f64>, verdict: Verdict, note: String) -> Self {
        Counter {
            counter,
            value,
            verdict,
            action: None,
            note,
            essential: false,
        }
    }

    fn essential(mut self) -> Self {
        self.essential = true;
        self
    }

    fn acting(mut self, action: Action) -> Self {
        if matches!(self.verdict, Verdict::Fail | Verdict::Warn) {
            self.action = Some(action);
        }
        self
    }

    /// Whether this counter keeps the check from passing.
    fn blocks_pass(&self) -> bool {
        match self.verdict {
            Verdict::Fail | Verdict::Warn | Verdict::Error => true,
            Verdict::Unsupported | Verdict::NotMeasured => self.essential,
            Verdict::Ok | Verdict::Reported => false,
        }
    }
}

/// A reading that could not be had becomes its counter with the verdict that says why; a GPU
/// that is lost fails.
fn unread<T>(counter: &'static str, reading: Reading<T>, why_unsupported: &str) -> Option<Counter> {
    match reading {
        Reading::Value(_) => None,
        Reading::Unsupported => Some(Counter::new(
            counter,
            None,
            Verdict::Unsupported,
            why_unsupported.to_string(),
        )),
        Reading::Error(NVML_ERROR_GPU_IS_LOST) => Some(
            Counter::new(
                counter,
                None,
                Verdict::Fail,
                "NVML: the GPU is lost (fell off the bus)".to_string(),
            )
            .acting(Action::DrainAndReboot),
        ),
        Reading::Error(code) => Some(Counter::new(
            counter,
            None,
            Verdict::Error,
            format!("NVML error {code}"),
        )),
    }
}

/// A count that must be zero.
fn zero_count(counter: &'static str, reading: Reading<u64>, what: &str, action: Action) -> Counter {
    if let Some(counter) = unread(counter, reading, "no ECC on this GPU, or ECC is off") {
        return counter.essential();
    }
    let count = reading.value().unwrap_or(0);
    let verdict = if count == 0 {
        Verdict::Ok
    } else {
        Verdict::Fail
    };
    Counter::new(
        counter,
        Some(count as f64),
        verdict,
        format!("{count} {what}"),
    )
    .acting(action)
    .essential()
}

/// A flag that must be off.
fn clear_flag(
    counter: &'static str,
    reading: Reading<bool>,
    when_set: &str,
    when_clear: &str,
    why_unsupported: &str,
    action: Action,
) -> Counter {
    if let Some(counter) = unread(counter, reading, why_unsupported) {
        return counter;
    }
    let set = reading.value().unwrap_or(false);
    let (verdict, note) = if set {
        (Verdict::Fail, when_set)
    } else {
        (Verdict::Ok, when_clear)
    };
    Counter::new(
        counter,
        Some(if set { 1.0 } else { 0.0 }),
        verdict,
        note.to_string(),
    )
    .acting(action)
}

/// A count that is reported, not judged.
fn reported(counter: &'static str, reading: Reading<u64>, what: &str, why: &str) -> Counter {
    if let Some(counter) = unread(counter, reading, why) {
        return counter;
    }
    let count = reading.value().unwrap_or(0);
    Counter::new(
        counter,
        Some(count as f64),
        Verdict::Reported,
        format!("{count} {what}"),
    )
}

/// The memory counters: ECC, row remapping or page retirement, pending repairs, the driver's
/// recovery action.
pub fn judge_memory(readout: &HealthReadout) -> Vec<Counter> {
    let ecc_enabled = match readout.ecc_enabled {
        Reading::Value(true) => Counter::new(
            "ecc_enabled",
            Some(1.0),
            Verdict::Ok,
            "ECC is on".to_string(),
        ),
        Reading::Value(false) => Counter::new(
            "ecc_enabled",
            Some(0.0),
            Verdict::Warn,
            "ECC is off: memory errors go unseen and uncorrected (nvidia-smi -e 1, then reboot)"
                .to_string(),
        )
        .acting(Action::Watch),
        other => unread("ecc_enabled", other, "no ECC on this GPU")
            .unwrap_or_else(|| Counter::new("ecc_enabled", None, Verdict::Error, String::new())),
    };
    let mut counters = vec![
        ecc_enabled,
        zero_count(
            "ecc_uncorrected_volatile",
            readout.ecc_uncorrected_volatile,
            "uncorrectable ECC errors since the driver loaded",
            Action::DrainAndReset,
        ),
        zero_count(
            "ecc_uncorrected_aggregate",
            readout.ecc_uncorrected_aggregate,
            "uncorrectable ECC errors over the GPU's life",
            Action::Rma,
        ),
        reported(
            "ecc_corrected_volatile",
            readout.ecc_corrected_volatile,
            "corrected ECC errors since the driver loaded",
            "no ECC on this GPU, or ECC is off",
        ),
        reported(
            "ecc_corrected_aggregate",
            readout.ecc_corrected_aggregate,
            "corrected ECC errors over the GPU's life",
            "no ECC on this GPU, or ECC is off",
        ),
    ];

    // Ampere and later remap rows; older GPUs retire pages. The memory is judged by whichever
    // the GPU supports, and only both missing makes it unknown.
    let remaps = !matches!(readout.remapped_rows, Reading::Unsupported);
    let retires = !matches!(readout.retired_pages_pending, Reading::Unsupported);
    let remap_rows = readout.remapped_rows.map(|rows| rows.pending);
    let mut pending = clear_flag(
        "row_remap_pending",
        remap_rows,
        "a row remapping waits for a GPU reset",
        "no row remapping pending",
        if retires {
            "no row remapping on this GPU (it retires pages instead)"
        } else {
            "no row remapping and no page retirement readable: the memory's repairs are unknown"
        },
        Action::DrainAndReset,
    );
    pending.essential = !retires;
    counters.push(pending);
    let mut failed = clear_flag(
        "row_remap_failed",
        readout.remapped_rows.map(|rows| rows.failed),
        "a row remapping failed: the memory cannot be repaired",
        "no row remapping has failed",
        "no row remapping on this GPU",
        Action::Rma,
    );
    failed.essential = !retires;
    counters.push(failed);
    for (counter, rows, what) in [
        (
            "remapped_rows_uncorrectable",
            readout.remapped_rows.map(|rows| rows.uncorrectable as u64),
            "rows remapped after uncorrectable errors",
        ),
        (
            "remapped_rows_correctable",
            readout.remapped_rows.map(|rows| rows.correctable as u64),
            "rows remapped after correctable errors",
        ),
    ] {
        counters.push(reported(
            counter,
            rows,
            what,
            "no row remapping on this GPU",
        ));
    }
    counters.push(match readout.remap_histogram {
        Reading::Value(histogram) if histogram.none > 0 => Counter::new(
            "remap_banks_exhausted",
            Some(histogram.none as f64),
            Verdict::Warn,
            format!(
                "{} memory bank(s) have no spare row left: the next uncorrectable error there cannot be remapped",
                histogram.none
            ),
        )
        .acting(Action::Rma),
        Reading::Value(histogram) => Counter::new(
            "remap_banks_exhausted",
            Some(0.0),
            Verdict::Ok,
            format!(
                "every memory bank has spare rows (banks with all/high/partial/low spares: {}/{}/{}/{})",
                histogram.max, histogram.high, histogram.partial, histogram.low
            ),
        ),
        other => unread("remap_banks_exhausted", other, "no row remapping on this GPU")
            .expect("not a value"),
    });
    let mut retired = clear_flag(
        "retired_pages_pending",
        readout.retired_pages_pending,
        "retired pages wait for a GPU reset to be taken out of use",
        "no page waits for retirement",
        if remaps {
            "no page retirement on this GPU (it remaps rows instead)"
        } else {
            "no page retirement and no row remapping readable: the memory's repairs are unknown"
        },
        Action::DrainAndReset,
    );
    retired.essential = !remaps;
    counters.push(retired);
    counters.push(reported(
        "retired_pages_double_bit",
        readout.retired_pages_double_bit.map(u64::from),
        "pages retired after double-bit errors",
        "no page retirement on this GPU",
    ));
    counters.push(reported(
        "retired_pages_single_bit",
        readout.retired_pages_single_bit.map(u64::from),
        "pages retired after repeated single-bit errors",
        "no page retirement on this GPU",
    ));

    counters.push(clear_flag(
        "repair_channel_pending",
        readout.repair.map(|repair| repair.channel_pending),
        "a memory channel repair waits for a GPU reset",
        "no channel repair pending",
        "no repair status from this GPU or driver (nvmlDeviceGetRepairStatus)",
        Action::DrainAndReset,
    ));
    counters.push(clear_flag(
        "repair_tpc_pending",
        readout.repair.map(|repair| repair.tpc_pending),
        "a TPC (compute unit) repair waits for a GPU reset",
        "no TPC repair pending",
        "no repair status from this GPU or driver (nvmlDeviceGetRepairStatus)",
        Action::DrainAndReset,
    ));
    counters.push(clear_flag(
        "unrepairable_memory",
        readout.unrepairable_memory,
        "the GPU flags memory it cannot repair",
        "no unrepairable memory flagged",
        "no unrepairable-memory flag from this GPU or driver (nvmlDeviceGetUnrepairableMemoryFlag_v1, newer drivers)",
        Action::Rma,
    ));
    counters.push(match readout.recovery_action {
        Reading::Value(code) => {
            let (verdict, note, action) = match code {
                0 => (Verdict::Ok, "the driver asks for no recovery", None),
                1 => (
                    Verdict::Fail,
                    "the driver asks for a GPU reset",
                    Some(Action::DrainAndReset),
                ),
                2 => (
                    Verdict::Fail,
                    "the driver asks for a node reboot",
                    Some(Action::DrainAndReboot),
                ),
                3 => (
                    Verdict::Fail,
                    "the driver asks to drain peer-to-peer traffic",
                    Some(Action::DrainPeerToPeer),
                ),
                4 => (
                    Verdict::Fail,
                    "the driver asks to drain the node and reset the GPU",
                    Some(Action::DrainAndReset),
                ),
                _ => (
                    Verdict::Warn,
                    "the driver asks for a recovery action this tool does not know",
                    Some(Action::DrainAndReset),
                ),
            };
            let counter = Counter::new(
                "recovery_action",
                Some(code as f64),
                verdict,
                note.to_string(),
            );
            match action {
                Some(action) => counter.acting(action),
                None => counter,
            }
        }
        other => unread(
            "recovery_action",
            other,
            "no recovery action from this GPU or driver (NVML field 230)",
        )
        .expect("not a value"),
    });
    counters
}

/// The clock event reasons sampled while the matmul check ran.
pub fn judge_clock_events(observation: &LoadObservation) -> Vec<Counter> {
    let mut counters = Vec::new();
    if observation.matmul_samples == 0 {
        let (verdict, note) = match observation.reasons_unreadable {
            Some(Reading::Unsupported) => (
                Verdict::Unsupported,
                "the GPU or driver reports no clock event reasons".to_string(),
            ),
            Some(Reading::Error(code)) => (Verdict::Error, format!("NVML error {code}")),
            _ => (
                Verdict::NotMeasured,
                "the matmul check did not run: nothing loaded the GPU".to_string(),
            ),
        };
        for reason in &CLOCK_REASONS {
            let mut counter = Counter::new(clock_counter_name(reason), None, verdict, note.clone());
            counter.essential = reason.kind != ReasonKind::Reported;
            counters.push(counter);
        }
        return counters;
    }
    let samples = observation.matmul_samples;
    for (reason, &active) in CLOCK_REASONS.iter().zip(&observation.reason_active) {
        let share = active as f64 / samples as f64;
        let seen = format!(
            "{} in {active} of {samples} samples during matmul ({:.0}%)",
            reason.words,
            share * 100.0
        );
        let (verdict, action) = match (reason.kind, active) {
            (_, 0) if reason.kind != ReasonKind::Reported => (Verdict::Ok, None),
            (ReasonKind::Hardware, _) if share >= HARDWARE_SLOWDOWN_SHARE => {
                (Verdict::Fail, Some(Action::CheckCoolingAndPower))
            }
            (ReasonKind::Hardware, _) => (Verdict::Warn, Some(Action::Watch)),
            (ReasonKind::Thermal, _) => (Verdict::Warn, Some(Action::CheckCoolingAndPower)),
            (ReasonKind::Reported, _) => (Verdict::Reported, None),
        };
        let mut counter = Counter::new(clock_counter_name(reason), Some(share), verdict, seen);
        counter.essential = reason.kind != ReasonKind::Reported;
        if let Some(action) = action {
            counter = counter.acting(action);
        }
        counters.push(counter);
    }
    for ((_, name), reading) in CLOCK_EVENT_TIME_FIELDS
        .iter()
        .zip(&observation.event_nanoseconds)
    {
        let counter = clock_time_counter_name(name);
        counters.push(
            match unread(
                counter,
                *reading,
                "the driver keeps no time counter for this reason",
            ) {
                Some(counter) => counter,
                None => {
                    let seconds = reading.value().unwrap_or(0) as f64 / 1e9;
                    Counter::new(
                        counter,
                        Some(seconds),
                        Verdict::Reported,
                        format!("{seconds:.3} s held by {name} during matmul (NVML's own count)"),
                    )
                }
            },
        );
    }
    counters
}

fn clock_counter_name(reason: &ClockReason) -> &'static str {
    match reason.name {
        "gpu_idle" => "clock_event_gpu_idle",
        "applications_clocks_setting" => "clock_event_applications_clocks_setting",
        "sw_power_cap" => "clock_event_sw_power_cap",
        "hw_slowdown" => "clock_event_hw_slowdown",
        "sync_boost" => "clock_event_sync_boost",
        "sw_thermal_slowdown" => "clock_event_sw_thermal_slowdown",
        "hw_thermal_slowdown" => "clock_event_hw_thermal_slowdown",
        "hw_power_brake_slowdown" => "clock_event_hw_power_brake_slowdown",
        _ => "clock_event_display_clock_setting",
    }
}

fn clock_time_counter_name(name: &str) -> &'static str {
    match name {
        "sw_power_cap" => "clock_event_seconds_sw_power_cap",
        "sw_thermal_slowdown" => "clock_event_seconds_sw_thermal_slowdown",
        "hw_thermal_slowdown" => "clock_event_seconds_hw_thermal_slowdown",
        _ => "clock_event_seconds_hw_power_brake_slowdown",
    }
}

/// The PCIe link while copies loaded it, against its maximum (an idle link may train down to
/// save power, so only samples under load are judged).
pub fn judge_link(observation: &LoadObservation, maximum: Option<(u32, u32)>) -> Vec<Counter> {
    let mut counters = Vec::new();
    for (counter, seen, most, unit) in [
        (
            "pcie_generation_under_load",
            observation.link_generation,
            maximum.map(|(generation, _)| generation),
            "Gen",
        ),
        (
            "pcie_width_under_load",
            observation.link_width,
            maximum.map(|(_, width)| width),
            "x",
        ),
    ] {
        let result = match (seen, most, observation.link_unreadable) {
            (Some(seen), Some(most), _) if seen < most => Counter::new(
                counter,
                Some(seen as f64),
                Verdict::Fail,
                format!("{unit}{seen} under load, below the link's maximum {unit}{most}"),
            )
            .acting(Action::CheckPcieLink),
            (Some(seen), Some(most), _) => Counter::new(
                counter,
                Some(seen as f64),
                Verdict::Ok,
                format!("{unit}{seen} under load (maximum {unit}{most})"),
            ),
            (Some(seen), None, _) => Counter::new(
                counter,
                Some(seen as f64),
                Verdict::Unsupported,
                format!("{unit}{seen} under load; the link's maximum is unknown"),
            ),
            (None, _, Some(reading)) if observation.link_samples == 0 => unread(
                counter,
                reading,
                "NVML reports no current PCIe link for this GPU",
            )
            .unwrap_or_else(|| Counter::new(counter, None, Verdict::NotMeasured, String::new())),
            (None, _, _) => Counter::new(
                counter,
                None,
                Verdict::NotMeasured,
                "no check copied between host and GPU (bandwidth, overlap) while it was sampled"
                    .to_string(),
            ),
        };
        counters.push(result.essential());
    }
    counters
}

/// One GPU's counters, in report order.
pub fn judge_gpu(
    readout: &HealthReadout,
    observation: &LoadObservation,
    link_maximum: Option<(u32, u32)>,
) -> Vec<Counter> {
    let mut counters = judge_memory(readout);
    counters.extend(judge_clock_events(observation));
    counters.extend(judge_link(observation, link_maximum));
    counters
}

/// The check's rule in words.
pub const RULE: &str = "per GPU, read through NVML at the end of the run: uncorrectable ECC errors (volatile and aggregate) must be 0; no row remapping pending or failed (Ampere+), no page pending retirement (older GPUs); no channel or TPC repair pending, no unrepairable memory, no recovery action asked by the driver; while the matmul check ran, no hardware slowdown, hardware thermal or power brake clock event in >= 5% of the samples (fewer: warn), no software thermal slowdown (warn); while copies ran, the PCIe link at its maximum generation and width. A counter the GPU or driver does not support is `unsupported`, never a pass: the check warns when ECC, the memory's repairs, the clock events or the link under load cannot be read";

/// One GPU's judged counters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuHealth {
    pub gpu: usize,
    pub counters: Vec<Counter>,
}

/// One counter of one GPU as the JSON report's `judgements` carry it: flat, like the other
/// checks' judgements, so that a reader (imagegen recomputes every check's status from them)
/// sees each `verdict` beside its GPU.
#[derive(Serialize)]
struct Judgement<'a> {
    gpu: usize,
    #[serde(flatten)]
    counter: &'a Counter,
}

/// Builds the check from every GPU's counters; `nvml_note` says why NVML could not be used.
pub fn check(gpus: &[GpuHealth], nvml_note: Option<&str>) -> Check {
    let mut failures: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut metrics: Vec<Metric> = Vec::new();
    if let Some(note) = nvml_note {
        lines.push(format!("NVML: {note}"));
    }
    for gpu in gpus {
        let mut unsupported: Vec<&str> = Vec::new();
        let mut not_measured: Vec<&str> = Vec::new();
        for counter in &gpu.counters {
            let described = format!(
                "GPU {}: {} ({}{})",
                gpu.gpu,
                counter.note,
                counter.counter,
                counter
                    .action
                    .map(|action| format!("; {}", action.words()))
                    .unwrap_or_default()
            );
            match counter.verdict {
                Verdict::Fail => failures.push(described),
                Verdict::Warn | Verdict::Error => warnings.push(described),
                Verdict::Unsupported if counter.essential => warnings.push(format!(
                    "GPU {}: {} unsupported ({})",
                    gpu.gpu, counter.counter, counter.note
                )),
                Verdict::NotMeasured if counter.essential => warnings.push(format!(
                    "GPU {}: {} not measured ({})",
                    gpu.gpu, counter.counter, counter.note
                )),
                Verdict::Unsupported => unsupported.push(counter.counter),
                Verdict::NotMeasured => not_measured.push(counter.counter),
                Verdict::Ok | Verdict::Reported => {}
            }
            lines.push(format!(
                "GPU {} {:<44} {:<12} {}",
                gpu.gpu,
                counter.counter,
                counter.verdict.word(),
                counter.note
            ));
            if let Some(value) = counter.value {
                metrics.push(
                    Metric::new(
                        "health_value",
                        "Each NVML health counter's value (counts, 0/1 flags, shares of samples, seconds).",
                        value,
                    )
                    .label("gpu", gpu.gpu)
                    .label("counter", counter.counter),
                );
            }
            metrics.push(
                Metric::new(
                    "health_counter_status",
                    "1 for the verdict each health counter reached (ok, reported, warn, fail, unsupported, not_measured, error).",
                    1.0,
                )
                .label("gpu", gpu.gpu)
                .label("counter", counter.counter)
                .label("status", counter.verdict.label()),
            );
        }
        if !unsupported.is_empty() {
            lines.push(format!(
                "GPU {}: unsupported here (not judged, not a pass): {}",
                gpu.gpu,
                unsupported.join(", ")
            ));
        }
        if !not_measured.is_empty() {
            lines.push(format!(
                "GPU {}: not measured in this run: {}",
                gpu.gpu,
                not_measured.join(", ")
            ));
        }
    }
    let blocked = gpus
        .iter()
        .flat_map(|gpu| &gpu.counters)
        .any(Counter::blocks_pass);
    let status = if !failures.is_empty() {
        Status::Fail
    } else if blocked || nvml_note.is_some() || gpus.is_empty() {
        Status::Warn
    } else {
        Status::Pass
    };
    let summary = match status {
        Status::Fail => failures.join("; "),
        Status::Warn if !warnings.is_empty() => warnings.join("; "),
        Status::Warn => format!(
            "health counters not read: {}",
            nvml_note.unwrap_or("no GPU")
        ),
        _ => format!(
            "{} GPU(s): no uncorrectable ECC error, no pending or failed memory repair, no hardware slowdown during matmul, PCIe link at its maximum under load",
            gpus.len()
        ),
    };
    let judgements: Vec<Judgement> = gpus
        .iter()
        .flat_map(|gpu| {
            gpu.counters.iter().map(|counter| Judgement {
                gpu: gpu.gpu,
                counter,
            })
        })
        .collect();
    let mut result = Check::new("health", status, summary)
        .with_rule(RULE)
        .figure("judgements", judgements);
    if let Some(note) = nvml_note {
        result = result.figure("nvml", note);
    }
    result.lines = lines;
    result.metrics = metrics;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H100 as NVML describes a healthy one: ECC on, no errors, row remapping with every
    /// bank's spares, repair status readable.
    fn healthy_hopper() -> HealthReadout {
        HealthReadout {
            ecc_enabled: Reading::Value(true),
            ecc_uncorrected_volatile: Reading::Value(0),
            ecc_uncorrected_aggregate: Reading::Value(0),
            ecc_corrected_volatile: Reading::Value(0),
            ecc_corrected_aggregate: Reading::Value(3),
            remapped_rows: Reading::Value(RemappedRows::default()),
            remap_histogram: Reading::Value(RemapHistogram {
                max: 2560,
                ..RemapHistogram::default()
            }),
            retired_pages_pending: Reading::Unsupported,
            retired_pages_single_bit: Reading::Unsupported,
            retired_pages_double_bit: Reading::Unsupported,
            repair: Reading::Value(RepairStatus::default()),
            unrepairable_memory: Reading::Unsupported,
            recovery_action: Reading::Value(0),
        }
    }

    /// 100 samples during matmul with the power cap active in 40, the link at Gen5 x16.
    fn loaded() -> LoadObservation {
        let mut reason_active = [0; CLOCK_REASONS.len()];
        reason_active[2] = 40;
        LoadObservation {
            matmul_samples: 100,
            reason_active,
            reasons_unreadable: None,
            event_nanoseconds: vec![
                Reading::Value(800_000_000),
                Reading::Value(0),
                Reading::Value(0),
                Reading::Value(0),
            ],
            link_samples: 60,
            link_generation: Some(5),
            link_width: Some(16),
            link_unreadable: None,
        }
    }

    fn judged(readout: HealthReadout, observation: LoadObservation) -> Check {
        check(
            &[GpuHealth {
                gpu: 0,
                counters: judge_gpu(&readout, &observation, Some((5, 16))),
            }],
            None,
        )
    }

    fn counter(check: &Check, name: &str) -> serde_json::Value {
        let found = check.figures["judgements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|judgement| judgement["counter"] == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .clone();
        assert_eq!(found["gpu"], 0, "each judgement names its GPU");
        found
    }

    #[test]
    fn a_healthy_hopper_passes_with_power_capping_reported_and_unsupported_counters_named() {
        let check = judged(healthy_hopper(), loaded());
        assert_eq!(check.status, Status::Pass, "{}", check.summary);
        assert_eq!(
            counter(&check, "clock_event_sw_power_cap")["verdict"],
            "reported"
        );
        assert_eq!(counter(&check, "clock_event_sw_power_cap")["value"], 0.4);
        assert_eq!(
            counter(&check, "clock_event_seconds_sw_power_cap")["value"],
            0.8
        );
        // Page retirement is not how a Hopper repairs memory: unsupported, listed, no warning.
        assert_eq!(
            counter(&check, "retired_pages_pending")["verdict"],
            "unsupported"
        );
        assert_eq!(
            counter(&check, "unrepairable_memory")["verdict"],
            "unsupported"
        );
        assert!(counter(&check, "unrepairable_memory")["value"].is_null());
        assert!(check.lines.iter().any(|line| line
            == "GPU 0: unsupported here (not judged, not a pass): retired_pages_pending, retired_pages_double_bit, retired_pages_single_bit, unrepairable_memory"));
        assert_eq!(counter(&check, "ecc_uncorrected_volatile")["verdict"], "ok");
        assert_eq!(counter(&check, "pcie_width_under_load")["value"], 16.0);
    }

    #[test]
    fn each_memory_failure_fails_with_its_action() {
        let cases: Vec<(HealthReadout, &str, &str)> = vec![
            (
                HealthReadout {
                    ecc_uncorrected_volatile: Reading::Value(2),
                    ..healthy_hopper()
                },
                "ecc_uncorrected_volatile",
                "drain_and_reset",
            ),
            (
                HealthReadout {
                    ecc_uncorrected_aggregate: Reading::Value(1),
                    ..healthy_hopper()
                },
                "ecc_uncorrected_aggregate",
                "rma",
            ),
            (
                HealthReadout {
                    remapped_rows: Reading::Value(RemappedRows {
                        uncorrectable: 1,
                        pending: true,
                        ..RemappedRows::default()
                    }),
                    ..healthy_hopper()
                },
                "row_remap_pending",
                "drain_and_reset",
            ),
            (
                HealthReadout {
                    remapped_rows: Reading::Value(RemappedRows {
                        failed: true,
                        ..RemappedRows::default()
                    }),
                    ..healthy_hopper()
                },
                "row_remap_failed",
                "rma",
            ),
            (
                HealthReadout {
                    repair: Reading::Value(RepairStatus {
                        channel_pending: true,
                        tpc_pending: false,
                    }),
                    ..healthy_hopper()
                },
                "repair_channel_pending",
                "drain_and_reset",
            ),
            (
                HealthReadout {
                    repair: Reading::Value(RepairStatus {
                        channel_pending: false,
                        tpc_pending: true,
                    }),
                    ..healthy_hopper()
                },
                "repair_tpc_pending",
                "drain_and_reset",
            ),
            (
                HealthReadout {
                    unrepairable_memory: Reading::Value(true),
                    ..healthy_hopper()
                },
                "unrepairable_memory",
                "rma",
            ),
            (
                HealthReadout {
                    recovery_action: Reading::Value(2),
                    ..healthy_hopper()
                },
                "recovery_action",
                "drain_and_reboot",
            ),
            (
                HealthReadout {
                    recovery_action: Reading::Value(3),
                    ..healthy_hopper()
                },
                "recovery_action",
                "drain_peer_to_peer",
            ),
            (
                HealthReadout {
                    ecc_uncorrected_volatile: Reading::Error(NVML_ERROR_GPU_IS_LOST),
                    ..healthy_hopper()
                },
                "ecc_uncorrected_volatile",
                "drain_and_reboot",
            ),
        ];
        for (readout, name, action) in cases {
            let check = judged(readout, loaded());
            assert_eq!(check.status, Status::Fail, "{name}: {}", check.summary);
            assert_eq!(counter(&check, name)["verdict"], "fail", "{name}");
            assert_eq!(counter(&check, name)["action"], action, "{name}");
            assert!(check.summary.contains(name), "{name}: {}", check.summary);
        }
    }

    #[test]
    fn an_older_gpu_is_judged_by_its_retired_pages() {
        let volta = HealthReadout {
            remapped_rows: Reading::Unsupported,
            remap_histogram: Reading::Unsupported,
            retired_pages_pending: Reading::Value(false),
            retired_pages_single_bit: Reading::Value(0),
            retired_pages_double_bit: Reading::Value(1),
            repair: Reading::Unsupported,
            recovery_action: Reading::Unsupported,
            ..healthy_hopper()
        };
        let check = judged(volta, loaded());
        assert_eq!(check.status, Status::Pass, "{}", check.summary);
        assert_eq!(
            counter(&check, "row_remap_pending")["verdict"],
            "unsupported"
        );
        assert_eq!(counter(&check, "retired_pages_double_bit")["value"], 1.0);
        let pending = HealthReadout {
            retired_pages_pending: Reading::Value(true),
            ..volta
        };
        let check = judged(pending, loaded());
        assert_eq!(check.status, Status::Fail);
        assert_eq!(
            counter(&check, "retired_pages_pending")["action"],
            "drain_and_reset"
        );
    }

    #[test]
    fn counters_that_cannot_be_read_warn_never_pass() {
        // No ECC (a consumer GPU): the uncorrectable counts are unsupported, so the check
        // cannot call the memory healthy.
        let no_ecc = HealthReadout {
            ecc_enabled: Reading::Unsupported,
            ecc_uncorrected_volatile: Reading::Unsupported,
            ecc_uncorrected_aggregate: Reading::Unsupported,
            ..healthy_hopper()
        };
        let check = judged(no_ecc, loaded());
        assert_eq!(check.status, Status::Warn);
        assert!(check
            .summary
            .contains("GPU 0: ecc_uncorrected_volatile unsupported"));
        // ECC switched off warns on its own.
        let off = HealthReadout {
            ecc_enabled: Reading::Value(false),
            ..healthy_hopper()
        };
        assert_eq!(judged(off, loaded()).status, Status::Warn);
        // Neither row remapping nor page retirement: the memory's repairs are unknown.
        let neither = HealthReadout {
            remapped_rows: Reading::Unsupported,
            remap_histogram: Reading::Unsupported,
            ..healthy_hopper()
        };
        let check = judged(neither, loaded());
        assert_eq!(check.status, Status::Warn);
        assert!(check.summary.contains("row_remap_pending unsupported"));
        // Another NVML error is an error, shown as a warning.
        let broken = HealthReadout {
            repair: Reading::Error(999),
            ..healthy_hopper()
        };
        let check = judged(broken, loaded());
        assert_eq!(check.status, Status::Warn);
        assert_eq!(counter(&check, "repair_tpc_pending")["verdict"], "error");
        // No NVML at all.
        let check = check_without_nvml();
        assert_eq!(check.status, Status::Warn);
        assert_eq!(check.figures["nvml"], "libnvidia-ml.so.1 not loaded");
    }

    fn check_without_nvml() -> Check {
        check(
            &[GpuHealth {
                gpu: 0,
                counters: judge_gpu(
                    &HealthReadout::unsupported(),
                    &LoadObservation {
                        reasons_unreadable: Some(Reading::Unsupported),
                        link_unreadable: Some(Reading::Unsupported),
                        ..LoadObservation::default()
                    },
                    Some((5, 16)),
                ),
            }],
            Some("libnvidia-ml.so.1 not loaded"),
        )
    }

    #[test]
    fn clock_events_fail_or_warn_by_kind() {
        let with = |index: usize, active: u32| {
            let mut observation = loaded();
            observation.reason_active[index] = active;
            judged(healthy_hopper(), observation)
        };
        // Hardware slowdown in 10 of 100 samples fails, in 2 of 100 warns.
        let check = with(3, 10);
        assert_eq!(check.status, Status::Fail);
        assert_eq!(
            counter(&check, "clock_event_hw_slowdown")["action"],
            "check_cooling_and_power"
        );
        assert!(check
            .summary
            .contains("hardware slowdown in 10 of 100 samples during matmul (10%)"));
        assert_eq!(with(3, 2).status, Status::Warn);
        assert_eq!(with(6, 5).status, Status::Fail, "hardware thermal at 5%");
        assert_eq!(with(7, 50).status, Status::Fail, "power brake");
        // Software thermal slowdown warns whatever its share; sync boost is only reported.
        let check = with(5, 80);
        assert_eq!(check.status, Status::Warn);
        assert_eq!(
            counter(&check, "clock_event_sw_thermal_slowdown")["verdict"],
            "warn"
        );
        assert_eq!(with(4, 100).status, Status::Pass);
    }

    #[test]
    fn clock_events_without_matmul_are_not_measured_and_unsupported_ones_say_so() {
        let mut observation = loaded();
        observation.matmul_samples = 0;
        let check = judged(healthy_hopper(), observation.clone());
        assert_eq!(check.status, Status::Warn);
        assert_eq!(
            counter(&check, "clock_event_hw_slowdown")["verdict"],
            "not_measured"
        );
        observation.reasons_unreadable = Some(Reading::Unsupported);
        let check = judged(healthy_hopper(), observation);
        assert_eq!(
            counter(&check, "clock_event_hw_slowdown")["verdict"],
            "unsupported"
        );
        assert_eq!(check.status, Status::Warn);
        // A time counter the driver lacks is unsupported but does not warn on its own.
        let mut observation = loaded();
        observation.event_nanoseconds[2] = Reading::Unsupported;
        let check = judged(healthy_hopper(), observation);
        assert_eq!(check.status, Status::Pass);
        assert_eq!(
            counter(&check, "clock_event_seconds_hw_thermal_slowdown")["verdict"],
            "unsupported"
        );
    }

    #[test]
    fn a_link_below_its_maximum_under_load_fails() {
        let mut observation = loaded();
        observation.link_width = Some(8);
        let check = judged(healthy_hopper(), observation);
        assert_eq!(check.status, Status::Fail);
        assert!(check
            .summary
            .contains("x8 under load, below the link's maximum x16"));
        assert_eq!(
            counter(&check, "pcie_width_under_load")["action"],
            "check_pcie_link"
        );
        let mut observation = loaded();
        observation.link_generation = Some(4);
        assert_eq!(judged(healthy_hopper(), observation).status, Status::Fail);
        // Not sampled under load (no copy check ran): not measured, a warning.
        let mut observation = loaded();
        observation.link_samples = 0;
        observation.link_generation = None;
        observation.link_width = None;
        let check = judged(healthy_hopper(), observation);
        assert_eq!(check.status, Status::Warn);
        assert_eq!(
            counter(&check, "pcie_generation_under_load")["verdict"],
            "not_measured"
        );
    }

    #[test]
    fn prometheus_carries_each_value_and_each_verdict() {
        let check = judged(healthy_hopper(), loaded());
        let value = |name: &str| {
            check
                .metrics
                .iter()
                .find(|metric| {
                    metric.name == "health_value"
                        && metric.labels.contains(&("counter", name.to_string()))
                })
                .map(|metric| metric.value)
        };
        assert_eq!(value("ecc_corrected_aggregate"), Some(3.0));
        assert_eq!(value("clock_event_sw_power_cap"), Some(0.4));
        assert_eq!(value("unrepairable_memory"), None, "unsupported: no value");
        let status_of = |name: &str| {
            check
                .metrics
                .iter()
                .find(|metric| {
                    metric.name == "health_counter_status"
                        && metric.labels.contains(&("counter", name.to_string()))
                })
                .and_then(|metric| {
                    metric
                        .labels
                        .iter()
                        .find(|(key, _)| *key == "status")
                        .map(|(_, status)| status.clone())
                })
        };
        assert_eq!(
            status_of("unrepairable_memory").as_deref(),
            Some("unsupported")
        );
        assert_eq!(status_of("ecc_uncorrected_volatile").as_deref(), Some("ok"));
        // Every counter has exactly one status sample.
        let counters = check.figures["judgements"].as_array().unwrap().len();
        assert_eq!(
            check
                .metrics
                .iter()
                .filter(|metric| metric.name == "health_counter_status")
                .count(),
            counters
        );
    }
}
