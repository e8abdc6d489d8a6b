//! The alias transaction: the one home of an alias move in a registry, modelled on git's ref
//! transactions (begin, update, commit). Every command that moves an alias (`build --push`,
//! `publish`, `rollback`, `test`) calls [`move_alias`], and every command that settles moves left
//! in between (`build --push`, `rollback`, `verify --adopt`, and [`move_alias`] itself) calls
//! [`settle_leftovers`] or its step. The registry is an [`AliasRegistry`], the record a
//! `history::ledger::Store`; each manifest step is one `history::ledger::Transaction`:
//!
//! 1. Hold the alias's lock: a second run moving the same alias waits here until the first is
//!    done, or gives up after the lock deadline naming it.
//! 2. Intent (`begin`): under the manifest's lock, the never-backwards guard is applied (when
//!    the caller asks for it) and the move is written down as pending, carrying its owner's run
//!    id: state [`TxState::Intent`]. A move an earlier (dead) run left in between is settled
//!    first, by what the registry serves.
//! 3. Pushed (`AliasTransaction::pushed`): the registry was asked to store the alias (unless it
//!    served the target already) and, read back, serves the target: state [`TxState::Pushed`].
//! 4. Recorded (`AliasTransaction::record`): under the manifest's lock, the move is written
//!    down as done and the intent dropped — only when the pending move is still this
//!    transaction's own. A move someone else began or recorded meanwhile is never overwritten:
//!    it is refused, naming who. State [`TxState::Recorded`].
//!
//! A crash leaves the manifest in a state the next run finishes or undoes: after 2, a pending
//! move the registry either made (recorded by the next settle) or did not (dropped); after 3, the
//! same; after 4, nothing pending. The state machine is pure (values and manifest changes out);
//! only [`move_alias`] and the settle loop ask the registry, through the trait.

use anyhow::{Context, Result};
use serde::Serialize;

use std::future::Future;

use crate::history::aliases::alias_guard;
use crate::history::ledger::{Store, Transaction};
use crate::history::manifest::{now_rfc3339, AliasHold, Extra, Manifest, PendingMove};
use crate::model::digest::Digest;
use crate::model::version::TorchText;

/// Where a transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TxState {
    /// The intent is written down as pending; the registry was not asked yet (or did not answer).
    Intent,
    /// The registry serves the target under the alias; the manifest does not say so yet.
    Pushed,
    /// The manifest records the move as done.
    Recorded,
}

/// What a move is for: the alias, where it goes, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AliasTarget<'a> {
    pub(crate) alias: &'a str,
    /// The full tag (or index tag) the alias moves to.
    pub(crate) tag: &'a str,
    pub(crate) digest: &'a Digest,
    /// The torch release of the target, for the never-backwards guard; `None` for a move made
    /// on purpose (`rollback`), which the guard does not hold and which, once recorded, holds
    /// the alias there (see [`Manifest::alias_hold`]) until `imagegen release`.
    pub(crate) guard_torch: Option<&'a TorchText>,
}

/// Who moves: a run id unique to one process (`commands::ledger::RunId`), and the words
/// people read (`pid 4242 (imagegen rollback ...)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) run: String,
    pub(crate) by: String,
}

/// One alias move under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AliasTransaction {
    pub(crate) alias: String,
    pub(crate) tag: String,
    /// Where the manifest said the alias pointed when the move began (`None`: a new alias).
    pub(crate) from: Option<Digest>,
    pub(crate) to: Digest,
    pub(crate) owner: Owner,
    pub(crate) state: TxState,
    /// The manifest already recorded the alias at the target when the move began.
    pub(crate) recorded_before: bool,
}

/// What `begin` decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Begun {
    /// The intent is written down: make the move in the registry, then
    /// `AliasTransaction::pushed` and `AliasTransaction::record`.
    Move(AliasTransaction),
    /// A move of this alias that another run began is still pending. The caller holds the
    /// alias's lock, so that run is gone: settle it first (`settle_held`, by what the
    /// registry serves), then begin again. Nothing was written.
    Leftover(PendingMove),
    /// It may not move: it would go backwards. Nothing was written.
    Held(String),
}

/// Why a transaction could not go on. Each names the alias and what is there instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TxError {
    #[error("the registry serves {served} for {alias} after it was asked to store {to}: another run moved it at the same time; nothing was recorded (the move stays pending; `imagegen verify` shows it)")]
    NotServed {
        alias: String,
        to: Digest,
        served: String,
    },
    #[error("the move of {alias} to {to} is no longer this run's: {other}; nothing was overwritten\nhint: `imagegen verify` compares the manifest with the registry")]
    NotOwned {
        alias: String,
        to: Digest,
        other: String,
    },
    #[error("a transaction of {alias} is {state:?}, not {expected:?}")]
    OutOfOrder {
        alias: String,
        state: TxState,
        expected: TxState,
    },
}

/// Begins the move of `target.alias` by `owner`: the never-backwards guard (when the caller
/// asks for it), then the intent, written down as a pending move from where the manifest says
/// the alias points. Nothing is asked of the registry before the intent is written.
fn begin(manifest: &mut Manifest, target: &AliasTarget<'_>, owner: &Owner, now: &str) -> Begun {
    if let Some(pending) = manifest.pending_aliases.get(target.alias) {
        if pending.run != owner.run || pending.run.is_empty() {
            return Begun::Leftover(pending.clone());
        }
    }
    if let Some(torch) = target.guard_torch {
        // A rollback holds the alias: a move by a build, a test or a publish waits for a release.
        if let Some(reason) = manifest.alias_hold(target.alias) {
            return Begun::Held(reason);
        }
        if let Some(reason) = alias_guard(
            target.alias,
            manifest.alias_target(target.alias),
            torch,
            target.tag,
        ) {
            return Begun::Held(reason);
        }
    }
    let from = manifest.alias_digest(target.alias);
    let already = manifest
        .aliases
        .get(target.alias)
        .is_some_and(|a| a.tag == target.tag && from.as_ref() == Some(target.digest));
    manifest.pending_aliases.insert(
        target.alias.to_string(),
        PendingMove {
            tag: target.tag.to_string(),
            from: from.clone(),
            to: target.digest.clone(),
            since: now.to_string(),
            by: owner.by.clone(),
            run: owner.run.clone(),
            hold: target.guard_torch.is_none(),
            extra: Extra::new(),
        },
    );
    Begun::Move(AliasTransaction {
        alias: target.alias.to_string(),
        tag: target.tag.to_string(),
        from,
        to: target.digest.clone(),
        owner: owner.clone(),
        state: TxState::Intent,
        recorded_before: already,
    })
}

impl AliasTransaction {
    /// The registry was asked to store the alias, and read back it serves `served`: the move is
    /// made when that is the target.
    fn pushed(mut self, served: &Option<Digest>) -> Result<AliasTransaction, TxError> {
        self.expect(TxState::Intent)?;
        if served.as_ref() != Some(&self.to) {
            return Err(TxError::NotServed {
                alias: self.alias,
                to: self.to,
                served: served
                    .as_ref()
                    .map(Digest::to_string)
                    .unwrap_or_else(|| "nothing".into()),
            });
        }
        self.state = TxState::Pushed;
        Ok(self)
    }

    /// Writes the move down as done, when the pending move in `manifest` (as it is now, read
    /// under its lock) is still this transaction's. Someone else's pending move, or a record of
    /// the alias somewhere else with nothing pending, is refused and left as it is. A record
    /// that already says what this move did (a `verify --adopt` meanwhile) is fine.
    fn record(mut self, manifest: &mut Manifest, now: &str) -> Result<AliasTransaction, TxError> {
        self.expect(TxState::Pushed)?;
        match manifest.pending_aliases.get(&self.alias) {
            Some(pending) if pending.run == self.owner.run && pending.to == self.to => {
                let pending = manifest
                    .pending_aliases
                    .remove(&self.alias)
                    .expect("matched above");
                record_move(manifest, &self.alias, &pending, now);
            }
            Some(pending) => {
                return Err(TxError::NotOwned {
                    other: format!(
                        "{} began a move to {} ({}) at {}",
                        if pending.by.is_empty() {
                            "another run"
                        } else {
                            pending.by.as_str()
                        },
                        pending.to,
                        pending.tag,
                        pending.since
                    ),
                    alias: self.alias,
                    to: self.to,
                })
            }
            None => {
                let there = manifest
                    .aliases
                    .get(&self.alias)
                    .is_some_and(|a| a.digest.as_ref() == Some(&self.to));
                if !there {
                    let now_at = manifest
                        .aliases
                        .get(&self.alias)
                        .map(|a| {
                            format!(
                                "the manifest records it at {} ({}) since {}",
                                a.digest
                                    .as_ref()
                                    .map(Digest::to_string)
                                    .unwrap_or_else(|| "no digest".into()),
                                a.tag,
                                a.moved_at
                            )
                        })
                        .unwrap_or_else(|| "the manifest no longer records it".into());
                    return Err(TxError::NotOwned {
                        alias: self.alias,
                        to: self.to,
                        other: now_at,
                    });
                }
            }
        }
        self.state = TxState::Recorded;
        Ok(self)
    }

    fn expect(&self, expected: TxState) -> Result<(), TxError> {
        if self.state == expected {
            Ok(())
        } else {
            Err(TxError::OutOfOrder {
                alias: self.alias.clone(),
                state: self.state,
                expected,
            })
        }
    }
}

/// Writes a pending move down as done; a rollback's (`hold`) holds the alias there.
fn record_move(manifest: &mut Manifest, alias: &str, pending: &PendingMove, now: &str) {
    manifest.move_alias(alias, &pending.tag, Some(pending.to.clone()), now);
    if pending.hold {
        if let Some(record) = manifest.aliases.get_mut(alias) {
            record.held = Some(AliasHold {
                since: now.to_string(),
                from: pending.from.clone(),
                by: pending.by.clone(),
            });
        }
    }
}

/// What became of an alias move left in between, by what the registry serves for the alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// The registry serves the move's target.
    Moved,
    /// The registry serves the move's origin (or, for a new alias, nothing).
    NotMoved,
    /// The registry serves something else: someone else moved it.
    Elsewhere,
}

impl Settlement {
    /// `moved`, `not moved`, `elsewhere`: as `verify --adopt` reports it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Settlement::Moved => "moved",
            Settlement::NotMoved => "not moved",
            Settlement::Elsewhere => "elsewhere",
        }
    }
}

/// Settles one pending move by what the registry serves for its alias.
pub(crate) fn settle(pending: &PendingMove, served: &Option<Digest>) -> Settlement {
    if served.as_ref() == Some(&pending.to) {
        Settlement::Moved
    } else if *served == pending.from {
        Settlement::NotMoved
    } else {
        Settlement::Elsewhere
    }
}

/// Settles the pending move of `alias` (if any) by what the registry serves for it: a move the
/// registry made is recorded as done (at `now`), one it did not make is dropped, and one whose
/// alias it serves at a third digest stays, for a person. `None` when nothing is pending.
pub(in crate::history) fn settle_one(
    manifest: &mut Manifest,
    alias: &str,
    served: &Option<Digest>,
    now: &str,
) -> Option<Settlement> {
    let pending = manifest.pending_aliases.get(alias)?.clone();
    let settlement = settle(&pending, served);
    match settlement {
        Settlement::Moved => {
            manifest.pending_aliases.remove(alias);
            record_move(manifest, alias, &pending, now);
        }
        Settlement::NotMoved => {
            manifest.pending_aliases.remove(alias);
        }
        Settlement::Elsewhere => {}
    }
    Some(settlement)
}

/// The registry side of an alias move: the Docker builder, a registry client, what `verify`
/// asked, or memory in tests.
pub(crate) trait AliasRegistry: Send + Sync {
    /// What the registry serves for `repository:alias` now; `None` when there is no such tag.
    fn served(
        &self,
        repository: &str,
        alias: &str,
    ) -> impl Future<Output = Result<Option<Digest>>> + Send;
    /// Stores under `repository:alias` exactly the manifest that `digest` names (already in the
    /// registry), so the alias serves that digest.
    fn point(
        &self,
        repository: &str,
        alias: &str,
        digest: &Digest,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// One move to make.
#[derive(Debug, Clone)]
pub(crate) struct AliasRequest<'a> {
    pub(crate) repository: &'a str,
    pub(crate) target: AliasTarget<'a>,
    pub(crate) owner: &'a Owner,
}

/// What came of a move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AliasOutcome {
    /// The registry moved it and the manifest records it.
    Moved { from: Option<Digest> },
    /// The registry already served the target; only the manifest was brought in line.
    Recorded { from: Option<Digest> },
    /// Registry and manifest both already had it there.
    AlreadyThere,
    /// Not moved: it would go backwards, or a rollback holds it (the reason).
    Held(String),
}

/// Moves one alias (see the module documentation). An error says what is left: a move written
/// down as pending stays so, for `verify --adopt` or the next run to settle.
pub(crate) async fn move_alias<R: AliasRegistry + ?Sized>(
    registry: &R,
    store: &dyn Store,
    request: &AliasRequest<'_>,
) -> Result<AliasOutcome> {
    let (repository, alias) = (request.repository, request.target.alias);
    let _held = store.hold_alias(alias).await?;
    let pending = "the move stays written down as pending (`imagegen verify --adopt` or the next `imagegen build --push` settles it against the registry)";
    let mut settled = false;
    let transaction = loop {
        let mut ledger = Transaction::begin(store)?;
        let begun = begin(
            ledger.manifest_mut(),
            &request.target,
            request.owner,
            &now_rfc3339(),
        );
        ledger.commit()?;
        match begun {
            Begun::Move(transaction) => break transaction,
            Begun::Held(reason) => return Ok(AliasOutcome::Held(reason)),
            Begun::Leftover(_) if !settled => {
                // Left by a run that is gone (this run holds the alias's lock): settled by what
                // the registry serves; a third digest stays for a person, and this move replaces it.
                settle_held(registry, store, repository, alias, Elsewhere::Replace).await?;
                settled = true;
            }
            Begun::Leftover(leftover) => anyhow::bail!(
                "the move of {alias} that {} began stays pending after it was settled",
                leftover.by
            ),
        }
    };
    let before = registry.served(repository, alias).await.with_context(|| {
        format!("cannot ask the registry where {repository}:{alias} points; {pending}")
    })?;
    let there = before.as_ref() == Some(&transaction.to);
    if !there {
        registry
            .point(repository, alias, &transaction.to)
            .await
            .with_context(|| format!("moving {alias} to {} failed; {pending}", transaction.to))?;
    }
    let served = registry.served(repository, alias).await.with_context(|| {
        format!("cannot read {repository}:{alias} back after moving it; {pending}")
    })?;
    let recorded_before = transaction.recorded_before;
    let transaction = transaction.pushed(&served)?;
    let recorded = (|| {
        let mut ledger = Transaction::begin(store)?;
        let recorded = transaction.record(ledger.manifest_mut(), &now_rfc3339());
        ledger.commit()?;
        anyhow::Ok(recorded)
    })()
    .with_context(|| {
        format!("the registry moved {alias}, but the manifest could not record it; {pending}")
    })?;
    recorded?;
    Ok(match (there, recorded_before) {
        (true, true) => AliasOutcome::AlreadyThere,
        (true, false) => AliasOutcome::Recorded { from: before },
        (false, _) => AliasOutcome::Moved { from: before },
    })
}

/// What a settle does with a move whose alias the registry serves at a third digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elsewhere {
    /// Leave it pending, for a person (`imagegen verify` names it).
    Keep,
    /// Drop it: the caller's own move replaces it.
    Replace,
}

/// Settles the pending move of `alias`, whose lock the caller holds, by what the registry serves
/// for it now: asked first, then written under the manifest's lock against the pending move as
/// it is then. What the registry served and what came of it; `None` when nothing was pending.
async fn settle_held<R: AliasRegistry + ?Sized>(
    registry: &R,
    store: &dyn Store,
    repository: &str,
    alias: &str,
    elsewhere: Elsewhere,
) -> Result<Option<(Settlement, Option<Digest>)>> {
    let served = registry
        .served(repository, alias)
        .await
        .with_context(|| format!("cannot ask the registry where {repository}:{alias} points"))?;
    let mut ledger = Transaction::begin(store)?;
    let manifest = ledger.manifest_mut();
    let settlement = settle_one(manifest, alias, &served, &now_rfc3339());
    if settlement == Some(Settlement::Elsewhere) && elsewhere == Elsewhere::Replace {
        manifest.pending_aliases.remove(alias);
    }
    ledger.commit()?;
    Ok(settlement.map(|settlement| (settlement, served)))
}

/// One move left in between that [`settle_leftovers`] looked at, and what came of it.
#[derive(Debug)]
pub(crate) struct Settled {
    pub(crate) alias: String,
    /// The move as it was pending when the loop began.
    pub(crate) pending: PendingMove,
    pub(crate) outcome: Result<SettleOutcome>,
}

/// What the settle loop did with one move left in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SettleOutcome {
    /// Settled by what the registry serves (the digest, or nothing): recorded as moved,
    /// dropped as not moved, or (elsewhere) left for a person.
    Settled(Settlement, Option<Digest>),
    /// Another live run holds the alias's lock: the move is that run's to finish (who holds it).
    Busy(String),
    /// Nothing was pending any more once the alias's lock was held: another run settled it.
    Gone,
}

/// The one settle loop: each alias move left in between (begun, not written down as done) whose
/// alias and repository `wanted` selects is settled by what `registry` serves for the alias,
/// under the alias's lock (a move whose alias another live run holds is left to that run) and,
/// for the write, the manifest's. Moves whose target the manifest does not locate in a
/// repository are not looked at. Each move comes back with what came of it.
pub(crate) async fn settle_leftovers<R: AliasRegistry + ?Sized>(
    registry: &R,
    store: &dyn Store,
    wanted: impl Fn(&str, &str) -> bool,
) -> Result<Vec<Settled>> {
    let manifest = store.read()?;
    let mut settled = Vec::new();
    for (alias, pending) in manifest.pending_aliases() {
        let Some(repository) = manifest
            .repository_of(&pending.tag)
            .filter(|repository| wanted(alias, repository))
        else {
            continue;
        };
        let outcome = async {
            match store.try_hold_alias(alias)? {
                Err(holder) => Ok(SettleOutcome::Busy(holder)),
                Ok(_held) => Ok(
                    match settle_held(registry, store, repository, alias, Elsewhere::Keep).await? {
                        Some((settlement, served)) => SettleOutcome::Settled(settlement, served),
                        None => SettleOutcome::Gone,
                    },
                ),
            }
        }
        .await;
        settled.push(Settled {
            alias: alias.clone(),
            pending: pending.clone(),
            outcome,
        });
    }
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ledger::MemoryStore;
    use crate::history::manifest::ImageRecord;

    fn d(label: &str) -> Digest {
        Digest::of(label.as_bytes())
    }

    fn image(tag: &str, torch: &str) -> ImageRecord {
        serde_json::from_value(serde_json::json!({
            "repository": "r/p", "tag": tag, "digest": d(tag), "fingerprint": d("f"),
            "build_key": d("k"), "variant": "runtime", "torch": torch, "torchvision": "0.22.1",
            "cuda": "12.6", "cuda_full": "12.6.3", "cudnn": "9", "python": "3.12",
            "os": "ubuntu24.04", "base_image": "b", "driver_min": "560.35.05",
            "driver_min_compat": "525.60.13", "require_cuda": "cuda>=12.6",
            "built_at": "t0", "status": "ok"
        }))
        .unwrap()
    }

    fn manifest() -> Manifest {
        let mut manifest = Manifest::new();
        manifest.record_success(image("old", "2.7.0"));
        manifest.record_success(image("new", "2.7.1"));
        manifest.move_alias("a", "old", Some(d("old")), "t0");
        manifest
    }

    fn owner(run: &str) -> Owner {
        Owner {
            run: run.into(),
            by: format!("pid 1 (run {run})"),
        }
    }

    /// The torch releases of the test targets, read as a build reads its image's.
    fn torch_271() -> &'static TorchText {
        static TORCH: std::sync::OnceLock<TorchText> = std::sync::OnceLock::new();
        TORCH.get_or_init(|| TorchText::from("2.7.1"))
    }

    fn torch_270() -> &'static TorchText {
        static TORCH: std::sync::OnceLock<TorchText> = std::sync::OnceLock::new();
        TORCH.get_or_init(|| TorchText::from("2.7.0"))
    }

    fn to_new(guard: bool) -> AliasTarget<'static> {
        static NEW: std::sync::OnceLock<Digest> = std::sync::OnceLock::new();
        AliasTarget {
            alias: "a",
            tag: "new",
            digest: NEW.get_or_init(|| d("new")),
            guard_torch: guard.then_some(torch_271()),
        }
    }

    #[test]
    fn a_rollback_holds_the_alias_until_it_is_released() {
        let mut manifest = manifest();
        let Begun::Move(tx) = begin(&mut manifest, &to_new(false), &owner("r1"), "t1") else {
            panic!("a move")
        };
        assert!(manifest.pending_aliases["a"].hold);
        tx.pushed(&Some(d("new")))
            .unwrap()
            .record(&mut manifest, "t2")
            .unwrap();
        let held = manifest.aliases["a"].held.clone().expect("held");
        assert_eq!((held.since.as_str(), held.from), ("t2", Some(d("old"))));
        // A build's move (guarded) is held, naming the command that releases it; nothing written.
        let before = manifest.clone();
        let back = AliasTarget {
            alias: "a",
            tag: "old",
            digest: &d("old"),
            guard_torch: Some(torch_271()),
        };
        let Begun::Held(reason) = begin(&mut manifest, &back, &owner("r2"), "t3") else {
            panic!("held")
        };
        assert!(reason.contains("imagegen release a"), "{reason}");
        assert!(reason.contains("rolled back"), "{reason}");
        assert_eq!(manifest, before);
        // A second rollback keeps it held; a release lets builds move it again.
        manifest.move_alias("a", "old", Some(d("old")), "t4");
        assert!(manifest.aliases["a"].held.is_some());
        assert!(manifest.release_alias("a").is_some());
        assert!(matches!(
            begin(&mut manifest, &back, &owner("r2"), "t5"),
            Begun::Move(_)
        ));
    }

    #[test]
    fn a_record_whose_torch_cannot_be_compared_refuses_the_move_naming_it() {
        // `2` is a version the manifest reads, but not a torch release the guard can compare.
        let mut manifest = Manifest::new();
        manifest.record_success(image("odd", "2"));
        manifest.record_success(image("new", "2.7.1"));
        manifest.move_alias("a", "odd", Some(d("odd")), "t0");
        let before = manifest.clone();
        let Begun::Held(reason) = begin(&mut manifest, &to_new(true), &owner("r1"), "t1") else {
            panic!("a move from a record the guard cannot compare must be held")
        };
        assert!(
            reason.contains("a cannot be judged: the record of odd names a torch release that cannot be compared")
                && reason.contains("`2` is not a valid torch version")
                && reason.contains("imagegen rollback a --to DIGEST"),
            "{reason}"
        );
        assert_eq!(manifest, before, "nothing is written for a held move");
        // A move on purpose (a rollback) is not guarded, and goes through.
        assert!(matches!(
            begin(&mut manifest, &to_new(false), &owner("r1"), "t2"),
            Begun::Move(_)
        ));
    }

    #[test]
    fn a_rollback_settled_after_a_crash_holds_the_alias_too() {
        let mut manifest = manifest();
        let Begun::Move(_) = begin(&mut manifest, &to_new(false), &owner("dead"), "t1") else {
            panic!("a move")
        };
        assert_eq!(
            settle_one(&mut manifest, "a", &Some(d("new")), "t2"),
            Some(Settlement::Moved)
        );
        assert!(manifest.aliases["a"].held.is_some());
    }

    #[test]
    fn intent_pushed_recorded() {
        let mut manifest = manifest();
        let Begun::Move(tx) = begin(&mut manifest, &to_new(true), &owner("r1"), "t1") else {
            panic!("a move")
        };
        assert_eq!(tx.state, TxState::Intent);
        assert_eq!(manifest.pending_aliases["a"].run, "r1");
        assert_eq!(manifest.pending_aliases["a"].from, Some(d("old")));
        assert_eq!(manifest.aliases["a"].tag, "old", "intent moves nothing");
        let tx = tx.pushed(&Some(d("new"))).unwrap();
        let tx = tx.record(&mut manifest, "t2").unwrap();
        assert_eq!(tx.state, TxState::Recorded);
        assert!(manifest.pending_aliases.is_empty());
        assert_eq!(manifest.aliases["a"].digest, Some(d("new")));
        assert_eq!(manifest.images["new"].aliases, vec!["a"]);
    }

    #[test]
    fn a_move_not_served_after_the_push_is_not_recorded() {
        let mut manifest = manifest();
        let Begun::Move(tx) = begin(&mut manifest, &to_new(true), &owner("r1"), "t1") else {
            panic!("a move")
        };
        let error = tx.pushed(&Some(d("third"))).unwrap_err();
        assert!(matches!(error, TxError::NotServed { .. }), "{error}");
    }

    #[test]
    fn record_refuses_a_move_it_does_not_own() {
        let mut manifest = manifest();
        let Begun::Move(first) = begin(&mut manifest, &to_new(false), &owner("r1"), "t1") else {
            panic!("a move")
        };
        // A second run (holding no lock: an older imagegen, a hand edit) began its own move.
        let back = AliasTarget {
            alias: "a",
            tag: "old",
            digest: &d("old"),
            guard_torch: None,
        };
        let mut other = manifest.clone();
        other.pending_aliases.clear();
        let Begun::Move(_) = begin(&mut other, &back, &owner("r2"), "t2") else {
            panic!("a move")
        };
        let before = other.clone();
        let error = first
            .pushed(&Some(d("new")))
            .unwrap()
            .record(&mut other, "t3")
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("no longer this run's: pid 1 (run r2) began a move to"),
            "{error}"
        );
        assert_eq!(other, before, "nothing overwritten");
    }

    #[test]
    fn a_record_that_already_says_so_is_fine_and_another_is_refused() {
        let mut manifest = manifest();
        let Begun::Move(tx) = begin(&mut manifest, &to_new(true), &owner("r1"), "t1") else {
            panic!("a move")
        };
        let tx = tx.pushed(&Some(d("new"))).unwrap();
        let mut adopted = manifest.clone();
        settle_one(&mut adopted, "a", &Some(d("new")), "t2");
        assert!(tx.clone().record(&mut adopted, "t3").is_ok());
        let mut elsewhere = manifest.clone();
        elsewhere.pending_aliases.clear();
        elsewhere.move_alias("a", "x", Some(d("x")), "t2");
        let error = tx.record(&mut elsewhere, "t3").unwrap_err().to_string();
        assert!(error.contains("the manifest records it at"), "{error}");
    }

    #[test]
    fn begin_hands_back_leftovers_and_holds_backwards_moves() {
        let mut manifest = manifest();
        // A move a dead run left pending, which the registry made.
        manifest.pending_aliases.insert(
            "a".into(),
            PendingMove {
                tag: "new".into(),
                from: Some(d("old")),
                to: d("new"),
                since: "t0".into(),
                by: "pid 9".into(),
                run: "dead".into(),
                hold: false,
                extra: Extra::new(),
            },
        );
        let back = AliasTarget {
            alias: "a",
            tag: "old",
            digest: &d("old"),
            guard_torch: Some(torch_270()),
        };
        let before = manifest.clone();
        let Begun::Leftover(leftover) = begin(&mut manifest, &back, &owner("r1"), "t1") else {
            panic!("the leftover first")
        };
        assert_eq!(leftover.run, "dead");
        assert_eq!(manifest, before, "nothing written");
        assert_eq!(
            settle_one(&mut manifest, "a", &Some(d("new")), "t1"),
            Some(Settlement::Moved)
        );
        let held = begin(&mut manifest, &back, &owner("r1"), "t1");
        assert!(
            matches!(held, Begun::Held(ref why) if why.contains("backwards")),
            "{held:?}"
        );
        assert!(
            manifest.pending_aliases.is_empty(),
            "a held move writes nothing"
        );
        let Begun::Move(tx) = begin(&mut manifest, &to_new(true), &owner("r1"), "t2") else {
            panic!("a move")
        };
        assert!(tx.recorded_before, "the manifest already records it there");
    }

    #[test]
    fn steps_out_of_order_are_refused() {
        let mut manifest = manifest();
        let Begun::Move(tx) = begin(&mut manifest, &to_new(true), &owner("r1"), "t1") else {
            panic!("a move")
        };
        assert!(matches!(
            tx.record(&mut manifest, "t2"),
            Err(TxError::OutOfOrder { .. })
        ));
    }

    /// A registry in memory: what each alias serves; aliases in `fail` cannot be stored.
    #[derive(Default)]
    struct MemoryRegistry {
        served: std::sync::Mutex<std::collections::BTreeMap<String, Digest>>,
        fail: std::collections::BTreeSet<String>,
    }

    impl AliasRegistry for MemoryRegistry {
        async fn served(&self, _repository: &str, alias: &str) -> Result<Option<Digest>> {
            Ok(self.served.lock().unwrap().get(alias).cloned())
        }
        async fn point(&self, _repository: &str, alias: &str, digest: &Digest) -> Result<()> {
            if self.fail.contains(alias) {
                anyhow::bail!("registry unreachable while moving {alias}");
            }
            self.served
                .lock()
                .unwrap()
                .insert(alias.to_string(), digest.clone());
            Ok(())
        }
    }

    fn request<'a>(digest: &'a Digest, owner: &'a Owner) -> AliasRequest<'a> {
        AliasRequest {
            repository: "r/p",
            target: AliasTarget {
                alias: "latest",
                tag: "t",
                digest,
                guard_torch: None,
            },
            owner,
        }
    }

    #[tokio::test]
    async fn a_move_is_pushed_read_back_and_recorded() {
        let registry = MemoryRegistry::default();
        let store = MemoryStore::default();
        let (digest, owner) = (d("x"), owner("r1"));
        let request = request(&digest, &owner);
        assert_eq!(
            move_alias(&registry, &store, &request).await.unwrap(),
            AliasOutcome::Moved { from: None }
        );
        let manifest = store.manifest();
        assert!(manifest.pending_aliases.is_empty());
        assert_eq!(manifest.aliases["latest"].digest, Some(digest.clone()));
        assert_eq!(
            move_alias(&registry, &store, &request).await.unwrap(),
            AliasOutcome::AlreadyThere
        );
    }

    #[tokio::test]
    async fn a_failed_push_leaves_the_intent_pending() {
        let registry = MemoryRegistry {
            fail: ["latest".to_string()].into(),
            ..Default::default()
        };
        let store = MemoryStore::default();
        let (digest, owner) = (d("x"), owner("r1"));
        let error = move_alias(&registry, &store, &request(&digest, &owner))
            .await
            .unwrap_err();
        assert!(format!("{error:#}").contains("stays written down as pending"));
        let manifest = store.manifest();
        assert_eq!(manifest.pending_aliases["latest"].run, "r1");
        assert!(!manifest.aliases.contains_key("latest"));
    }

    #[tokio::test]
    async fn a_leftover_is_settled_before_the_move_and_replaced_when_served_elsewhere() {
        // A dead run's move the registry made: recorded, then this move goes on from there.
        let mut begun = manifest();
        begun.pending_move("a", "new", &d("new"), "t1", "dead");
        let store = MemoryStore::new(begun.clone());
        let registry = MemoryRegistry::default();
        registry.served.lock().unwrap().insert("a".into(), d("new"));
        let me = owner("r1");
        let back = AliasRequest {
            repository: "r/p",
            target: AliasTarget {
                alias: "a",
                tag: "old",
                digest: &d("old"),
                guard_torch: None,
            },
            owner: &me,
        };
        let outcome = move_alias(&registry, &store, &back).await.unwrap();
        assert_eq!(
            outcome,
            AliasOutcome::Moved {
                from: Some(d("new"))
            }
        );
        let manifest = store.manifest();
        assert_eq!(manifest.aliases["a"].history[0].digest, Some(d("new")));
        assert!(manifest.pending_aliases.is_empty());

        // Served at a third digest: the leftover is dropped, this move replaces it.
        let store = MemoryStore::new(begun);
        registry
            .served
            .lock()
            .unwrap()
            .insert("a".into(), d("third"));
        let outcome = move_alias(&registry, &store, &back).await.unwrap();
        assert_eq!(
            outcome,
            AliasOutcome::Moved {
                from: Some(d("third"))
            }
        );
        assert!(store.manifest().pending_aliases.is_empty());
    }

    #[tokio::test]
    async fn the_settle_loop_settles_what_it_is_asked_and_leaves_a_third_digest() {
        let mut begun = manifest();
        begun.pending_move("a", "new", &d("new"), "t1", "dead");
        begun.pending_move("b", "new", &d("new"), "t1", "dead");
        begun.pending_move("c", "new", &d("new"), "t1", "dead");
        let store = MemoryStore::new(begun);
        let registry = MemoryRegistry::default();
        registry.served.lock().unwrap().insert("a".into(), d("new"));
        registry
            .served
            .lock()
            .unwrap()
            .insert("b".into(), d("third"));
        let settled = settle_leftovers(&registry, &store, |alias, repository| {
            alias != "c" && repository == "r/p"
        })
        .await
        .unwrap();
        let outcomes: Vec<(&str, &SettleOutcome)> = settled
            .iter()
            .map(|s| (s.alias.as_str(), s.outcome.as_ref().unwrap()))
            .collect();
        assert_eq!(
            outcomes,
            vec![
                (
                    "a",
                    &SettleOutcome::Settled(Settlement::Moved, Some(d("new")))
                ),
                (
                    "b",
                    &SettleOutcome::Settled(Settlement::Elsewhere, Some(d("third")))
                ),
            ]
        );
        let manifest = store.manifest();
        assert_eq!(manifest.aliases["a"].digest, Some(d("new")));
        assert_eq!(
            manifest.pending_aliases.keys().collect::<Vec<_>>(),
            vec!["b", "c"],
            "a third digest is left for a person, an alias not asked for is left alone"
        );
    }
}
