//! Shared harness for the integration tests that use the real Docker daemon and a real registry.
//! Include it with `mod support;`. It provides:
//! - [`engine`]: a connected `Engine`, panicking (never skipping) when the daemon is missing;
//! - [`base_image`]: a tiny local busybox image, `imagegen-test/base:1`, loaded from a
//!   deterministic `docker save` archive, so every run and every parallel test gets the same id;
//! - [`Registry`]: `/usr/bin/docker-registry` on 127.0.0.1 with storage in a temporary directory,
//!   optionally behind htpasswd basic auth or untrusted TLS, killed on drop;
//! - [`unique_name`]: collision-free repository/tag names for parallel tests;
//! - [`Cleanup`]: removes, when dropped (a failing test too), every container and image that
//!   carries its test case's label. Every Dockerfile a test builds puts that label right after
//!   `FROM` ([`Cleanup::dockerfile`], and `LABEL ... TEST_CASE` in the fixture templates), so
//!   each test's layers are its own: removing them (with the untagged parents the daemon prunes)
//!   can never pull a cached layer from under another test's build.
//!
//! A run leaves the daemon as it found it: a base image the run made ([`base_image`], and the
//! real build's Debian base) is removed when the test process exits ([`remove_at_exit`]); one
//! that was there before is left there. `IMAGEGEN_TEST_KEEP_BASES=1` keeps the bases a run makes,
//! so the next run starts from them. `IMAGEGEN_TEST_RUN` (default: the process id) goes into every name
//! and into the `imagegen-test.run` label, so `.ci/run` can check that nothing of its run is left.
//!
//! System packages come from `.ci/install-deps.sh` (docker-registry, busybox-static,
//! apache2-utils, openssl). Not every test binary uses every helper.
#![allow(dead_code)]

pub mod debian;
pub mod project;
pub mod uv;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use imagegen::docker::{context_tar, Engine};
use sha2::{Digest, Sha256};

/// The local base image the test Dockerfiles start `FROM`.
pub const BASE_IMAGE: &str = "imagegen-test/base:1";
const BUSYBOX: &str = "/bin/busybox";
const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";
/// Applets linked into the base image; a fixed list keeps the image id stable.
const APPLETS: &[&str] = &[
    "[", "basename", "cat", "chmod", "chown", "cp", "cut", "date", "dirname", "echo", "env",
    "false", "grep", "head", "id", "ln", "ls", "mkdir", "mv", "printf", "pwd", "rm", "seq", "sh",
    "sleep", "sort", "stat", "tail", "test", "touch", "tr", "true", "uname", "wc",
];

/// Connects to the daemon from `DOCKER_HOST` or the default socket; panics with the reason.
pub async fn engine() -> Engine {
    match Engine::connect().await {
        Ok(engine) => engine,
        Err(error) => panic!(
            "these integration tests need a running Docker daemon and fail without one:\n{error}"
        ),
    }
}

/// The label naming the test case that made an image or container.
pub const CASE_LABEL: &str = "imagegen-test.case";
/// The label naming the test run (`IMAGEGEN_TEST_RUN`, else the process id).
pub const RUN_LABEL: &str = "imagegen-test.run";

/// This run's id: `IMAGEGEN_TEST_RUN` (lowercase letters, digits and `-` kept), else the pid.
pub fn run_id() -> String {
    std::env::var("IMAGEGEN_TEST_RUN")
        .ok()
        .map(|run| {
            run.to_ascii_lowercase()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|run| !run.is_empty())
        .unwrap_or_else(|| std::process::id().to_string())
}

/// A name unique to this run and call, e.g. `push-4242-1732961234123-7`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis();
    format!(
        "{prefix}-{}-{millis}-{}",
        run_id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// One test case's mark on the daemon: its label goes into every Dockerfile the test builds, and
/// dropping it removes every container and image that carries the label.
pub struct Cleanup {
    case: String,
}

impl Cleanup {
    pub fn new(prefix: &str) -> Cleanup {
        Cleanup {
            case: unique_name(prefix),
        }
    }

    /// The case's label value.
    pub fn case(&self) -> &str {
        &self.case
    }

    /// The instruction that marks every layer after it as this case's.
    pub fn label_instruction(&self) -> String {
        format!(
            "LABEL {CASE_LABEL}=\"{}\" {RUN_LABEL}=\"{}\"",
            self.case,
            run_id()
        )
    }

    /// `dockerfile` with [`Cleanup::label_instruction`] after every `FROM` line.
    pub fn dockerfile(&self, dockerfile: &str) -> String {
        let mut out = String::new();
        for line in dockerfile.lines() {
            out.push_str(line);
            out.push('\n');
            if line.trim_start().to_ascii_uppercase().starts_with("FROM ") {
                out.push_str(&self.label_instruction());
                out.push('\n');
            }
        }
        out
    }

    /// Removes every container and image of the case now (a clean daemon for a second build).
    pub async fn remove_now(&self) {
        Cleanup::remove_everything(&self.case).await;
    }

    /// Removes the case's containers, then its images (newest first, a few passes so children
    /// go before parents). Errors are reported, not raised: it runs from `drop`.
    async fn remove_everything(case: &str) {
        let Ok(engine) = Engine::connect().await else {
            return;
        };
        let docker = engine.client();
        let filter = format!("{CASE_LABEL}={case}");
        for container in containers_with_label(&engine, &filter)
            .await
            .unwrap_or_default()
        {
            if let Some(id) = container.id {
                let options = bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build();
                let _ = docker.remove_container(&id, Some(options)).await;
            }
        }
        let mut filters = std::collections::HashMap::new();
        filters.insert("label", vec![filter.as_str()]);
        for _pass in 0..5 {
            let images = bollard::query_parameters::ListImagesOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build();
            let mut images = docker.list_images(Some(images)).await.unwrap_or_default();
            if images.is_empty() {
                return;
            }
            images.sort_by_key(|image| std::cmp::Reverse(image.created));
            for image in images {
                let options = bollard::query_parameters::RemoveImageOptionsBuilder::default()
                    .force(true)
                    .build();
                let _ = docker.remove_image(&image.id, Some(options), None).await;
            }
        }
        eprintln!("cleanup: images labelled {filter} are still on the daemon");
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let case = self.case.clone();
        // Drop may run inside a test's runtime, which cannot be blocked on: use a thread of its own.
        let worker = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime")
                .block_on(Cleanup::remove_everything(&case));
        });
        let _ = worker.join();
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn deterministic_header(size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_entry_type(tar::EntryType::Regular);
    header
}

/// The `docker save` archive of the base image and the image id it will have.
fn base_image_archive() -> (Vec<u8>, String) {
    let rootfs = tempfile::tempdir().expect("temporary rootfs directory");
    let root = rootfs.path();
    for directory in ["bin", "etc", "tmp", "root", "opt"] {
        std::fs::create_dir_all(root.join(directory)).expect("rootfs directory");
    }
    std::fs::copy(BUSYBOX, root.join("bin/busybox")).unwrap_or_else(|error| {
        panic!("cannot copy {BUSYBOX} ({error}); run .ci/install-deps.sh (busybox-static)")
    });
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))
            .expect("applet symlink");
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    let layer = context_tar(root, &[]).expect("rootfs layer tar");
    let layer_hex = sha256_hex(&layer);

    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["sh"],
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_hex}")]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "imagegen test harness: busybox-static rootfs"}],
    });
    let config_bytes = serde_json::to_vec(&config).unwrap();
    let config_hex = sha256_hex(&config_bytes);
    let manifest = serde_json::json!([{
        "Config": format!("{config_hex}.json"),
        "RepoTags": [BASE_IMAGE],
        "Layers": [format!("{layer_hex}/layer.tar")],
    }]);
    let manifest_bytes = serde_json::to_vec(&manifest).unwrap();

    let mut archive = tar::Builder::new(Vec::new());
    for (path, bytes) in [
        ("manifest.json".to_string(), manifest_bytes.as_slice()),
        (format!("{config_hex}.json"), config_bytes.as_slice()),
        (format!("{layer_hex}/layer.tar"), layer.as_slice()),
    ] {
        let mut header = deterministic_header(bytes.len() as u64);
        archive.append_data(&mut header, path, bytes).unwrap();
    }
    (
        archive.into_inner().unwrap(),
        format!("sha256:{config_hex}"),
    )
}

/// Makes sure [`BASE_IMAGE`] exists locally and returns its reference. Idempotent and safe
/// across parallel tests and processes: the archive is byte-for-byte the same every time, so
/// loading it again yields the same image id and concurrent loads agree. The first call of the
/// process notes whether the image was there before the run; if not, it goes at exit.
pub async fn base_image(engine: &Engine) -> &'static str {
    static FIRST_CALL_DONE: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);
    let mut first_call_done = FIRST_CALL_DONE.lock().await;
    let (archive, expected_id) = base_image_archive();
    let found = engine.image(BASE_IMAGE).await.expect("inspect base image");
    if !*first_call_done {
        *first_call_done = true;
        if found.is_none() {
            remove_at_exit(BASE_IMAGE);
        }
    }
    if found.is_some_and(|image| image.id == expected_id) {
        return BASE_IMAGE;
    }
    engine
        .load_image_archive(archive)
        .await
        .expect("load the base image archive");
    let loaded = engine
        .image(BASE_IMAGE)
        .await
        .expect("inspect base image")
        .expect("base image present after load");
    assert_eq!(
        loaded.id, expected_id,
        "base image id must be deterministic"
    );
    BASE_IMAGE
}

/// Every container (running or not) whose labels match `filter` (`key` or `key=value`).
pub async fn containers_with_label(
    engine: &Engine,
    filter: &str,
) -> Result<Vec<bollard::models::ContainerSummary>, bollard::errors::Error> {
    let mut filters = std::collections::HashMap::new();
    filters.insert("label", vec![filter]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    engine.client().list_containers(Some(options)).await
}

/// The images [`remove_at_exit`] was given, removed when the test process exits.
static REMOVE_AT_EXIT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Removes `image` (a base image this run made, which the run's tests share) when the test
/// process exits, after every test, so that a run leaves the daemon as it found it. With
/// `IMAGEGEN_TEST_KEEP_BASES=1` the image stays, for the next run to start from.
pub fn remove_at_exit(image: &str) {
    if std::env::var_os("IMAGEGEN_TEST_KEEP_BASES").is_some_and(|keep| keep == "1") {
        eprintln!("{image} stays on the daemon (IMAGEGEN_TEST_KEEP_BASES=1)");
        return;
    }
    let mut images = REMOVE_AT_EXIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if images.is_empty() {
        // SAFETY: atexit(3) takes a function without arguments that the C runtime calls once
        // from exit(), which the test harness reaches whether tests passed or failed.
        assert_eq!(unsafe { libc::atexit(remove_images_at_exit) }, 0, "atexit");
    }
    if !images.iter().any(|known| known == image) {
        images.push(image.to_string());
    }
}

extern "C" fn remove_images_at_exit() {
    let images = REMOVE_AT_EXIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for image in images.iter() {
        match Command::new("docker").args(["image", "rm", image]).output() {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "warning: the test base image {image} could not be removed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => {
                eprintln!("warning: the test base image {image} could not be removed: {error}")
            }
        }
    }
}

/// A `docker-registry` process on 127.0.0.1, storage in a temporary directory.
pub struct Registry {
    child: Option<Child>,
    host: String,
    directory: tempfile::TempDir,
}

impl Registry {
    /// An anonymous registry with deletes enabled.
    pub fn start() -> Registry {
        Self::launch(None, false)
    }

    /// A registry that requires basic auth for `user`/`password` (bcrypt htpasswd).
    pub fn start_with_htpasswd(user: &str, password: &str) -> Registry {
        Self::launch(Some((user, password)), false)
    }

    /// A registry serving HTTPS with a fresh self-signed certificate nobody trusts.
    pub fn start_with_untrusted_tls() -> Registry {
        Self::launch(None, true)
    }

    /// `127.0.0.1:PORT`, usable as a registry host in image references.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The registry's own log (stdout and stderr), for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.directory.path().join("registry.log")).unwrap_or_default()
    }

    /// Kills the registry; its host keeps pointing at the (now closed) port.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The registry's process id, while it runs (fault tests stop and continue it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the registry, forgets everything it stored, and starts it again on the same address.
    pub fn restart_empty(&mut self) {
        self.stop();
        let storage = self.directory.path().join("storage");
        if storage.exists() {
            std::fs::remove_dir_all(&storage).unwrap();
        }
        self.restart();
    }

    /// Starts a stopped registry again on the same address, with the same storage and
    /// configuration (plain HTTP registries only).
    pub fn restart(&mut self) {
        self.stop();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.directory.path().join("registry.log"))
            .unwrap();
        self.child = Some(
            Command::new(REGISTRY_BINARY)
                .arg("serve")
                .arg(self.directory.path().join("config.yml"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("restart docker-registry"),
        );
        assert!(
            self.wait_until_ready(Duration::from_secs(30), false),
            "docker-registry did not come back on {}:\n{}",
            self.host,
            self.log()
        );
    }

    fn launch(htpasswd: Option<(&str, &str)>, tls: bool) -> Registry {
        assert!(
            Path::new(REGISTRY_BINARY).exists(),
            "{REGISTRY_BINARY} is missing; run .ci/install-deps.sh (docker-registry)"
        );
        let mut directory = tempfile::tempdir().expect("registry directory");
        let auth_section = match htpasswd {
            Some((user, password)) => {
                let htpasswd_path = directory.path().join("htpasswd");
                let output = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("htpasswd (apache2-utils; run .ci/install-deps.sh)");
                assert!(output.status.success(), "htpasswd failed");
                std::fs::write(&htpasswd_path, &output.stdout).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: imagegen-test\n    path: {}\n",
                    htpasswd_path.display()
                )
            }
            None => String::new(),
        };

        let tls_section = if tls {
            let certificate = directory.path().join("cert.pem");
            let key = directory.path().join("key.pem");
            let status = Command::new("openssl")
                .args([
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                ])
                .args([
                    "-subj",
                    "/CN=127.0.0.1",
                    "-addext",
                    "subjectAltName=IP:127.0.0.1",
                ])
                .arg("-keyout")
                .arg(&key)
                .arg("-out")
                .arg(&certificate)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("openssl (run .ci/install-deps.sh)");
            assert!(status.success(), "openssl could not make a certificate");
            format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                certificate.display(),
                key.display()
            )
        } else {
            String::new()
        };

        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let host = format!("127.0.0.1:{port}");
            let config_path = directory.path().join("config.yml");
            std::fs::write(
                &config_path,
                format!(
                    "version: 0.1\n\
                     log:\n  level: info\n  accesslog:\n    disabled: true\n\
                     storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                     http:\n  addr: {host}\n  secret: imagegen-test-not-a-secret\n{tls_section}{auth_section}",
                    directory.path().join("storage").display()
                ),
            )
            .unwrap();
            let log_path = directory.path().join("registry.log");
            let log = std::fs::File::create(&log_path).unwrap();
            let child = Command::new(REGISTRY_BINARY)
                .arg("serve")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start docker-registry");
            let mut registry = Registry {
                child: Some(child),
                host,
                directory,
            };
            if registry.wait_until_ready(Duration::from_secs(15), tls) {
                return registry;
            }
            last_log = registry.log();
            registry.stop();
            // Reuse the directory for the next port.
            directory = std::mem::replace(
                &mut registry.directory,
                tempfile::tempdir().expect("registry directory"),
            );
        }
        panic!("docker-registry did not come up on 127.0.0.1; last log:\n{last_log}");
    }

    /// Polls `GET /v2/` until it answers 200 or 401 (for TLS, until the port accepts
    /// connections); false if the process died or time ran out.
    fn wait_until_ready(&mut self, limit: Duration, tls: bool) -> bool {
        let deadline = Instant::now() + limit;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if tls {
                if std::net::TcpStream::connect(&self.host).is_ok() {
                    return true;
                }
            } else if let Ok(response) = agent.get(format!("http://{}/v2/", self.host)).call() {
                let status = response.status().as_u16();
                if status == 200 || status == 401 {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("bind an ephemeral port")
}

/// Writes `files` (path → contents) into a new temporary directory, for build contexts.
pub fn context_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let directory = tempfile::tempdir().expect("context directory");
    for (path, contents) in files {
        let full: PathBuf = directory.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(full, contents).unwrap();
    }
    directory
}

/// Fails the test, before it makes anything, when the Docker daemon's disk or the temporary
/// folder's disk (where a test's project, its wheel cache and a host-made venv go) has less than
/// `needed_gib` free: a slow test that runs out of disk half-way fails on a symptom (a layer that
/// will not commit, a truncated wheel) and leaves gigabytes behind. `what` says what needs it.
pub fn require_free_disk(needed_gib: u64, what: &str) {
    let root = Command::new("docker")
        .args(["info", "--format", "{{.DockerRootDir}}"])
        .output()
        .expect("docker info");
    let root = String::from_utf8_lossy(&root.stdout).trim().to_string();
    let root = if root.is_empty() {
        "/var/lib/docker".to_string()
    } else {
        root
    };
    let temp = std::env::temp_dir().display().to_string();
    // `df -P -k PATH`: the second line is `filesystem blocks used available capacity mount`.
    let mut seen = std::collections::BTreeMap::new();
    for (name, path) in [
        ("the Docker daemon's disk", root),
        ("the temporary folder's disk", temp),
    ] {
        let df = Command::new("df")
            .args(["-P", "-k", &path])
            .output()
            .expect("df");
        let listing = String::from_utf8_lossy(&df.stdout).to_string();
        let fields: Vec<&str> = listing
            .lines()
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert!(
            df.status.success() && fields.len() >= 6,
            "df -P -k {path}:\n{listing}"
        );
        let free_kib: u64 = fields[3].parse().expect("df's available column");
        seen.entry(fields[0].to_string())
            .or_insert((name, path, free_kib));
    }
    for (name, path, free_kib) in seen.values() {
        let free_gib = *free_kib as f64 / (1024.0 * 1024.0);
        assert!(
            free_gib >= needed_gib as f64,
            "{what} needs {needed_gib} GiB free on {name} ({path}); {free_gib:.1} GiB are free: free some (docker system prune, an old target/) and run it again"
        );
        eprintln!("{what}: {free_gib:.1} GiB free on {name} ({path}), {needed_gib} GiB needed");
    }
}
