//! The run: from flags to a report and an exit code. Prepares the loader (which may re-execute
//! the process), makes sure the driver and the libraries the selected checks need load (exit 2
//! naming the missing one and where it looked otherwise), runs the checks in order, each guarded
//! so that an error or a panic inside becomes that check's failure, judges their speed against
//! the GPU models' expected figures and the baseline if one is given, saves a baseline if asked,
//! and renders the report. Every check is registered once in `CHECKS` (its name, the libraries
//! it needs, work it starts ahead of its turn, when its turn comes, its runner and its judge);
//! `run_checks` walks that table and names no check itself.

use crate::baseline::{self, Baseline};
use crate::cli::{self, Cli, Format};
use crate::expected;
use crate::expected::Precision;
use crate::framework::{self, Claims, Findings, Probe};
use crate::gpu::inventory::GpuFacts;
use crate::gpu::{self, bandwidth, inventory, matmul, nccl, overlap, Gpu};
use crate::health::{self, GpuHealth};
use crate::loader::{self, LoadedLibrary, Prepared};
use crate::monitor::Monitor;
use crate::nvml::{Nvml, NvmlDevice};
use crate::report::{self, Check, Overall, Report, Status};
use crate::rules::{self, GpuLinks, References};
use crate::{plot, shm};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The last panic message, captured by the hook so a panicking check can report it.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn install_panic_hook() {
    std::panic::set_hook(Box::new(|information| {
        let message = information
            .payload()
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| information.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let location = information
            .location()
            .map(|place| format!(" at {}:{}", place.file(), place.line()))
            .unwrap_or_default();
        if let Ok(mut slot) = LAST_PANIC.lock() {
            *slot = Some(format!("{message}{location}"));
        }
    }));
}

fn last_panic() -> String {
    LAST_PANIC
        .lock()
        .ok()
        .and_then(|mut slot| slot.take())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Runs `body`; an error or a panic becomes a failed check named `name`.
fn guarded(name: &str, body: impl FnOnce() -> anyhow::Result<Check>) -> Check {
    let started = Instant::now();
    let mut check = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(check)) => check,
        Ok(Err(error)) => Check::new(name, Status::Fail, format!("error: {error:#}")),
        Err(_) => Check::new(
            name,
            Status::Fail,
            format!("internal error (panic): {}", last_panic()),
        ),
    };
    check.duration_seconds = started.elapsed().as_secs_f64();
    check
}

/// The kernel's host name, for the report's `node_name` when no name was given.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// Could not run: exit 2 with this message.
struct CannotRun(String);

/// Entry point used by `main`: returns the exit code.
pub fn run(cli: Cli) -> i32 {
    install_panic_hook();
    let started = Instant::now();
    let started_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    // First stage: search the libraries and re-execute with them on the loader path (this call
    // does not return then); second stage: read the search result back.
    let prepared = loader::prepare(cli.prefer_pip_libraries);
    let first_stage = loader::first_stage_elapsed();
    let mut report = Report::new(started_at, loader::cuda_build_major());
    report.loader_seconds = first_stage.as_secs_f64();
    report.node_name = cli.node_name.clone().or_else(host_name);
    report.image_digest = cli.image_digest.clone();
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        run_checks(&cli, &prepared, &mut report)
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(CannotRun(message))) => report.error = Some(message),
        Err(_) => report.error = Some(format!("internal error (panic): {}", last_panic())),
    }
    // The search for libraries before the re-execution belongs to the run too.
    report.duration_seconds = (started.elapsed() + first_stage).as_secs_f64();
    // The exit code follows the report, so the two can never disagree.
    report.settle();
    if let Some(folder) = &prepared.link_folder {
        let _ = std::fs::remove_dir_all(folder);
    }
    let text = match cli.format {
        Format::Table => report::render_table(&report),
        Format::Json => report::render_json(&report),
        Format::Prometheus => report::render_prometheus(&report),
    };
    if let Err(message) = emit(&text, cli.output.as_deref()) {
        eprintln!("gpu-selftest: error: {message}");
        return 2;
    }
    // The table already names the error on the terminal; JSON and Prometheus readers parse
    // standard output, so a person watching still gets the reason on standard error.
    let table_on_terminal = cli.format == Format::Table && cli.output.is_none();
    if let (Some(error), false) = (&report.error, table_on_terminal) {
        eprintln!("gpu-selftest: cannot run: {error}");
    }
    report.overall.exit_code()
}

/// Writes the report to standard output or, atomically, to `output`.
fn emit(text: &str, output: Option<&Path>) -> Result<(), String> {
    match output {
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(text.as_bytes())
                .and_then(|_| stdout.flush())
                .map_err(|error| format!("cannot write the report: {error}"))
        }
        Some(path) => write_atomically(path, text.as_bytes()),
    }
}

/// Writes through a temporary file in the same folder and renames it into place, so that a
/// collector (node-exporter's textfile collector) never reads half a report.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, bytes)
        .and_then(|_| std::fs::rename(&temporary, path))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// What the flags ask for, validated before anything touches a GPU.
struct Plan<'a> {
    cli: &'a Cli,
    prepared: &'a Prepared,
    selected: Vec<&'static str>,
    bandwidth_sizes: Vec<u64>,
    nccl_sizes: Vec<u64>,
    overlap_bytes: u64,
    precisions: Vec<Precision>,
}

impl Plan<'_> {
    fn wants(&self, name: &str) -> bool {
        self.selected.contains(&name)
    }
}

/// One run's state: what the setup read (GPUs, their properties, the references to judge by),
/// the work started ahead of its turn, and the figures each runner keeps for its judge, the
/// plot and the baseline.
struct Session<'a> {
    plan: &'a Plan<'a>,
    /// When `run_checks` began: the framework check's duration is measured from here.
    started_checks: Instant,
    gpus: Vec<Gpu>,
    facts: Vec<GpuFacts>,
    driver: Option<inventory::DriverFacts>,
    references: References<'a>,
    /// Seconds the setup took to read the GPUs' properties: the inventory's duration.
    inventory_seconds: f64,
    versions: inventory::LibraryVersions,
    loaded: Vec<LoadedLibrary>,
    framework_probe: Option<Result<framework::Running, String>>,
    framework_outcome: Option<Result<Findings, String>>,
    communicators: Option<JoinHandle<anyhow::Result<nccl::Communicators>>>,
    communicator_seconds: f64,
    bandwidth_points: Vec<bandwidth::BandwidthPoint>,
    overlap_results: Vec<overlap::OverlapResult>,
    matmul_results: Vec<matmul::MatmulResult>,
    nccl_points: Vec<nccl::NcclPoint>,
    shm_bytes: Option<u64>,
    /// NVML, when it loaded, and each GPU's handle in it.
    nvml: Option<Arc<Nvml>>,
    nvml_devices: Vec<Option<NvmlDevice>>,
    /// Samples NVML while the checks load the GPUs (the health check's head start).
    monitor: Option<Monitor>,
    health: Vec<GpuHealth>,
}

impl Session<'_> {
    /// Whether a selected check that needs `library` runs with the GPUs visible.
    fn needs_library(&self, library: &str) -> bool {
        CHECKS.iter().any(|entry| {
            self.plan.wants(entry.name)
                && entry.runs_with(self.gpus.len())
                && entry.libraries.contains(&library)
        })
    }
}

/// When a check's turn comes and what its duration measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// In table order, one after another, never side by side: each one's figures are meant to
    /// show what the hardware does alone. The duration is its own run's.
    InOrder,
    /// In table order too, but its work began before the GPUs were opened (see `HeadStart`):
    /// the duration is measured from the start of the checks.
    InOrderSinceTheStart,
    /// After every other check, though printed at its place in the table: only then are all
    /// the libraries the checks used mapped into the process. The duration is the setup's
    /// reading of the GPUs' properties.
    LastPrintedInPlace,
}

/// Where work that belongs to a check begins ahead of its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Right after the flags are validated, before the driver is loaded.
    BeforeTheGpus,
    /// On a helper thread just before the named check runs (whether or not it is selected),
    /// so that it overlaps that check and the ones after it until its own turn.
    Before(&'static str),
}

/// Work a check starts ahead of its turn; its runner collects it.
struct HeadStart {
    at: At,
    begin: fn(&mut Session),
}

/// A check that needs more GPUs than are visible is skipped with this summary and rule.
struct TooFewGpus {
    needs: usize,
    summary: &'static str,
    rule: &'static str,
}

/// One registered check.
struct Registered {
    /// As `--checks` and `--skip` spell it, and as the report names it.
    name: &'static str,
    /// Libraries (loader keys) the check needs: a missing one stops the run with exit 2 before
    /// any check runs.
    libraries: &'static [&'static str],
    too_few_gpus: Option<TooFewGpus>,
    /// Work started ahead of its turn, each at its own point of the run.
    head_starts: &'static [HeadStart],
    turn: Turn,
    /// Measures, keeping its figures in the session; an error or a panic fails the check.
    runner: fn(&mut Session) -> anyhow::Result<()>,
    /// Judges the runner's figures (against the GPU models' expected figures and the baseline
    /// where the check has speed rules) into the reported check.
    judge: fn(&Session) -> Check,
}

impl Registered {
    fn runs_with(&self, gpus: usize) -> bool {
        self.too_few_gpus
            .as_ref()
            .is_none_or(|too_few| gpus >= too_few.needs)
    }
}

/// Every check, in the order they print (`cli::CHECK_NAMES`, which a test compares).
const CHECKS: [Registered; 8] = [
    Registered {
        name: "inventory",
        libraries: &[],
        too_few_gpus: None,
        head_starts: &[],
        turn: Turn::LastPrintedInPlace,
        runner: run_inventory,
        judge: judge_inventory,
    },
    Registered {
        name: "bandwidth",
        libraries: &[],
        too_few_gpus: None,
        head_starts: &[],
        turn: Turn::InOrder,
        runner: run_bandwidth,
        judge: judge_bandwidth,
    },
    // Overlap uses its own pinned buffer and two fresh streams per GPU.
    Registered {
        name: "overlap",
        libraries: &["cublas"],
        too_few_gpus: None,
        head_starts: &[],
        turn: Turn::InOrder,
        runner: run_overlap,
        judge: judge_overlap,
    },
    // 256 sampled entries per product are checked against float64; see gpu/matmul.rs.
    Registered {
        name: "matmul",
        libraries: &["cublas"],
        too_few_gpus: None,
        head_starts: &[],
        turn: Turn::InOrder,
        runner: run_matmul,
        judge: judge_matmul,
    },
    // The NCCL communicators are created while the matmul check runs: creating them is host
    // work (topology search, buffers, connecting the peers: 0.7–1.0 s on 2×H200) that the
    // products, timed on the GPUs by events, do not feel. Not earlier: the overlap check's
    // figures are meant to show the hardware alone.
    Registered {
        name: "nccl",
        libraries: &["nccl"],
        too_few_gpus: Some(TooFewGpus {
            needs: 2,
            summary: "one GPU visible: nothing to all-reduce across",
            rule: "needs two or more GPUs",
        }),
        head_starts: &[HeadStart {
            at: At::Before("matmul"),
            begin: start_communicators,
        }],
        turn: Turn::InOrder,
        runner: run_nccl,
        judge: judge_nccl,
    },
    // NVML's health counters, read after the GPU checks loaded the GPUs; its monitor samples
    // the clock event reasons during the matmul check and the PCIe link during the copies, so
    // it starts before the first of them.
    Registered {
        name: "health",
        libraries: &[],
        too_few_gpus: None,
        head_starts: &[HeadStart {
            at: At::Before("bandwidth"),
            begin: start_monitor,
        }],
        turn: Turn::InOrder,
        runner: run_health,
        judge: judge_health,
    },
    Registered {
        name: "shm",
        libraries: &[],
        too_few_gpus: None,
        head_starts: &[],
        turn: Turn::InOrder,
        runner: run_shm,
        judge: judge_shm,
    },
    // The framework probe works (mostly on the CPU) while the GPU checks run; it is killed if
    // the run stops early (dropping `Running` kills the child). It waits to make its own CUDA
    // context until this process has opened the GPUs, so that the two do not start the driver
    // and make contexts at the same moment, and learns GPU 0's compute capability then, for the
    // Triton kernel it compiles beside `import torch` (its compiler need not start the driver).
    Registered {
        name: "framework",
        libraries: &[],
        too_few_gpus: None,
        head_starts: &[
            HeadStart {
                at: At::BeforeTheGpus,
                begin: start_framework_probe,
            },
            HeadStart {
                at: At::Before("bandwidth"),
                begin: tell_framework_probe_the_gpus_are_open,
            },
        ],
        turn: Turn::InOrderSinceTheStart,
        runner: run_framework,
        judge: judge_framework,
    },
];

/// The inventory's last step: which libraries the checks mapped, and their versions.
fn run_inventory(session: &mut Session) -> anyhow::Result<()> {
    if session.needs_library("cublas") {
        session.versions.cublas = std::panic::catch_unwind(inventory::cublas_version)
            .ok()
            .flatten();
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    session.loaded = loader::loaded_libraries(&maps);
    Ok(())
}

fn judge_inventory(session: &Session) -> Check {
    let unknown = inventory::DriverFacts {
        driver_version: None,
        driver_cuda_version: "unknown".to_string(),
    };
    inventory::check(
        &session.facts,
        session.driver.as_ref().unwrap_or(&unknown),
        &session.plan.prepared.discovery,
        &session.loaded,
        &session.versions,
        &session.plan.prepared.note,
        loader::cuda_build_major(),
    )
}

fn bandwidth_settings(plan: &Plan) -> bandwidth::BandwidthSettings {
    bandwidth::BandwidthSettings {
        sizes: plan.bandwidth_sizes.clone(),
        warm_up: 1,
        repetitions: plan.cli.bandwidth_repeats.max(1),
    }
}

fn run_bandwidth(session: &mut Session) -> anyhow::Result<()> {
    let settings = bandwidth_settings(session.plan);
    let mut buffers = bandwidth::HostBuffers::new(&session.gpus[0], &settings)?;
    for device in &session.gpus {
        // Kept as each GPU finishes, so that the plot has what was measured before an error.
        session
            .bandwidth_points
            .extend(bandwidth::measure(device, &settings, &mut buffers)?);
    }
    Ok(())
}

fn judge_bandwidth(session: &Session) -> Check {
    bandwidth::check(
        &session.bandwidth_points,
        &session.facts,
        &session.plan.bandwidth_sizes,
        &session.references,
    )
}

fn run_overlap(session: &mut Session) -> anyhow::Result<()> {
    let settings = overlap::OverlapSettings {
        copy_bytes: session.plan.overlap_bytes,
        matmul_size: session.plan.cli.matmul_size,
        repetitions: 5,
    };
    let inputs = overlap::OverlapInputs::new(&session.gpus[0], &settings)?;
    session.overlap_results = session
        .gpus
        .iter()
        .map(|device| overlap::measure(device, &settings, &inputs))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(())
}

fn judge_overlap(session: &Session) -> Check {
    overlap::check(&session.overlap_results)
}

fn run_matmul(session: &mut Session) -> anyhow::Result<()> {
    let settings = matmul::MatmulSettings {
        size: session.plan.cli.matmul_size,
        precisions: session.plan.precisions.clone(),
        warm_up: 3,
        repetitions: session.plan.cli.matmul_repeats.max(1),
        samples: 256,
    };
    session.matmul_results = matmul::measure(&session.gpus, &settings)?;
    Ok(())
}

fn judge_matmul(session: &Session) -> Check {
    matmul::check(&session.matmul_results, &session.references)
}

/// Creates the NCCL communicators on a helper thread; `run_nccl` joins it.
fn start_communicators(session: &mut Session) {
    let contexts: Vec<_> = session.gpus.iter().map(|gpu| gpu.context.clone()).collect();
    session.communicators = Some(std::thread::spawn(move || {
        std::panic::catch_unwind(AssertUnwindSafe(|| nccl::Communicators::create(&contexts)))
            .unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "internal error (panic) while creating the NCCL communicators: {}",
                    last_panic()
                ))
            })
    }));
}

fn run_nccl(session: &mut Session) -> anyhow::Result<()> {
    session.versions.nccl = std::panic::catch_unwind(inventory::nccl_version)
        .ok()
        .flatten();
    let settings = nccl::NcclSettings {
        sizes: session.plan.nccl_sizes.clone(),
        warm_up: 5,
        repetitions: session.plan.cli.nccl_repeats.max(1),
        back_to_back_runs: session.plan.cli.nccl_runs.max(1),
    };
    let communicators = session
        .communicators
        .take()
        .expect("started whenever the NCCL check runs")
        .join()
        .map_err(|_| anyhow::anyhow!("the NCCL set-up thread stopped"))??;
    session.nccl_points = nccl::measure(&session.gpus, &communicators, &settings)?;
    session.communicator_seconds = communicators.seconds;
    Ok(())
}

fn judge_nccl(session: &Session) -> Check {
    let links: Vec<GpuLinks> = session
        .facts
        .iter()
        .map(|gpu| GpuLinks {
            index: gpu.index,
            device_name: &gpu.name,
            model: session.references.model(gpu.index),
            pcie: gpu.pcie_max_generation.zip(gpu.pcie_max_width),
            nvlink_peers: gpu.nvlink_peer_indices(),
        })
        .collect();
    let path = rules::collective_path(&links);
    nccl::check(
        &session.nccl_points,
        session.versions.nccl.as_deref(),
        &path,
        &session.references,
    )
    .figure("communicator_seconds", session.communicator_seconds)
}

/// Starts sampling NVML for the health check (nothing to sample without NVML).
fn start_monitor(session: &mut Session) {
    if let Some(nvml) = &session.nvml {
        session.monitor = Some(Monitor::start(nvml.clone(), session.nvml_devices.clone()));
    }
}

fn run_health(session: &mut Session) -> anyhow::Result<()> {
    let observations = session
        .monitor
        .take()
        .map(Monitor::finish)
        .unwrap_or_default();
    session.health = session
        .facts
        .iter()
        .enumerate()
        .map(|(place, gpu)| {
            let device = session.nvml_devices.get(place).copied().flatten();
            let readout = match (&session.nvml, device) {
                (Some(nvml), Some(device)) => nvml.health(device),
                _ => health::HealthReadout::unsupported(),
            };
            let observation = observations.get(place).cloned().unwrap_or_else(|| {
                // No handle for this GPU: nothing could be sampled.
                health::LoadObservation {
                    reasons_unreadable: Some(health::Reading::Unsupported),
                    link_unreadable: Some(health::Reading::Unsupported),
                    ..health::LoadObservation::default()
                }
            });
            let maximum = gpu.pcie_max_generation.zip(gpu.pcie_max_width);
            GpuHealth {
                gpu: gpu.index,
                counters: health::judge_gpu(&readout, &observation, maximum),
            }
        })
        .collect();
    Ok(())
}

fn judge_health(session: &Session) -> Check {
    let note = match (&session.nvml, session.nvml_devices.iter().all(Option::is_some)) {
        (None, _) => Some(
            "libnvidia-ml.so.1 could not be loaded or initialised (a container needs the NVIDIA runtime's `utility` capability)",
        ),
        (Some(_), false) => Some("NVML has no handle for some GPUs (by PCI bus id)"),
        (Some(_), true) => None,
    };
    health::check(&session.health, note)
}

const SHM_PATH: &str = "/dev/shm";

fn run_shm(session: &mut Session) -> anyhow::Result<()> {
    session.shm_bytes = shm::filesystem_bytes(Path::new(SHM_PATH));
    Ok(())
}

fn judge_shm(session: &Session) -> Check {
    shm::check(Path::new(SHM_PATH), session.shm_bytes)
}

fn start_framework_probe(session: &mut Session) {
    let cli = session.plan.cli;
    session.framework_probe = Some(framework::start(
        &cli.python,
        if cli.framework_torch_compile {
            Probe::TorchCompile
        } else {
            Probe::Triton
        },
        Duration::from_secs(cli.framework_timeout),
        session.plan.prepared.original_library_path.as_deref(),
    ));
}

/// Tells the probe that the GPUs are open, with GPU 0's compute capability.
fn tell_framework_probe_the_gpus_are_open(session: &mut Session) {
    let capability = session
        .facts
        .first()
        .map(|gpu| gpu.compute_capability.clone());
    if let Some(Ok(probe)) = &mut session.framework_probe {
        probe.gpus_open(capability.as_deref());
    }
}

fn run_framework(session: &mut Session) -> anyhow::Result<()> {
    let probe = session
        .framework_probe
        .take()
        .expect("started whenever the framework check runs");
    session.framework_outcome = Some(probe.and_then(framework::finish));
    Ok(())
}

fn judge_framework(session: &Session) -> Check {
    let cli = session.plan.cli;
    let claims = Claims {
        torch: cli.expect_torch.clone().filter(|v| !v.is_empty()),
        cuda: cli.expect_cuda.clone().filter(|v| !v.is_empty()),
        cudnn: cli.expect_cudnn.clone().filter(|v| !v.is_empty()),
        nccl: cli.expect_nccl.clone().filter(|v| !v.is_empty()),
    };
    match session
        .framework_outcome
        .as_ref()
        .expect("the runner ran before the judge")
    {
        Ok(findings) => framework::judge(findings, &claims, session.gpus.len()),
        Err(reason) if reason.starts_with("cannot run") => {
            Check::new("framework", Status::Skip, format!("no Python: {reason}"))
                .with_rule("skipped when no Python interpreter is present")
        }
        Err(reason) => Check::new("framework", Status::Fail, reason.clone())
            .with_rule("the torch probe must finish and print its result"),
    }
}

/// Begins the head starts due `at`, of the selected checks that run with the GPUs visible.
fn begin_head_starts(session: &mut Session, at: At) {
    for entry in &CHECKS {
        for head_start in entry.head_starts {
            let runs = session.plan.wants(entry.name)
                && (at == At::BeforeTheGpus || entry.runs_with(session.gpus.len()));
            if head_start.at == at && runs {
                (head_start.begin)(session);
            }
        }
    }
}

/// Runs one registered check: its runner then its judge, guarded.
fn run_registered(entry: &Registered, session: &mut Session) -> Check {
    let mut check = guarded(entry.name, || {
        (entry.runner)(session)?;
        Ok((entry.judge)(session))
    });
    match entry.turn {
        Turn::InOrder => {}
        Turn::InOrderSinceTheStart => {
            check.duration_seconds = session.started_checks.elapsed().as_secs_f64();
        }
        Turn::LastPrintedInPlace => check.duration_seconds = session.inventory_seconds,
    }
    check
}

/// Runs the selected checks into `report`, walking `CHECKS`. `Err` means the run could not
/// start (exit 2): bad flags, no driver, no GPU, or a library a selected check needs; a check
/// that runs and breaks is that check's failure instead.
fn run_checks(cli: &Cli, prepared: &Prepared, report: &mut Report) -> Result<(), CannotRun> {
    let started_checks = Instant::now();
    // Flags are validated before anything touches a GPU.
    let plan = Plan {
        cli,
        prepared,
        selected: cli::selected_checks(cli.checks.as_deref(), &cli.skip, cli.no_framework)
            .map_err(CannotRun)?,
        bandwidth_sizes: cli::parse_sizes(&cli.bandwidth_sizes).map_err(CannotRun)?,
        nccl_sizes: cli::parse_sizes(&cli.nccl_sizes).map_err(CannotRun)?,
        overlap_bytes: cli::parse_size(&cli.overlap_bytes).map_err(CannotRun)?,
        precisions: cli::parse_precisions(&cli.matmul_precisions).map_err(CannotRun)?,
    };
    // A baseline that cannot be read stops the run before any GPU work: the caller asked for a
    // comparison this run could not make.
    let loaded_baseline: Option<(Baseline, String)> = cli
        .baseline
        .as_deref()
        .filter(|argument| !argument.trim().is_empty())
        .map(baseline::load)
        .transpose()
        .map_err(CannotRun)?;
    let spec = |key: &str| {
        prepared
            .specs
            .iter()
            .find(|spec| spec.key == key)
            .cloned()
            .expect("every key used here has a spec")
    };
    let mut session = Session {
        plan: &plan,
        started_checks,
        gpus: Vec::new(),
        facts: Vec::new(),
        driver: None,
        references: References {
            gpus: Vec::new(),
            baseline: None,
        },
        inventory_seconds: 0.0,
        versions: inventory::LibraryVersions::default(),
        loaded: Vec::new(),
        framework_probe: None,
        framework_outcome: None,
        communicators: None,
        communicator_seconds: 0.0,
        bandwidth_points: Vec::new(),
        overlap_results: Vec::new(),
        matmul_results: Vec::new(),
        nccl_points: Vec::new(),
        shm_bytes: None,
        nvml: None,
        nvml_devices: Vec::new(),
        monitor: None,
        health: Vec::new(),
    };
    begin_head_starts(&mut session, At::BeforeTheGpus);

    // cudarc panics on a missing library, so each one a selected check needs is probed first
    // and a missing one stops the run with exit 2, naming it and every place searched.
    if !loader::library_loads("cuda") {
        return Err(CannotRun(format!(
            "{} (no NVIDIA driver in this container? start it with --gpus all and the NVIDIA container toolkit)",
            loader::missing_library_message(&spec("cuda"), &prepared.discovery)
        )));
    }
    session.gpus = std::panic::catch_unwind(gpu::open_all)
        .map_err(|_| {
            CannotRun(format!(
                "the driver library broke while opening the GPUs: {}",
                last_panic()
            ))
        })?
        .map_err(|error| CannotRun(format!("no usable GPU: {error:#}")))?;
    if session.gpus.is_empty() {
        return Err(CannotRun(
            "no GPU visible (cuDeviceGetCount returned 0; check CUDA_VISIBLE_DEVICES and --gpus)"
                .to_string(),
        ));
    }
    // Only the libraries the selected checks use are required: `--checks bandwidth` runs with
    // the driver alone, and NCCL is needed only where there are two GPUs to reduce across.
    // Probed in table order, each library once.
    let mut libraries: Vec<&str> = Vec::new();
    for library in CHECKS
        .iter()
        .flat_map(|entry| entry.libraries.iter().copied())
    {
        if libraries.contains(&library) {
            continue;
        }
        libraries.push(library);
        if session.needs_library(library) && !loader::library_loads(library) {
            return Err(CannotRun(loader::missing_library_message(
                &spec(library),
                &prepared.discovery,
            )));
        }
    }

    // NVML is optional: without it the PCIe link comes from sysfs and NVLink is "unknown".
    let nvml_path = prepared
        .discovery
        .get("nvml")
        .map(|found| found.path.clone())
        .unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let inventory_started = Instant::now();
    let nvml = Nvml::open(&nvml_path).map(Arc::new);
    session.facts = inventory::gather(&session.gpus, nvml.as_deref())
        .map_err(|error| CannotRun(format!("cannot read the GPUs' properties: {error:#}")))?;
    session.nvml_devices = session
        .facts
        .iter()
        .map(|gpu| nvml.as_ref().and_then(|nvml| nvml.device(&gpu.pci_bus_id)))
        .collect();
    session.nvml = nvml.clone();
    session.driver = Some(inventory::DriverFacts {
        driver_version: nvml.as_deref().and_then(Nvml::driver_version),
        driver_cuda_version: gpu::driver_cuda_version().unwrap_or_else(|_| "unknown".to_string()),
    });

    let gpu_names: Vec<String> = session.facts.iter().map(|gpu| gpu.name.clone()).collect();
    if let Some((baseline, origin)) = &loaded_baseline {
        baseline
            .check_models(&gpu_names)
            .map_err(|message| CannotRun(format!("{origin}: {message}")))?;
    }
    session.references = References {
        gpus: gpu_names
            .iter()
            .map(|name| (name.clone(), expected::find(name)))
            .collect(),
        baseline: loaded_baseline
            .as_ref()
            .map(|(baseline, origin)| (baseline, origin.clone())),
    };
    session.inventory_seconds = inventory_started.elapsed().as_secs_f64();
    report.setup_seconds = started_checks.elapsed().as_secs_f64();

    // Each check's place in the report: its table position among the selected ones.
    let mut checks: Vec<Check> = Vec::new();
    let mut last: Vec<(usize, &Registered)> = Vec::new();
    for entry in &CHECKS {
        begin_head_starts(&mut session, At::Before(entry.name));
        if !plan.wants(entry.name) {
            continue;
        }
        if let (false, Some(too_few)) = (
            entry.runs_with(session.gpus.len()),
            entry.too_few_gpus.as_ref(),
        ) {
            checks.push(
                Check::new(entry.name, Status::Skip, too_few.summary).with_rule(too_few.rule),
            );
            continue;
        }
        match entry.turn {
            Turn::LastPrintedInPlace => last.push((checks.len() + last.len(), entry)),
            Turn::InOrder | Turn::InOrderSinceTheStart => {
                if let Some(monitor) = &session.monitor {
                    monitor.enter(entry.name);
                }
                checks.push(run_registered(entry, &mut session));
            }
        }
    }
    for (place, entry) in last {
        let check = run_registered(entry, &mut session);
        checks.insert(place, check);
    }

    if let Some(path) = &cli.plot {
        let title = format!(
            "Host-device bandwidth, {}",
            session
                .facts
                .first()
                .map(|f| f.name.as_str())
                .unwrap_or("GPU")
        );
        let svg =
            plot::render_bandwidth_svg(&title, &bandwidth::plot_series(&session.bandwidth_points));
        if let Err(message) = write_atomically(path, svg.as_bytes()) {
            checks.push(Check::new("plot", Status::Warn, message));
        }
    }
    if let Some(path) = &cli.save_baseline {
        let figures = [
            bandwidth::baseline_figures(&session.bandwidth_points),
            matmul::baseline_figures(&session.matmul_results),
            nccl::baseline_figures(&session.nccl_points),
        ]
        .concat();
        checks.push(save_baseline(path, &checks, gpu_names.clone(), figures));
    }
    report.checks = checks;
    if report
        .checks
        .iter()
        .any(|check| check.status == Status::Fail)
    {
        report.overall = Overall::Fail;
    }
    Ok(())
}

/// Saves the run's figures as a baseline, unless a check failed (a baseline must come from a
/// node known to be good) or there is nothing to save; the outcome is a check of its own, so
/// a baseline that was not written fails the run.
fn save_baseline(
    path: &Path,
    checks: &[Check],
    gpu_names: Vec<String>,
    figures: Vec<baseline::BaselineFigure>,
) -> Check {
    let rule = "saved only when no check failed: a baseline must come from a node known to be good";
    let failed: Vec<&str> = checks
        .iter()
        .filter(|check| check.status == Status::Fail)
        .map(|check| check.name.as_str())
        .collect();
    if !failed.is_empty() {
        return Check::new(
            "baseline",
            Status::Fail,
            format!(
                "not saved to {}: {} failed",
                path.display(),
                failed.join(", ")
            ),
        )
        .with_rule(rule);
    }
    if figures.is_empty() {
        return Check::new(
            "baseline",
            Status::Fail,
            format!(
                "not saved to {}: no bandwidth, matmul or nccl figures were measured",
                path.display()
            ),
        )
        .with_rule(rule);
    }
    let saved_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    let count = figures.len();
    let text = baseline::render(&Baseline::new(saved_at, gpu_names, figures));
    match write_atomically(path, text.as_bytes()) {
        Ok(()) => Check::new(
            "baseline",
            Status::Pass,
            format!("saved {count} figures to {}", path.display()),
        )
        .with_rule(rule)
        .figure("path", path.display().to_string())
        .figure("figures", count),
        Err(message) => Check::new("baseline", Status::Fail, message).with_rule(rule),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_names() -> Vec<&'static str> {
        CHECKS.iter().map(|entry| entry.name).collect()
    }

    #[test]
    fn every_check_is_registered_once_in_the_order_the_flags_name_them() {
        let names = table_names();
        for name in &names {
            let count = names.iter().filter(|other| *other == name).count();
            assert_eq!(count, 1, "`{name}` is registered {count} times in CHECKS");
        }
        // A check the flags accept but the table lacks (or the reverse) would never run, or
        // could never be selected.
        assert_eq!(names, cli::CHECK_NAMES.to_vec());
        assert_eq!(
            cli::selected_checks(None, &[], false).unwrap(),
            names,
            "every check the flags select by default is in the table, in its order"
        );
        for name in &names {
            let only = cli::selected_checks(Some(&[name.to_string()]), &[], false).unwrap();
            assert!(only.iter().all(|selected| names.contains(selected)));
            assert!(only.contains(name));
        }
    }

    #[test]
    fn head_starts_name_a_registered_check_before_their_own() {
        let names = table_names();
        for (position, entry) in CHECKS.iter().enumerate() {
            for head_start in entry.head_starts {
                if let At::Before(other) = head_start.at {
                    let place = names.iter().position(|name| *name == other);
                    assert!(
                        place.is_some_and(|place| place < position),
                        "`{}` starts before `{other}`, which is not a check registered before it",
                        entry.name
                    );
                }
            }
        }
        let points = |name: &str| -> Vec<At> {
            let entry = CHECKS.iter().find(|entry| entry.name == name).unwrap();
            entry
                .head_starts
                .iter()
                .map(|head_start| head_start.at)
                .collect()
        };
        // The communicators overlap only the matmul check, never overlap's figures.
        assert_eq!(points("nccl"), [At::Before("matmul")]);
        // The health monitor samples from the first GPU check on; the probe starts before the
        // GPUs open and hears that they are open before the first GPU check.
        assert_eq!(points("health"), [At::Before("bandwidth")]);
        assert_eq!(
            points("framework"),
            [At::BeforeTheGpus, At::Before("bandwidth")]
        );
        assert_eq!(names[1], "bandwidth", "the first GPU check");
    }

    #[test]
    fn only_the_inventory_is_run_last_and_it_prints_first() {
        let last: Vec<&str> = CHECKS
            .iter()
            .filter(|entry| entry.turn == Turn::LastPrintedInPlace)
            .map(|entry| entry.name)
            .collect();
        assert_eq!(last, ["inventory"]);
        assert_eq!(CHECKS[0].name, "inventory");
    }
}
