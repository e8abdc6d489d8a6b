//! The run: from flags to a report and an exit code. Prepares the loader (which may re-execute
//! the process), makes sure the driver and the libraries the selected checks need load (exit 2
//! naming the missing one and where it looked otherwise), runs the checks in order, each guarded
//! so that an error or a panic inside becomes that check's failure, judges their speed against
//! the GPU models' expected figures and the baseline if one is given, saves a baseline if asked,
//! and renders the report.

use crate::baseline::{self, Baseline};
use crate::cli::{self, Cli, Format};
use crate::expected;
use crate::framework::{self, Claims, Probe};
use crate::gpu::{self, bandwidth, inventory, matmul, nccl, overlap};
use crate::loader::{self, Prepared};
use crate::nvml::Nvml;
use crate::report::{self, Check, Overall, Report, Status};
use crate::rules::{self, GpuLinks, References};
use crate::{plot, shm};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Mutex;
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

/// Runs the selected checks into `report`. `Err` means the run could not start (exit 2): bad
/// flags, no driver, no GPU, or a library a selected check needs; a check that runs and breaks
/// is that check's failure instead.
fn run_checks(cli: &Cli, prepared: &Prepared, report: &mut Report) -> Result<(), CannotRun> {
    let started_checks = Instant::now();
    // Flags are validated before anything touches a GPU.
    let selected = cli::selected_checks(cli.checks.as_deref(), &cli.skip, cli.no_framework)
        .map_err(CannotRun)?;
    let wants = |name: &str| selected.contains(&name);
    let bandwidth_sizes = cli::parse_sizes(&cli.bandwidth_sizes).map_err(CannotRun)?;
    let nccl_sizes = cli::parse_sizes(&cli.nccl_sizes).map_err(CannotRun)?;
    let overlap_bytes = cli::parse_size(&cli.overlap_bytes).map_err(CannotRun)?;
    let precisions = cli::parse_precisions(&cli.matmul_precisions).map_err(CannotRun)?;
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

    // The framework probe works (mostly on the CPU) while the GPU checks run; it is
    // killed if the run stops early (dropping `Running` kills the child).
    let framework_probe = wants("framework").then(|| {
        framework::start(
            &cli.python,
            if cli.framework_torch_compile {
                Probe::TorchCompile
            } else {
                Probe::Triton
            },
            Duration::from_secs(cli.framework_timeout),
            prepared.original_library_path.as_deref(),
        )
    });

    // cudarc panics on a missing library, so each one a selected check needs is probed first
    // and a missing one stops the run with exit 2, naming it and every place searched.
    if !loader::library_loads("cuda") {
        return Err(CannotRun(format!(
            "{} (no NVIDIA driver in this container? start it with --gpus all and the NVIDIA container toolkit)",
            loader::missing_library_message(&spec("cuda"), &prepared.discovery)
        )));
    }
    let gpus = std::panic::catch_unwind(gpu::open_all)
        .map_err(|_| {
            CannotRun(format!(
                "the driver library broke while opening the GPUs: {}",
                last_panic()
            ))
        })?
        .map_err(|error| CannotRun(format!("no usable GPU: {error:#}")))?;
    if gpus.is_empty() {
        return Err(CannotRun(
            "no GPU visible (cuDeviceGetCount returned 0; check CUDA_VISIBLE_DEVICES and --gpus)"
                .to_string(),
        ));
    }
    // Only the libraries the selected checks use are required: `--checks bandwidth` runs with
    // the driver alone, and NCCL is needed only where there are two GPUs to reduce across.
    let needs_cublas = wants("matmul") || wants("overlap");
    if needs_cublas && !loader::library_loads("cublas") {
        return Err(CannotRun(loader::missing_library_message(
            &spec("cublas"),
            &prepared.discovery,
        )));
    }
    let runs_nccl = wants("nccl") && gpus.len() >= 2;
    if runs_nccl && !loader::library_loads("nccl") {
        return Err(CannotRun(loader::missing_library_message(
            &spec("nccl"),
            &prepared.discovery,
        )));
    }

    // NVML is optional: without it the PCIe link comes from sysfs and NVLink is "unknown".
    let nvml_path = prepared
        .discovery
        .get("nvml")
        .map(|found| found.path.clone())
        .unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let inventory_started = Instant::now();
    let nvml = Nvml::open(&nvml_path);
    let facts = inventory::gather(&gpus, nvml.as_ref())
        .map_err(|error| CannotRun(format!("cannot read the GPUs' properties: {error:#}")))?;
    let driver = inventory::DriverFacts {
        driver_version: nvml.as_ref().and_then(Nvml::driver_version),
        driver_cuda_version: gpu::driver_cuda_version().unwrap_or_else(|_| "unknown".to_string()),
    };

    let gpu_names: Vec<String> = facts.iter().map(|gpu| gpu.name.clone()).collect();
    if let Some((baseline, origin)) = &loaded_baseline {
        baseline
            .check_models(&gpu_names)
            .map_err(|message| CannotRun(format!("{origin}: {message}")))?;
    }
    let references = References {
        gpus: gpu_names
            .iter()
            .map(|name| (name.clone(), expected::find(name)))
            .collect(),
        baseline: loaded_baseline
            .as_ref()
            .map(|(baseline, origin)| (baseline, origin.clone())),
    };
    let inventory_elapsed = inventory_started.elapsed().as_secs_f64();
    report.setup_seconds = started_checks.elapsed().as_secs_f64();
    let mut checks: Vec<Check> = Vec::new();
    let mut bandwidth_points = Vec::new();
    // The checks run one after another, never side by side: each one's figures are meant to
    // show what the hardware does alone (the framework probe is mostly CPU work, see above).
    if wants("bandwidth") {
        let settings = bandwidth::BandwidthSettings {
            sizes: bandwidth_sizes.clone(),
            warm_up: 1,
            repetitions: cli.bandwidth_repeats.max(1),
        };
        checks.push(guarded("bandwidth", || {
            let mut buffers = bandwidth::HostBuffers::new(&gpus[0], &settings)?;
            for device in &gpus {
                bandwidth_points.extend(bandwidth::measure(device, &settings, &mut buffers)?);
            }
            Ok(bandwidth::check(
                &bandwidth_points,
                &facts,
                &bandwidth_sizes,
                &references,
            ))
        }));
    }
    // Overlap uses its own pinned buffer and two fresh streams per GPU.
    if wants("overlap") {
        let settings = overlap::OverlapSettings {
            copy_bytes: overlap_bytes,
            matmul_size: cli.matmul_size,
            repetitions: 5,
        };
        checks.push(guarded("overlap", || {
            let inputs = overlap::OverlapInputs::new(&gpus[0], &settings)?;
            let results = gpus
                .iter()
                .map(|device| overlap::measure(device, &settings, &inputs))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(overlap::check(&results))
        }));
    }
    // The NCCL communicators are created while the matmul check runs: creating them is host
    // work (topology search, buffers, connecting the peers: 0.7–1.0 s on 2×H200) that the
    // products, timed on the GPUs by events, do not feel.
    let communicators = runs_nccl.then(|| {
        let contexts: Vec<_> = gpus.iter().map(|gpu| gpu.context.clone()).collect();
        std::thread::spawn(move || {
            std::panic::catch_unwind(AssertUnwindSafe(|| nccl::Communicators::create(&contexts)))
                .unwrap_or_else(|_| {
                    Err(anyhow::anyhow!(
                        "internal error (panic) while creating the NCCL communicators: {}",
                        last_panic()
                    ))
                })
        })
    });
    // 256 sampled entries per product are checked against float64; see gpu/matmul.rs.
    let mut matmul_results = Vec::new();
    if wants("matmul") {
        let settings = matmul::MatmulSettings {
            size: cli.matmul_size,
            precisions: precisions.clone(),
            warm_up: 3,
            repetitions: cli.matmul_repeats.max(1),
            samples: 256,
        };
        checks.push(guarded("matmul", || {
            matmul_results = matmul::measure(&gpus, &settings)?;
            Ok(matmul::check(&matmul_results, &references))
        }));
    }
    let mut versions = inventory::LibraryVersions::default();
    if needs_cublas {
        versions.cublas = std::panic::catch_unwind(inventory::cublas_version)
            .ok()
            .flatten();
    }
    let mut nccl_points = Vec::new();
    if wants("nccl") {
        if runs_nccl {
            versions.nccl = std::panic::catch_unwind(inventory::nccl_version)
                .ok()
                .flatten();
            let settings = nccl::NcclSettings {
                sizes: nccl_sizes.clone(),
                warm_up: 5,
                repetitions: cli.nccl_repeats.max(1),
                back_to_back_runs: cli.nccl_runs.max(1),
            };
            let version = versions.nccl.clone();
            let links: Vec<GpuLinks> = facts
                .iter()
                .map(|gpu| GpuLinks {
                    index: gpu.index,
                    device_name: &gpu.name,
                    model: references.model(gpu.index),
                    pcie: gpu.pcie_max_generation.zip(gpu.pcie_max_width),
                    nvlink_peers: gpu.nvlink_peer_indices(),
                })
                .collect();
            let path = rules::collective_path(&links);
            checks.push(guarded("nccl", || {
                let communicators = communicators
                    .expect("started whenever the NCCL check runs")
                    .join()
                    .map_err(|_| anyhow::anyhow!("the NCCL set-up thread stopped"))??;
                nccl_points = nccl::measure(&gpus, &communicators, &settings)?;
                Ok(
                    nccl::check(&nccl_points, version.as_deref(), &path, &references)
                        .figure("communicator_seconds", communicators.seconds),
                )
            }));
        } else {
            checks.push(
                Check::new(
                    "nccl",
                    Status::Skip,
                    "one GPU visible: nothing to all-reduce across",
                )
                .with_rule("needs two or more GPUs"),
            );
        }
    }
    if wants("shm") {
        let path = Path::new("/dev/shm");
        checks.push(guarded("shm", || {
            Ok(shm::check(path, shm::filesystem_bytes(path)))
        }));
    }
    if let Some(probe) = framework_probe {
        let claims = Claims {
            torch: cli.expect_torch.clone().filter(|v| !v.is_empty()),
            cuda: cli.expect_cuda.clone().filter(|v| !v.is_empty()),
            cudnn: cli.expect_cudnn.clone().filter(|v| !v.is_empty()),
            nccl: cli.expect_nccl.clone().filter(|v| !v.is_empty()),
        };
        let mut check = match probe.and_then(framework::finish) {
            Ok(findings) => framework::judge(&findings, &claims, gpus.len()),
            Err(reason) if reason.starts_with("cannot run") => {
                Check::new("framework", Status::Skip, format!("no Python: {reason}"))
                    .with_rule("skipped when no Python interpreter is present")
            }
            Err(reason) => Check::new("framework", Status::Fail, reason)
                .with_rule("the torch probe must finish and print its result"),
        };
        check.duration_seconds = started_checks.elapsed().as_secs_f64();
        checks.push(check);
    }

    // The inventory is built last, though printed first: only now are all the libraries the
    // checks used mapped into the process, with the paths and versions it reports.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let loaded = loader::loaded_libraries(&maps);
    checks.insert(
        0,
        inventory::check(
            &facts,
            &driver,
            &prepared.discovery,
            &loaded,
            &versions,
            &prepared.note,
            loader::cuda_build_major(),
        ),
    );
    checks[0].duration_seconds = inventory_elapsed;
    if let Some(path) = &cli.plot {
        let title = format!(
            "Host-device bandwidth, {}",
            facts.first().map(|f| f.name.as_str()).unwrap_or("GPU")
        );
        let svg = plot::render_bandwidth_svg(&title, &bandwidth::plot_series(&bandwidth_points));
        if let Err(message) = write_atomically(path, svg.as_bytes()) {
            checks.push(Check::new("plot", Status::Warn, message));
        }
    }
    if let Some(path) = &cli.save_baseline {
        let figures = [
            bandwidth::baseline_figures(&bandwidth_points),
            matmul::baseline_figures(&matmul_results),
            nccl::baseline_figures(&nccl_points),
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
