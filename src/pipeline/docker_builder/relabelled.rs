//! Part of the step `build`: an image made without a Docker build where only its labels differ
//! from a kept build of the same inputs (`pipeline::relabel` holds the model): what decides the
//! build but its labels, read from the context and the daemon, and the kept build's layers with
//! a config predicted from its label model, loaded into the daemon.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};

use super::layers::stored_layers;
use super::relabel_inputs::RelabelInputs;
use super::{local_reference, EngineBuilder};
use crate::docker::layer_store::StoredImage;
use crate::history::manifest::human_bytes;
use crate::model::digest::Digest;
use crate::pipeline::normalize::{assemble, config_from_template_flagged, without_source_hashes};
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::relabel::{empty_layers, inputs_key, label_steps, predict, InputFile, Parent};

impl EngineBuilder {
    /// What decides `image`'s build but its labels (`pipeline::relabel`): its Dockerfile's label
    /// steps, the context's other files, and the image the Dockerfile builds `FROM` as the daemon
    /// holds it now. `Err` says what the model cannot follow.
    pub(super) async fn relabel_inputs(
        &self,
        image: &PlannedImage,
        build_labels: &BTreeMap<String, String>,
    ) -> Result<RelabelInputs, String> {
        let name = &image.spec.name;
        let context = self
            .contexts
            .tars
            .get(name)
            .ok_or_else(|| format!("no build context assembled for {name}"))?;
        let (dockerfile, files) = context_files(context)
            .map_err(|error| format!("reading its build context: {error}"))?;
        let steps = label_steps(&dockerfile)?;
        if steps.parent == "scratch" {
            return Err("it is built FROM scratch".into());
        }
        let reference = local_reference(&steps.parent);
        let parent = match self.engine.image(&reference).await {
            Ok(Some(parent)) => parent,
            Ok(None) => return Err(format!("the Docker daemon has no {reference}")),
            Err(error) => return Err(error.to_string()),
        };
        let (parent_config, parent_history) = match self.engine.image_run_config(&parent.id).await {
            Ok(Some(answers)) => answers,
            Ok(None) => return Err(format!("the Docker daemon has no config of {reference}")),
            Err(error) => return Err(error.to_string()),
        };
        let epoch = self
            .epoch_of(image)
            .await
            .map_err(|error| format!("{error:#}"))?;
        let key = inputs_key(
            &steps,
            &files,
            Parent {
                config: &parent_config,
                history: &parent_history,
                layers: &parent.layers,
            },
            epoch,
            image.spec.platform.as_str(),
        );
        Ok(RelabelInputs {
            steps,
            build_labels: build_labels.clone(),
            parent_config,
            parent_history,
            parent_layers: parent.layers,
            epoch,
            key,
        })
    }

    /// `image` made without a Docker build when only its labels differ from a kept build of the
    /// same inputs: that build's layers, a config predicted from its label model, loaded into
    /// the daemon. `None` (the caller builds with Docker) when nothing is kept for these inputs,
    /// the daemon no longer holds the layers, or the prediction or the load fails.
    pub(super) async fn relabel(
        &self,
        image: &PlannedImage,
        inputs: &RelabelInputs,
    ) -> Option<Digest> {
        let name = &image.spec.name;
        let store = self.settings.layer_store.as_ref()?;
        let stored = store.find_inputs(inputs.epoch, &inputs.key)?;
        let model = stored.relabel.as_ref()?;
        let skip = |why: String| {
            self.progress.line(
                name,
                &format!("== only its labels differ from an earlier build's (its normalized image {}), but {why}: building it with Docker", stored.image_id),
            );
        };
        if let Err(why) = self.holds(&stored).await {
            skip(why);
            return None;
        }
        let made = predict(model, &inputs.steps, &inputs.build_labels, inputs.parent())
            .map_err(|why| anyhow!(why))
            .and_then(|(run_config, history)| {
                let layers = stored_layers(&stored)?;
                let empty = empty_layers(
                    &template_steps(stored.config.as_bytes())?,
                    model,
                    &history,
                    inputs.parent_history.len(),
                    inputs.parent_layers.len(),
                    without_source_hashes,
                )
                .map_err(|why| anyhow!(why))?;
                let config = config_from_template_flagged(
                    stored.config.as_bytes(),
                    &run_config,
                    &history,
                    layers.len(),
                    Some(&empty),
                )?;
                assemble(&config, layers, inputs.epoch)
            });
        let normalized = match made {
            Ok(normalized) => normalized,
            Err(error) => {
                skip(format!("{error:#}"));
                return None;
            }
        };
        if let Err(error) = self.load(name, &image.reference, &normalized).await {
            skip(format!("loading it failed ({error:#})"));
            return None;
        }
        self.progress.stage(
            name,
            &format!(
                "relabelled without a Docker build: only its labels differ from an earlier build of the same inputs (its normalized image {}), whose {} layers it takes as they are; the config follows from that build's (epoch {}): {} unpacked, {} compressed, manifest {}",
                stored.image_id,
                normalized.layers.len(),
                inputs.epoch,
                human_bytes(normalized.unpacked_size()),
                human_bytes(normalized.size().compressed_bytes),
                normalized.manifest_digest
            ),
        );
        self.note_normalized(&normalized);
        // The new image holds the same layers: a later change takes them from it.
        let kept = StoredImage {
            image_id: normalized.config_digest.to_string(),
            config: String::from_utf8_lossy(&normalized.config).into_owned(),
            ..stored
        };
        if let Err(error) = store.remember(kept) {
            self.progress.line(
                name,
                &format!(
                    "== warning: could not write the layer store {}: {error}",
                    store.path().display()
                ),
            );
        }
        Some(self.built(Arc::new(normalized)))
    }
}

/// The history of a normalized config: each step's `created_by`, `comment` and `empty_layer`.
fn template_steps(config: &[u8]) -> Result<Vec<(String, String, bool)>> {
    let config: serde_json::Value = serde_json::from_slice(config).context("the stored config")?;
    let text = |step: &serde_json::Value, field: &str| {
        step.get(field)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(config
        .get("history")
        .and_then(serde_json::Value::as_array)
        .map(|steps| {
            steps
                .iter()
                .map(|step| {
                    let empty = step.get("empty_layer").and_then(serde_json::Value::as_bool);
                    (
                        text(step, "created_by"),
                        text(step, "comment"),
                        empty.unwrap_or(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The Dockerfile of a build context (a tar) and its other entries as (path, mode, sha256).
fn context_files(context: &[u8]) -> std::io::Result<(String, Vec<InputFile>)> {
    use std::io::Read;
    let mut dockerfile = None;
    let mut files = Vec::new();
    let mut archive = tar::Archive::new(context);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let mode = entry.header().mode()?;
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        if path == "Dockerfile" {
            dockerfile = Some(String::from_utf8_lossy(&bytes).into_owned());
        } else {
            files.push((path, mode, Digest::of(&bytes).to_string()));
        }
    }
    let dockerfile = dockerfile
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "it has no Dockerfile"))?;
    Ok((dockerfile, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build context: a tar of `(path, mode, content)`.
    fn context_of(entries: &[(&str, u32, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, mode, content) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(*mode);
            header.set_cksum();
            tar.append_data(&mut header, path, *content).unwrap();
        }
        tar.into_inner().unwrap()
    }

    #[test]
    fn the_context_is_its_dockerfile_and_the_digests_of_the_rest() {
        let context = context_of(&[
            ("Dockerfile", 0o644, b"FROM base\nLABEL a=b\n"),
            ("gpu-selftest", 0o755, b"binary"),
        ]);
        let (dockerfile, files) = context_files(&context).unwrap();
        assert_eq!(dockerfile, "FROM base\nLABEL a=b\n");
        assert_eq!(
            files,
            [(
                "gpu-selftest".to_string(),
                0o755,
                Digest::of(b"binary").to_string()
            )]
        );
        let error = context_files(&context_of(&[("x", 0o644, b"")])).unwrap_err();
        assert_eq!(error.to_string(), "it has no Dockerfile");
    }

    #[test]
    fn a_configs_history_is_read_step_by_step() {
        let config = serde_json::json!({"history": [
            {"created_by": "/bin/sh -c #(nop) ADD file:x in /", "comment": "base"},
            {"created_by": "LABEL a=b", "empty_layer": true},
            {}
        ]});
        assert_eq!(
            template_steps(config.to_string().as_bytes()).unwrap(),
            [
                (
                    "/bin/sh -c #(nop) ADD file:x in /".to_string(),
                    "base".to_string(),
                    false
                ),
                ("LABEL a=b".to_string(), String::new(), true),
                (String::new(), String::new(), false),
            ]
        );
        assert!(template_steps(b"{}").unwrap().is_empty());
        assert!(template_steps(b"not json").is_err());
    }
}
