//! Rollback: which recorded digest `imagegen rollback` moves an alias to. Pure: the manifest in,
//! a target out; whether anything moves is the alias transaction's decision
//! (`history::alias_transaction::begin`), by what the registry serves.

use anyhow::{anyhow, bail, Result};

use crate::history::manifest::Manifest;
use crate::model::digest::Digest;

/// Where `rollback` moves an alias: a recorded image or index.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RollbackTarget {
    pub(crate) repository: String,
    pub(crate) tag: String,
    pub(crate) digest: Digest,
}

/// Which recorded digest `rollback` moves `alias` to: `--to` a digest the manifest recorded (an
/// image or a multi-platform index, current or historical), or `--previous` target of the alias.
/// The digest the alias points at now is a valid target too: whether anything moves is
/// the alias transaction's decision, with what the registry serves.
/// Why `alias` cannot be rolled back when the manifest records no alias of that name: the aliases
/// it is closest to (a typo), or, when none has moved yet, that aliases move only after a passing
/// GPU self-test, and which wait for one.
fn unknown_alias(manifest: &Manifest, alias: &str) -> anyhow::Error {
    let mut waiting: Vec<&str> = Vec::new();
    for alias in manifest
        .images
        .values()
        .flat_map(|record| record.awaiting_aliases.iter().map(String::as_str))
    {
        if !waiting.contains(&alias) {
            waiting.push(alias);
        }
    }
    if manifest.aliases.is_empty() {
        let mut message = format!(
            "alias {alias} is not in the manifest, which records no alias yet: an alias moves only after its image passed a self-test on GPUs"
        );
        if waiting.is_empty() {
            message.push_str("\nhint: `imagegen build --push` on a machine with GPUs, or `imagegen test` of the pushed images there, moves them");
        } else {
            let shown: Vec<&str> = waiting.iter().copied().take(4).collect();
            message.push_str(&format!(
                "\nhint: {} wait for a GPU self-test ({}{}); `imagegen test` on a GPU machine, or `imagegen test import` of a report, moves them",
                if waiting.len() == 1 { "1 alias".to_string() } else { format!("{} aliases", waiting.len()) },
                shown.join(", "),
                if waiting.len() > shown.len() { ", …" } else { "" }
            ));
        }
        return anyhow!(message);
    }
    let near = crate::model::names::closest(alias, manifest.aliases.keys().map(String::as_str), 3);
    let mut message = format!("alias {alias} is not in the manifest");
    if let Some(best) = near.first() {
        if crate::model::names::edit_distance(alias, best) <= 2.max(alias.len() / 3) {
            message.push_str(&format!("; did you mean {best}?"));
        }
    }
    message.push_str(&format!(
        "\nhint: the recorded aliases closest to it: {}{}",
        near.join(", "),
        if manifest.aliases.len() > near.len() {
            format!(
                " ({} in all: `imagegen verify` lists them)",
                manifest.aliases.len()
            )
        } else {
            String::new()
        }
    ));
    if waiting.contains(&alias) {
        message.push_str(&format!(
            "\nnote: {alias} waits for a GPU self-test of its image: it has not moved yet, so there is nothing to roll back"
        ));
    }
    anyhow!(message)
}

pub(crate) fn rollback_target(
    manifest: &Manifest,
    alias: &str,
    to: Option<&Digest>,
    previous: bool,
) -> Result<RollbackTarget> {
    let current = manifest
        .aliases
        .get(alias)
        .ok_or_else(|| unknown_alias(manifest, alias))?;
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

/// The recorded digest `text` names: a full digest as it is, or a prefix (`sha256:1ac1a03ff572`,
/// the short form tables print) when exactly one digest the manifest records (an image or an
/// index, current or historical) starts with it. Otherwise an error listing the candidates, or
/// saying that none match.
pub(crate) fn recorded_digest(manifest: &Manifest, text: &str) -> Result<Digest> {
    let full = Digest::parse(text);
    if let Ok(digest) = full {
        return Ok(digest);
    }
    let is_prefix = text.strip_prefix("sha256:").is_some_and(|hex| {
        !hex.is_empty()
            && hex.len() < 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !is_prefix {
        return Err(full.expect_err("parsed above").into());
    }
    let mut candidates: Vec<(&Digest, &str)> = manifest
        .all_records()
        .filter_map(|r| r.digest.as_ref().map(|d| (d, r.tag.as_str())))
        .chain(
            manifest
                .indexes
                .values()
                .flat_map(|i| std::iter::once(i).chain(i.history.iter()))
                .map(|i| (&i.digest, i.tag.as_str())),
        )
        .filter(|(digest, _)| digest.as_str().starts_with(text))
        .collect();
    candidates.sort();
    candidates.dedup_by(|a, b| a.0 == b.0);
    match candidates.as_slice() {
        [(digest, _)] => Ok((*digest).clone()),
        [] => bail!(
            "no digest the manifest records starts with {text}; rollback only goes to digests imagegen built and recorded"
        ),
        many => bail!(
            "{text} could be {} recorded digests: {}; give more of the digest",
            many.len(),
            many.iter()
                .map(|(digest, tag)| format!("{digest} ({tag})"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::record::test_support::{manifest_with, specs_for};

    #[test]
    fn an_unknown_alias_gets_the_closest_recorded_ones_or_why_none_moved_yet() {
        let specs = specs_for("2.7.1", "12.6");
        let tag = specs[0].tag.clone();
        let manifest = manifest_with(&specs, &[("2.7-runtime", tag.as_str())]);
        let error = rollback_target(&manifest, "2.7-runtme", None, true)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("alias 2.7-runtme is not in the manifest; did you mean 2.7-runtime?\nhint: the recorded aliases closest to it: 2.7-runtime"),
            "{error}"
        );
        // Far from every recorded alias: no guess, the list alone.
        let error = rollback_target(&manifest, "nightly", None, true)
            .unwrap_err()
            .to_string();
        assert!(!error.contains("did you mean"), "{error}");
        assert!(error.contains("closest to it: 2.7-runtime"), "{error}");

        // Nothing moved yet: why, and which aliases wait for a GPU self-test.
        let mut manifest = manifest_with(&specs, &[]);
        let error = rollback_target(&manifest, "latest", None, true)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("records no alias yet: an alias moves only after its image passed a self-test on GPUs")
                && error.contains("hint: `imagegen build --push` on a machine with GPUs"),
            "{error}"
        );
        for record in manifest.images.values_mut() {
            record.awaiting_aliases = vec!["latest".into(), "2.7-runtime".into()];
        }
        let error = rollback_target(&manifest, "latest", None, true)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("hint: 2 aliases wait for a GPU self-test (latest, 2.7-runtime)"),
            "{error}"
        );
    }

    #[test]
    fn a_short_digest_names_the_one_recorded_digest_it_starts() {
        let specs = specs_for("2.7.1", "12.6");
        let mut manifest = manifest_with(&specs, &[]);
        let recorded: Vec<Digest> = manifest
            .all_records()
            .filter_map(|r| r.digest.clone())
            .collect();
        assert_eq!(recorded.len(), 1);
        let digest = &recorded[0];
        assert_eq!(&recorded_digest(&manifest, digest.short()).unwrap(), digest);
        assert_eq!(
            &recorded_digest(&manifest, digest.as_str()).unwrap(),
            digest
        );

        let error = recorded_digest(&manifest, "sha256:ffffffffffff")
            .unwrap_err()
            .to_string();
        // The one recorded digest starts otherwise (made from the tag), unless by chance.
        if !digest.hex().starts_with("ffffffffffff") {
            assert!(
                error.starts_with("no digest the manifest records starts with sha256:ffffffffffff"),
                "{error}"
            );
        }
        assert!(recorded_digest(&manifest, "1ac1a03ff572").is_err());
        assert!(recorded_digest(&manifest, "sha256:1AC1").is_err());

        // Two records whose digests share a prefix: ambiguous, both listed.
        let mut twin = manifest.images.values().next().unwrap().clone();
        twin.tag = "twin".into();
        let mut hex = digest.hex().to_string();
        hex.replace_range(63.., if hex.ends_with('0') { "1" } else { "0" });
        twin.digest = Some(Digest::parse(&format!("sha256:{hex}")).unwrap());
        manifest.record_success(twin);
        let error = recorded_digest(&manifest, digest.short())
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("{} could be 2 recorded digests: ", digest.short())),
            "{error}"
        );
        assert!(error.contains(&format!("{digest} (")), "{error}");
        assert!(error.contains(&format!("sha256:{hex} (twin)")), "{error}");
    }
}
