//! OCI image indexes: with several platforms, each image is built per platform and pushed under
//! an `-amd64`/`-arm64` tag, and `imagegen publish` assembles, for every full tag, an index
//! (`application/vnd.oci.image.index.v1+json`) over the per-platform digests the manifest
//! recorded. This module decides readiness (every platform built, pushed, current and tested)
//! and writes the index document, deterministically. Pure; the registry calls are the command's.

use serde::Serialize;

pub(crate) use crate::docker::MEDIA_TYPE_OCI_INDEX;
use crate::history::manifest::{Manifest, RecordStatus, TestStatus};
use crate::history::test_results::{judge, results_of};
use crate::model::digest::Digest;
use crate::resolve::image::ImageSpec;

/// One platform image ready to go into an index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReadyPlatform {
    pub(crate) platform: String,
    pub(crate) tag: String,
    pub(crate) digest: Digest,
    /// Whether its self-test passed (rather than being skipped and allowed).
    pub(crate) passed: bool,
}

/// Checks that every platform of one index is built, pushed, current and tested. Returns the
/// platform images, or every problem found. A platform counts as tested when its recorded
/// results (the build-time run and every `imagegen test` / `test import` result under its
/// digest) satisfy the test policy `require` (empty: any one passing result), so an image built
/// on a runner without GPUs and tested on a GPU node needs no `--allow-untested`.
pub(crate) fn index_readiness(
    platform_images: &[&ImageSpec],
    manifest: &Manifest,
    require: &[String],
    allow_untested: bool,
) -> Result<Vec<ReadyPlatform>, Vec<String>> {
    let mut ready = Vec::new();
    let mut problems = Vec::new();
    for spec in platform_images {
        let platform = &spec.platform;
        let Some(record) = manifest.images().get(&spec.tag) else {
            problems.push(format!("{platform} is missing: {} was never built (run `imagegen build --platform {platform} --push` on a {platform} runner)", spec.tag));
            continue;
        };
        let Some(digest) = record
            .digest
            .clone()
            .filter(|_| record.status == RecordStatus::Ok)
        else {
            let why = record.last_error.as_deref().unwrap_or("it was not pushed");
            problems.push(format!(
                "{platform}: {} has no pushed digest ({})",
                spec.tag,
                why.lines().next().unwrap_or(why)
            ));
            continue;
        };
        if record.fingerprint != spec.fingerprint {
            problems.push(format!(
                "{platform}: {} was built from other inputs than the matrix makes now; rebuild it",
                spec.tag
            ));
            continue;
        }
        let test_status = record.selftest.as_ref().map(|t| t.status);
        let status = test_status.map(TestStatus::as_str).unwrap_or("not run");
        let passed = (require.is_empty() && test_status == Some(TestStatus::Pass))
            || judge(require, &results_of(record)).holds;
        let allowed = passed || (allow_untested && test_status == Some(TestStatus::Skipped));
        if !allowed {
            let summary = record
                .selftest
                .as_ref()
                .map(|t| t.summary.as_str())
                .unwrap_or("");
            let policy = judge(require, &results_of(record));
            let summary = if require.is_empty() || policy.missing.is_empty() {
                summary.to_string()
            } else {
                format!(
                    "{summary}{}no passing result on {} recorded (`imagegen test` on such a node, or `imagegen test import`)",
                    if summary.is_empty() { "" } else { "; " },
                    policy.missing.join(", ")
                )
            };
            problems.push(format!(
                "{platform}: {} self-test {status}{}{}",
                spec.tag,
                if summary.is_empty() { "" } else { ": " },
                summary
            ));
            continue;
        }
        ready.push(ReadyPlatform {
            platform: platform.to_string(),
            tag: spec.tag.clone(),
            digest,
            passed,
        });
    }
    if problems.is_empty() {
        Ok(ready)
    } else {
        Err(problems)
    }
}

#[derive(Serialize)]
struct IndexDocument<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    manifests: Vec<IndexEntry>,
}

/// One entry of an index; the fields are the OCI image index spec's descriptor fields.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct IndexEntry {
    #[serde(rename = "mediaType")]
    pub(crate) media_type: String,
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    pub(crate) platform: IndexPlatform,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct IndexPlatform {
    pub(crate) architecture: String,
    pub(crate) os: String,
}

/// The index document's bytes: entries sorted by platform, compact JSON in a fixed field order,
/// so the same per-platform digests always give the same index digest.
pub(crate) fn index_document(mut entries: Vec<IndexEntry>) -> Vec<u8> {
    entries.sort_by(|a, b| {
        (&a.platform.os, &a.platform.architecture).cmp(&(&b.platform.os, &b.platform.architecture))
    });
    let document = IndexDocument {
        schema_version: 2,
        media_type: MEDIA_TYPE_OCI_INDEX,
        manifests: entries,
    };
    serde_json::to_vec(&document).expect("an index document always serializes")
}

/// `linux/arm64` → (`linux`, `arm64`).
pub(crate) fn split_platform(platform: &str) -> (String, String) {
    match platform.split_once('/') {
        Some((os, arch)) => (os.to_string(), arch.to_string()),
        None => ("linux".to_string(), platform.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(arch: &str, digest: &str) -> IndexEntry {
        IndexEntry {
            media_type: "application/vnd.docker.distribution.manifest.v2+json".into(),
            digest: Digest::of(digest.as_bytes()),
            size: 528,
            platform: IndexPlatform {
                architecture: arch.into(),
                os: "linux".into(),
            },
        }
    }

    #[test]
    fn index_documents_are_deterministic_and_sorted() {
        let a = index_document(vec![entry("arm64", "sha256:b"), entry("amd64", "sha256:a")]);
        let b = index_document(vec![entry("amd64", "sha256:a"), entry("arm64", "sha256:b")]);
        assert_eq!(a, b, "the order platforms were built in does not matter");
        let text = String::from_utf8(a).unwrap();
        assert!(text.starts_with(r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType""#), "{text}");
        assert!(text.find("amd64").unwrap() < text.find("arm64").unwrap());
    }

    #[test]
    fn readiness_names_every_missing_or_failed_platform() {
        use crate::history::ledger::changed;
        use crate::history::manifest::TestRecord;
        let specs = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.13\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nplatforms: [linux/amd64, linux/arm64]\n");
        let group: Vec<&ImageSpec> = specs.iter().collect();
        let mut manifest = Manifest::new();
        let problems = index_readiness(&group, &manifest, &[], false).unwrap_err();
        assert_eq!(problems.len(), 2);
        assert!(
            problems[1].starts_with("linux/arm64 is missing"),
            "{problems:?}"
        );

        let record = |spec: &ImageSpec, status: TestStatus| {
            let mut record = crate::pipeline::record::image_record(spec, &Digest::of(b"k"), "t");
            record.digest = Some(Digest::of(spec.platform.as_str().as_bytes()));
            record.selftest = Some(TestRecord {
                status,
                summary: "s".into(),
                report: None,
                at: "t".into(),
                baseline: None,
            });
            record
        };
        manifest = changed(manifest, |transaction| {
            transaction.record_image(record(&specs[0], TestStatus::Pass), &[], "t")
        });
        manifest = changed(manifest, |transaction| {
            transaction.record_image(record(&specs[1], TestStatus::Skipped), &[], "t")
        });
        let problems = index_readiness(&group, &manifest, &[], false).unwrap_err();
        assert_eq!(
            problems,
            vec![format!(
                "linux/arm64: {} self-test skipped: s",
                specs[1].tag
            )]
        );
        let ready = index_readiness(&group, &manifest, &[], true).unwrap();
        assert_eq!(
            ready.iter().map(|r| r.passed).collect::<Vec<_>>(),
            vec![true, false]
        );

        manifest = changed(manifest, |transaction| {
            transaction.record_image(record(&specs[1], TestStatus::Fail), &[], "t")
        });
        assert!(
            index_readiness(&group, &manifest, &[], true).unwrap_err()[0]
                .contains("self-test fail"),
            "a failed test is never allowed"
        );
        // Built where no GPU ran (skipped), then tested on a GPU node: the recorded result
        // satisfies the policy, so the platform counts as tested without --allow-untested.
        let mut tested = record(&specs[1], TestStatus::Skipped);
        let h200 = |verdict: TestStatus| crate::history::manifest::GpuTestResult {
            node: "gpu-h200-1".into(),
            gpus: vec!["NVIDIA H200".into()],
            driver: None,
            verdict,
            summary: "s".into(),
            figures: Default::default(),
            at: "t".into(),
            via: "imagegen test".into(),
            baseline: None,
            extra: Default::default(),
        };
        tested.test_results = vec![h200(TestStatus::Pass)];
        manifest = changed(manifest, |transaction| {
            transaction.record_image(tested.clone(), &[], "t")
        });
        // A build-time pass without a report names no GPU model: under a policy, amd64 needs
        // its own result too.
        let h200_only = ["H200".to_string()];
        let problems = index_readiness(&group, &manifest, &h200_only, false).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("linux/amd64"), "{problems:?}");
        let mut amd64 = record(&specs[0], TestStatus::Pass);
        amd64.test_results = vec![h200(TestStatus::Pass)];
        manifest = changed(manifest, |transaction| {
            transaction.record_image(amd64, &[], "t")
        });
        let ready = index_readiness(&group, &manifest, &h200_only, false).unwrap();
        assert_eq!(ready[1].tag, specs[1].tag);
        assert!(ready[1].passed);
        assert!(index_readiness(&group, &manifest, &[], false).is_ok());
        // A policy the results do not satisfy refuses it, naming what is missing.
        let both = ["H100".to_string(), "H200".to_string()];
        let problems = index_readiness(&group, &manifest, &both, false).unwrap_err();
        assert!(
            problems.iter().any(|p| p.starts_with("linux/arm64")
                && p.contains("no passing result on H100 recorded")),
            "{problems:?}"
        );
        // A failed result never counts as passing.
        tested.test_results = vec![h200(TestStatus::Fail)];
        manifest = changed(manifest, |transaction| {
            transaction.record_image(tested, &[], "t")
        });
        assert!(index_readiness(&group, &manifest, &h200_only, false).is_err());

        let mut stale = record(&specs[1], TestStatus::Pass);
        stale.fingerprint = Digest::of(b"sha256:other");
        manifest = changed(manifest, |transaction| {
            transaction.record_image(stale, &[], "t")
        });
        assert!(
            index_readiness(&group, &manifest, &[], true).unwrap_err()[0]
                .contains("built from other inputs")
        );
    }
}
