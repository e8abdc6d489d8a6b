//! The [`Builder`] that works through the Docker Engine API: build contexts from `images/<name>/`
//! plus the gpu-selftest binary for the image's CUDA major, builds with labels, the self-test in a
//! container with all GPUs, tags and pushes with the user's registry credentials. Policy (what to
//! build, when aliases move) stays in `build`; wire protocols stay in `docker`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::sync::{Mutex, OnceCell};

use crate::docker::{
    context_tar, registry_host_of, repository_path_of, BuildRequest, ContextFile, Credentials,
    DockerConfig, Engine, RegistryClient, RetryPolicy, RunRequest,
};
use crate::history::manifest::Packages;
use crate::model::digest::Digest;
use crate::pipeline::executor::{Builder, Existing, TestOutcome};
use crate::pipeline::plan::PlannedImage;
use crate::pipeline::progress::Progress;
use crate::pipeline::selftest::{interpret_selftest, parse_packages, LIST_PACKAGES};
use crate::resolve::image::ImageSpec;

/// The label that carries an image's build key.
pub const BUILD_KEY_LABEL: &str = "imagegen.build-key";
/// `/dev/shm` for the self-test container: NCCL and DataLoader workers need more than Docker's 64 MiB.
const SELFTEST_SHM_BYTES: i64 = 8 << 30;
const SELFTEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The build context of every image, assembled before the first Docker call.
pub struct Contexts {
    pub tars: BTreeMap<String, Vec<u8>>,
}

impl Contexts {
    /// Tars `images_dir/<name>/` plus `selftest_dir/gpu-selftest-cuNN` (as `gpu-selftest`) for
    /// every image. Fails naming the missing binary or directory.
    pub fn assemble(
        images: &[ImageSpec],
        images_dir: &Path,
        selftest_dir: &Path,
    ) -> Result<Contexts> {
        let mut tars = BTreeMap::new();
        let mut binaries: BTreeMap<String, ContextFile> = BTreeMap::new();
        for image in images {
            let dir = images_dir.join(&image.name);
            if !dir.join("Dockerfile").exists() {
                anyhow::bail!(
                    "{} has no Dockerfile\nhint: run `imagegen render` first",
                    dir.display()
                );
            }
            let binary = match binaries.get(&image.selftest) {
                Some(binary) => binary.clone(),
                None => {
                    let path = selftest_dir.join(&image.selftest);
                    let file = ContextFile::read("gpu-selftest", &path).map_err(|e| {
                        anyhow!("{e}\nhint: build the self-test with `bash selftest/build.sh` (it writes target/selftest/gpu-selftest-cu11/12/13 and -cu12/13-arm64) or pass --selftest-dir")
                    })?;
                    let file = ContextFile {
                        executable: true,
                        ..file
                    };
                    binaries.insert(image.selftest.clone(), file.clone());
                    file
                }
            };
            let tar = context_tar(&dir, &[binary])
                .with_context(|| format!("build context of {}", image.name))?;
            tars.insert(image.name.clone(), tar);
        }
        Ok(Contexts { tars })
    }

    /// sha256 of each context, for build keys.
    pub fn digests(&self) -> BTreeMap<String, Digest> {
        self.tars
            .iter()
            .map(|(name, tar)| (name.clone(), Digest::of(tar)))
            .collect()
    }
}

/// Settings of the Docker builder.
pub struct EngineBuilderSettings {
    /// Labels added at build time (created, revision): they are not part of the Dockerfile.
    pub build_labels: BTreeMap<String, String>,
    /// Check the registry for an image with the same build key (when pushing).
    pub check_registry: bool,
    /// `/dev/shm` size of the self-test container.
    pub selftest_shm_bytes: i64,
    /// Retries of registry lookups (pushes use the engine's own policy).
    pub registry_retry: RetryPolicy,
    /// A gpu-selftest baseline (its JSON), handed to every self-test as `GPU_SELFTEST_BASELINE`.
    pub selftest_baseline: Option<String>,
}

impl Default for EngineBuilderSettings {
    fn default() -> Self {
        EngineBuilderSettings {
            build_labels: BTreeMap::new(),
            check_registry: false,
            selftest_shm_bytes: SELFTEST_SHM_BYTES,
            registry_retry: RetryPolicy::default(),
            selftest_baseline: None,
        }
    }
}

pub struct EngineBuilder {
    engine: Engine,
    contexts: Contexts,
    progress: Arc<Progress>,
    settings: EngineBuilderSettings,
    docker_config: Option<DockerConfig>,
    credentials: Mutex<BTreeMap<String, Option<Credentials>>>,
    gpus: OnceCell<bool>,
    host_platform: OnceCell<String>,
    /// Per base image: present or pulled, or why not. Looked up once for all the images on it,
    /// so a missing base is one attempt and one cause, not one daemon error per image.
    bases: Mutex<BTreeMap<String, Arc<BaseImage>>>,
}

/// Whether a base image is in the daemon (present or pulled), or why it cannot be; set once.
type BaseImage = OnceCell<Result<(), String>>;

impl EngineBuilder {
    pub fn new(
        engine: Engine,
        contexts: Contexts,
        progress: Arc<Progress>,
        settings: EngineBuilderSettings,
    ) -> EngineBuilder {
        // A broken Docker config only matters once something needs credentials; keep the error for then.
        let docker_config = DockerConfig::load_default().ok();
        EngineBuilder {
            engine,
            contexts,
            progress,
            settings,
            docker_config,
            credentials: Mutex::new(BTreeMap::new()),
            gpus: OnceCell::new(),
            host_platform: OnceCell::new(),
            bases: Mutex::new(BTreeMap::new()),
        }
    }

    /// Makes sure the base image a runtime image is built `FROM` is in the daemon, pulling it
    /// when it is not; the error says what to do when it cannot be had. A devel image's base is
    /// its runtime image, built first in the plan.
    async fn ensure_base(&self, image: &PlannedImage) -> Result<()> {
        let base = &image.spec.base_image;
        if image.spec.parent.is_some() || base == "scratch" {
            return Ok(());
        }
        let cell = Arc::clone(self.bases.lock().await.entry(base.clone()).or_default());
        let name = &image.spec.name;
        let outcome = cell
            .get_or_init(|| async {
                match self.engine.image(base).await {
                    Ok(Some(_)) => return Ok(()),
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
        outcome.map_err(|reason| anyhow!(missing_base_text(base, &reason)))
    }

    async fn credentials_for(&self, repository: &str) -> Result<Option<Credentials>> {
        let host = registry_host_of(repository);
        let mut cache = self.credentials.lock().await;
        if let Some(found) = cache.get(&host) {
            return Ok(found.clone());
        }
        let found = match &self.docker_config {
            Some(config) => config.credentials_for(&host)?,
            None => match DockerConfig::load_default() {
                Ok(config) => config.credentials_for(&host)?,
                Err(error) => return Err(error.into()),
            },
        };
        cache.insert(host, found.clone());
        Ok(found)
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
            .find_image_with_label(BUILD_KEY_LABEL, image.build_key.as_str())
            .await?
        {
            return Ok(Some(Existing::Local(local.id)));
        }
        if let (true, Some(recorded)) = (self.settings.check_registry, &image.recorded_digest) {
            let credentials = self.credentials_for(&image.spec.repository).await?;
            let client =
                RegistryClient::new(&registry_host_of(&image.spec.repository), credentials)
                    .with_retry(self.settings.registry_retry);
            let path = repository_path_of(&image.spec.repository);
            if let Some(labels) = client.image_labels(path, &image.spec.tag).await? {
                if labels.get(BUILD_KEY_LABEL).map(String::as_str) == Some(image.build_key.as_str())
                {
                    if let Some(digest) = client.manifest_digest(path, &image.spec.tag).await? {
                        let digest = registry_digest(&digest, &image.spec.repository)?;
                        if &digest == recorded {
                            return Ok(Some(Existing::Registry(digest)));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    async fn build(&self, image: &PlannedImage) -> Result<String> {
        let name = &image.spec.name;
        let context = self
            .contexts
            .tars
            .get(name)
            .cloned()
            .ok_or_else(|| anyhow!("no build context assembled for {name}"))?;
        let mut request = BuildRequest::new(image.reference.clone(), context);
        request.platform = Some(image.spec.platform.to_string());
        request.labels = self.settings.build_labels.clone();
        request
            .labels
            .insert(BUILD_KEY_LABEL.into(), image.build_key.to_string());
        self.progress.start(name, "building");
        let built = match self.ensure_base(image).await {
            Ok(()) => {
                let progress = Arc::clone(&self.progress);
                let log_name = name.clone();
                self.engine
                    .build(request, move |line| progress.line(&log_name, line))
                    .await
                    .map_err(anyhow::Error::from)
            }
            Err(error) => Err(error),
        };
        match built {
            Ok(id) => {
                self.progress.stage(name, &format!("built {id}"));
                Ok(id)
            }
            Err(error) => {
                // The log holds the error itself, not only that the build failed.
                self.progress.log_only(name, "== error");
                for line in format!("{error:#}").lines() {
                    self.progress.log_only(name, line);
                }
                self.progress.stage(name, "build failed");
                let log = self.progress.log_path(name);
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
        let gpus = self.gpus().await;
        self.progress.stage(
            name,
            if gpus {
                "gpu-selftest on all GPUs"
            } else {
                "gpu-selftest (no GPU runtime on this host)"
            },
        );
        let request = RunRequest {
            image: image.reference.clone(),
            cmd: vec!["gpu-selftest".into(), "--format".into(), "json".into()],
            // nvidia/cuda's entrypoint prints a banner on stdout; the report must be all of stdout.
            entrypoint: Some(vec![]),
            gpus,
            shm_size_bytes: Some(self.settings.selftest_shm_bytes),
            timeout: Some(SELFTEST_TIMEOUT),
            labels: [("imagegen.selftest".to_string(), name.clone())].into(),
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
        self.progress.stage(
            name,
            &format!("self-test {}: {}", outcome.status(), outcome.summary()),
        );
        outcome
    }

    async fn contents(&self, image: &PlannedImage) -> Result<Option<Packages>> {
        if !self.runs_here(image).await {
            return Ok(None);
        }
        let request = RunRequest {
            image: image.reference.clone(),
            cmd: vec!["sh".into(), "-c".into(), LIST_PACKAGES.into()],
            entrypoint: Some(vec![]),
            timeout: Some(Duration::from_secs(120)),
            labels: [("imagegen.contents".to_string(), image.spec.name.clone())].into(),
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
        Ok(Some(parse_packages(&output.stdout)))
    }

    async fn push(
        &self,
        repository: &str,
        tag: &str,
        build_key: Option<&Digest>,
    ) -> Result<Digest> {
        let credentials = self.credentials_for(repository).await?;
        if let Some(build_key) = build_key {
            let client = RegistryClient::new(&registry_host_of(repository), credentials.clone())
                .with_retry(self.settings.registry_retry);
            if let Some(labels) = client
                .image_labels(repository_path_of(repository), tag)
                .await?
            {
                let theirs = labels
                    .get(BUILD_KEY_LABEL)
                    .map(String::as_str)
                    .unwrap_or("none");
                if theirs != build_key.as_str() {
                    anyhow::bail!(
                        "refusing to push {repository}:{tag}: the registry already has this full tag with different content (build key {theirs}, this image {build_key}); full tags are immutable\nhint: to publish a rebuild under a new tag, add a revision to tags.full in the matrix (e.g. \"{{torch}}-cuda{{cuda}}-cudnn{{cudnn_major}}-{{variant}}-{{os}}-r2\"), or move aliases back with `imagegen rollback`"
                    );
                }
            }
        }
        self.progress
            .line(tag, &format!("== pushing {repository}:{tag}"));
        let digest = self
            .engine
            .push(repository, tag, credentials.as_ref(), |_| {})
            .await?;
        registry_digest(&digest, repository)
    }

    async fn tag(&self, source: &str, repository: &str, tag: &str) -> Result<()> {
        Ok(self.engine.tag(source, repository, tag).await?)
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
fn registry_digest(text: &str, repository: &str) -> Result<Digest> {
    Digest::parse(text)
        .with_context(|| format!("the registry answered for {repository} with a malformed digest"))
}
