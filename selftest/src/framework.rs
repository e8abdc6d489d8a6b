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
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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

/// The probe. It prints one line, `GPU_SELFTEST_JSON {...}`, whatever happens inside (a failing
/// step records its error instead of raising), so the Rust side never has to parse a traceback.
/// Phases are timed separately: a slow default run is usually the import or the cold compile.
/// It runs from a file, not `python -c`: Triton reads a kernel's source from its file.
const SCRIPT: &str = r#"
import json, os, sys, time
mode = sys.argv[1] if len(sys.argv) > 1 else "triton"
out = {"probe": mode}
started = time.time()
try:
    import torch
except Exception as error:
    print("GPU_SELFTEST_JSON " + json.dumps({"probe": mode, "torch_import_error": repr(error)[:400]}))
    sys.exit(0)
out["import_seconds"] = time.time() - started
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
started = time.time()
try:
    out["cudnn"] = torch.backends.cudnn.version()
except Exception as error:
    out["cudnn_error"] = repr(error)[:400]
try:
    version = torch.cuda.nccl.version()
    if isinstance(version, int):
        version = (version // 10000, version % 10000 // 100, version % 100) if version >= 20900 else (version // 1000, version % 1000 // 100, version % 100)
    out["nccl"] = ".".join(str(part) for part in version[:3])
except Exception as error:
    out["nccl_error"] = repr(error)[:400]
out["versions_seconds"] = time.time() - started
started = time.time()
out["cuda_available"] = bool(torch.cuda.is_available())
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
out["device_query_seconds"] = time.time() - started

def function(x):
    return torch.sin(x) * 2.0 + torch.cos(x) * x

x = None
if out["cuda_available"]:
    try:
        started = time.time()
        x = torch.randn(1 << 16, device="cuda")
        torch.cuda.synchronize()
        out["cuda_init_seconds"] = time.time() - started
    except Exception as error:
        out["cuda_error"] = repr(error)[:600]
if x is not None and mode == "compile":
    try:
        started = time.time()
        compiled = torch.compile(function)
        y = compiled(x)
        torch.cuda.synchronize()
        out["compile_seconds"] = time.time() - started
        out["compile_max_error"] = float((y - function(x)).abs().max())
        out["compile_ok"] = bool(torch.allclose(y, function(x), rtol=1e-5, atol=1e-5))
    except Exception as error:
        out["compile_error"] = repr(error)[:600]
if x is not None and mode == "triton":
    try:
        started = time.time()
        import triton
        import triton.language as tl
        out["triton"] = triton.__version__

        @triton.jit
        def probe_kernel(x_pointer, y_pointer, count, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < count
            value = tl.load(x_pointer + offsets, mask=mask)
            tl.store(y_pointer + offsets, tl.sin(value) * 2.0 + tl.cos(value) * value, mask=mask)

        y = torch.full_like(x, float("nan"))
        probe_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        out["triton_seconds"] = time.time() - started
        expected = function(x)
        out["triton_max_error"] = float((y - expected).abs().max())
        out["triton_ok"] = bool(torch.allclose(y, expected, rtol=1e-4, atol=1e-4))
    except Exception as error:
        out["triton_error"] = repr(error)[:600]
print("GPU_SELFTEST_JSON " + json.dumps(out), flush=True)
# Everything is said: skip the interpreter's teardown (torch's and CUDA's destructors take most
# of a second), which would only delay the end of the run.
sys.stderr.flush()
os._exit(0)
"#;

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
}

/// A running framework probe.
pub struct Running {
    child: Child,
    started: Instant,
    timeout: Duration,
    interpreter: String,
    /// The script's file, removed when the probe is dropped.
    script: PathBuf,
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
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::loader::restore_environment(&mut command, original_library_path);
    // One function needs no pool of compile workers; starting one (a process per core, each
    // importing torch) costs seconds and competes with the GPU checks for the CPU.
    if std::env::var_os("TORCHINDUCTOR_COMPILE_THREADS").is_none() {
        command.env("TORCHINDUCTOR_COMPILE_THREADS", "1");
    }
    let started = Instant::now();
    let mut child = command.spawn().map_err(|error| {
        let _ = std::fs::remove_file(&script);
        format!("cannot run `{interpreter}`: {error}")
    })?;
    let output_reader = Some(read_to_end(child.stdout.take()));
    let error_reader = Some(read_to_end(child.stderr.take()));
    Ok(Running {
        child,
        started,
        timeout,
        interpreter: interpreter.to_string(),
        script,
        output_reader,
        error_reader,
    })
}

impl Drop for Running {
    /// A probe abandoned because the run stopped early must not outlive it.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.script);
    }
}

/// Waits for the probe (killing it at the timeout) and parses its answer; `probe_seconds` is
/// set to the time from its start to the end of its output.
pub fn finish(mut running: Running) -> Result<Findings, String> {
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
                let findings = finish(running).expect("the script prints its JSON line");
                assert_eq!(findings.probe.as_deref(), Some("triton"));
                assert!(!script.exists(), "the probe's file is removed");
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
