//! The step `build`: the Docker build of the image's context (with its cached wheels, or none
//! where the venv is made on the host), or, where only its labels changed, a kept build
//! relabelled without Docker (`relabelled`); then the normalized image (`normalized`), the venv's
//! layers made on the host above it for `wheels: host` (`host_venv`), loaded into the daemon unless
//! the plan says not to. Each step image of the classic builder is written to the run's journal
//! as it is made, so a later run can remove what a killed one left.

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};

use super::{listing_script, EngineBuilder, HostVenvFiles, BUILD_KEY_LABEL};
use crate::docker::append_to_context;
use crate::docker::run_journal::StepImages;
use crate::docker::BuildRequest;
use crate::model::digest::Digest;
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::steps::Wheels;
use crate::render::HOST_VENV_SCRIPT;
use crate::resolve::lock::LOCK_FILE;

impl EngineBuilder {
    pub(super) async fn build_image(
        &self,
        image: &PlannedImage,
        wheels: Wheels,
        load: bool,
    ) -> Result<Digest> {
        let name = &image.spec.name;
        let context = self
            .contexts
            .tars
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("no build context assembled for {name}"))?;
        // `wheels: host`: the venv is made on the host after the Docker build, whose context
        // takes no wheels.
        let host_script = match wheels {
            Wheels::Host => Some(
                file_of_context(&context, HOST_VENV_SCRIPT)
                    .with_context(|| format!("reading {name}'s build context"))?
                    .ok_or_else(|| {
                        anyhow!("{name}'s build context has no {HOST_VENV_SCRIPT}, which `wheels: host` renders beside its Dockerfile\nhint: run `imagegen render`")
                    })?,
            ),
            Wheels::Index | Wheels::Cache => None,
        };
        // Its lock goes into the venv's last layer (/opt/imagegen/requirements.lock), not the
        // build's: an upgrade of the lock changes none of the build's layers.
        let host_lock = match wheels {
            Wheels::Host => Some(
                file_of_context(&context, LOCK_FILE)
                    .with_context(|| format!("reading {name}'s build context"))?
                    .ok_or_else(|| {
                        anyhow!(
                            "{name}'s build context has no {LOCK_FILE}\nhint: run `imagegen lock`"
                        )
                    })?,
            ),
            Wheels::Index | Wheels::Cache => None,
        };
        let context = match (wheels, self.contexts.wheels.get(name)) {
            (Wheels::Cache, Some(wheels)) => {
                append_to_context(&context, "wheels", &wheels.files, &wheels.small_files)
                    .with_context(|| format!("the wheels of {name}'s build context"))?
            }
            _ => context,
        };
        let mut request = BuildRequest::new(image.reference.clone(), context);
        // The daemon's build stays untagged: only its normalized image is ever tagged with the
        // reference (a concurrent run pushing the tag must never find an unnormalized build there).
        request.untagged = true;
        request.platform = Some(image.spec.platform.to_string());
        request.labels = self.settings.build_labels.clone();
        request
            .labels
            .insert(BUILD_KEY_LABEL.into(), image.build_key.to_string());
        let limit = self.settings.build_timeout;
        let log = self.progress.log_path(name);
        // Labels alone changed since a kept build of the same inputs: no Docker build at all. (Not
        // for a venv made on the host: the kept builds are the Docker build's layers only.)
        let inputs = match &host_script {
            Some(_) => None,
            None => match self.relabel_inputs(image, &request.labels).await {
                Ok(inputs) => Some(inputs),
                Err(why) => {
                    let why = format!("a change of its labels alone cannot skip the build: {why}");
                    self.progress.log_only(name, &format!("== {why}"));
                    None
                }
            },
        };
        if let Some(inputs) = &inputs {
            if let Some(done) = self.relabel(image, inputs).await {
                return Ok(done);
            }
        }
        // The venv's layer of `wheels: host` needs only the wheels: written beside the build.
        let early_venv = match &host_script {
            Some(script) => {
                self.early_venv_layer(image, script, &listing_script(image), load)
                    .await
            }
            None => None,
        };
        self.progress
            .phase(name, "building the image (docker build)");
        let built = {
            let progress = Arc::clone(&self.progress);
            let log_name = name.clone();
            let journal = self.settings.journal.clone();
            let mut steps = StepImages::default();
            let building = self.engine.build(request, move |line| {
                if let (Some(journal), Some(image)) = (&journal, steps.see(line)) {
                    if let Err(error) = journal.record(image) {
                        progress.line(
                            &log_name,
                            &format!(
                                "== warning: could not write step image {image} to {}: {error}",
                                journal.path().display()
                            ),
                        );
                    }
                }
                progress.line(&log_name, line)
            });
            match tokio::time::timeout(limit, building).await {
                Ok(result) => result.map_err(anyhow::Error::from),
                Err(_) => {
                    self.progress
                        .stage(name, "build stopped: past its deadline");
                    return Err(anyhow!(
                        "building {} did not finish within {} s; it was stopped\nfull log: {}\nhint: --build-timeout (IMAGEGEN_BUILD_TIMEOUT) sets how long one build may take",
                        image.reference,
                        limit.as_secs(),
                        log.display()
                    ));
                }
            }
        };
        match built {
            Ok(id) => {
                self.progress.stage(name, &format!("built {id}"));
                let epoch = match &inputs {
                    Some(inputs) => inputs.epoch,
                    None => self.epoch_of(image).await?,
                };
                if let (Some(script), Some(lock)) = (host_script, host_lock) {
                    let files = HostVenvFiles { script, lock };
                    let around = self
                        .normalize(name, &id, epoch)
                        .await
                        .with_context(|| format!("normalizing {}", image.reference))?;
                    let (normalized, listed) = self
                        .host_venv(image, &id, &around, files, early_venv, load)
                        .await
                        .with_context(|| {
                            format!("making the venv of {} on the host", image.reference)
                        })?;
                    self.listed
                        .lock()
                        .expect("listed lock")
                        .insert(name.clone(), listed);
                    if !load {
                        self.progress.stage(
                            name,
                            "not loaded into the Docker daemon: this run pushes it and runs nothing of it here (`docker pull` it to run it here)",
                        );
                        self.unloaded
                            .lock()
                            .expect("unloaded lock")
                            .insert(image.reference.clone(), Arc::clone(&normalized));
                    } else {
                        self.load(name, &image.reference, &normalized).await?;
                    }
                    return Ok(self.built(normalized));
                }
                let warm = match self.normalized_from_store(name, &id, epoch).await {
                    Some(warm) => match self.load(name, &image.reference, &warm).await {
                        Ok(()) => {
                            self.keep_in_store(name, &id, epoch, &warm, false, inputs.as_ref())
                                .await;
                            Some(warm)
                        }
                        Err(error) => {
                            self.progress.line(
                                name,
                                &format!("== loading it with the earlier build's layers failed ({error:#}): normalizing every layer"),
                            );
                            None
                        }
                    },
                    None => None,
                };
                let normalized = match warm {
                    Some(warm) => warm,
                    None => {
                        let normalized = self
                            .normalize(name, &id, epoch)
                            .await
                            .with_context(|| format!("normalizing {}", image.reference))?;
                        self.load(name, &image.reference, &normalized).await?;
                        self.keep_in_store(name, &id, epoch, &normalized, true, inputs.as_ref())
                            .await;
                        normalized
                    }
                };
                Ok(self.built(normalized))
            }
            Err(error) => Err(self.build_failed(name, error)),
        }
    }

    /// A failed build of `name` as the summary shows it: the error itself kept in the image's
    /// log (not only that the build failed), and the log named.
    pub(super) fn build_failed(&self, name: &str, error: anyhow::Error) -> anyhow::Error {
        self.progress.log_only(name, "== error");
        for line in format!("{error:#}").lines() {
            self.progress.log_only(name, line);
        }
        self.progress.stage(name, "build failed");
        anyhow!(
            "{error:#}\nfull log: {}",
            self.progress.log_path(name).display()
        )
    }
}

/// The content of the file `path` of the context tar `context`, when it has one.
fn file_of_context(context: &[u8], path: &str) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut archive = tar::Archive::new(context);
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.path()?.to_string_lossy() == path {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            return Ok(Some(bytes));
        }
    }
    Ok(None)
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
    fn a_file_of_the_context_is_read_by_its_path() {
        let context = context_of(&[
            ("Dockerfile", 0o644, b"FROM scratch\n"),
            (HOST_VENV_SCRIPT, 0o755, b"#!/bin/sh\n"),
        ]);
        assert_eq!(
            file_of_context(&context, HOST_VENV_SCRIPT).unwrap(),
            Some(b"#!/bin/sh\n".to_vec())
        );
        assert_eq!(file_of_context(&context, "wheels/SOURCES").unwrap(), None);
        assert!(file_of_context(
            b"not a tar at all, and long enough to be read as one block",
            "x"
        )
        .is_err());
    }
}
