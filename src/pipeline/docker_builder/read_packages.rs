//! The step `read-packages`: pip's, dpkg's and the venv's packages (and what apt installed with
//! the extras) listed in a container of the image, or taken from the layer store where an earlier
//! image had these layers and this config but its labels, or from the container that made a
//! `wheels: host` venv.

use std::time::Duration;

use anyhow::{anyhow, Result};

use super::{listing_script, EngineBuilder};
use crate::docker::RunRequest;
use crate::history::apt_lock::{installed_with_extras, APT_DEPENDS_MARKER};
use crate::history::manifest::Packages;
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::relabel::listing_key;
use crate::pipeline::selftest::parse_packages;

impl EngineBuilder {
    pub(super) async fn read_packages(&self, image: &PlannedImage) -> Result<Option<Packages>> {
        if !self.runs_here(image).await {
            return Ok(None);
        }
        let extras = &image.spec.extensions.apt;
        // A `wheels: host` image was listed in the container that made its venv.
        let listed = self
            .listed
            .lock()
            .expect("listed lock")
            .remove(&image.spec.name);
        let stdout = match listed {
            Some(stdout) => stdout,
            None => self.listing(image, listing_script(image)).await?,
        };
        let (listing, apt) = stdout
            .split_once(APT_DEPENDS_MARKER)
            .unwrap_or((&stdout, ""));
        let mut packages = parse_packages(listing);
        if !extras.is_empty() {
            packages.apt_extras = installed_with_extras(extras, apt).packages;
        }
        packages.binaries = self
            .contexts
            .binaries
            .get(&image.spec.name)
            .cloned()
            .into_iter()
            .collect();
        Ok(Some(packages))
    }

    /// What the listing `script` prints in `image`: kept in the layer store from an earlier image
    /// with the same layers and config but labels (a relabelled image), or from a container run.
    pub(super) async fn listing(&self, image: &PlannedImage, script: String) -> Result<String> {
        let key = match &self.settings.layer_store {
            Some(_) => self.listing_key(&image.reference, &script).await?,
            None => None,
        };
        if let (Some(store), Some(key)) = (&self.settings.layer_store, &key) {
            if let Some(kept) = store.listing(key) {
                self.progress.log_only(
                    &image.spec.name,
                    &format!("== packages listed as for an earlier image with these layers and this config but its labels (listing {key}): no container run"),
                );
                return Ok(kept);
            }
        }
        let request = RunRequest {
            image: image.reference.clone(),
            cmd: vec!["sh".into(), "-c".into(), script],
            entrypoint: Some(vec![]),
            timeout: Some(Duration::from_secs(120)),
            labels: self.container_labels("imagegen.contents", &image.spec.name),
            ..Default::default()
        };
        let output = self.engine.run(request).await?;
        if output.exit_code != 0 {
            anyhow::bail!(
                "listing packages exited {}: {}",
                output.exit_code,
                output.stderr.trim()
            );
        }
        if let (Some(store), Some(key)) = (&self.settings.layer_store, &key) {
            if let Err(error) = store.remember_listing(key, &output.stdout) {
                self.progress.log_only(
                    &image.spec.name,
                    &format!(
                        "== warning: could not keep its package listing in {}: {error}",
                        store.path().display()
                    ),
                );
            }
        }
        Ok(output.stdout)
    }

    /// The key of `reference`'s package listing by `script` (`pipeline::relabel::listing_key`),
    /// or `None` where the daemon does not give the config as it holds it.
    pub(super) async fn listing_key(
        &self,
        reference: &str,
        script: &str,
    ) -> Result<Option<String>> {
        let local = self
            .engine
            .image(reference)
            .await?
            .ok_or_else(|| anyhow!("no image {reference} in the Docker daemon to list"))?;
        Ok(self
            .engine
            .image_run_config(&local.id)
            .await?
            .map(|(config, _history)| listing_key(script, &local.layers, &config)))
    }
}
