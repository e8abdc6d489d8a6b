//! Multi-platform images: per-platform builds on the real daemon without emulation (`FROM
//! scratch` + `COPY`, built with `--platform`), pushed to the real registry on 127.0.0.1,
//! assembled into OCI image indexes by `imagegen publish`, and read back from the registry.

use crate::support::project::{assert_code, prepare, text, Project};
use crate::support::Registry;
use imagegen::docker::MEDIA_TYPE_OCI_INDEX;
use serde_json::Value;

const INDEX: &str = "2.13.0-cuda12.6-cudnn9-runtime-ubuntu24.04";

fn project(registry: &Registry) -> Project {
    let project = Project::from_fixture("multiarch", registry.host(), "#!/bin/sh\necho amd64\n");
    project.add_selftest("gpu-selftest-cu12-arm64", "#!/bin/sh\necho arm64\n");
    project.add_selftest("gpu-selftest-cu13", "#!/bin/sh\necho amd64 cu13\n");
    project.add_selftest("gpu-selftest-cu13-arm64", "#!/bin/sh\necho arm64 cu13\n");
    project
}

/// Marks every per-platform image's self-test as passed, as GPU runners of each platform would
/// have recorded it (this host can run neither a `FROM scratch` image nor an arm64 one).
fn record_passes(project: &Project) {
    let path = project.path().join("imagegen-manifest.json");
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for record in manifest["images"].as_object_mut().unwrap().values_mut() {
        record["selftest"] = serde_json::json!({"status": "pass", "summary": "passed on a runner of its platform", "at": "2026-11-30T00:00:00Z"});
    }
    std::fs::write(&path, serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn per_platform_builds_are_published_as_oci_indexes() {
    prepare().await;
    let registry = Registry::start();
    let project = project(&registry);
    let client = project.client(None);

    // amd64 only so far: publishing refuses and names the missing platform.
    assert_code(
        &project.build(&["--platform", "linux/amd64", "--push", "--no-test"]),
        0,
    );
    let output = project.imagegen(&["publish"]).output().unwrap();
    assert_code(&output, 1);
    assert!(
        text(&output).contains(&format!(
            "linux/arm64 is missing: {INDEX}-arm64 was never built"
        )),
        "{}",
        text(&output)
    );
    assert_eq!(
        client
            .manifest_digest(&project.repository, INDEX)
            .await
            .unwrap(),
        None,
        "nothing published"
    );

    // arm64 built on this amd64 daemon: no RUN step, so no emulation is needed.
    let output = project.build(&["--platform", "linux/arm64", "--push", "--no-test"]);
    assert_code(&output, 0);
    let labels = client
        .image_labels(&project.repository, &format!("{INDEX}-arm64"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(labels["imagegen.platform"], "linux/arm64");
    let engine = crate::support::engine().await;
    let local = engine
        .client()
        .inspect_image(&format!(
            "{}/{}:{INDEX}-arm64",
            project.registry, project.repository
        ))
        .await
        .unwrap();
    assert_eq!(local.architecture.as_deref(), Some("arm64"));

    // Untested platform images are refused unless allowed; then aliases still wait for a pass.
    let output = project.imagegen(&["publish"]).output().unwrap();
    assert_code(&output, 1);
    assert!(
        text(&output).contains("self-test skipped"),
        "{}",
        text(&output)
    );
    let output = project
        .imagegen(&["publish", "--allow-untested"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert!(
        text(&output).contains("not every platform passed"),
        "{}",
        text(&output)
    );
    assert_eq!(
        client
            .manifest_digest(&project.repository, "2.13-cuda12.6-runtime")
            .await
            .unwrap(),
        None,
        "no alias for an untested index"
    );

    // Read the index back: both platforms, the recorded digests, the right media types.
    let manifest = project.manifest();
    let stored = client
        .get_manifest(&project.repository, INDEX)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.media_type, MEDIA_TYPE_OCI_INDEX);
    assert_eq!(
        Some(stored.digest.as_str()),
        manifest["indexes"][INDEX]["digest"].as_str()
    );
    let index: Value = serde_json::from_slice(&stored.bytes).unwrap();
    assert_eq!(index["mediaType"], MEDIA_TYPE_OCI_INDEX);
    let entries = index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    for (entry, arch) in entries.iter().zip(["amd64", "arm64"]) {
        assert_eq!(entry["platform"]["architecture"], arch);
        assert_eq!(entry["platform"]["os"], "linux");
        let tag = format!("{INDEX}-{arch}");
        assert_eq!(
            entry["digest"], manifest["images"][&tag]["digest"],
            "{arch}: the index points at the recorded digest"
        );
        assert_eq!(
            entry["mediaType"],
            "application/vnd.docker.distribution.manifest.v2+json"
        );
        let child = client
            .get_manifest(&project.repository, entry["digest"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(entry["size"].as_u64().unwrap(), child.bytes.len() as u64);
    }
    assert_eq!(
        manifest["indexes"][INDEX]["platforms"]["linux/arm64"]["tag"],
        format!("{INDEX}-arm64")
    );

    // Publishing again with the same content gives the same digest.
    let before = stored.digest.clone();
    let output = project
        .imagegen(&["publish", "--allow-untested"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert!(text(&output).contains("unchanged"), "{}", text(&output));
    assert_eq!(
        client
            .manifest_digest(&project.repository, INDEX)
            .await
            .unwrap()
            .as_ref()
            .map(|digest| digest.as_str()),
        Some(before.as_str())
    );

    // Once every platform passed (recorded by runners of each platform), aliases move to the index.
    record_passes(&project);
    // Signed with the team's key: each index gets its three statements before its aliases move.
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attest");
    for (name, mode) in [("team.pem", 0o600), ("team.pub", 0o644)] {
        let path = project.path().join(name);
        std::fs::copy(fixtures.join(name), &path).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
    }
    let output = project
        .imagegen(&["publish", "--signing-key", "team.pem"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    let signed = text(&output);
    assert_eq!(
        signed.matches("signed index").count(),
        2,
        "both indexes are signed: {signed}"
    );
    indexes_carry_their_platforms_statements(&project, before.as_str());
    let alias_digest = client
        .manifest_digest(&project.repository, "2.13-cuda12.6-runtime")
        .await
        .unwrap();
    assert_eq!(
        alias_digest.as_ref().map(|digest| digest.as_str()),
        Some(before.as_str()),
        "{}",
        text(&output)
    );
    let manifest = project.manifest();
    assert_eq!(manifest["aliases"]["2.13-cuda12.6-runtime"]["tag"], INDEX);
    assert_eq!(
        manifest["indexes"][INDEX]["aliases"],
        serde_json::json!(["2.13-cuda12.6-runtime", "2.13-cuda12.6-runtime-ubuntu24.04"])
    );
    assert!(
        manifest["aliases"]["latest"]["tag"] == "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04",
        "latest is the 13.0 index (torch 2.13's default CUDA)"
    );

    // plan and rollback work on indexes too.
    let plan = project
        .imagegen(&["plan", "--format", "json"])
        .output()
        .unwrap();
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert!(plan["alias_moves"].as_array().unwrap().is_empty(), "{plan}");
}

/// The index's statements verify with the team's key and are made from its platform images':
/// `pass` because both passed, each platform's SBOM nested; `verify --attestations` and the
/// independent verifier hold every image and index whole once the platform images are signed.
fn indexes_carry_their_platforms_statements(project: &Project, index_digest: &str) {
    let shown = project
        .imagegen(&["attest", "show", INDEX, "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&shown, 0);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["digest"], index_digest, "{shown:#}");
    let selftest = &shown["verified"]["gpu-selftest"];
    assert_eq!(selftest["result"], "pass", "{selftest:#}");
    let platforms = selftest["platforms"].as_object().unwrap();
    assert_eq!(
        platforms.keys().collect::<Vec<_>>(),
        ["linux/amd64", "linux/arm64"]
    );
    let manifest = project.manifest();
    for (platform, entry) in platforms {
        let arch = platform.rsplit('/').next().unwrap();
        assert_eq!(
            entry["digest"],
            manifest["images"][format!("{INDEX}-{arch}")]["digest"]
        );
        assert_eq!(entry["predicate"]["result"], "pass");
    }
    let containers = shown["verified"]["sbom"]["components"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "one container per platform");
    assert!(containers.iter().all(|c| c["type"] == "container"));
    let dependencies = shown["verified"]["provenance"]["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .unwrap();
    assert_eq!(dependencies.len(), 2, "{dependencies:#?}");

    // The platform images were pushed unsigned: verify names them, then `attest sign` signs them.
    let verify = project
        .imagegen(&["verify", "--attestations", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&verify, 1);
    assert!(
        text(&verify).contains(&format!("{INDEX}-arm64: no attestations")),
        "{}",
        text(&verify)
    );
    let images = manifest["images"].as_object().unwrap().len();
    let signed = project
        .imagegen(&["attest", "sign", "--signing-key", "team.pem"])
        .output()
        .unwrap();
    assert_code(&signed, 0);
    assert!(
        text(&signed).contains(&format!("signed {} image(s)", images + 2)),
        "{}",
        text(&signed)
    );
    let verify = project
        .imagegen(&["verify", "--attestations", "--key", "team.pub"])
        .output()
        .unwrap();
    assert_code(&verify, 0);
    assert!(
        text(&verify).contains(&format!("{} image(s) checked", images + 2)),
        "{}",
        text(&verify)
    );
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin/python");
    let independent = std::process::Command::new(python)
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/verify-attestations.py"))
        .arg("--manifest")
        .arg(project.path().join("imagegen-manifest.json"))
        .arg("--key")
        .arg(project.path().join("team.pub"))
        .arg("--schema")
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("crates/imagegen-attest/src/gpu-selftest-result.v1.schema.json"),
        )
        .output()
        .unwrap();
    assert_code(&independent, 0);
    assert_eq!(
        text(&independent).matches("ok ").count(),
        images + 2,
        "{}",
        text(&independent)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_single_platform_matrix_has_nothing_to_publish() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), crate::support::project::SELFTEST_PASS);
    let output = project.imagegen(&["publish"]).output().unwrap();
    assert_code(&output, 0);
    assert!(text(&output).contains("no indexes to assemble"));
}
