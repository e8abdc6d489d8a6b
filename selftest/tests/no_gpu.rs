//! The binary as CI runs it: on a machine without the NVIDIA driver it must exit 2 with a
//! message naming the missing library and where it looked, in every output format, and never
//! panic. On a machine with a driver the same runs take the other branch of each test, which
//! asserts what must hold there (a well-formed report whose status matches the exit code), so
//! no test passes without checking something.

use std::process::{Command, Output};

fn selftest(arguments: &[&str]) -> Output {
    selftest_with(arguments, &[])
}

fn selftest_with(arguments: &[&str], environment: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-selftest"));
    command
        .args(arguments)
        .env_remove("IMAGEGEN_TORCH")
        .env_remove("GPU_SELFTEST_BASELINE");
    for (name, value) in environment {
        command.env(name, value);
    }
    command.output().expect("the gpu-selftest binary runs")
}

/// True when the loader could find the driver here, so the no-GPU path is not the one taken.
fn driver_present() -> bool {
    ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|program| Command::new(program).arg("-p").output().ok())
        .map(|output| String::from_utf8_lossy(&output.stdout).contains("libcuda.so.1"))
        .unwrap_or(false)
        || std::path::Path::new("/usr/local/nvidia/lib64/libcuda.so.1").exists()
}

fn exit_code(output: &Output) -> i32 {
    output
        .status
        .code()
        .expect("exited, not killed by a signal")
}

/// The `overall` word a report must carry for an exit code.
fn overall_for(code: i32) -> &'static str {
    match code {
        0 => "pass",
        1 => "fail",
        _ => "error",
    }
}

#[test]
fn table_run_without_a_driver_exits_2_naming_the_library_and_places() {
    let output = selftest(&["--checks", "bandwidth", "--no-framework"]);
    let code = exit_code(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.starts_with("gpu-selftest "), "{stdout}");
    if driver_present() {
        assert!([0, 1, 2].contains(&code), "exit {code}: {stdout}{stderr}");
        let overall = format!("overall: {}", overall_for(code).to_uppercase());
        assert!(stdout.contains(&overall), "{stdout}");
    } else {
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert!(
            stdout.contains(
                "error: cannot load libcuda.so.1 (the NVIDIA driver library); looked in: "
            ),
            "{stdout}"
        );
        assert!(
            stdout.contains("/usr/local/cuda/lib64 (fixed folder)"),
            "{stdout}"
        );
        assert!(stdout.contains("the loader cache"), "{stdout}");
        assert!(stdout.contains("overall: ERROR"), "{stdout}");
    }
}

#[test]
fn json_run_without_a_driver_is_a_versioned_error_report() {
    let output = selftest(&["--format", "json", "--no-framework"]);
    let code = exit_code(&output);
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["tool"], "gpu-selftest");
    assert_eq!(report["overall"], overall_for(code));
    if driver_present() {
        assert!([0, 1, 2].contains(&code));
        if code != 2 {
            assert_eq!(report["checks"][0]["name"], "inventory");
        }
    } else {
        assert_eq!(code, 2);
        assert!(report["checks"].as_array().unwrap().is_empty());
        assert!(report["error"].as_str().unwrap().contains("libcuda.so.1"));
        assert!(String::from_utf8_lossy(&output.stderr).contains("gpu-selftest: cannot run: "));
    }
}

#[test]
fn prometheus_run_without_a_driver_reports_status_2() {
    let output = selftest(&[
        "--format",
        "prometheus",
        "--checks",
        "shm",
        "--no-framework",
    ]);
    let code = exit_code(&output);
    let text = String::from_utf8_lossy(&output.stdout);
    // Whatever the machine, the status sample carries the exit code.
    assert!(
        text.contains(&format!("gpu_selftest_overall_status {code}\n")),
        "{text}"
    );
    if driver_present() {
        assert!([0, 1, 2].contains(&code));
    } else {
        assert_eq!(code, 2);
        assert!(!text.contains("gpu_selftest_check_status"), "{text}");
    }
}

#[test]
fn report_goes_to_a_file_atomically() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("gpu.prom");
    let output = selftest(&[
        "--format",
        "prometheus",
        "--checks",
        "shm",
        "--no-framework",
        "--output",
        path.to_str().unwrap(),
    ]);
    let code = exit_code(&output);
    assert!(output.stdout.is_empty());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# HELP gpu_selftest_overall_status"));
    assert!(text.contains(&format!("gpu_selftest_overall_status {code}\n")));
    // Only the report: the temporary file it was written through is gone.
    assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);
    if driver_present() {
        assert!([0, 1, 2].contains(&code));
    } else {
        assert_eq!(code, 2);
    }
}

#[test]
fn bad_flags_exit_2_before_touching_a_gpu() {
    // Flags are validated before the driver is looked for, so the message is the same with or
    // without a GPU.
    let output = selftest(&["--checks", "gpu"]);
    assert_eq!(exit_code(&output), 2);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("unknown check `gpu`"), "{stdout}");
    let output = selftest(&["--format", "yaml"]);
    assert_eq!(exit_code(&output), 2);
    assert!(String::from_utf8_lossy(&output.stderr).contains("yaml"));
}

#[test]
fn an_unreadable_baseline_stops_the_run_before_any_gpu_work() {
    let output = selftest(&["--baseline", "/nonexistent/good-node.json"]);
    assert_eq!(exit_code(&output), 2);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("cannot read the baseline /nonexistent/good-node.json"),
        "{stdout}"
    );
    // Through the environment, as imagegen hands it into a container: the text itself.
    let output = selftest_with(
        &["--format", "json"],
        &[("GPU_SELFTEST_BASELINE", "{\"kind\": \"report\"}")],
    );
    assert_eq!(exit_code(&output), 2);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .starts_with("inline baseline: not a gpu-selftest baseline"),
        "{report}"
    );
}

#[test]
fn a_baseline_is_only_saved_from_a_run_that_measured() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("good-node.json");
    let output = selftest(&[
        "--checks",
        "matmul",
        "--matmul-size",
        "1024",
        "--matmul-precisions",
        "bf16",
        "--no-framework",
        "--save-baseline",
        path.to_str().unwrap(),
    ]);
    let code = exit_code(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    if driver_present() && code != 2 {
        // A run that measured: saved when nothing failed, refused (and failed) otherwise.
        if code == 0 {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.contains("\"kind\": \"gpu-selftest-baseline\""),
                "{text}"
            );
            assert!(stdout.contains("[PASS] baseline"), "{stdout}");
        } else {
            assert!(!path.exists());
            assert!(stdout.contains("[FAIL] baseline"), "{stdout}");
        }
    } else {
        assert_eq!(code, 2, "{stdout}");
        assert!(
            !path.exists(),
            "no baseline from a run that could not start"
        );
    }
}

#[test]
fn binary_choice_is_printed_for_imagegen() {
    for (cuda, binary) in [
        ("11.8", "gpu-selftest-cu11"),
        ("12.6", "gpu-selftest-cu12"),
        ("13.0", "gpu-selftest-cu13"),
    ] {
        let output = selftest(&["--binary-for-cuda", cuda]);
        assert_eq!(output.status.code(), Some(0));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            format!("{binary}\n")
        );
    }
    let output = selftest(&["--binary-for-cuda", "10.2"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("older than 11.8"));
}
