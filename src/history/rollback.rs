//! Rollback: which recorded digest `imagegen rollback` moves an alias to. Pure: the manifest in,
//! a target out; whether anything moves is the alias transaction's decision
//! (`history::alias_transaction::begin`), by what the registry serves.

use anyhow::{anyhow, bail, Result};

use crate::history::manifest::Manifest;
use crate::model::digest::Digest;

/// Where `rollback` moves an alias: a recorded image or index.
#[derive(Debug, Clone, PartialEq)]
pub struct RollbackTarget {
    pub repository: String,
    pub tag: String,
    pub digest: Digest,
}

/// Which recorded digest `rollback` moves `alias` to: `--to` a digest the manifest recorded (an
/// image or a multi-platform index, current or historical), or `--previous` target of the alias.
/// The digest the alias points at now is a valid target too: whether anything moves is
/// the alias transaction's decision, with what the registry serves.
pub fn rollback_target(
    manifest: &Manifest,
    alias: &str,
    to: Option<&Digest>,
    previous: bool,
) -> Result<RollbackTarget> {
    let current = manifest.aliases.get(alias).ok_or_else(|| {
        let known: Vec<&str> = manifest.aliases.keys().map(String::as_str).collect();
        anyhow!(
            "alias {alias} is not in the manifest (it records: {})",
            if known.is_empty() {
                "no aliases".to_string()
            } else {
                known.join(", ")
            }
        )
    })?;
    let digest = match (to, previous) {
        (Some(digest), _) => digest.clone(),
        (None, true) => current
            .history
            .iter()
            .find(|target| target.digest.is_some() && target.digest != current.digest)
            .and_then(|target| target.digest.clone())
            .ok_or_else(|| {
                anyhow!("alias {alias} has no earlier digest in the manifest to go back to")
            })?,
        (None, false) => bail!("say where to: --to DIGEST or --previous"),
    };
    let image = manifest
        .all_records()
        .find(|r| r.digest.as_ref() == Some(&digest))
        .map(|r| RollbackTarget {
            repository: r.repository.clone(),
            tag: r.tag.clone(),
            digest: digest.clone(),
        });
    let index = || {
        manifest
            .indexes
            .values()
            .flat_map(|i| std::iter::once(i).chain(i.history.iter()))
            .find(|i| i.digest == digest)
            .map(|i| RollbackTarget {
                repository: i.repository.clone(),
                tag: i.tag.clone(),
                digest: digest.clone(),
            })
    };
    image.or_else(index).ok_or_else(|| {
        let known: Vec<String> = std::iter::once(current.digest.clone()).chain(current.history.iter().map(|t| t.digest.clone())).flatten().map(|d| d.to_string()).collect();
        anyhow!("digest {digest} is not recorded in the manifest; rollback only goes to digests imagegen built and recorded (this alias has had: {})", known.join(", "))
    })
}
