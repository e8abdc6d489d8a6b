//! The built-in flavours started for real: the jupyter and ssh flavour images (built by the real
//! build on its runtime image, `real_build.rs`) run with `docker run` and are checked from the
//! host as a user reaches them. Jupyter: the token opens the API and nothing else does, a kernel
//! started through the REST API runs the image's Python with torch (over the kernel's websocket
//! channels), and the server refuses to start without a token. SSH: a key logs in and runs
//! torch, a password login and a root login are refused, sshd's effective settings say so, and
//! each container makes its own host key, which no layer of the image holds.
//!
//! Each function panics with what it saw when a check fails, and returns what it measured.

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::project::text;

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI (docker.io)")
}

/// Containers this module started, removed when it is dropped (also on a failed check).
struct Containers(Vec<String>);

impl Containers {
    /// `docker run -d ARGS` and the container's ID.
    fn run(&mut self, args: &[&str]) -> String {
        let mut all = vec!["run", "-d", "--label", "imagegen.test=flavour-services"];
        all.extend_from_slice(args);
        let output = docker(&all);
        assert!(
            output.status.success(),
            "docker {all:?}:\n{}",
            text(&output)
        );
        let id = String::from_utf8_lossy(&output.stdout).trim().to_string();
        self.0.push(id.clone());
        id
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = docker(&["rm", "-f", id]);
        }
    }
}

/// The host port `docker run -p 127.0.0.1::PORT` gave the container's `port`.
fn host_port(id: &str, port: u16) -> u16 {
    let output = docker(&["port", id, &format!("{port}/tcp")]);
    let mapping = String::from_utf8_lossy(&output.stdout);
    mapping
        .lines()
        .find_map(|line| line.strip_prefix("127.0.0.1:"))
        .and_then(|port| port.trim().parse().ok())
        .unwrap_or_else(|| panic!("docker port {id} {port}: {}", text(&output)))
}

fn logs(id: &str) -> String {
    text(&docker(&["logs", id]))
}

/// Waits for a container to exit; its exit code.
fn exit_code(id: &str, within: Duration) -> i64 {
    let started = Instant::now();
    loop {
        let output = docker(&[
            "inspect",
            "--format",
            "{{.State.Running}} {{.State.ExitCode}}",
            id,
        ]);
        let state = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if let Some(code) = state.strip_prefix("false ") {
            return code.parse().unwrap();
        }
        assert!(
            started.elapsed() < within,
            "container {id} still runs after {within:?}:\n{}",
            logs(id)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn exec(id: &str, command: &[&str]) -> String {
    let mut args = vec!["exec", id];
    args.extend_from_slice(command);
    let output = docker(&args);
    assert!(
        output.status.success(),
        "docker {args:?}:\n{}",
        text(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A GET or POST to the Jupyter server: status and body (a refused request is a status too).
fn jupyter_request(port: u16, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let url = format!("http://127.0.0.1:{port}{path}");
    let response = match method {
        "POST" => {
            let mut request = agent.post(&url).header("Content-Type", "application/json");
            if let Some(token) = token {
                request = request.header("Authorization", &format!("token {token}"));
            }
            request.send("{}")
        }
        _ => {
            let mut request = agent.get(&url);
            if let Some(token) = token {
                request = request.header("Authorization", &format!("token {token}"));
            }
            request.call()
        }
    };
    match response {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let body = response.body_mut().read_to_string().unwrap_or_default();
            (status, body)
        }
        Err(error) => (0, error.to_string()),
    }
}

/// What the jupyter checks measured.
pub struct JupyterReport {
    /// From `docker run` to the first answer of `GET /api` with the token.
    pub ready_seconds: f64,
    /// What the kernel printed: torch's version, the kernel's Python and its uid.
    pub kernel_output: String,
}

/// The jupyter flavour `image`: started with a token, its API answers with it and refuses
/// without it (403) or with another; a kernel started through the REST API imports torch from
/// `/opt/venv` as the image's user `uid`; without a token the server does not start.
pub fn check_jupyter(image: &str, uid: u32) -> JupyterReport {
    let mut containers = Containers(Vec::new());
    // Without a token: it says why and stops.
    let tokenless = containers.run(&[image]);
    let code = exit_code(&tokenless, Duration::from_secs(60));
    let said = logs(&tokenless);
    assert_eq!(code, 64, "{said}");
    assert!(said.contains("JUPYTER_TOKEN is not set"), "{said}");
    // An empty token is no token.
    let empty = containers.run(&["-e", "JUPYTER_TOKEN=", image]);
    assert_eq!(
        exit_code(&empty, Duration::from_secs(60)),
        64,
        "{}",
        logs(&empty)
    );

    let token = format!("t{:x}", std::process::id() as u64 * 7919 + 17);
    let started = Instant::now();
    let id = containers.run(&[
        "-e",
        &format!("JUPYTER_TOKEN={token}"),
        "-p",
        "127.0.0.1::8888",
        image,
    ]);
    let port = host_port(&id, 8888);
    let (status, body) = loop {
        let (status, body) = jupyter_request(port, "GET", "/api/status", Some(&token));
        if status == 200 {
            break (status, body);
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "JupyterLab did not answer within 120 s (last: {status} {body}):\n{}",
            logs(&id)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let ready_seconds = started.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{body}");
    let (status, version) = jupyter_request(port, "GET", "/api", Some(&token));
    assert_eq!(status, 200, "{version}");
    assert!(version.contains("\"version\""), "{version}");
    // `/api` is the one path jupyter_server answers without a token, by design (its
    // APIVersionHandler is `@allow_unauthenticated`, "give as few info as possible"): the
    // server's version and nothing else.
    let (status, open) = jupyter_request(port, "GET", "/api", None);
    let open: serde_json::Value = serde_json::from_str(&open).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        open.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["version".to_string()]),
        "{open}"
    );
    // The API refuses a request without the token, or with another one.
    for path in [
        "/api/status",
        "/api/kernels",
        "/api/contents",
        "/api/sessions",
    ] {
        let (status, body) = jupyter_request(port, "GET", path, None);
        assert_eq!(status, 403, "GET {path} without the token: {status} {body}");
        let (status, body) = jupyter_request(port, "GET", path, Some("not-the-token"));
        assert_eq!(
            status, 403,
            "GET {path} with a wrong token: {status} {body}"
        );
    }
    let (status, body) = jupyter_request(port, "POST", "/api/kernels", None);
    assert_eq!(status, 403, "POST /api/kernels without the token: {body}");
    // The server runs as the image's user.
    assert_eq!(exec(&id, &["id", "-u"]).trim(), uid.to_string());

    // A kernel through the REST API, and code run in it over its websocket channels.
    let (status, kernel) = jupyter_request(port, "POST", "/api/kernels", Some(&token));
    assert_eq!(status, 201, "POST /api/kernels: {kernel}");
    let kernel: serde_json::Value = serde_json::from_str(&kernel).unwrap();
    let kernel_id = kernel["id"].as_str().expect("a kernel id").to_string();
    let kernel_output = execute_in_kernel(
        port,
        &token,
        &kernel_id,
        "import os, sys, torch\nprint('torch', torch.__version__, sys.executable, os.getuid())",
    );
    assert!(
        kernel_output.contains("torch ") && kernel_output.contains("/opt/venv/bin/python"),
        "{kernel_output}"
    );
    assert!(
        kernel_output.trim_end().ends_with(&format!(" {uid}")),
        "{kernel_output}"
    );
    JupyterReport {
        ready_seconds,
        kernel_output,
    }
}

/// Runs `code` in the kernel `kernel_id` through `/api/kernels/ID/channels` (Jupyter's messaging
/// protocol as JSON over a websocket): what it printed, once the kernel replied `ok`.
fn execute_in_kernel(port: u16, token: &str, kernel_id: &str, code: &str) -> String {
    use tungstenite::client::IntoClientRequest;
    use tungstenite::Message;

    let session = format!("s{}", std::process::id());
    let url =
        format!("ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?session_id={session}");
    let mut request = url.as_str().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Authorization", format!("token {token}").parse().unwrap());
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let (mut socket, response) = tungstenite::client(request, stream)
        .unwrap_or_else(|error| panic!("websocket to kernel {kernel_id}: {error}"));
    assert_eq!(response.status().as_u16(), 101);
    let msg_id = format!("m{}", std::process::id());
    let execute = serde_json::json!({
        "header": {
            "msg_id": msg_id,
            "username": "imagegen-test",
            "session": session,
            "msg_type": "execute_request",
            "version": "5.3",
            "date": "2026-01-01T00:00:00Z"
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": false,
            "store_history": false,
            "user_expressions": {},
            "allow_stdin": false,
            "stop_on_error": true
        },
        "channel": "shell",
        "buffers": []
    });
    socket.send(Message::text(execute.to_string())).unwrap();
    let mut printed = String::new();
    let mut seen = Vec::new();
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "no execute_reply within 180 s; messages: {seen:?}"
        );
        let message = match socket.read() {
            Ok(Message::Text(text)) => text.to_string(),
            Ok(_) => continue,
            Err(error) => panic!("kernel websocket: {error}; messages: {seen:?}"),
        };
        let value: serde_json::Value = serde_json::from_str(&message).unwrap();
        if value["parent_header"]["msg_id"] != msg_id.as_str() {
            continue;
        }
        let kind = value["header"]["msg_type"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        seen.push(kind.clone());
        match kind.as_str() {
            "stream" => printed.push_str(value["content"]["text"].as_str().unwrap_or_default()),
            "error" => panic!("the kernel failed: {:#}", value["content"]),
            "execute_reply" => {
                assert_eq!(value["content"]["status"], "ok", "{:#}", value["content"]);
                // iopub's stream may come just after the shell reply: wait for idle.
                if printed.is_empty() {
                    continue;
                }
                break;
            }
            "status" if value["content"]["execution_state"] == "idle" && !printed.is_empty() => {
                break
            }
            _ => {}
        }
    }
    let _ = socket.close(None);
    printed
}

/// What the ssh checks measured.
pub struct SshReport {
    /// From `docker run` to the first `ssh` login that ran a command.
    pub ready_seconds: f64,
    /// What `python -c 'import torch'` printed over ssh.
    pub torch_output: String,
}

/// The ssh flavour `image`, whose user is `user` (`uid`): a key from the environment logs in
/// and runs torch; a password login and root's are refused; `sshd -T` shows key-only settings;
/// two containers make different host keys, and no layer of the image holds one; a key from a
/// mounted file works too; without keys it does not start.
pub fn check_ssh(image: &str, user: &str, uid: u32, scratch: &Path) -> SshReport {
    let mut containers = Containers(Vec::new());
    let key = scratch.join("id_ed25519");
    let keygen = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .output()
        .expect("ssh-keygen (openssh-client)");
    assert!(keygen.status.success(), "{}", text(&keygen));
    let public_key = std::fs::read_to_string(scratch.join("id_ed25519.pub")).unwrap();
    let known_hosts = scratch.join("known_hosts");

    // No keys: it says why and stops.
    let keyless = containers.run(&[image]);
    assert_eq!(
        exit_code(&keyless, Duration::from_secs(60)),
        64,
        "{}",
        logs(&keyless)
    );
    assert!(
        logs(&keyless).contains("no authorized keys"),
        "{}",
        logs(&keyless)
    );

    let started = Instant::now();
    let id = containers.run(&[
        "-e",
        &format!("SSH_AUTHORIZED_KEYS={}", public_key.trim()),
        "-p",
        "127.0.0.1::2222",
        image,
    ]);
    let port = host_port(&id, 2222).to_string();
    let ssh = |login: &str, extra: &[&str], command: &str| -> Output {
        Command::new("ssh")
            .args([
                "-p",
                &port,
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
            ])
            .args(["-o", "StrictHostKeyChecking=accept-new"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-o", "IdentitiesOnly=yes", "-F", "/dev/null"])
            .args(extra)
            .arg(format!("{login}@127.0.0.1"))
            .arg(command)
            .output()
            .expect("ssh (openssh-client)")
    };
    let key_arg = key.to_str().unwrap();
    let torch_command = "python -c 'import os, sys, torch; print(\"torch\", torch.__version__, sys.executable, os.getuid())'";
    let login = loop {
        let output = ssh(user, &["-i", key_arg], torch_command);
        if output.status.success() {
            break output;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ssh -i key {user}@ did not log in within 60 s:\n{}\ncontainer:\n{}",
            text(&output),
            logs(&id)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let ready_seconds = started.elapsed().as_secs_f64();
    let torch_output = String::from_utf8_lossy(&login.stdout).into_owned();
    assert!(
        torch_output.starts_with("torch ")
            && torch_output.contains("/opt/venv/bin/python")
            && torch_output.trim_end().ends_with(&format!(" {uid}")),
        "{torch_output}"
    );

    // A password login: the server offers none (only publickey), so it is refused unasked.
    let password = ssh(
        user,
        &[
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "PubkeyAuthentication=no",
        ],
        "true",
    );
    assert!(!password.status.success(), "{}", text(&password));
    assert!(
        text(&password).contains("Permission denied (publickey)"),
        "{}",
        text(&password)
    );
    // root, with the very key that logs the user in: refused.
    let root = ssh("root", &["-i", key_arg], "true");
    assert!(!root.status.success(), "{}", text(&root));
    assert!(text(&root).contains("Permission denied"), "{}", text(&root));
    // Another key than the authorized one: refused.
    let other_key = scratch.join("other_ed25519");
    let keygen = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other_key)
        .output()
        .unwrap();
    assert!(keygen.status.success());
    let other = ssh(user, &["-i", other_key.to_str().unwrap()], "true");
    assert!(!other.status.success(), "{}", text(&other));

    // sshd's effective settings, and who runs it.
    let settings = exec(
        &id,
        &[
            "/usr/sbin/sshd",
            "-T",
            "-f",
            "/var/lib/imagegen-sshd/sshd_config",
        ],
    );
    for wanted in [
        "passwordauthentication no",
        "kbdinteractiveauthentication no",
        "permitrootlogin no",
        "pubkeyauthentication yes",
        "permitemptypasswords no",
        "port 2222",
    ] {
        assert!(
            settings.lines().any(|line| line == wanted),
            "sshd -T lacks {wanted:?}:\n{settings}"
        );
    }
    assert_eq!(exec(&id, &["id", "-u"]).trim(), uid.to_string());

    // A key from a mounted file, in a second container: it logs in, and its host key is its own.
    let keys_file = scratch.join("authorized_keys");
    std::fs::write(&keys_file, &public_key).unwrap();
    let second = containers.run(&[
        "-v",
        &format!("{}:/run/secrets/authorized_keys:ro", keys_file.display()),
        "-p",
        "127.0.0.1::2222",
        image,
    ]);
    let second_port = host_port(&second, 2222).to_string();
    let started_second = Instant::now();
    loop {
        let output = Command::new("ssh")
            .args(["-p", &second_port, "-o", "BatchMode=yes", "-F", "/dev/null"])
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
            ])
            .args(["-o", "IdentitiesOnly=yes", "-i", key_arg])
            .arg(format!("{user}@127.0.0.1"))
            .arg("true")
            .output()
            .unwrap();
        if output.status.success() {
            break;
        }
        assert!(
            started_second.elapsed() < Duration::from_secs(60),
            "the mounted key did not log in:\n{}\n{}",
            text(&output),
            logs(&second)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let host_key = |id: &str| {
        exec(
            id,
            &["cat", "/var/lib/imagegen-sshd/ssh_host_ed25519_key.pub"],
        )
    };
    let (first_key, second_key) = (host_key(&id), host_key(&second));
    assert!(first_key.starts_with("ssh-ed25519 "), "{first_key}");
    assert_ne!(first_key, second_key, "two containers share a host key");
    assert_no_host_key_in_layers(image);
    SshReport {
        ready_seconds,
        torch_output,
    }
}

/// No layer of `image` holds an ssh host key (`ssh_host_*`): every file of every layer tar of
/// `docker save`, listed as the export streams by (nothing written to disk, no layer held in
/// memory); fails when none was listed at all.
fn assert_no_host_key_in_layers(image: &str) {
    let mut save = std::process::Command::new("docker")
        .args(["save", image])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = save.stdout.take().unwrap();
    let mut outer = tar::Archive::new(std::io::BufReader::with_capacity(1 << 20, stdout));
    let (mut layers, mut files) = (0, 0);
    let mut found = Vec::new();
    for entry in outer.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() < 512 {
            continue;
        }
        // Layers are tars (`ustar` at 257); the config and manifests are JSON.
        let mut head = vec![0u8; 512];
        entry.read_exact(&mut head).unwrap();
        if &head[257..262] != b"ustar" {
            continue;
        }
        layers += 1;
        let mut layer = tar::Archive::new(std::io::Cursor::new(head).chain(entry));
        for file in layer.entries().unwrap() {
            let file = file.unwrap();
            let path = file.path().unwrap().to_string_lossy().into_owned();
            files += 1;
            let name = path.rsplit('/').next().unwrap_or_default();
            if name.starts_with("ssh_host_") || name.starts_with(".wh.ssh_host_") {
                found.push(path);
            }
        }
    }
    assert!(save.wait().unwrap().success(), "docker save {image} failed");
    assert!(layers > 1 && files > 1000, "{layers} layers, {files} files");
    assert!(
        found.is_empty(),
        "host keys in the image's layers: {found:?}"
    );
}

/// The same checks on flavour images given by name, to work on the flavour templates without
/// the real build (which runs them on its own images): `IMAGEGEN_TEST_JUPYTER_IMAGE=…
/// IMAGEGEN_TEST_SSH_IMAGE=… it flavour_services --ignored`, images whose user is uid 1000 `dev`.
#[test]
#[ignore = "manual, not a tier: needs IMAGEGEN_TEST_JUPYTER_IMAGE and IMAGEGEN_TEST_SSH_IMAGE; the real build runs these checks"]
fn services_of_flavour_images_given_by_name() {
    let jupyter =
        std::env::var("IMAGEGEN_TEST_JUPYTER_IMAGE").expect("IMAGEGEN_TEST_JUPYTER_IMAGE");
    let ssh = std::env::var("IMAGEGEN_TEST_SSH_IMAGE").expect("IMAGEGEN_TEST_SSH_IMAGE");
    let report = check_jupyter(&jupyter, 1000);
    eprintln!(
        "jupyter ready in {:.1} s; kernel printed {:?}",
        report.ready_seconds, report.kernel_output
    );
    let scratch = tempfile::tempdir().unwrap();
    let report = check_ssh(&ssh, "dev", 1000, scratch.path());
    eprintln!(
        "ssh ready in {:.1} s; printed {:?}",
        report.ready_seconds, report.torch_output
    );
}

/// The pins of a lock: `name==version` lines.
fn lock_pins(lock: &str) -> std::collections::BTreeSet<String> {
    lock.lines()
        .filter(|line| !line.starts_with([' ', '#']) && line.contains("=="))
        .map(|line| line.trim_end_matches(" \\").trim().to_string())
        .collect()
}

/// The flavours of the real build (`jupyter`, `ssh` on its runtime image `runtime_name`, whose
/// user is `user`/`uid`), once `imagegen build` built and recorded them: their locks keep every
/// pin of the runtime lock and add the flavour's packages; each is recorded with its own
/// fingerprint and self-test; the services run. Returns a line per part with its seconds, for
/// the real build's phases.
pub fn check_real_build_flavours(
    project: &Path,
    repository: &str,
    runtime_name: &str,
    user: &str,
    uid: u32,
) -> Vec<String> {
    let images = project.join("images");
    let read = |name: &str| std::fs::read_to_string(images.join(name).join("requirements.lock"));
    let runtime_lock = read(runtime_name).unwrap();
    let runtime_pins = lock_pins(&runtime_lock);
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("imagegen-manifest.json")).unwrap(),
    )
    .unwrap();
    let runtime_record = &manifest["images"][runtime_name];
    let mut lines = Vec::new();
    for flavour in ["jupyter", "ssh"] {
        let name = format!("{runtime_name}-{flavour}");
        let lock = read(&name).unwrap_or_else(|error| panic!("{name}: {error}"));
        let pins = lock_pins(&lock);
        let moved: Vec<&String> = runtime_pins.difference(&pins).collect();
        assert!(
            moved.is_empty(),
            "{name}'s lock changes the runtime image's pins: {moved:?}"
        );
        assert!(
            lock.contains(&format!(
                "# constrained by: ../{runtime_name}/requirements.lock ("
            )),
            "{lock}"
        );
        let added: Vec<&String> = pins.difference(&runtime_pins).collect();
        if flavour == "jupyter" {
            assert!(
                added.iter().any(|pin| pin.starts_with("jupyterlab=="))
                    && added.iter().any(|pin| pin.starts_with("ipykernel==")),
                "{added:?}"
            );
        } else {
            assert!(
                added.is_empty(),
                "the ssh flavour adds no Python package: {added:?}"
            );
        }
        let record = &manifest["images"][&name];
        assert_eq!(record["status"], "ok", "{record:#}");
        assert_eq!(record["inputs"]["flavour"], flavour, "{record:#}");
        assert_eq!(
            record["inputs"]["parent_fingerprint"], runtime_record["fingerprint"],
            "{record:#}"
        );
        assert_ne!(record["fingerprint"], runtime_record["fingerprint"]);
        assert_eq!(record["selftest"]["status"], "skipped", "{record:#}");
        // Its packages are recorded: the runtime image's pip packages, and for ssh the server.
        let os_packages = record["packages"]["os"].as_array().unwrap();
        if flavour == "ssh" {
            assert!(
                os_packages.iter().any(|package| package
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("openssh-server")),
                "{os_packages:?}"
            );
        }
        lines.push(format!(
            "{flavour} flavour: {} Python packages added to the runtime lock, built in {:.0} s",
            added.len(),
            record["build_seconds"].as_f64().unwrap_or_default()
        ));
    }
    let started = Instant::now();
    let jupyter = check_jupyter(&format!("{repository}:{runtime_name}-jupyter"), uid);
    lines.push(format!(
        "jupyter checks ({:.1} s; server ready in {:.1} s; kernel: {})",
        started.elapsed().as_secs_f64(),
        jupyter.ready_seconds,
        jupyter.kernel_output.trim()
    ));
    let started = Instant::now();
    let scratch = tempfile::tempdir().unwrap();
    let ssh = check_ssh(
        &format!("{repository}:{runtime_name}-ssh"),
        user,
        uid,
        scratch.path(),
    );
    lines.push(format!(
        "ssh checks ({:.1} s; first login after {:.1} s: {})",
        started.elapsed().as_secs_f64(),
        ssh.ready_seconds,
        ssh.torch_output.trim()
    ));
    lines
}
