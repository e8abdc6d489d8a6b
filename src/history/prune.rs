//! `imagegen manifest prune`: which records a manifest can drop. Pure: a manifest in, the pruned
//! manifest and what was removed (and why) out.
//!
//! - A `failed` record (a tag that never built) is dropped when the same image (repository,
//!   variant, torch, CUDA, cuDNN, Python, OS and platform) has a newer good record under another
//!   tag: the failure is older than the newest record of its image.
//! - With `keep`, each image's history of earlier records keeps its newest `keep` entries.
//! - Never a record an alias points to (its current target, or a pending move's), nor one an image
//!   waits to move an alias to: those stay whatever the rules say.

use std::collections::BTreeMap;

use crate::history::ledger::Transaction;
use crate::history::manifest::{ImageRecord, Manifest, RecordStatus};

impl Transaction<'_> {
    /// Drops what [`prune`] says may go (`keep`: earlier records kept per image); what was
    /// removed, and why.
    pub(crate) fn prune(&mut self, keep: Option<usize>) -> Vec<Removed> {
        let (after, removed) = prune(self.manifest(), keep);
        *self.manifest_mut() = after;
        removed
    }
}

/// One record `prune` removes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Removed {
    pub(crate) tag: String,
    pub(crate) digest: Option<String>,
    pub(crate) built_at: String,
    pub(crate) why: String,
}

/// The image a record is of, whatever its tag.
fn image_of(
    record: &ImageRecord,
) -> (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
) {
    (
        record.repository.clone(),
        format!("{:?}", record.variant),
        record.torch.to_string(),
        record.cuda.to_string(),
        record.cudnn.to_string(),
        record.python.to_string(),
        record.os.to_string(),
        record.inputs.get("platform").cloned().unwrap_or_default(),
    )
}

/// Whether an alias (current target or pending move) points at `record`.
fn pointed_at(manifest: &Manifest, record: &ImageRecord) -> bool {
    let alias = manifest.aliases.values().any(|a| {
        a.tag == record.tag
            && (a.digest.is_none() || record.digest.is_none() || a.digest == record.digest)
    });
    let pending = manifest
        .pending_aliases
        .values()
        .any(|p| p.tag == record.tag);
    alias || pending || !record.awaiting_aliases.is_empty()
}

/// The manifest without what can go, and what went (oldest rule first, by tag).
pub(crate) fn prune(manifest: &Manifest, keep: Option<usize>) -> (Manifest, Vec<Removed>) {
    let mut pruned = manifest.clone();
    let mut removed = Vec::new();
    // The newest good record of each image: its tag and when it was built.
    let mut newest: BTreeMap<_, (&str, &str)> = BTreeMap::new();
    for record in manifest
        .images
        .values()
        .filter(|r| r.status == RecordStatus::Ok)
    {
        let entry = newest
            .entry(image_of(record))
            .or_insert((record.tag.as_str(), record.built_at.as_str()));
        if record.built_at.as_str() > entry.1 {
            *entry = (record.tag.as_str(), record.built_at.as_str());
        }
    }
    for record in manifest.images.values() {
        if record.status != RecordStatus::Failed || pointed_at(manifest, record) {
            continue;
        }
        if let Some((tag, at)) = newest.get(&image_of(record)) {
            // RFC 3339 UTC with seconds orders as text.
            if *at > record.built_at.as_str() {
                pruned.images.remove(&record.tag);
                removed.push(Removed {
                    tag: record.tag.clone(),
                    digest: None,
                    built_at: record.built_at.clone(),
                    why: format!("failed; the same image built since as {tag} ({at})"),
                });
            }
        }
    }
    if let Some(keep) = keep {
        for (tag, record) in pruned.images.iter_mut() {
            let mut kept = Vec::new();
            for (index, earlier) in std::mem::take(&mut record.history).into_iter().enumerate() {
                if index < keep || pointed_at(manifest, &earlier) {
                    kept.push(earlier);
                } else {
                    removed.push(Removed {
                        tag: tag.clone(),
                        digest: earlier.digest.as_ref().map(ToString::to_string),
                        built_at: earlier.built_at.clone(),
                        why: format!("earlier record beyond --keep {keep}"),
                    });
                }
            }
            record.history = kept;
        }
    }
    (pruned, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::digest::Digest;
    use crate::pipeline::record::test_support::{manifest_with, specs_for};

    #[test]
    fn failed_records_older_than_their_image_go_and_history_keeps_n() {
        let specs = specs_for("2.7.1", "12.6");
        assert_eq!(specs.len(), 1);
        let mut manifest = manifest_with(&specs, &[]);
        let good = manifest.images.values().next().unwrap().clone();

        // The same image failed earlier under an old tag name, and another image failed alone.
        let mut renamed = good.clone();
        renamed.tag = "old-name".into();
        renamed.built_at = "2026-01-01T00:00:00Z".into();
        manifest.record_failure(renamed, "boom");
        let mut other = good.clone();
        other.tag = "other".into();
        other.torch = "2.6.0".into();
        manifest.record_failure(other, "boom");
        // Three earlier builds of the good tag.
        let mut current = good.clone();
        for n in 0..3u8 {
            current.digest = Some(Digest::of(&[n]));
            current.built_at = format!("2026-02-0{}T00:00:00Z", n + 1);
            manifest.record_success(current.clone());
        }
        assert_eq!(manifest.images[&good.tag].history.len(), 3);

        let (pruned, removed) = prune(&manifest, None);
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert_eq!(removed[0].tag, "old-name");
        assert!(removed[0].why.contains(&good.tag), "{removed:?}");
        assert!(
            pruned.images.contains_key("other"),
            "the newest word on its image"
        );
        assert_eq!(pruned.images[&good.tag].history.len(), 3);

        let (pruned, removed) = prune(&manifest, Some(1));
        assert_eq!(removed.len(), 3, "{removed:?}");
        assert_eq!(pruned.images[&good.tag].history.len(), 1);

        // An alias on an earlier digest keeps that record; one on the failed tag keeps it.
        let earlier = manifest.images[&good.tag].history[2].clone();
        manifest.move_alias("pinned", &good.tag, earlier.digest.clone(), "t1");
        manifest.move_alias("stale", "old-name", None, "t1");
        let (pruned, removed) = prune(&manifest, Some(0));
        assert!(pruned.images.contains_key("old-name"), "{removed:?}");
        let history = &pruned.images[&good.tag].history;
        assert_eq!(history.len(), 1, "{removed:?}");
        assert_eq!(history[0].digest, earlier.digest);
    }
}
