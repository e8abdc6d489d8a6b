//! `imagegen rollback`: re-points an alias in the registry to a digest the manifest recorded,
//! through the registry API (no rebuild), and records the move. Which digest is
//! `history::rollback::rollback_target`'s decision; whether anything moves is
//! `rollback_step`'s, by what the registry serves (the registry is the truth about an alias, the
//! manifest may lag after a failed push). Order: the target must exist in the registry (HEAD)
//! before the alias is touched; the move is written down as pending, made, then written down as
//! done, each write under the manifest's lock. SIGINT/SIGTERM stop it between steps.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::RollbackArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, short};
use crate::commands::signals::Signals;
use crate::docker::{registry_host_of, repository_path_of, DockerConfig, RegistryClient};
use crate::history::manifest::now_rfc3339;
use crate::history::rollback::{rollback_step, rollback_target, RollbackStep};
use crate::history::verify::settle_one;
use crate::model::digest::Digest;
use crate::project::{LockHolder, ManifestFile, Project};

pub fn run(_project: &Project, args: &RollbackArgs) -> Result<Outcome> {
    let alias = args.alias.as_str();
    // A value that is not a digest never reaches the registry: it would become a URL path.
    let to = args
        .to
        .as_deref()
        .map(Digest::parse)
        .transpose()
        .context("--to")?;
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let manifest = file.read()?;
    // Checked before the registry is asked anything: the alias and the target must be recorded.
    // With a move of this alias pending, `--previous` is only known once it is settled.
    let repository = match (
        rollback_target(&manifest, alias, to.as_ref(), args.previous),
        manifest.pending_aliases.get(alias),
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
    let host = registry_host_of(repository);
    let credentials = DockerConfig::load_default()?.credentials_for(&host)?;
    let client = RegistryClient::new(&host, credentials).with_timeout(timeout);
    let path = repository_path_of(repository);

    let served = client
        .manifest_digest(path, alias)
        .await?
        .map(|text| Digest::parse(&text))
        .transpose()
        .with_context(|| {
            format!("the registry answered for {repository}:{alias} with a malformed digest")
        })?;
    // A move an earlier run left in between is settled first, by what the registry serves
    // (this writes the manifest only; the registry's alias is not touched).
    let (manifest, settled) = file.update(|manifest| {
        let settled = settle_one(manifest, alias, &served, &now_rfc3339());
        (manifest.clone(), settled)
    })?;
    if let Some(outcome) = settled {
        eprintln!("settled the move of {alias} an earlier run left in between: {outcome}");
    }
    let target = rollback_target(&manifest, alias, to.as_ref(), previous)?;
    let (target_tag, digest) = (target.tag, target.digest);
    let recorded = manifest.alias_digest(alias);

    // The target must exist in the registry before the alias is touched.
    if client
        .manifest_digest(path, digest.as_str())
        .await?
        .is_none()
    {
        bail!(
            "the registry {host} no longer has {repository}@{digest} ({target_tag}); {alias} was not touched\nhint: a digest the registry deleted cannot be restored without a rebuild: `imagegen build --push --only {target_tag}` rebuilds it under its tag (a new digest), then roll back to that"
        );
    }
    let from = served.clone().or(recorded.clone());
    match rollback_step(&digest, recorded.as_ref(), served.as_ref()) {
        RollbackStep::AlreadyThere => {
            bail!("alias {alias} already points at {digest} (in the registry and in the manifest)")
        }
        RollbackStep::RecordOnly => {
            file.update(|manifest| {
                manifest.finish_alias_move(alias, &target_tag, &digest, &now_rfc3339())
            })?;
            emit(format!(
                "{repository}:{alias}: the registry already serves {} ({target_tag}); recorded in {}\n",
                short(&Some(digest.clone())),
                file.path.display()
            ))?;
            return Ok(Outcome::Success);
        }
        RollbackStep::Move => {}
    }
    let stored = client
        .get_manifest(path, digest.as_str())
        .await?
        .ok_or_else(|| {
            anyhow!(
                "the registry {host} no longer has {repository}@{digest}; {alias} was not touched"
            )
        })?;
    let by = LockHolder::this_run();
    file.update(|manifest| {
        manifest.begin_alias_move(alias, &target_tag, &digest, &now_rfc3339(), &by)
    })?;
    let written = client
        .put_manifest(path, alias, &stored.media_type, stored.bytes)
        .await
        .with_context(|| {
            format!("moving {alias} failed; the move stays written down as pending (`imagegen verify --adopt` settles it)")
        })?;
    if written != digest.as_str() {
        bail!("the registry stored {alias} as {written}, not {digest}");
    }
    file.update(|manifest| manifest.finish_alias_move(alias, &target_tag, &digest, &now_rfc3339()))
        .with_context(|| {
            format!("the registry moved {alias}, but the manifest could not record it")
        })?;
    emit(format!(
        "{repository}:{alias}: {} -> {} ({}) in {:.1} s, no rebuild; recorded in {}\n",
        short(&from),
        short(&Some(digest)),
        target_tag,
        start.elapsed().as_secs_f64(),
        file.path.display()
    ))?;
    Ok(Outcome::Success)
}
