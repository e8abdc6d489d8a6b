//! The binary as CI runs it: on a machine without the NVIDIA driver it must exit 2 with a
//! message naming the missing library and where it looked, in every output format, and never
//! panic. (On a machine with a driver the same runs must still end in 0, 1 or 2, not a panic.)

use std::process::{Command, Output};

fn selftest(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpu-selftest"))
        .args(arguments)
        .env_remove("IMAGEGEN_TORCH")
        .output()
        .expect("the gpu-selftest binary runs")
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

#[test]
fn table_run_without_a_driver_exits_2_naming_the_library_and_places() {
    let output = selftest(&["--checks", "bandwidth", "--no-framework"]);
    let code = output
        .status
        .code()
        .expect("exited, not killed by a signal");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if driver_present() {
        assert!([0, 1, 2].contains(&code), "exit {code}: {stdout}{stderr}");
        return;
    }
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stdout.contains("error: cannot load libcuda.so.1 (the NVIDIA driver library); looked in: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("/usr/local/cuda/lib64 (fixed folder)"),
        "{stdout}"
    );
    assert!(stdout.contains("the loader cache"), "{stdout}");
    assert!(stdout.contains("overall: ERROR"), "{stdout}");
}

#[test]
fn json_run_without_a_driver_is_a_versioned_error_report() {
    if driver_present() {
        return;
    }
    let output = selftest(&["--format", "json"]);
    assert_eq!(output.status.code(), Some(2));
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["tool"], "gpu-selftest");
    assert_eq!(report["overall"], "error");
    assert!(report["checks"].as_array().unwrap().is_empty());
    assert!(report["error"].as_str().unwrap().contains("libcuda.so.1"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("gpu-selftest: cannot run: "));
}

#[test]
fn prometheus_run_without_a_driver_reports_status_2() {
    if driver_present() {
        return;
    }
    let output = selftest(&["--format", "prometheus"]);
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("gpu_selftest_overall_status 2\n"), "{text}");
}

#[test]
fn report_goes_to_a_file_atomically() {
    if driver_present() {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("gpu.prom");
    let output = selftest(&["--format", "prometheus", "--output", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# HELP gpu_selftest_overall_status"));
    assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);
}

#[test]
fn bad_flags_exit_2_before_touching_a_gpu() {
    let output = selftest(&["--checks", "gpu"]);
    assert_eq!(output.status.code(), Some(2));
    if !driver_present() {
        // The driver is checked after the flags: the message names the bad check first.
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("unknown check `gpu`"), "{stdout}");
    }
    let output = selftest(&["--format", "yaml"]);
    assert_eq!(output.status.code(), Some(2));
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
