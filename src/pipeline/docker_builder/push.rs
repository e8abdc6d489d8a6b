//! The step `push`: the normalized image pushed under its full tag through the registry API
//! (nothing where the registry holds the tag with this build key; refused where it holds other
//! content, full tags being immutable), the digest it then serves read back and remembered for
//! the alias moves.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{anyhow, Result};

use super::{rate, EngineBuilder, BUILD_KEY_LABEL, PROGRESS_EVERY};
use crate::docker::{repository_path_of, RegistryClient, RegistryManifest};
use crate::history::manifest::human_bytes;
use crate::model::digest::Digest;
use crate::pipeline::normalize::{NormalizedImage, MEDIA_TYPE_MANIFEST, NORMALIZED_LABEL};

impl EngineBuilder {
    pub(super) async fn push_full_tag(
        &self,
        repository: &str,
        tag: &str,
        build_key: Option<&Digest>,
    ) -> Result<Digest> {
        let client = self.registry(repository).await?;
        let path = repository_path_of(repository);
        if let Some(build_key) = build_key {
            if let Some(labels) = client.image_labels(path, tag).await? {
                same_content(repository, tag, &labels, build_key)?;
                // The same content is there already (pushed by an earlier or a concurrent run):
                // pushing this build again would replace the tag's digest under the others.
                if let Some(manifest) = client.get_manifest(path, tag).await? {
                    let digest = manifest.digest.clone();
                    self.progress.line(
                        tag,
                        &format!("== {repository}:{tag} is in the registry with this build key already ({digest}); not pushed again"),
                    );
                    self.remember(&digest, manifest);
                    return Ok(digest);
                }
            }
        }
        self.progress
            .phase(tag, &format!("pushing {repository}:{tag}"));
        let mut normalized = self.normalized_of(repository, tag).await?;
        // A layer taken as its parent's has no bytes here: the parent's push put it in the
        // registry. Where it is not there (another repository, the parent not pushed), the
        // image is normalized again in full, which gives the same bytes.
        for layer in normalized
            .layers
            .iter()
            .filter(|layer| layer.gzip.is_none())
        {
            if !client.has_blob(path, &layer.digest).await? {
                self.progress.line(
                    tag,
                    &format!(
                        "== layer {} is not in {repository} yet: normalizing {repository}:{tag} again with every layer's bytes",
                        layer.digest
                    ),
                );
                let full = self
                    .normalize_with(
                        tag,
                        normalized.config_digest.as_str(),
                        normalized.epoch,
                        &[],
                    )
                    .await?;
                if full.manifest_digest != normalized.manifest_digest {
                    anyhow::bail!(
                        "normalizing {repository}:{tag} in full gave manifest {}, not {}: its layers are not as imagegen wrote them",
                        full.manifest_digest,
                        normalized.manifest_digest
                    );
                }
                normalized = full;
                break;
            }
        }
        let pushed = self
            .push_normalized(&client, repository, tag, &normalized)
            .await?;
        // Read back what the registry serves under the tag now: that is what is recorded.
        let served = client.get_manifest(path, tag).await?.ok_or_else(|| {
            anyhow!(
                "the registry {} has no {repository}:{tag} right after it was pushed",
                client.host()
            )
        })?;
        let digest = served.digest.clone();
        if digest != pushed {
            anyhow::bail!(
                "the registry serves {repository}:{tag} as {digest} right after this run pushed {pushed}: another run pushed the tag at the same time"
            );
        }
        self.remember(&digest, served);
        Ok(digest)
    }

    /// The normalized image tagged `repository:tag` in the daemon: made by this run, or (built by
    /// an earlier run) exported and normalized again, which gives the same bytes.
    pub(super) async fn normalized_of(
        &self,
        repository: &str,
        tag: &str,
    ) -> Result<Arc<NormalizedImage>> {
        let reference = format!("{repository}:{tag}");
        // Pushed from memory, never loaded: the run holds its bytes only until the push.
        let unloaded = self
            .unloaded
            .lock()
            .expect("unloaded lock")
            .remove(&reference);
        if let Some(normalized) = unloaded {
            return Ok(normalized);
        }
        let local = self
            .engine
            .image(&reference)
            .await?
            .ok_or_else(|| anyhow!("no image {reference} in the Docker daemon to push"))?;
        if let Some(made) = self
            .normalized
            .lock()
            .expect("normalized lock")
            .get(&local.id)
        {
            return Ok(Arc::clone(made));
        }
        let epoch: u64 = local
            .labels
            .get(NORMALIZED_LABEL)
            .and_then(|epoch| epoch.parse().ok())
            .ok_or_else(|| {
                anyhow!("{reference} ({}) is not a normalized image (no {NORMALIZED_LABEL} label): it was built by an older imagegen\nhint: remove it (`docker rmi {reference}`) and build again", local.id)
            })?;
        let normalized = self.normalize(tag, &local.id, epoch).await?;
        if normalized.config_digest.as_str() != local.id {
            anyhow::bail!(
                "normalizing {reference} ({}) again gave another image ({}): its layers are not as imagegen wrote them",
                local.id,
                normalized.config_digest
            );
        }
        Ok(normalized)
    }

    /// Pushes the blobs the registry lacks, then the manifest under `tag`; returns the digest the
    /// registry stored it as, checked against the one computed here.
    pub(super) async fn push_normalized(
        &self,
        client: &RegistryClient,
        repository: &str,
        tag: &str,
        normalized: &NormalizedImage,
    ) -> Result<Digest> {
        let path = repository_path_of(repository);
        let total: u64 = normalized
            .layers
            .iter()
            .filter_map(|layer| layer.gzip.as_ref())
            .map(|blob| blob.len() as u64)
            .sum::<u64>()
            + normalized.config.len() as u64;
        let started = std::time::Instant::now();
        let mut last_line = std::time::Instant::now();
        let mut sent = 0u64;
        // A layer without bytes (its parent's) is in the registry: checked by the caller.
        let blobs = normalized
            .layers
            .iter()
            .filter_map(|layer| layer.gzip.clone())
            .chain(std::iter::once(bytes::Bytes::copy_from_slice(
                &normalized.config,
            )));
        for blob in blobs {
            let size = blob.len() as u64;
            client.put_blob(path, blob).await?;
            sent += size;
            if last_line.elapsed() >= PROGRESS_EVERY {
                last_line = std::time::Instant::now();
                self.progress.detail(
                    tag,
                    &format!(
                        "{} of {} sent {}",
                        human_bytes(sent),
                        human_bytes(total),
                        rate(sent, started.elapsed())
                    ),
                );
            }
        }
        let written = client
            .put_manifest(path, tag, MEDIA_TYPE_MANIFEST, normalized.manifest.clone())
            .await?;
        if written != normalized.manifest_digest {
            anyhow::bail!(
                "the registry stored {repository}:{tag} as {written}, not as its manifest's digest {}",
                normalized.manifest_digest
            );
        }
        self.progress.line(
            tag,
            &format!(
                "== pushed {repository}:{tag} {written}: {} {}",
                human_bytes(total),
                rate(total, started.elapsed())
            ),
        );
        self.normalized
            .lock()
            .expect("normalized lock")
            .remove(normalized.config_digest.as_str());
        Ok(written)
    }

    pub(super) fn remember(&self, digest: &Digest, manifest: RegistryManifest) {
        self.pushed
            .lock()
            .expect("pushed lock")
            .insert(digest.clone(), manifest);
    }
}

/// A full tag the registry holds, with its image's `labels`, may only be this build again
/// (`build_key`): full tags are immutable, so other content there refuses the push, with the
/// ways to publish a rebuild.
fn same_content(
    repository: &str,
    tag: &str,
    labels: &BTreeMap<String, String>,
    build_key: &Digest,
) -> Result<()> {
    let theirs = labels
        .get(BUILD_KEY_LABEL)
        .map(String::as_str)
        .unwrap_or("none");
    if theirs != build_key.as_str() {
        anyhow::bail!(
            "refusing to push {repository}:{tag}: the registry already has this full tag with different content (build key {theirs}, this image {build_key}); full tags are immutable\nhint: to publish a rebuild under a new tag, add {{revision}} to tags.full in the matrix (e.g. \"{{torch}}-cuda{{cuda}}-cudnn{{cudnn_major}}-{{variant}}-{{os}}-r{{revision}}\": new content takes the next revision), or move aliases back with `imagegen rollback`"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_tag_holds_one_build_only() {
        let key = Digest::of(b"key");
        let ours: BTreeMap<String, String> =
            [(BUILD_KEY_LABEL.to_string(), key.to_string())].into();
        assert!(same_content("r/p", "t", &ours, &key).is_ok());
        let other = Digest::of(b"other");
        let error = same_content("r/p", "t", &ours, &other)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!(
                "refusing to push r/p:t: the registry already has this full tag with different content (build key {key}, this image {other}); full tags are immutable\nhint: "
            )),
            "{error}"
        );
        let unlabelled = same_content("r/p", "t", &BTreeMap::new(), &key)
            .unwrap_err()
            .to_string();
        assert!(unlabelled.contains("(build key none,"), "{unlabelled}");
    }
}
