//! `Engine`: the Docker Engine API through bollard. Connects (honouring `DOCKER_HOST`, negotiating
//! the API version down to the daemon's), builds images from in-memory contexts with the classic
//! builder while streaming output line by line, inspects, finds, tags, removes and loads images,
//! pushes with retries of transient registry failures, and runs short-lived containers (optionally
//! with all GPUs) that are always removed afterwards (and finds and removes them by label, for a
//! caller whose run was cancelled). Every daemon request has a deadline until its answer begins
//! ([`Engine::connect_with_timeout`]); a push attempt that goes silent longer than its idle
//! deadline ([`Engine::with_push_idle_timeout`]) counts as a transient failure: the registry
//! behind the daemon accepted the connection and did not answer.
//!
//! It returns plain values (image ids, digests, labels, exit codes) and never decides what to
//! build, which tags to use or whether a test passed; that is the executor's job.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateImageOptionsBuilder, ImportImageOptionsBuilder,
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, LogsOptionsBuilder,
    PushImageOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    TagImageOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::{body_full, Docker};
use futures_util::StreamExt;

use imagegen_oci::{is_transient_message, registry_host_of, Credentials, RetryPolicy};

use super::error::DockerError;

/// How many chunks of an image export wait between the daemon and the reader.
const EXPORT_CHUNKS_BUFFERED: usize = 64;

/// How much of an export the daemon has sent, and how long the whole took once it ended.
#[derive(Debug, Default)]
pub(crate) struct ExportProgress {
    bytes: std::sync::atomic::AtomicU64,
    took: std::sync::Mutex<Option<Duration>>,
}

impl ExportProgress {
    /// Bytes sent so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long the daemon took to send the whole export, once it has.
    pub(crate) fn took(&self) -> Option<Duration> {
        *self.took.lock().expect("export progress lock")
    }
}

/// An image export as the daemon sends it ([`Engine::export_image`]); read it on a blocking
/// thread.
pub(crate) struct ExportReader {
    chunks: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
    progress: Arc<ExportProgress>,
}

impl ExportReader {
    pub(crate) fn progress(&self) -> Arc<ExportProgress> {
        Arc::clone(&self.progress)
    }
}

impl std::io::Read for ExportReader {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(error)) => return Err(error),
                // The sender is gone: the end, when the daemon finished; else it stopped early.
                None if self.progress.took().is_some() => return Ok(0),
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the Docker daemon's image export ended before its end",
                    ))
                }
            }
        }
        let count = buffer.len().min(self.current.len());
        buffer[..count].copy_from_slice(&self.current[..count]);
        bytes::Buf::advance(&mut self.current, count);
        Ok(count)
    }
}

/// The address used when `DOCKER_HOST` is unset or empty.
pub(crate) const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// How long connecting, negotiating and pinging may take before the daemon counts as unreachable
/// (or the request deadline, when that is shorter).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The default deadline of each daemon request until its answer begins (a streamed answer, such
/// as a build's output, is not cut off by it).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// The default longest silence of a push before it counts as hung: the daemon reports progress
/// while layers upload, and nothing while the registry does not answer.
pub(crate) const DEFAULT_PUSH_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Build output lines kept for a failure report.
const FAILURE_TAIL_LINES: usize = 20;

/// An image build: the context tar (see [`super::context_tar`]) and what to stamp on the image.
#[derive(Clone)]
pub struct BuildRequest {
    /// Full reference of the result, e.g. `127.0.0.1:5000/team/torch:2.7.0-cu128`: the daemon
    /// tags it so unless `untagged`; errors name it either way.
    pub(crate) tag: String,
    /// Leave the result untagged (its ID is returned): the caller tags what it makes of it.
    pub(crate) untagged: bool,
    /// Uncompressed tar of the build context.
    pub(crate) context: Vec<u8>,
    /// Path of the Dockerfile inside the context.
    pub(crate) dockerfile_path: String,
    pub labels: BTreeMap<String, String>,
    pub build_args: BTreeMap<String, String>,
    /// Ignore the daemon's layer cache.
    pub(crate) no_cache: bool,
    /// Ask the daemon to pull a newer base image (off: base images are local or pinned).
    pub(crate) pull: bool,
    /// Stage of a multi-stage Dockerfile to stop at; `None` builds the last stage.
    pub target: Option<String>,
    /// Target platform (`linux/arm64`); `None` builds for the daemon's own platform. Steps that
    /// run commands need a daemon of that platform (or emulation); `FROM` + `COPY` do not.
    pub(crate) platform: Option<String>,
}

impl BuildRequest {
    /// A request with `Dockerfile` at the context root, no labels, no build args, cache on.
    pub fn new(tag: impl Into<String>, context: Vec<u8>) -> Self {
        BuildRequest {
            tag: tag.into(),
            untagged: false,
            context,
            dockerfile_path: "Dockerfile".into(),
            labels: BTreeMap::new(),
            build_args: BTreeMap::new(),
            no_cache: false,
            pull: false,
            target: None,
            platform: None,
        }
    }
}

impl std::fmt::Debug for BuildRequest {
    /// Shows the context's size, not its bytes.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("BuildRequest")
            .field("tag", &self.tag)
            .field("context_bytes", &self.context.len())
            .field("dockerfile_path", &self.dockerfile_path)
            .field("labels", &self.labels)
            .field("build_args", &self.build_args)
            .field("no_cache", &self.no_cache)
            .field("pull", &self.pull)
            .field("target", &self.target)
            .field("platform", &self.platform)
            .finish()
    }
}

/// Removes a container when dropped while still armed: if the future running it is cancelled
/// (Ctrl-C, a timeout around the call), the container does not outlive it. Needs a live runtime.
struct ContainerGuard {
    docker: Docker,
    container_id: Option<String>,
}

impl ContainerGuard {
    /// The container is being removed by the normal path; nothing to do on drop.
    fn disarm(&mut self) {
        self.container_id = None;
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let Some(container_id) = self.container_id.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let docker = self.docker.clone();
            runtime.spawn(async move {
                let options = RemoveContainerOptionsBuilder::default().force(true).build();
                // Best effort: the caller is gone, there is no one to report a failure to.
                let _ = docker.remove_container(&container_id, Some(options)).await;
            });
        }
    }
}

/// A local image as the daemon describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalImage {
    /// `sha256:...` image id (the config digest).
    pub id: String,
    pub repo_tags: Vec<String>,
    /// `repository@sha256:...` entries, filled once the image was pushed or pulled.
    pub repo_digests: Vec<String>,
    pub labels: BTreeMap<String, String>,
    /// The config's `created` time (RFC 3339), when the daemon reports one.
    pub(crate) created: Option<String>,
    /// The layers' diff IDs (`sha256:…`), bottom first, when the daemon reports them (an
    /// inspect does; a listing does not).
    pub(crate) layers: Vec<String>,
}

/// A container to run to completion.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub image: String,
    /// Command and arguments; empty means the image's default command.
    pub cmd: Vec<String>,
    /// Replaces the image's `ENTRYPOINT`; `Some(vec![])` removes it, so `cmd` runs directly
    /// (NVIDIA's CUDA images print a banner from theirs, which would precede a JSON report).
    pub entrypoint: Option<Vec<String>>,
    pub env: BTreeMap<String, String>,
    /// Request all GPUs (`--gpus all`: device request, driver nvidia, count -1).
    pub gpus: bool,
    /// Size of `/dev/shm` in bytes; `None` keeps the daemon default (64 MiB).
    pub shm_size_bytes: Option<i64>,
    /// Labels on the container, e.g. to find leftovers.
    pub labels: BTreeMap<String, String>,
    /// Kill and remove the container after this long; `None` waits indefinitely.
    pub timeout: Option<Duration>,
    /// Runs the command as this `uid:gid` (or name) instead of the image's `USER`.
    pub user: Option<String>,
}

/// What a finished container left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
}

/// A connection to one Docker daemon.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: Docker,
    address: String,
    push_retry: RetryPolicy,
    request_timeout: Duration,
    push_idle_timeout: Duration,
}

/// The text of an error and of all its sources, without repeats ("client error (Connect): tcp
/// connect error: Connection refused (os error 111)").
/// The bollard form of `credentials`, for the daemon's `X-Registry-Auth` header.
fn docker_credentials(
    credentials: &Credentials,
    server_address: &str,
) -> bollard::auth::DockerCredentials {
    match credentials {
        Credentials::UsernamePassword { username, password } => bollard::auth::DockerCredentials {
            username: Some(username.clone()),
            password: Some(password.clone()),
            serveraddress: Some(server_address.to_string()),
            ..Default::default()
        },
        Credentials::IdentityToken { token } => bollard::auth::DockerCredentials {
            identitytoken: Some(token.clone()),
            serveraddress: Some(server_address.to_string()),
            ..Default::default()
        },
    }
}

/// An error and its sources as one line, each cause once: the registry crate's, so that a
/// daemon's and a registry's errors read alike.
pub(crate) use imagegen_oci::error_chain;

fn is_connection_failure(error: &BollardError) -> bool {
    matches!(
        error,
        BollardError::HyperLegacyError { .. }
            | BollardError::SocketNotFoundError(_)
            | BollardError::RequestTimeoutError
            | BollardError::UnsupportedURISchemeError { .. }
    )
}

fn is_not_found(error: &BollardError) -> bool {
    matches!(
        error,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

fn to_btree(map: HashMap<String, String>) -> BTreeMap<String, String> {
    map.into_iter().collect()
}

/// Splits streamed text into lines, holding back a trailing partial line.
#[derive(Default)]
struct LineSplitter {
    partial: String,
}

impl LineSplitter {
    fn push(&mut self, chunk: &str, mut emit: impl FnMut(&str)) {
        self.partial.push_str(chunk);
        while let Some(newline) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=newline).collect();
            emit(line.trim_end_matches(['\n', '\r']));
        }
    }

    fn finish(&mut self, mut emit: impl FnMut(&str)) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            emit(line.trim_end_matches('\r'));
        }
    }
}

/// What [`Engine::remove_untagged_image`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Removal {
    Removed,
    /// No such image (removed already, or with a parent removed before it).
    Absent,
    /// It has a tag: someone's image, kept.
    Tagged,
    /// The daemon refused because a container uses it, with its reason. For a moment after a
    /// container goes from the daemon's list, its image still counts as in use by it.
    InUse(String),
    /// The daemon refused because an image is built on it (a later step's, or one whose build
    /// took it as cache), with its reason.
    HasChildren(String),
}

/// The classic builder's progress marker: `Step 3/8 : RUN ...` → `Some((3, 8))`. Lets a caller
/// drive a progress bar from the lines [`Engine::build`] streams.
pub fn build_step_progress(line: &str) -> Option<(u32, u32)> {
    let rest = line.strip_prefix("Step ")?;
    let (counts, _) = rest.split_once(" : ")?;
    let (current, total) = counts.split_once('/')?;
    Some((current.parse().ok()?, total.parse().ok()?))
}

/// Removes ANSI escape sequences (the classic builder colours a step's stderr red).
fn strip_terminal_escapes(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut characters = line.chars().peekable();
    while let Some(c) = characters.next() {
        if c != '\u{1b}' {
            plain.push(c);
            continue;
        }
        if characters.peek() == Some(&'[') {
            characters.next();
            // Parameters and intermediates, then one final byte in '@'..='~'.
            for c in characters.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    plain
}

/// Lines the classic builder prints about its own work, useless in a failure report.
fn is_builder_bookkeeping(line: &str) -> bool {
    line.starts_with(" ---> ") || line.starts_with("Removing intermediate container ")
}

/// Pulls `sha256:<64 hex>` out of a push status such as `t1: digest: sha256:ab.. size: 528`.
fn digest_in_status(status: &str) -> Option<String> {
    let start = status.find("digest: sha256:")? + "digest: ".len();
    let candidate: String = status[start..].chars().take("sha256:".len() + 64).collect();
    let hex = candidate.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())).then_some(candidate)
}

enum PushAttemptFailure {
    /// The registry side failed; retry when `transient`.
    Registry { message: String, transient: bool },
    /// The daemon itself failed; never retried.
    Daemon(DockerError),
}

impl Engine {
    /// Connects to `DOCKER_HOST`, or to [`DEFAULT_DOCKER_HOST`] when it is unset or empty.
    pub async fn connect() -> Result<Engine, DockerError> {
        Self::connect_with_timeout(DEFAULT_REQUEST_TIMEOUT).await
    }

    /// [`Engine::connect`] with `request_timeout` as the deadline of every daemon request.
    pub(crate) async fn connect_with_timeout(
        request_timeout: Duration,
    ) -> Result<Engine, DockerError> {
        let address = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|host| !host.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_string());
        Self::connect_to_with_timeout(&address, request_timeout).await
    }

    /// Connects to `address` (`unix://...`, `tcp://...`, `http://...`), negotiates the API
    /// version and pings. Any failure is one [`DockerError::DaemonUnreachable`] naming `address`.
    pub async fn connect_to(address: &str) -> Result<Engine, DockerError> {
        Self::connect_to_with_timeout(address, DEFAULT_REQUEST_TIMEOUT).await
    }

    /// [`Engine::connect_to`] with `request_timeout` as the deadline of every daemon request
    /// until its answer begins (at least one second).
    pub(crate) async fn connect_to_with_timeout(
        address: &str,
        request_timeout: Duration,
    ) -> Result<Engine, DockerError> {
        let request_timeout = request_timeout.max(Duration::from_secs(1));
        let unreachable = |reason: String| DockerError::DaemonUnreachable {
            address: address.to_string(),
            reason,
        };
        let connect_timeout = CONNECT_TIMEOUT.min(request_timeout);
        let docker = Docker::connect_with_host(address)
            .map_err(|error| unreachable(error_chain(&error)))?
            .with_timeout(connect_timeout);
        let timed_out = || {
            unreachable(format!(
                "no answer within {} s (the daemon deadline)",
                connect_timeout.as_secs()
            ))
        };
        let docker = match docker.negotiate_version().await {
            Ok(docker) => docker,
            Err(BollardError::RequestTimeoutError) => return Err(timed_out()),
            Err(error) => return Err(unreachable(error_chain(&error))),
        };
        match docker.ping().await {
            Ok(_) => {}
            Err(BollardError::RequestTimeoutError) => return Err(timed_out()),
            Err(error) => return Err(unreachable(error_chain(&error))),
        }
        Ok(Engine {
            docker: docker.with_timeout(request_timeout),
            address: address.to_string(),
            push_retry: RetryPolicy::default(),
            request_timeout,
            push_idle_timeout: DEFAULT_PUSH_IDLE_TIMEOUT,
        })
    }

    /// Replaces the longest silence a push may keep before the attempt counts as hung (a
    /// registry that accepts connections and never answers); at least one second.
    pub fn with_push_idle_timeout(mut self, timeout: Duration) -> Self {
        self.push_idle_timeout = timeout.max(Duration::from_secs(1));
        self
    }

    /// Replaces the retry policy for pushes (tests use short delays).
    pub fn with_push_retry(mut self, policy: RetryPolicy) -> Self {
        self.push_retry = policy;
        self
    }

    /// The daemon address this engine talks to.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// The bollard client, for callers that need an endpoint this type does not wrap.
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    fn daemon_error(&self, action: impl Into<String>, error: BollardError) -> DockerError {
        if matches!(error, BollardError::RequestTimeoutError) {
            return DockerError::Daemon {
                address: self.address.clone(),
                action: action.into(),
                reason: format!(
                    "no answer within {} s (the daemon deadline)",
                    self.request_timeout.as_secs()
                ),
            };
        }
        if is_connection_failure(&error) {
            return DockerError::DaemonUnreachable {
                address: self.address.clone(),
                reason: error_chain(&error),
            };
        }
        let reason = match &error {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => format!("{} (HTTP {status_code})", message.trim()),
            other => error_chain(other),
        };
        DockerError::Daemon {
            address: self.address.clone(),
            action: action.into(),
            reason,
        }
    }

    /// Builds `request` with the classic builder. Every output line goes to `on_line` as it
    /// arrives. Returns the new image id (`sha256:...`). A failing step gives
    /// [`DockerError::BuildFailed`] with the step and the last lines of output.
    pub async fn build(
        &self,
        request: BuildRequest,
        mut on_line: impl FnMut(&str) + Send,
    ) -> Result<String, DockerError> {
        let labels: HashMap<&str, &str> = request
            .labels
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        let build_args: HashMap<&str, &str> = request
            .build_args
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        let mut options = BuildImageOptionsBuilder::default()
            .dockerfile(&request.dockerfile_path)
            .labels(&labels)
            .buildargs(&build_args)
            .nocache(request.no_cache)
            .rm(true)
            .forcerm(true);
        if !request.untagged {
            options = options.t(&request.tag);
        }
        if request.pull {
            options = options.pull("true");
        }
        if let Some(target) = &request.target {
            options = options.target(target);
        }
        if let Some(platform) = &request.platform {
            options = options.platform(platform);
        }

        let mut stream = self.docker.build_image(
            options.build(),
            None,
            Some(body_full(request.context.into())),
        );
        let mut splitter = LineSplitter::default();
        let mut tail: VecDeque<String> = VecDeque::with_capacity(FAILURE_TAIL_LINES);
        let mut current_step: Option<String> = None;
        let mut image_id: Option<String> = None;
        let mut record_line = |line: &str, on_line: &mut dyn FnMut(&str)| {
            let line = strip_terminal_escapes(line);
            if line.starts_with("Step ") {
                current_step = Some(line.clone());
            }
            if !is_builder_bookkeeping(&line) {
                if tail.len() == FAILURE_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line.clone());
            }
            on_line(&line);
        };

        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(text) = info.stream.as_deref() {
                        splitter.push(text, |line| record_line(line, &mut on_line));
                    }
                    if let Some(status) = info.status.as_deref() {
                        splitter.push(status, |line| record_line(line, &mut on_line));
                        splitter.push("\n", |line| record_line(line, &mut on_line));
                    }
                    if let Some(id) = info.aux.and_then(|aux| aux.id) {
                        image_id = Some(id);
                    }
                }
                Err(BollardError::DockerStreamError { error }) => {
                    splitter.finish(|line| record_line(line, &mut on_line));
                    return Err(DockerError::BuildFailed {
                        tag: request.tag,
                        step: current_step,
                        message: error,
                        last_lines: tail.into_iter().collect(),
                    });
                }
                Err(error) => {
                    return Err(self.daemon_error(format!("building image {}", request.tag), error))
                }
            }
        }
        splitter.finish(|line| record_line(line, &mut on_line));

        match image_id {
            Some(id) => Ok(id),
            None if request.untagged => Err(DockerError::Daemon {
                address: self.address.clone(),
                action: format!("building image {}", request.tag),
                reason: "the daemon did not report the built image's ID".into(),
            }),
            // Old daemons send no aux id; the tag was applied, so ask for it.
            None => match self.image(&request.tag).await? {
                Some(image) => Ok(image.id),
                None => Err(DockerError::ImageNotFound {
                    address: self.address.clone(),
                    reference: request.tag,
                }),
            },
        }
    }

    /// The local image `reference` (tag, `repo@digest` or id), or `None` if it does not exist.
    pub async fn image(&self, reference: &str) -> Result<Option<LocalImage>, DockerError> {
        match self.docker.inspect_image(reference).await {
            Ok(inspect) => Ok(Some(LocalImage {
                id: inspect.id.unwrap_or_default(),
                repo_tags: inspect.repo_tags.unwrap_or_default(),
                repo_digests: inspect.repo_digests.unwrap_or_default(),
                labels: inspect
                    .config
                    .and_then(|config| config.labels)
                    .map(to_btree)
                    .unwrap_or_default(),
                created: inspect.created,
                layers: inspect
                    .root_fs
                    .and_then(|root_fs| root_fs.layers)
                    .unwrap_or_default(),
            })),
            Err(error) if is_not_found(&error) => Ok(None),
            Err(error) => Err(self.daemon_error(format!("inspecting image {reference}"), error)),
        }
    }

    /// What an image's config says of how to run it, and its history, as the daemon keeps them:
    /// the inspect answer's `Config` object exactly as the daemon wrote it (read over the Unix
    /// socket: bollard's typed answer drops fields and turns `null` into nothing), and each
    /// history step (`created_by`, `comment`), oldest first. `None` when the daemon is not
    /// reached through a Unix socket, or the image is gone.
    pub(crate) async fn image_run_config(
        &self,
        id: &str,
    ) -> Result<Option<(serde_json::Value, Vec<(String, String)>)>, DockerError> {
        let Some(socket) = self.address.strip_prefix("unix://") else {
            return Ok(None);
        };
        let failed = |reason: String| DockerError::Daemon {
            address: self.address.clone(),
            action: format!("reading the config of image {id}"),
            reason,
        };
        let body = match tokio::time::timeout(
            self.request_timeout,
            unix_socket_get(socket, &format!("/images/{id}/json")),
        )
        .await
        {
            Ok(Ok(Some(body))) => body,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(error)) => return Err(failed(error.to_string())),
            Err(_) => return Err(failed("no answer within the daemon deadline".into())),
        };
        let mut inspect: serde_json::Value =
            serde_json::from_slice(&body).map_err(|error| failed(error.to_string()))?;
        let config = inspect
            .get_mut("Config")
            .map(serde_json::Value::take)
            .filter(serde_json::Value::is_object)
            .ok_or_else(|| failed("the inspect answer has no Config object".into()))?;
        let history = match self.docker.image_history(id).await {
            Ok(history) => history,
            Err(error) if is_not_found(&error) => return Ok(None),
            Err(error) => {
                return Err(self.daemon_error(format!("reading the history of image {id}"), error))
            }
        };
        let steps = history
            .into_iter()
            .rev()
            .map(|step| (step.created_by, step.comment))
            .collect();
        Ok(Some((config, steps)))
    }

    /// The labels of local image `reference`, or `None` if it does not exist.
    pub async fn image_labels(
        &self,
        reference: &str,
    ) -> Result<Option<BTreeMap<String, String>>, DockerError> {
        Ok(self.image(reference).await?.map(|image| image.labels))
    }

    /// The newest local image carrying label `key=value`, if any.
    pub async fn find_image_with_label(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Option<LocalImage>, DockerError> {
        self.find_image_with_labels(key, value, None).await
    }

    /// The newest local image carrying label `key=value` and, with `created_label`, whose
    /// `created` time (seconds since 1970) is that label's value: an image built `FROM` such an
    /// image inherits the label but not the time, so only the image that set it matches.
    pub(crate) async fn find_image_with_labels(
        &self,
        key: &str,
        value: &str,
        created_label: Option<&str>,
    ) -> Result<Option<LocalImage>, DockerError> {
        let filter = format!("{key}={value}");
        let mut filters: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut labels = vec![filter.as_str()];
        labels.extend(created_label);
        filters.insert("label", labels);
        let options = ListImagesOptionsBuilder::default()
            .filters(&filters)
            .build();
        let images = self
            .docker
            .list_images(Some(options))
            .await
            .map_err(|error| {
                self.daemon_error(format!("listing images labelled {filter}"), error)
            })?;
        Ok(images
            .into_iter()
            .filter(|summary| {
                created_label.is_none_or(|label| {
                    summary
                        .labels
                        .get(label)
                        .and_then(|value| value.parse::<i64>().ok())
                        == Some(summary.created)
                })
            })
            .max_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)))
            .map(|summary| LocalImage {
                id: summary.id,
                repo_tags: summary.repo_tags,
                repo_digests: summary.repo_digests,
                labels: to_btree(summary.labels),
                created: None,
                layers: Vec::new(),
            }))
    }

    /// Tags local image `source` as `repository:tag`.
    pub async fn tag(&self, source: &str, repository: &str, tag: &str) -> Result<(), DockerError> {
        let options = TagImageOptionsBuilder::default()
            .repo(repository)
            .tag(tag)
            .build();
        match self.docker.tag_image(source, Some(options)).await {
            Ok(()) => Ok(()),
            Err(error) if is_not_found(&error) => Err(DockerError::ImageNotFound {
                address: self.address.clone(),
                reference: source.to_string(),
            }),
            Err(error) => {
                Err(self.daemon_error(format!("tagging {source} as {repository}:{tag}"), error))
            }
        }
    }

    /// Removes local image `reference` (with `force`, even if containers or other tags use it).
    /// Returns whether there was anything to remove.
    pub async fn remove_image(&self, reference: &str, force: bool) -> Result<bool, DockerError> {
        let options = RemoveImageOptionsBuilder::default().force(force).build();
        match self
            .docker
            .remove_image(reference, Some(options), None)
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if is_not_found(&error) => Ok(false),
            Err(error) => Err(self.daemon_error(format!("removing image {reference}"), error)),
        }
    }

    /// Removes local image `reference` only if nothing else holds it: it has no tag, no image
    /// was built on it and no container uses it (the daemon refuses those without `force`,
    /// which is never given here). Its parents stay (`noprune`): the caller names each image it
    /// means, newest first.
    pub(crate) async fn remove_untagged_image(
        &self,
        reference: &str,
    ) -> Result<Removal, DockerError> {
        let Some(image) = self.image(reference).await? else {
            return Ok(Removal::Absent);
        };
        if image.repo_tags.iter().any(|tag| tag != "<none>:<none>") {
            return Ok(Removal::Tagged);
        }
        let options = RemoveImageOptionsBuilder::default()
            .force(false)
            .noprune(true)
            .build();
        match self
            .docker
            .remove_image(&image.id, Some(options), None)
            .await
        {
            Ok(_) => Ok(Removal::Removed),
            Err(error) if is_not_found(&error) => Ok(Removal::Absent),
            Err(BollardError::DockerResponseServerError {
                status_code: 409,
                message,
            }) => {
                // A 409 is the only answer for both; the daemon's message tells them apart
                // ("image has dependent child images" against "image is being used by running
                // container …").
                let reason = message.trim().to_string();
                Ok(if reason.contains("dependent child images") {
                    Removal::HasChildren(reason)
                } else {
                    Removal::InUse(reason)
                })
            }
            Err(error) => Err(self.daemon_error(format!("removing image {reference}"), error)),
        }
    }

    /// Pulls `reference` (for `platform`, when given) with `credentials`; progress lines go to
    /// `on_line`. A failure is [`DockerError::PullFailed`] with the daemon's reason (credentials
    /// redacted), or [`DockerError::DaemonUnreachable`].
    pub(crate) async fn pull(
        &self,
        reference: &str,
        platform: Option<&str>,
        credentials: Option<&Credentials>,
        mut on_line: impl FnMut(&str) + Send,
    ) -> Result<(), DockerError> {
        let mut options = CreateImageOptionsBuilder::default().from_image(reference);
        if let Some(platform) = platform {
            options = options.platform(platform);
        }
        let docker_credentials = credentials
            .map(|credentials| docker_credentials(credentials, &registry_host_of(reference)));
        let mut stream = self
            .docker
            .create_image(Some(options.build()), None, docker_credentials);
        let failed = |reason: String| DockerError::PullFailed {
            address: self.address.clone(),
            reference: reference.to_string(),
            reason: match credentials {
                Some(credentials) => credentials.redact(&reason),
                None => reason,
            },
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(status) = info.status {
                        // Per-layer "Downloading" progress repeats; the rest is worth a line.
                        if status != "Downloading" && status != "Extracting" {
                            on_line(&status);
                        }
                    }
                }
                Err(BollardError::DockerStreamError { error }) => return Err(failed(error)),
                Err(error) if is_connection_failure(&error) => {
                    return Err(self.daemon_error(format!("pulling {reference}"), error))
                }
                Err(BollardError::DockerResponseServerError { message, .. }) => {
                    return Err(failed(message.trim().to_string()))
                }
                Err(error) => return Err(failed(error_chain(&error))),
            }
        }
        Ok(())
    }

    /// The `docker save` archive of `reference` (Engine API image export) as the daemon sends
    /// it, for a reader on a blocking thread: nothing is written to disk and the reader works
    /// while the daemon still sends (a few chunks are buffered between them). A daemon error, or
    /// an answer that ends early, is the reader's error. Call it inside the Tokio runtime.
    pub(crate) fn export_image(&self, reference: &str) -> ExportReader {
        let (sender, chunks) = tokio::sync::mpsc::channel(EXPORT_CHUNKS_BUFFERED);
        let progress = Arc::new(ExportProgress::default());
        let docker = self.docker.clone();
        let action = format!(
            "exporting image {reference} from the Docker daemon at {}",
            self.address
        );
        let reference = reference.to_string();
        let feeding = Arc::clone(&progress);
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut stream = docker.export_image(&reference);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|error| {
                    std::io::Error::other(format!("{action}: {}", error_chain(&error)))
                });
                let failed = chunk.is_err();
                if let Ok(chunk) = &chunk {
                    feeding
                        .bytes
                        .fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                // The reader gave up (its own error): stop asking the daemon.
                if sender.send(chunk).await.is_err() || failed {
                    return;
                }
            }
            *feeding.took.lock().expect("export progress lock") = Some(started.elapsed());
        });
        ExportReader {
            chunks,
            current: bytes::Bytes::new(),
            progress,
        }
    }

    /// Loads a `docker save`-format archive (`manifest.json`, config, layer tars). Returns the
    /// references the daemon reports as loaded.
    pub async fn load_image_archive(&self, archive: Vec<u8>) -> Result<Vec<String>, DockerError> {
        self.load_image_pieces(vec![archive.into()]).await
    }

    /// [`Engine::load_image_archive`] of the archive the `pieces` make one after the other,
    /// sent as they are (a layer's gigabytes are not copied into one buffer).
    pub(crate) async fn load_image_pieces(
        &self,
        pieces: Vec<bytes::Bytes>,
    ) -> Result<Vec<String>, DockerError> {
        let options = ImportImageOptionsBuilder::default().quiet(true).build();
        let body = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::io::Error>));
        let mut stream = self.docker.import_image_stream(options, body, None);
        let mut loaded = Vec::new();
        while let Some(item) = stream.next().await {
            let info =
                item.map_err(|error| self.daemon_error("loading an image archive", error))?;
            for text in [info.stream, info.status].into_iter().flatten() {
                for line in text.lines() {
                    if let Some(reference) = line
                        .strip_prefix("Loaded image: ")
                        .or_else(|| line.strip_prefix("Loaded image ID: "))
                    {
                        loaded.push(reference.trim().to_string());
                    }
                }
            }
        }
        Ok(loaded)
    }

    /// The ids of every container (running or not) carrying label `key=value`.
    pub(crate) async fn containers_with_label(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Vec<String>, DockerError> {
        let filter = format!("{key}={value}");
        let mut filters: HashMap<&str, Vec<&str>> = HashMap::new();
        filters.insert("label", vec![filter.as_str()]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|error| {
                self.daemon_error(format!("listing containers labelled {filter}"), error)
            })?;
        Ok(containers.into_iter().filter_map(|c| c.id).collect())
    }

    /// Every container (running or not) carrying label `key`, whatever its value: (id, value).
    pub(crate) async fn containers_labelled(
        &self,
        key: &str,
    ) -> Result<Vec<(String, String)>, DockerError> {
        let mut filters: HashMap<&str, Vec<&str>> = HashMap::new();
        filters.insert("label", vec![key]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|error| {
                self.daemon_error(format!("listing containers labelled {key}"), error)
            })?;
        Ok(containers
            .into_iter()
            .filter_map(|container| {
                let value = container.labels.as_ref()?.get(key)?.clone();
                Some((container.id?, value))
            })
            .collect())
    }

    /// Removes (forcibly) every container carrying label `key=value` and waits until none is
    /// left: the cleanup of a run that was stopped while its containers ran. Returns how many
    /// there were.
    pub(crate) async fn remove_containers_with_label(
        &self,
        key: &str,
        value: &str,
    ) -> Result<usize, DockerError> {
        let mut removed = 0;
        for round in 0..50 {
            let ids = self.containers_with_label(key, value).await?;
            if ids.is_empty() {
                return Ok(removed);
            }
            if round == 0 {
                removed = ids.len();
            }
            for id in &ids {
                let options = RemoveContainerOptionsBuilder::default().force(true).build();
                match self.docker.remove_container(id, Some(options)).await {
                    Ok(()) => {}
                    // Gone already, or its removal (by a dropped run's guard) is under way.
                    Err(BollardError::DockerResponseServerError {
                        status_code: 404 | 409,
                        ..
                    }) => {}
                    Err(error) => {
                        return Err(self.daemon_error(format!("removing container {id}"), error))
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(DockerError::Daemon {
            address: self.address.clone(),
            action: format!("removing the containers labelled {key}={value}"),
            reason: "they were still there after 5 s".into(),
        })
    }

    /// Pushes local `repository:tag` and returns the manifest digest (`sha256:...`) the
    /// registry stored. Status lines go to `on_line` (per-layer progress is left out).
    /// Transient registry failures are retried with the engine's [`RetryPolicy`]; permanent
    /// ones (denied, unknown) fail at once. Credentials never appear in the error.
    pub async fn push(
        &self,
        repository: &str,
        tag: &str,
        credentials: Option<&Credentials>,
        mut on_line: impl FnMut(&str) + Send,
    ) -> Result<String, DockerError> {
        let registry = registry_host_of(repository);
        let reference = format!("{repository}:{tag}");
        let total_attempts = self.push_retry.total_attempts();
        let mut attempt = 1;
        loop {
            tokio::time::sleep(self.push_retry.delay_before(attempt)).await;
            match self
                .push_once(repository, tag, &registry, credentials, &mut on_line)
                .await
            {
                Ok(digest) => return Ok(digest),
                Err(PushAttemptFailure::Daemon(error)) => return Err(error),
                Err(PushAttemptFailure::Registry { message, transient }) => {
                    let message = match credentials {
                        Some(credentials) => credentials.redact(&message),
                        None => message,
                    };
                    if !transient || attempt >= total_attempts {
                        return Err(DockerError::PushFailed {
                            reference,
                            registry,
                            attempts: attempt,
                            transient,
                            reason: message,
                        });
                    }
                    on_line(&format!(
                        "push attempt {attempt}/{total_attempts} of {reference} failed ({message}); retrying"
                    ));
                    attempt += 1;
                }
            }
        }
    }

    async fn push_once(
        &self,
        repository: &str,
        tag: &str,
        registry: &str,
        credentials: Option<&Credentials>,
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<String, PushAttemptFailure> {
        let options = PushImageOptionsBuilder::default().tag(tag).build();
        let docker_credentials =
            credentials.map(|credentials| docker_credentials(credentials, registry));
        let mut stream = self
            .docker
            .push_image(repository, Some(options), docker_credentials);
        let mut digest: Option<String> = None;
        let idle = self.push_idle_timeout;
        loop {
            let item = match tokio::time::timeout(idle, stream.next()).await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                // Dropping the stream closes the connection, and the daemon stops the push.
                Err(_) => {
                    return Err(PushAttemptFailure::Registry {
                        message: format!(
                            "no progress for {} s (the registry deadline): the registry accepted the connection but did not answer",
                            idle.as_secs()
                        ),
                        transient: true,
                    })
                }
            };
            match item {
                Ok(info) => {
                    let Some(status) = info.status else { continue };
                    if let Some(found) = digest_in_status(&status) {
                        digest = Some(found);
                    }
                    // "Pushing" repeats per chunk with a progress bar; the rest is worth a line.
                    if status != "Pushing" {
                        on_line(&status);
                    }
                }
                Err(BollardError::DockerStreamError { error }) => {
                    let transient = is_transient_message(&error);
                    return Err(PushAttemptFailure::Registry {
                        message: error,
                        transient,
                    });
                }
                Err(error) if is_not_found(&error) => {
                    return Err(PushAttemptFailure::Daemon(DockerError::ImageNotFound {
                        address: self.address.clone(),
                        reference: format!("{repository}:{tag}"),
                    }))
                }
                Err(error) => {
                    return Err(PushAttemptFailure::Daemon(
                        self.daemon_error(format!("pushing {repository}:{tag}"), error),
                    ))
                }
            }
        }
        if let Some(digest) = digest {
            return Ok(digest);
        }
        // No digest line (unusual daemons): the daemon records it in RepoDigests after a push.
        let image = self
            .image(&format!("{repository}:{tag}"))
            .await
            .map_err(PushAttemptFailure::Daemon)?;
        let prefix = format!("{repository}@");
        image
            .and_then(|image| {
                image
                    .repo_digests
                    .into_iter()
                    .find_map(|entry| entry.strip_prefix(&prefix).map(str::to_string))
            })
            .ok_or_else(|| PushAttemptFailure::Registry {
                message: "the push finished without reporting a manifest digest".into(),
                transient: false,
            })
    }

    /// The daemon's own platform as `os/arch` (`linux/amd64`, `linux/arm64`): the images it can run
    /// without emulation.
    pub(crate) async fn platform(&self) -> Result<String, DockerError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|error| self.daemon_error("reading daemon info", error))?;
        let os = info.os_type.unwrap_or_else(|| "linux".into());
        let arch = match info.architecture.as_deref() {
            Some("x86_64") | Some("amd64") => "amd64".to_string(),
            Some("aarch64") | Some("arm64") => "arm64".to_string(),
            Some(other) => other.to_string(),
            None => "amd64".to_string(),
        };
        Ok(format!("{os}/{arch}"))
    }

    /// Whether the daemon can give containers NVIDIA GPUs: an `nvidia` runtime is registered or
    /// the daemon discovered NVIDIA CDI devices. (The NVIDIA Container Toolkit may also work
    /// through its hook without either; [`Engine::run`] with `gpus` then still succeeds.)
    pub async fn gpu_runtime_available(&self) -> Result<bool, DockerError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|error| self.daemon_error("reading daemon info", error))?;
        let nvidia_runtime = info
            .runtimes
            .map(|runtimes| runtimes.keys().any(|name| name.starts_with("nvidia")))
            .unwrap_or(false);
        let nvidia_cdi_device = info
            .discovered_devices
            .unwrap_or_default()
            .iter()
            .any(|device| {
                device
                    .id
                    .as_deref()
                    .is_some_and(|id| id.starts_with("nvidia.com/gpu"))
            });
        Ok(nvidia_runtime || nvidia_cdi_device)
    }

    /// Creates, starts and waits for a container, collects its output and always removes it,
    /// also when this future is dropped midway (the removal is then spawned on the runtime).
    /// A non-zero exit is a normal [`RunOutput`], not an error.
    pub async fn run(&self, request: RunRequest) -> Result<RunOutput, DockerError> {
        self.run_with_files(request, None, None)
            .await
            .map(|(output, _)| output)
    }

    /// [`Engine::run`] with the tar `upload` (a stream of its bytes) extracted at `/` of the
    /// container before it starts, and the file `download` read from it after it stopped with
    /// exit 0 (its bytes; an empty `Vec` when none is asked or the command failed: its exit code
    /// and output say why, not a missing file).
    pub(crate) async fn run_with_files(
        &self,
        request: RunRequest,
        upload: Option<std::pin::Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>>,
        download: Option<&str>,
    ) -> Result<(RunOutput, Vec<u8>), DockerError> {
        let container_error = |action: &str, error: BollardError| {
            if is_connection_failure(&error) {
                return self.daemon_error(action, error);
            }
            let reason = match &error {
                BollardError::DockerResponseServerError {
                    status_code,
                    message,
                } => format!("{} (HTTP {status_code})", message.trim()),
                other => error_chain(other),
            };
            if request.gpus
                && (reason.contains("could not select device driver")
                    || reason.contains("nvidia-container-cli"))
            {
                return DockerError::GpuUnavailable {
                    image: request.image.clone(),
                    reason,
                };
            }
            DockerError::Container {
                image: request.image.clone(),
                action: action.to_string(),
                reason,
            }
        };

        let host_config = HostConfig {
            device_requests: request.gpus.then(|| {
                vec![DeviceRequest {
                    driver: Some("nvidia".into()),
                    count: Some(-1),
                    capabilities: Some(vec![vec!["gpu".into()]]),
                    ..Default::default()
                }]
            }),
            shm_size: request.shm_size_bytes,
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(request.image.clone()),
            user: request.user.clone(),
            cmd: (!request.cmd.is_empty()).then(|| request.cmd.clone()),
            // The API clears the entrypoint on `[""]`; an empty list would mean "keep it".
            entrypoint: request.entrypoint.as_ref().map(|entrypoint| {
                if entrypoint.is_empty() {
                    vec![String::new()]
                } else {
                    entrypoint.clone()
                }
            }),
            env: (!request.env.is_empty()).then(|| {
                request
                    .env
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect()
            }),
            labels: (!request.labels.is_empty())
                .then(|| request.labels.clone().into_iter().collect()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            host_config: Some(host_config),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .map_err(|error| {
                if is_not_found(&error) {
                    DockerError::ImageNotFound {
                        address: self.address.clone(),
                        reference: request.image.clone(),
                    }
                } else {
                    container_error("creating the container", error)
                }
            })?;
        let container_id = created.id;
        let mut guard = ContainerGuard {
            docker: self.docker.clone(),
            container_id: Some(container_id.clone()),
        };

        let outcome = async {
            if let Some(upload) = upload {
                self.docker
                    .upload_to_container(
                        &container_id,
                        Some(
                            bollard::query_parameters::UploadToContainerOptionsBuilder::default()
                                .path("/")
                                .build(),
                        ),
                        bollard::body_stream(upload),
                    )
                    .await
                    .map_err(|error| container_error("placing files in the container", error))?;
            }
            let output = self
                .run_created(&container_id, &request, &container_error)
                .await?;
            let mut downloaded = Vec::new();
            // A command that failed wrote nothing to fetch: its exit code and output are the
            // caller's to report, not a missing file.
            if let Some(path) = download.filter(|_| output.exit_code == 0) {
                let mut archive = Vec::new();
                let mut stream = self.docker.download_from_container(
                    &container_id,
                    Some(
                        bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
                            .path(path)
                            .build(),
                    ),
                );
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|error| {
                        container_error(&format!("reading {path} from the container"), error)
                    })?;
                    archive.extend_from_slice(&chunk);
                }
                downloaded = single_file_of(&archive).map_err(|reason| DockerError::Container {
                    image: request.image.clone(),
                    action: format!("reading {path} from the container"),
                    reason,
                })?;
            }
            Ok((output, downloaded))
        }
        .await;
        guard.disarm();

        let removal = self
            .docker
            .remove_container(
                &container_id,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await;
        match (outcome, removal) {
            (Ok(output), Ok(())) => Ok(output),
            (Ok(_), Err(error)) if !is_not_found(&error) => Err(container_error(
                &format!("removing container {container_id}"),
                error,
            )),
            (Ok(output), Err(_)) => Ok(output),
            (Err(error), _) => Err(error),
        }
    }

    async fn run_created(
        &self,
        container_id: &str,
        request: &RunRequest,
        container_error: &(dyn Fn(&str, BollardError) -> DockerError + Sync),
    ) -> Result<RunOutput, DockerError> {
        self.docker
            .start_container(
                container_id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|error| container_error("starting the container", error))?;

        let wait = async {
            let mut stream = self.docker.wait_container(
                container_id,
                Some(
                    WaitContainerOptionsBuilder::default()
                        .condition("not-running")
                        .build(),
                ),
            );
            match stream.next().await {
                Some(Ok(response)) => Ok(response.status_code),
                // A non-zero exit arrives as this error; it is still an exit code.
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
                Some(Err(error)) => Err(container_error("waiting for the container", error)),
                None => Err(DockerError::Container {
                    image: request.image.clone(),
                    action: "waiting for the container".into(),
                    reason: "the daemon closed the wait stream without an exit status".into(),
                }),
            }
        };
        let exit_code = match request.timeout {
            Some(limit) => match tokio::time::timeout(limit, wait).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(DockerError::ContainerTimeout {
                        image: request.image.clone(),
                        timeout_seconds: limit.as_secs(),
                    })
                }
            },
            None => wait.await?,
        };

        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut logs = self.docker.logs(
            container_id,
            Some(
                LogsOptionsBuilder::default()
                    .stdout(true)
                    .stderr(true)
                    .build(),
            ),
        );
        while let Some(frame) = logs.next().await {
            match frame.map_err(|error| container_error("reading the container's output", error))? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    stdout.extend_from_slice(&message)
                }
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
        Ok(RunOutput {
            exit_code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }
}

/// The content of the one file of `archive` (the tar the archive API answers for a file's path).
fn single_file_of(archive: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut reader = tar::Archive::new(archive);
    let entries = reader.entries().map_err(|error| error.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|error| error.to_string())?;
        if entry.header().entry_type().is_file() {
            let mut data = Vec::with_capacity(entry.size() as usize);
            entry
                .read_to_end(&mut data)
                .map_err(|error| error.to_string())?;
            return Ok(data);
        }
    }
    Err("the daemon's archive holds no file".into())
}

/// The body of `GET path` from the daemon on the Unix socket `socket` (HTTP/1.0: one answer, no
/// chunks, the connection closed after it); `None` on 404.
async fn unix_socket_get(socket: &str, path: &str) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let split = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or_else(|| invalid("an answer without the end of its headers"))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .ok_or_else(|| invalid("an answer without a status line"))?;
    match status {
        "200" => Ok(Some(answer[split + 4..].to_vec())),
        "404" => Ok(None),
        other => Err(invalid(&format!(
            "status {other}: {}",
            String::from_utf8_lossy(&answer[split + 4..]).trim()
        ))),
    }
}

#[cfg(test)]
mod tests {

    /// An export reader over chunks already sent; `ended` says whether the daemon finished.
    fn reader_over(chunks: Vec<std::io::Result<&'static [u8]>>, ended: bool) -> ExportReader {
        let (sender, receiver) = tokio::sync::mpsc::channel(chunks.len().max(1));
        for chunk in chunks {
            sender
                .try_send(chunk.map(bytes::Bytes::from_static))
                .unwrap();
        }
        let progress = Arc::new(ExportProgress::default());
        if ended {
            *progress.took.lock().unwrap() = Some(Duration::from_secs(1));
        }
        ExportReader {
            chunks: receiver,
            current: bytes::Bytes::new(),
            progress,
        }
    }

    #[test]
    fn an_export_reader_gives_the_chunks_in_order_and_ends_only_where_the_daemon_did() {
        use std::io::Read;
        let mut whole = String::new();
        reader_over(vec![Ok(b"manifest"), Ok(b""), Ok(b".json")], true)
            .read_to_string(&mut whole)
            .unwrap();
        assert_eq!(whole, "manifest.json");

        let mut cut = Vec::new();
        let error = reader_over(vec![Ok(b"half of it")], false)
            .read_to_end(&mut cut)
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(cut, b"half of it");

        let error = reader_over(
            vec![Ok(b"a"), Err(std::io::Error::other("the daemon said no"))],
            false,
        )
        .read_to_end(&mut Vec::new())
        .unwrap_err();
        assert!(error.to_string().contains("the daemon said no"), "{error}");
    }
    use super::*;

    #[test]
    fn digest_is_read_from_the_final_push_status() {
        let digest = "sha256:".to_string() + &"ab12".repeat(16);
        assert_eq!(
            digest_in_status(&format!("t1: digest: {digest} size: 528")),
            Some(digest)
        );
        assert_eq!(digest_in_status("Pushed"), None);
        assert_eq!(digest_in_status("t1: digest: sha256:short size: 1"), None);
    }

    #[test]
    fn step_progress_is_parsed() {
        assert_eq!(build_step_progress("Step 3/8 : RUN echo hi"), Some((3, 8)));
        assert_eq!(build_step_progress(" ---> Running in abc"), None);
        assert_eq!(build_step_progress("Step x/8 : RUN"), None);
    }

    #[test]
    fn terminal_escapes_are_removed() {
        assert_eq!(
            strip_terminal_escapes("\u{1b}[91mabout-to-fail\u{1b}[0m"),
            "about-to-fail"
        );
        assert_eq!(strip_terminal_escapes("plain [text]"), "plain [text]");
    }

    #[test]
    fn lines_are_split_across_chunks() {
        let mut splitter = LineSplitter::default();
        let mut lines = Vec::new();
        splitter.push("Step 1/2 : FR", |line| lines.push(line.to_string()));
        splitter.push("OM base\n ---> abc\r\npartial", |line| {
            lines.push(line.to_string())
        });
        splitter.finish(|line| lines.push(line.to_string()));
        assert_eq!(lines, vec!["Step 1/2 : FROM base", " ---> abc", "partial"]);
    }
}
