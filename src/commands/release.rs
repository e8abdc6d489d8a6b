//! `imagegen release ALIAS...`: clears the holds `imagegen rollback` put on aliases, so builds,
//! tests and publishes may move them again. Only the manifest changes (one transaction); the
//! registry keeps serving the rolled-back digest until the next move.

use std::time::Duration;

use anyhow::{bail, Result};

use crate::cli::ReleaseArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::emit;
use crate::history::ledger::Transaction;
use crate::project::{ManifestFile, Project};

pub(crate) fn run(_project: &Project, args: &ReleaseArgs) -> Result<Outcome> {
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    // Every alias is checked before anything is written: a typo releases nothing.
    let mut transaction = Transaction::begin(&file)?;
    let problems: Vec<String> = args
        .aliases
        .iter()
        .filter_map(|alias| match transaction.manifest().aliases().get(alias) {
            None => Some(format!("{alias} is not in the manifest")),
            Some(record) if record.held.is_none() => {
                Some(format!("{alias} is not held (no rollback holds it)"))
            }
            Some(_) => None,
        })
        .collect();
    if !problems.is_empty() {
        bail!(
            "{}; nothing was released\nhint: `imagegen plan` lists the aliases held",
            problems.join("; ")
        );
    }
    let mut text = String::new();
    for alias in &args.aliases {
        let hold = transaction.release_alias(alias).expect("checked above");
        let record = &transaction.manifest().aliases()[alias];
        text.push_str(&format!(
            "{alias}: released (held at {} ({}) since {}); the next `imagegen build --push` may move it\n",
            record
                .digest
                .as_ref()
                .map(|d| d.short().to_string())
                .unwrap_or_else(|| "-".into()),
            record.tag,
            hold.since
        ));
    }
    transaction.commit()?;
    emit(text)?;
    Ok(Outcome::Success)
}
