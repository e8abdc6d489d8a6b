//! The ledger: the one door through which the manifest changes, modelled on git's ref
//! transactions (`refs.c`: `ref_transaction_begin`, `_update`, `_commit`). A [`Transaction`] is
//! begun on a [`Store`] (the manifest file, `project::ManifestFile`, or [`MemoryStore`]): it
//! takes the record's lock and reads the record as it is now, so another run's records written
//! meanwhile are kept; the caller asks for changes, each a method that keeps the record's tables
//! in step: `record_image` (with the aliases tagged on this host), `note_error`,
//! `record_failure`, `drop_awaiting`, `record_index`, `record_attestation`, `release_alias` and
//! `replace` here; `record_test_result` in `history::test_results` and `prune` in
//! `history::prune`, beside the rules they apply. [`Transaction::commit`] writes the result
//! (atomically, `updated_at` set) when it differs, and the lock goes. A transaction dropped
//! without a commit writes nothing.
//!
//! Outside `history/` the manifest is read only: its tables are private to `history/` and every
//! method that changes it is too, so code elsewhere cannot change a record but through a
//! transaction, and only a transaction can write ([`Store::write`] asks for a [`CommitToken`],
//! which only this module makes). An alias move in a registry spans two transactions with the
//! registry between them (intent, then result); it is `history::alias_transaction`'s, built on
//! this. This module does no I/O of its own: the store does it.

use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex};

use anyhow::Result;
use futures_util::future::BoxFuture;

use crate::history::attestations::AttestationRecord;
use crate::history::manifest::{now_rfc3339, AliasHold, ImageRecord, IndexRecord, Manifest};
use crate::model::digest::Digest;

/// Kept while something is held (the record's lock, an alias being moved, a tag being
/// published); dropping it lets other runs in.
pub(crate) type Claim = Box<dyn Send + Sync>;

/// Where the record lives, and its locks: the manifest file (`project::ManifestFile`), or memory
/// ([`MemoryStore`]). Read it freely; only a [`Transaction`] writes through it.
pub(crate) trait Store: Send + Sync {
    /// The record as it is now; a missing file is an empty record.
    fn read(&self) -> Result<Manifest>;
    /// Takes the record's lock, waiting up to the store's deadline (then an error naming the
    /// holder); dropping the claim lets others in.
    fn lock(&self) -> Result<Claim>;
    /// Writes `manifest` as the record, atomically. Called by [`Transaction::commit`] only,
    /// under the record's lock: no other code can make the [`CommitToken`].
    fn write(&self, manifest: &Manifest, token: CommitToken) -> Result<()>;
    /// Waits until no other run moves `alias` in this record, and keeps others out until the
    /// claim is dropped.
    fn hold_alias<'a>(&'a self, alias: &'a str) -> BoxFuture<'a, Result<Claim>>;
    /// `alias`'s lock when no other run holds it; else who holds it, in words.
    fn try_hold_alias(&self, alias: &str) -> Result<Result<Claim, String>>;
}

/// The proof a [`Store::write`] is a transaction's commit: only this module makes one.
pub(crate) struct CommitToken(());

/// One change of the record, begun under its lock (see the module documentation). It never
/// lives across an `.await` (it is not `Send`): the registry is never asked while the record is
/// locked.
pub(crate) struct Transaction<'s> {
    store: &'s dyn Store,
    _lock: Claim,
    /// The record as read when the transaction began.
    before: Manifest,
    manifest: Manifest,
    /// Written even when unchanged (a merge's output, which must exist afterwards).
    replaced: bool,
    _not_across_awaits: PhantomData<*const ()>,
}

impl<'s> Transaction<'s> {
    /// Takes the record's lock and reads the record as it is now.
    pub(crate) fn begin(store: &'s dyn Store) -> Result<Transaction<'s>> {
        let lock = store.lock()?;
        let manifest = store.read()?;
        Ok(Transaction {
            store,
            _lock: lock,
            before: manifest.clone(),
            manifest,
            replaced: false,
            _not_across_awaits: PhantomData,
        })
    }

    /// The record as this transaction has it: as read under the lock, with its changes so far.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The record to change, for the rest of `history/` (the alias transaction, settling, test
    /// results, pruning).
    pub(in crate::history) fn manifest_mut(&mut self) -> &mut Manifest {
        &mut self.manifest
    }

    /// Writes the record when it changed (its `updated_at` set to now), and lets the lock go.
    pub(crate) fn commit(self) -> Result<()> {
        if self.manifest == self.before && !self.replaced {
            return Ok(());
        }
        let mut written = self.manifest;
        written.updated_at = now_rfc3339();
        self.store.write(&written, CommitToken(()))
    }

    /// Records a good build of `record.tag` (an earlier, different record moves to its history;
    /// the test results of the same digest stay), points each alias of `tagged_here` at it (the
    /// aliases a run without `--push` tagged on this host; a push's moves are recorded by the
    /// alias transaction as they are made), and drops from every image's awaiting aliases those
    /// that point at it now.
    pub(crate) fn record_image(&mut self, record: ImageRecord, tagged_here: &[String], at: &str) {
        let (tag, digest) = (record.tag.clone(), record.digest.clone());
        self.manifest.record_success(record);
        for alias in tagged_here {
            self.manifest.move_alias(alias, &tag, digest.clone(), at);
        }
        self.manifest.drop_awaiting_moved();
    }

    /// Notes `error` beside the current record of `tag` (a build pushed, then failed), if any.
    pub(crate) fn note_error(&mut self, tag: &str, error: &str) {
        if let Some(image) = self.manifest.images.get_mut(tag) {
            image.last_error = Some(error.to_string());
        }
    }

    /// Records a failed build of `record.tag`: a good record stays, with the error beside it;
    /// only an image never built gets a `failed` record.
    pub(crate) fn record_failure(&mut self, record: ImageRecord, error: &str) {
        self.manifest.record_failure(record, error);
    }

    /// The record of `tag` at `digest` no longer awaits `alias` (moved, or held for good).
    pub(crate) fn drop_awaiting(&mut self, tag: &str, digest: &Digest, alias: &str) {
        if let Some(image) = self
            .manifest
            .images
            .get_mut(tag)
            .filter(|record| record.digest.as_ref() == Some(digest))
        {
            image.awaiting_aliases.retain(|a| a != alias);
        }
    }

    /// Records a published index; an earlier, different one under its tag moves to its history.
    pub(crate) fn record_index(&mut self, index: IndexRecord) {
        self.manifest.record_index(index);
    }

    /// Records the attestations pushed for `digest` (a later signing replaces an earlier one).
    pub(crate) fn record_attestation(&mut self, digest: Digest, attestation: AttestationRecord) {
        self.manifest.attestations.insert(digest, attestation);
    }

    /// Clears the hold a rollback put on `alias`; the hold it had, if any.
    pub(crate) fn release_alias(&mut self, alias: &str) -> Option<AliasHold> {
        self.manifest.release_alias(alias)
    }

    /// The record becomes `manifest` (the merge of CI shards' manifests, `history::merge`),
    /// written even when it is the same.
    pub(crate) fn replace(&mut self, manifest: Manifest) {
        self.manifest = manifest;
        self.replaced = true;
    }
}

/// A record in memory, with the same locks: the store of tests, and of what a dry run shows
/// (`build --dry-run --release-holds` releases holds in what it prints only).
pub(crate) struct MemoryStore {
    manifest: Mutex<Manifest>,
    locked: Arc<(Mutex<bool>, Condvar)>,
}

/// The lock of a [`MemoryStore`], let go when dropped.
struct MemoryLock(Arc<(Mutex<bool>, Condvar)>);

impl Drop for MemoryLock {
    fn drop(&mut self) {
        let (locked, released) = &*self.0;
        *locked.lock().expect("memory lock") = false;
        released.notify_one();
    }
}

impl Default for MemoryStore {
    /// An empty record.
    fn default() -> MemoryStore {
        MemoryStore::new(Manifest::new())
    }
}

impl MemoryStore {
    pub(crate) fn new(manifest: Manifest) -> MemoryStore {
        MemoryStore {
            manifest: Mutex::new(manifest),
            locked: Arc::default(),
        }
    }

    /// The record as it is now.
    pub(crate) fn manifest(&self) -> Manifest {
        self.manifest.lock().expect("memory store").clone()
    }
}

impl Store for MemoryStore {
    fn read(&self) -> Result<Manifest> {
        Ok(self.manifest())
    }

    fn lock(&self) -> Result<Claim> {
        let (locked, released) = &*self.locked;
        let mut held = locked.lock().expect("memory lock");
        while *held {
            held = released.wait(held).expect("memory lock");
        }
        *held = true;
        Ok(Box::new(MemoryLock(Arc::clone(&self.locked))))
    }

    fn write(&self, manifest: &Manifest, _: CommitToken) -> Result<()> {
        *self.manifest.lock().expect("memory store") = manifest.clone();
        Ok(())
    }

    fn hold_alias<'a>(&'a self, _alias: &'a str) -> BoxFuture<'a, Result<Claim>> {
        Box::pin(async { Ok(Box::new(()) as Claim) })
    }

    fn try_hold_alias(&self, _alias: &str) -> Result<Result<Claim, String>> {
        Ok(Ok(Box::new(())))
    }
}

/// Changes `manifest` through one transaction in memory: how tests outside `history/` make the
/// records they start from.
#[cfg(test)]
pub(crate) fn changed(manifest: Manifest, change: impl FnOnce(&mut Transaction)) -> Manifest {
    let updated_at = manifest.updated_at.clone();
    let store = MemoryStore::new(manifest);
    let mut transaction = Transaction::begin(&store).expect("a memory store");
    change(&mut transaction);
    transaction.commit().expect("a memory store");
    // As it was: tests compare records, not write times.
    let mut manifest = store.manifest();
    manifest.updated_at = updated_at;
    manifest
}

/// A pushed runtime image's record under `tag`, its digest made from `digest`, built at
/// `built_at`: the record the ledger's tests (here and in `project`) write.
#[cfg(test)]
pub(crate) fn sample_record(tag: &str, digest: &str, built_at: &str) -> ImageRecord {
    serde_json::from_value(serde_json::json!({
        "repository": "r/p", "tag": tag, "digest": Digest::of(digest.as_bytes()),
        "fingerprint": Digest::of(b"f"), "build_key": Digest::of(b"k"), "variant": "runtime",
        "torch": "2.7.1", "torchvision": "0.22.1", "cuda": "12.6", "cuda_full": "12.6.3",
        "cudnn": "9", "python": "3.12", "os": "ubuntu24.04", "base_image": "b",
        "driver_min": "560.35.05", "driver_min_compat": "525.60.13",
        "require_cuda": "cuda>=12.6", "built_at": built_at, "status": "ok"
    }))
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(tag: &str, digest: &str) -> ImageRecord {
        sample_record(tag, digest, "t0")
    }

    #[test]
    fn a_commit_writes_what_changed_and_a_dropped_transaction_nothing() {
        let store = MemoryStore::default();
        let mut transaction = Transaction::begin(&store).unwrap();
        transaction.record_image(image("a", "1"), &[], "t1");
        drop(transaction);
        assert_eq!(store.manifest(), Manifest::new(), "not committed: nothing");

        let mut transaction = Transaction::begin(&store).unwrap();
        transaction.record_image(image("a", "1"), &["latest".into()], "t1");
        transaction.commit().unwrap();
        let written = store.manifest();
        assert!(!written.updated_at.is_empty(), "every write says when");
        assert_eq!(written.aliases()["latest"].tag, "a");
        assert_eq!(written.images()["a"].aliases, vec!["latest"]);

        // Nothing changed: nothing written (the time stays).
        let before = store.manifest();
        let mut transaction = Transaction::begin(&store).unwrap();
        transaction.record_image(image("a", "1"), &["latest".into()], "t2");
        transaction.commit().unwrap();
        assert_eq!(store.manifest(), before);
    }

    #[test]
    fn a_transaction_reads_under_the_lock_so_another_runs_records_stay() {
        let store = Arc::new(MemoryStore::default());
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let mut transaction = Transaction::begin(&*store).unwrap();
                    transaction.record_image(image(&format!("t{n}"), "d"), &[], "t1");
                    transaction.commit().unwrap();
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(store.manifest().images().len(), 8);
    }

    #[test]
    fn a_replacement_is_written_even_when_it_is_the_same() {
        struct Counting(MemoryStore, Mutex<usize>);
        impl Store for Counting {
            fn read(&self) -> Result<Manifest> {
                self.0.read()
            }
            fn lock(&self) -> Result<Claim> {
                self.0.lock()
            }
            fn write(&self, manifest: &Manifest, token: CommitToken) -> Result<()> {
                *self.1.lock().unwrap() += 1;
                self.0.write(manifest, token)
            }
            fn hold_alias<'a>(&'a self, alias: &'a str) -> BoxFuture<'a, Result<Claim>> {
                self.0.hold_alias(alias)
            }
            fn try_hold_alias(&self, alias: &str) -> Result<Result<Claim, String>> {
                self.0.try_hold_alias(alias)
            }
        }
        let store = Counting(MemoryStore::default(), Mutex::new(0));
        let mut transaction = Transaction::begin(&store).unwrap();
        transaction.replace(Manifest::new());
        transaction.commit().unwrap();
        assert_eq!(*store.1.lock().unwrap(), 1);
    }
}
