//! The framework check: the image's Python with torch sees the GPUs, reports the torch, CUDA,
//! cuDNN and NCCL versions the image claims (`IMAGEGEN_TORCH`, `IMAGEGEN_CUDA`,
//! `IMAGEGEN_CUDNN`, `IMAGEGEN_NCCL`, or the `--expect-*` flags), and compiles and runs a small
//! `torch.compile` function on the GPU (so the Triton toolchain works).
//!
//! The Python side is one embedded script printing one JSON line; it starts at the beginning of
//! the run and works while the GPU checks do, since importing torch and compiling is mostly CPU.
//! Judging its answer is pure and unit-tested.

use crate::report::{Check, Status};
use crate::rules;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = r#"
import json, sys, time
out = {}
started = time.time()
try:
    import torch
except Exception as error:
    print("GPU_SELFTEST_JSON " + json.dumps({"torch_import_error": repr(error)[:400]}))
    sys.exit(0)
out["import_seconds"] = time.time() - started
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
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
out["cuda_available"] = bool(torch.cuda.is_available())
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
if out["cuda_available"]:
    try:
        started = time.time()
        x = torch.randn(1 << 16, device="cuda")
        torch.cuda.synchronize()
        out["cuda_init_seconds"] = time.time() - started
        started = time.time()
        def function(x):
            return torch.sin(x) * 2.0 + torch.cos(x) * x
        compiled = torch.compile(function)
        y = compiled(x)
        torch.cuda.synchronize()
        out["compile_seconds"] = time.time() - started
        out["compile_max_error"] = float((y - function(x)).abs().max())
        out["compile_ok"] = bool(torch.allclose(y, function(x), rtol=1e-5, atol=1e-5))
    except Exception as error:
        out["compile_error"] = repr(error)[:600]
print("GPU_SELFTEST_JSON " + json.dumps(out))
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
}

/// A running framework probe.
pub struct Running {
    child: Child,
    started: Instant,
    timeout: Duration,
    interpreter: String,
}

/// Starts the probe with `interpreter`; `Err` carries why it could not start (no Python).
pub fn start(
    interpreter: &str,
    timeout: Duration,
    original_library_path: Option<&str>,
) -> Result<Running, String> {
    let mut command = Command::new(interpreter);
    command
        .args(["-c", SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::loader::restore_environment(&mut command, original_library_path);
    // One function needs no pool of compile workers; starting one (a process per core, each
    // importing torch) costs seconds and competes with the GPU checks for the CPU.
    if std::env::var_os("TORCHINDUCTOR_COMPILE_THREADS").is_none() {
        command.env("TORCHINDUCTOR_COMPILE_THREADS", "1");
    }
    let child = command
        .spawn()
        .map_err(|error| format!("cannot run `{interpreter}`: {error}"))?;
    Ok(Running {
        child,
        started: Instant::now(),
        timeout,
        interpreter: interpreter.to_string(),
    })
}

impl Drop for Running {
    /// A probe abandoned because the run stopped early must not outlive it.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits for the probe (killing it at the timeout) and parses its answer.
pub fn finish(mut running: Running) -> Result<Findings, String> {
    let mut stdout = running.child.stdout.take();
    let mut stderr = running.child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
    let error_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    });
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
    let output = reader.join().unwrap_or_default();
    let errors = error_reader.join().unwrap_or_default();
    parse_output(&output).ok_or_else(|| {
        let tail: String = errors.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        format!(
            "`{}` printed no result (stderr: {})",
            running.interpreter,
            if tail.is_empty() { "empty" } else { &tail }
        )
    })
}

/// Finds the script's JSON line in its output.
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
    match (&findings.compile_ok, &findings.compile_error) {
        (Some(true), _) => lines.push(format!(
            "torch.compile: compiled and ran on the GPU in {:.1} s, max error {:.1e} (import torch {:.1} s, CUDA start {:.1} s)",
            findings.compile_seconds.unwrap_or(0.0),
            findings.compile_max_error.unwrap_or(0.0),
            findings.import_seconds.unwrap_or(0.0),
            findings.cuda_init_seconds.unwrap_or(0.0)
        )),
        (Some(false), _) => problems.push(format!(
            "torch.compile result differs from eager (max error {:.1e})",
            findings.compile_max_error.unwrap_or(f64::NAN)
        )),
        (None, Some(error)) => problems.push(format!("torch.compile failed: {error}")),
        (None, None) if findings.cuda_available => {
            problems.push("torch.compile did not run".to_string())
        }
        (None, None) => {}
    }
    let status = if problems.is_empty() {
        Status::Pass
    } else {
        Status::Fail
    };
    let summary = if problems.is_empty() {
        format!(
            "torch {found_torch} (CUDA {found_cuda}, cuDNN {}, NCCL {}) sees {} GPU(s); torch.compile runs",
            found_cudnn.as_deref().unwrap_or("none"),
            findings.nccl.as_deref().unwrap_or("none"),
            findings.device_count
        )
    } else {
        problems.join("; ")
    };
    let mut result = Check::new("framework", status, summary)
        .with_rule("torch sees every GPU; torch/CUDA/cuDNN/NCCL equal the image's claims (IMAGEGEN_* or --expect-*; cuDNN compared on major.minor.patch); a torch.compile function matches eager on the GPU")
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
    fn a_python_without_torch_is_reported_by_the_real_script() {
        // Runs the embedded script with `python3 -S`-like isolation only when python3 exists
        // and has no torch (the CPU machine); otherwise there is nothing to assert here.
        let Ok(running) = start("python3", Duration::from_secs(60), None) else {
            return;
        };
        let findings = finish(running).expect("the script prints its JSON line");
        if findings.torch_import_error.is_some() {
            assert_eq!(judge(&findings, &claims(), 0).status, Status::Skip);
        } else {
            assert!(findings.torch.is_some());
        }
    }

    #[test]
    fn a_missing_interpreter_is_an_error_naming_it() {
        let error = start("/nonexistent/python3", Duration::from_secs(1), None)
            .err()
            .unwrap();
        assert!(error.contains("/nonexistent/python3"));
    }
}
