//! The three statements of one fixture image, snapshotted as users read them.

use serde_json::json;

use imagegen_python::{parse_lock, LockedPackage};

use super::dsse::{parse_envelope, Signer};
use super::provenance::{provenance, BuildContext};
use super::sbom::sbom;
use super::selftest::selftest_result;
use super::statement::{parse_statement, statement_bytes, Subject};
use super::{to_attest, PredicateKind};
use crate::history::manifest::ImageRecord;
use crate::model::digest::Digest;

/// Test keys only (tests/fixtures/attest/README.md says how they were made).
const TEST_KEY: &str = include_str!("../../tests/fixtures/attest/team.pem");

fn lock() -> Vec<LockedPackage> {
    parse_lock(LOCK).unwrap()
}

pub(crate) fn fixture_record() -> ImageRecord {
    serde_json::from_value(json!({
        "repository": "127.0.0.1:5000/team/pytorch",
        "tag": "2.12.1-cuda13.0-cudnn9-runtime-ubuntu22.04",
        "digest": Digest::of(b"image").to_string(),
        "fingerprint": Digest::of(b"fingerprint").to_string(),
        "build_key": Digest::of(b"context").to_string(),
        "variant": "runtime",
        "torch": "2.12.1", "torchvision": "0.27.1", "torchaudio": "2.11.0",
        "cuda": "13.0", "cuda_full": "13.0.2", "cudnn": "9.13.0.50",
        "python": "3.10", "os": "ubuntu22.04",
        "base_image": format!("docker.io/library/ubuntu:22.04@{}", Digest::of(b"base")),
        "driver_min": "580.65.06", "driver_min_compat": "580.65.06",
        "require_cuda": "cuda>=13.0",
        "selftest": {
            "status": "pass",
            "summary": "2 checks passed",
            "at": "2026-12-01T10:00:05Z",
            "baseline": Digest::of(b"baseline").to_string(),
            "report": {
                "tool": "gpu-selftest", "version": "0.3.0", "overall": "pass",
                "checks": [
                    {"name": "inventory", "status": "pass", "summary": "1 GPU(s): NVIDIA H200; driver 580.159.04 (CUDA 13.0)",
                     "rule": "pass when at least one GPU is visible; facts only", "duration_seconds": 0.4,
                     "gpus": [{"index": 0, "name": "NVIDIA H200"}], "driver_version": "580.159.04", "driver_cuda_version": "13.0"},
                    {"name": "matmul", "status": "pass", "summary": "612 TFLOP/s", "rule": ">= 80% of 756 TFLOP/s",
                     "duration_seconds": 2.1, "tflops": 612.0}
                ]
            }
        },
        "inputs": {
            "platform": "linux/amd64",
            "lock": Digest::of(b"lock").to_string(),
            "templates": Digest::of(b"templates").hex(),
            "selftest": "gpu-selftest-cu13",
            "ca_bundle": ""
        },
        "packages": {
            "pip": ["pip==25.3", "torch==2.12.1"],
            "os": ["libc6=2.35-0ubuntu3.11", "libgcc-s1:amd64=12.3.0-1ubuntu1~22.04", "tzdata=2025b-0ubuntu0.22.04.1"],
            "binaries": [{
                "path": "/usr/local/bin/gpu-selftest",
                "name": "gpu-selftest",
                "version": "0.1.0",
                "sha256": Digest::of(b"gpu-selftest binary").to_string(),
                "crates": ["gpu-selftest==0.1.0", "libloading==0.8.6", "serde==1.0.228", "serde_json==1.0.145"]
            }]
        },
        "built_at": "2026-12-01T10:00:00Z",
        "build_seconds": 600.0,
        "source_commit": "0123456789abcdef0123456789abcdef01234567",
        "status": "ok"
    }))
    .unwrap()
}

const LOCK: &str = "# imagegen-lock-inputs: sha256:00\n\
torch==2.12.1 \\\n    --hash=sha256:1111111111111111111111111111111111111111111111111111111111111111\n\
nvidia-nccl-cu13==2.29.7 \\\n    --hash=sha256:2222222222222222222222222222222222222222222222222222222222222222\n";

fn context() -> BuildContext {
    BuildContext {
        imagegen_version: "0.1.0".into(),
        source_repository: Some("https://git.example/team/images.git".into()),
        invocation_id: None,
        selftest_binaries: [(
            "gpu-selftest-cu13".to_string(),
            Digest::of(b"gpu-selftest binary"),
        )]
        .into(),
    }
}

#[test]
fn the_three_statements_of_an_image() {
    let record = fixture_record();
    let digest = record.digest.clone().unwrap();
    let subject = Subject {
        name: record.repository.clone(),
        digest: to_attest(&digest),
    };
    let statements = [
        (PredicateKind::Provenance, provenance(&record, &context())),
        (
            PredicateKind::Sbom,
            sbom(&record, &digest, &lock(), "0.1.0"),
        ),
        (
            PredicateKind::GpuSelftest,
            selftest_result(&record, Some("gpu-node-1")),
        ),
    ];
    for (kind, predicate) in statements {
        let bytes = statement_bytes(&subject, kind.uri(), predicate);
        let read = parse_statement(&bytes).unwrap();
        assert_eq!(read.subjects, vec![subject.clone()]);
        let pretty: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        insta::assert_json_snapshot!(format!("statement_{}", kind.name()), pretty);
    }
}

#[test]
fn a_failed_or_untested_image_is_never_attested_as_passing() {
    let mut record = fixture_record();
    record.selftest.as_mut().unwrap().status = crate::history::manifest::TestStatus::Fail;
    assert_eq!(selftest_result(&record, None)["result"], "fail");
    record.selftest = None;
    assert_eq!(selftest_result(&record, None)["result"], "not-run");
}

#[test]
fn signed_statements_open_to_the_same_bytes() {
    let record = fixture_record();
    let digest = record.digest.clone().unwrap();
    let subject = Subject {
        name: record.repository.clone(),
        digest: to_attest(&digest),
    };
    let bytes = statement_bytes(
        &subject,
        PredicateKind::Provenance.uri(),
        provenance(&record, &context()),
    );
    let signer = Signer::from_pem(TEST_KEY).unwrap();
    let envelope = signer.sign(&bytes);
    let read = parse_envelope(&super::dsse::envelope_bytes(&envelope)).unwrap();
    assert_eq!(signer.verifier().open(&read).unwrap(), bytes);
}

/// Signed after the build (`attest sign`, `imagegen test` re-signing a result), the run that
/// built the image is gone: the provenance still names gpu-selftest by the sha256 the package
/// record read from the binary in the image, and by nothing when the record has none.
#[test]
fn provenance_signed_after_the_build_names_gpu_selftest_by_its_recorded_sha256() {
    let gpu_selftest = |record: &ImageRecord| {
        let predicate = provenance(
            record,
            &BuildContext {
                selftest_binaries: Default::default(),
                ..context()
            },
        );
        let dependencies = predicate["buildDefinition"]["resolvedDependencies"]
            .as_array()
            .unwrap()
            .clone();
        dependencies
            .into_iter()
            .find(|dependency| dependency["name"] == "gpu-selftest")
            .expect("a gpu-selftest dependency")
    };
    let record = fixture_record();
    assert_eq!(
        gpu_selftest(&record)["digest"]["sha256"],
        Digest::of(b"gpu-selftest binary").hex()
    );
    let mut without = fixture_record();
    without.packages.as_mut().unwrap().binaries.clear();
    assert!(gpu_selftest(&without).get("digest").is_none());
}

/// An index over the fixture record as two platforms, `arm64`'s self-test as `arm64_status`.
fn index_of_two(
    arm64_status: Option<crate::history::manifest::TestStatus>,
) -> (
    crate::history::manifest::IndexRecord,
    Vec<super::index::PlatformPredicates>,
) {
    use super::index::PlatformPredicates;
    let amd64 = fixture_record();
    let mut arm64 = fixture_record();
    arm64.digest = Some(Digest::of(b"arm64 image"));
    match arm64_status {
        Some(status) => arm64.selftest.as_mut().unwrap().status = status,
        None => arm64.selftest = None,
    }
    let index: crate::history::manifest::IndexRecord = serde_json::from_value(json!({
        "repository": amd64.repository,
        "tag": "2.12.1-cuda13.0-cudnn9-runtime-ubuntu22.04",
        "digest": Digest::of(b"index").to_string(),
        "media_type": "application/vnd.oci.image.index.v1+json",
        "torch": "2.12.1",
        "driver_min": "580.65.06",
        "platforms": {
            "linux/amd64": {"tag": "2.12.1-cuda13.0-cudnn9-runtime-ubuntu22.04-amd64", "digest": amd64.digest},
            "linux/arm64": {"tag": "2.12.1-cuda13.0-cudnn9-runtime-ubuntu22.04-arm64", "digest": arm64.digest},
        },
        "published_at": "2026-12-01T11:00:00Z",
    }))
    .unwrap();
    let lock = lock();
    let platforms = [("linux/amd64", &amd64), ("linux/arm64", &arm64)]
        .into_iter()
        .map(|(platform, record)| {
            let digest = record.digest.clone().unwrap();
            PlatformPredicates {
                platform: platform.to_string(),
                sbom: sbom(record, &digest, &lock, "0.1.0"),
                selftest: selftest_result(record, None),
                digest,
            }
        })
        .collect();
    (index, platforms)
}

#[test]
fn an_index_passes_only_when_every_platform_passed() {
    use super::index::index_selftest;
    use crate::history::manifest::TestStatus;
    let cases = [
        (Some(TestStatus::Pass), "pass"),
        (Some(TestStatus::Fail), "fail"),
        (Some(TestStatus::Error), "error"),
        (Some(TestStatus::Skipped), "skipped"),
        (None, "not-run"),
    ];
    for (arm64, expected) in cases {
        let (_, platforms) = index_of_two(arm64);
        let predicate = index_selftest(&platforms);
        assert_eq!(predicate["result"], expected, "arm64 {arm64:?}");
        assert_eq!(predicate["platforms"].as_object().unwrap().len(), 2);
        // Its JSON Schema is checked by the independent verifier (jsonschema, draft 2020-12) in
        // tests/it/multiarch.rs, against the statements pushed to a real registry.
        if expected != "pass" {
            assert!(
                predicate["summary"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("linux/arm64: {expected}")),
                "{predicate:#}"
            );
        }
    }
}

#[test]
fn an_index_sbom_nests_each_platform_with_unique_references() {
    use super::index::{index_provenance, index_sbom};
    let (index, platforms) = index_of_two(Some(crate::history::manifest::TestStatus::Pass));
    let document = index_sbom(&index, &index.digest, &platforms, "0.1.0");
    let mut references = Vec::new();
    fn collect(components: &serde_json::Value, into: &mut Vec<String>) {
        for component in components.as_array().into_iter().flatten() {
            into.push(component["bom-ref"].as_str().unwrap().to_string());
            collect(&component["components"], into);
        }
    }
    collect(&document["components"], &mut references);
    let per_platform = platforms[0].sbom["components"].as_array().unwrap().len();
    assert!(per_platform > 5, "{per_platform}");
    assert!(
        references.len() > 2 * per_platform,
        "two containers and each platform's components: {}",
        references.len()
    );
    let unique: std::collections::BTreeSet<&String> = references.iter().collect();
    assert_eq!(
        unique.len(),
        references.len(),
        "bom-refs repeat: {references:?}"
    );
    assert_eq!(
        document["metadata"]["component"]["version"],
        index.digest.to_string()
    );
    let provenance = index_provenance(&index, "0.1.0");
    let dependencies = provenance["buildDefinition"]["resolvedDependencies"]
        .as_array()
        .unwrap();
    assert_eq!(dependencies.len(), 2);
    assert_eq!(
        dependencies[1]["digest"]["sha256"],
        Digest::of(b"arm64 image").hex()
    );
}

#[test]
fn vendored_python_distributions_are_components_with_their_place() {
    let mut record = fixture_record();
    let packages = record.packages.as_mut().unwrap();
    for (name, version, path) in [
        // Listed by pip at the same version: not repeated.
        ("pip", "25.3", "/opt/venv/lib/python3.10/site-packages/pip-25.3.dist-info"),
        (
            "wheel",
            "0.46.3",
            "/opt/venv/lib/python3.10/site-packages/setuptools/_vendor/wheel-0.46.3.dist-info",
        ),
        (
            "jaraco.context",
            "6.1.0",
            "/opt/venv/lib/python3.10/site-packages/setuptools/_vendor/jaraco.context-6.1.0.dist-info",
        ),
    ] {
        packages
            .python_metadata
            .push(crate::history::manifest::PythonDistribution {
                name: name.into(),
                version: version.into(),
                path: path.into(),
            });
    }
    let digest = record.digest.clone().unwrap();
    let document = sbom(&record, &digest, &lock(), "0.1.0");
    let components = document["components"].as_array().unwrap();
    let purls: Vec<&str> = components
        .iter()
        .filter_map(|c| c["purl"].as_str())
        .filter(|purl| purl.starts_with("pkg:pypi/"))
        .collect();
    assert_eq!(
        purls
            .iter()
            .filter(|purl| purl.starts_with("pkg:pypi/pip@"))
            .count(),
        1,
        "{purls:?}"
    );
    let vendored = components
        .iter()
        .find(|c| c["purl"] == "pkg:pypi/jaraco-context@6.1.0")
        .unwrap_or_else(|| panic!("{purls:?}"));
    assert_eq!(
        vendored["evidence"]["occurrences"][0]["location"],
        "/opt/venv/lib/python3.10/site-packages/setuptools/_vendor/jaraco.context-6.1.0.dist-info"
    );
    assert!(purls.contains(&"pkg:pypi/wheel@0.46.3"), "{purls:?}");
}
