//! One alias move, made the one way every command makes it (`build --push` through the
//! executor's journal, `publish`, `rollback`): the steps of `history::alias_transaction`, with the
//! registry calls and the locking between them.
//!
//! 1. Hold the alias's lock (this manifest's `alias-<name>` lock): a second run moving the same
//!    alias waits here until the first is done, or gives up after the lock deadline naming it.
//! 2. Under the manifest's lock, write down the intent (`begin`), before the registry is asked
//!    anything; a move an earlier (dead) run left in between is settled first, by what the
//!    registry serves.
//! 3. Store the target's manifest under the alias unless the registry serves it already, and
//!    read the alias back (`pushed`).
//! 4. Under the manifest's lock, write the move down as done, only if the intent is still this
//!    run's (`record`).
//!
//! Neither the registry nor the manifest is known here: [`AliasRegistry`] (the Docker builder, a
//! registry client) and [`AliasLedger`] (the manifest file, or memory in tests) are.

use std::future::Future;

use anyhow::{Context, Result};

use crate::history::alias_transaction::{begin, settle_one, AliasTarget, Begun, Owner};
use crate::history::manifest::{now_rfc3339, Manifest};
use crate::model::digest::Digest;

/// Kept while something is held (an alias being moved, a tag being published); dropping it lets
/// other runs in.
pub(crate) type Claim = Box<dyn Send + Sync>;

/// The registry side of an alias move.
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

/// The record side of an alias move.
pub(crate) trait AliasLedger: Send + Sync {
    /// Waits until no other run moves `alias` (in this manifest), and keeps others out until the
    /// claim is dropped.
    fn hold_alias(&self, alias: &str) -> impl Future<Output = Result<Claim>> + Send;
    /// Applies `change` to the manifest as it is now, under its lock, and writes it down.
    fn write<T>(&self, change: impl FnOnce(&mut Manifest) -> T) -> Result<T>;
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
    /// Not moved: it would go backwards (the reason).
    Held(String),
}

/// Moves one alias (see the module documentation). An error says what is left: a move written
/// down as pending stays so, for `verify --adopt` or the next run to settle.
pub(crate) async fn move_alias<R, L>(
    registry: &R,
    ledger: &L,
    request: &AliasRequest<'_>,
) -> Result<AliasOutcome>
where
    R: AliasRegistry + ?Sized,
    L: AliasLedger + ?Sized,
{
    let (repository, alias) = (request.repository, request.target.alias);
    let _held = ledger.hold_alias(alias).await?;
    let pending = "the move stays written down as pending (`imagegen verify --adopt` or the next `imagegen build --push` settles it against the registry)";
    let now = now_rfc3339;
    let mut settled = false;
    let transaction = loop {
        match ledger.write(|manifest| begin(manifest, &request.target, request.owner, &now()))? {
            Begun::Move(transaction) => break transaction,
            Begun::Held(reason) => return Ok(AliasOutcome::Held(reason)),
            Begun::Leftover(_) if !settled => {
                // Left by a run that is gone (this run holds the alias's lock): settled by what
                // the registry serves; a third digest stays for a person, and this move replaces it.
                let served = registry.served(repository, alias).await.with_context(|| {
                    format!("cannot ask the registry where {repository}:{alias} points")
                })?;
                ledger.write(|manifest| {
                    if settle_one(manifest, alias, &served, &now()).is_none() {
                        manifest.pending_aliases.remove(alias);
                    }
                })?;
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
    ledger
        .write(|manifest| transaction.record(manifest, &now()))
        .with_context(|| {
            format!("the registry moved {alias}, but the manifest could not record it; {pending}")
        })??;
    Ok(match (there, recorded_before) {
        (true, true) => AliasOutcome::AlreadyThere,
        (true, false) => AliasOutcome::Recorded { from: before },
        (false, _) => AliasOutcome::Moved { from: before },
    })
}

#[cfg(test)]
pub(crate) mod test_support {
    //! An alias registry and ledger in memory, for the tests of the step and of the executor.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Mutex;

    use super::*;

    /// A registry in memory: what each alias serves; aliases in `fail` cannot be stored.
    #[derive(Default)]
    pub(crate) struct MemoryRegistry {
        pub(crate) served: Mutex<BTreeMap<String, Digest>>,
        pub(crate) fail: BTreeSet<String>,
        pub(crate) calls: Mutex<Vec<String>>,
    }

    impl AliasRegistry for MemoryRegistry {
        async fn served(&self, _repository: &str, alias: &str) -> Result<Option<Digest>> {
            Ok(self.served.lock().unwrap().get(alias).cloned())
        }
        async fn point(&self, repository: &str, alias: &str, digest: &Digest) -> Result<()> {
            if self.fail.contains(alias) {
                anyhow::bail!("registry unreachable while moving {alias}");
            }
            self.calls
                .lock()
                .unwrap()
                .push(format!("push {repository}:{alias}"));
            self.served
                .lock()
                .unwrap()
                .insert(alias.to_string(), digest.clone());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::test_support::MemoryRegistry;
    use super::*;

    #[derive(Default)]
    struct MemoryLedger {
        manifest: Mutex<Manifest>,
    }

    impl AliasLedger for MemoryLedger {
        async fn hold_alias(&self, _alias: &str) -> Result<Claim> {
            Ok(Box::new(()))
        }
        fn write<T>(&self, change: impl FnOnce(&mut Manifest) -> T) -> Result<T> {
            Ok(change(&mut self.manifest.lock().unwrap()))
        }
    }

    fn owner() -> Owner {
        Owner {
            run: "r1".into(),
            by: "pid 1".into(),
        }
    }

    #[tokio::test]
    async fn a_move_is_pushed_read_back_and_recorded() {
        let registry = MemoryRegistry::default();
        let ledger = MemoryLedger::default();
        let digest = Digest::of(b"x");
        let owner = owner();
        let request = AliasRequest {
            repository: "r/p",
            target: AliasTarget {
                alias: "latest",
                tag: "t",
                digest: &digest,
                guard_torch: None,
            },
            owner: &owner,
        };
        assert_eq!(
            move_alias(&registry, &ledger, &request).await.unwrap(),
            AliasOutcome::Moved { from: None }
        );
        let manifest = ledger.manifest.lock().unwrap().clone();
        assert!(manifest.pending_aliases.is_empty());
        assert_eq!(manifest.aliases["latest"].digest, Some(digest.clone()));
        assert_eq!(
            move_alias(&registry, &ledger, &request).await.unwrap(),
            AliasOutcome::AlreadyThere
        );
    }

    #[tokio::test]
    async fn a_failed_push_leaves_the_intent_pending() {
        let registry = MemoryRegistry {
            fail: ["latest".to_string()].into(),
            ..Default::default()
        };
        let ledger = MemoryLedger::default();
        let digest = Digest::of(b"x");
        let owner = owner();
        let request = AliasRequest {
            repository: "r/p",
            target: AliasTarget {
                alias: "latest",
                tag: "t",
                digest: &digest,
                guard_torch: None,
            },
            owner: &owner,
        };
        let error = move_alias(&registry, &ledger, &request).await.unwrap_err();
        assert!(format!("{error:#}").contains("stays written down as pending"));
        let manifest = ledger.manifest.lock().unwrap().clone();
        assert_eq!(manifest.pending_aliases["latest"].run, "r1");
        assert!(!manifest.aliases.contains_key("latest"));
    }
}
