//! `wheels: host`: the runtime image's venv made on the host. The Docker build made the image
//! around the venv (its packages not installed); here imagegen installs the image's cached wheels
//! with its own installer (`pipeline::wheel_install`), runs the image's host-venv.sh in a
//! container of that build over the sources, metadata and CUDA libraries of the install (it
//! byte-compiles, checks and builds the loader cache), and adds two layers above the build's
//! normalized ones: the venv's packages with their `.pyc` files, written and compressed in one
//! pass from the wheels, and what host-venv.sh wrote besides. Nothing of the venv passes through
//! the daemon's build. The same container then lists the image's packages (it holds every
//! `.dist-info` folder, the venv's scripts and the build's dpkg database, which is all the listing
//! reads), so the image need not be in the daemon to be listed; the caller loads it where this
//! host runs it (the self-test, an image built `FROM` it) or where the run does not push it.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::{layer_of_stored, rate, repository_path_of, stored_layer, EngineBuilder};
use crate::docker::layer_store::StoredHostVenv;
use crate::docker::{ContextWheels, RunRequest};
use crate::history::manifest::{human_bytes, rfc3339};
use crate::model::digest::Digest;
use crate::pipeline::normalize::{
    assemble, normalize_layer_into, GzipWriter, Gzipped, NormalizedImage, NormalizedLayer,
};
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::wheel_install::{
    self, helper_tar, split_written, venv_key, write_layer, Venv, Wheel, HELPER_WRITTEN,
    VENV_PREFIX,
};

/// How long host-venv.sh may take (it byte-compiles thousands of sources on every core).
const HELPER_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Where the script goes in the container.
const HELPER_SCRIPT: &str = "imagegen/host-venv.sh";
/// Where the package listing's script goes in the container.
const LISTING_SCRIPT: &str = "imagegen/list-packages.sh";
/// The bytes of the helper's tar sent to the daemon at a time.
const UPLOAD_CHUNK: usize = 1 << 20;

/// Sends what is written to the daemon as it comes, in [`UPLOAD_CHUNK`] pieces.
struct ChannelWriter {
    sender: tokio::sync::mpsc::Sender<bytes::Bytes>,
    pending: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let piece = bytes::Bytes::from(std::mem::replace(
            &mut self.pending,
            Vec::with_capacity(UPLOAD_CHUNK),
        ));
        self.sender.blocking_send(piece).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the daemon stopped taking the files",
            )
        })
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(data);
        if self.pending.len() >= UPLOAD_CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

type Wheels = Vec<Wheel<crate::docker::wheel_cache::WheelReader>>;

/// The image's wheels, opened.
fn open_wheels(wheels: &ContextWheels) -> Result<Wheels> {
    let paths: Vec<_> = wheels
        .files
        .iter()
        .map(|file| file.source.clone())
        .collect();
    crate::docker::wheel_cache::open_wheels(&paths)?
        .into_iter()
        .map(|(name, reader)| Wheel::new(&name, reader))
        .collect()
}

/// A layer of `gzipped`.
fn layer_of(gzipped: Gzipped) -> NormalizedLayer {
    NormalizedLayer {
        digest: Digest::of(&gzipped.gzip),
        compressed_size: gzipped.gzip.len() as u64,
        gzip: Some(gzipped.gzip.into()),
        diff_id: gzipped.diff_id,
        unpacked_size: gzipped.unpacked_size,
    }
}

/// `config` (a normalized config) with one history entry more per `(created_by, comment)`, made
/// at `epoch` as every other entry of a normalized config.
fn with_history(config: &[u8], added: &[(String, &str)], epoch: u64) -> Result<Vec<u8>> {
    let mut config: Value = serde_json::from_slice(config).context("the image config")?;
    let history = config
        .get_mut("history")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| anyhow!("the image config has no history"))?;
    for (created_by, comment) in added {
        history.push(serde_json::json!({
            "created": rfc3339(epoch),
            "created_by": created_by,
            "comment": comment,
        }));
    }
    Ok(serde_json::to_vec(&config)?)
}

/// `around`'s config with the history entries of the venv's two layers.
fn venv_config(around: &NormalizedImage, wheel_count: usize) -> Result<Vec<u8>> {
    with_history(
        &around.config,
        &[
            (
                format!("imagegen: the {wheel_count} wheels of requirements.lock installed into {VENV_PREFIX} on the host (wheels: host)"),
                "imagegen wheels: host",
            ),
            (
                "imagegen: host-venv.sh (byte-compiled, pip check, loader cache) in a container of the build".to_string(),
                "imagegen wheels: host",
            ),
        ],
        around.epoch,
    )
}

/// The key of the venv of `image` (`wheel_install::venv_key`) going into `around`.
fn key_of(
    script: &[u8],
    listing: &str,
    venv: &Venv,
    wheels: &ContextWheels,
    around: &NormalizedImage,
) -> Result<String> {
    let config: Value = serde_json::from_slice(&around.config).context("the image config")?;
    let wheels: Vec<String> = wheels
        .files
        .iter()
        .map(|file| format!("{} {}", file.path, file.source.display()))
        .collect();
    let layers: Vec<String> = around
        .layers
        .iter()
        .map(|layer| layer.diff_id.to_string())
        .collect();
    Ok(venv_key(
        script,
        listing,
        venv,
        &wheels,
        &layers,
        around.epoch,
        config.get("config").unwrap_or(&Value::Null),
    ))
}

impl EngineBuilder {
    /// The venv an earlier run made under `key`, where this run pushes `image` without loading
    /// it (a load needs the layers' bytes, which are not kept) and its registry holds both
    /// layers: the layers without bytes, and the listing.
    async fn kept_venv(
        &self,
        image: &PlannedImage,
        key: &str,
    ) -> Option<(Vec<NormalizedLayer>, String)> {
        let name = &image.spec.name;
        let store = self.settings.layer_store.as_ref()?;
        if !self.settings.unloaded.contains(name) {
            return None;
        }
        let kept = store.host_venv(key)?;
        let client = self.registry(&image.spec.repository).await.ok()?;
        let path = repository_path_of(&image.spec.repository);
        let mut layers = Vec::new();
        for layer in &kept.layers {
            match client.has_blob(path, &layer.digest).await {
                Ok(true) => {}
                Ok(false) => {
                    self.progress.line(
                        name,
                        &format!("== the venv an earlier run made with these inputs ({key}) has a layer {} that {} no longer holds: making it again", layer.digest, image.spec.repository),
                    );
                    return None;
                }
                Err(error) => {
                    self.progress.line(
                        name,
                        &format!("== could not ask the registry for the venv an earlier run made ({error}): making it again"),
                    );
                    return None;
                }
            }
            layers.push(layer_of_stored(layer).ok()?);
        }
        Some((layers, kept.listing))
    }

    /// The image `image` whose Docker build (daemon image `built`, normalized as `around`) holds
    /// no venv packages: the venv's two layers made on the host added above `around`'s (not
    /// loaded), and what the package listing script `listing` printed in the container that
    /// made them, after host-venv.sh.
    pub(super) async fn host_venv(
        &self,
        image: &PlannedImage,
        built: &str,
        around: &NormalizedImage,
        script: Vec<u8>,
        listing: &str,
    ) -> Result<(Arc<NormalizedImage>, String)> {
        let name = &image.spec.name;
        let wheels = self.contexts.wheels.get(name).ok_or_else(|| {
            anyhow!("{name}: wheels: host, but no wheels were fetched for its lock")
        })?;
        let venv = Venv {
            prefix: VENV_PREFIX.to_string(),
            python: image.spec.python.to_string(),
        };
        let epoch = around.epoch;
        let started = Instant::now();
        let key = key_of(&script, listing, &venv, wheels, around)?;
        if let Some((venv_layers, listed)) = self.kept_venv(image, &key).await {
            let mut layers = around.layers.clone();
            layers.extend(venv_layers);
            let config = venv_config(around, wheels.files.len())?;
            let normalized = assemble(&config, layers, epoch)?;
            self.progress.stage(
                name,
                &format!(
                    "venv as an earlier run made it from these wheels, scripts and layers (venv {key}): both its layers are in {} already, so nothing is installed; manifest {}",
                    image.spec.repository, normalized.manifest_digest
                ),
            );
            self.note_normalized(&normalized);
            return Ok((Arc::new(normalized), listed));
        }
        let mut opened = open_wheels(wheels)?;
        let plan_venv = venv.clone();
        let (install, opened) = tokio::task::spawn_blocking(move || {
            let install = wheel_install::plan(&mut opened, &plan_venv);
            (install, opened)
        })
        .await
        .map_err(|error| anyhow!("the install planning thread failed: {error}"))?;
        let mut install = install.with_context(|| format!("installing the wheels of {name}"))?;
        let wheel_count = opened.len();
        self.progress.line(
            name,
            &format!(
                "venv on the host: {wheel_count} wheels, {} files planned in {:.1} s",
                install.files.len(),
                started.elapsed().as_secs_f64()
            ),
        );

        // host-venv.sh in a container of the build, over the sources, metadata and libraries,
        // which stream to the daemon as they are inflated.
        let helper_started = Instant::now();
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
        let helper_install = std::mem::take(&mut install);
        let helper_venv = venv.clone();
        let listing = listing.to_string();
        let writing = tokio::task::spawn_blocking(move || {
            let mut opened = opened;
            let writer = ChannelWriter {
                sender,
                pending: Vec::with_capacity(UPLOAD_CHUNK),
            };
            let written = helper_tar(
                &helper_install,
                &mut opened,
                &helper_venv,
                epoch,
                &[
                    (HELPER_SCRIPT, script.as_slice()),
                    (LISTING_SCRIPT, listing.as_bytes()),
                ],
                writer,
            )
            .and_then(|(mut writer, count)| {
                writer.flush()?;
                Ok(count)
            });
            (helper_install, opened, written)
        });
        let upload = futures_util::stream::poll_fn(move |context| receiver.poll_recv(context));
        let request = RunRequest {
            image: built.to_string(),
            // host-venv.sh's output goes to stderr: stdout is the listing's alone. The listing
            // runs after host-venv.sh packed what it wrote, and writes no bytecode.
            cmd: vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "sh /{HELPER_SCRIPT} >&2 && PYTHONDONTWRITEBYTECODE=1 sh /{LISTING_SCRIPT}"
                ),
            ],
            entrypoint: Some(vec![]),
            timeout: Some(HELPER_TIMEOUT),
            labels: self.container_labels("imagegen.host-venv", name),
            ..Default::default()
        };
        let ran = self
            .engine
            .run_with_files(request, Some(Box::pin(upload)), Some(HELPER_WRITTEN))
            .await;
        let (helper_install, mut opened, sent) = writing
            .await
            .map_err(|error| anyhow!("the thread sending the venv's files failed: {error}"))?;
        install = helper_install;
        let (output, written) = ran.with_context(|| format!("running host-venv.sh for {name}"))?;
        let sent = sent.with_context(|| format!("sending the venv's files of {name}"))?;
        for line in output.stderr.lines() {
            self.progress.log_only(name, line);
        }
        if output.exit_code != 0 {
            anyhow::bail!(
                "host-venv.sh (images/{name}/host-venv.sh) or the package listing after it exited {} in a container of {name}'s build: {}",
                output.exit_code,
                output.stderr.trim()
            );
        }
        let (bytecode, loader) = split_written(&written, &install)
            .with_context(|| format!("what host-venv.sh wrote for {name}"))?;
        let compiled = install.add_bytecode(bytecode, &venv)?;
        self.progress.line(
            name,
            &format!(
                "venv on the host: host-venv.sh ran over {sent} files in {:.1} s: {compiled} .pyc files, {} bytes of other files",
                helper_started.elapsed().as_secs_f64(),
                loader.len()
            ),
        );

        // The venv's layer, in one pass from the wheels; and what host-venv.sh wrote besides.
        let layer_started = Instant::now();
        let (venv_layer, loader_layer) = tokio::task::spawn_blocking(move || -> Result<_> {
            let (writer, _) = write_layer(&install, &mut opened, epoch, GzipWriter::new())?;
            let loader = normalize_layer_into(&loader, epoch, GzipWriter::new())?;
            Ok((writer.finish(), loader.finish()))
        })
        .await
        .map_err(|error| anyhow!("the venv layer's thread failed: {error}"))??;
        let venv_layer = layer_of(venv_layer);
        let loader_layer = layer_of(loader_layer);
        self.progress.stage(
            name,
            &format!(
                "venv installed on the host from {wheel_count} wheels: {} unpacked, {} compressed {}; host-venv.sh's layer {}",
                human_bytes(venv_layer.unpacked_size),
                human_bytes(venv_layer.compressed_size),
                rate(venv_layer.unpacked_size, layer_started.elapsed()),
                human_bytes(loader_layer.unpacked_size),
            ),
        );
        let config = venv_config(around, wheel_count)?;
        if let Some(store) = &self.settings.layer_store {
            let kept = StoredHostVenv {
                key: key.clone(),
                layers: vec![stored_layer(&venv_layer), stored_layer(&loader_layer)],
                listing: output.stdout.clone(),
            };
            if let Err(error) = store.remember_host_venv(kept) {
                self.progress.log_only(
                    name,
                    &format!(
                        "== warning: could not keep the venv's layers in {}: {error}",
                        store.path().display()
                    ),
                );
            }
        }
        let mut layers = around.layers.clone();
        layers.push(venv_layer);
        layers.push(loader_layer);
        let normalized = assemble(&config, layers, epoch)?;
        self.progress.stage(
            name,
            &format!(
                "normalized with the venv made on the host ({} layers, epoch {epoch}): {} unpacked, {} compressed in {:.1} s, manifest {}",
                normalized.layers.len(),
                human_bytes(normalized.unpacked_size()),
                human_bytes(normalized.size().compressed_bytes),
                started.elapsed().as_secs_f64(),
                normalized.manifest_digest
            ),
        );
        self.note_normalized(&normalized);
        Ok((Arc::new(normalized), output.stdout))
    }
}
