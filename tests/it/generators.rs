//! The generators as a user runs them, on `tests/fixtures/basic.yaml`: `ci --github`, `bake`,
//! `k8s` and `manifest merge`. Snapshots hold what users read (the CI matrix, the bake file, the
//! Kubernetes manifests), with fingerprints filtered so a template change does not churn them;
//! the Kubernetes YAML is also read back through the k8s-openapi types and the bake file through
//! the typed bake definition, both refusing fields their tool does not have.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use imagegen::generate::bake::BakeFile;
use imagegen::generate::github::check_strategy_matrix;
use imagegen::generate::k8s::{validate, Manifests};
use predicates::prelude::*;

fn imagegen() -> Command {
    Command::cargo_bin("imagegen").unwrap()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/basic.yaml")
}

fn stdout_of(arguments: &[&str]) -> String {
    let output = imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(arguments)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "imagegen {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn pretty(json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    serde_json::to_string_pretty(&value).unwrap()
}

macro_rules! snapshot_without_fingerprints {
    ($name:expr, $text:expr) => {
        insta::with_settings!({filters => vec![(r"sha256:[0-9a-f]{64}", "sha256:[fingerprint]")]}, {
            insta::assert_snapshot!($name, $text);
        });
    };
}

#[test]
fn ci_matrix_per_image_family_and_by_shards() {
    let per_image = stdout_of(&["ci", "--format", "github"]);
    assert_eq!(per_image.lines().count(), 1, "one line, for $GITHUB_OUTPUT");
    assert_eq!(check_strategy_matrix(per_image.trim_end()), Ok(()));
    insta::assert_snapshot!("ci_github_per_image", pretty(&per_image));
    assert_eq!(
        stdout_of(&["ci", "--github"]),
        per_image,
        "--github is kept"
    );
    assert_eq!(
        stdout_of(&["ci"]),
        per_image,
        "github is the default format"
    );
    let shards = stdout_of(&["ci", "--format", "github", "--shards", "3"]);
    insta::assert_snapshot!("ci_github_shards_3", pretty(&shards));
}

#[test]
fn ci_takes_a_known_format_and_one_way_to_fan_out() {
    imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["ci", "--format", "jenkins"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("invalid value 'jenkins' for '--format <FORMAT>'")
                .and(predicate::str::contains("github, gitlab")),
        );
    imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["ci", "--github", "--shards", "2", "--per-image"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
    imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["ci", "--github", "--shards", "0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("0 is not in 1..=256"));
}

#[test]
fn bake_file_for_the_fixture() {
    let bake = stdout_of(&["bake", "--out", "-", "--no-stage"]);
    snapshot_without_fingerprints!("bake_json", bake.clone());
    // Read back through the typed mirror of buildx's bake definition, which refuses any key
    // buildx does not have, and written again byte for byte.
    let read = BakeFile::from_json(&bake).unwrap();
    assert_eq!(read.to_json(), bake);
    assert_eq!(read.target.len(), 18);
    assert_eq!(read.group["default"].targets.len(), 18);
}

#[test]
fn bake_writes_under_dot_imagegen_and_stages_each_image_context() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(), dir.path().join("matrix.yaml")).unwrap();
    let in_dir = |arguments: &[&str]| {
        let mut command = imagegen();
        command.current_dir(dir.path()).args(arguments);
        command
    };
    let selftest = dir.path().join("selftest");
    std::fs::create_dir(&selftest).unwrap();
    let out = dir.path().join("docker-bake.json");
    // The fixture has CUDA 11.8 and 12.x images: the cu11 binary is missing at first.
    std::fs::write(selftest.join("gpu-selftest-cu12"), b"cu12 binary").unwrap();
    in_dir(&["render"]).assert().success();
    // Rendered but not locked: what BuildKit would build was never locked.
    in_dir(&[
        "bake",
        "--out",
        "docker-bake.json",
        "--selftest-dir",
        "selftest",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("requirements.lock is missing"));
    let uv = crate::support::uv::fake_uv(dir.path());
    in_dir(&["lock", "--no-bases", "--uv", uv.to_str().unwrap()])
        .env("FAKE_UV_LOG", dir.path().join("uv.log"))
        .assert()
        .success();
    in_dir(&[
        "bake",
        "--out",
        "docker-bake.json",
        "--selftest-dir",
        "selftest",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("gpu-selftest-cu11"))
    .stderr(predicate::str::contains("selftest/build.sh"));
    std::fs::write(selftest.join("gpu-selftest-cu11"), b"cu11 binary").unwrap();
    in_dir(&[
        "bake",
        "--out",
        "docker-bake.json",
        "--selftest-dir",
        "selftest",
    ])
    .assert()
    .success();
    for (image, contents) in [
        ("2.7.1-cuda11.8-cudnn9-runtime-ubuntu22.04", "cu11 binary"),
        ("2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04", "cu12 binary"),
    ] {
        let context = dir.path().join(".imagegen/bake").join(image);
        let staged = context.join("gpu-selftest");
        assert_eq!(std::fs::read_to_string(&staged).unwrap(), contents);
        for file in ["Dockerfile", "requirements.lock"] {
            assert_eq!(
                std::fs::read(context.join(file)).unwrap(),
                std::fs::read(dir.path().join("images").join(image).join(file)).unwrap(),
                "{image}/{file}"
            );
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&staged).unwrap().permissions().mode();
            assert_eq!(mode & 0o111, 0o111, "{} is executable", staged.display());
        }
    }
    let written = std::fs::read_to_string(&out).unwrap();
    let printed = in_dir(&["bake", "--out", "-", "--no-stage"])
        .output()
        .unwrap();
    assert!(
        written == String::from_utf8_lossy(&printed.stdout),
        "--out - prints what --out writes"
    );

    // Without --out the bake file goes under .imagegen/ (ignored by git), not the root, and the
    // contexts stay where buildx, run from here with -f, reads them.
    std::fs::remove_file(&out).unwrap();
    in_dir(&["bake", "--selftest-dir", "selftest"])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "wrote .imagegen/docker-bake.json (18 targets)",
        ));
    assert!(!out.exists(), "nothing in the repository root");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".imagegen/docker-bake.json")).unwrap(),
        written
    );
    assert!(dir
        .path()
        .join(".imagegen/bake/2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04/gpu-selftest")
        .exists());
}

/// A manifest path that does not exist: the Job then uses the tag without a digest.
const NO_MANIFEST: &str = "/nonexistent/imagegen-manifest.json";

#[test]
fn k8s_pins_the_digest_the_manifest_recorded_for_this_build() {
    let resolution: serde_json::Value =
        serde_json::from_str(&stdout_of(&["resolve", "--format", "json"])).unwrap();
    let image = resolution["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|image| {
            image["aliases"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "2.7-cuda12.6-runtime")
        })
        .unwrap();
    let tag = image["tag"].as_str().unwrap();
    let digest = format!("sha256:{}", "0f".repeat(32));
    let record = |fingerprint: &str| {
        serde_json::json!({"schema_version": 1, "images": {tag: {
            "repository": "registry.example.com/team/pytorch", "tag": tag, "digest": digest,
            "fingerprint": fingerprint, "build_key": "sha256:6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b", "variant": "runtime", "torch": "2.7.1",
            "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9",
            "python": "3.12", "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
            "built_at": "2026-11-30T10:00:00Z", "status": "ok"}}})
    };
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("imagegen-manifest.json");
    std::fs::write(
        &manifest,
        record(image["fingerprint"].as_str().unwrap()).to_string(),
    )
    .unwrap();
    let manifest_arg = manifest.to_str().unwrap();
    let yaml = stdout_of(&["k8s", "2.7-cuda12.6-runtime", "--manifest", manifest_arg]);
    assert!(
        yaml.contains(&format!(
            "image: registry.example.com/team/pytorch:{tag}@{digest}"
        )),
        "{yaml}"
    );
    // A record of another build of the tag (other fingerprint) pins nothing.
    std::fs::write(
        &manifest,
        record(&format!("sha256:{}", "0e".repeat(32))).to_string(),
    )
    .unwrap();
    let yaml = stdout_of(&["k8s", "2.7-cuda12.6-runtime", "--manifest", manifest_arg]);
    assert!(
        yaml.contains(&format!("image: registry.example.com/team/pytorch:{tag}\n")),
        "{yaml}"
    );
}

/// Reads the YAML back through the Kubernetes API types (k8s-openapi), refusing any field they
/// would drop, and checks it with the API-server rules.
fn read_back(yaml: &str) -> Manifests {
    let manifests = Manifests::from_yaml(yaml).unwrap();
    assert_eq!(validate(&manifests), Vec::<String>::new());
    assert_eq!(
        manifests.to_yaml(),
        yaml,
        "the Kubernetes types write back the same bytes"
    );
    manifests
}

#[test]
fn k8s_single_gpu_job_for_an_alias() {
    let yaml = stdout_of(&["k8s", "2.7-cuda12.6-runtime", "--manifest", NO_MANIFEST]);
    snapshot_without_fingerprints!("k8s_single_gpu", yaml.clone());
    assert!(read_back(&yaml).service.is_none());
}

#[test]
fn k8s_multi_node_training_job_for_a_full_tag() {
    let yaml = stdout_of(&[
        "k8s",
        "registry.example.com/team/pytorch:2.8.0-cuda12.8-cudnn9-devel-ubuntu24.04",
        "--gpus",
        "8",
        "--nodes",
        "4",
        "--namespace",
        "training",
        "--name",
        "finetune",
        "--manifest",
        NO_MANIFEST,
        "--command",
        "python",
        "train.py",
        "--epochs",
        "3",
    ]);
    snapshot_without_fingerprints!("k8s_multi_node", yaml.clone());
    assert!(read_back(&yaml).service.is_some());
}

#[test]
fn k8s_unknown_image_lists_close_matches() {
    imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["k8s", "2.7-cuda12.6-runtim"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "no image tagged \"2.7-cuda12.6-runtim\"",
        ))
        .stderr(predicate::str::contains(
            "closest tags and aliases: 2.7-cuda12.6-runtime",
        ));
    imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["k8s", "2.7-cuda12.6-runtime", "--nodes", "2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("needs --command"));
}

#[test]
fn manifest_merge_unions_shards() {
    let dir = tempfile::tempdir().unwrap();
    let record = |tag: &str, digest: &str, at: &str| {
        serde_json::json!({
            "repository": "r/p", "tag": tag, "digest": digest,
            "fingerprint": format!("sha256:{}", "0f".repeat(32)),
            "build_key": digest, "variant": "runtime", "torch": "2.7.1",
            "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9",
            "python": "3.12", "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
            "built_at": at, "status": "ok"
        })
    };
    let first = serde_json::json!({"schema_version": 1, "images": {"a": record("a", "sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", "2026-11-30T10:00:00Z")},
        "aliases": {"latest": {"tag": "a", "digest": "sha256:a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", "moved_at": "2026-11-30T10:00:00Z"}}});
    let second = serde_json::json!({"schema_version": 1, "images": {"b": record("b", "sha256:b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", "2026-11-30T11:00:00Z")},
        "aliases": {"latest": {"tag": "b", "digest": "sha256:b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", "moved_at": "2026-11-30T11:00:00Z"}}});
    std::fs::write(dir.path().join("1.json"), first.to_string()).unwrap();
    std::fs::write(dir.path().join("2.json"), second.to_string()).unwrap();
    let out = dir.path().join("merged.json");
    imagegen()
        .current_dir(dir.path())
        .args(["manifest", "merge", "1.json", "2.json", "--out"])
        .arg(&out)
        .assert()
        .success();
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(merged["images"].as_object().unwrap().len(), 2);
    assert_eq!(merged["aliases"]["latest"]["tag"], "b");
    assert_eq!(merged["aliases"]["latest"]["history"][0]["tag"], "a");
    assert_eq!(
        merged["images"]["b"]["aliases"],
        serde_json::json!(["latest"])
    );
    assert_eq!(merged["images"]["a"]["aliases"], serde_json::json!([]));
}

/// The workflow reads the fields `imagegen ci --github` writes: every `matrix.X` it uses is one
/// of them, the build job's matrix is the setup job's output, and each shard's artifact is what
/// the record job merges.
#[test]
fn the_images_workflow_uses_what_ci_github_emits() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".github/workflows/images.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let workflow: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let jobs = &workflow["jobs"];
    assert_eq!(
        jobs["build"]["strategy"]["matrix"].as_str(),
        Some("${{ fromJSON(needs.setup.outputs.matrix) }}")
    );
    let needs: Vec<&str> = jobs["build"]["needs"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|need| need.as_str().unwrap())
        .collect();
    assert_eq!(needs, ["setup", "tools"]);
    assert_eq!(
        jobs["tools"]["strategy"]["matrix"]["runner_arch"].as_str(),
        Some("${{ fromJSON(needs.setup.outputs.runner_archs) }}")
    );
    let build_steps = serde_yaml::to_string(&jobs["build"]["steps"]).unwrap();
    assert!(build_steps.contains("name: tools-${{ matrix.runner_arch }}"));
    assert!(
        build_steps.contains("IMAGEGEN_SIGNING_KEY: ${{ github.event_name != 'pull_request' && secrets.IMAGEGEN_SIGNING_KEY || '' }}"),
        "the build signs with the CI's secret key on pushes only"
    );
    let setup_steps = serde_yaml::to_string(&jobs["setup"]["steps"]).unwrap();
    assert!(setup_steps.contains("imagegen ci --github"));
    assert!(setup_steps.contains("imagegen plan --format markdown >> \"$GITHUB_STEP_SUMMARY\""));
    let record_steps = serde_yaml::to_string(&jobs["record"]["steps"]).unwrap();
    assert!(record_steps.contains("imagegen manifest merge"));
    assert!(record_steps.contains("pattern: manifest-shard-*"));

    let emitted = pretty(&stdout_of(&["ci", "--github", "--shards", "2"]));
    let emitted: serde_json::Value = serde_json::from_str(&emitted).unwrap();
    let fields = emitted["include"][0].as_object().unwrap();
    assert!(fields["artifact"]
        .as_str()
        .unwrap()
        .starts_with("manifest-shard-"));
    // The `matrix.X` fields a job uses, from its own text.
    let used_by = |job: &str| {
        let text = serde_yaml::to_string(&jobs[job]).unwrap();
        let mut used = Vec::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("{{ matrix.") {
            rest = &rest[at + "{{ matrix.".len()..];
            let field: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            used.push(field);
        }
        used
    };
    let used = used_by("build");
    assert!(used.contains(&"shard".to_string()));
    for field in used {
        assert!(
            fields.contains_key(&field),
            "the build job uses matrix.{field}, which `imagegen ci --github` does not emit"
        );
    }
    // The test jobs: self-hosted GPU runners of the model `imagegen ci --github --tests` names,
    // fed by the setup job, their results merged by the record job.
    assert_eq!(
        jobs["test"]["strategy"]["matrix"].as_str(),
        Some("${{ fromJSON(needs.setup.outputs.test_matrix) }}")
    );
    let test_steps = serde_yaml::to_string(&jobs["test"]["steps"]).unwrap();
    assert!(
        test_steps.contains("imagegen test --no-move"),
        "{test_steps}"
    );
    assert!(setup_steps.contains("imagegen ci --github --tests"));
    assert!(record_steps.contains("pattern: test-shard-*"));
    assert!(record_steps.contains("imagegen test settle"));
    let emitted: serde_json::Value =
        serde_json::from_str(&stdout_of(&["ci", "--github", "--tests"])).unwrap();
    let test_fields = emitted["include"][0].as_object().unwrap();
    assert!(test_fields["artifact"]
        .as_str()
        .unwrap()
        .starts_with("test-shard-"));
    let used = used_by("test");
    assert!(used.contains(&"runner_label".to_string()), "{used:?}");
    for field in used {
        assert!(
            test_fields.contains_key(&field),
            "the test job uses matrix.{field}, which `imagegen ci --github --tests` does not emit"
        );
    }
    // The build jobs need no GPU: they run on GitHub-hosted runners.
    let build_runner = serde_yaml::to_string(&jobs["build"]["runs-on"]).unwrap();
    assert!(build_runner.contains("ubuntu-24.04"), "{build_runner}");
    assert!(!build_runner.contains("self-hosted"), "{build_runner}");
}

#[test]
fn a_rolled_back_alias_is_held_pinned_by_k8s_and_released_on_request() {
    let resolution: serde_json::Value =
        serde_json::from_str(&stdout_of(&["resolve", "--format", "json"])).unwrap();
    let alias = "2.7-cuda12.6-runtime";
    let image = resolution["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|image| {
            image["aliases"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == alias)
        })
        .unwrap();
    let tag = image["tag"].as_str().unwrap();
    let (new, old) = (
        format!("sha256:{}", "0f".repeat(32)),
        format!("sha256:{}", "0e".repeat(32)),
    );
    let record = |digest: &str, at: &str| {
        serde_json::json!({
            "repository": "registry.example.com/team/pytorch", "tag": tag, "digest": digest,
            "fingerprint": image["fingerprint"], "build_key": format!("sha256:{}", "6b".repeat(32)),
            "variant": "runtime", "torch": "2.7.1", "torchvision": "0.22.1", "cuda": "12.6",
            "cuda_full": "12.6.3", "cudnn": "9", "python": "3.12", "os": "ubuntu24.04",
            "base_image": "b", "driver_min": "560.35.05", "driver_min_compat": "525.60.13",
            "require_cuda": "cuda>=12.6", "built_at": at, "status": "ok"})
    };
    let mut current = record(&new, "2026-11-30T11:00:00Z");
    current["history"] = serde_json::json!([record(&old, "2026-11-30T10:00:00Z")]);
    // As `rollback --previous` leaves it: the alias back at the old digest, held.
    let manifest = serde_json::json!({"schema_version": 1, "images": {tag: current},
        "aliases": {alias: {"tag": tag, "digest": old, "moved_at": "2026-11-30T12:00:00Z",
            "history": [{"tag": tag, "digest": new, "moved_at": "2026-11-30T11:00:00Z"}],
            "held": {"since": "2026-11-30T12:00:00Z", "from": new, "by": "pid 1 (imagegen rollback)"}}}});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("imagegen-manifest.json");
    std::fs::write(&path, manifest.to_string()).unwrap();
    let manifest_arg = path.to_str().unwrap();

    // k8s runs what the alias serves now: the digest rolled back to, not the newest build.
    let output = imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["k8s", alias, "--manifest", manifest_arg])
        .output()
        .unwrap();
    assert!(output.status.success());
    let yaml = String::from_utf8(output.stdout).unwrap();
    assert!(
        yaml.contains(&format!(
            "image: registry.example.com/team/pytorch:{tag}@{old}"
        )),
        "{yaml}"
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!("imagegen release {alias}")),
        "{stderr}"
    );

    // The plan shows it held, naming the command that releases it, and no move of it.
    let plan: serde_json::Value = serde_json::from_str(&stdout_of(&[
        "plan",
        "--format",
        "json",
        "--manifest",
        manifest_arg,
    ]))
    .unwrap();
    let holds: Vec<&serde_json::Value> = plan["alias_holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|hold| hold["alias"] == alias)
        .collect();
    assert_eq!(holds.len(), 1, "{plan:#}");
    assert!(holds[0]["reason"]
        .as_str()
        .unwrap()
        .contains("rolled back from sha256:0f0f0f0f0f0f"));
    assert!(!plan["alias_moves"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["alias"] == alias));
    let table = stdout_of(&["plan", "--manifest", manifest_arg]);
    assert!(
        table.contains("aliases held:") && table.contains(&format!("imagegen release {alias}")),
        "{table}"
    );

    // release: a typo releases nothing; the alias then moves with the next build.
    imagegen()
        .args(["release", alias, "latest-typo", "--manifest", manifest_arg])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "latest-typo is not in the manifest; nothing was released",
        ));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(written["aliases"][alias]["held"].is_object());
    imagegen()
        .args(["release", alias, "--manifest", manifest_arg])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!(
            "{alias}: released (held at sha256:0e0e0e0e0e0e"
        )));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        written["aliases"][alias].get("held").is_none(),
        "{written:#}"
    );
    assert_eq!(
        written["aliases"][alias]["digest"], old,
        "release moves nothing"
    );
    let plan: serde_json::Value = serde_json::from_str(&stdout_of(&[
        "plan",
        "--format",
        "json",
        "--manifest",
        manifest_arg,
    ]))
    .unwrap();
    assert!(
        plan["alias_moves"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["alias"] == alias),
        "{plan:#}"
    );
    imagegen()
        .args(["release", alias, "--manifest", manifest_arg])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("{alias} is not held")));
}

#[test]
fn plan_predicts_a_push_that_would_be_refused_and_names_the_fix() {
    let resolution: serde_json::Value =
        serde_json::from_str(&stdout_of(&["resolve", "--format", "json"])).unwrap();
    let image = &resolution["images"][0];
    let tag = image["tag"].as_str().unwrap();
    let digest = format!("sha256:{}", "0f".repeat(32));
    let record = |fingerprint: &str| {
        serde_json::json!({"schema_version": 1, "images": {tag: {
            "repository": "registry.example.com/team/pytorch", "tag": tag, "digest": digest,
            "fingerprint": fingerprint, "build_key": format!("sha256:{}", "6b".repeat(32)),
            "variant": image["variant"], "torch": image["torch"], "torchvision": "0.22.1",
            "cuda": image["cuda"], "cuda_full": "12.6.3", "cudnn": "9", "python": "3.12",
            "os": image["os"], "base_image": "b", "driver_min": "560.35.05",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
            "built_at": "2026-11-30T10:00:00Z", "status": "ok"}}})
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("imagegen-manifest.json");
    let manifest_arg = path.to_str().unwrap();
    // The same content as pushed: nothing refused.
    std::fs::write(
        &path,
        record(image["fingerprint"].as_str().unwrap()).to_string(),
    )
    .unwrap();
    let plan: serde_json::Value = serde_json::from_str(&stdout_of(&[
        "plan",
        "--format",
        "json",
        "--manifest",
        manifest_arg,
    ]))
    .unwrap();
    assert!(plan.get("refused_pushes").is_none(), "{plan:#}");
    // Other content under the pushed tag: the plan says the push would be refused, and the fix.
    std::fs::write(
        &path,
        record(&format!("sha256:{}", "0e".repeat(32))).to_string(),
    )
    .unwrap();
    let plan: serde_json::Value = serde_json::from_str(&stdout_of(&[
        "plan",
        "--format",
        "json",
        "--manifest",
        manifest_arg,
    ]))
    .unwrap();
    let refused = plan["refused_pushes"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{plan:#}");
    assert_eq!(refused[0]["tag"], tag);
    assert_eq!(refused[0]["digest"], digest);
    let fix = refused[0]["fix"].as_str().unwrap();
    assert!(
        fix.contains("tags.full") && fix.contains("-r{revision}"),
        "{fix}"
    );
    let table = stdout_of(&["plan", "--manifest", manifest_arg]);
    assert!(
        table.contains("pushes build --push would refuse"),
        "{table}"
    );
    assert!(
        table.contains(&format!("{tag} already serves sha256:0f0f0f0f0f0f")),
        "{table}"
    );
    let markdown = stdout_of(&["plan", "--format", "markdown", "--manifest", manifest_arg]);
    assert!(
        markdown.contains("Pushes `build --push` would refuse"),
        "{markdown}"
    );
}

/// `{revision}` and `{date}` in tags.full: new content under the rest of the tag gets today's
/// date (IMAGEGEN_TODAY) and the next revision, recorded content keeps its own, the folder in
/// images/ leaves them out, a devel image's FROM follows its runtime's revision, and `plan` shows
/// the new tag instead of a refused push.
#[test]
fn revision_and_date_come_from_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let matrix = std::fs::read_to_string(fixture())
        .unwrap()
        .replace(
            "tags:\n",
            "tags:\n  full: \"{torch}-cuda{cuda}-{variant}-{os}-{date}-r{revision}\"\n",
        )
        .replace("torch: [\"2.7\", \"2.8.0\"]", "torch: [\"2.8.0\"]")
        .replace("cuda: [\"11.8\", \"12.6\", \"12.8\"]", "cuda: [\"12.8\"]")
        .replace("os: [ubuntu22.04, ubuntu24.04]", "os: [ubuntu24.04]");
    std::fs::write(dir.path().join("matrix.yaml"), &matrix).unwrap();
    let run = |arguments: &[&str]| -> serde_json::Value {
        let output = imagegen()
            .current_dir(dir.path())
            .env("IMAGEGEN_TODAY", "2026-12-02")
            .args(arguments)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "imagegen {arguments:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let resolution = run(&["resolve", "--format", "json"]);
    let images = resolution["images"].as_array().unwrap();
    let runtime = images.iter().find(|i| i["variant"] == "runtime").unwrap();
    let devel = images.iter().find(|i| i["variant"] == "devel").unwrap();
    assert_eq!(
        devel["base_image"],
        format!(
            "registry.example.com/team/pytorch:{}",
            runtime["tag"].as_str().unwrap()
        )
    );
    assert_eq!(
        runtime["tag"], "2.8.0-cuda12.8-runtime-ubuntu24.04-20261202-r1",
        "no manifest: today and revision 1"
    );
    assert_eq!(runtime["name"], "2.8.0-cuda12.8-runtime-ubuntu24.04");
    let record = |tag: &str, fingerprint: &str| {
        serde_json::json!({
            "repository": "registry.example.com/team/pytorch", "tag": tag,
            "digest": format!("sha256:{}", "0f".repeat(32)),
            "fingerprint": fingerprint, "build_key": format!("sha256:{}", "6b".repeat(32)),
            "variant": "runtime", "torch": "2.8.0", "torchvision": "0.23.0",
            "cuda": "12.8", "cuda_full": "12.8.1", "cudnn": "9", "python": "3.12",
            "os": "ubuntu24.04", "base_image": "b", "driver_min": "570.124.06",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.8",
            "built_at": "2026-11-30T10:00:00Z", "status": "ok"})
    };
    let write_manifest = |records: &[(&str, &str)]| {
        let images: serde_json::Map<String, serde_json::Value> = records
            .iter()
            .map(|(tag, fingerprint)| (tag.to_string(), record(tag, fingerprint)))
            .collect();
        std::fs::write(
            dir.path().join("imagegen-manifest.json"),
            serde_json::json!({"schema_version": 1, "images": images}).to_string(),
        )
        .unwrap();
    };
    let fingerprint = runtime["fingerprint"].as_str().unwrap();
    let other = format!("sha256:{}", "0e".repeat(32));
    // Recorded with this content on another day: the recorded tag is kept.
    write_manifest(&[(
        "2.8.0-cuda12.8-runtime-ubuntu24.04-20261130-r1",
        fingerprint,
    )]);
    let kept = run(&["resolve", "--format", "json"]);
    let tag_of = |resolution: &serde_json::Value, variant: &str| {
        resolution["images"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["variant"] == variant)
            .unwrap()["tag"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        tag_of(&kept, "runtime"),
        "2.8.0-cuda12.8-runtime-ubuntu24.04-20261130-r1"
    );
    // Other content pushed under today's r1 and r2: the next revision, and no refused push.
    write_manifest(&[
        ("2.8.0-cuda12.8-runtime-ubuntu24.04-20261202-r1", &other),
        ("2.8.0-cuda12.8-runtime-ubuntu24.04-20261202-r2", &other),
        ("2.8.0-cuda12.8-runtime-ubuntu24.04-20261130-r7", &other),
    ]);
    let next = run(&["resolve", "--format", "json"]);
    let runtime_tag = tag_of(&next, "runtime");
    assert_eq!(
        runtime_tag,
        "2.8.0-cuda12.8-runtime-ubuntu24.04-20261202-r3"
    );
    let devel = next["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["variant"] == "devel")
        .unwrap();
    assert_eq!(
        devel["base_image"],
        format!("registry.example.com/team/pytorch:{runtime_tag}"),
        "the devel image builds on its runtime's new revision"
    );
    assert_eq!(
        devel["tag"], "2.8.0-cuda12.8-devel-ubuntu24.04-20261202-r1",
        "{devel:#}"
    );
    let plan = run(&["plan", "--format", "json"]);
    assert!(plan.get("refused_pushes").is_none(), "{plan:#}");
    assert!(
        plan["new_images"]
            .as_array()
            .unwrap()
            .iter()
            .any(|image| image["tag"] == runtime_tag.as_str()),
        "{plan:#}"
    );
    // A revision must be readable back from a tag.
    std::fs::write(
        dir.path().join("matrix.yaml"),
        matrix.replace("-r{revision}", "-{revision}{torch}"),
    )
    .unwrap();
    imagegen()
        .current_dir(dir.path())
        .args(["resolve"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "{revision} must be followed by the end of the tag or a character that is not a digit",
        ));
}

/// Validates `yaml` against GitLab's CI schema (vendored in tests/fixtures/gitlab-ci) with
/// `.ci/venv`'s python `jsonschema`; the validator's messages when it is not valid.
fn gitlab_schema_errors(yaml: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".ci/venv/bin/python");
    assert!(
        python.exists(),
        "the GitLab schema check needs .ci/venv: run .ci/install-deps.sh"
    );
    let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let document = dir.path().join("pipeline.json");
    std::fs::write(&document, value.to_string()).unwrap();
    let output = std::process::Command::new(python)
        .args([
            "-c",
            "import json, sys, jsonschema\nschema = json.load(open(sys.argv[1]))\ndocument = json.load(open(sys.argv[2]))\nvalidator = jsonschema.Draft7Validator(schema)\nfor error in validator.iter_errors(document):\n    print('/'.join(map(str, error.absolute_path)) + ': ' + error.message)\n",
        ])
        .arg(root.join("tests/fixtures/gitlab-ci/gitlab-ci.json"))
        .arg(&document)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn ci_gitlab_is_a_child_pipeline_gitlab_s_schema_accepts() {
    let yaml = stdout_of(&["ci", "--format", "gitlab", "--shards", "3"]);
    assert_eq!(gitlab_schema_errors(&yaml), "", "{yaml}");
    let pipeline: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let builds: Vec<&String> = pipeline
        .as_object()
        .unwrap()
        .keys()
        .filter(|key| key.starts_with("build "))
        .collect();
    assert_eq!(builds.len(), 3, "{yaml}");
    assert_eq!(
        pipeline["record"]["needs"].as_array().unwrap().len(),
        3,
        "{yaml}"
    );
    insta::assert_snapshot!("ci_gitlab_three_shards", yaml);
    // Per image family too; and the check can fail: a job without its script is refused.
    let per_image = stdout_of(&["ci", "--format", "gitlab"]);
    assert_eq!(gitlab_schema_errors(&per_image), "");
    let broken = yaml.replacen("  script:\n", "  scripts:\n", 1);
    assert!(
        gitlab_schema_errors(&broken).contains("scripts"),
        "the schema check sees a bad key"
    );
    // The test fan-out is GitHub's only: said once, with the way out.
    imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args(["ci", "--format", "gitlab", "--tests"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("imagegen test --no-move"));
}

#[test]
fn verify_asks_the_registry_given_instead_of_the_recorded_one() {
    let digest = format!("sha256:{}", "0f".repeat(32));
    let resolution: serde_json::Value =
        serde_json::from_str(&stdout_of(&["resolve", "--format", "json"])).unwrap();
    let tag = resolution["images"][0]["tag"].as_str().unwrap();
    let record = serde_json::json!({"schema_version": 1, "images": {tag: {
        "repository": "registry.example.com/team/pytorch", "tag": tag, "digest": digest,
        "fingerprint": digest, "build_key": digest, "variant": "runtime", "torch": "2.7.1",
        "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9",
        "python": "3.12", "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
        "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
        "built_at": "2026-11-30T10:00:00Z", "status": "ok"}}});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("imagegen-manifest.json");
    std::fs::write(&path, record.to_string()).unwrap();
    // A port nothing listens on: the error names the registry asked, never the recorded one.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let asked = format!("127.0.0.1:{port}");
    let output = imagegen()
        .arg("--matrix")
        .arg(fixture())
        .args([
            "verify",
            "--registry",
            &asked,
            "--registry-timeout",
            "5",
            "--manifest",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "note: asking {asked} for the images recorded under registry.example.com"
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&asked), "{stderr}");
}
