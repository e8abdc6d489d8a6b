//! `wheels: host`: the runtime image's venv made on the host. The Docker build made the image
//! around the venv (its packages not installed); here imagegen installs the image's cached wheels
//! with its own installer (`pipeline::wheel_install`), runs the image's host-venv.sh in a
//! container of that build over the sources, metadata and CUDA libraries of the install (it
//! byte-compiles, checks and builds the loader cache), and adds two layers above the build's
//! normalized ones: the venv's packages but their RECORDs, written and compressed in one pass
//! from the wheels on a thread of its own, started beside the Docker build (it needs only the
//! wheels and the epoch), and above it the `.pyc` files, the RECORDs that list them and what
//! host-venv.sh wrote besides. Nothing of the venv passes through
//! the daemon's build. The same container then lists the image's packages (it holds every
//! `.dist-info` folder, the venv's scripts and the build's dpkg database, which is all the listing
//! reads), so the image need not be in the daemon to be listed; the caller loads it where this
//! host runs it (the self-test, an image built `FROM` it) or where the run does not push it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::layers::{layer_of_stored, stored_layer};
use super::{listing_script, rate, EngineBuilder};
use crate::docker::layer_store::StoredHostVenv;
use crate::docker::repository_path_of;
use crate::docker::{ContextWheels, RunRequest};
use crate::history::manifest::{human_bytes, rfc3339};
use crate::model::digest::Digest;
use crate::pipeline::normalize::{
    assemble, normalize_layer_into, GzipWriter, Gzipped, NormalizedImage, NormalizedLayer,
};
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::wheel_install::{
    self, helper_tar, split_written, upper_tar, venv_key, venv_wheels_key, write_layer,
    InstallPlan, Venv, Wheel, HELPER_WRITTEN, VENV_PREFIX,
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
                format!("imagegen: the {wheel_count} wheels of requirements.lock installed into {VENV_PREFIX} on the host, RECORDs apart (wheels: host)"),
                "imagegen wheels: host",
            ),
            (
                "imagegen: the RECORDs and what host-venv.sh wrote (byte-compiled, pip check, loader cache) in a container of the build".to_string(),
                "imagegen wheels: host",
            ),
        ],
        around.epoch,
    )
}

/// The venv every image installs its lock into, at `image`'s Python.
fn venv_of(image: &PlannedImage) -> Venv {
    Venv {
        prefix: VENV_PREFIX.to_string(),
        python: image.spec.python.to_string(),
    }
}

/// The part of a venv's key known before the Docker build (`wheel_install::venv_wheels_key`).
fn wheels_key_of(
    script: &[u8],
    listing: &str,
    venv: &Venv,
    wheels: &ContextWheels,
    epoch: u64,
) -> String {
    let wheels: Vec<String> = wheels
        .files
        .iter()
        .map(|file| format!("{} {}", file.path, file.source.display()))
        .collect();
    venv_wheels_key(script, listing, venv, &wheels, epoch)
}

/// The key of a venv (`wheel_install::venv_key`) of the wheels of `wheels_key` going into
/// `around`.
fn key_of(wheels_key: &str, around: &NormalizedImage) -> Result<String> {
    let config: Value = serde_json::from_slice(&around.config).context("the image config")?;
    let layers: Vec<String> = around
        .layers
        .iter()
        .map(|layer| layer.diff_id.to_string())
        .collect();
    Ok(venv_key(
        wheels_key,
        &layers,
        config.get("config").unwrap_or(&Value::Null),
    ))
}

/// A writer that fails once `stop` is set: how a layer nobody waits for any more ends.
struct Stoppable<W> {
    inner: W,
    stop: Arc<AtomicBool>,
}

impl<W: Write> Write for Stoppable<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            // Not `Interrupted`: `write_all` (the tar writer's) retries that for ever.
            return Err(std::io::Error::other(
                "the venv's layer is no longer needed",
            ));
        }
        self.inner.write(data)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The venv's lower layer (`InstallPlan::without_records`: every file of the wheels but their
/// RECORDs, no `.pyc`) being written and compressed from the wheels on a blocking thread. It
/// needs nothing of the Docker build, so it starts beside it. Dropped unfinished (a kept venv
/// serves after all, or the build failed), it stops at its next write.
pub(super) struct VenvLayer {
    epoch: u64,
    started: Instant,
    stop: StopOnDrop,
    /// The install plan, sent once the thread made it (the layer is written from it).
    plan: Option<tokio::sync::oneshot::Receiver<InstallPlan>>,
    writing: tokio::task::JoinHandle<Result<Gzipped>>,
}

impl VenvLayer {
    /// Starts writing the lower layer of `wheels` installed into `venv`, every mtime `epoch`.
    fn start(wheels: &ContextWheels, venv: &Venv, epoch: u64) -> Result<VenvLayer> {
        let mut opened = open_wheels(wheels)?;
        let venv = venv.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = Stoppable {
            inner: GzipWriter::new(),
            stop: Arc::clone(&stop),
        };
        let (planned, plan) = tokio::sync::oneshot::channel();
        let writing = tokio::task::spawn_blocking(move || -> Result<Gzipped> {
            let install = wheel_install::plan(&mut opened, &venv)?;
            let lower = install.without_records();
            // Nobody waits for the plan where a kept venv serves, or the build failed.
            let _ = planned.send(install);
            let (writer, _) = write_layer(&lower, &mut opened, epoch, writer)?;
            Ok(writer.inner.finish())
        });
        Ok(VenvLayer {
            epoch,
            started: Instant::now(),
            stop: StopOnDrop(stop),
            plan: Some(plan),
            writing,
        })
    }

    /// The install plan of the wheels, once the thread made it; `None` where it failed first
    /// ([`VenvLayer::finish`] says why) or the plan was taken already.
    async fn take_plan(&mut self) -> Option<InstallPlan> {
        self.plan.take()?.await.ok()
    }

    /// The finished layer, and how long it took since it started.
    async fn finish(self) -> Result<(NormalizedLayer, Duration)> {
        let gzipped = self
            .writing
            .await
            .map_err(|error| anyhow!("the venv layer's thread failed: {error}"))??;
        Ok((layer_of(gzipped), self.started.elapsed()))
    }
}

/// Sets a [`VenvLayer`]'s stop flag when dropped: the layer's own (a layer dropped unfinished),
/// and host_venv's while the layer is in a task (a build that ends early, host-venv.sh failed,
/// leaves no layer being written for nothing).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl EngineBuilder {
    /// The venv an earlier run made under `key`, where this run pushes `image` without loading
    /// it (a load needs the layers' bytes, which are not kept) and its registry holds both
    /// layers: the layers without bytes, and the listing.
    async fn kept_venv(
        &self,
        image: &PlannedImage,
        key: &str,
        load: bool,
    ) -> Option<(Vec<NormalizedLayer>, String)> {
        let name = &image.spec.name;
        let store = self.settings.layer_store.as_ref()?;
        if load {
            return None;
        }
        let kept = store.host_venv(key)?;
        let client = self.registry(&image.spec.repository).await.ok()?;
        let path = repository_path_of(&image.spec.repository);
        let mut layers = Vec::new();
        for layer in &kept.layers {
            // A stored digest that is not one names no blob the registry could hold.
            let held = match Digest::parse(&layer.digest) {
                Ok(digest) => client.has_blob(path, &digest).await,
                Err(_) => Ok(false),
            };
            match held {
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

    /// `lower` finished, on a task of its own. Where `image` is pushed right after its build
    /// (not `load`ed), the task first uploads the layers of `around` that have bytes here,
    /// then the lower layer as soon as it is written, so the push finds them in the registry (it
    /// asks before sending a blob). An upload that fails is only written to the log: the push
    /// sends the layer again and reports what stops it.
    async fn upload_ahead(
        &self,
        image: &PlannedImage,
        around: &NormalizedImage,
        lower: VenvLayer,
        load: bool,
    ) -> tokio::task::JoinHandle<Result<(NormalizedLayer, Duration)>> {
        let name = image.spec.name.clone();
        let client = if !load {
            self.registry(&image.spec.repository).await.ok()
        } else {
            None
        };
        let path = repository_path_of(&image.spec.repository).to_string();
        let blobs: Vec<bytes::Bytes> = around
            .layers
            .iter()
            .filter_map(|layer| layer.gzip.clone())
            .collect();
        let progress = Arc::clone(&self.progress);
        tokio::spawn(async move {
            let Some(client) = client else {
                return lower.finish().await;
            };
            let started = Instant::now();
            let mut sent = 0u64;
            let mut failed = false;
            for blob in blobs {
                let size = blob.len() as u64;
                if let Err(error) = client.put_blob(&path, blob).await {
                    progress.log_only(&name, &format!("== uploading a layer ahead of the push failed ({error}): the push sends it"));
                    failed = true;
                    break;
                }
                sent += size;
            }
            let (layer, took) = lower.finish().await?;
            if !failed {
                if let Some(gzip) = layer.gzip.clone() {
                    match client.put_blob(&path, gzip).await {
                        Ok(_) => sent += layer.compressed_size,
                        Err(error) => progress.log_only(&name, &format!("== uploading the venv's layer ahead of the push failed ({error}): the push sends it")),
                    }
                }
                progress.stage(
                    &name,
                    &format!(
                        "venv on the host: {} of layers uploaded ahead of the push {}",
                        human_bytes(sent),
                        rate(sent, started.elapsed())
                    ),
                );
            }
            Ok((layer, took))
        })
    }

    /// The venv's lower layer of `image` (`wheels: host`, host-venv.sh `script`, listing script
    /// `listing`), started before its Docker build, on the wheels and the epoch alone. Not where
    /// a venv of the same wheels is kept and the run may take it (it pushes `image` unloaded, not
    /// `load`):
    /// whether it does depends on the build, and a layer written for nothing would slow it.
    pub(super) async fn early_venv_layer(
        &self,
        image: &PlannedImage,
        script: &[u8],
        listing: &str,
        load: bool,
    ) -> Option<VenvLayer> {
        let name = &image.spec.name;
        let wheels = self.contexts.wheels.get(name)?;
        let epoch = self.epoch_of(image).await.ok()?;
        let venv = venv_of(image);
        if let Some(store) = &self.settings.layer_store {
            let wheels_key = wheels_key_of(script, listing, &venv, wheels, epoch);
            if !load && store.has_host_venv_of_wheels(&wheels_key) {
                self.progress.log_only(
                    name,
                    "== a venv of these wheels is kept: its layer waits for the Docker build, which decides whether it is needed",
                );
                return None;
            }
        }
        match VenvLayer::start(wheels, &venv, epoch) {
            Ok(layer) => {
                self.progress.stage(
                    name,
                    &format!("venv on the host: its layer is written from the {} wheels beside the Docker build", wheels.files.len()),
                );
                Some(layer)
            }
            // Started again after the build, where the error stops it.
            Err(error) => {
                self.progress.log_only(
                    name,
                    &format!("== the venv's layer cannot start: {error:#}"),
                );
                None
            }
        }
    }

    /// The image `image` whose Docker build (daemon image `built`, normalized as `around`) holds
    /// no venv packages: the venv's two layers made on the host added above `around`'s (not
    /// loaded), and what the image's package listing script printed in the container that
    /// made them, after host-venv.sh. `early` is the venv's lower layer where it was started
    /// beside the Docker build; `load` is the plan's word on loading the image.
    pub(super) async fn host_venv(
        &self,
        image: &PlannedImage,
        built: &str,
        around: &NormalizedImage,
        script: Vec<u8>,
        early: Option<VenvLayer>,
        load: bool,
    ) -> Result<(Arc<NormalizedImage>, String)> {
        let name = &image.spec.name;
        let listing = &listing_script(image);
        let wheels = self.contexts.wheels.get(name).ok_or_else(|| {
            anyhow!("{name}: wheels: host, but no wheels were fetched for its lock")
        })?;
        let venv = venv_of(image);
        let epoch = around.epoch;
        let started = Instant::now();
        let wheels_key = wheels_key_of(&script, listing, &venv, wheels, epoch);
        let key = key_of(&wheels_key, around)?;
        if let Some((venv_layers, listed)) = self.kept_venv(image, &key, load).await {
            drop(early);
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
        // The lower layer: started beside the Docker build, or now, beside host-venv.sh. Where
        // the image is pushed right after this build, its layers go to the registry as they
        // are ready, beside host-venv.sh: the push then sends only the upper layer.
        let mut lower = match early {
            Some(early) if early.epoch == epoch => early,
            _ => VenvLayer::start(wheels, &venv, epoch)?,
        };
        let _stop_lower = StopOnDrop(Arc::clone(&lower.stop.0));
        // The install plan the layer's thread made (host-venv.sh's files are chosen from it).
        let Some(mut install) = lower.take_plan().await else {
            lower
                .finish()
                .await
                .with_context(|| format!("installing the wheels of {name}"))?;
            anyhow::bail!("{name}: the venv's layer ended without its install plan");
        };
        let lower = self.upload_ahead(image, around, lower, load).await;
        let opened = open_wheels(wheels)?;
        let wheel_count = opened.len();
        self.progress.phase(
            name,
            &format!(
                "making the venv on the host: {wheel_count} wheels, {} files planned in {:.1} s; host-venv.sh runs",
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
                Ok((count, helper_started.elapsed()))
            });
            (helper_install, written)
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
            // As root: the venv is root's, as pip leaves it in the build, and the image's own
            // `USER` (the matrix's `user:`, last in the Dockerfile) may write none of it.
            user: Some("0:0".into()),
            labels: self.container_labels("imagegen.host-venv", name),
            ..Default::default()
        };
        let ran = self
            .engine
            .run_with_files(request, Some(Box::pin(upload)), Some(HELPER_WRITTEN))
            .await;
        let (helper_install, sent) = writing
            .await
            .map_err(|error| anyhow!("the thread sending the venv's files failed: {error}"))?;
        install = helper_install;
        let (output, written) = ran.with_context(|| format!("running host-venv.sh for {name}"))?;
        let (sent, sending) =
            sent.with_context(|| format!("sending the venv's files of {name}"))?;
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
        let (bytecode, others) = split_written(&written, &install)
            .with_context(|| format!("what host-venv.sh wrote for {name}"))?;
        let others_count = others.len();
        let compiled = install.add_bytecode(bytecode, &venv)?;
        self.progress.stage(
            name,
            &format!(
                "venv on the host: host-venv.sh ran over {sent} files in {:.1} s (the files sent in {:.1} s): {compiled} .pyc files, {others_count} other files",
                helper_started.elapsed().as_secs_f64(),
                sending.as_secs_f64(),
            ),
        );

        // Above the venv's layer: the `.pyc` files, the RECORDs listing them, and what
        // host-venv.sh wrote besides.
        let upper = upper_tar(&install, others)
            .with_context(|| format!("what host-venv.sh wrote for {name}"))?;
        let upper_layer = tokio::task::spawn_blocking(move || -> Result<_> {
            Ok(normalize_layer_into(&upper, epoch, GzipWriter::new())?.finish())
        })
        .await
        .map_err(|error| anyhow!("the upper venv layer's thread failed: {error}"))??;
        let upper_layer = layer_of(upper_layer);
        let waited = Instant::now();
        let (venv_layer, took) = lower
            .await
            .map_err(|error| anyhow!("the venv layer's task failed: {error}"))??;
        self.progress.stage(
            name,
            &format!(
                "venv installed on the host from {wheel_count} wheels: {} unpacked, {} compressed {} (waited {:.1} s for it after host-venv.sh); bytecode and host-venv.sh's layer {} unpacked, {} compressed",
                human_bytes(venv_layer.unpacked_size),
                human_bytes(venv_layer.compressed_size),
                rate(venv_layer.unpacked_size, took),
                waited.elapsed().as_secs_f64(),
                human_bytes(upper_layer.unpacked_size),
                human_bytes(upper_layer.compressed_size),
            ),
        );
        let config = venv_config(around, wheel_count)?;
        if let Some(store) = &self.settings.layer_store {
            let kept = StoredHostVenv {
                key: key.clone(),
                wheels: wheels_key,
                layers: vec![stored_layer(&venv_layer), stored_layer(&upper_layer)],
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
        layers.push(upper_layer);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_layer_fails_at_its_next_write_and_its_compressor_ends() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut writer = Stoppable {
            inner: GzipWriter::with_threads(2),
            stop: Arc::clone(&stop),
        };
        // Several chunks, so the compressor's threads are at work when it stops.
        let chunk = vec![7u8; 3 << 20];
        for _ in 0..4 {
            writer.write_all(&chunk).unwrap();
        }
        // What host_venv keeps while the layer's task runs, dropped as an early return drops it.
        drop(StopOnDrop(Arc::clone(&stop)));
        // On a thread, so that a write that never ends (`write_all` retries an `Interrupted`
        // error for ever) fails the test instead of hanging it. Dropped mid-stream, as
        // write_layer's error drops it, the writer's threads end.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let error = writer.write_all(&chunk).unwrap_err();
            drop(writer);
            sender.send(error.to_string()).unwrap();
        });
        let error = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("a stopped writer fails its next write and ends");
        assert!(error.contains("no longer needed"), "{error}");
        let chunk = vec![7u8; 3 << 20];

        let mut unstopped = Stoppable {
            inner: GzipWriter::with_threads(2),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let mut plain = GzipWriter::with_threads(2);
        for _ in 0..3 {
            unstopped.write_all(&chunk).unwrap();
            plain.write_all(&chunk).unwrap();
        }
        let (through, direct) = (unstopped.inner.finish(), plain.finish());
        assert_eq!(
            through.gzip, direct.gzip,
            "the same bytes as the writer alone"
        );
        assert_eq!(through.diff_id, direct.diff_id);
    }
}
