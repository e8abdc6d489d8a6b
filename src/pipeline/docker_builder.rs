//! The [`Builder`] that works through the Docker Engine API: build contexts from `images/<name>/`
//! plus the gpu-selftest binary for the image's CUDA major, builds with labels, the self-test in a
//! container with all GPUs, tags and pushes with the user's registry credentials, and alias moves
//! through the registry API (the alias is stored as exactly the manifest the full tag serves).
//! Every container it starts carries the run's label ([`RUN_LABEL`]), so the command can remove
//! whatever a cancellation left behind. Policy (what to build, when aliases move) stays in the
//! executor; wire protocols stay in `docker`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::sync::{Mutex, OnceCell};

use crate::docker::layer_store::{LayerStore, StoredImage, StoredLayer};
use crate::docker::run_journal::{RunJournal, StepImages};
use crate::docker::{
    append_to_context, context_tar_leaving_out, repository_path_of, BuildRequest, ContextFile,
    ContextWheels, Engine, Registries, RegistryClient, RegistryManifest, RetryPolicy, RunRequest,
    DEFAULT_REGISTRY_TIMEOUT,
};
use crate::history::apt_lock::{
    installed_with_extras, APT_DEPENDS, APT_DEPENDS_MARKER, APT_LOCK_FILE,
};
use crate::history::manifest::{human_bytes, BinaryRecord, ImageSize, Packages};
use crate::model::digest::Digest;
use crate::pipeline::alias_move::AliasRegistry;
use crate::pipeline::executor::{Builder, Existing, TestOutcome};
use crate::pipeline::normalize::{
    assemble, config_from_template, config_from_template_flagged, epoch_of_created, known_prefix,
    normalize_archive, without_source_hashes, KnownLayer, MisplacedKnownLayer, NormalizedImage,
    NormalizedLayer, MEDIA_TYPE_MANIFEST, NORMALIZED_LABEL,
};
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::progress::Progress;
use crate::pipeline::relabel::{
    empty_layers, inputs_key, label_steps, learn, listing_key, predict, InputFile, LabelSteps,
    Parent, Step,
};
use crate::pipeline::selftest::{binary_record, interpret_selftest, parse_packages, LIST_PACKAGES};
use crate::render::HOST_VENV_SCRIPT;
use crate::resolve::image::ImageSpec;

mod host_venv;

/// Said once per run when the daemon has no GPU runtime, instead of with every image.
const NO_GPU_NOTE: &str = "no GPU runtime on this Docker daemon: each image's gpu-selftest runs without GPUs and is recorded as skipped (the reason in .imagegen/logs/<image>.log); aliases wait for a passing result from `imagegen test` on a GPU node (or move with --move-untested-aliases); --require-gpu fails such images instead";

/// Where the runtime template copies gpu-selftest (`COPY gpu-selftest /usr/local/bin/gpu-selftest`).
const SELFTEST_PATH: &str = "/usr/local/bin/gpu-selftest";
/// The label that carries an image's build key.
pub(crate) const BUILD_KEY_LABEL: &str = "imagegen.build-key";
/// The label on every container a run starts (self-test, package listing): its value names the
/// run, so the run's cleanup finds exactly its own containers.
pub(crate) const RUN_LABEL: &str = "imagegen.run";
/// `/dev/shm` for the self-test container: NCCL and DataLoader workers need more than Docker's 64 MiB.
const SELFTEST_SHM_BYTES: i64 = 8 << 30;
const SELFTEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The build context of every image, assembled before the first Docker call.
pub(crate) struct Contexts {
    pub(crate) tars: BTreeMap<String, Vec<u8>>,
    /// The gpu-selftest each context carries, by image name, as the package record lists it.
    pub(crate) binaries: BTreeMap<String, BinaryRecord>,
    /// sha256 of each gpu-selftest binary the contexts hold, by its name (`gpu-selftest-cu12`),
    /// for the images' provenance.
    pub(crate) selftest_digests: BTreeMap<String, Digest>,
    /// The cached wheels each image's context gets under `wheels/` when it is sent, read from
    /// disk then (the tars above stay small; the lock in each names what these are), with the
    /// small files beside them (`SOURCES`).
    pub(crate) wheels: BTreeMap<String, ContextWheels>,
}

impl Contexts {
    /// Tars `images_dir/<name>/` plus `selftest_dir/gpu-selftest-cuNN` (as `gpu-selftest`) for
    /// every image, with more files for some images, by image name (the team's wheels under
    /// `extension-wheels/`, fetched on the host). Fails naming the missing binary or directory.
    pub(crate) fn assemble_with(
        images: &[ImageSpec],
        images_dir: &Path,
        selftest_dir: &Path,
        more_files: &BTreeMap<String, Vec<ContextFile>>,
    ) -> Result<Contexts> {
        let mut tars = BTreeMap::new();
        let mut records = BTreeMap::new();
        let mut binaries: BTreeMap<String, (ContextFile, BinaryRecord)> = BTreeMap::new();
        for image in images {
            let dir = images_dir.join(&image.name);
            if !dir.join("Dockerfile").exists() {
                anyhow::bail!(
                    "{} has no Dockerfile\nhint: run `imagegen render` first",
                    dir.display()
                );
            }
            let (binary, record) = match binaries.get(&image.selftest) {
                Some(found) => found.clone(),
                None => {
                    let path = selftest_dir.join(&image.selftest);
                    let file = ContextFile::read("gpu-selftest", &path).map_err(|e| {
                        anyhow!("{e}\nhint: build the self-test with `bash selftest/build.sh` (it writes target/selftest/gpu-selftest-cu11/12/13 and -cu12/13-arm64) or pass --selftest-dir")
                    })?;
                    let file = ContextFile {
                        executable: true,
                        ..file
                    };
                    let record = binary_record(SELFTEST_PATH, &file.contents);
                    binaries.insert(image.selftest.clone(), (file.clone(), record.clone()));
                    (file, record)
                }
            };
            let mut files = vec![binary];
            files.extend(more_files.get(&image.name).cloned().unwrap_or_default());
            // apt.lock records the last build; it is not an input (nor in the build key).
            let tar = context_tar_leaving_out(&dir, &files, &[APT_LOCK_FILE])
                .with_context(|| format!("build context of {}", image.name))?;
            tars.insert(image.name.clone(), tar);
            records.insert(image.name.clone(), record);
        }
        let selftest_digests = binaries
            .iter()
            .map(|(name, (file, _))| (name.clone(), Digest::of(&file.contents)))
            .collect();
        Ok(Contexts {
            tars,
            binaries: records,
            selftest_digests,
            wheels: BTreeMap::new(),
        })
    }

    /// sha256 of each context, for build keys.
    pub(crate) fn digests(&self) -> BTreeMap<String, Digest> {
        self.tars
            .iter()
            .map(|(name, tar)| (name.clone(), Digest::of(tar)))
            .collect()
    }
}

/// Settings of the Docker builder.
pub(crate) struct EngineBuilderSettings {
    /// Labels added at build time (created, revision): they are not part of the Dockerfile.
    pub(crate) build_labels: BTreeMap<String, String>,
    /// This run pushes: check the registry for an image with the same build key, and keep each
    /// normalized image in memory until it is pushed.
    pub(crate) check_registry: bool,
    /// `/dev/shm` size of the self-test container.
    pub(crate) selftest_shm_bytes: i64,
    /// Retries of registry lookups (pushes use the engine's own policy).
    pub(crate) registry_retry: RetryPolicy,
    /// Deadline of each registry request.
    pub(crate) registry_timeout: Duration,
    /// How long one image's build may take.
    pub(crate) build_timeout: Duration,
    /// The value of [`RUN_LABEL`] on this run's containers.
    pub(crate) run_id: String,
    /// A gpu-selftest baseline (its JSON), handed to every self-test as `GPU_SELFTEST_BASELINE`.
    pub(crate) selftest_baseline: Option<String>,
    /// Where each build step's image is written down as it is made, so that a later run can
    /// remove what this one leaves if it is killed mid-build.
    pub(crate) journal: Option<Arc<RunJournal>>,
    /// What earlier runs normalized: a build whose layers are an earlier build's is not exported
    /// nor normalized again.
    pub(crate) layer_store: Option<Arc<LayerStore>>,
    /// Images (by name) this run pushes and runs nothing of on this host: no self-test, no image
    /// of the run built `FROM` them. Those built with `wheels: host` are pushed from memory and
    /// not loaded into the daemon (as `docker buildx build --push` leaves its daemon alone).
    pub(crate) unloaded: BTreeSet<String>,
}

impl Default for EngineBuilderSettings {
    fn default() -> Self {
        EngineBuilderSettings {
            build_labels: BTreeMap::new(),
            check_registry: false,
            selftest_shm_bytes: SELFTEST_SHM_BYTES,
            registry_retry: RetryPolicy::default(),
            registry_timeout: DEFAULT_REGISTRY_TIMEOUT,
            build_timeout: DEFAULT_BUILD_TIMEOUT,
            run_id: format!("pid-{}", std::process::id()),
            selftest_baseline: None,
            journal: None,
            layer_store: None,
            unloaded: BTreeSet::new(),
        }
    }
}

/// How long one image's build may take by default.
pub(crate) const DEFAULT_BUILD_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

pub(crate) struct EngineBuilder {
    engine: Engine,
    contexts: Contexts,
    progress: Arc<Progress>,
    settings: EngineBuilderSettings,
    registries: Registries,
    gpus: OnceCell<bool>,
    host_platform: OnceCell<String>,
    /// Per base image: present or pulled, or why not. Looked up once for all the images on it,
    /// so a missing base is one attempt and one cause, not one daemon error per image.
    bases: Mutex<BTreeMap<String, Arc<BaseImage>>>,
    /// Manifests read back from the registry after a push, by digest: an alias move stores
    /// these exact bytes under the alias.
    pushed: std::sync::Mutex<BTreeMap<Digest, RegistryManifest>>,
    /// Normalized images this run made, by image ID (= config digest), until they are pushed.
    normalized: std::sync::Mutex<BTreeMap<String, Arc<NormalizedImage>>>,
    /// The size of every image this run normalized, by image ID; kept after the push drops
    /// the image's layers.
    sizes: std::sync::Mutex<BTreeMap<String, ImageSize>>,
    /// The layers of every image this run normalized (bottom first) with its epoch: an image
    /// built FROM one of them starts with these layers, which are taken as they are.
    chains: std::sync::Mutex<Vec<(u64, Vec<KnownLayer>)>>,
    /// Package listings made beside a `wheels: host` image's venv, by image name, until its
    /// packages are read.
    listed: std::sync::Mutex<BTreeMap<String, String>>,
    /// `wheels: host` images this run made and did not load, by reference, until they are
    /// pushed or loaded.
    unloaded: std::sync::Mutex<BTreeMap<String, Arc<NormalizedImage>>>,
}

/// Whether a base image is in the daemon (present or pulled), or why it cannot be; set once.
type BaseImage = OnceCell<Result<(), String>>;

impl EngineBuilder {
    pub(crate) fn new(
        engine: Engine,
        contexts: Contexts,
        progress: Arc<Progress>,
        settings: EngineBuilderSettings,
    ) -> EngineBuilder {
        // A broken Docker config only matters once something needs credentials.
        let registries = Registries::new(settings.registry_timeout, settings.registry_retry);
        EngineBuilder {
            engine,
            contexts,
            progress,
            settings,
            registries,
            gpus: OnceCell::new(),
            host_platform: OnceCell::new(),
            bases: Mutex::new(BTreeMap::new()),
            pushed: std::sync::Mutex::new(BTreeMap::new()),
            normalized: std::sync::Mutex::new(BTreeMap::new()),
            sizes: std::sync::Mutex::new(BTreeMap::new()),
            chains: std::sync::Mutex::new(Vec::new()),
            listed: std::sync::Mutex::new(BTreeMap::new()),
            unloaded: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// A registry client for `repository`'s host, with the user's credentials, this run's
    /// retries and deadline.
    async fn registry(&self, repository: &str) -> Result<RegistryClient> {
        Ok(self.registries.client(repository)?)
    }

    /// Labels of every container this run starts.
    fn container_labels(&self, purpose: &str, name: &str) -> BTreeMap<String, String> {
        [
            (purpose.to_string(), name.to_string()),
            (RUN_LABEL.to_string(), self.settings.run_id.clone()),
        ]
        .into()
    }

    /// Makes sure the base image a runtime image is built `FROM` is in the daemon, pulling it
    /// when it is not; the error says what to do when it cannot be had. A devel image's base is
    /// its runtime image, built first in the plan.
    async fn ensure_base(&self, image: &PlannedImage) -> Result<()> {
        let base = &image.spec.base_image;
        if image.spec.parent.is_some() {
            return self.ensure_loaded(base).await;
        }
        if base == "scratch" {
            return Ok(());
        }
        let cell = Arc::clone(self.bases.lock().await.entry(base.clone()).or_default());
        let name = &image.spec.name;
        let pinned_id = image.spec.base_image_id.as_ref();
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
    /// `wheels: host` image in [`EngineBuilderSettings::unloaded`]).
    async fn ensure_loaded(&self, reference: &str) -> Result<()> {
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

    async fn credentials_for(
        &self,
        repository: &str,
    ) -> Result<Option<crate::docker::Credentials>> {
        Ok(self.registries.credentials(repository)?)
    }

    async fn host_platform(&self) -> String {
        self.host_platform
            .get_or_init(|| async {
                self.engine
                    .platform()
                    .await
                    .unwrap_or_else(|_| "linux/amd64".into())
            })
            .await
            .clone()
    }

    /// Whether containers of `image` run on this daemon without emulation.
    async fn runs_here(&self, image: &PlannedImage) -> bool {
        self.host_platform().await == image.spec.platform.as_str()
    }

    async fn gpus(&self) -> bool {
        *self
            .gpus
            .get_or_init(|| async { self.engine.gpu_runtime_available().await.unwrap_or(false) })
            .await
    }
}

impl Builder for EngineBuilder {
    async fn find_existing(&self, image: &PlannedImage) -> Result<Option<Existing>> {
        if let Some(local) = self
            .engine
            .find_image_with_labels(
                BUILD_KEY_LABEL,
                image.build_key.as_str(),
                // The normalized image, not a raw build FROM a normalized parent (a devel image
                // on its runtime image inherits the parent's label, never its epoch `created`).
                Some(NORMALIZED_LABEL),
            )
            .await?
        {
            return Ok(Some(Existing::Local(daemon_image_id(&local.id)?)));
        }
        if let (true, Some(recorded)) = (self.settings.check_registry, &image.recorded_digest) {
            let client = self.registry(&image.spec.repository).await?;
            let path = repository_path_of(&image.spec.repository);
            if let Some(labels) = client.image_labels(path, &image.spec.tag).await? {
                if labels.get(BUILD_KEY_LABEL).map(String::as_str) == Some(image.build_key.as_str())
                {
                    if let Some(digest) = client.manifest_digest(path, &image.spec.tag).await? {
                        if &digest == recorded {
                            return Ok(Some(Existing::Registry(digest)));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    async fn build(&self, image: &PlannedImage) -> Result<Digest> {
        let name = &image.spec.name;
        let context = self
            .contexts
            .tars
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("no build context assembled for {name}"))?;
        // `wheels: host`: the venv is made on the host after the Docker build, whose context
        // takes no wheels.
        let host_script = file_of_context(&context, HOST_VENV_SCRIPT)
            .with_context(|| format!("reading {name}'s build context"))?;
        let context = match self.contexts.wheels.get(name) {
            Some(_) if host_script.is_some() => context,
            Some(wheels) => {
                append_to_context(&context, "wheels", &wheels.files, &wheels.small_files)
                    .with_context(|| format!("the wheels of {name}'s build context"))?
            }
            None => context,
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
        self.progress.start(name, "building");
        let limit = self.settings.build_timeout;
        let log = self.progress.log_path(name);
        let based = self.ensure_base(image).await;
        // Labels alone changed since a kept build of the same inputs: no Docker build at all. (Not
        // for a venv made on the host: the kept builds are the Docker build's layers only.)
        let inputs = match &based {
            Ok(()) if host_script.is_some() => None,
            Ok(()) => match self.relabel_inputs(image, &request.labels).await {
                Ok(inputs) => Some(inputs),
                Err(why) => {
                    let why = format!("a change of its labels alone cannot skip the build: {why}");
                    self.progress.log_only(name, &format!("== {why}"));
                    None
                }
            },
            Err(_) => None,
        };
        if let Some(inputs) = &inputs {
            if let Some(done) = self.relabel(image, inputs).await {
                return Ok(done);
            }
        }
        // The venv's layer of `wheels: host` needs only the wheels: written beside the build.
        let early_venv = match (&based, &host_script) {
            (Ok(()), Some(script)) => {
                self.early_venv_layer(image, script, &listing_script(image))
                    .await
            }
            _ => None,
        };
        let built = match based {
            Ok(()) => {
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
            }
            Err(error) => Err(error),
        };
        match built {
            Ok(id) => {
                self.progress.stage(name, &format!("built {id}"));
                let epoch = match &inputs {
                    Some(inputs) => inputs.epoch,
                    None => self.epoch_of(image).await?,
                };
                if let Some(script) = host_script {
                    let around = self
                        .normalize(name, &id, epoch)
                        .await
                        .with_context(|| format!("normalizing {}", image.reference))?;
                    let (normalized, listed) = self
                        .host_venv(
                            image,
                            &id,
                            &around,
                            script,
                            &listing_script(image),
                            early_venv,
                        )
                        .await
                        .with_context(|| {
                            format!("making the venv of {} on the host", image.reference)
                        })?;
                    self.listed
                        .lock()
                        .expect("listed lock")
                        .insert(name.clone(), listed);
                    if self.settings.unloaded.contains(name) {
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
            Err(error) => {
                // The log holds the error itself, not only that the build failed.
                self.progress.log_only(name, "== error");
                for line in format!("{error:#}").lines() {
                    self.progress.log_only(name, line);
                }
                self.progress.stage(name, "build failed");
                Err(anyhow!("{error:#}\nfull log: {}", log.display()))
            }
        }
    }

    async fn test(&self, image: &PlannedImage) -> TestOutcome {
        let name = &image.spec.name;
        if !self.runs_here(image).await {
            let host = self.host_platform().await;
            return TestOutcome::Skipped {
                summary: format!("cannot run {} images on this {host} host; run `imagegen build --platform {}` on a {} runner to test them", image.spec.platform, image.spec.platform, image.spec.platform),
            };
        }
        if let Err(error) = self.ensure_loaded(&image.reference).await {
            return TestOutcome::Error {
                summary: format!("{error:#}"),
                report: None,
            };
        }
        let gpus = self.gpus().await;
        if gpus {
            self.progress.stage(name, "gpu-selftest on all GPUs");
        } else {
            self.progress.note_once(NO_GPU_NOTE);
            self.progress.stage(name, "gpu-selftest without GPUs");
        }
        let request = RunRequest {
            image: image.reference.clone(),
            cmd: vec!["gpu-selftest".into(), "--format".into(), "json".into()],
            // nvidia/cuda's entrypoint prints a banner on stdout; the report must be all of stdout.
            entrypoint: Some(vec![]),
            gpus,
            shm_size_bytes: Some(self.settings.selftest_shm_bytes),
            timeout: Some(SELFTEST_TIMEOUT),
            labels: self.container_labels("imagegen.selftest", name),
            // gpu-selftest reads a baseline from this variable, the JSON itself when it starts
            // with `{`: no file has to be mounted into the container.
            env: self
                .settings
                .selftest_baseline
                .iter()
                .map(|baseline| ("GPU_SELFTEST_BASELINE".to_string(), baseline.clone()))
                .collect(),
        };
        let output = match self.engine.run(request).await {
            Ok(output) => output,
            Err(error) => {
                return TestOutcome::Error {
                    summary: error.to_string(),
                    report: None,
                }
            }
        };
        for line in output.stderr.lines() {
            self.progress.line(name, line);
        }
        let outcome = interpret_selftest(output.exit_code, &output.stdout, &output.stderr, gpus);
        let said = format!("self-test {}: {}", outcome.status(), outcome.summary());
        if matches!(outcome, TestOutcome::Skipped { .. }) && !gpus {
            // The run's note said why; what the binary said stays in the image's log.
            self.progress.log_only(name, &format!("== {said}"));
            self.progress.stage(name, "self-test skipped (no GPU)");
        } else {
            self.progress.stage(name, &said);
        }
        outcome
    }

    async fn contents(&self, image: &PlannedImage) -> Result<Option<Packages>> {
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

    async fn push(
        &self,
        repository: &str,
        tag: &str,
        build_key: Option<&Digest>,
    ) -> Result<Digest> {
        let client = self.registry(repository).await?;
        let path = repository_path_of(repository);
        if let Some(build_key) = build_key {
            if let Some(labels) = client.image_labels(path, tag).await? {
                let theirs = labels
                    .get(BUILD_KEY_LABEL)
                    .map(String::as_str)
                    .unwrap_or("none");
                if theirs != build_key.as_str() {
                    anyhow::bail!(
                        "refusing to push {repository}:{tag}: the registry already has this full tag with different content (build key {theirs}, this image {build_key}); full tags are immutable\nhint: to publish a rebuild under a new tag, add {{revision}} to tags.full in the matrix (e.g. \"{{torch}}-cuda{{cuda}}-cudnn{{cudnn_major}}-{{variant}}-{{os}}-r{{revision}}\": new content takes the next revision), or move aliases back with `imagegen rollback`"
                    );
                }
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
            .line(tag, &format!("== pushing {repository}:{tag}"));
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

    fn size(&self, image_id: &Digest) -> Option<ImageSize> {
        self.sizes
            .lock()
            .expect("sizes lock")
            .get(image_id.as_str())
            .copied()
    }

    async fn tag(&self, source: &str, repository: &str, tag: &str) -> Result<()> {
        Ok(self.engine.tag(source, repository, tag).await?)
    }
}

impl AliasRegistry for EngineBuilder {
    async fn served(&self, repository: &str, alias: &str) -> Result<Option<Digest>> {
        let client = self.registry(repository).await?;
        Ok(client
            .manifest_digest(repository_path_of(repository), alias)
            .await?)
    }

    async fn point(&self, repository: &str, alias: &str, digest: &Digest) -> Result<()> {
        let client = self.registry(repository).await?;
        let remembered = self
            .pushed
            .lock()
            .expect("pushed lock")
            .get(digest)
            .cloned();
        self.progress.line(
            alias,
            &format!("== moving {repository}:{alias} to {digest}"),
        );
        point_alias(&client, repository, alias, digest, remembered).await
    }
}

/// The registries as the registry side of alias moves made outside a build (`publish`,
/// `rollback`): the alias is stored as exactly the manifest its target digest names.
pub(crate) struct RegistryAliases<'a>(pub &'a Registries);

impl AliasRegistry for RegistryAliases<'_> {
    async fn served(&self, repository: &str, alias: &str) -> Result<Option<Digest>> {
        let client = self.0.client(repository)?;
        Ok(client
            .manifest_digest(repository_path_of(repository), alias)
            .await?)
    }

    async fn point(&self, repository: &str, alias: &str, digest: &Digest) -> Result<()> {
        let client = self.0.client(repository)?;
        point_alias(&client, repository, alias, digest, None).await
    }
}

/// Stores under `repository:alias` the manifest `digest` names (`known`, or read from the
/// registry by digest), and checks the registry's answer.
async fn point_alias(
    client: &RegistryClient,
    repository: &str,
    alias: &str,
    digest: &Digest,
    known: Option<RegistryManifest>,
) -> Result<()> {
    let path = repository_path_of(repository);
    let manifest = match known {
        Some(manifest) => manifest,
        None => client
            .get_manifest(path, digest.as_str())
            .await?
            .ok_or_else(|| {
                anyhow!(
                    "the registry {} no longer has {repository}@{digest}, so {alias} cannot point at it",
                    client.host()
                )
            })?,
    };
    let written = client
        .put_manifest(path, alias, &manifest.media_type, manifest.bytes)
        .await?;
    if written != *digest {
        anyhow::bail!("the registry stored {repository}:{alias} as {written}, not {digest}");
    }
    Ok(())
}

impl EngineBuilder {
    /// What the listing `script` prints in `image`: kept in the layer store from an earlier image
    /// with the same layers and config but labels (a relabelled image), or from a container run.
    async fn listing(&self, image: &PlannedImage, script: String) -> Result<String> {
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
    async fn listing_key(&self, reference: &str, script: &str) -> Result<Option<String>> {
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

    /// The epoch of `image`'s normalized layers: its base's `created` (see
    /// [`crate::pipeline::normalize`]); 0 on `scratch`.
    async fn epoch_of(&self, image: &PlannedImage) -> Result<u64> {
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

    /// Exports image `id` from the daemon and normalizes it (on blocking threads: it is
    /// compression), printing each phase with bytes and rate.
    async fn normalize(&self, name: &str, id: &str, epoch: u64) -> Result<Arc<NormalizedImage>> {
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
    async fn normalize_with(
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
    fn note_normalized(&self, normalized: &NormalizedImage) {
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
    fn built(&self, normalized: Arc<NormalizedImage>) -> Digest {
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
    async fn holds(&self, stored: &StoredImage) -> Result<(), String> {
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

    /// What decides `image`'s build but its labels (`pipeline::relabel`): its Dockerfile's label
    /// steps, the context's other files, and the image the Dockerfile builds `FROM` as the daemon
    /// holds it now. `Err` says what the model cannot follow.
    async fn relabel_inputs(
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
    async fn relabel(&self, image: &PlannedImage, inputs: &RelabelInputs) -> Option<Digest> {
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

    /// The normalized image of daemon build `id`, made from what an earlier run kept in the
    /// layer store when the build's layers are that run's (only a label, an `ENV` or another
    /// setting changed): no export, no normalizing, no layer bytes. `None` (the caller exports
    /// and normalizes) when nothing is kept for these layers at this epoch, the daemon no longer
    /// holds the normalized layers, or its answers do not add up.
    async fn normalized_from_store(
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
    async fn keep_in_store(
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
    async fn load(&self, name: &str, reference: &str, normalized: &NormalizedImage) -> Result<()> {
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

    /// The normalized image tagged `repository:tag` in the daemon: made by this run, or (built by
    /// an earlier run) exported and normalized again, which gives the same bytes.
    async fn normalized_of(&self, repository: &str, tag: &str) -> Result<Arc<NormalizedImage>> {
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
    async fn push_normalized(
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
                self.progress.line(
                    tag,
                    &format!(
                        "pushing: {} of {} {}",
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

    fn remember(&self, digest: &Digest, manifest: RegistryManifest) {
        self.pushed
            .lock()
            .expect("pushed lock")
            .insert(digest.clone(), manifest);
    }
}

/// How often a long phase (normalizing, pushing) prints a line.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// `in 3.2 s (41.0 MB/s)`.
/// The stored layers of `stored` as layers of a normalized image, without their bytes.
/// What decides a build but its labels, read before the Docker build (`pipeline::relabel`).
struct RelabelInputs {
    steps: LabelSteps,
    build_labels: BTreeMap<String, String>,
    parent_config: serde_json::Value,
    parent_history: Vec<Step>,
    parent_layers: Vec<String>,
    epoch: u64,
    key: String,
}

impl RelabelInputs {
    fn parent(&self) -> Parent<'_> {
        Parent {
            config: &self.parent_config,
            history: &self.parent_history,
            layers: &self.parent_layers,
        }
    }
}

/// What lists `image`'s packages in a container of it: pip's and dpkg's packages and the venv's
/// metadata ([`LIST_PACKAGES`]); with apt extras, dpkg's dependencies and apt's automatic marks
/// too ([`APT_DEPENDS`]), to find what apt installed with the extras (its apt.lock).
fn listing_script(image: &PlannedImage) -> String {
    if image.spec.extensions.apt.is_empty() {
        LIST_PACKAGES.to_string()
    } else {
        format!("{LIST_PACKAGES}; {APT_DEPENDS}")
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

fn stored_layers(stored: &StoredImage) -> Result<Vec<NormalizedLayer>> {
    stored.layers.iter().map(layer_of_stored).collect()
}

/// `layer` as the layer store keeps it: digests and sizes, no bytes.
fn stored_layer(layer: &NormalizedLayer) -> StoredLayer {
    StoredLayer {
        digest: layer.digest.to_string(),
        diff_id: layer.diff_id.to_string(),
        unpacked_size: layer.unpacked_size,
        compressed_size: layer.compressed_size,
    }
}

/// A layer the store keeps, without its bytes (the daemon or the registry holds them).
fn layer_of_stored(layer: &StoredLayer) -> Result<NormalizedLayer> {
    Ok(NormalizedLayer {
        gzip: None,
        digest: Digest::parse(&layer.digest)?,
        diff_id: Digest::parse(&layer.diff_id)?,
        unpacked_size: layer.unpacked_size,
        compressed_size: layer.compressed_size,
    })
}

fn rate(bytes: u64, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64().max(0.001);
    format!(
        "in {seconds:.1} s ({}/s)",
        human_bytes((bytes as f64 / seconds) as u64)
    )
}

/// `name:tag@sha256:…` as the daemon looks it up: by its digest (the tag may name other bytes).
fn local_reference(base: &str) -> String {
    base.parse::<imagegen_oci::Reference>()
        .map_or_else(|_| base.to_string(), |reference| reference.by_digest())
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

/// A digest as the registry or daemon reported it, checked: anything else is an error naming
/// the repository, never a value that is carried on.
/// An image ID the daemon gave (`sha256:<hex>`), parsed once where it enters.
fn daemon_image_id(text: &str) -> Result<Digest> {
    Digest::parse(text)
        .with_context(|| format!("the Docker daemon gave a malformed image ID {text:?}"))
}

/// The self-test of images already pushed (`imagegen test`): pulled by digest, never by tag, and
/// run as `build` runs it (all GPUs, the baseline through the environment), with the digest and
/// the node named to gpu-selftest so that its report says what it judged and where.
pub(crate) struct DigestTester {
    pub(crate) engine: Engine,
    pub(crate) registries: Registries,
    /// The value of [`RUN_LABEL`] on its containers.
    pub(crate) run_id: String,
    /// The node name handed to gpu-selftest (`GPU_SELFTEST_NODE_NAME`).
    pub(crate) node: String,
    /// A baseline (its JSON), handed as `GPU_SELFTEST_BASELINE`.
    pub(crate) baseline: Option<String>,
}

impl DigestTester {
    /// What the registry serves for `repository:tag` now.
    pub(crate) async fn served(&self, repository: &str, tag: &str) -> Result<Option<Digest>> {
        RegistryAliases(&self.registries)
            .served(repository, tag)
            .await
    }

    /// Pulls `repository@digest` with the user's credentials.
    pub(crate) async fn pull(&self, repository: &str, digest: &Digest) -> Result<String> {
        let reference = format!("{repository}@{digest}");
        let credentials = self.registries.credentials(repository)?;
        self.engine
            .pull(&reference, None, credentials.as_ref(), |_| {})
            .await?;
        Ok(reference)
    }

    /// Whether the daemon offers GPUs to containers.
    pub(crate) async fn gpus(&self) -> bool {
        self.engine.gpu_runtime_available().await.unwrap_or(false)
    }

    /// Runs gpu-selftest in `reference` (pulled by digest); `name` labels the container.
    pub(crate) async fn test(
        &self,
        reference: &str,
        digest: &Digest,
        name: &str,
        gpus: bool,
    ) -> TestOutcome {
        let mut env: BTreeMap<String, String> = [
            ("GPU_SELFTEST_IMAGE_DIGEST".to_string(), digest.to_string()),
            ("GPU_SELFTEST_NODE_NAME".to_string(), self.node.clone()),
        ]
        .into();
        if let Some(baseline) = &self.baseline {
            env.insert("GPU_SELFTEST_BASELINE".into(), baseline.clone());
        }
        let request = RunRequest {
            image: reference.to_string(),
            cmd: vec!["gpu-selftest".into(), "--format".into(), "json".into()],
            entrypoint: Some(vec![]),
            gpus,
            shm_size_bytes: Some(SELFTEST_SHM_BYTES),
            timeout: Some(SELFTEST_TIMEOUT),
            labels: [
                ("imagegen.selftest".to_string(), name.to_string()),
                (RUN_LABEL.to_string(), self.run_id.clone()),
            ]
            .into(),
            env,
        };
        match self.engine.run(request).await {
            Ok(output) => {
                interpret_selftest(output.exit_code, &output.stdout, &output.stderr, gpus)
            }
            Err(error) => TestOutcome::Error {
                summary: error.to_string(),
                report: None,
            },
        }
    }
}
