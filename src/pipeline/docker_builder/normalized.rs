//! Part of the step `build`: the daemon's build exported and normalized in one pass (layers an
//! earlier image of this run normalized taken as they are), or made from what the layer store
//! keeps of an earlier build with the same layers; the normalized image kept in the store and
//! loaded into the daemon, whose image ID must be its config digest.

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};

use super::layers::{stored_layer, stored_layers};
use super::relabel_inputs::RelabelInputs;
use super::{rate, EngineBuilder, PROGRESS_EVERY};
use crate::docker::layer_store::StoredImage;
use crate::history::manifest::human_bytes;
use crate::model::digest::Digest;
use crate::pipeline::normalize::{
    assemble, config_from_template, known_prefix, normalize_archive, KnownLayer,
    MisplacedKnownLayer, NormalizedImage,
};
use crate::pipeline::relabel::learn;

impl EngineBuilder {
    /// Exports image `id` from the daemon and normalizes it (on blocking threads: it is
    /// compression), printing each phase with bytes and rate.
    pub(super) async fn normalize(
        &self,
        name: &str,
        id: &str,
        epoch: u64,
    ) -> Result<Arc<NormalizedImage>> {
        let layers = match self.engine.image(id).await? {
            Some(image) => image.layers,
            None => anyhow::bail!("image {id} left the Docker daemon before it was normalized"),
        };
        let layers = layers
            .iter()
            .map(|layer| {
                Digest::parse(layer).with_context(|| {
                    format!("the Docker daemon gave image {id} a malformed layer {layer:?}")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let known = {
            let chains = self.chains.lock().expect("chains lock");
            known_prefix(&layers, epoch, &chains)
        };
        if known.is_empty() {
            return self.normalize_with(name, id, epoch, &[]).await;
        }
        match self.normalize_with(name, id, epoch, &known).await {
            Err(error) if error.downcast_ref::<MisplacedKnownLayer>().is_some() => {
                self.progress
                    .line(name, &format!("== {error:#}: normalizing every layer"));
                self.normalize_with(name, id, epoch, &[]).await
            }
            other => other,
        }
    }

    /// [`EngineBuilder::normalize`] taking the layers `known` (the bottom of the image) as they
    /// are.
    pub(super) async fn normalize_with(
        &self,
        name: &str,
        id: &str,
        epoch: u64,
        known: &[KnownLayer],
    ) -> Result<Arc<NormalizedImage>> {
        let known = known.to_vec();
        // The export streams into the normalizing as the daemon sends it: one pass, no file.
        let started = std::time::Instant::now();
        let archive = self.engine.export_image(id);
        let exported = archive.progress();
        let progress = Arc::clone(&self.progress);
        let log_name = name.to_string();
        let normalized = tokio::task::spawn_blocking(move || {
            let mut unpacked = 0u64;
            let mut packed = 0u64;
            let mut last_line = std::time::Instant::now();
            let reader = std::io::BufReader::with_capacity(1 << 20, archive);
            normalize_archive(reader, epoch, &known, |layer_unpacked, layer_packed, taken| {
                if taken {
                    progress.line(
                        &log_name,
                        &format!(
                            "normalizing: a layer of {} ({} compressed) is a layer this run normalized already: taken as it is",
                            human_bytes(layer_unpacked),
                            human_bytes(layer_packed)
                        ),
                    );
                }
                unpacked += layer_unpacked;
                packed += layer_packed;
                if last_line.elapsed() >= PROGRESS_EVERY {
                    last_line = std::time::Instant::now();
                    progress.line(
                        &log_name,
                        &format!(
                            "normalizing: {} compressed to {} {}",
                            human_bytes(unpacked),
                            human_bytes(packed),
                            rate(unpacked, started.elapsed())
                        ),
                    );
                }
            })
        })
        .await
        .map_err(|error| anyhow!("the normalizing thread failed: {error}"))??;
        let size = exported.bytes();
        self.progress.stage(
            name,
            &format!(
                "exported {} {}",
                human_bytes(size),
                rate(size, exported.took().unwrap_or_else(|| started.elapsed()))
            ),
        );
        self.progress.stage(
            name,
            &format!(
                "normalized {} layers ({} the parent's, taken as they are; epoch {}): {} unpacked, {} compressed {}, manifest {}",
                normalized.layers.len(),
                normalized.layers.iter().filter(|layer| layer.gzip.is_none()).count(),
                epoch,
                human_bytes(normalized.unpacked_size()),
                human_bytes(normalized.size().compressed_bytes),
                rate(normalized.unpacked_size(), started.elapsed()),
                normalized.manifest_digest
            ),
        );
        self.note_normalized(&normalized);
        Ok(Arc::new(normalized))
    }

    /// Keeps `normalized`'s size and layers for this run: its summary, and the images built
    /// `FROM` it, which take these layers as they are.
    pub(super) fn note_normalized(&self, normalized: &NormalizedImage) {
        self.sizes
            .lock()
            .expect("sizes lock")
            .insert(normalized.config_digest.to_string(), normalized.size());
        self.chains.lock().expect("chains lock").push((
            normalized.epoch,
            normalized
                .layers
                .iter()
                .map(|layer| layer.known())
                .collect(),
        ));
    }

    /// Keeps `normalized` (loaded, built) for the push when this run pushes; its image ID.
    pub(super) fn built(&self, normalized: Arc<NormalizedImage>) -> Digest {
        let normalized_id = normalized.config_digest.clone();
        // Its compressed layers are kept for the push only when this run pushes: a torch image's
        // are gigabytes, and a run that only builds holds none of them (a later push normalizes
        // the loaded image again, to the same bytes).
        if self.settings.check_registry {
            self.normalized
                .lock()
                .expect("normalized lock")
                .insert(normalized_id.to_string(), normalized);
        }
        normalized_id
    }

    /// Whether the daemon still holds the normalized layers of `stored` (a load names the layers
    /// only, so it must hold them, with the same chain); `Err` says why not.
    pub(super) async fn holds(&self, stored: &StoredImage) -> Result<(), String> {
        let holder = match self.engine.image(&stored.image_id).await {
            Ok(Some(holder)) => holder,
            Ok(None) => {
                return Err(format!(
                    "the Docker daemon no longer has its normalized image {}",
                    stored.image_id
                ))
            }
            Err(error) => return Err(error.to_string()),
        };
        let diff_ids: Vec<&str> = stored.layers.iter().map(|l| l.diff_id.as_str()).collect();
        if holder.layers != diff_ids {
            return Err(format!(
                "the Docker daemon's image {} has other layers than the store says",
                stored.image_id
            ));
        }
        Ok(())
    }

    /// The normalized image of daemon build `id`, made from what an earlier run kept in the
    /// layer store when the build's layers are that run's (only a label, an `ENV` or another
    /// setting changed): no export, no normalizing, no layer bytes. `None` (the caller exports
    /// and normalizes) when nothing is kept for these layers at this epoch, the daemon no longer
    /// holds the normalized layers, or its answers do not add up.
    pub(super) async fn normalized_from_store(
        &self,
        name: &str,
        id: &str,
        epoch: u64,
    ) -> Option<Arc<NormalizedImage>> {
        let store = self.settings.layer_store.as_ref()?;
        let raw = self.engine.image(id).await.ok()??.layers;
        let stored = store.find(epoch, &raw)?;
        let skip = |why: String| {
            self.progress.line(
                name,
                &format!("== its layers are those of an earlier build, but {why}: normalizing every layer"),
            );
        };
        if let Err(why) = self.holds(&stored).await {
            skip(why);
            return None;
        }
        let (run_config, history) = match self.engine.image_run_config(id).await {
            Ok(Some(answers)) => answers,
            Ok(None) => return None,
            Err(error) => {
                skip(error.to_string());
                return None;
            }
        };
        let made = stored_layers(&stored).and_then(|layers| {
            let count = layers.len();
            let config =
                config_from_template(stored.config.as_bytes(), &run_config, &history, count)?;
            assemble(&config, layers, epoch)
        });
        let normalized = match made {
            Ok(normalized) => normalized,
            Err(error) => {
                skip(format!("{error:#}"));
                return None;
            }
        };
        self.progress.stage(
            name,
            &format!(
                "normalized {} layers without exporting them: they are an earlier build's (its normalized image {}), taken as they are; only the config is new (epoch {}): {} unpacked, {} compressed, manifest {}",
                normalized.layers.len(),
                stored.image_id,
                epoch,
                human_bytes(normalized.unpacked_size()),
                human_bytes(normalized.size().compressed_bytes),
                normalized.manifest_digest
            ),
        );
        self.note_normalized(&normalized);
        Some(Arc::new(normalized))
    }

    /// Writes `normalized` (loaded, made from daemon build `id`) into the layer store, so a later
    /// build with the same layers takes them without an export. A config made from a full
    /// normalization is kept only when the daemon's answers give that config back exactly
    /// (`check`): then a later build's config made from them is the one a full normalization
    /// would make. A store that cannot be written costs only speed: a line in the log.
    pub(super) async fn keep_in_store(
        &self,
        name: &str,
        id: &str,
        epoch: u64,
        normalized: &NormalizedImage,
        check: bool,
        inputs: Option<&RelabelInputs>,
    ) {
        let Some(store) = &self.settings.layer_store else {
            return;
        };
        let Ok(Some(raw)) = self.engine.image(id).await else {
            return;
        };
        if raw.layers.len() != normalized.layers.len() {
            return;
        }
        let answers = if check || inputs.is_some() {
            self.engine.image_run_config(id).await.ok().flatten()
        } else {
            None
        };
        if check {
            let Some((run_config, history)) = &answers else {
                return;
            };
            let again = config_from_template(
                &normalized.config,
                run_config,
                history,
                normalized.layers.len(),
            )
            .and_then(|config| assemble(&config, normalized.layers.clone(), epoch));
            match again {
                Ok(again) if again.config == normalized.config => {}
                Ok(_) | Err(_) => {
                    self.progress.line(
                        name,
                        "== note: the Docker daemon's answers about this build do not give its normalized config back; a later build with the same layers is exported and normalized again",
                    );
                    return;
                }
            }
        }
        let relabel = match (inputs, &answers) {
            (Some(inputs), Some((run_config, history))) => match learn(
                &inputs.steps,
                &inputs.build_labels,
                inputs.parent(),
                run_config,
                history,
                inputs.key.clone(),
            ) {
                Ok(model) => Some(model),
                Err(why) => {
                    self.progress.line(
                        name,
                        &format!("== note: a later change of its labels alone is built with Docker: {why}"),
                    );
                    None
                }
            },
            _ => None,
        };
        let entry = StoredImage {
            relabel,
            epoch,
            raw_layers: raw.layers,
            image_id: normalized.config_digest.to_string(),
            config: String::from_utf8_lossy(&normalized.config).into_owned(),
            layers: normalized.layers.iter().map(stored_layer).collect(),
        };
        if let Err(error) = store.remember(entry) {
            self.progress.line(
                name,
                &format!(
                    "== warning: could not write the layer store {}: {error}",
                    store.path().display()
                ),
            );
        }
    }

    /// Loads `normalized` into the daemon as `reference`, so the self-test runs on exactly the
    /// bytes that are pushed; checks that the daemon's image ID is the config digest.
    pub(super) async fn load(
        &self,
        name: &str,
        reference: &str,
        normalized: &NormalizedImage,
    ) -> Result<()> {
        let archive = normalized.load_archive(reference)?;
        self.engine.load_image_pieces(archive).await?;
        let loaded = self.engine.image(reference).await?.map(|image| image.id);
        if loaded.as_deref() != Some(normalized.config_digest.as_str()) {
            anyhow::bail!(
                "the Docker daemon holds {reference} as {} after loading its normalized image {}",
                loaded.as_deref().unwrap_or("nothing"),
                normalized.config_digest
            );
        }
        self.progress.stage(
            name,
            &format!("loaded the normalized image {}", normalized.config_digest),
        );
        Ok(())
    }
}
