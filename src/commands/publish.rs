//! `imagegen publish`: with several platforms, pushes an OCI image index per full tag (assembled
//! by `generate::oci_index` from the per-platform digests the manifest recorded) through the
//! registry's HTTP API (the Docker Engine API cannot create indexes), and moves its aliases.
//!
//! It refuses an index when a platform the matrix promises is missing, stale, failed, or (without
//! `--allow-untested`) untested, and says which. Aliases move only when every platform passed its
//! self-test, and never backwards; each move is `history::alias_transaction::move_alias`'s, the one alias
//! transaction. Every manifest write (the index, each alias move before and after) is a locked
//! read-change-write; SIGINT/SIGTERM stop it between steps.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::attest::dsse::Signer;
use crate::cli::PublishArgs;
use crate::commands::attest;
use crate::commands::ledger::this_owner;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, note, table};
use crate::commands::signals::Signals;
use crate::commands::stages::resolve_project;
use crate::docker::{registry_host_of, repository_path_of, Registries, RetryPolicy};
use crate::generate::oci_index::{
    index_document, index_readiness, split_platform, IndexEntry, IndexPlatform, ReadyPlatform,
    MEDIA_TYPE_OCI_INDEX,
};
use crate::history::alias_transaction::{move_alias, AliasOutcome, AliasRequest, AliasTarget};
use crate::history::ledger::Transaction;
use crate::history::manifest::{now_rfc3339, IndexRecord, PlatformImage};
use crate::model::digest::Digest;
use crate::pipeline::docker_builder::RegistryAliases;
use crate::project::{ManifestFile, Project};
use crate::resolve::image::{ImageSpec, ResolveOptions};

pub(crate) fn run(project: &Project, args: &PublishArgs) -> Result<Outcome> {
    let (manifest_path, allow_untested, dry_run) =
        (args.manifest.as_path(), args.allow_untested, args.dry_run);
    let resolution = resolve_project(project, ResolveOptions::default())?;
    if !project.matrix()?.multi_platform() {
        emit("the matrix builds linux/amd64 only: `imagegen build --push` publishes its images and aliases; there are no indexes to assemble\n")?;
        return Ok(Outcome::Success);
    }
    // A key is read (and refused when others may read it) before anything is pushed.
    let signing = attest::load_signer(&args.signing)?
        .map(|signer| (signer, attest::SignContext::of(project)));
    let file = ManifestFile::new(manifest_path, Duration::from_secs(args.lock.lock_timeout));
    let manifest = file.read()?;
    let timeout = Duration::from_secs(args.deadlines.registry_timeout);
    let mut groups: BTreeMap<String, Vec<&ImageSpec>> = BTreeMap::new();
    for spec in &resolution.images {
        if let Some(index) = &spec.index {
            groups.entry(index.clone()).or_default().push(spec);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut rows = vec![["INDEX", "RESULT", "DIGEST", "PLATFORMS", "ALIASES"]
        .map(String::from)
        .to_vec()];
    let mut refused = Vec::new();
    let mut signals = runtime.block_on(async { Signals::listen() });
    for (index_tag, platform_images) in &groups {
        let ready = match index_readiness(
            platform_images,
            &manifest,
            &project.matrix()?.tests.require,
            allow_untested,
        ) {
            Ok(ready) => ready,
            Err(problems) => {
                rows.push(vec![
                    index_tag.clone(),
                    "refused".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
                refused.push((index_tag.clone(), problems));
                continue;
            }
        };
        let platforms = ready
            .iter()
            .map(|r| r.platform.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if dry_run {
            rows.push(vec![
                index_tag.clone(),
                "ready".into(),
                "-".into(),
                platforms,
                platform_images[0].aliases.join(", "),
            ]);
            continue;
        }
        let spec = platform_images[0];
        let published = runtime.block_on(async {
            tokio::select! {
                received = signals.recv() => Err(received),
                outcome = publish_one(spec, index_tag, &ready, &file, timeout, signing.as_ref()) => Ok(outcome),
            }
        });
        let outcome = match published {
            Ok(outcome) => outcome?,
            Err(received) => {
                emit(table(&rows))?;
                note(format!(
                    "{}: stopped before {index_tag} was done; what was published is recorded in {} (`imagegen verify` shows anything left in between, `imagegen publish` finishes)",
                    received.name(),
                    manifest_path.display()
                ));
                return Ok(Outcome::Interrupted(received));
            }
        };
        rows.push(vec![
            index_tag.clone(),
            outcome.result,
            outcome.digest.short().to_string(),
            platforms,
            outcome.aliases,
        ]);
    }
    emit(table(&rows))?;
    for (index_tag, problems) in &refused {
        note(format!("refused to publish {index_tag}:"));
        for problem in problems {
            note(format!("  {problem}"));
        }
    }
    if !refused.is_empty() {
        note("hint: build and test the missing platforms (or pass --allow-untested to publish images whose self-test was skipped), then run `imagegen publish` again");
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Success)
}

struct Published {
    result: String,
    digest: Digest,
    aliases: String,
}

async fn publish_one(
    spec: &ImageSpec,
    index_tag: &str,
    ready: &[ReadyPlatform],
    file: &ManifestFile,
    timeout: Duration,
    signing: Option<&(Signer, attest::SignContext)>,
) -> Result<Published> {
    let registries = Registries::new(timeout, RetryPolicy::default());
    let host = registry_host_of(&spec.repository);
    let client = registries.client(&spec.repository)?;
    let path = repository_path_of(&spec.repository);
    let mut entries = Vec::new();
    for platform in ready {
        let child = client
            .get_manifest(path, platform.digest.as_str())
            .await?
            .ok_or_else(|| {
                anyhow!(
                    "{}: the registry {host} no longer has {}@{}",
                    platform.platform,
                    spec.repository,
                    platform.digest
                )
            })?;
        let (os, architecture) = split_platform(&platform.platform);
        entries.push(IndexEntry {
            media_type: child.media_type,
            digest: platform.digest.clone(),
            size: child.bytes.len() as u64,
            platform: IndexPlatform { architecture, os },
        });
    }
    let document = index_document(entries);
    let digest = Digest::of(&document);
    let existing = client.manifest_digest(path, index_tag).await?;
    let result = match existing {
        Some(current) if current == digest => "unchanged".to_string(),
        Some(current) => anyhow::bail!(
            "refusing to publish {}:{index_tag}: the registry already has this tag as {current}, and the platform images now give {digest}; full tags are immutable\nhint: publish a rebuild under a new tag (a revision suffix in tags.full)",
            spec.repository
        ),
        None => {
            let written = client.put_manifest(path, index_tag, MEDIA_TYPE_OCI_INDEX, document.clone()).await?;
            if written != digest {
                anyhow::bail!("the registry stored {index_tag} as {written}, expected {digest}");
            }
            "published".to_string()
        }
    };
    let now = now_rfc3339();
    let index = IndexRecord {
        repository: spec.repository.clone(),
        tag: index_tag.to_string(),
        digest: digest.clone(),
        media_type: MEDIA_TYPE_OCI_INDEX.to_string(),
        torch: spec.torch.text().clone(),
        driver_min: spec.driver_min.clone(),
        platforms: ready
            .iter()
            .map(|r| {
                (
                    r.platform.clone(),
                    PlatformImage {
                        tag: r.tag.clone(),
                        digest: r.digest.clone(),
                    },
                )
            })
            .collect(),
        aliases: Vec::new(),
        published_at: now.clone(),
        history: Vec::new(),
        extra: Default::default(),
    };
    let mut transaction = Transaction::begin(file)?;
    transaction.record_index(index.clone());
    transaction.commit()?;
    // Signed before any alias moves to it, as `build --push` signs an image before its aliases.
    if let Some((signer, context)) = signing {
        let current = file.read()?;
        let attested = attest::attest_index(&registries, signer, &current, &index, context)
            .await
            .with_context(|| format!("signing {}:{index_tag}", spec.repository))?;
        note(format!(
            "{}:{index_tag}: signed index {digest} (gpu-selftest {}): {}",
            spec.repository, attested.gpu_selftest, attested.attestations.tag
        ));
        let mut transaction = Transaction::begin(file)?;
        transaction.record_attestation(digest.clone(), attested);
        transaction.commit()?;
    }
    let owner = this_owner();
    let aliases_registry = RegistryAliases(&registries);
    let mut moved = Vec::new();
    let mut held = Vec::new();
    let all_passed = ready.iter().all(|r| r.passed);
    for alias in &spec.aliases {
        if !all_passed {
            held.push(format!("{alias} (not every platform passed its self-test)"));
            continue;
        }
        // Judged against the manifest as it is now, and written down before the move.
        let request = AliasRequest {
            repository: &spec.repository,
            target: AliasTarget {
                alias,
                tag: index_tag,
                digest: &digest,
                guard_torch: Some(&spec.torch),
            },
            owner: &owner,
        };
        match move_alias(&aliases_registry, file, &request)
            .await
            .with_context(|| format!("moving {alias} to {index_tag}"))?
        {
            AliasOutcome::Held(reason) => held.push(format!("{alias} ({reason})")),
            AliasOutcome::AlreadyThere => {}
            AliasOutcome::Moved { .. } | AliasOutcome::Recorded { .. } => moved.push(alias.clone()),
        }
    }
    let mut aliases = String::new();
    if !moved.is_empty() {
        aliases.push_str(&format!("moved: {}", moved.join(", ")));
    }
    if !held.is_empty() {
        aliases.push_str(&format!(
            "{}held: {}",
            if aliases.is_empty() { "" } else { "; " },
            held.join(", ")
        ));
    }
    if aliases.is_empty() {
        aliases.push('-');
    }
    Ok(Published {
        result,
        digest,
        aliases,
    })
}
