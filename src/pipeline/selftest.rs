//! Reading what ran inside an image: gpu-selftest's exit code and JSON report turned into a test
//! outcome (no GPU is a skip, not a failure), and the pip and OS package lists. Pure: text in,
//! values out.

use crate::history::manifest::Packages;
use crate::pipeline::results::TestOutcome;

/// Lists pip and OS packages; the marker separates the two lists.
pub const LIST_PACKAGES: &str = "if command -v pip >/dev/null 2>&1; then pip freeze --all 2>/dev/null; fi; echo '--- imagegen: os packages ---'; if command -v dpkg-query >/dev/null 2>&1; then dpkg-query -W -f='${Package}=${Version}\\n'; fi";

/// Splits the output of [`LIST_PACKAGES`] into sorted pip and OS package lists.
pub fn parse_packages(output: &str) -> Packages {
    let (pip, os) = output
        .split_once("--- imagegen: os packages ---")
        .unwrap_or((output, ""));
    let lines = |text: &str| {
        let mut lines: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        lines.sort();
        lines.dedup();
        lines
    };
    Packages {
        pip: lines(pip),
        os: lines(os),
    }
}

/// Checks that `text` is a gpu-selftest baseline (`gpu-selftest --save-baseline FILE`) before
/// it is handed to every self-test: JSON of kind `gpu-selftest-baseline`, schema version 1, with
/// figures. The self-test judges the figures; this only refuses a wrong file early.
pub fn check_baseline(text: &str) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| format!("it is not JSON: {error}"))?;
    if value["kind"] != "gpu-selftest-baseline" {
        return Err(format!(
            "its kind is {}, not \"gpu-selftest-baseline\" (write one with `gpu-selftest --save-baseline FILE` on a node known to be good)",
            value["kind"]
        ));
    }
    if value["schema_version"] != 1 {
        return Err(format!(
            "its schema version is {}; this imagegen passes version 1",
            value["schema_version"]
        ));
    }
    if value["figures"]
        .as_array()
        .is_none_or(|figures| figures.is_empty())
    {
        return Err("it holds no figures".into());
    }
    Ok(())
}

/// Reads gpu-selftest's exit code and JSON report. Without GPUs, an exit 2 ("cannot run: no
/// driver") means the binary ran in the image and found no GPU: the test is skipped, not failed.
pub fn interpret_selftest(exit_code: i64, stdout: &str, stderr: &str, gpus: bool) -> TestOutcome {
    let report: Option<serde_json::Value> = serde_json::from_str(stdout.trim()).ok();
    let checks_summary = |report: &Option<serde_json::Value>| -> String {
        let Some(checks) = report.as_ref().and_then(|r| r["checks"].as_array()) else {
            return String::new();
        };
        let failed: Vec<String> = checks
            .iter()
            .filter(|c| c["status"] == "fail")
            .map(|c| {
                format!(
                    "{}: {}",
                    c["name"].as_str().unwrap_or("?"),
                    c["summary"].as_str().unwrap_or("")
                )
            })
            .collect();
        if failed.is_empty() {
            format!(
                "{} checks passed",
                checks.iter().filter(|c| c["status"] == "pass").count()
            )
        } else {
            failed.join("; ")
        }
    };
    let error_text = || {
        report
            .as_ref()
            .and_then(|r| r["error"].as_str().map(String::from))
            .unwrap_or_else(|| {
                stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no output")
                    .trim()
                    .to_string()
            })
    };
    match exit_code {
        0 if report.as_ref().is_some_and(|r| r["overall"] == "pass") => TestOutcome::Pass {
            summary: checks_summary(&report),
            report,
        },
        0 => TestOutcome::Error {
            summary: "gpu-selftest exited 0 without a JSON report".into(),
            report,
        },
        1 => TestOutcome::Fail {
            summary: checks_summary(&report),
            report,
        },
        2 if !gpus => TestOutcome::Skipped {
            summary: format!(
                "no GPU on this host; gpu-selftest ran in the image and said: {}",
                error_text()
            ),
        },
        2 => TestOutcome::Error {
            summary: error_text(),
            report,
        },
        126 | 127 => TestOutcome::Error {
            summary: format!(
                "gpu-selftest could not be executed in the image (exit {exit_code}): {}",
                error_text()
            ),
            report,
        },
        other => TestOutcome::Error {
            summary: format!("gpu-selftest exited {other}: {}", error_text()),
            report,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_lists_are_split_and_sorted() {
        let packages = parse_packages("torch==2.7.1\nnumpy==2.1.0\n--- imagegen: os packages ---\nlibc6=2.39-0ubuntu8\ngcc=4:13.2.0-7ubuntu1\n");
        assert_eq!(packages.pip, vec!["numpy==2.1.0", "torch==2.7.1"]);
        assert_eq!(
            packages.os,
            vec!["gcc=4:13.2.0-7ubuntu1", "libc6=2.39-0ubuntu8"]
        );
        assert_eq!(
            parse_packages("--- imagegen: os packages ---\n"),
            Packages::default()
        );
    }

    #[test]
    fn selftest_results_are_interpreted() {
        let pass = r#"{"schema_version":1,"overall":"pass","checks":[{"name":"matmul","status":"pass","summary":"ok"},{"name":"shm","status":"warn","summary":"64 MiB"}]}"#;
        assert_eq!(interpret_selftest(0, pass, "", true).status(), "pass");
        assert_eq!(
            interpret_selftest(0, pass, "", true).summary(),
            "1 checks passed"
        );
        let fail = r#"{"schema_version":1,"overall":"fail","checks":[{"name":"matmul","status":"fail","summary":"bf16 error 0.3 > 0.02"}]}"#;
        let outcome = interpret_selftest(1, fail, "", true);
        assert_eq!(outcome.status(), "fail");
        assert_eq!(outcome.summary(), "matmul: bf16 error 0.3 > 0.02");
        let error = r#"{"schema_version":1,"overall":"error","error":"cannot load libcuda.so.1","checks":[]}"#;
        let skipped = interpret_selftest(2, error, "", false);
        assert_eq!(skipped.status(), "skipped");
        assert!(skipped.summary().contains("cannot load libcuda.so.1"));
        assert_eq!(
            interpret_selftest(2, error, "", true).status(),
            "error",
            "with GPUs, exit 2 is an error"
        );
        let missing = interpret_selftest(
            127,
            "",
            "exec: \"gpu-selftest\": executable file not found in $PATH",
            false,
        );
        assert_eq!(missing.status(), "error");
        assert!(missing.summary().contains("could not be executed"));
        assert_eq!(
            interpret_selftest(0, "not json", "", true).status(),
            "error"
        );
    }

    #[test]
    fn baselines_are_checked_before_they_are_passed_on() {
        let good = r#"{"schema_version":1,"kind":"gpu-selftest-baseline","gpus":["NVIDIA H200"],"figures":[{"check":"matmul","figure":"bf16","size":8192,"unit":"tflops","value":815.0,"per_gpu":[818.0,810.0]}]}"#;
        assert_eq!(check_baseline(good), Ok(()));
        assert!(check_baseline("not json").unwrap_err().contains("not JSON"));
        assert!(
            check_baseline(r#"{"schema_version":1,"overall":"pass","checks":[]}"#)
                .unwrap_err()
                .contains("--save-baseline")
        );
        assert!(
            check_baseline(&good.replace("\"schema_version\":1", "\"schema_version\":2"))
                .unwrap_err()
                .contains("schema version is 2")
        );
        assert!(check_baseline(
            r#"{"schema_version":1,"kind":"gpu-selftest-baseline","figures":[]}"#
        )
        .unwrap_err()
        .contains("no figures"));
    }
}
