//! `imagegen restore TAG`: puts the digest the manifest records for a full tag (or an index tag)
//! back under that tag in the registry, by copying the registry's own manifest of that digest
//! (no pull, no rebuild), after someone overwrote or re-pointed the tag. It holds the tag's
//! publish lock (no build of this process's project publishes the tag meanwhile), checks that
//! the registry still has the digest, stores it under the tag, and reads the tag back. The
//! manifest is not changed: it was right.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::RestoreArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::emit;
use crate::commands::signals::Signals;
use crate::docker::{registry_host_of, repository_path_of, Registries, RetryPolicy};
use crate::model::digest::Digest;
use crate::project::{load_existing_manifest, wait_for_lock, ManifestFile, Project};

pub(crate) fn run(_project: &Project, args: &RestoreArgs) -> Result<Outcome> {
    let tag = args.tag.as_str();
    let manifest = load_existing_manifest(&args.manifest)?;
    let (repository, digest) = match (manifest.images().get(tag), manifest.indexes().get(tag)) {
        (Some(record), _) => (
            record.repository.clone(),
            record.digest.clone().ok_or_else(|| {
                anyhow!("{tag} was never pushed (the manifest records no digest for it); nothing to restore\nhint: `imagegen build --push --only {tag}` pushes it")
            })?,
        ),
        (None, Some(index)) => (index.repository.clone(), index.digest.clone()),
        (None, None) if manifest.aliases().contains_key(tag) => bail!(
            "{tag} is an alias, not a full tag\nhint: `imagegen rollback {tag} --to DIGEST` moves an alias"
        ),
        (None, None) => bail!(
            "the manifest {} records no full tag {tag}\nhint: `imagegen verify` lists what it records and what differs",
            args.manifest.display()
        ),
    };
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut signals = Signals::listen();
        tokio::select! {
            received = signals.recv() => {
                eprintln!("{}: stopped; the manifest was not changed", received.name());
                Ok(Outcome::Interrupted(received))
            }
            outcome = restore(&file, tag, &repository, &digest, timeout) => outcome,
        }
    })
}

async fn restore(
    file: &ManifestFile,
    tag: &str,
    repository: &str,
    digest: &Digest,
    timeout: Duration,
) -> Result<Outcome> {
    let start = Instant::now();
    let reference = format!("{repository}:{tag}");
    let _publishing = wait_for_lock(
        &file.publish_lock_path(&reference)?,
        &format!("{reference}, which another run is publishing"),
        file.lock_timeout(),
        |line| eprintln!("{line}"),
    )
    .await?;
    let registries = Registries::new(timeout, RetryPolicy::default());
    let client = registries.client(repository)?;
    let host = registry_host_of(repository);
    let path = repository_path_of(repository);
    let served = client.manifest_digest(path, tag).await?;
    if served.as_ref() == Some(digest) {
        emit(format!(
            "{reference}: the registry already serves the recorded {}; nothing to do\n",
            digest.short()
        ))?;
        return Ok(Outcome::Success);
    }
    let stored = client
        .get_manifest(path, digest.as_str())
        .await?
        .ok_or_else(|| {
            anyhow!(
                "the registry {host} has no {repository}@{digest} (deleted, or a record that never matched a push), so {tag} cannot be restored to it; {tag} was not touched\nhint: `imagegen build --push --only {tag}` repairs the record: it records the image the registry serves under {tag} when that is this build, pushes it again when the tag is gone, and refuses other content under the full tag (do not delete the tag: it may hold the right image)"
            )
        })?;
    let written = client
        .put_manifest(path, tag, &stored.media_type, stored.bytes)
        .await
        .with_context(|| format!("storing {digest} under {reference}"))?;
    let now = client.manifest_digest(path, tag).await?;
    if written != *digest || now.as_ref() != Some(digest) {
        bail!(
            "the registry serves {} under {reference} after {digest} was stored there: another run wrote the tag at the same time",
            now.as_ref().map(Digest::to_string).unwrap_or_else(|| "nothing".into())
        );
    }
    emit(format!(
        "{reference}: {} -> {} (the recorded digest) in {:.1} s, no rebuild; {} unchanged\n",
        served
            .as_ref()
            .map(|d| d.short().to_string())
            .unwrap_or_else(|| "nothing".into()),
        digest.short(),
        start.elapsed().as_secs_f64(),
        file.path.display()
    ))?;
    Ok(Outcome::Success)
}
