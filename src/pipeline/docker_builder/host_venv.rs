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

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::layers::{layer_of_stored, stored_layer};
use super::{listing_script, rate, EngineBuilder, HostVenvFiles};
use crate::docker::layer_store::StoredHostVenv;
use crate::docker::repository_path_of;
use crate::docker::{ContextWheels, RunRequest};
use crate::history::manifest::{human_bytes, rfc3339};
use crate::model::axes::VenvLayers;
use crate::model::digest::Digest;
use crate::model::venv_holds::{self, OTHERS_HOLDS};
use crate::pipeline::normalize::{
    assemble, normalize_layer_into, GzipWriter, Gzipped, NormalizedImage, NormalizedLayer,
};
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::venv_cut::{
    cut, layout_key, Place, Unit, WheelFile, DOCKER_LAYER_LIMIT, VENV_EPOCH,
};
use crate::pipeline::wheel_install::{
    self, helper_tar, others_tar, split_written, venv_key, venv_wheels_key, write_layer,
    InstallPlan, Part, Venv, Wheel, HELPER_WRITTEN, VENV_PREFIX,
};

/// Where the image's lock goes, in the venv's last layer (paths relative to `/`).
const LOCK_IN_IMAGE: &str = "opt/imagegen/requirements.lock";

/// The header of a regular file of `size` bytes, 0644, root's (its time is the normalizing's).
fn file_header(size: usize) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(size as u64);
    header
}

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

/// One layer of a venv made on the host and what it holds: its history entry's `created_by`,
/// which the manifest records beside its digest.
#[derive(Clone)]
pub(super) struct VenvPart {
    layer: NormalizedLayer,
    holds: String,
}

/// A venv's layers, placed as `pipeline::venv_cut` orders them: `below` the base (the large
/// wheels' files), `above` the Docker build (their bytecode, the small wheels' groups and what
/// host-venv.sh wrote).
#[derive(Clone, Default)]
pub(super) struct PlacedVenv {
    below: Vec<VenvPart>,
    above: Vec<VenvPart>,
}

impl PlacedVenv {
    fn parts(&self) -> impl Iterator<Item = &VenvPart> {
        self.below.iter().chain(&self.above)
    }

    /// As the layer store keeps it.
    fn stored(&self, key: String, wheels: String, listing: String) -> StoredHostVenv {
        StoredHostVenv {
            key,
            wheels,
            layers: self.parts().map(|part| stored_layer(&part.layer)).collect(),
            holds: self.parts().map(|part| part.holds.clone()).collect(),
            below: self.below.len(),
            listing,
        }
    }

    /// What the layer store keeps, without bytes; `None` for a record of another layout (one
    /// written before the layers were cut along the wheels holds no `holds`).
    fn of_stored(kept: &StoredHostVenv) -> Option<PlacedVenv> {
        if kept.holds.len() != kept.layers.len() || kept.below > kept.layers.len() {
            return None;
        }
        let mut parts = kept
            .layers
            .iter()
            .zip(&kept.holds)
            .map(|(layer, holds)| {
                Some(VenvPart {
                    layer: layer_of_stored(layer).ok()?,
                    holds: holds.clone(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let above = parts.split_off(kept.below);
        Some(PlacedVenv {
            below: parts,
            above,
        })
    }
}

/// `around` (the Docker build, normalized) with the venv's layers placed: the config with one
/// history entry per venv layer where it goes, and the layers, bottom first. More layers than
/// Docker runs is refused with what to do.
fn arrange(
    name: &str,
    around: &NormalizedImage,
    venv: &PlacedVenv,
) -> Result<(Vec<u8>, Vec<NormalizedLayer>)> {
    let count = venv.below.len() + around.layers.len() + venv.above.len();
    if count > DOCKER_LAYER_LIMIT {
        anyhow::bail!(
            "{name}: {count} layers ({} of the venv cut along its wheels, {} of the base and the build): Docker runs an image of at most {DOCKER_LAYER_LIMIT}\nhint: set `venv_layers: one` in matrix.yaml (the venv in one layer), or make fewer build steps",
            venv.below.len() + venv.above.len(),
            around.layers.len()
        );
    }
    let mut config: Value = serde_json::from_slice(&around.config).context("the image config")?;
    let history = config
        .get_mut("history")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| anyhow!("the image config has no history"))?;
    let entry = |part: &VenvPart| {
        serde_json::json!({
            "created": rfc3339(around.epoch),
            "created_by": part.holds,
            "comment": "imagegen wheels: host",
        })
    };
    let mut entries: Vec<Value> = venv.below.iter().map(entry).collect();
    entries.append(history);
    entries.extend(venv.above.iter().map(entry));
    *history = entries;
    let layers = venv
        .below
        .iter()
        .map(|part| part.layer.clone())
        .chain(around.layers.iter().cloned())
        .chain(venv.above.iter().map(|part| part.layer.clone()))
        .collect();
    Ok((serde_json::to_vec(&config)?, layers))
}

/// The history entry of a unit's files' layer.
fn files_holds(unit: &Unit, venv: &Venv) -> String {
    venv_holds::files_holds(&unit.holds, &venv.prefix, &venv.python)
}

/// The history entry of a unit's bytecode layer.
fn compiled_holds(unit: &Unit, venv: &Venv) -> String {
    venv_holds::compiled_holds(&unit.holds, &venv.prefix, &venv.python)
}

/// The units `wheels` are cut into (`venv_cut::cut`), by their file names and sizes.
fn units_of(wheels: &ContextWheels, layout: VenvLayers) -> Result<Vec<Unit>> {
    let paths: Vec<_> = wheels
        .files
        .iter()
        .map(|file| file.source.clone())
        .collect();
    let files: Vec<WheelFile> = crate::docker::wheel_cache::wheel_sizes(&paths)?
        .into_iter()
        .map(|(file_name, size)| WheelFile { file_name, size })
        .collect();
    Ok(cut(&files, layout))
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
    layout: VenvLayers,
) -> String {
    let wheels: Vec<String> = wheels
        .files
        .iter()
        .map(|file| format!("{} {}", file.path, file.source.display()))
        .collect();
    venv_wheels_key(script, listing, venv, &wheels, &layout_key(layout))
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

/// The venv's files' layers (`Part::Files` of each unit of `venv_cut`: every file of the wheels
/// but the `.pyc` files and the RECORDs of wheels with sources) being written and compressed from
/// the wheels, one after the other, on a blocking thread. They need nothing of the Docker build,
/// so they start beside it. Dropped unfinished (a kept venv serves after all, or the build
/// failed), the thread stops at its next write.
pub(super) struct VenvLayer {
    started: Instant,
    stop: StopOnDrop,
    units: Vec<Unit>,
    /// The install plan, sent once the thread made it (the layers are written from it).
    plan: Option<tokio::sync::oneshot::Receiver<InstallPlan>>,
    writing: tokio::task::JoinHandle<Result<Vec<Gzipped>>>,
}

impl VenvLayer {
    /// Starts writing the files' layers of `wheels` installed into `venv`, cut as `layout`
    /// says, every mtime [`VENV_EPOCH`].
    fn start(wheels: &ContextWheels, venv: &Venv, layout: VenvLayers) -> Result<VenvLayer> {
        let units = units_of(wheels, layout)?;
        let mut opened = open_wheels(wheels)?;
        let venv = venv.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread_units = units.clone();
        let (planned, plan) = tokio::sync::oneshot::channel();
        let writing = tokio::task::spawn_blocking(move || -> Result<Vec<Gzipped>> {
            let install = wheel_install::plan(&mut opened, &venv)?;
            let parts: Vec<InstallPlan> = thread_units
                .iter()
                .map(|unit| install.part(&unit.wheels, Part::Files))
                .collect();
            // Nobody waits for the plan where a kept venv serves, or the build failed.
            let _ = planned.send(install);
            let mut layers = Vec::with_capacity(parts.len());
            for part in parts {
                let writer = Stoppable {
                    inner: GzipWriter::new(),
                    stop: Arc::clone(&thread_stop),
                };
                let (writer, _) = write_layer(&part, &mut opened, VENV_EPOCH, writer)?;
                layers.push(writer.inner.finish());
            }
            Ok(layers)
        });
        Ok(VenvLayer {
            started: Instant::now(),
            stop: StopOnDrop(stop),
            units,
            plan: Some(plan),
            writing,
        })
    }

    /// The install plan of the wheels, once the thread made it; `None` where it failed first
    /// ([`VenvLayer::finish`] says why) or the plan was taken already.
    async fn take_plan(&mut self) -> Option<InstallPlan> {
        self.plan.take()?.await.ok()
    }

    /// The finished layers, one per unit, and how long they took since they started.
    async fn finish(self) -> Result<(Vec<NormalizedLayer>, Duration)> {
        let gzipped = self
            .writing
            .await
            .map_err(|error| anyhow!("the venv layers' thread failed: {error}"))??;
        Ok((
            gzipped.into_iter().map(layer_of).collect(),
            self.started.elapsed(),
        ))
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
    /// it (a load needs the layers' bytes, which are not kept) and its registry holds all its
    /// layers: the layers without bytes, placed, and the listing.
    async fn kept_venv(
        &self,
        image: &PlannedImage,
        key: &str,
        load: bool,
    ) -> Option<(PlacedVenv, String)> {
        let name = &image.spec.name;
        let store = self.settings.layer_store.as_ref()?;
        if load {
            return None;
        }
        let kept = store.host_venv(key)?;
        let placed = PlacedVenv::of_stored(&kept)?;
        let client = self.registry(&image.spec.repository).await.ok()?;
        let path = repository_path_of(&image.spec.repository);
        for part in placed.parts() {
            match client.has_blob(path, &part.layer.digest).await {
                Ok(true) => {}
                Ok(false) => {
                    self.progress.line(
                        name,
                        &format!("== the venv an earlier run made with these inputs ({key}) has a layer {} that {} no longer holds: making it again", part.layer.digest, image.spec.repository),
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
        }
        Some((placed, kept.listing))
    }

    /// `files` finished, on a task of its own. Where `image` is pushed right after its build
    /// (not `load`ed), the task first uploads the layers of `around` that have bytes here,
    /// then the venv's files' layers as soon as they are written, so the push finds them in the
    /// registry (it asks before sending a blob). An upload that fails is only written to the
    /// log: the push sends the layer again and reports what stops it.
    async fn upload_ahead(
        &self,
        image: &PlannedImage,
        around: &NormalizedImage,
        files: VenvLayer,
        load: bool,
    ) -> tokio::task::JoinHandle<Result<(Vec<NormalizedLayer>, Duration)>> {
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
                return files.finish().await;
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
            let (layers, took) = files.finish().await?;
            if !failed {
                for layer in &layers {
                    let Some(gzip) = layer.gzip.clone() else {
                        continue;
                    };
                    // A layer another image of the run (or an earlier run) sent is not sent again.
                    if let Ok(true) = client.has_blob(&path, &layer.digest).await {
                        continue;
                    }
                    match client.put_blob(&path, gzip).await {
                        Ok(_) => sent += layer.compressed_size,
                        Err(error) => {
                            progress.log_only(&name, &format!("== uploading a venv layer ahead of the push failed ({error}): the push sends it"));
                            break;
                        }
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
            Ok((layers, took))
        })
    }

    /// The venv's files' layers of `image` (`wheels: host`, host-venv.sh `script`, listing
    /// script `listing`), started before its Docker build, on the wheels alone. Not where a
    /// venv of the same wheels is kept and the run may take it (it pushes `image` unloaded, not
    /// `load`): whether it does depends on the build, and layers written for nothing would slow
    /// it.
    pub(super) async fn early_venv_layer(
        &self,
        image: &PlannedImage,
        script: &[u8],
        listing: &str,
        load: bool,
    ) -> Option<VenvLayer> {
        let name = &image.spec.name;
        let wheels = self.contexts.wheels.get(name)?;
        let venv = venv_of(image);
        let layout = self.settings.venv_layers;
        if let Some(store) = &self.settings.layer_store {
            let wheels_key = wheels_key_of(script, listing, &venv, wheels, layout);
            if !load && store.has_host_venv_of_wheels(&wheels_key) {
                self.progress.log_only(
                    name,
                    "== a venv of these wheels is kept: its layers wait for the Docker build, which decides whether they are needed",
                );
                return None;
            }
        }
        match VenvLayer::start(wheels, &venv, layout) {
            Ok(layer) => {
                self.progress.stage(
                    name,
                    &format!(
                        "venv on the host: its {} files' layers are written from the {} wheels beside the Docker build",
                        layer.units.len(),
                        wheels.files.len()
                    ),
                );
                Some(layer)
            }
            // Started again after the build, where the error stops it.
            Err(error) => {
                self.progress.log_only(
                    name,
                    &format!("== the venv's layers cannot start: {error:#}"),
                );
                None
            }
        }
    }

    /// The image `image` whose Docker build (daemon image `built`, normalized as `around`) holds
    /// no venv packages: the venv's layers made on the host placed around `around`'s
    /// (`venv_cut`; not loaded), and what the image's package listing script printed in the
    /// container that made them, after host-venv.sh. `early` is the venv's files' layers where
    /// they were started beside the Docker build; `load` is the plan's word on loading the image.
    pub(super) async fn host_venv(
        &self,
        image: &PlannedImage,
        built: &str,
        around: &NormalizedImage,
        files: HostVenvFiles,
        early: Option<VenvLayer>,
        load: bool,
    ) -> Result<(Arc<NormalizedImage>, String)> {
        let HostVenvFiles { script, lock } = files;
        let name = &image.spec.name;
        let listing = &listing_script(image);
        let wheels = self.contexts.wheels.get(name).ok_or_else(|| {
            anyhow!("{name}: wheels: host, but no wheels were fetched for its lock")
        })?;
        let venv = venv_of(image);
        let layout = self.settings.venv_layers;
        let epoch = around.epoch;
        let started = Instant::now();
        let wheels_key = wheels_key_of(&script, listing, &venv, wheels, layout);
        let key = key_of(&wheels_key, around)?;
        if let Some((placed, listed)) = self.kept_venv(image, &key, load).await {
            drop(early);
            let (config, layers) = arrange(name, around, &placed)?;
            let normalized = assemble(&config, layers, epoch)?;
            self.progress.stage(
                name,
                &format!(
                    "venv as an earlier run made it from these wheels, scripts and layers (venv {key}): its {} layers are in {} already, so nothing is installed; manifest {}",
                    placed.below.len() + placed.above.len(),
                    image.spec.repository,
                    normalized.manifest_digest
                ),
            );
            self.note_normalized(&normalized);
            return Ok((Arc::new(normalized), listed));
        }
        // The files' layers: started beside the Docker build, or now, beside host-venv.sh. Where
        // the image is pushed right after this build, they go to the registry as they are
        // ready, beside host-venv.sh: the push then sends only the layers above.
        let mut files = match early {
            Some(early) => early,
            None => VenvLayer::start(wheels, &venv, layout)?,
        };
        let _stop_files = StopOnDrop(Arc::clone(&files.stop.0));
        let units = files.units.clone();
        // The install plan the layers' thread made (host-venv.sh's files are chosen from it).
        let Some(mut install) = files.take_plan().await else {
            files
                .finish()
                .await
                .with_context(|| format!("installing the wheels of {name}"))?;
            anyhow::bail!("{name}: the venv's layers ended without their install plan");
        };
        let files = self.upload_ahead(image, around, files, load).await;
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
        // which stream to the daemon as they are inflated. The sources carry the venv's time,
        // which each `.pyc` records.
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
                VENV_EPOCH,
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
        let (bytecode, mut others) = split_written(&written, &install)
            .with_context(|| format!("what host-venv.sh wrote for {name}"))?;
        let others_count = others.len();
        others.insert(
            LOCK_IN_IMAGE.to_string(),
            (file_header(lock.len()), None, lock),
        );
        let compiled = install.add_bytecode(bytecode, &venv)?;
        self.progress.stage(
            name,
            &format!(
                "venv on the host: host-venv.sh ran over {sent} files in {:.1} s (the files sent in {:.1} s): {compiled} .pyc files, {others_count} other files",
                helper_started.elapsed().as_secs_f64(),
                sending.as_secs_f64(),
            ),
        );

        // Each unit's bytecode and RECORDs where its wheels have sources, and what host-venv.sh
        // wrote besides (with the image's own time: it is the image's).
        let others = others_tar(&install, others)
            .with_context(|| format!("what host-venv.sh wrote for {name}"))?;
        let compiled_units: Vec<(usize, InstallPlan)> = units
            .iter()
            .enumerate()
            .filter(|(_, unit)| unit.wheels.iter().any(|&wheel| install.has_sources(wheel)))
            .map(|(number, unit)| (number, install.part(&unit.wheels, Part::Compiled)))
            .collect();
        let (compiled_layers, others_layer) = tokio::task::spawn_blocking(
            move || -> Result<(BTreeMap<usize, NormalizedLayer>, Option<NormalizedLayer>)> {
                let mut layers = BTreeMap::new();
                let mut no_wheels: Vec<Wheel<std::io::Cursor<Vec<u8>>>> = Vec::new();
                for (number, part) in compiled_units {
                    let (writer, _) =
                        write_layer(&part, &mut no_wheels, VENV_EPOCH, GzipWriter::new())?;
                    layers.insert(number, layer_of(writer.finish()));
                }
                let others = Some(layer_of(
                    normalize_layer_into(&others, epoch, GzipWriter::new())?.finish(),
                ));
                Ok((layers, others))
            },
        )
        .await
        .map_err(|error| anyhow!("the bytecode layers' thread failed: {error}"))??;
        let waited = Instant::now();
        let (file_layers, took) = files
            .await
            .map_err(|error| anyhow!("the venv layers' task failed: {error}"))??;
        let placed = place(&units, file_layers, compiled_layers, others_layer, &venv);
        let (unpacked, compressed) = placed.parts().fold((0, 0), |(unpacked, compressed), part| {
            (
                unpacked + part.layer.unpacked_size,
                compressed + part.layer.compressed_size,
            )
        });
        self.progress.stage(
            name,
            &format!(
                "venv installed on the host from {wheel_count} wheels into {} layers ({} below the base, {} above the build): {} unpacked, {} compressed; the files' layers {} (waited {:.1} s for them after host-venv.sh)",
                placed.below.len() + placed.above.len(),
                placed.below.len(),
                placed.above.len(),
                human_bytes(unpacked),
                human_bytes(compressed),
                rate(unpacked, took),
                waited.elapsed().as_secs_f64(),
            ),
        );
        if let Some(store) = &self.settings.layer_store {
            let kept = placed.stored(key.clone(), wheels_key, output.stdout.clone());
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
        let (config, layers) = arrange(name, around, &placed)?;
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

/// The venv's layers in `venv_cut`'s order: below the base the files of the units placed there,
/// then their bytecode; above the build each other unit with its bytecode, then `others`.
/// `files` holds one layer per unit, `compiled` the bytecode layers by unit number.
fn place(
    units: &[Unit],
    files: Vec<NormalizedLayer>,
    mut compiled: BTreeMap<usize, NormalizedLayer>,
    others: Option<NormalizedLayer>,
    venv: &Venv,
) -> PlacedVenv {
    let mut placed = PlacedVenv::default();
    let mut above_units = Vec::new();
    let mut below_compiled = Vec::new();
    for (number, (unit, layer)) in units.iter().zip(files).enumerate() {
        let part = VenvPart {
            layer,
            holds: files_holds(unit, venv),
        };
        match unit.place {
            Place::Below => {
                placed.below.push(part);
                if let Some(layer) = compiled.remove(&number) {
                    below_compiled.push(VenvPart {
                        layer,
                        holds: compiled_holds(unit, venv),
                    });
                }
            }
            Place::Above => above_units.push((number, unit, part)),
        }
    }
    placed.below.extend(below_compiled);
    for (number, unit, part) in above_units {
        placed.above.push(part);
        if let Some(layer) = compiled.remove(&number) {
            placed.above.push(VenvPart {
                layer,
                holds: compiled_holds(unit, venv),
            });
        }
    }
    if let Some(layer) = others {
        placed.above.push(VenvPart {
            layer,
            holds: OTHERS_HOLDS.to_string(),
        });
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(name: &str) -> NormalizedLayer {
        NormalizedLayer {
            gzip: None,
            digest: Digest::of(name.as_bytes()),
            diff_id: Digest::of(format!("tar of {name}").as_bytes()),
            unpacked_size: 10,
            compressed_size: 1,
        }
    }

    fn unit(wheel: usize, place: Place, holds: &str) -> Unit {
        Unit {
            wheels: vec![wheel],
            place,
            holds: holds.into(),
        }
    }

    /// The layers' digests of `image`, named back by `names`.
    fn named(layers: &[NormalizedLayer], names: &[&str]) -> Vec<String> {
        layers
            .iter()
            .map(|layer| {
                names
                    .iter()
                    .find(|name| Digest::of(name.as_bytes()) == layer.digest)
                    .map(|name| name.to_string())
                    .unwrap_or_else(|| layer.digest.to_string())
            })
            .collect()
    }

    #[test]
    fn large_wheels_go_below_the_base_and_what_changes_often_goes_last() {
        let venv = Venv {
            prefix: VENV_PREFIX.into(),
            python: "3.12".into(),
        };
        let units = [
            unit(0, Place::Below, "torch-2.13.0.whl"),
            unit(1, Place::Below, "nvidia_cudnn.whl"),
            unit(2, Place::Above, "group 3 of 8: einops-0.8.1.whl"),
        ];
        let compiled: BTreeMap<usize, NormalizedLayer> =
            [(0, layer("torch pyc")), (2, layer("group pyc"))].into();
        let placed = place(
            &units,
            vec![layer("torch"), layer("cudnn"), layer("group")],
            compiled,
            Some(layer("loader cache")),
            &venv,
        );
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": []},
            "history": [
                {"created_by": "the base"},
                {"created_by": "ENV A=1", "empty_layer": true},
                {"created_by": "RUN apt-get install python3"},
            ],
        });
        let around = assemble(
            &serde_json::to_vec(&config).unwrap(),
            vec![layer("base"), layer("apt")],
            1_700_000_000,
        )
        .unwrap();
        let (config, layers) = arrange("runtime", &around, &placed).unwrap();
        let names = [
            "torch",
            "cudnn",
            "torch pyc",
            "base",
            "apt",
            "group",
            "group pyc",
            "loader cache",
        ];
        assert_eq!(named(&layers, &names), names);
        let image = assemble(&config, layers, 1_700_000_000).unwrap();
        let parts = image.size().parts;
        let holds: Vec<&str> = parts.iter().map(|part| part.holds.as_str()).collect();
        assert!(
            holds[0].contains("torch-2.13.0.whl installed into /opt/venv (Python 3.12)"),
            "{holds:?}"
        );
        assert!(
            holds[2].starts_with("imagegen: bytecode and RECORDs of torch-2.13.0.whl"),
            "{holds:?}"
        );
        assert_eq!(holds[3..5], ["the base", "RUN apt-get install python3"]);
        assert!(
            holds[5].contains("group 3 of 8: einops-0.8.1.whl installed"),
            "{holds:?}"
        );
        assert_eq!(holds[7], OTHERS_HOLDS);
        assert_eq!(parts[0].digest, Digest::of(b"torch").to_string());

        // What the layer store keeps comes back placed the same.
        let stored = placed.stored("k".into(), "w".into(), "listing".into());
        assert_eq!(stored.below, 3);
        let back = PlacedVenv::of_stored(&stored).unwrap();
        let (_, again) = arrange("runtime", &around, &back).unwrap();
        assert_eq!(named(&again, &names), names);
        let old = StoredHostVenv {
            holds: Vec::new(),
            ..stored
        };
        assert!(
            PlacedVenv::of_stored(&old).is_none(),
            "a record of the old layout is not used"
        );

        // More layers than Docker runs: refused with what to do.
        let many = PlacedVenv {
            below: Vec::new(),
            above: (0..DOCKER_LAYER_LIMIT)
                .map(|number| VenvPart {
                    layer: layer(&number.to_string()),
                    holds: String::new(),
                })
                .collect(),
        };
        let Err(error) = arrange("runtime", &around, &many) else {
            panic!("more than {DOCKER_LAYER_LIMIT} layers were arranged");
        };
        let error = error.to_string();
        assert!(error.contains("runtime: 129 layers"), "{error}");
        assert!(error.contains("venv_layers: one"), "{error}");
    }

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
