//! `imagegen rollback`: re-points an alias in the registry to a digest the manifest recorded,
//! through the registry API (no rebuild), and records the move. Which digest is
//! `history::rollback::rollback_target`'s decision.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use crate::cli::RollbackArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, short};
use crate::docker::{registry_host_of, repository_path_of, DockerConfig, RegistryClient};
use crate::history::manifest::now_rfc3339;
use crate::history::rollback::rollback_target;
use crate::model::digest::Digest;
use crate::project::{load_manifest, save_manifest, Project};

pub fn run(_project: &Project, args: &RollbackArgs) -> Result<Outcome> {
    let (alias, previous, manifest_path) =
        (args.alias.as_str(), args.previous, args.manifest.as_path());
    // A value that is not a digest never reaches the registry: it would become a URL path.
    let to = args
        .to
        .as_deref()
        .map(Digest::parse)
        .transpose()
        .context("--to")?;
    let mut manifest = load_manifest(manifest_path)?;
    let target = rollback_target(&manifest, alias, to.as_ref(), previous)?;
    let (repository, target_tag, digest) = (target.repository, target.tag, target.digest);
    let from = manifest.aliases[alias].clone();
    let start = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let host = registry_host_of(&repository);
        let credentials = DockerConfig::load_default()?.credentials_for(&host)?;
        let client = RegistryClient::new(&host, credentials);
        let path = repository_path_of(&repository);
        let stored = client
            .get_manifest(path, digest.as_str())
            .await?
            .ok_or_else(|| anyhow!("the registry {host} no longer has {repository}@{digest}; it cannot be restored without a rebuild"))?;
        let written = client.put_manifest(path, alias, &stored.media_type, stored.bytes).await?;
        if written != digest.as_str() {
            bail!("the registry stored {alias} as {written}, not {digest}");
        }
        Ok::<_, anyhow::Error>(())
    })?;
    manifest.move_alias(alias, &target_tag, Some(digest.clone()), &now_rfc3339());
    save_manifest(manifest_path, &manifest).with_context(|| {
        format!("the registry moved {alias}, but the manifest could not record it")
    })?;
    emit(format!(
        "{repository}:{alias}: {} ({}) -> {} ({}) in {:.1} s, no rebuild; recorded in {}\n",
        short(&from.digest),
        from.tag,
        short(&Some(digest)),
        target_tag,
        start.elapsed().as_secs_f64(),
        manifest_path.display()
    ))?;
    Ok(Outcome::Success)
}
