//! `imagegen manifest merge`: one manifest from several, for CI that builds shards on separate
//! runners (each starts from the committed manifest and records its own images). Pure: two
//! `Manifest` values in, one out; the command folds it over its files.
//!
//! Rules, chosen so that the order of the inputs does not matter:
//! - An image: the newer record (`built_at`) wins; a good record (`ok`) beats a `failed` one,
//!   since a failure never erases an image's last good record. The loser, when it is a different
//!   good build, joins the winner's history; histories are unioned, newest first. A `last_error`
//!   survives from either side when the records are otherwise the same build.
//! - An alias: the side whose history holds the other's target moved on from it and wins (a
//!   runner's clock is not trusted over that); otherwise the newer move (`moved_at`); the other
//!   target and both histories are kept.
//! - Conflicts no rule settles are reported, not merged ([`merge_checked`]): one full tag with
//!   two digests neither side knows of the other, one alias moved to two places by runs that did
//!   not see each other's move, closer in time than runners' clocks can be trusted
//!   ([`CLOCK_SKEW`]); one node's self-test of one build that passed on one side and failed on
//!   the other, closer in time than that: which came last cannot be told, and a fail never loses
//!   to a pass by a tie-break.
//! - A multi-platform index: the newer publication (`published_at`) wins; the other, when it is
//!   a different digest, joins the history.
//! - A pending alias move (intent without a result): the newer one (`since`) wins; it is dropped
//!   when the merged alias already points at its target, moved no earlier than it began.
//! - Each image's and index's `aliases` list is recomputed from the merged alias table.
//! - Self-test results of one build merge by node, the later (`at`) winning (a re-test; on a tie
//!   of times the worse verdict); aliases awaiting
//!   results are unioned, less those the merged alias table already points at the image.
//! - Fields this version does not know are kept; on a tie the winner's value.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::manifest::{
    keep_unknown_fields, parse_rfc3339, AliasRecord, AliasTarget, ImageRecord, IndexRecord,
    Manifest, PendingMove, RecordStatus, HISTORY_LIMIT, SCHEMA_VERSION,
};
use crate::history::test_results::merge_results;
use crate::model::digest::Digest;

/// The identity of one build of a tag.
fn build_identity(record: &ImageRecord) -> (Option<Digest>, Digest, String) {
    (
        record.digest.clone(),
        record.build_key.clone(),
        record.built_at.clone(),
    )
}

/// Orders two records of one tag: greater is the one to keep as current.
fn record_order(left: &ImageRecord, right: &ImageRecord) -> Ordering {
    let good = |record: &ImageRecord| record.status == RecordStatus::Ok;
    good(left)
        .cmp(&good(right))
        .then_with(|| left.built_at.cmp(&right.built_at))
        .then_with(|| left.last_error.is_some().cmp(&right.last_error.is_some()))
        // Ties of different content: a total order, so merge(a, b) == merge(b, a).
        .then_with(|| {
            serde_json::to_string(left)
                .unwrap_or_default()
                .cmp(&serde_json::to_string(right).unwrap_or_default())
        })
}

fn merge_image(left: ImageRecord, right: ImageRecord) -> ImageRecord {
    let (mut winner, mut loser) = if record_order(&left, &right) == Ordering::Less {
        (right, left)
    } else {
        (left, right)
    };
    keep_unknown_fields(&mut winner.extra, &loser.extra);
    let mut history = std::mem::take(&mut winner.history);
    history.append(&mut std::mem::take(&mut loser.history));
    let same_build = build_identity(&winner) == build_identity(&loser);
    if same_build {
        if winner.last_error.is_none() {
            winner.last_error = loser.last_error.take();
        }
        // The same build measured by one side only (the other run reused it unmeasured).
        if winner.size.is_none() {
            winner.size = loser.size;
        }
        // Test shards add results to the same build: every node's latest counts.
        winner.test_results = merge_results(
            std::mem::take(&mut winner.test_results),
            std::mem::take(&mut loser.test_results),
        );
        let mut awaiting = std::mem::take(&mut winner.awaiting_aliases);
        awaiting.append(&mut loser.awaiting_aliases);
        awaiting.sort();
        awaiting.dedup();
        winner.awaiting_aliases = awaiting;
    } else if loser.status == RecordStatus::Ok {
        loser.last_error = None;
        history.push(loser);
    } else if winner.built_at < loser.built_at {
        // A newer failure beside an older good record: keep it, as `record_failure` does.
        winner.last_error = loser.last_error.take();
    }
    let current = build_identity(&winner);
    history.retain(|record| build_identity(record) != current);
    history.sort_by(|a, b| b.built_at.cmp(&a.built_at).then_with(|| record_order(b, a)));
    history.dedup_by(|a, b| build_identity(a) == build_identity(b));
    history.truncate(HISTORY_LIMIT);
    winner.history = history;
    winner
}

fn target_of(record: &AliasRecord) -> AliasTarget {
    AliasTarget {
        tag: record.tag.clone(),
        digest: record.digest.clone(),
        moved_at: record.moved_at.clone(),
        extra: Default::default(),
    }
}

/// Whether `record` went through `target` (tag and digest) before where it points now.
fn has_seen(record: &AliasRecord, target: &AliasRecord) -> bool {
    record
        .history
        .iter()
        .any(|t| t.tag == target.tag && t.digest == target.digest)
}

fn merge_alias(left: AliasRecord, right: AliasRecord) -> AliasRecord {
    let key = |record: &AliasRecord| {
        (
            record.moved_at.clone(),
            record.tag.clone(),
            record.digest.clone(),
        )
    };
    // The side that moved on from where the other points is newer, whatever the clocks of the
    // runners said; only when that does not tell are the times compared.
    let left_newer = match (has_seen(&left, &right), has_seen(&right, &left)) {
        (true, false) => true,
        (false, true) => false,
        _ => key(&left) >= key(&right),
    };
    let (mut winner, mut loser) = if left_newer {
        (left, right)
    } else {
        (right, left)
    };
    keep_unknown_fields(&mut winner.extra, &loser.extra);
    let mut history = std::mem::take(&mut winner.history);
    history.append(&mut loser.history);
    history.push(target_of(&loser));
    let current = target_of(&winner);
    history.retain(|target| target != &current);
    history.sort_by(|a, b| (&b.moved_at, &b.tag, &b.digest).cmp(&(&a.moved_at, &a.tag, &a.digest)));
    history.dedup();
    history.truncate(HISTORY_LIMIT);
    winner.history = history;
    winner
}

fn merge_index(left: IndexRecord, right: IndexRecord) -> IndexRecord {
    let key = |record: &IndexRecord| {
        (
            record.published_at.clone(),
            record.digest.clone(),
            serde_json::to_string(record).unwrap_or_default(),
        )
    };
    let (mut winner, mut loser) = if key(&left) < key(&right) {
        (right, left)
    } else {
        (left, right)
    };
    keep_unknown_fields(&mut winner.extra, &loser.extra);
    let mut history = std::mem::take(&mut winner.history);
    history.append(&mut std::mem::take(&mut loser.history));
    if loser.digest != winner.digest {
        history.push(loser);
    }
    let identity = |record: &IndexRecord| (record.digest.clone(), record.published_at.clone());
    let current = identity(&winner);
    history.retain(|record| identity(record) != current);
    history.sort_by_key(|record| std::cmp::Reverse(key(record)));
    history.dedup_by(|a, b| identity(a) == identity(b));
    history.truncate(HISTORY_LIMIT);
    winner.history = history;
    winner
}

/// Merges two manifests (see the module documentation for the rules).
pub(crate) fn merge(left: Manifest, right: Manifest) -> Manifest {
    let mut images: BTreeMap<String, ImageRecord> = left.images;
    for (tag, record) in right.images {
        let merged = match images.remove(&tag) {
            Some(existing) => merge_image(existing, record),
            None => record,
        };
        images.insert(tag, merged);
    }
    let mut aliases: BTreeMap<String, AliasRecord> = left.aliases;
    for (alias, record) in right.aliases {
        let merged = match aliases.remove(&alias) {
            Some(existing) => merge_alias(existing, record),
            None => record,
        };
        aliases.insert(alias, merged);
    }
    let mut indexes: BTreeMap<String, IndexRecord> = left.indexes;
    for (tag, record) in right.indexes {
        let merged = match indexes.remove(&tag) {
            Some(existing) => merge_index(existing, record),
            None => record,
        };
        indexes.insert(tag, merged);
    }
    let mut pending_aliases: BTreeMap<String, PendingMove> = left.pending_aliases;
    for (alias, pending) in right.pending_aliases {
        let merged = match pending_aliases.remove(&alias) {
            Some(existing) => newer_pending(existing, pending),
            None => pending,
        };
        pending_aliases.insert(alias, merged);
    }
    pending_aliases.retain(|alias, pending| {
        !aliases.get(alias).is_some_and(|record| {
            record.digest.as_ref() == Some(&pending.to) && record.moved_at >= pending.since
        })
    });
    let mut merged = Manifest {
        schema_version: SCHEMA_VERSION,
        updated_at: left.updated_at.max(right.updated_at),
        images,
        aliases,
        indexes,
        pending_aliases,
        attestations: crate::history::attestations::merge(left.attestations, right.attestations),
    };
    merged.relist_aliases();
    merged.drop_awaiting_moved();
    merged
}

/// Of two intents to move one alias, the one begun last; a total order for ties.
fn newer_pending(left: PendingMove, right: PendingMove) -> PendingMove {
    let key = |pending: &PendingMove| {
        (
            pending.since.clone(),
            pending.to.clone(),
            serde_json::to_string(pending).unwrap_or_default(),
        )
    };
    if key(&left) < key(&right) {
        right
    } else {
        left
    }
}

/// Merges any number of manifests, in order (the result does not depend on it).
pub(crate) fn merge_all(manifests: Vec<Manifest>) -> Manifest {
    manifests.into_iter().fold(Manifest::new(), merge)
}

/// How far apart two runners' clocks may be. Two moves of one alias that did not see each other
/// and are closer in time than this cannot be put in order by their times.
pub(crate) const CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(300);

/// Two manifests that disagree in a way no rule settles: a person decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Conflict {
    /// `full tag` or `alias`.
    pub(crate) kind: &'static str,
    pub(crate) name: String,
    /// What each side records.
    pub(crate) left: String,
    pub(crate) right: String,
    pub(crate) why: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: one manifest records {}, another {}; {}",
            self.kind, self.name, self.left, self.right, self.why
        )
    }
}

/// What two manifests disagree on beyond the merge rules: one immutable full tag recorded with
/// two digests, neither known to the other's history; one alias moved to two places, neither
/// side having seen the other's move, at times less than [`CLOCK_SKEW`] apart (or unreadable):
/// their times come from different runners' clocks, so which move came last cannot be told from
/// the records. Sorted, so the same for either order.
pub(crate) fn conflicts(left: &Manifest, right: &Manifest) -> Vec<Conflict> {
    let mut found = Vec::new();
    for (tag, ours) in &left.images {
        let Some(theirs) = right.images.get(tag) else {
            continue;
        };
        let (Some(a), Some(b)) = (&ours.digest, &theirs.digest) else {
            continue;
        };
        let good = ours.status == RecordStatus::Ok && theirs.status == RecordStatus::Ok;
        let knows = |record: &ImageRecord, digest: &Digest| {
            record
                .history
                .iter()
                .any(|h| h.digest.as_ref() == Some(digest))
        };
        if good && a != b && !knows(ours, b) && !knows(theirs, a) {
            found.push(Conflict {
                kind: "full tag",
                name: tag.clone(),
                left: format!("{a} (built {})", ours.built_at),
                right: format!("{b} (built {})", theirs.built_at),
                why: "a full tag is immutable, so one of them is not what the registry serves under it (`imagegen verify` with each says which)".into(),
            });
        }
    }
    for (alias, ours) in &left.aliases {
        let Some(theirs) = right.aliases.get(alias) else {
            continue;
        };
        let same = ours.tag == theirs.tag && ours.digest == theirs.digest;
        let apart = match (
            parse_rfc3339(&ours.moved_at),
            parse_rfc3339(&theirs.moved_at),
        ) {
            (Some(a), Some(b)) => a.abs_diff(b),
            _ => 0,
        };
        if !same
            && !has_seen(ours, theirs)
            && !has_seen(theirs, ours)
            && apart < CLOCK_SKEW.as_secs()
        {
            let describe = |record: &AliasRecord| {
                format!(
                    "{} ({}, moved at {})",
                    record
                        .digest
                        .as_ref()
                        .map(Digest::to_string)
                        .unwrap_or_else(|| "no digest".into()),
                    record.tag,
                    record.moved_at
                )
            };
            found.push(Conflict {
                kind: "alias",
                name: alias.clone(),
                left: describe(ours),
                right: describe(theirs),
                why: format!("each was moved without seeing the other's move, less than {} s apart by the clocks of different runners, so which came last cannot be told; the registry serves one of them (`imagegen verify`)", CLOCK_SKEW.as_secs()),
            });
        }
    }
    for (tag, ours) in &left.images {
        let Some(theirs) = right.images.get(tag) else {
            continue;
        };
        if build_identity(ours) != build_identity(theirs) {
            continue;
        }
        for mine in &ours.test_results {
            for other in theirs.test_results.iter().filter(|r| r.node == mine.node) {
                let apart = match (parse_rfc3339(&mine.at), parse_rfc3339(&other.at)) {
                    (Some(a), Some(b)) => a.abs_diff(b),
                    _ => 0,
                };
                if mine.verdict != other.verdict && apart < CLOCK_SKEW.as_secs() {
                    let describe = |result: &crate::history::manifest::GpuTestResult| {
                        format!("{} at {} (via {})", result.verdict, result.at, result.via)
                    };
                    found.push(Conflict {
                        kind: "test result",
                        name: format!("{tag} on node {}", mine.node),
                        left: describe(mine),
                        right: describe(other),
                        why: format!("one node's self-test of one build passed on one side and did not on the other, less than {} s apart by the clocks of different runners, so which came last cannot be told; test the image on that node again (`imagegen test`) and merge the shard with the result you trust", CLOCK_SKEW.as_secs()),
                    });
                }
            }
        }
    }
    for conflict in &mut found {
        if conflict.left > conflict.right {
            std::mem::swap(&mut conflict.left, &mut conflict.right);
        }
    }
    found.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    found
}

/// Merges any number of manifests (see [`merge_all`]), or says on what they conflict.
pub(crate) fn merge_checked(manifests: Vec<Manifest>) -> Result<Manifest, Vec<Conflict>> {
    let mut found = Vec::new();
    for (index, left) in manifests.iter().enumerate() {
        for right in &manifests[index + 1..] {
            for conflict in conflicts(left, right) {
                if !found.contains(&conflict) {
                    found.push(conflict);
                }
            }
        }
    }
    if found.is_empty() {
        Ok(merge_all(manifests))
    } else {
        Err(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(label: &str) -> Digest {
        Digest::of(label.as_bytes())
    }

    fn record(tag: &str, digest: &str, built_at: &str) -> ImageRecord {
        let spec_free = serde_json::json!({
            "repository": "r/p", "tag": tag, "digest": d(digest), "fingerprint": d("f"),
            "build_key": d(&format!("key-{digest}")), "variant": "runtime", "torch": "2.7.1",
            "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9",
            "python": "3.12", "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
            "built_at": built_at, "status": "ok"
        });
        serde_json::from_value(spec_free).unwrap()
    }

    fn manifest(records: Vec<ImageRecord>) -> Manifest {
        let mut manifest = Manifest::new();
        for record in records {
            manifest.images.insert(record.tag.clone(), record);
        }
        manifest
    }

    #[test]
    fn test_shards_merge_their_results_and_drop_aliases_another_shard_moved() {
        use crate::history::manifest::{GpuTestResult, TestStatus};
        use crate::history::test_results::record_result;
        let result = |node: &str, gpu: &str, at: &str| GpuTestResult {
            node: node.into(),
            gpus: vec![gpu.into()],
            driver: None,
            verdict: TestStatus::Pass,
            summary: "ok".into(),
            figures: Default::default(),
            at: at.into(),
            via: "imagegen test".into(),
            baseline: None,
            extra: Default::default(),
        };
        let mut built = record("a", "sha256:a1", "t1");
        built.awaiting_aliases = vec!["2.7-runtime".into(), "latest".into()];
        let base = manifest(vec![built]);
        let mut h100 = base.clone();
        record_result(
            &mut h100,
            &d("sha256:a1"),
            &result("n1", "NVIDIA H100", "t2"),
        )
        .unwrap();
        let mut h200 = base.clone();
        record_result(
            &mut h200,
            &d("sha256:a1"),
            &result("n2", "NVIDIA H200", "t3"),
        )
        .unwrap();
        // The H200 shard also saw the policy hold and moved one alias.
        h200.move_alias("latest", "a", Some(d("sha256:a1")), "t3");
        h200.images.get_mut("a").unwrap().awaiting_aliases = vec!["2.7-runtime".into()];
        assert!(record_result(&mut h200, &d("sha256:unknown"), &result("n2", "x", "t3")).is_none());
        let merged = merge_all(vec![base.clone(), h100.clone(), h200.clone()]);
        assert_eq!(merged, merge_all(vec![h200, base, h100]));
        let record = &merged.images["a"];
        let nodes: Vec<&str> = record
            .test_results
            .iter()
            .map(|r| r.node.as_str())
            .collect();
        assert_eq!(nodes, vec!["n1", "n2"]);
        assert_eq!(record.awaiting_aliases, vec!["2.7-runtime"]);
        assert_eq!(record.aliases, vec!["latest"]);
    }

    #[test]
    fn shards_of_one_base_merge_into_all_their_builds() {
        let base = manifest(vec![
            record("a", "sha256:a0", "t0"),
            record("b", "sha256:b0", "t0"),
        ]);
        let mut shard_one = base.clone();
        shard_one.record_success(record("a", "sha256:a1", "t1"));
        shard_one.move_alias("2.7-runtime", "a", Some(d("sha256:a1")), "t1");
        let mut shard_two = base.clone();
        shard_two.record_success(record("b", "sha256:b1", "t2"));
        shard_two.move_alias("latest", "b", Some(d("sha256:b1")), "t2");
        let merged = merge_all(vec![base.clone(), shard_one.clone(), shard_two.clone()]);
        assert_eq!(merged.images["a"].digest, Some(d("sha256:a1")));
        assert_eq!(merged.images["b"].digest, Some(d("sha256:b1")));
        assert_eq!(merged.images["a"].history.len(), 1);
        assert_eq!(merged.images["a"].history[0].digest, Some(d("sha256:a0")));
        assert_eq!(merged.images["a"].aliases, vec!["2.7-runtime"]);
        assert_eq!(merged.images["b"].aliases, vec!["latest"]);
        assert_eq!(
            merged,
            merge_all(vec![shard_two, base, shard_one]),
            "the order of inputs does not matter"
        );
    }

    #[test]
    fn newest_alias_move_wins_and_both_targets_stay_in_history() {
        let mut left = manifest(vec![
            record("a", "sha256:1", "t1"),
            record("b", "sha256:2", "t2"),
        ]);
        let mut right = left.clone();
        left.move_alias("latest", "a", Some(d("sha256:1")), "2026-11-30T10:00:00Z");
        right.move_alias("latest", "a", Some(d("sha256:1")), "2026-11-30T10:00:00Z");
        right.move_alias("latest", "b", Some(d("sha256:2")), "2026-11-30T11:00:00Z");
        let merged = merge(left.clone(), right.clone());
        assert_eq!(merged.aliases["latest"].tag, "b");
        assert_eq!(merged.aliases["latest"].history.len(), 1);
        assert_eq!(merged.aliases["latest"].history[0].tag, "a");
        assert!(merged.images["a"].aliases.is_empty());
        assert_eq!(merged, merge(right, left));
    }

    #[test]
    fn a_failure_never_replaces_a_good_record_but_its_error_is_kept() {
        let good = manifest(vec![record("a", "sha256:1", "t1")]);
        let mut failed = record("a", "sha256:x", "t2");
        failed.status = RecordStatus::Failed;
        failed.last_error = Some("RUN pip install failed".into());
        let merged = merge(good.clone(), manifest(vec![failed.clone()]));
        assert_eq!(merged.images["a"].digest, Some(d("sha256:1")));
        assert_eq!(merged.images["a"].status, RecordStatus::Ok);
        assert_eq!(
            merged.images["a"].last_error.as_deref(),
            Some("RUN pip install failed")
        );
        assert!(
            merged.images["a"].history.is_empty(),
            "a failed build is not history"
        );
        assert_eq!(merged, merge(manifest(vec![failed]), good));
    }

    fn index(tag: &str, digest: &str, published_at: &str) -> IndexRecord {
        serde_json::from_value(serde_json::json!({
            "repository": "r/p", "tag": tag, "digest": d(digest),
            "media_type": "application/vnd.oci.image.index.v1+json", "torch": "2.13.0",
            "driver_min": "560.35.05", "platforms": {}, "published_at": published_at
        }))
        .unwrap()
    }

    #[test]
    fn the_newest_index_publication_wins_and_the_other_is_history() {
        let mut left = Manifest::new();
        left.indexes
            .insert("x".into(), index("x", "sha256:1", "2026-11-30T10:00:00Z"));
        let mut right = Manifest::new();
        right
            .indexes
            .insert("x".into(), index("x", "sha256:2", "2026-11-30T11:00:00Z"));
        right.aliases.insert(
            "latest".into(),
            AliasRecord {
                tag: "x".into(),
                digest: Some(d("sha256:2")),
                moved_at: "2026-11-30T11:00:00Z".into(),
                history: Vec::new(),
                held: None,
                extra: Default::default(),
            },
        );
        let merged = merge(left.clone(), right.clone());
        assert_eq!(merged.indexes["x"].digest, d("sha256:2"));
        assert_eq!(merged.indexes["x"].history.len(), 1);
        assert_eq!(merged.indexes["x"].history[0].digest, d("sha256:1"));
        assert_eq!(merged.indexes["x"].aliases, vec!["latest"]);
        assert_eq!(merged, merge(right, left));
    }

    #[test]
    fn pending_alias_moves_survive_a_merge_until_one_side_finished_them() {
        let base = manifest(vec![
            record("a", "sha256:1", "t1"),
            record("b", "sha256:2", "t2"),
        ]);
        let mut begun = base.clone();
        begun.pending_move(
            "latest",
            "b",
            &d("sha256:2"),
            "2026-11-30T10:00:00Z",
            "pid 1",
        );
        let merged = merge(base.clone(), begun.clone());
        assert_eq!(merged.pending_aliases, begun.pending_aliases);
        assert_eq!(merged, merge(begun.clone(), base.clone()));

        let mut finished = begun.clone();
        finished.finish_pending_move("latest", "2026-11-30T10:00:05Z");
        assert!(finished.pending_aliases.is_empty());
        let merged = merge(begun.clone(), finished.clone());
        assert!(
            merged.pending_aliases.is_empty(),
            "the other side recorded the move as done"
        );
        assert_eq!(merged.aliases["latest"].tag, "b");
        assert_eq!(merged, merge(finished, begun));
    }

    #[test]
    fn unknown_fields_of_records_are_kept() {
        let mut left = manifest(vec![record("a", "sha256:1", "t1")]);
        left.images
            .get_mut("a")
            .unwrap()
            .extra
            .insert("owner".into(), serde_json::json!("ml-infra"));
        let mut right = manifest(vec![record("a", "sha256:2", "t2")]);
        right.move_alias("latest", "a", Some(d("sha256:2")), "t2");
        right
            .aliases
            .get_mut("latest")
            .unwrap()
            .extra
            .insert("note".into(), serde_json::json!({"ticket": 42}));
        let merged = merge(left.clone(), right.clone());
        assert_eq!(merged.images["a"].digest, Some(d("sha256:2")));
        assert_eq!(merged.images["a"].extra["owner"], "ml-infra");
        assert_eq!(merged.aliases["latest"].extra["note"]["ticket"], 42);
        assert_eq!(merged, merge(right, left));
    }

    #[test]
    fn one_full_tag_with_two_digests_is_a_conflict_in_either_order() {
        let base = manifest(vec![record("a", "sha256:a0", "t0")]);
        let mut left = base.clone();
        left.record_success(record("a", "sha256:a1", "t1"));
        let mut right = base.clone();
        right.record_success(record("a", "sha256:a2", "t2"));
        let found = conflicts(&left, &right);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].kind, found[0].name.as_str()), ("full tag", "a"));
        assert_eq!(found, conflicts(&right, &left));
        assert!(merge_checked(vec![left.clone(), right.clone()]).is_err());
        // A rebuild that knew the earlier digest is history, not a conflict.
        let mut rebuilt = left.clone();
        rebuilt.record_success(record("a", "sha256:a3", "t3"));
        assert!(conflicts(&left, &rebuilt).is_empty());
        let checked = merge_checked(vec![base, left, rebuilt]);
        assert!(checked.is_ok(), "{:?}", checked.err());
    }

    #[test]
    fn alias_moves_from_skewed_clocks_follow_what_each_side_saw_or_conflict() {
        let base = manifest(vec![
            record("a", "sha256:1", "t1"),
            record("b", "sha256:2", "t2"),
            record("c", "sha256:3", "t3"),
        ]);
        let mut first = base.clone();
        first.move_alias("latest", "a", Some(d("sha256:1")), "2026-11-30T10:00:00Z");
        // A runner whose clock is an hour behind moved it on from there: it saw the first move.
        let mut later = first.clone();
        later.move_alias("latest", "b", Some(d("sha256:2")), "2026-11-30T09:30:00Z");
        let merged = merge_checked(vec![first.clone(), later.clone()]).unwrap();
        assert_eq!(merged.aliases["latest"].tag, "b", "not the clock's word");
        assert_eq!(merged, merge(later.clone(), first.clone()));
        // Two runners that did not see each other's move: a conflict, whatever the times.
        let mut other = first.clone();
        other.move_alias("latest", "c", Some(d("sha256:3")), "2026-11-30T09:33:00Z");
        let found = conflicts(&later, &other);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "alias");
        assert!(found[0].to_string().contains("moved at"), "{}", found[0]);
        assert_eq!(found, conflicts(&other, &later));
        // An hour apart, no clock is that wrong: the newer move wins.
        let mut much_later = first.clone();
        much_later.move_alias("latest", "c", Some(d("sha256:3")), "2026-11-30T10:30:00Z");
        assert!(conflicts(&later, &much_later).is_empty());
        assert_eq!(merge(later, much_later).aliases["latest"].tag, "c");
    }

    #[test]
    fn the_same_build_on_both_sides_is_not_duplicated() {
        let mut left = manifest(vec![record("a", "sha256:1", "t1")]);
        left.record_success(record("a", "sha256:2", "t2"));
        let right = left.clone();
        let merged = merge(left.clone(), right);
        assert_eq!(merged, left);
    }

    #[test]
    fn one_nodes_pass_and_fail_of_one_build_close_in_time_are_a_conflict() {
        use crate::history::manifest::{Extra, GpuTestResult, TestStatus};
        let result = |verdict: TestStatus, at: &str| GpuTestResult {
            node: "gpu-a".into(),
            gpus: vec!["NVIDIA H200".into()],
            driver: None,
            verdict,
            summary: String::new(),
            figures: Default::default(),
            at: at.into(),
            via: "test import".into(),
            baseline: None,
            extra: Extra::new(),
        };
        let with = |verdict: TestStatus, at: &str| {
            let mut manifest = Manifest::new();
            let mut record = record("2.7.0-runtime", "a", "2026-12-01T00:00:00Z");
            record.test_results = vec![result(verdict, at)];
            manifest.images.insert("2.7.0-runtime".into(), record);
            manifest
        };
        let pass = with(TestStatus::Pass, "2026-12-02T01:00:00Z");
        let fail = with(TestStatus::Fail, "2026-12-02T01:00:00Z");
        let found = conflicts(&pass, &fail);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "test result");
        assert_eq!(found[0].name, "2.7.0-runtime on node gpu-a");
        assert_eq!(found, conflicts(&fail, &pass));
        assert!(merge_checked(vec![pass.clone(), fail]).is_err());
        // A re-test an hour later is a re-test, not a conflict: the later result wins.
        let later_fail = with(TestStatus::Fail, "2026-12-02T02:00:00Z");
        assert!(conflicts(&pass, &later_fail).is_empty());
        let merged = merge_checked(vec![pass, later_fail]).unwrap();
        assert_eq!(
            merged.images["2.7.0-runtime"].test_results[0].verdict,
            TestStatus::Fail
        );
    }
}
