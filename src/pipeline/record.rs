//! The fold of build results into the manifest: what a result says of its image's record, asked
//! of a `history::ledger::Transaction`, which holds the manifest as it is on disk at the moment
//! of writing (read under its lock), so another run's records written meanwhile are kept. Each
//! result is applied as soon as it is known (an image once its full tag is pushed, and again at
//! the end), so an interruption keeps what finished. The aliases a push moved are not written
//! here: the alias transaction wrote each as it moved it. This module decides what a record
//! says; it changes the manifest only through the transaction.

use crate::history::ledger::Transaction;
use crate::history::manifest::{FlavourRecord, ImageRecord, Manifest, RecordStatus, TestRecord};
use crate::model::digest::Digest;
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::results::{ImageResult, Status, TestOutcome};
use crate::resolve::image::ImageSpec;

/// Where the aliases a result moved were moved, and so who writes them down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AliasesMoved {
    /// In the registry (`build --push`): each through the alias transaction, which recorded it
    /// as it moved it (`history::alias_transaction::move_alias`); the record leaves them alone.
    InRegistry,
    /// As tags on this host (a build without `--push`): written down with the image's record.
    OnThisHost,
}

/// Applies one result to the manifest: a built or reused image's record (keeping the test report
/// and packages of the run that tested a reused build key), the aliases it tagged on this host,
/// or a failure noted beside the last good record. An interrupted image changes nothing.
pub(crate) fn record(
    transaction: &mut Transaction,
    planned: &PlannedImage,
    result: &ImageResult,
    source_commit: Option<&str>,
    now: &str,
    aliases: AliasesMoved,
) {
    let manifest = transaction.manifest();
    let tagged_here: &[String] = match aliases {
        AliasesMoved::InRegistry => &[],
        AliasesMoved::OnThisHost => &result.aliases_moved,
    };
    let now = now.to_string();
    let mut record = image_record(&planned.spec, &planned.build_key, &now);
    record.image_id = result.image_id.clone();
    record.build_seconds = (result.seconds * 10.0).round() / 10.0;
    record.source_commit = source_commit.map(String::from);
    record.flavour = flavour_record(&planned.spec, manifest);
    let previous = manifest
        .images()
        .get(&planned.spec.tag)
        .filter(|p| p.build_key == planned.build_key)
        .cloned();
    // The same image of this run recorded again (after its push, after its aliases): its build
    // and test times stay those first recorded, which the signed statements already carry.
    let same_image = previous
        .as_ref()
        .filter(|p| p.image_id.is_some() && p.image_id == result.image_id);
    record.selftest = match (&result.test, &previous) {
        // A reused image keeps the report of the run that tested it.
        (Some(TestOutcome::Pass { report: None, .. }), Some(previous)) if planned.passed_before => {
            previous.selftest.clone()
        }
        // Not tested in this run (reused from the registry): keep what the manifest knew.
        (None, Some(previous)) => previous.selftest.clone(),
        (Some(test), _) => Some(TestRecord {
            status: test.status(),
            summary: test.summary().into(),
            report: test.report().cloned(),
            at: same_image
                .and_then(|p| p.selftest.as_ref())
                .filter(|earlier| earlier.status == test.status())
                .map(|earlier| earlier.at.clone())
                .unwrap_or_else(|| now.clone()),
            baseline: planned.selftest_baseline.clone(),
        }),
        (None, None) => None,
    };
    record.packages = result
        .packages
        .clone()
        .or_else(|| previous.as_ref().and_then(|p| p.packages.clone()));
    record.size = result
        .size
        .clone()
        .or_else(|| previous.as_ref().and_then(|p| p.size.clone()));
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
            } else if let Some(same) = same_image {
                record.built_at = same.built_at.clone();
            }
            // Aliases waiting for the test policy are kept only with a digest to test.
            if record.digest.is_some() {
                record.awaiting_aliases = result.aliases_awaiting.clone();
            }
            transaction.record_image(record, tagged_here, &now);
        }
        // Pushed, then a later step failed (an alias): the registry serves the full tag with
        // this digest, so it is recorded as such, with the failure beside it.
        Status::Failed if result.digest.is_some() => {
            record.digest = result.digest.clone();
            if let Some(previous) = previous.as_ref().filter(|p| p.digest == record.digest) {
                record.built_at = previous.built_at.clone();
                record.build_seconds = previous.build_seconds;
            }
            record.awaiting_aliases = result.aliases_awaiting.clone();
            transaction.record_image(record, tagged_here, &now);
            transaction.note_error(
                &planned.spec.tag,
                result.error.as_deref().unwrap_or("failed"),
            );
        }
        Status::Failed | Status::Skipped => {
            transaction.record_failure(record, result.error.as_deref().unwrap_or("failed"))
        }
        // Nothing happened to it: its record stays as the push that made it wrote it.
        Status::Interrupted | Status::Unchecked => {}
    }
}

/// What a flavour image's record says of its flavour and parent: the parent's full tag always
/// (the tag it was built FROM, its revision filled), and its digest and image id as the manifest
/// records them, when that record is the build the flavour was made FROM (its fingerprint is the
/// flavour's `parent_fingerprint` input). The parent is built and recorded before its flavours,
/// so in a build that holds.
fn flavour_record(spec: &ImageSpec, manifest: &Manifest) -> Option<FlavourRecord> {
    let flavour = spec.flavour.as_ref()?;
    let parent = spec.parent_tag.as_ref()?;
    let built_on = manifest
        .images()
        .get(parent)
        .filter(|record| record.status == RecordStatus::Ok)
        .filter(|record| {
            spec.inputs.get("parent_fingerprint") == Some(&record.fingerprint.to_string())
        });
    Some(FlavourRecord {
        name: flavour.name.clone(),
        parent: parent.clone(),
        parent_digest: built_on.and_then(|record| record.digest.clone()),
        parent_image_id: built_on.and_then(|record| record.image_id.clone()),
    })
}

/// A manifest record for `spec` with the fields every build knows; the caller fills in the rest.
pub(crate) fn image_record(spec: &ImageSpec, build_key: &Digest, at: &str) -> ImageRecord {
    ImageRecord {
        repository: spec.repository.clone(),
        tag: spec.tag.clone(),
        aliases: Vec::new(),
        digest: None,
        image_id: None,
        fingerprint: spec.fingerprint.clone(),
        build_key: build_key.clone(),
        variant: spec.variant,
        torch: spec.torch.text().clone(),
        torchvision: spec.torchvision.clone(),
        torchaudio: spec.torchaudio.clone(),
        cuda: spec.cuda.clone(),
        cuda_full: spec.cuda_full.clone(),
        cudnn: spec.cudnn.clone(),
        python: spec.python.clone(),
        os: spec.os.clone(),
        base_image: spec.base_image.clone(),
        driver_min: spec.driver_min.clone(),
        driver_min_compat: spec.driver_min_compat.clone(),
        require_cuda: spec.require_cuda.clone(),
        selftest: None,
        test_results: Vec::new(),
        awaiting_aliases: Vec::new(),
        inputs: spec.inputs.clone(),
        packages: None,
        size: None,
        flavour: None,
        built_at: at.to_string(),
        build_seconds: 0.0,
        source_commit: None,
        status: RecordStatus::Ok,
        last_error: None,
        history: Vec::new(),
        extra: Default::default(),
    }
}

/// What the tests of planning over a manifest (`pipeline::plan`, `history::upgrade`) start from.
#[cfg(test)]
pub(crate) mod test_support {
    use super::image_record;
    use crate::history::ledger::changed;
    use crate::history::manifest::Manifest;
    use crate::model::digest::Digest;
    use crate::resolve::image::ImageSpec;

    /// The runtime images of one torch × CUDA on ubuntu24.04, resolved on the test knowledge.
    pub(crate) fn specs_for(torch: &str, cuda: &str) -> Vec<ImageSpec> {
        crate::resolve::test_images(&format!(
            "registry: r.example\nrepository: t/p\ntorch: [\"{torch}\"]\ncuda: [\"{cuda}\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n"
        ))
    }

    /// A manifest recording every spec as built (its digest made from its tag) and each
    /// `(alias, full tag)` as moved there.
    pub(crate) fn manifest_with(specs: &[ImageSpec], alias_targets: &[(&str, &str)]) -> Manifest {
        changed(Manifest::new(), |transaction| {
            for spec in specs {
                let mut record = image_record(spec, &Digest::of(b"key"), "t0");
                record.digest = Some(Digest::of(spec.tag.as_bytes()));
                record.flavour = super::flavour_record(spec, transaction.manifest());
                let tagged: Vec<String> = alias_targets
                    .iter()
                    .filter(|(_, tag)| *tag == spec.tag)
                    .map(|(alias, _)| alias.to_string())
                    .collect();
                transaction.record_image(record, &tagged, "t0");
            }
        })
    }
}
