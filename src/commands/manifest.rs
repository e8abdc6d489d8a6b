//! `imagegen manifest merge A B ... [--out FILE]`: one manifest from several (one per CI shard);
//! the rules are `history::merge`'s.

use anyhow::Result;

use crate::cli::MergeArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, note};
use crate::history::merge::merge_all;
use crate::project::{load_manifest, save_manifest, Project};

/// `imagegen manifest merge A B ... [--out FILE]`.
pub fn merge(_project: &Project, args: &MergeArgs) -> Result<Outcome> {
    let (inputs, out) = (&args.inputs, args.out.as_deref());
    let manifests = inputs
        .iter()
        .map(|path| load_manifest(path))
        .collect::<Result<Vec<_>>>()?;
    let merged = merge_all(manifests);
    match out {
        Some(path) => {
            save_manifest(path, &merged)?;
            note(format!(
                "wrote {} ({}, {}, from {})",
                path.display(),
                count(merged.images.len(), "image"),
                count(merged.aliases.len(), "alias"),
                count(inputs.len(), "manifest")
            ));
        }
        None => emit(format!("{}\n", serde_json::to_string_pretty(&merged)?))?,
    }
    Ok(Outcome::Success)
}
