//! The manifest against the registry: which references the manifest makes a claim about (every
//! pushed full tag, alias and index), how each compares with what the registry serves, the
//! command that fixes each difference, and what `--adopt` reports of the alias moves left in
//! between (an intent written down, its result not) that the settle loop of
//! `history::alias_transaction` settled. Pure: the manifest and the registry's answers in,
//! findings out; asking the registry, and settling, is the command's.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::alias_transaction::{settle, AliasRegistry, SettleOutcome, Settlement};
use crate::history::manifest::{Manifest, PendingMove, RecordStatus};
use crate::model::digest::Digest;

/// A tag in a repository: what the registry is asked about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Reference {
    pub(crate) repository: String,
    pub(crate) tag: String,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.repository, self.tag)
    }
}

/// What the registry serves for each reference asked about: a digest, or `None` (no such tag).
pub(crate) type Served = BTreeMap<Reference, Option<Digest>>;

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Subject {
    /// A full tag (or a per-platform tag).
    Image,
    Alias,
    /// A multi-platform OCI index.
    Index,
}

impl Subject {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Subject::Image => "image",
            Subject::Alias => "alias",
            Subject::Index => "index",
        }
    }
}

/// How a recorded reference compares with the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    /// The registry serves what the manifest records.
    Ok,
    /// The registry has no such tag.
    Missing,
    /// The registry serves another digest.
    Differs,
    /// An alias move was begun and not written down as done, and the registry serves its target:
    /// the move happened.
    PendingMoved,
    /// An alias move was begun and not written down as done, and the registry still serves its
    /// origin: the move did not happen.
    PendingNotMoved,
    /// The manifest records an alias to a tag it does not record, so its repository is unknown.
    Unlocated,
}

impl State {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Missing => "missing",
            State::Differs => "differs",
            State::PendingMoved => "in between (moved)",
            State::PendingNotMoved => "in between (not moved)",
            State::Unlocated => "unlocated",
        }
    }
}

/// One reference the manifest records, compared with the registry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Finding {
    pub(crate) subject: Subject,
    /// The full tag, alias or index tag.
    pub(crate) name: String,
    pub(crate) repository: Option<String>,
    /// What the manifest says it is (for an alias in between: where the move goes).
    pub(crate) recorded: Option<Digest>,
    /// What the registry serves (`None`: no such tag, or not asked).
    pub(crate) served: Option<Digest>,
    pub(crate) state: State,
    /// What is wrong, in words (empty when ok).
    pub(crate) problem: String,
    /// The command that fixes it.
    pub(crate) fix: Option<String>,
}

impl Finding {
    pub(crate) fn is_drift(&self) -> bool {
        self.state != State::Ok
    }
}

/// Every reference the manifest makes a claim about: each full tag it records as pushed (a good
/// record with a digest), each alias and pending alias move it can locate, each index. Sorted,
/// without repeats. Records never pushed (no digest) make no claim about the registry.
pub(crate) fn references(manifest: &Manifest) -> Vec<Reference> {
    let mut references = Vec::new();
    for (tag, record) in &manifest.images {
        if record.status == RecordStatus::Ok && record.digest.is_some() {
            references.push(Reference {
                repository: record.repository.clone(),
                tag: tag.clone(),
            });
        }
    }
    for (tag, index) in &manifest.indexes {
        references.push(Reference {
            repository: index.repository.clone(),
            tag: tag.clone(),
        });
    }
    for (alias, record) in &manifest.aliases {
        if manifest.alias_digest(alias).is_none() && !manifest.pending_aliases.contains_key(alias) {
            continue;
        }
        if let Some(repository) = manifest.repository_of(&record.tag) {
            references.push(Reference {
                repository: repository.to_string(),
                tag: alias.clone(),
            });
        }
    }
    for (alias, pending) in &manifest.pending_aliases {
        if let Some(repository) = manifest.repository_of(&pending.tag) {
            references.push(Reference {
                repository: repository.to_string(),
                tag: alias.clone(),
            });
        }
    }
    references.sort();
    references.dedup();
    references
}

/// The repository of an alias: of its pending move's target, else of its current target.
fn alias_repository<'a>(manifest: &'a Manifest, alias: &str) -> Option<&'a str> {
    manifest
        .pending_aliases
        .get(alias)
        .and_then(|pending| manifest.repository_of(&pending.tag))
        .or_else(|| {
            manifest
                .aliases
                .get(alias)
                .and_then(|record| manifest.repository_of(&record.tag))
        })
}

/// What the registry serves for `tag` in `repository`, as far as `served` says.
fn lookup(served: &Served, repository: &str, tag: &str) -> Option<Digest> {
    served
        .get(&Reference {
            repository: repository.to_string(),
            tag: tag.to_string(),
        })
        .cloned()
        .flatten()
}

/// Compares every reference of the manifest with what the registry serves. `served` must hold
/// an answer for each of [`references`]. Findings come images, indexes, aliases, each by name.
pub(crate) fn compare(manifest: &Manifest, served: &Served) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (tag, record) in &manifest.images {
        let Some(recorded) = record
            .digest
            .clone()
            .filter(|_| record.status == RecordStatus::Ok)
        else {
            continue;
        };
        let now = lookup(served, &record.repository, tag);
        let (state, problem) = plain_state(&recorded, &now, "this immutable full tag");
        findings.push(Finding {
            subject: Subject::Image,
            name: tag.clone(),
            repository: Some(record.repository.clone()),
            fix: match state {
                State::Ok => None,
                // Overwritten: the recorded digest goes back under the tag, no rebuild.
                State::Differs => Some(format!(
                    "imagegen restore {tag} (puts the recorded {} back under the tag; if the registry has no such digest, a lost push or a record edited by hand: imagegen build --push --only {tag}, which records the registry's copy when it is this build and refuses other content)",
                    recorded.short()
                )),
                _ => Some(format!("imagegen build --push --only {tag} (pushes it again, or records the registry's copy when it carries this build key; it refuses other content under a full tag)")),
            },
            recorded: Some(recorded),
            served: now,
            state,
            problem,
        });
    }
    for (tag, index) in &manifest.indexes {
        let now = lookup(served, &index.repository, tag);
        let (state, problem) = plain_state(&index.digest, &now, "this index tag");
        findings.push(Finding {
            subject: Subject::Index,
            name: tag.clone(),
            repository: Some(index.repository.clone()),
            recorded: Some(index.digest.clone()),
            served: now,
            fix: (state != State::Ok).then(|| "imagegen publish".to_string()),
            state,
            problem,
        });
    }
    let mut aliases: Vec<&String> = manifest
        .aliases
        .keys()
        .chain(manifest.pending_aliases.keys())
        .collect();
    aliases.sort();
    aliases.dedup();
    for alias in aliases {
        if let Some(finding) = compare_alias(manifest, alias, served) {
            findings.push(finding);
        }
    }
    findings
}

fn plain_state(recorded: &Digest, served: &Option<Digest>, what: &str) -> (State, String) {
    match served {
        Some(digest) if digest == recorded => (State::Ok, String::new()),
        Some(digest) => (
            State::Differs,
            format!("the registry serves {digest} under {what}, the manifest records {recorded}"),
        ),
        None => (
            State::Missing,
            format!("the registry has no such tag; the manifest records {recorded}"),
        ),
    }
}

fn compare_alias(manifest: &Manifest, alias: &str, served: &Served) -> Option<Finding> {
    let recorded = manifest.alias_digest(alias);
    let pending = manifest.pending_aliases.get(alias);
    if recorded.is_none() && pending.is_none() {
        // Moved only locally (a build without --push): no claim about the registry.
        return None;
    }
    let Some(repository) = alias_repository(manifest, alias) else {
        let tag = pending
            .map(|p| p.tag.clone())
            .or_else(|| manifest.aliases.get(alias).map(|a| a.tag.clone()))
            .unwrap_or_default();
        return Some(Finding {
            subject: Subject::Alias,
            name: alias.to_string(),
            repository: None,
            recorded,
            served: None,
            state: State::Unlocated,
            problem: format!(
                "it points at {tag}, which the manifest does not record, so its repository is unknown"
            ),
            fix: Some(format!(
                "imagegen rollback {alias} --to DIGEST (a digest the manifest records), or remove the alias from the manifest"
            )),
        });
    };
    let now = lookup(served, repository, alias);
    let restore = |digest: &Option<Digest>| match digest {
        Some(digest) => format!("imagegen rollback {alias} --to {digest}"),
        None => format!("imagegen build --push (moves {alias} again)"),
    };
    let finding =
        |state: State, recorded: Option<Digest>, problem: String, fix: Option<String>| Finding {
            subject: Subject::Alias,
            name: alias.to_string(),
            repository: Some(repository.to_string()),
            recorded,
            served: now.clone(),
            state,
            problem,
            fix,
        };
    if let Some(pending) = pending {
        return Some(match settle(pending, &now) {
            Settlement::Moved => finding(
                State::PendingMoved,
                Some(pending.to.clone()),
                format!(
                    "a move to {} ({}) was begun by {} at {} and not written down as done; the registry serves its target",
                    pending.to, pending.tag, describe_by(pending), pending.since
                ),
                Some("imagegen verify --adopt (records the move)".to_string()),
            ),
            Settlement::NotMoved => finding(
                State::PendingNotMoved,
                Some(pending.to.clone()),
                format!(
                    "a move to {} ({}) was begun by {} at {} and not written down as done; the registry still serves where it came from",
                    pending.to, pending.tag, describe_by(pending), pending.since
                ),
                Some("imagegen verify --adopt (drops the unfinished move), or imagegen build --push (makes it)".to_string()),
            ),
            Settlement::Elsewhere => finding(
                State::Differs,
                recorded.clone(),
                format!(
                    "a move to {} was begun and not written down as done, and the registry serves {} (neither the move's origin nor its target)",
                    pending.to,
                    served_text(&now)
                ),
                Some(restore(&recorded)),
            ),
        });
    }
    let recorded_digest = recorded.clone()?;
    let (state, problem) = plain_state(&recorded_digest, &now, "this alias");
    // When the image the alias points at is gone from the registry too, a rollback to it cannot
    // work; a build pushes the image again and moves the alias back onto it.
    let target_tag = manifest.aliases.get(alias).map(|a| a.tag.clone());
    let target_gone = target_tag.as_ref().is_some_and(|tag| {
        served.contains_key(&Reference {
            repository: repository.to_string(),
            tag: tag.clone(),
        }) && lookup(served, repository, tag).as_ref() != Some(&recorded_digest)
    });
    let fix = match (state, target_tag) {
        (State::Ok, _) => None,
        (_, Some(tag)) if target_gone => Some(format!(
            "imagegen build --push --only {tag} (the image it points at is not served under its tag either; the build pushes it and moves {alias} onto it)"
        )),
        _ => Some(restore(&recorded)),
    };
    Some(finding(state, recorded.clone(), problem, fix))
}

fn served_text(served: &Option<Digest>) -> String {
    served
        .as_ref()
        .map(Digest::to_string)
        .unwrap_or_else(|| "nothing".into())
}

fn describe_by(pending: &PendingMove) -> String {
    if pending.by.is_empty() {
        "an earlier run".to_string()
    } else {
        pending.by.clone()
    }
}

/// One pending move settled into the manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Adopted {
    pub(crate) alias: String,
    /// The digest the alias points at afterwards (per the registry).
    pub(crate) digest: Option<Digest>,
    /// `moved` (the move was recorded) or `not moved` (the intent was dropped).
    pub(crate) outcome: &'static str,
}

/// The registry's answers `verify` collected, as the registry of the settle loop: `--adopt`
/// settles by what was asked once for the whole comparison. It never moves an alias.
pub(crate) struct Answers<'a>(pub(crate) &'a Served);

impl AliasRegistry for Answers<'_> {
    async fn served(&self, repository: &str, alias: &str) -> anyhow::Result<Option<Digest>> {
        self.0
            .get(&Reference {
                repository: repository.to_string(),
                tag: alias.to_string(),
            })
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the registry was not asked for {repository}:{alias}"))
    }

    async fn point(&self, repository: &str, alias: &str, _: &Digest) -> anyhow::Result<()> {
        anyhow::bail!("verify never moves an alias ({repository}:{alias})")
    }
}

impl Adopted {
    /// What `verify --adopt` reports of the move of `alias` the settle loop
    /// (`history::alias_transaction::settle_leftovers`) looked at: a move recorded as done or
    /// dropped; `None` for one left as it was (a third digest, another run's, already gone).
    pub(crate) fn of(alias: &str, outcome: &SettleOutcome) -> Option<Adopted> {
        match outcome {
            SettleOutcome::Settled(
                settlement @ (Settlement::Moved | Settlement::NotMoved),
                served,
            ) => Some(Adopted {
                alias: alias.to_string(),
                digest: served.clone(),
                outcome: settlement.as_str(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::alias_transaction::settle_one;
    use crate::history::manifest::ImageRecord;

    fn d(label: &str) -> Digest {
        Digest::of(label.as_bytes())
    }

    fn image(tag: &str, digest: Option<Digest>) -> ImageRecord {
        serde_json::from_value(serde_json::json!({
            "repository": "127.0.0.1:5000/t/p", "tag": tag, "digest": digest,
            "fingerprint": d("f"), "build_key": d("k"), "variant": "runtime", "torch": "2.7.1",
            "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9",
            "python": "3.12", "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
            "built_at": "2026-11-30T10:00:00Z", "status": "ok"
        }))
        .unwrap()
    }

    fn reference(tag: &str) -> Reference {
        Reference {
            repository: "127.0.0.1:5000/t/p".into(),
            tag: tag.into(),
        }
    }

    /// Two images (old, new) and an alias at old.
    fn manifest() -> Manifest {
        let mut manifest = Manifest::new();
        manifest.record_success(image("old", Some(d("old"))));
        manifest.record_success(image("new", Some(d("new"))));
        manifest.record_success(image("local", None));
        manifest.move_alias("a", "old", Some(d("old")), "t1");
        manifest
    }

    fn served(entries: &[(&str, Option<Digest>)]) -> Served {
        entries
            .iter()
            .map(|(tag, digest)| (reference(tag), digest.clone()))
            .collect()
    }

    #[test]
    fn references_are_what_the_manifest_claims_was_pushed() {
        let mut manifest = manifest();
        manifest.pending_move("b", "new", &d("new"), "t2", "pid 1");
        let tags: Vec<String> = references(&manifest).into_iter().map(|r| r.tag).collect();
        assert_eq!(
            tags,
            vec!["a", "b", "new", "old"],
            "never-pushed records are not asked about"
        );
    }

    #[test]
    fn agreement_is_ok_and_each_difference_names_its_fix() {
        let manifest = manifest();
        let all_ok = served(&[
            ("old", Some(d("old"))),
            ("new", Some(d("new"))),
            ("a", Some(d("old"))),
        ]);
        let findings = compare(&manifest, &all_ok);
        assert_eq!(findings.len(), 3, "{findings:?}");
        assert!(findings.iter().all(|f| !f.is_drift()));

        let drifted = served(&[
            ("old", Some(d("old"))),
            ("new", Some(d("other"))),
            ("a", Some(d("new"))),
        ]);
        let findings = compare(&manifest, &drifted);
        let of = |name: &str| findings.iter().find(|f| f.name == name).unwrap();
        assert_eq!(of("old").state, State::Ok);
        assert_eq!(of("new").state, State::Differs);
        assert!(
            of("new")
                .fix
                .as_deref()
                .unwrap()
                .starts_with("imagegen restore new (puts the recorded"),
            "an overwritten full tag is restored, not rebuilt"
        );
        assert_eq!(of("a").state, State::Differs);
        assert_eq!(
            of("a").fix.as_deref(),
            Some(format!("imagegen rollback a --to {}", d("old")).as_str()),
            "an alias is restored to what the manifest records"
        );
        assert_eq!(of("a").served, Some(d("new")));
    }

    #[test]
    fn pending_moves_are_settled_by_what_the_registry_serves() {
        let mut begun = manifest();
        begun.pending_move("a", "new", &d("new"), "t2", "pid 7: imagegen build --push");
        assert_eq!(begun.pending_aliases["a"].from, Some(d("old")));

        // The registry made the move: in between, adopt records it.
        let moved = served(&[("a", Some(d("new")))]);
        let finding = compare(&begun, &moved)
            .into_iter()
            .find(|f| f.name == "a")
            .unwrap();
        assert_eq!(finding.state, State::PendingMoved);
        assert!(finding.fix.unwrap().contains("verify --adopt"));
        let mut adopted = begun.clone();
        let settled = settle_one(&mut adopted, "a", &Some(d("new")), "t3");
        assert_eq!(settled, Some(Settlement::Moved));
        assert!(adopted.pending_aliases.is_empty());
        assert_eq!(adopted.aliases["a"].tag, "new");
        assert_eq!(adopted.aliases["a"].digest, Some(d("new")));
        assert_eq!(adopted.aliases["a"].history[0].digest, Some(d("old")));
        assert_eq!(adopted.images["new"].aliases, vec!["a"]);
        let report = Adopted::of(
            "a",
            &SettleOutcome::Settled(Settlement::Moved, Some(d("new"))),
        );
        assert_eq!(report.map(|r| r.outcome), Some("moved"));

        // It did not: the intent is dropped and the alias stays.
        let mut dropped = begun.clone();
        assert_eq!(
            settle_one(&mut dropped, "a", &Some(d("old")), "t3"),
            Some(Settlement::NotMoved)
        );
        assert_eq!(dropped.aliases, manifest().aliases);
        assert!(dropped.pending_aliases.is_empty());

        // Someone else moved it: left for a person, reported as a difference.
        let elsewhere = served(&[("a", Some(d("third")))]);
        let mut untouched = begun.clone();
        assert_eq!(
            settle_one(&mut untouched, "a", &Some(d("third")), "t3"),
            Some(Settlement::Elsewhere)
        );
        assert_eq!(untouched, begun);
        assert!(Adopted::of(
            "a",
            &SettleOutcome::Settled(Settlement::Elsewhere, Some(d("third")))
        )
        .is_none());
        let finding = compare(&begun, &elsewhere)
            .into_iter()
            .find(|f| f.name == "a")
            .unwrap();
        assert_eq!(finding.state, State::Differs);

        // A new alias whose first move never reached the registry.
        let mut first = manifest();
        first.pending_move("b", "new", &d("new"), "t2", "");
        assert_eq!(first.pending_aliases["b"].from, None);
        assert_eq!(
            settle(&first.pending_aliases["b"], &None),
            Settlement::NotMoved
        );
        let finding = compare(&first, &served(&[("b", None)]))
            .into_iter()
            .find(|f| f.name == "b")
            .unwrap();
        assert_eq!(finding.state, State::PendingNotMoved);
    }

    #[test]
    fn an_alias_whose_image_is_gone_too_is_fixed_by_a_build_not_a_rollback() {
        let manifest = manifest();
        let gone = served(&[("old", None), ("new", Some(d("new"))), ("a", None)]);
        let findings = compare(&manifest, &gone);
        let image = findings.iter().find(|f| f.name == "old").unwrap();
        assert_eq!(image.state, State::Missing);
        assert!(image
            .fix
            .as_deref()
            .unwrap()
            .starts_with("imagegen build --push --only old"));
        let finding = findings.iter().find(|f| f.name == "a").unwrap();
        assert_eq!(finding.state, State::Missing);
        assert!(
            finding
                .fix
                .as_deref()
                .unwrap()
                .starts_with("imagegen build --push --only old"),
            "{finding:?}"
        );
    }

    #[test]
    fn an_alias_to_an_unrecorded_tag_cannot_be_located() {
        let mut manifest = manifest();
        manifest.move_alias("keep-me", "x", Some(d("x")), "t1");
        let finding = compare(&manifest, &Served::new())
            .into_iter()
            .find(|f| f.name == "keep-me")
            .unwrap();
        assert_eq!(finding.state, State::Unlocated);
        assert!(finding.is_drift());
    }

    #[test]
    fn aliases_moved_only_locally_make_no_claim() {
        let mut manifest = manifest();
        manifest.move_alias("l", "local", None, "t1");
        assert!(!references(&manifest).iter().any(|r| r.tag == "l"));
        assert!(!compare(&manifest, &Served::new())
            .iter()
            .any(|f| f.name == "l"));
    }
}
