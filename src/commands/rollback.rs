//! `imagegen rollback`: re-points an alias in the registry to a digest the manifest recorded,
//! through the registry API (no rebuild), and records the move. Which digest is
//! `history::rollback::rollback_target`'s decision, on the manifest with a move of the alias left
//! in between settled first (the settle loop of `history::alias_transaction`); whether anything
//! moves is the alias transaction's, by what the registry serves (the registry is the truth about
//! an alias, the manifest may lag after a failed push). Order: the target must exist in the
//! registry (HEAD) before the alias is touched; then the move is
//! `history::alias_transaction::move_alias`'s (under the alias's lock: a second rollback of the
//! alias waits for the first).
//! SIGINT/SIGTERM stop it between steps.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::RollbackArgs;
use crate::commands::ledger::this_owner;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, short};
use crate::commands::signals::Signals;
use crate::docker::{registry_host_of, repository_path_of, Registries, RetryPolicy};
use crate::history::alias_transaction::{
    move_alias, settle_leftovers, AliasOutcome, AliasRequest, AliasTarget, SettleOutcome,
    Settlement,
};
use crate::history::rollback::{recorded_digest, rollback_target};
use crate::model::digest::Digest;
use crate::pipeline::docker_builder::RegistryAliases;
use crate::project::{ManifestFile, Project};

pub(crate) fn run(_project: &Project, args: &RollbackArgs) -> Result<Outcome> {
    let alias = args.alias.as_str();
    // A value that is not a digest never reaches the registry: it would become a URL path.
    // A prefix (`sha256:1ac1a03ff572`, as tables print it) names the one recorded digest it starts.
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let manifest = file.read()?;
    let to = args
        .to
        .as_deref()
        .map(|text| recorded_digest(&manifest, text))
        .transpose()
        .context("--to")?;
    // Checked before the registry is asked anything: the alias and the target must be recorded.
    // With a move of this alias pending, `--previous` is only known once it is settled.
    let repository = match (
        rollback_target(&manifest, alias, to.as_ref(), args.previous),
        manifest.pending_aliases().get(alias),
    ) {
        (Ok(target), _) => target.repository,
        (Err(_), Some(pending)) if to.is_none() => manifest
            .repository_of(&pending.tag)
            .map(String::from)
            .ok_or_else(|| {
                anyhow!(
                    "the pending move of {alias} points at {}, which the manifest does not record",
                    pending.tag
                )
            })?,
        (Err(error), _) => return Err(error),
    };
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut signals = Signals::listen();
        tokio::select! {
            received = signals.recv() => {
                eprintln!(
                    "{}: stopped; anything begun is written down in {} (`imagegen verify` shows it, `imagegen verify --adopt` settles it)",
                    received.name(),
                    file.path.display()
                );
                Ok(Outcome::Interrupted(received))
            }
            outcome = roll_back(&file, alias, &repository, (to, args.previous), timeout) => outcome,
        }
    })
}

async fn roll_back(
    file: &ManifestFile,
    alias: &str,
    repository: &str,
    (to, previous): (Option<Digest>, bool),
    timeout: Duration,
) -> Result<Outcome> {
    let start = Instant::now();
    let registries = Registries::new(timeout, RetryPolicy::default());
    let aliases = RegistryAliases(&registries);
    let host = registry_host_of(repository);

    // Which digest: judged on the manifest with a move left in between settled by what the
    // registry serves (one another live run is making is left to it: the move waits for it).
    for settled in settle_leftovers(&aliases, file, |wanted, _| wanted == alias).await? {
        if let SettleOutcome::Settled(settlement @ (Settlement::Moved | Settlement::NotMoved), _) =
            settled.outcome?
        {
            eprintln!(
                "settled the move of {alias} an earlier run left in between: {}",
                settlement.as_str()
            );
        }
    }
    let target = rollback_target(&file.read()?, alias, to.as_ref(), previous)?;
    let (target_tag, digest) = (target.tag, target.digest);

    // The target must exist in the registry before the alias is touched.
    let client = registries.client(repository)?;
    if client
        .manifest_digest(repository_path_of(repository), digest.as_str())
        .await?
        .is_none()
    {
        bail!(
            "the registry {host} no longer has {repository}@{digest} ({target_tag}); {alias} was not touched\nhint: a digest the registry deleted cannot be restored without a rebuild: `imagegen build --push --only {target_tag}` rebuilds it under its tag (a new digest), then roll back to that"
        );
    }
    let owner = this_owner();
    let request = AliasRequest {
        repository,
        target: AliasTarget {
            alias,
            tag: &target_tag,
            digest: &digest,
            // Going back is on purpose: the never-backwards guard does not hold a rollback.
            guard_torch: None,
        },
        owner: &owner,
    };
    match move_alias(&aliases, file, &request).await? {
        AliasOutcome::AlreadyThere => {
            bail!("alias {alias} already points at {digest} (in the registry and in the manifest)")
        }
        AliasOutcome::Recorded { .. } => {
            emit(format!(
                "{repository}:{alias}: the registry already serves {} ({target_tag}); recorded in {}\n",
                short(&Some(digest.clone())),
                file.path.display()
            ))?;
        }
        AliasOutcome::Moved { from } => {
            emit(format!(
                "{repository}:{alias}: {} -> {} ({}) in {:.1} s, no rebuild; recorded in {}\n",
                short(&from),
                short(&Some(digest)),
                target_tag,
                start.elapsed().as_secs_f64(),
                file.path.display()
            ))?;
        }
        AliasOutcome::Held(reason) => bail!("{reason}"),
    }
    Ok(Outcome::Success)
}
