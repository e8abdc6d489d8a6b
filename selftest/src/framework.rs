//! The framework check: the image's Python with torch sees the GPUs, reports the torch, CUDA,
//! cuDNN and NCCL versions the image claims (`IMAGEGEN_TORCH`, `IMAGEGEN_CUDA`,
//! `IMAGEGEN_CUDNN`, `IMAGEGEN_NCCL`, or the `--expect-*` flags), and compiles and runs GPU code
//! at run time: by default a Triton kernel (Triton is the compiler `torch.compile` generates
//! its GPU code with, so this proves the same toolchain: Triton, ptxas, the C compiler for its
//! launcher), or with `--framework-torch-compile` a `torch.compile` function, which adds
//! Dynamo's and Inductor's start-up (seconds of CPU) to the same toolchain.
//!
//! The Python side is one embedded script printing one JSON line; it starts at the beginning of
//! the run and works while the GPU checks do, since importing torch and compiling is mostly CPU.
//! Judging its answer is pure and unit-tested.

use crate::report::{Check, Status};
use crate::rules;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Which run-time compilation the probe proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A Triton kernel: the toolchain `torch.compile` uses, without Dynamo and Inductor.
    Triton,
    /// A `torch.compile` function (Dynamo, Inductor, Triton).
    TorchCompile,
}

impl Probe {
    /// The word the script takes as its argument and reports back as `probe`.
    pub fn name(self) -> &'static str {
        match self {
            Probe::Triton => "triton",
            Probe::TorchCompile => "compile",
        }
    }
}

/// The probe (`probe.py` beside this file). It prints one line, `GPU_SELFTEST_JSON {...}`,
/// whatever happens inside (a failing step records its error instead of raising), so the Rust
/// side never has to parse a traceback. Phases are timed separately. It runs from a file, not
/// `python -c`: Triton reads a kernel's source from its file. It makes GPU 0's CUDA context on a
/// thread and, in the Triton mode, compiles the kernel in a second interpreter, both while torch
/// imports, so that what remains on its critical path is torch's own start.
const SCRIPT: &str = include_str!("probe.py");

/// Tells the probe's kernel compiler that its Triton cache is this run's own and empty.
const PRIVATE_CACHE_VARIABLE: &str = "GPU_SELFTEST_PRIVATE_TRITON_CACHE";

/// What the image claims; `None` means no claim to compare.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Claims {
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub cudnn: Option<String>,
    pub nccl: Option<String>,
}

/// What the Python script reported.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Findings {
    /// "triton" or "compile"; absent in the output of gpu-selftest before 0.2 (= "compile").
    pub probe: Option<String>,
    pub torch_import_error: Option<String>,
    pub torch: Option<String>,
    pub cuda: Option<String>,
    pub cudnn: Option<u64>,
    pub cudnn_error: Option<String>,
    pub nccl: Option<String>,
    pub nccl_error: Option<String>,
    #[serde(default)]
    pub cuda_available: bool,
    #[serde(default)]
    pub device_count: usize,
    pub compile_ok: Option<bool>,
    pub compile_seconds: Option<f64>,
    pub import_seconds: Option<f64>,
    pub cuda_init_seconds: Option<f64>,
    pub compile_max_error: Option<f64>,
    pub compile_error: Option<String>,
    pub cuda_error: Option<String>,
    /// Triton's version, when the Triton probe imported it.
    pub triton: Option<String>,
    pub triton_ok: Option<bool>,
    /// Importing Triton, compiling the kernel (and its launcher) and running it.
    pub triton_seconds: Option<f64>,
    pub triton_max_error: Option<f64>,
    pub triton_error: Option<String>,
    /// Asking torch for its cuDNN and NCCL versions (loads those libraries).
    pub versions_seconds: Option<f64>,
    /// `torch.cuda.is_available()` and `device_count()` (the driver's start in torch).
    pub device_query_seconds: Option<f64>,
    /// From starting the interpreter to the end of its output, measured by gpu-selftest: the
    /// probe's whole length, which runs beside the GPU checks.
    pub probe_seconds: Option<f64>,
    /// From the interpreter's first line to its output, measured by the probe.
    pub python_seconds: Option<f64>,
    /// When gpu-selftest said that it had opened the GPUs, from the probe's start.
    pub gpus_open_at_seconds: Option<f64>,
    /// Making GPU 0's CUDA context on a thread while torch imported, and why it failed.
    pub cuda_early_seconds: Option<f64>,
    pub cuda_early_error: Option<String>,
    /// Where the Triton kernel was compiled: beside the torch import (a second interpreter), or
    /// by Triton's JIT after it (when that failed, or on a Triton whose API differs).
    pub kernel_path: Option<String>,
    /// The second interpreter's whole run (import Triton, compile the kernel, build the C
    /// launcher and Triton's driver helpers) and the kernel's compilation alone.
    pub kernel_compiler_seconds: Option<f64>,
    pub kernel_compile_seconds: Option<f64>,
    /// How long the probe waited for the second interpreter once torch had the GPU.
    pub kernel_wait_seconds: Option<f64>,
    pub kernel_compiler_error: Option<String>,
    pub kernel_load_error: Option<String>,
    /// The Triton cache the probe used: "private" (an empty folder of this run, removed after)
    /// or the `TRITON_CACHE_DIR` the caller set.
    pub triton_cache: Option<String>,
}

/// A running framework probe.
pub struct Running {
    child: Child,
    /// The probe's standard input: one line says that this process opened the GPUs (GPU 0's
    /// compute capability, or `none`); closing it says the same without a capability.
    gpus_open: Option<ChildStdin>,
    started: Instant,
    timeout: Duration,
    interpreter: String,
    /// The script's file, removed when the probe is dropped.
    script: PathBuf,
    /// The private Triton cache, removed when the probe is dropped; `None` when the caller set
    /// `TRITON_CACHE_DIR`.
    private_cache: Option<PathBuf>,
    /// Readers of standard output (with the moment it closed: the probe's end) and error,
    /// started with the probe so that a full pipe never stalls it.
    output_reader: Option<JoinHandle<(String, Instant)>>,
    error_reader: Option<JoinHandle<(String, Instant)>>,
}

/// Reads a pipe to its end on a thread of its own; returns the text and when the end came.
fn read_to_end(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<(String, Instant)> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        (text, Instant::now())
    })
}

/// Starts the probe with `interpreter`; `Err` carries why it could not start (no Python).
pub fn start(
    interpreter: &str,
    probe: Probe,
    timeout: Duration,
    original_library_path: Option<&str>,
) -> Result<Running, String> {
    // A file of our own in the temporary folder: the process id keeps runs apart, a count
    // keeps this process's probes apart (two at once must not remove each other's file), and
    // `create_new` refuses a file someone placed there first.
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let count = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let script = std::env::temp_dir().join(format!(
        "gpu-selftest-probe-{}-{count}-{}.py",
        std::process::id(),
        probe.name()
    ));
    let _ = std::fs::remove_file(&script);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&script)
        .and_then(|mut file| std::io::Write::write_all(&mut file, SCRIPT.as_bytes()))
        .map_err(|error| format!("cannot write the probe {}: {error}", script.display()))?;
    let mut command = Command::new(interpreter);
    command
        .arg(&script)
        .arg(probe.name())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::loader::restore_environment(&mut command, original_library_path);
    // Triton compiles into an empty folder of this run's own unless the caller chose a cache:
    // every run then proves that the compiler works (a cache hit would prove nothing) and leaves
    // nothing behind in the home folder.
    // Only the Triton probe: `--framework-torch-compile` keeps Inductor's and Triton's caches as
    // the caller has them.
    let private_cache = if probe == Probe::Triton && std::env::var_os("TRITON_CACHE_DIR").is_none()
    {
        let folder = script.with_extension("triton-cache");
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir(&folder).map_err(|error| {
            let _ = std::fs::remove_file(&script);
            format!("cannot make the Triton cache {}: {error}", folder.display())
        })?;
        command
            .env("TRITON_CACHE_DIR", &folder)
            .env(PRIVATE_CACHE_VARIABLE, "1");
        Some(folder)
    } else {
        command.env_remove(PRIVATE_CACHE_VARIABLE);
        None
    };
    // One function needs no pool of compile workers; starting one (a process per core, each
    // importing torch) costs seconds and competes with the GPU checks for the CPU.
    if std::env::var_os("TORCHINDUCTOR_COMPILE_THREADS").is_none() {
        command.env("TORCHINDUCTOR_COMPILE_THREADS", "1");
    }
    let started = Instant::now();
    let mut child = command.spawn().map_err(|error| {
        let _ = std::fs::remove_file(&script);
        if let Some(folder) = &private_cache {
            let _ = std::fs::remove_dir_all(folder);
        }
        format!("cannot run `{interpreter}`: {error}")
    })?;
    let gpus_open = child.stdin.take();
    let output_reader = Some(read_to_end(child.stdout.take()));
    let error_reader = Some(read_to_end(child.stderr.take()));
    Ok(Running {
        child,
        gpus_open,
        started,
        timeout,
        interpreter: interpreter.to_string(),
        script,
        private_cache,
        output_reader,
        error_reader,
    })
}

impl Running {
    /// Tells the probe that this process has opened the GPUs, so that it makes its own CUDA
    /// context now, and GPU 0's compute capability ("9.0"), for the Triton kernel it compiles.
    /// Said once; later calls do nothing.
    pub fn gpus_open(&mut self, compute_capability: Option<&str>) {
        if let Some(mut pipe) = self.gpus_open.take() {
            // A probe that already ended has closed its end: nothing to tell.
            let _ = writeln!(pipe, "{}", compute_capability.unwrap_or("none"));
        }
    }
}

impl Drop for Running {
    /// A probe abandoned because the run stopped early must not outlive it.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.script);
        if let Some(folder) = &self.private_cache {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}

/// Waits for the probe (killing it at the timeout) and parses its answer; `probe_seconds` is
/// set to the time from its start to the end of its output.
pub fn finish(mut running: Running) -> Result<Findings, String> {
    // Whatever was said, the probe must not wait any longer to hear that the GPUs are open.
    drop(running.gpus_open.take());
    loop {
        match running.child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if running.started.elapsed() > running.timeout => {
                let _ = running.child.kill();
                let _ = running.child.wait();
                return Err(format!(
                    "`{}` did not finish within {} s",
                    running.interpreter,
                    running.timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return Err(format!("waiting for `{}`: {error}", running.interpreter)),
        }
    }
    let joined = |reader: Option<JoinHandle<(String, Instant)>>| {
        reader
            .and_then(|handle| handle.join().ok())
            .unwrap_or_else(|| (String::new(), Instant::now()))
    };
    let (output, output_ended) = joined(running.output_reader.take());
    let (errors, _) = joined(running.error_reader.take());
    let mut findings = parse_output(&output).ok_or_else(|| {
        let tail: String = errors.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        format!(
            "`{}` printed no result (stderr: {})",
            running.interpreter,
            if tail.is_empty() { "empty" } else { &tail }
        )
    })?;
    findings.probe_seconds = Some(
        output_ended
            .saturating_duration_since(running.started)
            .as_secs_f64(),
    );
    findings.triton_cache = Some(match &running.private_cache {
        Some(_) => "private".to_string(),
        None => {
            std::env::var("TRITON_CACHE_DIR").unwrap_or_else(|_| "Triton's default".to_string())
        }
    });
    Ok(findings)
}

/// Finds the script's JSON line in its output (the last one: torch may print warnings first).
pub fn parse_output(output: &str) -> Option<Findings> {
    output
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("GPU_SELFTEST_JSON "))
        .and_then(|json| serde_json::from_str(json).ok())
}

/// Judges the findings against the claims and the number of GPUs this tool sees.
pub fn judge(findings: &Findings, claims: &Claims, visible_gpus: usize) -> Check {
    if let Some(error) = &findings.torch_import_error {
        return Check::new(
            "framework",
            Status::Skip,
            format!("python has no importable torch ({error})"),
        )
        .with_rule("skipped: no torch");
    }
    let mut problems: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let found_torch = findings.torch.clone().unwrap_or_default();
    let found_cuda = findings
        .cuda
        .clone()
        .unwrap_or_else(|| "none (CPU build)".to_string());
    let found_cudnn = findings.cudnn.map(rules::cudnn_version_from_integer);
    let mut compare =
        |what: &str, claimed: &Option<String>, found: Option<String>, matches: bool| {
            let found_text = found.clone().unwrap_or_else(|| "unknown".to_string());
            match claimed {
                Some(claim) => {
                    let verdict = if matches { "ok" } else { "MISMATCH" };
                    lines.push(format!(
                        "{what}: claimed {claim}, found {found_text}: {verdict}"
                    ));
                    if !matches {
                        problems.push(format!("{what} {found_text} is not the claimed {claim}"));
                    }
                }
                None => lines.push(format!("{what}: found {found_text} (no claim)")),
            }
        };
    compare(
        "torch",
        &claims.torch,
        findings.torch.clone(),
        claims
            .torch
            .as_deref()
            .is_some_and(|claim| rules::version_matches_claim(claim, &found_torch)),
    );
    compare(
        "CUDA",
        &claims.cuda,
        findings.cuda.clone(),
        claims.cuda.as_deref().is_some_and(|claim| {
            findings
                .cuda
                .as_deref()
                .is_some_and(|found| rules::version_matches_claim(claim, found))
        }),
    );
    compare(
        "cuDNN",
        &claims.cudnn,
        found_cudnn.clone(),
        claims.cudnn.as_deref().is_some_and(|claim| {
            findings
                .cudnn
                .is_some_and(|encoded| rules::cudnn_matches_claim(claim, encoded))
        }),
    );
    compare(
        "NCCL",
        &claims.nccl,
        findings.nccl.clone(),
        claims.nccl.as_deref().is_some_and(|claim| {
            findings
                .nccl
                .as_deref()
                .is_some_and(|found| rules::version_matches_claim(claim, found))
        }),
    );
    if !findings.cuda_available {
        problems.push("torch.cuda.is_available() is False".to_string());
    } else if findings.device_count != visible_gpus {
        problems.push(format!(
            "torch sees {} GPU(s), gpu-selftest sees {visible_gpus}",
            findings.device_count
        ));
    }
    lines.push(format!(
        "torch sees {} GPU(s) (gpu-selftest sees {visible_gpus})",
        findings.device_count
    ));
    // The run-time compilation: a Triton kernel (the default) or a torch.compile function (the
    // probe names which; output without a name came from torch.compile).
    let triton_probe = findings.probe.as_deref() == Some("triton");
    let (what, ok, error, seconds, max_error) = if triton_probe {
        (
            "Triton kernel",
            findings.triton_ok,
            findings.triton_error.as_ref(),
            findings.triton_seconds,
            findings.triton_max_error,
        )
    } else {
        (
            "torch.compile",
            findings.compile_ok,
            findings.compile_error.as_ref(),
            findings.compile_seconds,
            findings.compile_max_error,
        )
    };
    if let Some(error) = &findings.cuda_error {
        problems.push(format!("torch cannot use the GPU: {error}"));
    }
    match (ok, error) {
        (Some(true), _) => lines.push(format!(
            "{what}: compiled and ran on GPU 0 in {:.1} s{}, max error {:.1e} against eager (probe {:.1} s in all: import torch {:.1} s, versions {:.1} s, devices {:.1} s, CUDA start {:.1} s)",
            seconds.unwrap_or(0.0),
            findings
                .triton
                .as_ref()
                .filter(|_| triton_probe)
                .map(|version| format!(" (Triton {version})"))
                .unwrap_or_default(),
            max_error.unwrap_or(0.0),
            findings.probe_seconds.unwrap_or(0.0),
            findings.import_seconds.unwrap_or(0.0),
            findings.versions_seconds.unwrap_or(0.0),
            findings.device_query_seconds.unwrap_or(0.0),
            findings.cuda_init_seconds.unwrap_or(0.0)
        )),
        (Some(false), _) => problems.push(format!(
            "{what} result differs from eager (max error {:.1e})",
            max_error.unwrap_or(f64::NAN)
        )),
        (None, Some(error)) => problems.push(format!("{what} failed: {error}")),
        (None, None) if findings.cuda_available && findings.cuda_error.is_none() => {
            problems.push(format!("{what} did not run"))
        }
        (None, None) => {}
    }
    if triton_probe {
        lines.extend(kernel_path_lines(findings));
    }
    // Any mismatch or failure fails the check; versions without a claim are only reported.
    let status = if problems.is_empty() {
        Status::Pass
    } else {
        Status::Fail
    };
    let summary = if problems.is_empty() {
        format!(
            "torch {found_torch} (CUDA {found_cuda}, cuDNN {}, NCCL {}) sees {} GPU(s); {}",
            found_cudnn.as_deref().unwrap_or("none"),
            findings.nccl.as_deref().unwrap_or("none"),
            findings.device_count,
            if triton_probe {
                "a Triton kernel compiles and runs"
            } else {
                "torch.compile runs"
            }
        )
    } else {
        problems.join("; ")
    };
    let mut result = Check::new("framework", status, summary)
        .with_rule(format!(
            "torch sees every GPU; torch/CUDA/cuDNN/NCCL equal the image's claims (IMAGEGEN_* or --expect-*; cuDNN compared on major.minor.patch); {} compiled at run time matches eager on GPU 0",
            if triton_probe {
                "a Triton kernel (the compiler torch.compile uses; --framework-torch-compile runs torch.compile itself)"
            } else {
                "a torch.compile function"
            }
        ))
        .figure("claims", claims)
        .figure("found", findings);
    result.lines = lines;
    result
}

/// Where the Triton kernel was compiled and what the work beside torch's import took; the
/// reasons when the probe fell back to compiling after the import.
fn kernel_path_lines(findings: &Findings) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(path) = &findings.kernel_path {
        lines.push(format!(
            "kernel {path}: second interpreter {:.1} s (compile {:.1} s), waited for {:.1} s; CUDA context made beside the import in {:.1} s; Triton cache {}",
            findings.kernel_compiler_seconds.unwrap_or(f64::NAN),
            findings.kernel_compile_seconds.unwrap_or(f64::NAN),
            findings.kernel_wait_seconds.unwrap_or(f64::NAN),
            findings.cuda_early_seconds.unwrap_or(f64::NAN),
            findings.triton_cache.as_deref().unwrap_or("unknown")
        ));
    }
    for (what, error) in [
        ("kernel compiler", &findings.kernel_compiler_error),
        ("loading its kernel", &findings.kernel_load_error),
        ("early CUDA context", &findings.cuda_early_error),
    ] {
        if let Some(error) = error {
            lines.push(format!(
                "{what}: {error} (not a failure: the probe did it after the import instead)"
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Findings {
        Findings {
            torch: Some("2.7.1+cu126".to_string()),
            cuda: Some("12.6".to_string()),
            cudnn: Some(90501),
            nccl: Some("2.21.5".to_string()),
            cuda_available: true,
            device_count: 2,
            compile_ok: Some(true),
            compile_seconds: Some(6.2),
            compile_max_error: Some(0.0),
            ..Findings::default()
        }
    }

    fn claims() -> Claims {
        Claims {
            torch: Some("2.7.1".to_string()),
            cuda: Some("12.6".to_string()),
            cudnn: Some("9.5.1.17".to_string()),
            nccl: Some("2.21.5".to_string()),
        }
    }

    #[test]
    fn matching_claims_pass() {
        let check = judge(&healthy(), &claims(), 2);
        assert_eq!(check.status, Status::Pass, "{}", check.summary);
        assert_eq!(
            check.summary,
            "torch 2.7.1+cu126 (CUDA 12.6, cuDNN 9.5.1, NCCL 2.21.5) sees 2 GPU(s); torch.compile runs"
        );
        assert!(check
            .lines
            .contains(&"cuDNN: claimed 9.5.1.17, found 9.5.1: ok".to_string()));
    }

    #[test]
    fn each_mismatch_fails_with_its_name() {
        let mut wrong = claims();
        wrong.cudnn = Some("9.1.0.70".to_string());
        let check = judge(&healthy(), &wrong, 2);
        assert_eq!(check.status, Status::Fail);
        assert_eq!(check.summary, "cuDNN 9.5.1 is not the claimed 9.1.0.70");

        let mut other = claims();
        other.cuda = Some("12.8".to_string());
        other.torch = Some("2.8.0".to_string());
        let check = judge(&healthy(), &other, 2);
        assert!(check
            .summary
            .contains("torch 2.7.1+cu126 is not the claimed 2.8.0"));
        assert!(check.summary.contains("CUDA 12.6 is not the claimed 12.8"));
    }

    #[test]
    fn gpu_count_and_compile_failures_fail() {
        let check = judge(&healthy(), &Claims::default(), 4);
        assert_eq!(check.summary, "torch sees 2 GPU(s), gpu-selftest sees 4");
        let mut broken = healthy();
        broken.compile_ok = None;
        broken.compile_error = Some("BackendCompilerFailed('inductor')".to_string());
        let check = judge(&broken, &Claims::default(), 2);
        assert_eq!(check.status, Status::Fail);
        assert!(check
            .summary
            .starts_with("torch.compile failed: BackendCompilerFailed"));
        let mut cpu_only = healthy();
        cpu_only.cuda_available = false;
        cpu_only.compile_ok = None;
        assert!(judge(&cpu_only, &Claims::default(), 2)
            .summary
            .contains("torch.cuda.is_available() is False"));
    }

    #[test]
    fn no_claims_pass_and_no_torch_skips() {
        let check = judge(&healthy(), &Claims::default(), 2);
        assert_eq!(check.status, Status::Pass);
        assert!(check
            .lines
            .contains(&"torch: found 2.7.1+cu126 (no claim)".to_string()));
        let missing = Findings {
            torch_import_error: Some(
                "ModuleNotFoundError(\"No module named 'torch'\")".to_string(),
            ),
            ..Findings::default()
        };
        assert_eq!(judge(&missing, &claims(), 2).status, Status::Skip);
    }

    #[test]
    fn output_parsing_takes_the_marked_line() {
        let text = "warning: something\nGPU_SELFTEST_JSON {\"torch\": \"2.11.0+cu130\", \"cuda\": \"13.0\", \"cudnn\": 91900, \"cuda_available\": true, \"device_count\": 2, \"compile_ok\": true}\n";
        let findings = parse_output(text).unwrap();
        assert_eq!(findings.torch.as_deref(), Some("2.11.0+cu130"));
        assert_eq!(findings.cudnn, Some(91900));
        assert!(parse_output("no marker here").is_none());
    }

    #[test]
    fn the_real_script_reports_what_this_python_has() {
        // Every path asserts: no python3 here is an error naming it; a python3 without torch
        // (CI) reports the import error, which skips; one with torch reports its version and
        // which probe ran.
        match start("python3", Probe::Triton, Duration::from_secs(120), None) {
            Err(message) => assert!(message.contains("python3"), "{message}"),
            Ok(running) => {
                let script = running.script.clone();
                assert!(script.exists());
                // Without a TRITON_CACHE_DIR of the caller's, the probe compiles into a folder
                // of its own, removed with the script.
                let cache = running.private_cache.clone();
                if std::env::var_os("TRITON_CACHE_DIR").is_none() {
                    assert!(cache.as_ref().is_some_and(|folder| folder.is_dir()));
                }
                let findings = finish(running).expect("the script prints its JSON line");
                assert_eq!(findings.probe.as_deref(), Some("triton"));
                assert!(!script.exists(), "the probe's file is removed");
                assert!(
                    cache.is_none_or(|folder| !folder.exists()),
                    "the private Triton cache is removed"
                );
                if findings.torch_import_error.is_some() {
                    assert_eq!(judge(&findings, &claims(), 0).status, Status::Skip);
                } else {
                    assert!(findings.torch.is_some());
                }
            }
        }
    }

    #[test]
    fn a_missing_interpreter_is_an_error_naming_it() {
        let error = start(
            "/nonexistent/python3",
            Probe::Triton,
            Duration::from_secs(1),
            None,
        )
        .err()
        .unwrap();
        assert!(error.contains("/nonexistent/python3"));
    }

    #[test]
    fn the_triton_probe_is_judged_by_its_own_fields() {
        let triton = Findings {
            probe: Some("triton".to_string()),
            compile_ok: None,
            compile_seconds: None,
            triton: Some("3.6.0".to_string()),
            triton_ok: Some(true),
            triton_seconds: Some(2.1),
            triton_max_error: Some(0.0),
            ..healthy()
        };
        let check = judge(&triton, &claims(), 2);
        assert_eq!(check.status, Status::Pass, "{}", check.summary);
        assert!(check
            .summary
            .ends_with("; a Triton kernel compiles and runs"));
        // Compiled beside the import: the line says so; a fallback after the import passes too
        // and names why it was needed.
        let beside = Findings {
            kernel_path: Some("compiled beside the torch import".to_string()),
            kernel_compiler_seconds: Some(1.8),
            kernel_compile_seconds: Some(0.7),
            kernel_wait_seconds: Some(0.0),
            cuda_early_seconds: Some(0.3),
            triton_cache: Some("private".to_string()),
            ..triton.clone()
        };
        let check = judge(&beside, &claims(), 2);
        assert!(check.lines.contains(&"kernel compiled beside the torch import: second interpreter 1.8 s (compile 0.7 s), waited for 0.0 s; CUDA context made beside the import in 0.3 s; Triton cache private".to_string()), "{:?}", check.lines);
        let fallback = Findings {
            kernel_path: Some("compiled by Triton's JIT after the torch import".to_string()),
            kernel_compiler_error: Some(
                "RuntimeError('cuInit returned CUDA error 100')".to_string(),
            ),
            ..beside
        };
        let check = judge(&fallback, &claims(), 2);
        assert_eq!(check.status, Status::Pass);
        assert!(check.lines.iter().any(|line| line.starts_with(
            "kernel compiler: RuntimeError('cuInit returned CUDA error 100') (not a failure"
        )));
        assert!(check.rule.contains("a Triton kernel"));
        assert!(check.lines.iter().any(|line| line
            .starts_with("Triton kernel: compiled and ran on GPU 0 in 2.1 s (Triton 3.6.0)")));
        let wrong = Findings {
            triton_ok: Some(false),
            triton_max_error: Some(0.5),
            ..triton.clone()
        };
        assert_eq!(
            judge(&wrong, &claims(), 2).summary,
            "Triton kernel result differs from eager (max error 5.0e-1)"
        );
        let broken = Findings {
            triton_ok: None,
            triton_error: Some("RuntimeError('Failed to find C compiler')".to_string()),
            ..triton.clone()
        };
        let check = judge(&broken, &claims(), 2);
        assert_eq!(check.status, Status::Fail);
        assert!(check
            .summary
            .starts_with("Triton kernel failed: RuntimeError('Failed to find C compiler')"));
        let silent = Findings {
            triton_ok: None,
            ..triton
        };
        assert_eq!(
            judge(&silent, &claims(), 2).summary,
            "Triton kernel did not run"
        );
    }
}
