//! The step `resolve-base`: the image the Dockerfile builds `FROM` made present in the daemon
//! (pulled once for all the images on it, the error saying how to provide it; a base pinned by
//! image ID checked), or this plan's parent loaded where the run left it out; and the epoch of
//! the image's normalized layers, which is its base's `created`.

use std::sync::Arc;

use anyhow::{anyhow, Result};

use super::{local_reference, EngineBuilder};
use crate::model::digest::Digest;
use crate::pipeline::normalize::epoch_of_created;
use crate::pipeline::planned::PlannedImage;

impl EngineBuilder {
    pub(super) async fn resolve_base_image(
        &self,
        image: &PlannedImage,
        base: &str,
        pinned_id: Option<&Digest>,
        built_first: bool,
    ) -> Result<()> {
        let name = &image.spec.name;
        self.progress.start(name, "building");
        self.ensure_base(image, base, pinned_id, built_first)
            .await
            .map_err(|error| self.build_failed(name, error))
    }

    /// Makes sure the base image a runtime image is built `FROM` is in the daemon, pulling it
    /// when it is not; the error says what to do when it cannot be had. A devel image's base is
    /// its runtime image, built first in the plan.
    pub(super) async fn ensure_base(
        &self,
        image: &PlannedImage,
        base: &str,
        pinned_id: Option<&Digest>,
        built_first: bool,
    ) -> Result<()> {
        if built_first {
            return self.ensure_loaded(base).await;
        }
        if base == "scratch" {
            return Ok(());
        }
        let cell = Arc::clone(self.bases.lock().await.entry(base.to_string()).or_default());
        let name = &image.spec.name;
        let outcome = cell
            .get_or_init(|| async {
                // `name:tag@sha256:…` is looked up by its digest: the tag may name other bytes now.
                let local = local_reference(base);
                match self.engine.image(&local).await {
                    Ok(Some(_)) => return Ok(()),
                    Ok(None) if pinned_id.is_some() => {
                        return Err(format!(
                            "it is pinned by image ID {} (images/bases.lock), which only a daemon holds",
                            pinned_id.expect("checked")
                        ))
                    }
                    Ok(None) => {}
                    Err(error) => return Err(error.to_string()),
                }
                self.progress
                    .stage(name, &format!("base image {base} is not here: pulling it"));
                // A broken Docker config should not hide the real cause: pull anonymously then.
                let credentials = self.credentials_for(base).await.ok().flatten();
                let progress = Arc::clone(&self.progress);
                self.engine
                    .pull(
                        base,
                        Some(image.spec.platform.as_str()),
                        credentials.as_ref(),
                        |line| progress.line(name, line),
                    )
                    .await
                    .map_err(|error| error.to_string())
            })
            .await
            .clone();
        outcome.map_err(|reason| anyhow!(missing_base_text(base, &reason)))?;
        if pinned_id.is_some() {
            let found = self.engine.image(base).await?.map(|found| found.id);
            check_pinned_id(base, pinned_id, found.as_deref().unwrap_or("(none)"))
                .map_err(|reason| anyhow!(reason))?;
        }
        Ok(())
    }

    /// Loads `reference` into the daemon where this run made it and did not load it (a
    /// `wheels: host` image whose plan's build step does not load it).
    pub(super) async fn ensure_loaded(&self, reference: &str) -> Result<()> {
        let pending = self
            .unloaded
            .lock()
            .expect("unloaded lock")
            .remove(reference);
        match pending {
            Some(normalized) => self.load(reference, reference, &normalized).await,
            None => Ok(()),
        }
    }

    /// The epoch of `image`'s normalized layers: its base's `created` (see
    /// [`crate::pipeline::normalize`]); 0 on `scratch`.
    pub(super) async fn epoch_of(&self, image: &PlannedImage) -> Result<u64> {
        let base = &image.spec.base_image;
        if base == "scratch" {
            return Ok(0);
        }
        let found = self
            .engine
            .image(&local_reference(base))
            .await?
            .ok_or_else(|| anyhow!("base image {base} left the Docker daemon during the build"))?;
        Ok(epoch_of_created(found.created.as_deref()))
    }
}

/// A base pinned by image ID (only the daemon holds it) must still be those bytes.
fn check_pinned_id(base: &str, pinned: Option<&Digest>, found: &str) -> Result<(), String> {
    match pinned {
        Some(pinned) if pinned.as_str() != found => Err(format!(
            "base image {base} is image ID {found} in the Docker daemon, but images/bases.lock pins {pinned}: the tag was loaded again with other contents\nhint: load the pinned image again, or run `imagegen lock --bases` to pin what the daemon holds now (and review the move)"
        )),
        _ => Ok(()),
    }
}

/// Why a build cannot start: its base image is missing and could not be pulled, with the ways to
/// provide it.
fn missing_base_text(base: &str, reason: &str) -> String {
    format!(
        "base image {base} is not in the Docker daemon, and {reason}\n\
         hint: where no registry is reachable, load it: `docker save {base} -o base.tar` on a machine \
         that has it, then `docker load -i base.tar` here; or set `mirrors.base_registry` in the \
         matrix to a registry mirror you can reach, or `base_images.runtime` to a base image you have"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_pinned_by_image_id_must_still_be_those_bytes() {
        let pinned = Digest::of(b"pinned");
        assert_eq!(check_pinned_id("b:1", None, "sha256:any"), Ok(()));
        assert_eq!(
            check_pinned_id("b:1", Some(&pinned), pinned.as_str()),
            Ok(())
        );
        let error = check_pinned_id("b:1", Some(&pinned), "sha256:other").unwrap_err();
        assert!(
            error.starts_with(&format!(
                "base image b:1 is image ID sha256:other in the Docker daemon, but images/bases.lock pins {pinned}"
            )),
            "{error}"
        );
        assert!(error.contains("hint: "), "{error}");
    }

    #[test]
    fn a_missing_base_says_how_to_provide_it() {
        let text = missing_base_text("nvidia/cuda:12.6.3-base-ubuntu24.04", "pulling it failed");
        assert!(text.starts_with(
            "base image nvidia/cuda:12.6.3-base-ubuntu24.04 is not in the Docker daemon, and pulling it failed\nhint: "
        ));
        for way in [
            "docker load -i base.tar",
            "mirrors.base_registry",
            "base_images.runtime",
        ] {
            assert!(text.contains(way), "{way}: {text}");
        }
    }
}
