//! `RegistryClient`: a small OCI distribution (registry v2) client over HTTP(S), for what the
//! Docker daemon cannot answer: whether a tag exists remotely and under which digest, which labels
//! its image config carries, and reading or writing raw manifests (re-pointing a tag, OCI image
//! indexes). Plain HTTP for loopback hosts (`127.0.0.1`, `localhost`, `[::1]`), HTTPS otherwise.
//! Authentication: anonymous, `Basic`, and the `Bearer` token flow announced by
//! `WWW-Authenticate` (user/password or identity token). Every request has a deadline
//! ([`RegistryClient::with_timeout`], 60 s by default): a registry that accepts the connection and
//! never answers fails with [`RegistryError::Timeout`], naming it and the deadline.
//! Transient failures (connection refused or reset, timeouts, 5xx, 429) are retried with the
//! client's [`RetryPolicy`].
//!
//! The client is synchronous inside (ureq) and async outside: every call runs on tokio's blocking
//! pool. It knows nothing about which tags imagegen uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use url::{Host, Url};

use crate::digest::Digest;

use crate::credentials::Credentials;
use crate::error::RegistryError;
use crate::retry::RetryPolicy;

pub(crate) const MEDIA_TYPE_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_TYPE_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_TYPE_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Every manifest kind this client understands, for `Accept`.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// Where Docker Hub (`docker.io`) answers the distribution API.
const DOCKER_HUB_API_HOST: &str = "registry-1.docker.io";

/// The default deadline of one registry request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Manifests and configs are small; anything above this is not what we asked for.
pub(super) const MAX_BODY_BYTES: u64 = 64 << 20;

/// A manifest as stored in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryManifest {
    pub media_type: String,
    pub bytes: Vec<u8>,
    /// The digest of `bytes` (checked against what the registry reports).
    pub digest: Digest,
}

/// A client for one registry host. Cheap to clone; clones share the token cache.
#[derive(Clone)]
pub struct RegistryClient {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) host: String,
    pub(super) base_url: String,
    pub(super) credentials: Option<Credentials>,
    pub(super) agent: ureq::Agent,
    pub(super) retry: RetryPolicy,
    /// Bearer tokens by scope.
    pub(super) tokens: Mutex<HashMap<String, String>>,
    /// Set once the registry asked for Basic auth, so later calls send it up front.
    pub(super) basic_auth: Mutex<bool>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RegistryClient")
            .field("base_url", &self.inner.base_url)
            .field("credentials", &self.inner.credentials)
            .field("retry", &self.inner.retry)
            .finish()
    }
}

/// One request, described without the transport.
pub(super) struct Call<'a> {
    pub(super) method: &'static str,
    pub(super) path: String,
    pub(super) accept: Option<&'a str>,
    pub(super) content_type: Option<&'a str>,
    pub(super) body: Option<&'a [u8]>,
    /// Token scope, e.g. `repository:team/app:pull`.
    pub(super) scope: String,
    /// For messages: "reading manifest team/app:1".
    pub(super) action: String,
}

impl<'a> Call<'a> {
    /// A read (`HEAD` or `GET`) of `repository`'s manifest `reference`, with the pull scope.
    fn read_manifest(
        method: &'static str,
        repository: &str,
        reference: &str,
        action: &str,
    ) -> Self {
        Call {
            method,
            path: format!("/v2/{repository}/manifests/{reference}"),
            accept: Some(MANIFEST_ACCEPT),
            content_type: None,
            body: None,
            scope: format!("repository:{repository}:pull"),
            action: action.to_string(),
        }
    }

    /// A `PUT` of `body`, a manifest of `media_type`, under `repository`'s `reference` (a tag or
    /// its digest), with the push scope.
    fn put_manifest(
        repository: &str,
        reference: &dyn std::fmt::Display,
        media_type: &'a str,
        body: &'a [u8],
        action: &str,
    ) -> Self {
        Call {
            method: "PUT",
            path: format!("/v2/{repository}/manifests/{reference}"),
            accept: None,
            content_type: Some(media_type),
            body: Some(body),
            scope: format!("repository:{repository}:pull,push"),
            action: action.to_string(),
        }
    }
}

/// The parts of an answer this client uses.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) digest_header: Option<String>,
    /// `OCI-Subject` of a manifest PUT: the registry indexed the manifest's `subject` (it
    /// serves the OCI 1.1 referrers API).
    pub(super) oci_subject: Option<String>,
    pub(super) content_type: Option<String>,
    pub(super) www_authenticate: Option<String>,
    /// `Retry-After` of a 429 or 503: seconds or an HTTP-date.
    pub(super) retry_after: Option<String>,
    /// `Location` of a 201/202: where an upload continues or a blob now lives.
    pub(super) location: Option<String>,
    pub(super) body: Vec<u8>,
}

/// A transport-level failure (no HTTP answer).
pub(super) struct TransportFailure {
    pub(super) url: String,
    pub(super) reason: String,
    pub(super) transient: bool,
    /// The TLS handshake failed (untrusted or invalid certificate).
    pub(super) tls: bool,
    /// No answer within the client's deadline.
    pub(super) timeout: bool,
}

/// The `Docker-Content-Digest` of an answer, when it is a digest.
fn reported_digest(answer: &Answer) -> Option<Digest> {
    answer
        .digest_header
        .as_deref()
        .and_then(|text| Digest::parse(text).ok())
}

/// The request path that closes an upload at `location` (an absolute URL or a path, resolved
/// against `base_url` as a browser would) with `digest`; `None` when the location is on another
/// origin (scheme, host and port), where this client's credentials must not go.
fn upload_path(base_url: &str, location: &str, digest: &Digest) -> Option<String> {
    let base = Url::parse(base_url).ok()?;
    let target = base.join(location).ok()?;
    if target.origin() != base.origin() {
        return None;
    }
    // A digest is `sha256:` and hex digits: nothing in it needs escaping in a query.
    let query = match target.query() {
        Some(query) => format!("{query}&digest={digest}"),
        None => format!("digest={digest}"),
    };
    Some(format!("{}?{query}", target.path()))
}

/// Whether `url`'s host is this machine: `localhost`, `127.0.0.0/8` or `::1`.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(name)) => name == "localhost",
        Some(Host::Ipv4(address)) => address.is_loopback(),
        Some(Host::Ipv6(address)) => address.is_loopback(),
        None => false,
    }
}

/// `host[:port]` of `url`, IPv6 addresses in brackets, the scheme's default port left out.
fn host_and_port(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// imagegen's HTTP(S) client: the platform's trust store, like dockerd (a registry or a package
/// index behind a private CA works when the CA is installed system-wide), `timeout` for the
/// whole of each call, and statuses as answers rather than errors.
pub fn https_agent(timeout: Duration) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    let config = ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .user_agent(concat!("imagegen/", env!("CARGO_PKG_VERSION")))
        .build();
    ureq::Agent::new_with_config(config)
}

/// How long a `Retry-After` value asks to wait from `now`: delay-seconds (`120`) or an HTTP-date
/// (`Wed, 21 Oct 2026 07:28:00 GMT`, RFC 9110's IMF-fixdate); a date already past is no wait.
/// `None` for anything else.
pub(super) fn retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = http_date(value)?;
    let now = now.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// An HTTP-date (RFC 9110: the IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete
/// RFC 850 and asctime forms a recipient must accept) as seconds since the Unix epoch.
fn http_date(text: &str) -> Option<u64> {
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

pub(super) fn transport_failure(url: &str, error: ureq::Error) -> TransportFailure {
    use std::io::ErrorKind;
    let reason = crate::error_chain(&error);
    let lower = reason.to_ascii_lowercase();
    let timeout = matches!(error, ureq::Error::Timeout(_))
        || matches!(&error, ureq::Error::Io(io_error) if io_error.kind() == ErrorKind::TimedOut);
    let tls = matches!(error, ureq::Error::Tls(_) | ureq::Error::Rustls(_))
        || lower.contains("certificate")
        || lower.contains("tls");
    // Only network trouble is worth another attempt; a certificate will not fix itself.
    let transient = !tls
        && match &error {
            ureq::Error::Timeout(_) | ureq::Error::ConnectionFailed => true,
            ureq::Error::Io(io_error) => matches!(
                io_error.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::BrokenPipe
                    | ErrorKind::TimedOut
                    | ErrorKind::UnexpectedEof
                    | ErrorKind::Interrupted
            ),
            _ => false,
        };
    TransportFailure {
        url: url.to_string(),
        reason,
        transient,
        tls,
        timeout,
    }
}

impl RegistryClient {
    /// A client for `host` (`registry.example.com`, `127.0.0.1:5000`). A leading `http://` or
    /// `https://` forces the scheme; otherwise loopback hosts use HTTP and others HTTPS.
    pub fn new(host: &str, credentials: Option<Credentials>) -> Self {
        // A URL names its scheme; a bare host (`localhost:5000` reads as a URL of the scheme
        // `localhost`, so only http and https count) is read as the host of an https URL.
        let (url, scheme_named) = match Url::parse(host) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => (Some(url), true),
            _ => (Url::parse(&format!("https://{host}")).ok(), false),
        };
        let (scheme, bare_host) = match url
            .as_ref()
            .and_then(|url| Some((url, host_and_port(url)?)))
        {
            Some((url, bare_host)) => {
                let scheme = if scheme_named {
                    url.scheme()
                } else if is_loopback(url) {
                    "http"
                } else {
                    "https"
                };
                (scheme, bare_host)
            }
            // Not a host: kept as written, so the first request fails naming it.
            None => ("https", host.to_string()),
        };
        let bare_host = bare_host.as_str();
        // Docker Hub's names are not its API endpoint.
        let api_host = match bare_host {
            "docker.io" | "index.docker.io" => DOCKER_HUB_API_HOST,
            other => other,
        };
        Self::build(
            bare_host,
            format!("{scheme}://{api_host}"),
            credentials,
            RetryPolicy::default(),
            DEFAULT_TIMEOUT,
        )
    }

    fn build(
        host: &str,
        base_url: String,
        credentials: Option<Credentials>,
        retry: RetryPolicy,
        timeout: Duration,
    ) -> Self {
        RegistryClient {
            inner: Arc::new(Inner {
                host: host.to_string(),
                base_url,
                credentials,
                agent: https_agent(timeout),
                retry,
                tokens: Mutex::new(HashMap::new()),
                basic_auth: Mutex::new(false),
            }),
        }
    }

    /// The same client with another retry policy (tests use short delays).
    pub fn with_retry(self, retry: RetryPolicy) -> Self {
        let timeout = self.timeout();
        Self::build(
            &self.inner.host,
            self.inner.base_url.clone(),
            self.inner.credentials.clone(),
            retry,
            timeout,
        )
    }

    /// The same client with another deadline per request (at least one second): a registry
    /// that accepts the connection and does not answer within it fails the attempt.
    pub(crate) fn with_timeout(self, timeout: Duration) -> Self {
        Self::build(
            &self.inner.host,
            self.inner.base_url.clone(),
            self.inner.credentials.clone(),
            self.inner.retry,
            timeout.max(Duration::from_secs(1)),
        )
    }

    /// The deadline of each request.
    pub(crate) fn timeout(&self) -> Duration {
        self.inner
            .agent
            .config()
            .timeouts()
            .global
            .unwrap_or(DEFAULT_TIMEOUT)
    }

    /// The host this client talks to.
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// Docker Hub keeps official images under `library/`; other registries take names as is.
    fn api_repository(&self, repository: &str) -> String {
        let is_docker_hub = self.inner.base_url.ends_with(DOCKER_HUB_API_HOST);
        if is_docker_hub && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository.to_string()
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&RegistryClient) -> Result<T, RegistryError> + Send + 'static,
    ) -> Result<T, RegistryError> {
        let client = self.clone();
        match tokio::task::spawn_blocking(move || work(&client)).await {
            Ok(result) => result,
            Err(join_error) if join_error.is_panic() => {
                std::panic::resume_unwind(join_error.into_panic())
            }
            Err(join_error) => Err(RegistryError::Protocol {
                host: self.inner.host.clone(),
                action: "a registry request".into(),
                reason: format!("the request task was cancelled: {join_error}"),
            }),
        }
    }

    /// Answers `GET /v2/` (authenticating if asked): the registry is up and accepts us.
    pub async fn ping(&self) -> Result<(), RegistryError> {
        self.blocking(|client| {
            let answer = client.send(Call {
                method: "GET",
                path: "/v2/".into(),
                accept: None,
                content_type: None,
                body: None,
                scope: String::new(),
                action: "the API version check (GET /v2/)".into(),
            })?;
            client.expect_success(&answer, "the API version check (GET /v2/)")
        })
        .await
    }

    /// The digest of manifest `repository:reference` (tag or digest), or `None` if the
    /// registry has no such manifest.
    pub async fn manifest_digest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<Digest>, RegistryError> {
        let repository = self.api_repository(repository);
        let reference = reference.to_string();
        self.blocking(move |client| {
            let action = format!("checking manifest {repository}:{reference}");
            let answer = client.send(Call::read_manifest(
                "HEAD",
                &repository,
                &reference,
                &action,
            ))?;
            if answer.status == 404 {
                return Ok(None);
            }
            client.expect_success(&answer, &action)?;
            match reported_digest(&answer) {
                Some(digest) => Ok(Some(digest)),
                // Some registries omit the header on HEAD; the body's hash is the digest.
                None => Ok(client
                    .fetch_manifest(&repository, &reference)?
                    .map(|manifest| manifest.digest)),
            }
        })
        .await
    }

    /// The manifest `repository:reference` as stored, or `None` if absent.
    pub async fn get_manifest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<RegistryManifest>, RegistryError> {
        let repository = self.api_repository(repository);
        let reference = reference.to_string();
        self.blocking(move |client| client.fetch_manifest(&repository, &reference))
            .await
    }

    /// Stores `bytes` as manifest `repository:reference` with `media_type`; returns its digest.
    /// Used to point a tag at an existing manifest or to publish an OCI index.
    pub async fn put_manifest(
        &self,
        repository: &str,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<Digest, RegistryError> {
        let repository = self.api_repository(repository);
        let reference = reference.to_string();
        let media_type = media_type.to_string();
        self.blocking(move |client| {
            let action = format!("storing manifest {repository}:{reference}");
            let answer = client.send(Call::put_manifest(
                &repository,
                &reference,
                &media_type,
                &bytes,
                &action,
            ))?;
            client.expect_success(&answer, &action)?;
            Ok(reported_digest(&answer).unwrap_or_else(|| Digest::of(&bytes)))
        })
        .await
    }

    /// Stores an OCI 1.1 referrer (a manifest with a `subject`) by its digest; returns its digest
    /// and whether the registry answered `OCI-Subject` (it serves the referrers API, so no
    /// fallback tag is needed).
    pub async fn put_referrer(
        &self,
        repository: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<(Digest, bool), RegistryError> {
        let repository = self.api_repository(repository);
        let media_type = media_type.to_string();
        let reference = Digest::of(&bytes);
        self.blocking(move |client| {
            let action = format!("storing referrer {repository}@{reference}");
            let answer = client.send(Call::put_manifest(
                &repository,
                &reference,
                &media_type,
                &bytes,
                &action,
            ))?;
            client.expect_success(&answer, &action)?;
            let indexed = answer.oci_subject.is_some();
            Ok((reported_digest(&answer).unwrap_or(reference), indexed))
        })
        .await
    }

    /// The `config.Labels` of image `repository:reference`, or `None` if the manifest is absent.
    /// For an index or manifest list, the `linux/amd64` entry (else the first) is read.
    pub async fn image_labels(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<BTreeMap<String, String>>, RegistryError> {
        let repository = self.api_repository(repository);
        let reference = reference.to_string();
        self.blocking(move |client| client.fetch_labels(&repository, &reference))
            .await
    }

    /// Whether the registry holds blob `digest` in `repository` (a `HEAD`).
    pub async fn has_blob(&self, repository: &str, digest: &Digest) -> Result<bool, RegistryError> {
        let repository = self.api_repository(repository);
        let digest = digest.clone();
        self.blocking(move |client| {
            let action = format!("looking for blob {digest} in {repository}");
            let scope = format!("repository:{repository}:pull");
            let answer = client.head_blob(&repository, &digest, scope, &action)?;
            if answer.status == 404 {
                return Ok(false);
            }
            client.expect_success(&answer, &action)?;
            Ok(true)
        })
        .await
    }

    /// Stores `bytes` as a blob of `repository` unless the registry has it already (a `HEAD`
    /// first); returns its digest. A monolithic upload: `POST` opens the upload session, `PUT`
    /// to its `Location` with `?digest=` closes it with the bytes.
    pub async fn put_blob(
        &self,
        repository: &str,
        bytes: impl Into<bytes::Bytes>,
    ) -> Result<Digest, RegistryError> {
        let repository = self.api_repository(repository);
        let bytes: bytes::Bytes = bytes.into();
        self.blocking(move |client| {
            let digest = Digest::of(&bytes);
            let action = format!("uploading blob {digest} to {repository}");
            let scope = format!("repository:{repository}:pull,push");
            let exists = client.head_blob(&repository, &digest, scope.clone(), &action)?;
            if exists.status == 200 {
                return Ok(digest);
            }
            let opened = client.send(Call {
                method: "POST",
                path: format!("/v2/{repository}/blobs/uploads/"),
                accept: None,
                content_type: None,
                body: Some(&[]),
                scope: scope.clone(),
                action: action.clone(),
            })?;
            client.expect_success(&opened, &action)?;
            let location = opened.location.ok_or_else(|| {
                client.protocol_error(&action, "the upload answer has no Location".into())
            })?;
            let path =
                upload_path(&client.inner.base_url, &location, &digest).ok_or_else(|| {
                    client.protocol_error(
                        &action,
                        format!("the upload Location {location:?} is on another host"),
                    )
                })?;
            let closed = client.send(Call {
                method: "PUT",
                path,
                accept: None,
                content_type: Some("application/octet-stream"),
                body: Some(&bytes),
                scope,
                action: action.clone(),
            })?;
            client.expect_success(&closed, &action)?;
            Ok(digest)
        })
        .await
    }

    /// The bytes of blob `digest` of `repository`, checked against the digest; `None` if absent.
    pub async fn get_blob(
        &self,
        repository: &str,
        digest: &Digest,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let repository = self.api_repository(repository);
        let digest = digest.clone();
        self.blocking(move |client| {
            let action = format!("reading blob {digest} of {repository}");
            let answer = client.send(Call {
                method: "GET",
                path: format!("/v2/{repository}/blobs/{digest}"),
                accept: None,
                content_type: None,
                body: None,
                scope: format!("repository:{repository}:pull"),
                action: action.clone(),
            })?;
            if answer.status == 404 {
                return Ok(None);
            }
            client.expect_success(&answer, &action)?;
            if Digest::of(&answer.body) != digest {
                return Err(
                    client.protocol_error(&action, format!("the blob does not hash to {digest}"))
                );
            }
            Ok(Some(answer.body))
        })
        .await
    }

    /// The registry's answer to a `HEAD` of blob `digest` in `repository`.
    fn head_blob(
        &self,
        repository: &str,
        digest: &Digest,
        scope: String,
        action: &str,
    ) -> Result<Answer, RegistryError> {
        self.send(Call {
            method: "HEAD",
            path: format!("/v2/{repository}/blobs/{digest}"),
            accept: None,
            content_type: None,
            body: None,
            scope,
            action: action.to_string(),
        })
    }

    fn fetch_manifest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<RegistryManifest>, RegistryError> {
        let action = format!("reading manifest {repository}:{reference}");
        let answer = self.send(Call::read_manifest("GET", repository, reference, &action))?;
        if answer.status == 404 {
            return Ok(None);
        }
        self.expect_success(&answer, &action)?;
        let computed = Digest::of(&answer.body);
        if let Some(reported) = reported_digest(&answer) {
            if reported != computed {
                return Err(self.protocol_error(
                    &action,
                    format!("the manifest hashes to {computed}, but the registry says {reported}"),
                ));
            }
        }
        let media_type = match answer.content_type.clone() {
            Some(content_type) if content_type != "application/json" => content_type,
            _ => serde_json::from_slice::<serde_json::Value>(&answer.body)
                .ok()
                .and_then(|value| value["mediaType"].as_str().map(str::to_string))
                .unwrap_or_else(|| MEDIA_TYPE_OCI_MANIFEST.to_string()),
        };
        Ok(Some(RegistryManifest {
            media_type,
            bytes: answer.body,
            digest: computed,
        }))
    }

    fn fetch_labels(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<BTreeMap<String, String>>, RegistryError> {
        let Some(mut manifest) = self.fetch_manifest(repository, reference)? else {
            return Ok(None);
        };
        let action = format!("reading the image config of {repository}:{reference}");
        let parse = |manifest: &RegistryManifest| {
            serde_json::from_slice::<serde_json::Value>(&manifest.bytes).map_err(|error| {
                self.protocol_error(&action, format!("manifest is not JSON: {error}"))
            })
        };
        let mut document = parse(&manifest)?;
        if let Some(entries) = document["manifests"].as_array() {
            let chosen = entries
                .iter()
                .find(|entry| {
                    entry["platform"]["os"] == "linux"
                        && entry["platform"]["architecture"] == "amd64"
                })
                .or_else(|| entries.first())
                .and_then(|entry| entry["digest"].as_str())
                .ok_or_else(|| self.protocol_error(&action, "the index lists no manifests".into()))?
                .to_string();
            manifest = self.fetch_manifest(repository, &chosen)?.ok_or_else(|| {
                self.protocol_error(
                    &action,
                    format!("the index points at missing manifest {chosen}"),
                )
            })?;
            document = parse(&manifest)?;
        }
        let config_digest = document["config"]["digest"]
            .as_str()
            .ok_or_else(|| self.protocol_error(&action, "the manifest has no config digest".into()))
            .and_then(|text| {
                Digest::parse(text)
                    .map_err(|error| self.protocol_error(&action, format!("the config: {error}")))
            })?;
        let answer = self.send(Call {
            method: "GET",
            path: format!("/v2/{repository}/blobs/{config_digest}"),
            accept: None,
            content_type: None,
            body: None,
            scope: format!("repository:{repository}:pull"),
            action: action.clone(),
        })?;
        self.expect_success(&answer, &action)?;
        if Digest::of(&answer.body) != config_digest {
            return Err(self.protocol_error(
                &action,
                format!("the config blob does not hash to {config_digest}"),
            ));
        }
        let config: serde_json::Value = serde_json::from_slice(&answer.body).map_err(|error| {
            self.protocol_error(&action, format!("config is not JSON: {error}"))
        })?;
        let labels = config["config"]["Labels"]
            .as_object()
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(key, value)| value.as_str().map(|v| (key.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(labels))
    }

    pub(super) fn protocol_error(&self, action: &str, reason: String) -> RegistryError {
        RegistryError::Protocol {
            host: self.inner.host.clone(),
            action: action.to_string(),
            reason,
        }
    }

    pub(super) fn redact(&self, text: &str) -> String {
        match &self.inner.credentials {
            Some(credentials) => credentials.redact(text),
            None => text.to_string(),
        }
    }

    /// Maps a non-success answer to an error naming the host and action.
    fn expect_success(&self, answer: &Answer, action: &str) -> Result<(), RegistryError> {
        if (200..300).contains(&answer.status) {
            return Ok(());
        }
        let detail: String = self
            .redact(String::from_utf8_lossy(&answer.body).trim())
            .chars()
            .take(400)
            .collect();
        let detail = if detail.is_empty() {
            match answer.status {
                401 => "authentication required".to_string(),
                403 => "access denied".to_string(),
                _ => "no error details in the answer".to_string(),
            }
        } else {
            detail
        };
        if answer.status == 401 || answer.status == 403 {
            let detail = if self.inner.credentials.is_none() {
                format!("{detail} (no credentials were configured for this registry)")
            } else {
                detail
            };
            return Err(RegistryError::Auth {
                host: self.inner.host.clone(),
                action: action.to_string(),
                status: answer.status,
                detail,
            });
        }
        Err(RegistryError::Status {
            host: self.inner.host.clone(),
            action: action.to_string(),
            status: answer.status,
            detail,
        })
    }

    /// Sends `call`, authenticating on a 401 challenge, and retrying transient failures: after
    /// the policy's backoff, or as long as a 429 or 503 answer's `Retry-After` asks when it asks
    /// for no longer than the request deadline (one that asks for longer fails at once, saying
    /// so).
    fn send(&self, call: Call<'_>) -> Result<Answer, RegistryError> {
        let total_attempts = self.inner.retry.total_attempts();
        let mut attempt = 1;
        let mut wait = Duration::ZERO;
        loop {
            std::thread::sleep(wait);
            let outcome = self.send_authenticated(&call);
            let retryable = match &outcome {
                Ok(Ok(answer)) => answer.status >= 500 || answer.status == 429,
                Ok(Err(failure)) => failure.transient,
                Err(_) => false,
            };
            let asked = match &outcome {
                Ok(Ok(answer)) if retryable => answer
                    .retry_after
                    .as_deref()
                    .and_then(|value| retry_after(value, std::time::SystemTime::now())),
                _ => None,
            };
            if let (Some(asked), Ok(Ok(answer))) = (asked, &outcome) {
                if attempt < total_attempts && asked > self.timeout() {
                    return Err(RegistryError::Status {
                        host: self.inner.host.clone(),
                        action: call.action.clone(),
                        status: answer.status,
                        detail: format!(
                            "it asks to retry after {} s (Retry-After), past the {} s deadline of a request (--registry-timeout)",
                            asked.as_secs(),
                            self.timeout().as_secs()
                        ),
                    });
                }
            }
            if !retryable || attempt >= total_attempts {
                return match outcome {
                    Ok(Ok(answer)) => Ok(answer),
                    Ok(Err(failure)) if failure.tls => Err(RegistryError::Tls {
                        host: self.inner.host.clone(),
                        url: failure.url,
                        reason: self.redact(&failure.reason),
                    }),
                    Ok(Err(failure)) if failure.timeout => Err(RegistryError::Timeout {
                        host: self.inner.host.clone(),
                        url: failure.url,
                        attempts: attempt,
                        seconds: self.timeout().as_secs(),
                    }),
                    Ok(Err(failure)) => Err(RegistryError::Unreachable {
                        host: self.inner.host.clone(),
                        url: failure.url,
                        attempts: attempt,
                        reason: self.redact(&failure.reason),
                    }),
                    Err(error) => Err(error),
                };
            }
            attempt += 1;
            wait = asked.unwrap_or_else(|| self.inner.retry.delay_before(attempt));
        }
    }

    /// One HTTP exchange.
    pub(super) fn transmit(
        &self,
        call: &Call<'_>,
        authorization: Option<&str>,
    ) -> Result<Answer, TransportFailure> {
        let url = format!("{}{}", self.inner.base_url, call.path);
        let agent = &self.inner.agent;
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(accept) = call.accept {
            headers.push(("Accept", accept));
        }
        if let Some(content_type) = call.content_type {
            headers.push(("Content-Type", content_type));
        }
        if let Some(authorization) = authorization {
            headers.push(("Authorization", authorization));
        }
        let result = match call.method {
            "HEAD" | "GET" => {
                let mut request = if call.method == "HEAD" {
                    agent.head(&url)
                } else {
                    agent.get(&url)
                };
                for (name, value) in &headers {
                    request = request.header(*name, *value);
                }
                request.call()
            }
            _ => {
                let mut request = if call.method == "PUT" {
                    agent.put(&url)
                } else {
                    agent.post(&url)
                };
                for (name, value) in &headers {
                    request = request.header(*name, *value);
                }
                request.send(call.body.unwrap_or_default())
            }
        };
        let mut response = result.map_err(|error| transport_failure(&url, error))?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string)
        };
        let status = response.status().as_u16();
        let digest_header = header("Docker-Content-Digest");
        let oci_subject = header("OCI-Subject");
        let content_type = header("Content-Type")
            .map(|value| value.split(';').next().unwrap_or("").trim().to_string());
        let www_authenticate = header("WWW-Authenticate");
        let retry_after = header("Retry-After");
        let location = header("Location");
        let body = if call.method == "HEAD" {
            Vec::new()
        } else {
            response
                .body_mut()
                .with_config()
                .limit(MAX_BODY_BYTES)
                .read_to_vec()
                .map_err(|error| transport_failure(&url, error))?
        };
        Ok(Answer {
            status,
            digest_header,
            oci_subject,
            content_type,
            www_authenticate,
            retry_after,
            location,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn an_upload_closes_at_its_location_on_this_registry_only() {
        let base = "http://127.0.0.1:5000";
        let digest = Digest::of(b"blob");
        assert_eq!(
            upload_path(
                base,
                "http://127.0.0.1:5000/v2/r/blobs/uploads/u?_state=s",
                &digest
            ),
            Some(format!("/v2/r/blobs/uploads/u?_state=s&digest={digest}"))
        );
        assert_eq!(
            upload_path(base, "/v2/r/blobs/uploads/u", &digest),
            Some(format!("/v2/r/blobs/uploads/u?digest={digest}"))
        );
        // Another host, another port, another scheme: not this registry.
        for elsewhere in [
            "http://evil.example/v2/x",
            "http://127.0.0.1:5001/v2/x",
            "https://127.0.0.1:5000/v2/x",
            "//evil.example/v2/x",
        ] {
            assert_eq!(upload_path(base, elsewhere, &digest), None, "{elsewhere}");
        }
    }

    #[test]
    fn loopback_hosts_use_plain_http() {
        assert_eq!(
            RegistryClient::new("127.0.0.1:5000", None).inner.base_url,
            "http://127.0.0.1:5000"
        );
        assert_eq!(
            RegistryClient::new("localhost:5000", None).inner.base_url,
            "http://localhost:5000"
        );
        assert_eq!(
            RegistryClient::new("[::1]:5000", None).inner.base_url,
            "http://[::1]:5000"
        );
        assert_eq!(
            RegistryClient::new("ghcr.io", None).inner.base_url,
            "https://ghcr.io"
        );
        let hub = RegistryClient::new("docker.io", None);
        assert_eq!(hub.inner.base_url, "https://registry-1.docker.io");
        assert_eq!(hub.host(), "docker.io");
        assert_eq!(hub.api_repository("ubuntu"), "library/ubuntu");
        assert_eq!(hub.api_repository("nvidia/cuda"), "nvidia/cuda");
        assert_eq!(
            RegistryClient::new("127.0.0.1:5000", None).api_repository("app"),
            "app"
        );
        assert_eq!(
            RegistryClient::new("http://registry.internal:5000", None)
                .inner
                .base_url,
            "http://registry.internal:5000"
        );
    }

    #[test]
    fn a_host_or_a_url_names_the_registry() {
        for (named, base_url, host) in [
            ("127.0.0.5:5000", "http://127.0.0.5:5000", "127.0.0.5:5000"),
            ("localhost", "http://localhost", "localhost"),
            (
                "https://127.0.0.1:5000/",
                "https://127.0.0.1:5000",
                "127.0.0.1:5000",
            ),
            (
                "registry.example:5000",
                "https://registry.example:5000",
                "registry.example:5000",
            ),
            ("http://[::1]:5000", "http://[::1]:5000", "[::1]:5000"),
        ] {
            let client = RegistryClient::new(named, None);
            assert_eq!(client.inner.base_url, base_url, "{named}");
            assert_eq!(client.host(), host, "{named}");
        }
    }

    /// A request as the fake server saw it.
    #[derive(Debug, Clone)]
    struct SeenRequest {
        method: String,
        target: String,
        authorization: Option<String>,
        body: String,
    }

    type Handler = dyn Fn(&SeenRequest, u16) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync;

    /// A minimal HTTP/1.1 server on 127.0.0.1 (one request per connection), for protocol flows
    /// the real registry cannot be configured for here (bearer tokens, 5xx answers).
    fn fake_server(handler: Arc<Handler>) -> (u16, Arc<Mutex<Vec<SeenRequest>>>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut parts = request_line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_string();
                let target = parts.next().unwrap_or_default().to_string();
                let mut authorization = None;
                let mut content_length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':') {
                        match name.to_ascii_lowercase().as_str() {
                            "authorization" => authorization = Some(value.trim().to_string()),
                            "content-length" => content_length = value.trim().parse().unwrap_or(0),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; content_length];
                let _ = reader.read_exact(&mut body);
                let request = SeenRequest {
                    method,
                    target,
                    authorization,
                    body: String::from_utf8_lossy(&body).into_owned(),
                };
                let (status, headers, body) = handler(&request, port);
                log.lock().unwrap().push(request.clone());
                let mut response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                    body.len()
                );
                for (name, value) in headers {
                    response.push_str(&format!("{name}: {value}\r\n"));
                }
                response.push_str("\r\n");
                let _ = stream.write_all(response.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        (port, seen)
    }

    const MANIFEST: &[u8] =
        br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#;

    /// A registry that demands a bearer token from its own `/token` realm.
    fn token_registry(expected_token_request: fn(&SeenRequest) -> bool) -> Arc<Handler> {
        Arc::new(move |request: &SeenRequest, port: u16| {
            if request.target.starts_with("/token") {
                return if expected_token_request(request) {
                    (200, vec![], br#"{"token":"issued-token"}"#.to_vec())
                } else {
                    (401, vec![], b"bad credentials".to_vec())
                };
            }
            if request.authorization.as_deref() != Some("Bearer issued-token") {
                let challenge = format!(
                    r#"Bearer realm="http://127.0.0.1:{port}/token",service="fake-registry",scope="repository:team/app:pull""#
                );
                return (401, vec![("WWW-Authenticate".into(), challenge)], vec![]);
            }
            (
                200,
                vec![
                    ("Content-Type".into(), MEDIA_TYPE_OCI_MANIFEST.into()),
                    (
                        "Docker-Content-Digest".into(),
                        Digest::of(MANIFEST).to_string(),
                    ),
                ],
                if request.method == "HEAD" {
                    vec![]
                } else {
                    MANIFEST.to_vec()
                },
            )
        })
    }

    #[tokio::test]
    async fn bearer_flow_exchanges_basic_credentials_for_a_token_once() {
        let (port, seen) = token_registry_with(|request| {
            let expected = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("alice:pw-secret")
            );
            request.method == "GET"
                && request.target.contains("service=fake-registry")
                && request
                    .target
                    .contains("scope=repository%3Ateam%2Fapp%3Apull")
                && request.authorization.as_deref() == Some(expected.as_str())
        });
        let client = RegistryClient::new(
            &format!("127.0.0.1:{port}"),
            Some(Credentials::username_password("alice", "pw-secret")),
        );
        let manifest = client.get_manifest("team/app", "1").await.unwrap().unwrap();
        assert_eq!(manifest.bytes, MANIFEST);
        assert_eq!(manifest.media_type, MEDIA_TYPE_OCI_MANIFEST);
        assert_eq!(
            client.manifest_digest("team/app", "1").await.unwrap(),
            Some(Digest::of(MANIFEST))
        );
        let token_requests = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|request| request.target.starts_with("/token"))
            .count();
        assert_eq!(token_requests, 1, "the token is cached per scope");
    }

    #[tokio::test]
    async fn bearer_flow_uses_identity_tokens_as_oauth_refresh_tokens() {
        let (port, _) = token_registry_with(|request| {
            request.method == "POST"
                && request.body.contains("grant_type=refresh_token")
                && request.body.contains("refresh_token=refresh-secret")
        });
        let client = RegistryClient::new(
            &format!("127.0.0.1:{port}"),
            Some(Credentials::IdentityToken {
                token: "refresh-secret".into(),
            }),
        );
        assert_eq!(
            client.manifest_digest("team/app", "1").await.unwrap(),
            Some(Digest::of(MANIFEST))
        );
    }

    #[tokio::test]
    async fn rejected_token_request_is_an_auth_error_without_the_secret() {
        let (port, _) = token_registry_with(|_| false);
        let client = RegistryClient::new(
            &format!("127.0.0.1:{port}"),
            Some(Credentials::username_password("alice", "pw-secret")),
        );
        let error = client.manifest_digest("team/app", "1").await.unwrap_err();
        assert!(
            matches!(error, RegistryError::Auth { status: 401, .. }),
            "{error:?}"
        );
        let text = format!("{error} {error:?}");
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(!text.contains("pw-secret"), "{text}");
    }

    fn token_registry_with(check: fn(&SeenRequest) -> bool) -> (u16, Arc<Mutex<Vec<SeenRequest>>>) {
        fake_server(token_registry(check))
    }

    #[tokio::test]
    async fn server_errors_are_retried_then_reported() {
        let calls = Arc::new(Mutex::new(0u32));
        let counter = Arc::clone(&calls);
        let (port, _) = fake_server(Arc::new(move |_: &SeenRequest, _| {
            let mut count = counter.lock().unwrap();
            *count += 1;
            if *count <= 2 {
                (503, vec![], b"busy".to_vec())
            } else {
                (404, vec![], vec![])
            }
        }));
        let quick = RetryPolicy {
            attempts: 3,
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(10),
        };
        let client = RegistryClient::new(&format!("127.0.0.1:{port}"), None).with_retry(quick);
        assert_eq!(client.manifest_digest("team/app", "1").await.unwrap(), None);
        assert_eq!(*calls.lock().unwrap(), 3);

        let client =
            RegistryClient::new(&format!("127.0.0.1:{port}"), None).with_retry(RetryPolicy {
                attempts: 2,
                ..quick
            });
        *calls.lock().unwrap() = 0;
        let error = client.manifest_digest("team/app", "1").await.unwrap_err();
        assert!(
            matches!(error, RegistryError::Status { status: 503, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(retry_after("10", now), Some(Duration::from_secs(10)));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date past is no wait"
        );
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            http_date("Wed, 21 Oct 2026 07:28:00 GMT"),
            Some(1_792_567_680)
        );
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("Sun, 06 Nov 1994 08:49:37 PST", now), None);
    }

    #[tokio::test]
    async fn retry_after_is_honoured_within_the_deadline_and_refused_past_it() {
        // 429 with Retry-After: 2 (then a date 2 s ahead), then the answer.
        let calls = Arc::new(Mutex::new(Vec::<std::time::Instant>::new()));
        let seen = Arc::clone(&calls);
        let (port, _) = fake_server(Arc::new(move |_request: &SeenRequest, _| {
            let mut seen = seen.lock().unwrap();
            seen.push(std::time::Instant::now());
            match seen.len() {
                1 => (429, vec![("Retry-After".into(), "2".into())], vec![]),
                2 => {
                    let at = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_secs()
                        + 3;
                    (503, vec![("Retry-After".into(), imf_fixdate(at))], vec![])
                }
                _ => (404, vec![], vec![]),
            }
        }));
        let quick = RetryPolicy {
            attempts: 5,
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(10),
        };
        let client = RegistryClient::new(&format!("127.0.0.1:{port}"), None)
            .with_retry(quick)
            .with_timeout(Duration::from_secs(10));
        assert_eq!(client.manifest_digest("team/app", "1").await.unwrap(), None);
        let times = calls.lock().unwrap().clone();
        assert_eq!(times.len(), 3, "three attempts");
        assert!(
            times[1] - times[0] >= Duration::from_secs(2),
            "waited as asked: {:?}",
            times[1] - times[0]
        );
        assert!(
            times[2] - times[1] >= Duration::from_secs(1),
            "waited until the date: {:?}",
            times[2] - times[1]
        );

        // Past the deadline: refused at once, saying so.
        let (port, seen) = fake_server(Arc::new(|_: &SeenRequest, _| {
            (429, vec![("Retry-After".into(), "120".into())], vec![])
        }));
        let client = RegistryClient::new(&format!("127.0.0.1:{port}"), None)
            .with_retry(quick)
            .with_timeout(Duration::from_secs(5));
        let start = std::time::Instant::now();
        let error = client.manifest_digest("team/app", "1").await.unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(
            seen.lock().unwrap().len(),
            1,
            "no retry that could not be waited for"
        );
        let text = error.to_string();
        assert!(
            text.contains("429")
                && text.contains("retry after 120 s (Retry-After), past the 5 s deadline"),
            "{text}"
        );
    }

    /// Seconds since the epoch as an IMF-fixdate.
    fn imf_fixdate(seconds: u64) -> String {
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[tokio::test]
    async fn a_registry_that_never_answers_fails_within_the_deadline() {
        // Accepts connections (the kernel does, from the backlog) and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = RegistryClient::new(&format!("127.0.0.1:{port}"), None)
            .with_timeout(Duration::from_secs(1))
            .with_retry(RetryPolicy {
                attempts: 2,
                initial_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(10),
            });
        let start = std::time::Instant::now();
        let error = client.manifest_digest("team/app", "1").await.unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "two attempts of one second each: {:?}",
            start.elapsed()
        );
        assert!(
            matches!(
                error,
                RegistryError::Timeout {
                    attempts: 2,
                    seconds: 1,
                    ..
                }
            ),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(text.contains("within 1 s"), "{text}");
        assert!(text.contains("--registry-timeout"), "{text}");
        drop(listener);
    }

    #[test]
    fn debug_hides_credentials() {
        let client = RegistryClient::new(
            "127.0.0.1:5000",
            Some(Credentials::username_password("user", "pw-should-not-show")),
        );
        assert!(!format!("{client:?}").contains("pw-should-not-show"));
    }
}
