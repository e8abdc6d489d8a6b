//! `imagegen manifest merge A B ... [--out FILE]`: one manifest from several (one per CI shard);
//! the rules are `history::merge`'s. Every input must exist: a missing shard artefact is an
//! error, never an empty manifest. With `--out`, the output's lock is taken first and the inputs
//! are read under it (the output is often one of them), so a concurrent writer is not erased.

use std::time::Duration;

use anyhow::Result;

use crate::cli::MergeArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::history::manifest::Manifest;
use crate::history::merge::merge_all;
use crate::project::{load_existing_manifest, save_manifest, ManifestFile, Project};

/// `imagegen manifest merge A B ... [--out FILE]`.
pub fn merge(_project: &Project, args: &MergeArgs) -> Result<Outcome> {
    let (inputs, out) = (&args.inputs, args.out.as_deref());
    let read_all = || -> Result<Manifest> {
        let manifests = inputs
            .iter()
            .map(|path| load_existing_manifest(path))
            .collect::<Result<Vec<_>>>()?;
        Ok(merge_all(manifests))
    };
    match out {
        Some(path) => {
            let file = ManifestFile::new(path, Duration::from_secs(args.lock.lock_timeout));
            let _lock = file.lock()?;
            let merged = read_all()?;
            save_manifest(path, &merged)?;
            note(format!(
                "wrote {} ({}, {}, from {})",
                path.display(),
                count(merged.images.len(), "image"),
                count(merged.aliases.len(), "alias"),
                count(inputs.len(), "manifest")
            ));
        }
        None => emit(format!("{}\n", serde_json::to_string_pretty(&read_all()?)?))?,
    }
    Ok(Outcome::Success)
}
