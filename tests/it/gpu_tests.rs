//! Testing pushed images on GPU nodes (`imagegen test`, `test import`, `test settle`) against the
//! real daemon and a real registry: build and push with no GPU (aliases wait on the policy), then
//! test the pushed digests from other checkouts of the project that share only the manifest and
//! the registry, with a stand-in self-test that plays the node's GPU; results recorded per node,
//! shards merged, aliases moved once the policy holds and not before; a tag that serves another
//! digest refused; a report for an unknown digest refused. The fixture images are busybox-based.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

use crate::support::project::{assert_code, prepare, text, Project};
use crate::support::Registry;

/// A stand-in gpu-selftest that plays the GPU of the node imagegen names: a node called
/// `*h100*` has an H100, `*broken*` an H200 that fails its matmul, `*h200*` an H200; any other
/// (a build host, where imagegen names no node) has no GPU and cannot run (exit 2). The report
/// carries the digest and node it was handed, as the real one does.
const SELFTEST_PLAYS_THE_NODE: &str = r#"#!/bin/sh
overall=pass
code=0
case "$GPU_SELFTEST_NODE_NAME" in
  *broken*) gpu="NVIDIA H200"; overall=fail; code=1 ;;
  *h100*) gpu="NVIDIA H100 80GB HBM3" ;;
  *h200*) gpu="NVIDIA H200" ;;
  *)
    echo '{"schema_version":1,"tool":"gpu-selftest","overall":"error","error":"cannot load libcuda.so.1: no NVIDIA driver in this container","checks":[]}'
    exit 2 ;;
esac
echo "{\"schema_version\":1,\"tool\":\"gpu-selftest\",\"overall\":\"$overall\",\"node_name\":\"$GPU_SELFTEST_NODE_NAME\",\"image_digest\":\"$GPU_SELFTEST_IMAGE_DIGEST\",\"checks\":[{\"name\":\"inventory\",\"status\":\"pass\",\"summary\":\"1 GPU\",\"gpus\":[{\"index\":0,\"name\":\"$gpu\"}],\"driver_version\":\"580.159.04\"},{\"name\":\"matmul\",\"status\":\"$overall\",\"summary\":\"bf16 797 TFLOP/s\",\"results\":[{\"gpu\":0,\"precision\":\"bf16\",\"size\":8192,\"back_to_back_tflops\":797.2}]}]}"
exit $code
"#;

/// A checkout of the project elsewhere: the same matrix, templates and rendered images, and a
/// copy of the manifest; nothing else in common with the first (no daemon state is shared by
/// imagegen between them, only what the registry serves).
struct Checkout {
    dir: tempfile::TempDir,
}

impl Checkout {
    fn clone_of(project: &Project) -> Checkout {
        let dir = tempfile::tempdir().unwrap();
        for name in ["matrix.yaml", "imagegen-manifest.json"] {
            std::fs::copy(project.path().join(name), dir.path().join(name)).unwrap();
        }
        for folder in ["templates", "images", "docker-config"] {
            copy_tree(&project.path().join(folder), &dir.path().join(folder));
        }
        Checkout { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn imagegen(&self, args: &[&str]) -> Output {
        Command::cargo_bin("imagegen")
            .unwrap()
            .current_dir(self.path())
            .env("DOCKER_CONFIG", self.path().join("docker-config"))
            .env("CI", "true")
            .args(args)
            .output()
            .unwrap()
    }

    fn manifest_path(&self) -> PathBuf {
        self.path().join("imagegen-manifest.json")
    }

    fn manifest(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.manifest_path()).unwrap()).unwrap()
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The nodes of a digest's recorded results, sorted.
fn nodes(manifest: &Value, tag: &str) -> Vec<String> {
    manifest["images"][tag]["test_results"]
        .as_array()
        .map(|results| {
            results
                .iter()
                .map(|r| r["node"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn awaiting(manifest: &Value, tag: &str) -> Vec<String> {
    manifest["images"][tag]["awaiting_aliases"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn images_built_without_gpus_are_tested_elsewhere_and_aliases_move_once_the_policy_holds() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PLAYS_THE_NODE);
    project.edit_matrix("tags:\n", "tests:\n  require: [H100, H200]\ntags:\n");
    let runtime_tag = project.tag("2.8.0", "runtime");
    let devel_tag = project.tag("2.8.0", "devel");
    let client = project.client(None);

    // 1. Build and push on a machine with no GPU: full tags pushed, aliases wait on the policy.
    let output = project.build(&["--push", "--only", "2.8.0"]);
    assert_code(&output, 0);
    assert!(
        text(&output).contains("waits for passing self-test results on H100, H200"),
        "{}",
        text(&output)
    );
    let built = project.manifest();
    let digest = built["images"][&runtime_tag]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let waiting = awaiting(&built, &runtime_tag);
    assert!(!waiting.is_empty(), "{built:#}");
    assert!(!awaiting(&built, &devel_tag).is_empty(), "{built:#}");
    assert!(built["aliases"].as_object().unwrap().is_empty());
    for alias in &waiting {
        assert_eq!(
            client
                .manifest_digest(&project.repository, alias)
                .await
                .unwrap(),
            None,
            "{alias} moved before any test"
        );
    }
    // `plan` and `verify` say which images wait for which results.
    let plan = project.imagegen(&["plan"]).output().unwrap();
    assert_code(&plan, 0);
    let plan_text = text(&plan);
    assert!(
        plan_text.contains("aliases waiting for passing self-test results")
            && plan_text
                .lines()
                .any(|l| l.contains(&runtime_tag) && l.contains("H100, H200")),
        "{plan_text}"
    );
    // The waiting aliases are not moves of a build: a plan on this machine has none to show
    // for the built images (issue 49: it announced them on every run).
    let moves = plan_text
        .split("aliases that would move")
        .nth(1)
        .map(|rest| rest.split("\n\n").next().unwrap_or_default())
        .unwrap_or_default();
    assert!(!moves.contains(&runtime_tag), "{plan_text}");
    // `imagegen test` on a node without GPUs tests nothing: exit 2, nothing recorded, and it
    // says so instead of "recorded in".
    let before = std::fs::read(project.path().join("imagegen-manifest.json")).unwrap();
    let output = project
        .imagegen(&["test", "--node", "cpu-only-1", "--only", &runtime_tag])
        .output()
        .unwrap();
    assert_code(&output, 2);
    let said = text(&output);
    assert!(
        said.contains("nothing recorded in")
            && !said.contains("result recorded in")
            && !said.contains("results recorded in")
            && said.contains("no image could be tested on this node: gpu-selftest skipped all 1"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(project.path().join("imagegen-manifest.json")).unwrap(),
        before
    );
    let verify = project
        .imagegen(&["verify", "--format", "json"])
        .output()
        .unwrap();
    assert_code(&verify, 0);
    let verified: Value = serde_json::from_slice(&verify.stdout).unwrap();
    let listed = verified["waiting_for_tests"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{verified:#}");
    assert_eq!(listed[0]["missing"], serde_json::json!(["H100", "H200"]));

    // 2. Two GPU nodes test the pushed digests in their own checkouts (test shards).
    let h200 = Checkout::clone_of(&project);
    let output = h200.imagegen(&["test", "--node", "gpu-h200-1", "--format", "json"]);
    assert_code(&output, 0);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{report:#}");
    for result in results {
        assert_eq!(result["verdict"], "pass", "{report:#}");
        assert_eq!(result["gpus"], serde_json::json!(["NVIDIA H200"]));
        assert!(result["aliases_moved"].as_array().unwrap().is_empty());
        assert_eq!(result["missing"], serde_json::json!(["H100"]));
    }
    let h200_manifest = h200.manifest();
    assert_eq!(nodes(&h200_manifest, &runtime_tag), vec!["gpu-h200-1"]);
    let recorded = &h200_manifest["images"][&runtime_tag]["test_results"][0];
    assert_eq!(recorded["driver"], "580.159.04");
    assert_eq!(recorded["figures"]["matmul_bf16_tflops"], 797.2);
    // A failing re-test on another node is recorded beside it; the same node's re-test replaces
    // its own result.
    let output = h200.imagegen(&["test", "--node", "broken-h200", "--only", &runtime_tag]);
    assert_code(&output, 1);
    let output = h200.imagegen(&["test", "--node", "gpu-h200-1", "--only", &runtime_tag]);
    assert_code(&output, 0);
    assert_eq!(
        nodes(&h200.manifest(), &runtime_tag),
        vec!["broken-h200", "gpu-h200-1"]
    );
    for alias in &waiting {
        assert_eq!(
            client
                .manifest_digest(&project.repository, alias)
                .await
                .unwrap(),
            None,
            "{alias} moved with only an H200 result"
        );
    }

    // --no-move records only, even where the policy holds on this shard's own view.
    let h100 = Checkout::clone_of(&project);
    let output = h100.imagegen(&["test", "--node", "gpu-h100-7", "--no-move"]);
    assert_code(&output, 0);
    assert_eq!(nodes(&h100.manifest(), &runtime_tag), vec!["gpu-h100-7"]);

    // 3. The record job: merge the shards, then settle: the policy holds, the aliases move.
    let merged = project.path().join("imagegen-manifest.json");
    let output = project
        .imagegen(&[
            "manifest",
            "merge",
            h200.manifest_path().to_str().unwrap(),
            h100.manifest_path().to_str().unwrap(),
            "--out",
            merged.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_code(&output, 0);
    let manifest = project.manifest();
    assert_eq!(
        nodes(&manifest, &runtime_tag),
        vec!["broken-h200", "gpu-h100-7", "gpu-h200-1"]
    );
    assert_eq!(awaiting(&manifest, &runtime_tag), waiting);
    let output = project.imagegen(&["test", "settle"]).output().unwrap();
    assert_code(&output, 0);
    let manifest = project.manifest();
    assert!(awaiting(&manifest, &runtime_tag).is_empty(), "{manifest:#}");
    assert!(awaiting(&manifest, &devel_tag).is_empty(), "{manifest:#}");
    for alias in &waiting {
        assert_eq!(
            client
                .manifest_digest(&project.repository, alias)
                .await
                .unwrap()
                .as_ref()
                .map(|digest| digest.as_str()),
            Some(digest.as_str()),
            "{alias} after the policy held"
        );
        assert_eq!(manifest["aliases"][alias]["digest"], digest.as_str());
    }
    assert!(manifest["pending_aliases"].is_null(), "{manifest:#}");

    // 4. A full tag that now serves another digest is refused: nothing is run or recorded.
    let devel_digest = manifest["images"][&devel_tag]["digest"].as_str().unwrap();
    let devel_manifest = client
        .get_manifest(&project.repository, devel_digest)
        .await
        .unwrap()
        .unwrap();
    client
        .put_manifest(
            &project.repository,
            &runtime_tag,
            &devel_manifest.media_type,
            devel_manifest.bytes,
        )
        .await
        .unwrap();
    let output = project
        .imagegen(&["test", "--node", "gpu-h200-2", "--only", &runtime_tag])
        .output()
        .unwrap();
    assert_code(&output, 2);
    assert!(
        text(&output).contains(&format!(
            "now serves {devel_digest}, not the recorded {digest}"
        )),
        "{}",
        text(&output)
    );
    assert!(!nodes(&project.manifest(), &runtime_tag).contains(&"gpu-h200-2".to_string()));

    // 5. test import: a report for a digest the manifest does not record is refused, and a
    // batch with one such report records none of it.
    let good = project.path().join("good.json");
    let mut report: Value = serde_json::from_str(SAMPLE_REPORT).unwrap();
    report["image_digest"] = devel_digest.into();
    report["node_name"] = "k8s-h200-a".into();
    std::fs::write(&good, report.to_string()).unwrap();
    let unknown = project.path().join("unknown.json");
    report["image_digest"] =
        "sha256:0000000000000000000000000000000000000000000000000000000000000000".into();
    std::fs::write(&unknown, report.to_string()).unwrap();
    let before = std::fs::read_to_string(&merged).unwrap();
    let output = project
        .imagegen(&[
            "test",
            "import",
            good.to_str().unwrap(),
            unknown.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_code(&output, 2);
    assert!(
        text(&output)
            .contains("is not recorded in imagegen-manifest.json; refused, nothing was imported"),
        "{}",
        text(&output)
    );
    assert_eq!(std::fs::read_to_string(&merged).unwrap(), before);
    let output = project
        .imagegen(&["test", "import", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert!(nodes(&project.manifest(), &devel_tag).contains(&"k8s-h200-a".to_string()));

    // 6. A report's verdict is recomputed from its checks: an `overall` of pass over a failed
    // matmul check is refused, and so is a batch with a pass and a fail for one node; nothing of
    // either batch is recorded.
    let mut lying: Value = serde_json::from_str(SAMPLE_REPORT).unwrap();
    lying["image_digest"] = devel_digest.into();
    lying["node_name"] = "k8s-h200-b".into();
    lying["checks"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "matmul", "status": "fail", "summary": "bf16 310 < 594 TFLOP/s"}));
    let lying_path = project.path().join("lying.json");
    std::fs::write(&lying_path, lying.to_string()).unwrap();
    let mut honest_fail = lying.clone();
    honest_fail["overall"] = "fail".into();
    let fail_path = project.path().join("fail.json");
    std::fs::write(&fail_path, honest_fail.to_string()).unwrap();
    let mut pass = honest_fail.clone();
    pass["overall"] = "pass".into();
    pass["checks"].as_array_mut().unwrap().pop();
    let pass_path = project.path().join("pass.json");
    std::fs::write(&pass_path, pass.to_string()).unwrap();
    let before = std::fs::read_to_string(&merged).unwrap();
    for (batch, wanted) in [
        (
            vec![&lying_path],
            "its `overall` says pass, but its checks say fail (failed: matmul)",
        ),
        (
            vec![&pass_path, &fail_path],
            "are both reports of node k8s-h200-b",
        ),
    ] {
        let mut args = vec!["test", "import"];
        args.extend(batch.iter().map(|path| path.to_str().unwrap()));
        let output = project.imagegen(&args).output().unwrap();
        assert_code(&output, 2);
        assert!(
            text(&output).contains(wanted) && text(&output).contains("nothing was imported"),
            "{}",
            text(&output)
        );
        assert_eq!(std::fs::read_to_string(&merged).unwrap(), before);
        assert!(!nodes(&project.manifest(), &devel_tag).contains(&"k8s-h200-b".to_string()));
    }
}

/// A report as gpu-selftest writes it, trimmed to what `test import` reads.
const SAMPLE_REPORT: &str = r#"{"schema_version":1,"tool":"gpu-selftest","version":"0.1.0","cuda_build_major":"13","overall":"pass","duration_seconds":8.6,"checks":[{"name":"inventory","status":"pass","summary":"1 GPU(s): NVIDIA H200","gpus":[{"index":0,"name":"NVIDIA H200"}],"driver_version":"580.159.04"}]}"#;

/// The fixture key `name` copied into the project with `mode`.
fn fixture_key(project: &Project, name: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let path = project.path().join(name);
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/attest")
            .join(name),
        &path,
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The `nodeResults` of the gpu-selftest statement `attest show` verified, by node.
fn attested_nodes(shown: &Value) -> Vec<(String, String)> {
    let predicate = &shown["verified"]["gpu-selftest"];
    predicate["nodeResults"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodeResults: {shown:#}"))
        .iter()
        .map(|r| {
            (
                r["node"].as_str().unwrap().to_string(),
                r["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_test_result_is_signed_onto_the_digest_with_its_own_verdict() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PLAYS_THE_NODE);
    project.edit_matrix("tags:\n", "tests:\n  require: [H200]\ntags:\n");
    fixture_key(&project, "team.pem", 0o600);
    fixture_key(&project, "team.pub", 0o644);
    let runtime_tag = project.tag("2.8.0", "runtime");
    let output = project.build(&[
        "--push",
        "--only",
        &runtime_tag,
        "--signing-key",
        "team.pem",
    ]);
    assert_code(&output, 0);
    let show = |project: &Project| {
        let output = project
            .imagegen(&["attest", "show", &runtime_tag, "--key", "team.pub"])
            .output()
            .unwrap();
        assert_code(&output, 0);
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    // Signed at build, where no GPU ran: no node's result is attested.
    assert!(attested_nodes(&show(&project)).is_empty());
    let signed_at_build = project.manifest()["attestations"].clone();

    // A failing node's result is attached as failed.
    let output = project
        .imagegen(&[
            "test",
            "--node",
            "broken-h200",
            "--only",
            &runtime_tag,
            "--signing-key",
            "team.pem",
        ])
        .output()
        .unwrap();
    assert_code(&output, 1);
    assert!(
        text(&output).contains("signed, attestations"),
        "{}",
        text(&output)
    );
    assert_eq!(
        attested_nodes(&show(&project)),
        vec![("broken-h200".to_string(), "fail".to_string())]
    );

    // A passing node (the key's PEM text in IMAGEGEN_SIGNING_KEY): both results, each its own.
    let pem = std::fs::read_to_string(project.path().join("team.pem")).unwrap();
    let output = project
        .imagegen(&["test", "--node", "gpu-h200-1", "--only", &runtime_tag])
        .env("IMAGEGEN_SIGNING_KEY", &pem)
        .output()
        .unwrap();
    assert_code(&output, 0);
    let shown = show(&project);
    assert_eq!(
        attested_nodes(&shown),
        vec![
            ("broken-h200".to_string(), "fail".to_string()),
            ("gpu-h200-1".to_string(), "pass".to_string()),
        ]
    );
    let passing = &shown["verified"]["gpu-selftest"]["nodeResults"][1];
    assert_eq!(passing["gpus"], serde_json::json!(["NVIDIA H200"]));
    assert_eq!(passing["figures"]["matmul_bf16_tflops"], 797.2);
    let verify = project
        .imagegen(&["verify", "--attestations", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&verify, 0);
    // The manifest records the new attestation of the digest, not the one made at build.
    let manifest = project.manifest();
    let digest = manifest["images"][&runtime_tag]["digest"].as_str().unwrap();
    assert_ne!(
        manifest["attestations"][digest]["attestations"]["digest"],
        signed_at_build[digest]["attestations"]["digest"]
    );
    assert_eq!(manifest["attestations"].as_object().unwrap().len(), 1);
}
