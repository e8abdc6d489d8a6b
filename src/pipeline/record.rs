//! The fold of build results into the manifest: one pure function applied to each result as soon
//! as it is known, so the command can save after every image and an interruption keeps what
//! finished.

use crate::history::manifest::{ImageRecord, Manifest, TestRecord};
use crate::pipeline::executor::{ImageResult, Status, TestOutcome};
use crate::pipeline::plan::PlannedImage;

/// Applies one result to the manifest: a built or reused image's record (keeping the test report
/// and packages of the run that tested a reused build key), the aliases it moved, or a failure
/// noted beside the last good record. An interrupted image changes nothing.
pub fn record(
    manifest: &mut Manifest,
    planned: &PlannedImage,
    result: &ImageResult,
    source_commit: Option<&str>,
    now: &str,
) {
    let now = now.to_string();
    let mut record = ImageRecord::for_spec(&planned.spec, &planned.build_key, &now);
    record.image_id = result.image_id.clone();
    record.build_seconds = (result.seconds * 10.0).round() / 10.0;
    record.source_commit = source_commit.map(String::from);
    let previous = manifest
        .images
        .get(&planned.spec.tag)
        .filter(|p| p.build_key == planned.build_key)
        .cloned();
    record.selftest = match (&result.test, &previous) {
        // A reused image keeps the report of the run that tested it.
        (Some(TestOutcome::Pass { report: None, .. }), Some(previous)) if planned.passed_before => {
            previous.selftest.clone()
        }
        // Not tested in this run (reused from the registry): keep what the manifest knew.
        (None, Some(previous)) => previous.selftest.clone(),
        (Some(test), _) => Some(TestRecord {
            status: test.status().into(),
            summary: test.summary().into(),
            report: test.report().cloned(),
            at: now.clone(),
        }),
        (None, None) => None,
    };
    record.packages = result
        .packages
        .clone()
        .or_else(|| previous.as_ref().and_then(|p| p.packages.clone()));
    match result.status {
        Status::Built | Status::Reused => {
            record.digest = result
                .digest
                .clone()
                .or_else(|| previous.as_ref().and_then(|p| p.digest.clone()));
            if result.status == Status::Reused {
                if let Some(previous) = &previous {
                    record.built_at = previous.built_at.clone();
                    record.build_seconds = previous.build_seconds;
                }
            }
            let digest = record.digest.clone();
            manifest.record_success(record);
            for alias in &result.aliases_moved {
                manifest.move_alias(alias, &planned.spec.tag, digest.clone(), &now);
            }
        }
        Status::Failed | Status::Skipped => {
            manifest.record_failure(record, result.error.as_deref().unwrap_or("failed"))
        }
        Status::Interrupted => {}
    }
}
