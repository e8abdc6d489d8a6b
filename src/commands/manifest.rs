//! `imagegen manifest prune [--keep N] [--apply]`: what `history::prune` drops, said, and written
//! only with `--apply` (one transaction).
//!
//! `imagegen manifest merge A B ... [--out FILE]`: one manifest from several (one per CI shard);
//! the rules are `history::merge`'s. Every input must exist: a missing shard artefact is an
//! error, never an empty manifest. Inputs that conflict (see `history::merge::conflicts`) are
//! reported, nothing is written, and the exit code is 3. With `--out`, the merge is one
//! transaction of the output: its lock is taken first and the inputs are read under it (the
//! output is often one of them), so a concurrent writer is not erased.

use std::time::Duration;

use anyhow::Result;

use crate::cli::{MergeArgs, PruneArgs};
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::history::ledger::Transaction;
use crate::history::manifest::Manifest;
use crate::history::merge::{merge_checked, Conflict};
use crate::history::prune::{prune as pruned, Removed};
use crate::project::{load_existing_manifest, ManifestFile, Project};

/// `imagegen manifest merge A B ... [--out FILE]`.
pub(crate) fn merge(_project: &Project, args: &MergeArgs) -> Result<Outcome> {
    let (inputs, out) = (&args.inputs, args.out.as_deref());
    let read_all = || -> Result<Result<Manifest, Vec<Conflict>>> {
        let manifests = inputs
            .iter()
            .map(|path| load_existing_manifest(path))
            .collect::<Result<Vec<_>>>()?;
        Ok(merge_checked(manifests))
    };
    let report = |conflicts: Vec<Conflict>| {
        note(format!(
            "the manifests conflict ({}); nothing was written:",
            count(conflicts.len(), "conflict")
        ));
        for conflict in &conflicts {
            note(format!("  {conflict}"));
        }
        note("hint: run `imagegen verify --manifest FILE` with each input to see which one the registry agrees with, and merge without the other (or fix it by hand: rollback/restore, then merge again)");
        Outcome::Conflict
    };
    match out {
        Some(path) => {
            let file = ManifestFile::new(path, Duration::from_secs(args.lock.lock_timeout));
            let mut transaction = Transaction::begin(&file)?;
            let merged = match read_all()? {
                Ok(merged) => merged,
                Err(conflicts) => return Ok(report(conflicts)),
            };
            let (images, aliases) = (merged.images().len(), merged.aliases().len());
            transaction.replace(merged);
            transaction.commit()?;
            note(format!(
                "wrote {} ({}, {}, from {})",
                path.display(),
                count(images, "image"),
                count(aliases, "alias"),
                count(inputs.len(), "manifest")
            ));
        }
        None => match read_all()? {
            Ok(merged) => emit(format!("{}\n", serde_json::to_string_pretty(&merged)?))?,
            Err(conflicts) => return Ok(report(conflicts)),
        },
    }
    Ok(Outcome::Success)
}

/// `imagegen manifest prune [--keep N] [--apply]`.
pub(crate) fn prune(args: &PruneArgs) -> Result<Outcome> {
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    // The existing manifest: pruning a missing file is a mistake in the path.
    load_existing_manifest(&args.manifest)?;
    let say = |removed: &[Removed], verb: &str| {
        for record in removed {
            note(format!(
                "{verb} {}{} (built {}): {}",
                record.tag,
                record
                    .digest
                    .as_deref()
                    .map(|d| format!(" {}", &d[..d.len().min(19)]))
                    .unwrap_or_default(),
                record.built_at,
                record.why
            ));
        }
    };
    if args.apply {
        let mut transaction = Transaction::begin(&file)?;
        let removed = transaction.prune(args.keep);
        transaction.commit()?;
        say(&removed, "removed");
        note(format!(
            "{} removed from {}",
            count(removed.len(), "record"),
            args.manifest.display()
        ));
    } else {
        let (_, removed) = pruned(&file.read()?, args.keep);
        say(&removed, "would remove");
        note(format!(
            "{} would be removed from {}; nothing written (--apply writes it)",
            count(removed.len(), "record"),
            args.manifest.display()
        ));
    }
    Ok(Outcome::Success)
}
