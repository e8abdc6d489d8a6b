//! The [`Builder`] that works through the Docker Engine API, split by the plan's steps
//! (`pipeline::steps::Step`): each step the executor runs has its module here, and the
//! [`Builder`] implementation below only hands each step to it. Build contexts from
//! `images/<name>/` plus the gpu-selftest binary ([`contexts`]); the earlier build found by its
//! build key (`find_earlier_build`); the base image pulled or checked (`resolve_base`); the Docker
//! build (`build`), or a kept build relabelled without one (`relabelled`), normalized and kept in
//! the layer store (`normalized`), with the venv made on the host (`host_venv`); the packages
//! listed (`read_packages`); the self-test in a container with all GPUs (`self_test`); the push
//! with the user's registry credentials (`push`); and here, alias moves through the registry API, the
//! alias stored as exactly the manifest the full tag serves. Every container it starts
//! carries the run's label ([`RUN_LABEL`]), so the command can remove whatever a cancellation
//! left behind. Policy (what to build, when aliases move) stays in the plan and the executor;
//! wire protocols stay in `docker`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use tokio::sync::{Mutex, OnceCell};

use crate::docker::layer_store::LayerStore;
use crate::docker::run_journal::RunJournal;
use crate::docker::{
    repository_path_of, Engine, Registries, RegistryClient, RegistryError, RegistryManifest,
    RetryPolicy, RunRequest, DEFAULT_REGISTRY_TIMEOUT,
};
use crate::history::alias_transaction::AliasRegistry;
use crate::history::apt_lock::APT_DEPENDS;
use crate::history::manifest::{human_bytes, ImageSize, Packages};
use crate::model::digest::Digest;
use crate::pipeline::executor::{Builder, Existing, TestOutcome, Unreachable};
use crate::pipeline::normalize::{KnownLayer, NormalizedImage};
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::progress::Progress;
use crate::pipeline::selftest::{interpret_selftest, LIST_PACKAGES};
use crate::pipeline::steps::Wheels;
use contexts::Contexts;

mod build;
pub(crate) mod contexts;
mod find_earlier_build;
mod host_venv;
mod layers;
mod normalized;
mod push;
mod read_packages;
mod relabel_inputs;
mod relabelled;
mod resolve_base;
mod self_test;

/// The label that carries an image's build key.
pub(crate) const BUILD_KEY_LABEL: &str = "imagegen.build-key";

/// The label on every container a run starts (self-test, package listing): its value names the
/// run, so the run's cleanup finds exactly its own containers.
pub(crate) const RUN_LABEL: &str = "imagegen.run";

/// `/dev/shm` for the self-test container: NCCL and DataLoader workers need more than Docker's 64 MiB.
const SELFTEST_SHM_BYTES: i64 = 8 << 30;

/// How long gpu-selftest may run.
const SELFTEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The files of an image's build context a venv made on the host needs: its host-venv.sh and its
/// lock (which goes into the venv's last layer, not the Docker build).
pub(super) struct HostVenvFiles {
    pub(super) script: Vec<u8>,
    pub(super) lock: Vec<u8>,
}

/// Settings of the Docker builder.
pub(crate) struct EngineBuilderSettings {
    /// Labels added at build time (created, revision): they are not part of the Dockerfile.
    pub(crate) build_labels: BTreeMap<String, String>,
    /// This run pushes: keep each normalized image in memory until it is pushed.
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
    /// How a `wheels: host` venv is cut into layers (matrix.yaml `venv_layers`).
    pub(crate) venv_layers: crate::model::axes::VenvLayers,
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
            venv_layers: crate::model::axes::VenvLayers::default(),
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

/// Each step of the plan, handed to the module that makes it.
impl Builder for EngineBuilder {
    async fn find_existing(
        &self,
        image: &PlannedImage,
        in_registry: Option<&Digest>,
    ) -> Result<Option<Existing>> {
        self.find_by_build_key(image, in_registry).await
    }

    async fn resolve_base(
        &self,
        image: &PlannedImage,
        base: &str,
        pinned_id: Option<&Digest>,
        built_first: bool,
    ) -> Result<()> {
        self.resolve_base_image(image, base, pinned_id, built_first)
            .await
    }

    async fn build(&self, image: &PlannedImage, wheels: Wheels, load: bool) -> Result<Digest> {
        self.build_image(image, wheels, load).await
    }

    async fn test(&self, image: &PlannedImage) -> TestOutcome {
        self.run_selftest(image).await
    }

    async fn contents(&self, image: &PlannedImage) -> Result<Option<Packages>> {
        self.read_packages(image).await
    }

    async fn push(
        &self,
        repository: &str,
        tag: &str,
        build_key: Option<&Digest>,
    ) -> Result<Digest> {
        self.push_full_tag(repository, tag, build_key).await
    }

    fn size(&self, image_id: &Digest) -> Option<ImageSize> {
        self.sizes
            .lock()
            .expect("sizes lock")
            .get(image_id.as_str())
            .cloned()
    }

    async fn tag(&self, source: &str, repository: &str, tag: &str) -> Result<()> {
        Ok(self.engine.tag(source, repository, tag).await?)
    }

    fn unreachable_registry(&self, error: &anyhow::Error) -> Option<Unreachable> {
        error
            .chain()
            .find_map(|cause| match cause.downcast_ref::<RegistryError>()? {
                RegistryError::Unreachable { host, reason, .. } => Some(Unreachable {
                    host: host.clone(),
                    reason: reason.clone(),
                }),
                RegistryError::Timeout { host, seconds, .. } => Some(Unreachable {
                    host: host.clone(),
                    reason: format!("no answer within {seconds} s"),
                }),
                _ => None,
            })
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
        let env: BTreeMap<String, String> = [
            ("GPU_SELFTEST_IMAGE_DIGEST".to_string(), digest.to_string()),
            ("GPU_SELFTEST_NODE_NAME".to_string(), self.node.clone()),
        ]
        .into();
        let labels = [
            ("imagegen.selftest".to_string(), name.to_string()),
            (RUN_LABEL.to_string(), self.run_id.clone()),
        ]
        .into();
        let request = selftest_request(
            reference,
            gpus,
            SELFTEST_SHM_BYTES,
            labels,
            self.baseline.as_deref(),
            env,
        );
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

/// The container gpu-selftest runs in, for `build` and `imagegen test` alike: its JSON report is
/// all of stdout (no entrypoint: nvidia/cuda's prints a banner there), all GPUs where the daemon
/// has them, `/dev/shm` of `shm_size_bytes`, at most [`SELFTEST_TIMEOUT`]; a baseline goes in
/// `GPU_SELFTEST_BASELINE`, which gpu-selftest reads as the JSON itself when it starts with `{`
/// (no file is mounted), beside the rest of `env`.
fn selftest_request(
    image: &str,
    gpus: bool,
    shm_size_bytes: i64,
    labels: BTreeMap<String, String>,
    baseline: Option<&str>,
    mut env: BTreeMap<String, String>,
) -> RunRequest {
    if let Some(baseline) = baseline {
        env.insert("GPU_SELFTEST_BASELINE".into(), baseline.to_string());
    }
    RunRequest {
        image: image.to_string(),
        cmd: vec!["gpu-selftest".into(), "--format".into(), "json".into()],
        entrypoint: Some(vec![]),
        gpus,
        shm_size_bytes: Some(shm_size_bytes),
        timeout: Some(SELFTEST_TIMEOUT),
        labels,
        env,
        // As the image's `USER`: the self-test runs as the team's workloads will.
        user: None,
    }
}

/// How often a long phase (normalizing, pushing) prints a line.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// `in 3.2 s (41.0 MB/s)`: how long a phase took, and its rate.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::manifest::Manifest;
    use crate::pipeline::plan::{plan, PlanOptions};

    #[test]
    fn rates_say_the_time_and_the_speed() {
        assert_eq!(
            rate(41_000_000, Duration::from_secs(1)),
            format!("in 1.0 s ({}/s)", human_bytes(41_000_000))
        );
        // A phase too quick to time is not a division by zero.
        assert!(rate(1, Duration::ZERO).starts_with("in 0.0 s ("));
    }

    #[test]
    fn a_pinned_base_is_looked_up_by_its_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            local_reference(&format!("nvidia/cuda:12.6.3-base-ubuntu24.04@{digest}")),
            format!("nvidia/cuda@{digest}")
        );
        // A registry's port is no tag.
        assert_eq!(
            local_reference(&format!("mirror.example:5000/nvidia/cuda@{digest}")),
            format!("mirror.example:5000/nvidia/cuda@{digest}")
        );
        assert_eq!(
            local_reference(&format!("mirror.example:5000/cuda:12.6@{digest}")),
            format!("mirror.example:5000/cuda@{digest}")
        );
        assert_eq!(
            local_reference("imagegen-test/base:1"),
            "imagegen-test/base:1"
        );
    }

    #[test]
    fn apt_extras_add_what_apt_installed_with_them_to_the_listing() {
        let specs = crate::resolve::test_images(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
        );
        let planned = plan(
            &specs,
            &specs,
            &std::collections::BTreeMap::new(),
            &Manifest::new(),
            None,
            &[],
            &PlanOptions::default(),
        );
        let mut image = planned.images[0].clone();
        assert_eq!(listing_script(&image), LIST_PACKAGES);
        image.spec.extensions.apt = vec!["git".into()];
        assert_eq!(
            listing_script(&image),
            format!("{LIST_PACKAGES}; {APT_DEPENDS}")
        );
    }
    #[test]
    fn the_selftest_container_gives_its_report_on_stdout_with_the_baseline_in_its_environment() {
        let labels: BTreeMap<String, String> =
            [(RUN_LABEL.to_string(), "run-1".to_string())].into();
        let request = selftest_request(
            "r/p:t",
            true,
            SELFTEST_SHM_BYTES,
            labels.clone(),
            Some("{\"figures\": {}}"),
            [("GPU_SELFTEST_NODE_NAME".to_string(), "node-7".to_string())].into(),
        );
        assert_eq!(request.cmd, ["gpu-selftest", "--format", "json"]);
        assert_eq!(request.entrypoint, Some(vec![]), "no banner on stdout");
        assert!(request.gpus);
        assert_eq!(request.shm_size_bytes, Some(8 << 30));
        assert_eq!(request.timeout, Some(SELFTEST_TIMEOUT));
        assert_eq!(request.labels, labels);
        assert_eq!(request.env["GPU_SELFTEST_BASELINE"], "{\"figures\": {}}");
        assert_eq!(request.env["GPU_SELFTEST_NODE_NAME"], "node-7");
        let without = selftest_request("r/p:t", false, 1, BTreeMap::new(), None, BTreeMap::new());
        assert!(without.env.is_empty() && !without.gpus);
    }
}
