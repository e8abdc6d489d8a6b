//! Integration tests of `imagegen::docker` against the machine's real Docker daemon and a real
//! `docker-registry` on 127.0.0.1. They fail (never skip) when the daemon is missing.
//! Prerequisites: a running dockerd and `.ci/install-deps.sh`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::{base_image, context_dir, engine, unique_name, Cleanup, Registry, BASE_IMAGE};
use imagegen::docker::{
    build_step_progress, context_tar, BuildRequest, ContextFile, Credentials, DockerConfig,
    DockerError, Engine, RegistryClient, RegistryError, RetryPolicy, RunRequest,
    MEDIA_TYPE_DOCKER_MANIFEST,
};
use sha2::{Digest, Sha256};

const APP_DOCKERFILE: &str = "FROM imagegen-test/base:1
ARG GREETING=unset
COPY hello.txt /opt/hello.txt
COPY bin/tool /usr/local/bin/tool
RUN echo \"greeting=$GREETING\" && cat /opt/hello.txt && /usr/local/bin/tool
CMD [\"cat\", \"/opt/hello.txt\"]
";

fn tool_file() -> ContextFile {
    ContextFile {
        path: "bin/tool".into(),
        contents: b"#!/bin/sh\necho tool-ran\n".to_vec(),
        executable: true,
    }
}

/// A build context for `APP_DOCKERFILE`, labelled as `cleanup`'s, whose hello.txt holds `marker`.
fn app_context(cleanup: &Cleanup, marker: &str) -> Vec<u8> {
    let hello = format!("{marker}\n");
    let dockerfile = cleanup.dockerfile(APP_DOCKERFILE);
    let directory = context_dir(&[("Dockerfile", &dockerfile), ("hello.txt", &hello)]);
    context_tar(directory.path(), &[tool_file()]).expect("context tar")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// Builds a small labelled image tagged `tag`, as `cleanup`'s; returns its id.
async fn build_small_image(
    engine: &Engine,
    cleanup: &Cleanup,
    tag: &str,
    label_pairs: &[(&str, &str)],
) -> String {
    let mut request = BuildRequest::new(tag, app_context(cleanup, tag));
    request.labels = labels(label_pairs);
    engine
        .build(request, |_| {})
        .await
        .unwrap_or_else(|error| panic!("build {tag}: {error}"))
}

fn sha256_digest(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn fast_retry(attempts: u32) -> RetryPolicy {
    RetryPolicy {
        attempts,
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(200),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_streams_output_applies_labels_and_is_found_by_label() {
    let engine = engine().await;
    base_image(&engine).await;
    let cleanup = Cleanup::new("build");
    let name = unique_name("build");
    let tag = format!("imagegen-test/{name}:1");
    let fingerprint = format!("fp-{name}");

    let mut request = BuildRequest::new(&tag, app_context(&cleanup, &name));
    request.labels = labels(&[
        ("imagegen.fingerprint", &fingerprint),
        ("org.example.flavour", "test"),
    ]);
    request.build_args = labels(&[("GREETING", "hi-there")]);
    let mut lines: Vec<String> = Vec::new();
    let image_id = engine
        .build(request, |line| lines.push(line.to_string()))
        .await
        .expect("build succeeds");

    assert!(image_id.starts_with("sha256:"), "{image_id}");
    let (last_step, total_steps) = lines
        .iter()
        .rev()
        .find_map(|line| build_step_progress(line))
        .expect("step lines");
    assert_eq!(last_step, total_steps, "{lines:#?}");
    assert!(
        lines.iter().any(|line| line.starts_with("Step 1/")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|line| line == "greeting=hi-there"),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|line| line == &name), "{lines:#?}");
    // The extra file kept its executable bit through the context tar.
    assert!(lines.iter().any(|line| line == "tool-ran"), "{lines:#?}");

    let image_labels = engine
        .image_labels(&tag)
        .await
        .unwrap()
        .expect("image exists");
    assert_eq!(image_labels.get("imagegen.fingerprint"), Some(&fingerprint));
    assert_eq!(
        image_labels.get("org.example.flavour").map(String::as_str),
        Some("test")
    );

    let found = engine
        .find_image_with_label("imagegen.fingerprint", &fingerprint)
        .await
        .unwrap()
        .expect("found by label");
    assert_eq!(found.id, image_id);
    assert!(found.repo_tags.contains(&tag), "{:?}", found.repo_tags);
    assert!(engine
        .find_image_with_label("imagegen.fingerprint", "fp-that-nobody-built")
        .await
        .unwrap()
        .is_none());

    engine
        .tag(&tag, &format!("imagegen-test/{name}"), "alias")
        .await
        .unwrap();
    let alias = engine
        .image(&format!("imagegen-test/{name}:alias"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alias.id, image_id);

    assert!(engine
        .remove_image(&format!("imagegen-test/{name}:alias"), false)
        .await
        .unwrap());
    assert!(engine.remove_image(&tag, true).await.unwrap());
    assert!(engine.image(&tag).await.unwrap().is_none());
    assert!(!engine.remove_image(&tag, true).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_contexts_are_identical_bytes_and_rebuild_to_the_same_image() {
    let engine = engine().await;
    base_image(&engine).await;
    let cleanup = Cleanup::new("determinism");
    let name = unique_name("determinism");
    let dockerfile = cleanup.dockerfile(APP_DOCKERFILE);
    let directory = context_dir(&[("Dockerfile", &dockerfile), ("hello.txt", &name)]);
    let first = context_tar(directory.path(), &[tool_file()]).unwrap();
    // Touch every file: new mtimes must not change a byte.
    std::thread::sleep(Duration::from_millis(1100));
    for file in ["Dockerfile", "hello.txt"] {
        let contents = std::fs::read(directory.path().join(file)).unwrap();
        std::fs::write(directory.path().join(file), contents).unwrap();
    }
    let second = context_tar(directory.path(), &[tool_file()]).unwrap();
    assert_eq!(first, second);

    let tag = format!("imagegen-test/{name}:1");
    let first_id = engine
        .build(BuildRequest::new(&tag, first), |_| {})
        .await
        .unwrap();
    let second_id = engine
        .build(BuildRequest::new(&tag, second), |_| {})
        .await
        .unwrap();
    assert_eq!(
        first_id, second_id,
        "same context and Dockerfile give the same image"
    );
    engine.remove_image(&tag, true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_run_reports_the_step_and_the_last_lines() {
    let engine = engine().await;
    base_image(&engine).await;
    let cleanup = Cleanup::new("failing");
    let name = unique_name("failing");
    let tag = format!("imagegen-test/{name}:1");
    // The layers of the steps before the failure stay untagged; the cleanup removes them.
    let dockerfile = cleanup.dockerfile(
        "FROM imagegen-test/base:1\n\
         RUN echo before-failure\n\
         RUN for i in $(seq 1 30); do echo output-line-$i; done; echo stderr-line >&2; echo about-to-fail; exit 3\n\
         RUN echo never-reached\n",
    );
    let directory = context_dir(&[("Dockerfile", &dockerfile)]);
    let context = context_tar(directory.path(), &[]).unwrap();
    let mut streamed: Vec<String> = Vec::new();
    let error = engine
        .build(BuildRequest::new(&tag, context), |line| {
            streamed.push(line.to_string())
        })
        .await
        .expect_err("the third step fails");

    let DockerError::BuildFailed {
        tag: failed_tag,
        step,
        message,
        last_lines,
    } = &error
    else {
        panic!("expected BuildFailed, got {error:?}");
    };
    assert_eq!(failed_tag, &tag);
    let step = step.as_deref().expect("the failing step is known");
    assert!(step.starts_with("Step 4/5 : RUN for i in"), "{step}");
    assert!(message.contains("returned a non-zero code: 3"), "{message}");
    assert!(last_lines.len() <= 20, "{last_lines:#?}");
    assert!(
        last_lines.iter().any(|line| line == "output-line-30"),
        "{last_lines:#?}"
    );
    assert!(
        last_lines.iter().any(|line| line == "about-to-fail"),
        "{last_lines:#?}"
    );
    assert!(
        !last_lines.iter().any(|line| line == "output-line-5"),
        "{last_lines:#?}"
    );
    // The builder colours stderr red; lines arrive without terminal escapes (the order of
    // stderr against stdout is not fixed, so it is checked in the stream, not the tail).
    assert!(
        streamed.iter().any(|line| line == "stderr-line"),
        "{streamed:#?}"
    );
    assert!(!streamed.iter().any(|line| line.contains("never-reached")));

    let text = error.to_string();
    assert!(text.contains(&tag), "{text}");
    assert!(text.contains("Step 4/5"), "{text}");
    assert!(text.contains("output-line-30"), "{text}");
    assert!(
        engine.image(&tag).await.unwrap().is_none(),
        "a failed build leaves no tag"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_returns_the_registry_digest_and_labels_are_readable_remotely() {
    let engine = engine().await;
    base_image(&engine).await;
    let registry = Registry::start();
    let cleanup = Cleanup::new("push");
    let name = unique_name("push");
    let repository_path = format!("imagegen-test/{name}");
    let repository = format!("{}/{repository_path}", registry.host());
    let fingerprint = format!("fp-{name}");
    let image_id = build_small_image(
        &engine,
        &cleanup,
        &format!("{repository}:t1"),
        &[("imagegen.fingerprint", &fingerprint)],
    )
    .await;

    let mut push_lines = Vec::new();
    let digest = engine
        .push(&repository, "t1", None, |line| {
            push_lines.push(line.to_string())
        })
        .await
        .unwrap_or_else(|error| panic!("push failed: {error}\nregistry log:\n{}", registry.log()));
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert!(
        push_lines.iter().any(|line| line.contains(&digest)),
        "{push_lines:#?}"
    );

    let client = RegistryClient::new(registry.host(), None);
    client.ping().await.unwrap();
    assert_eq!(
        client
            .manifest_digest(&repository_path, "t1")
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(digest.clone()),
        "the push digest is the registry's Docker-Content-Digest"
    );
    let manifest = client
        .get_manifest(&repository_path, "t1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(manifest.digest, digest);
    assert_eq!(sha256_digest(&manifest.bytes), digest);
    assert_eq!(manifest.media_type, MEDIA_TYPE_DOCKER_MANIFEST);
    let manifest_json: serde_json::Value = serde_json::from_slice(&manifest.bytes).unwrap();
    assert_eq!(
        manifest_json["config"]["digest"],
        image_id.as_str(),
        "config digest is the image id"
    );

    let remote_labels = client
        .image_labels(&repository_path, "t1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        remote_labels.get("imagegen.fingerprint"),
        Some(&fingerprint)
    );

    assert_eq!(
        client
            .manifest_digest(&repository_path, "missing")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        client
            .get_manifest(&repository_path, "missing")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        client
            .image_labels(&repository_path, "missing")
            .await
            .unwrap(),
        None
    );

    // Re-pointing a tag by manifest PUT (how aliases can move without the daemon).
    let alias_digest = client
        .put_manifest(
            &repository_path,
            "alias",
            &manifest.media_type,
            manifest.bytes.clone(),
        )
        .await
        .unwrap();
    assert_eq!(alias_digest, digest);
    assert_eq!(
        client
            .manifest_digest(&repository_path, "alias")
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(digest.clone())
    );
    assert_eq!(
        client
            .manifest_digest(&repository_path, &digest)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(digest.clone()),
        "lookup by digest works too"
    );

    let local = engine
        .image(&format!("{repository}:t1"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        local
            .repo_digests
            .contains(&format!("{repository}@{digest}")),
        "{:?}",
        local.repo_digests
    );
    let again = engine.push(&repository, "t1", None, |_| {}).await.unwrap();
    assert_eq!(
        again, digest,
        "pushing unchanged content gives the same digest"
    );

    engine
        .remove_image(&format!("{repository}:t1"), true)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_registry_needs_credentials_and_never_shows_them() {
    let engine = engine().await.with_push_retry(fast_retry(3));
    base_image(&engine).await;
    let name = unique_name("auth");
    let password = format!("pw-{name}-SECRET");
    let wrong_password = format!("wrong-{name}-SECRET");
    let registry = Registry::start_with_htpasswd("imagegen", &password);
    let repository_path = format!("imagegen-test/{name}");
    let repository = format!("{}/{repository_path}", registry.host());
    let cleanup = Cleanup::new("auth");
    build_small_image(
        &engine,
        &cleanup,
        &format!("{repository}:t1"),
        &[("imagegen.fingerprint", &name)],
    )
    .await;

    let anonymous = engine
        .push(&repository, "t1", None, |_| {})
        .await
        .unwrap_err();
    let wrong = Credentials::username_password("imagegen", &wrong_password);
    let wrong_push = engine
        .push(&repository, "t1", Some(&wrong), |_| {})
        .await
        .unwrap_err();
    for error in [&anonymous, &wrong_push] {
        let DockerError::PushFailed {
            attempts,
            transient,
            registry: host,
            ..
        } = error
        else {
            panic!("expected PushFailed, got {error:?}");
        };
        assert_eq!(*attempts, 1, "auth failures are not retried: {error}");
        assert!(!transient, "{error}");
        assert_eq!(host, registry.host());
        let text = format!("{error} {error:?}");
        assert!(
            !text.contains(&wrong_password) && !text.contains(&password),
            "{text}"
        );
        assert!(text.contains("hint:"), "{text}");
    }

    // Credentials come from a Docker config directory, as a user's `docker login` leaves them.
    let config_directory = tempfile::tempdir().unwrap();
    std::fs::write(
        config_directory.path().join("config.json"),
        serde_json::json!({"auths": {registry.host(): {"username": "imagegen", "password": password}}})
            .to_string(),
    )
    .unwrap();
    let config = DockerConfig::load(config_directory.path()).unwrap();
    let credentials = config
        .credentials_for(registry.host())
        .unwrap()
        .expect("configured");
    assert!(!format!("{credentials:?} {config:?}").contains(&password));
    let digest = engine
        .push(&repository, "t1", Some(&credentials), |_| {})
        .await
        .unwrap_or_else(|error| panic!("push with credentials: {error}\n{}", registry.log()));

    let authenticated = RegistryClient::new(registry.host(), Some(credentials.clone()));
    assert_eq!(
        authenticated
            .manifest_digest(&repository_path, "t1")
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(digest)
    );
    let remote_labels = authenticated
        .image_labels(&repository_path, "t1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(remote_labels.get("imagegen.fingerprint"), Some(&name));
    assert!(!format!("{authenticated:?}").contains(&password));

    let anonymous_client = RegistryClient::new(registry.host(), None);
    let refused = anonymous_client
        .manifest_digest(&repository_path, "t1")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, RegistryError::Auth { status: 401, .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains(registry.host()), "{refused}");

    let wrong_client = RegistryClient::new(registry.host(), Some(wrong));
    let refused = wrong_client
        .image_labels(&repository_path, "t1")
        .await
        .unwrap_err();
    assert!(matches!(refused, RegistryError::Auth { .. }), "{refused:?}");
    let text = format!("{refused} {refused:?} {wrong_client:?}");
    assert!(!text.contains(&wrong_password), "{text}");

    engine
        .remove_image(&format!("{repository}:t1"), true)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_down_fails_clearly_after_bounded_retries() {
    let engine = engine().await.with_push_retry(fast_retry(3));
    base_image(&engine).await;
    let mut registry = Registry::start();
    let host = registry.host().to_string();
    registry.stop();
    let name = unique_name("down");
    let repository_path = format!("imagegen-test/{name}");
    let repository = format!("{host}/{repository_path}");
    let cleanup = Cleanup::new("down");
    build_small_image(&engine, &cleanup, &format!("{repository}:t1"), &[]).await;

    let started = Instant::now();
    let mut lines = Vec::new();
    let error = engine
        .push(&repository, "t1", None, |line| lines.push(line.to_string()))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    let DockerError::PushFailed {
        attempts,
        transient,
        ..
    } = &error
    else {
        panic!("expected PushFailed, got {error:?}");
    };
    assert_eq!(*attempts, 3, "{error}");
    assert!(*transient, "{error}");
    assert!(elapsed < Duration::from_secs(60), "bounded: {elapsed:?}");
    let text = error.to_string();
    assert!(
        text.contains(&host) && text.contains("connection refused") && text.contains("hint:"),
        "{text}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.contains("retrying"))
            .count(),
        2,
        "{lines:#?}"
    );

    let client = RegistryClient::new(&host, None).with_retry(fast_retry(3));
    let started = Instant::now();
    let error = client
        .manifest_digest(&repository_path, "t1")
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(30));
    let RegistryError::Unreachable { attempts, .. } = &error else {
        panic!("expected RegistryUnreachable, got {error:?}");
    };
    assert_eq!(*attempts, 3);
    assert!(error.to_string().contains(&host), "{error}");

    engine
        .remove_image(&format!("{repository}:t1"), true)
        .await
        .unwrap();
}

/// Containers carrying `label=value`, running or not.
async fn containers_labelled(engine: &Engine, label: &str, value: &str) -> usize {
    crate::support::containers_with_label(engine, &format!("{label}={value}"))
        .await
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_exit_code_and_output_and_always_removes_the_container() {
    let engine = engine().await;
    let image = base_image(&engine).await;
    let run_label = unique_name("run");
    let request = RunRequest {
        image: image.to_string(),
        cmd: vec![
            "sh".into(),
            "-c".into(),
            "echo out-$WHO; grep /dev/shm /proc/mounts; echo err-line >&2; exit 7".into(),
        ],
        env: labels(&[("WHO", "imagegen")]),
        shm_size_bytes: Some(128 << 20),
        labels: labels(&[("imagegen.test-run", &run_label)]),
        ..Default::default()
    };
    let output = engine.run(request.clone()).await.unwrap();
    assert_eq!(output.exit_code, 7, "{output:?}");
    assert!(output.stdout.starts_with("out-imagegen\n"), "{output:?}");
    assert!(
        output.stdout.contains("size=131072k"),
        "shm size applied: {output:?}"
    );
    assert_eq!(output.stderr, "err-line\n");

    let success = engine
        .run(RunRequest {
            cmd: vec!["true".into()],
            ..request.clone()
        })
        .await
        .unwrap();
    assert_eq!(success.exit_code, 0);

    let started = Instant::now();
    let timed_out = engine
        .run(RunRequest {
            cmd: vec!["sleep".into(), "60".into()],
            timeout: Some(Duration::from_secs(1)),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(timed_out, DockerError::ContainerTimeout { .. }),
        "{timed_out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));

    assert_eq!(
        containers_labelled(&engine, "imagegen.test-run", &run_label).await,
        0
    );

    // A cancelled run (Ctrl-C, an outer timeout) drops the future; the container still goes.
    let cancelled = tokio::time::timeout(
        Duration::from_secs(2),
        engine.run(RunRequest {
            cmd: vec!["sleep".into(), "60".into()],
            ..request.clone()
        }),
    )
    .await;
    assert!(cancelled.is_err(), "the outer timeout fired first");
    let deadline = Instant::now() + Duration::from_secs(20);
    while containers_labelled(&engine, "imagegen.test-run", &run_label).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the cancelled run's container was not removed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_request_matches_what_the_daemon_offers() {
    let engine = engine().await;
    let image = base_image(&engine).await;
    let available = engine.gpu_runtime_available().await.unwrap();
    let result = engine
        .run(RunRequest {
            image: image.to_string(),
            cmd: vec!["true".into()],
            gpus: true,
            ..Default::default()
        })
        .await;
    if available {
        assert_eq!(result.unwrap().exit_code, 0);
    } else {
        let error = result.expect_err("no GPU runtime, so a GPU request must fail");
        assert!(
            matches!(error, DockerError::GpuUnavailable { .. }),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("NVIDIA Container Toolkit"),
            "{error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_daemon_is_one_clear_error() {
    for address in [
        "unix:///nonexistent/imagegen-test.sock",
        "tcp://127.0.0.1:1",
    ] {
        let started = Instant::now();
        let error = Engine::connect_to(address).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(20), "{address}");
        assert!(
            matches!(error, DockerError::DaemonUnreachable { .. }),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("cannot reach the Docker daemon at {address}: ")),
            "{text}"
        );
        assert!(
            text.contains("hint:") && text.contains("DOCKER_HOST"),
            "{text}"
        );
        assert_eq!(text.matches("cannot reach").count(), 1, "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_images_are_named_in_errors() {
    let engine = engine().await;
    let missing = format!("imagegen-test/{}:none", unique_name("missing"));
    let error = engine
        .tag(&missing, "imagegen-test/other", "x")
        .await
        .unwrap_err();
    assert!(
        matches!(error, DockerError::ImageNotFound { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains(&missing), "{error}");

    let error = engine
        .run(RunRequest {
            image: missing.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(error.to_string().contains(&missing), "{error}");

    let (repository, tag) = missing.rsplit_once(':').unwrap();
    let error = engine
        .push(repository, tag, None, |_| {})
        .await
        .unwrap_err();
    assert!(error.to_string().contains(&missing), "{error}");
    assert!(engine.image_labels(&missing).await.unwrap().is_none());
}

/// Containers (running or not) whose command mentions `marker`.
async fn containers_running_command_with(engine: &Engine, marker: &str) -> Vec<String> {
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .build();
    engine
        .client()
        .list_containers(Some(options))
        .await
        .unwrap()
        .into_iter()
        .filter(|container| {
            container
                .command
                .as_deref()
                .is_some_and(|command| command.contains(marker))
        })
        .filter_map(|container| container.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_build_stops_it_on_the_daemon() {
    let engine = engine().await;
    base_image(&engine).await;
    let cleanup = Cleanup::new("cancelled-build");
    let marker = unique_name("cancelled-build");
    let dockerfile = cleanup.dockerfile(&format!(
        "FROM imagegen-test/base:1\nRUN sleep 45 # {marker}\n"
    ));
    let directory = context_dir(&[("Dockerfile", &dockerfile)]);
    let tag = format!("imagegen-test/{marker}:1");
    let request = BuildRequest::new(&tag, context_tar(directory.path(), &[]).unwrap());
    let build_engine = engine.clone();
    let build = tokio::spawn(async move { build_engine.build(request, |_| {}).await });

    // The RUN step's container shows up while the build runs...
    let deadline = Instant::now() + Duration::from_secs(30);
    while containers_running_command_with(&engine, &marker)
        .await
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the RUN step never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and goes away soon after the build future is dropped (as on Ctrl-C).
    build.abort();
    assert!(build.await.unwrap_err().is_cancelled());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leftovers = containers_running_command_with(&engine, &marker).await;
        if leftovers.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon kept the cancelled build's container: {leftovers:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(engine.image(&tag).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_registry_certificate_fails_at_once_with_a_hint() {
    let registry = Registry::start_with_untrusted_tls();
    let client = RegistryClient::new(&format!("https://{}", registry.host()), None)
        .with_retry(fast_retry(5));
    let started = Instant::now();
    let error = client.manifest_digest("team/app", "1").await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not retried: {error}"
    );
    assert!(matches!(error, RegistryError::Tls { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains(registry.host()), "{text}");
    assert!(
        text.contains("certificate") && text.contains("hint:"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entrypoint_can_be_replaced_or_removed_and_targets_select_a_stage() {
    let engine = engine().await;
    base_image(&engine).await;
    let cleanup = Cleanup::new("entrypoint");
    let name = unique_name("entrypoint");
    let tag = format!("imagegen-test/{name}:1");
    let dockerfile = cleanup.dockerfile(
        "FROM imagegen-test/base:1 AS first\n\
         RUN echo first-stage > /stage\n\
         ENTRYPOINT [\"echo\", \"banner\"]\n\
         FROM first AS second\n\
         RUN echo second-stage > /stage\n",
    );
    let directory = context_dir(&[("Dockerfile", &dockerfile)]);
    let mut request = BuildRequest::new(&tag, context_tar(directory.path(), &[]).unwrap());
    request.target = Some("first".into());
    engine.build(request, |_| {}).await.unwrap();

    let run = |entrypoint: Option<Vec<String>>, cmd: &[&str]| RunRequest {
        image: tag.clone(),
        cmd: cmd.iter().map(|part| part.to_string()).collect(),
        entrypoint,
        ..Default::default()
    };
    let kept = engine.run(run(None, &["hello"])).await.unwrap();
    assert_eq!(kept.stdout, "banner hello\n");
    let removed = engine
        .run(run(Some(vec![]), &["cat", "/stage"]))
        .await
        .unwrap();
    assert_eq!(
        removed.stdout, "first-stage\n",
        "target stopped at the first stage"
    );
    let replaced = engine
        .run(run(Some(vec!["echo".into(), "other".into()]), &["x"]))
        .await
        .unwrap();
    assert_eq!(replaced.stdout, "other x\n");
    engine.remove_image(&tag, true).await.unwrap();
}

/// What a test makes goes when its [`Cleanup`] is dropped: tags, untagged layers of a failed
/// build, and containers, all found by the case label right after `FROM`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_cleanup_leaves_nothing_of_its_case() {
    let engine = engine().await;
    base_image(&engine).await;
    let cleanup = Cleanup::new("cleanup");
    let case = cleanup.case().to_string();
    let name = unique_name("cleanup");
    build_small_image(&engine, &cleanup, &format!("imagegen-test/{name}:1"), &[]).await;
    engine
        .tag(
            &format!("imagegen-test/{name}:1"),
            &format!("imagegen-test/{name}"),
            "alias",
        )
        .await
        .unwrap();
    let failing =
        cleanup.dockerfile("FROM imagegen-test/base:1\nRUN echo kept-layer\nRUN exit 3\n");
    let directory = context_dir(&[("Dockerfile", &failing)]);
    let request = BuildRequest::new(
        format!("imagegen-test/{name}:failed"),
        context_tar(directory.path(), &[]).unwrap(),
    );
    assert!(engine.build(request, |_| {}).await.is_err());
    let labelled = || async {
        let filter = format!("{}={case}", crate::support::CASE_LABEL);
        let mut filters = std::collections::HashMap::new();
        filters.insert("label", vec![filter.as_str()]);
        let options = bollard::query_parameters::ListImagesOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        engine
            .client()
            .list_images(Some(options))
            .await
            .unwrap()
            .len()
    };
    assert!(
        labelled().await >= 3,
        "the image, its layers, the failed build's layer"
    );
    drop(cleanup);
    assert_eq!(labelled().await, 0);
    assert!(engine
        .image(&format!("imagegen-test/{name}:alias"))
        .await
        .unwrap()
        .is_none());
    assert!(
        engine.image(BASE_IMAGE).await.unwrap().is_some(),
        "the shared base stays"
    );
}
