//! `imagegen build` against the real Docker daemon and a real registry on 127.0.0.1: build,
//! push and record digests, skip-unchanged, a changed version rebuilds only what it touches, a
//! failing build among good ones, a failing self-test, registry down (before and after a push),
//! daemon unreachable, Ctrl-C mid-build, and credentials never appearing in output.
//!
//! The images start from a local busybox base (no image can be pulled here) and carry a stand-in
//! `gpu-selftest` script; the real binary is tested in the selftest crate and on the GPU machine.
//! These tests fail, never skip, when the daemon is missing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::support::project::{
    assert_code, prepare, text, Project, SELFTEST_FAIL, SELFTEST_NO_GPU, SELFTEST_PASS,
};
use crate::support::Registry;
use imagegen::docker::Credentials;

/// The RESULT column of the table `imagegen build` prints, by image: every row of it, so a
/// check over it fails when the table is missing, short or renamed, never passes on no rows.
fn results_table(log: &str) -> BTreeMap<String, String> {
    let mut rows = log
        .lines()
        .skip_while(|line| !line.starts_with("IMAGE ") || !line.contains(" RESULT "))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .peekable();
    assert!(rows.peek().is_some(), "no result table in:\n{log}");
    rows.map(|line| {
        let mut fields = line.split_whitespace();
        let image = fields.next().unwrap().to_string();
        let result = fields.next().unwrap_or_default().to_string();
        (image, result)
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn build_push_skip_unchanged_and_rebuild_only_what_changed() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);

    // Cold build: four images, tested, pushed, aliases moved; digests recorded.
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let manifest = project.manifest();
    let client = project.client(None);
    for torch in ["2.7.0", "2.8.0"] {
        for variant in ["runtime", "devel"] {
            let tag = project.tag(torch, variant);
            let record = &manifest["images"][&tag];
            assert_eq!(record["status"], "ok", "{tag}: {record}");
            assert_eq!(record["selftest"]["status"], "pass");
            assert_eq!(
                record["selftest"]["report"]["checks"][0]["name"], "matmul",
                "the self-test report is stored"
            );
            let digest = record["digest"].as_str().unwrap().to_string();
            let in_registry = client
                .manifest_digest(&project.repository, &tag)
                .await
                .unwrap();
            assert_eq!(
                in_registry.as_ref().map(|digest| digest.as_str()),
                Some(digest.as_str()),
                "{tag}: manifest digest = registry digest"
            );
            let labels = client
                .image_labels(&project.repository, &tag)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                labels["imagegen.build-key"],
                record["build_key"].as_str().unwrap()
            );
            assert_eq!(labels["imagegen.torch"], torch);
        }
    }
    let alias = &manifest["aliases"]["2.7-cuda12.6-runtime"];
    assert_eq!(alias["tag"], project.tag("2.7.0", "runtime"));
    let alias_digest = client
        .manifest_digest(&project.repository, "2.7-cuda12.6-runtime")
        .await
        .unwrap();
    assert_eq!(
        alias_digest.as_ref().map(|digest| digest.as_str()),
        alias["digest"].as_str(),
        "the alias was pushed and points at the tested digest"
    );
    assert!(
        manifest["aliases"]["latest"].is_null(),
        "torch 2.8's default CUDA is 12.8, which this matrix does not build"
    );

    // Nothing changed: nothing is built, nothing is re-tested, digests stay.
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let log = text(&output);
    assert!(
        !log.contains("Step 1/"),
        "a no-op build must not build:\n{log}"
    );
    let reused: BTreeMap<String, String> = ["2.7.0", "2.8.0"]
        .iter()
        .flat_map(|torch| ["runtime", "devel"].map(|variant| project.tag(torch, variant)))
        .map(|tag| (tag, "reused".to_string()))
        .collect();
    assert_eq!(results_table(&log), reused, "{log}");
    let again = project.manifest();
    for (tag, record) in manifest["images"].as_object().unwrap() {
        assert_eq!(again["images"][tag]["digest"], record["digest"]);
        assert_eq!(
            again["images"][tag]["selftest"], record["selftest"],
            "the first test report is kept"
        );
        // The size measured when it was built is kept for the reused image.
        assert!(
            record["size"]["compressed_bytes"].as_u64().unwrap() > 0,
            "{record}"
        );
        assert_eq!(again["images"][tag]["size"], record["size"]);
    }

    // One version changes: only its images build; the alias moves forward, keeping history.
    project.edit_matrix(
        "torch: [\"2.7.0\", \"2.8.0\"]",
        "torch: [\"2.7.1\", \"2.8.0\"]",
    );
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let log = text(&output);
    let expected: BTreeMap<String, String> = [
        ("2.7.1", "runtime", "built"),
        ("2.7.1", "devel", "built"),
        ("2.8.0", "runtime", "reused"),
        ("2.8.0", "devel", "reused"),
    ]
    .iter()
    .map(|(torch, variant, result)| (project.tag(torch, variant), result.to_string()))
    .collect();
    assert_eq!(
        results_table(&log),
        expected,
        "only the 2.7.1 images build, the 2.8.0 ones are reused:\n{log}"
    );
    let manifest = project.manifest();
    let alias = &manifest["aliases"]["2.7-cuda12.6-runtime"];
    assert_eq!(alias["tag"], project.tag("2.7.1", "runtime"));
    assert_eq!(alias["history"][0]["tag"], project.tag("2.7.0", "runtime"));
    assert!(
        manifest["images"][project.tag("2.7.0", "runtime")]["digest"].is_string(),
        "old images stay recorded for rollback"
    );
    assert_eq!(
        manifest["images"][project.tag("2.7.0", "runtime")]["aliases"],
        serde_json::json!([])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_build_among_good_ones() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    // An earlier record that this run must not lose.
    let earlier = serde_json::json!({"schema_version": 1, "updated_at": "", "images": {}, "aliases": {"keep-me": {"tag": "x", "digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000", "moved_at": "2026-01-01T00:00:00Z"}}});
    std::fs::write(
        project.path().join("imagegen-manifest.json"),
        serde_json::to_string(&earlier).unwrap(),
    )
    .unwrap();
    let failing = project.tag("2.8.0", "runtime");
    std::fs::write(
        project.path().join("matrix.yaml"),
        std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap()
            + &format!("labels:\n  imagegen-test.fail: {failing}\n"),
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();

    let output = project.build(&["--push", "--format", "json"]);
    assert_code(&output, 1);
    let log = text(&output);
    assert!(
        log.contains("pretending pip cannot find torch==2.8.0"),
        "the failing step's output is shown:\n{log}"
    );
    // --format json: one object on stdout, each image's result; the failure said once on stderr.
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let results = report["images"].as_array().unwrap();
    assert_eq!(results.len(), 4, "{report:#}");
    let failed: Vec<&serde_json::Value> = results.iter().filter(|r| r["name"] == failing).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["status"], "failed", "{report:#}");
    assert_eq!(failed[0]["failed_stage"], "build", "{report:#}");
    assert_eq!(
        results.iter().filter(|r| r["status"] == "built").count(),
        2,
        "{report:#}"
    );
    assert_eq!(report["manifest"], "imagegen-manifest.json");
    // The summary names the failed RUN once (the daemon's message repeats the command).
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary = &stderr[stderr.find(&format!("{failing} failed:")).unwrap()..];
    assert_eq!(
        summary
            .matches("RUN echo \"pretending pip cannot find torch==2.8.0\" && exit 3")
            .count(),
        1,
        "the failed RUN is said once:\n{summary}"
    );
    assert!(summary.contains("(exit code 3)"), "{summary}");
    assert!(log.contains("Step 3/"), "the failing step is named:\n{log}");
    assert!(log.contains("full log: .imagegen/logs/"), "{log}");
    let manifest = project.manifest();
    assert_eq!(
        manifest["aliases"]["keep-me"]["tag"], "x",
        "earlier manifest content is kept"
    );
    assert_eq!(manifest["images"][&failing]["status"], "failed");
    assert!(
        manifest["images"][&failing]["last_error"]
            .as_str()
            .unwrap()
            .contains("exit 3")
            || manifest["images"][&failing]["last_error"]
                .as_str()
                .unwrap()
                .contains("non-zero")
    );
    assert_eq!(
        manifest["images"][project.tag("2.8.0", "devel")]["status"],
        "failed",
        "its devel image is not attempted"
    );
    for variant in ["runtime", "devel"] {
        let record = &manifest["images"][project.tag("2.7.0", variant)];
        assert_eq!(record["status"], "ok");
        assert!(record["digest"].is_string());
    }
    let log_file =
        std::fs::read_to_string(project.path().join(format!(".imagegen/logs/{failing}.log")))
            .unwrap();
    assert!(log_file.contains("pretending pip cannot find torch==2.8.0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_self_test_blocks_push_and_aliases_and_no_gpu_holds_aliases() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_FAIL);
    let output = project.build(&["--push", "--only", "2.8.0-cuda12.6-cudnn9-runtime"]);
    assert_code(&output, 1);
    assert!(
        text(&output).contains("pinned H2D 9.1 GB/s"),
        "{}",
        text(&output)
    );
    let tag = project.tag("2.8.0", "runtime");
    assert_eq!(
        project
            .client(None)
            .manifest_digest(&project.repository, &tag)
            .await
            .unwrap(),
        None,
        "a failed image is not pushed"
    );
    assert!(project.manifest()["aliases"]
        .as_object()
        .unwrap()
        .is_empty());

    // On a host without GPUs the real self-test exits 2: the image is pushed, aliases hold.
    project.set_selftest(SELFTEST_NO_GPU);
    // Two images (runtime and devel): why there is no GPU is said once for the run, and the
    // reason the aliases wait once for all of them; what the binary said is in each log.
    let output = project.build(&["--push", "--only", "2.8.0-cuda12.6-cudnn9-"]);
    assert_code(&output, 0);
    let log = text(&output);
    assert_eq!(
        log.matches("self-test skipped (no GPU)").count(),
        2,
        "{log}"
    );
    assert_eq!(
        log.matches("no GPU runtime on this Docker daemon").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("waits for passing self-test results on any GPU")
            .count(),
        1,
        "{log}"
    );
    // Waiting for a GPU test, which is not held (held is a rollback's word, and a failed
    // test's).
    assert!(
        log.contains("waiting for a GPU test: 2.8-cuda12.6-runtime")
            && !log.contains("held (reason below)")
            && !log.contains("\nheld: "),
        "{log}"
    );
    assert!(!log.contains("libcuda.so.1"), "{log}");
    let image_log = std::fs::read_to_string(
        project
            .path()
            .join(".imagegen/logs/2.8.0-cuda12.6-cudnn9-devel-ubuntu24.04.log"),
    )
    .unwrap();
    assert!(
        image_log.contains("no NVIDIA driver in this container"),
        "{image_log}"
    );
    // The aliases wait on the image's record for a passing result (`imagegen test`).
    let awaiting = project.manifest()["images"][&tag]["awaiting_aliases"].clone();
    assert!(
        awaiting.as_array().is_some_and(|a| !a.is_empty()),
        "{awaiting}"
    );
    let manifest = project.manifest();
    assert_eq!(manifest["images"][&tag]["selftest"]["status"], "skipped");
    assert!(manifest["images"][&tag]["selftest"]["summary"]
        .as_str()
        .unwrap()
        .contains("no GPU on this host"));
    assert!(manifest["aliases"].as_object().unwrap().is_empty());
    assert!(project
        .client(None)
        .manifest_digest(&project.repository, &tag)
        .await
        .unwrap()
        .is_some());

    // --require-gpu turns a skipped test into a failure.
    let output = project.build(&["--only", "2.7.0-cuda12.6-cudnn9-runtime", "--require-gpu"]);
    assert_code(&output, 1);
    assert!(text(&output).contains("--require-gpu"), "{}", text(&output));
}

/// A stand-in self-test that passes only when imagegen hands it a baseline.
const SELFTEST_NEEDS_BASELINE: &str = r#"#!/bin/sh
case "$GPU_SELFTEST_BASELINE" in
  *gpu-selftest-baseline*)
    echo '{"schema_version":1,"tool":"gpu-selftest","overall":"pass","checks":[{"name":"baseline","status":"pass","summary":"every figure at least 80% of the baseline"}]}'
    exit 0 ;;
  *)
    echo '{"schema_version":1,"tool":"gpu-selftest","overall":"fail","checks":[{"name":"baseline","status":"fail","summary":"no baseline given"}]}'
    exit 1 ;;
esac
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_selftest_baseline_reaches_the_self_test_and_only_counts_for_itself() {
    prepare().await;
    let project = Project::new("127.0.0.1:1", SELFTEST_NEEDS_BASELINE);
    let only = ["--only", "2.8.0-cuda12.6-cudnn9-runtime"];

    // A file that is not a baseline is refused before anything is built.
    std::fs::write(
        project.path().join("report.json"),
        r#"{"schema_version":1,"overall":"pass","checks":[]}"#,
    )
    .unwrap();
    let mut args = vec!["--selftest-baseline", "report.json"];
    args.extend(only);
    let output = project.build(&args);
    assert_code(&output, 2);
    assert!(
        text(&output).contains("--selftest-baseline report.json"),
        "{}",
        text(&output)
    );
    assert!(!project.path().join("imagegen-manifest.json").exists());

    // A baseline reaches the in-image run (the stand-in passes only with it) and is recorded.
    let baseline = r#"{"schema_version":1,"kind":"gpu-selftest-baseline","gpus":["NVIDIA H200"],"figures":[{"check":"matmul","figure":"bf16","size":8192,"unit":"tflops","value":815.0,"per_gpu":[818.0,810.0]}]}"#;
    std::fs::write(project.path().join("good-node.json"), baseline).unwrap();
    let mut args = vec!["--selftest-baseline", "good-node.json"];
    args.extend(only);
    let output = project.build(&args);
    assert_code(&output, 0);
    let tag = project.tag("2.8.0", "runtime");
    let test = &project.manifest()["images"][&tag]["selftest"];
    assert_eq!(test["status"], "pass", "{test}");
    let expected = imagegen::model::digest::Digest::of(baseline.as_bytes());
    assert_eq!(test["baseline"], expected.as_str());

    // The same image without the baseline is tested again: a pass against a baseline does
    // not count for a run without one (and the stand-in fails without it).
    let output = project.build(&only);
    assert_code(&output, 1);
    assert!(
        text(&output).contains("no baseline given"),
        "{}",
        text(&output)
    );
}

/// "Nothing lost": every record, alias and digest of an earlier build is, after a run whose
/// pushes all failed, exactly what it was (the same JSON, field for field), and the registry,
/// once back, still serves each recorded digest under its tag and its aliases.
#[tokio::test(flavor = "multi_thread")]
async fn registry_down_is_a_clear_failure_that_loses_nothing() {
    prepare().await;
    let mut registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let kept = project.tag("2.8.0", "runtime");
    assert_code(
        &project.build(&["--push", "--only", "2.8.0-cuda12.6-cudnn9-runtime"]),
        0,
    );
    let before = project.manifest();
    let earlier_images = before["images"].as_object().unwrap().clone();
    let earlier_aliases = before["aliases"].as_object().unwrap().clone();
    assert!(
        earlier_images.contains_key(&kept) && earlier_images[&kept]["digest"].is_string(),
        "the earlier build is recorded: {before:#}"
    );
    assert_eq!(
        earlier_aliases.keys().collect::<Vec<_>>(),
        ["2.8-cuda12.6-runtime", "2.8-cuda12.6-runtime-ubuntu24.04"],
        "the earlier build moved its aliases: {before:#}"
    );

    registry.stop();
    let output = project.build(&[
        "--push",
        "--push-attempts",
        "2",
        "--only",
        "2.7.0-cuda12.6-cudnn9-runtime",
    ]);
    assert_code(&output, 1);
    let log = text(&output);
    assert!(
        log.contains(registry.host()),
        "the registry is named:\n{log}"
    );
    assert!(
        log.contains("2 attempt"),
        "bounded retries are reported:\n{log}"
    );
    let after = project.manifest();
    let record = &after["images"][project.tag("2.7.0", "runtime")];
    assert_eq!(record["status"], "failed");
    assert!(
        record["last_error"]
            .as_str()
            .unwrap()
            .contains("after 2 attempt(s)"),
        "{record}"
    );

    // Nothing lost: each earlier record and every alias is the same JSON, byte for byte, and no
    // alias moved to the image that failed to push.
    for (tag, earlier) in &earlier_images {
        assert_eq!(
            serde_json::to_string(&after["images"][tag]).unwrap(),
            serde_json::to_string(earlier).unwrap(),
            "the record of {tag} changed"
        );
    }
    assert_eq!(
        serde_json::to_string(&after["aliases"]).unwrap(),
        serde_json::to_string(&earlier_aliases).unwrap(),
        "the aliases changed"
    );
    assert!(after["pending_aliases"].is_null(), "{after:#}");
    assert_eq!(
        after["images"].as_object().unwrap().len(),
        earlier_images.len() + 1,
        "only the failed image was added: {after:#}"
    );

    // And the registry, back, serves what the manifest says.
    registry.restart();
    let client = project.client(None);
    let recorded = earlier_images[&kept]["digest"].as_str().unwrap();
    for reference in
        std::iter::once(kept.as_str()).chain(earlier_aliases.keys().map(String::as_str))
    {
        assert_eq!(
            client
                .manifest_digest(&project.repository, reference)
                .await
                .unwrap()
                .as_ref()
                .map(|digest| digest.as_str()),
            Some(recorded),
            "{reference}"
        );
    }
}

/// A registry stopped after a push: a second `build --push` with nothing changed says of each
/// image already pushed what is true (unchanged, recorded, not checked because the registry is
/// unreachable), never "not built", and asks whether the registry at its address runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_registry_leaves_pushed_images_unchanged_and_says_so() {
    prepare().await;
    let mut registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let mut args = vec!["--push"];
    assert_code(&project.build(&args), 0);
    let before = project.manifest();
    // The project's own registry configuration, as examples/offline has it: its start is named.
    std::fs::write(
        project.path().join("registry.yml"),
        format!("version: 0.1\nhttp:\n  addr: {}\n", registry.host()),
    )
    .unwrap();

    registry.stop();
    args.extend(["--push-attempts", "1"]);
    let output = project.build(&args);
    let log = text(&output);
    assert_code(&output, 4);
    let results = results_table(&log);
    assert_eq!(results.len(), 4, "{log}");
    for (image, result) in &results {
        assert_eq!(result, "unchecked", "{image}:\n{log}");
    }
    for wrong in ["not built", "skipped", "failed", "not pushed"] {
        assert!(
            !log.contains(wrong),
            "{wrong:?} said of unchanged images:\n{log}"
        );
    }
    for said in [
        "unchanged since its recorded push, registry unreachable: not checked".to_string(),
        format!(
            "hint: is the registry at {} running? This project's registry.yml configures it: `docker-registry serve registry.yml &` starts it. Once it runs, `imagegen verify` checks",
            registry.host()
        ),
        "4 images: 0 ok, 4 unchanged but not checked (registry unreachable), 0 not ok".to_string(),
    ] {
        assert!(log.contains(&said), "{said:?} not in:\n{log}");
    }
    assert_eq!(project.manifest(), before, "nothing recorded");

    // Without the registry's configuration in the project: the address, asked about.
    std::fs::remove_file(project.path().join("registry.yml")).unwrap();
    let output = project.build(&args);
    assert_code(&output, 4);
    let log = text(&output);
    assert!(
        log.contains(&format!(
            "hint: is the registry at {} running? Once it runs, `imagegen verify` checks",
            registry.host()
        )),
        "{log}"
    );
    assert!(!log.contains("docker-registry serve"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_daemon_is_one_error_and_exit_2() {
    let registry_host = "127.0.0.1:5999";
    let project_dir = {
        // Rendering needs no daemon.
        prepare().await;
        Project::new(registry_host, SELFTEST_PASS)
    };
    std::fs::write(
        project_dir.path().join("imagegen-manifest.json"),
        "{\"schema_version\": 1, \"images\": {}, \"aliases\": {}}\n",
    )
    .unwrap();
    let before = std::fs::read(project_dir.path().join("imagegen-manifest.json")).unwrap();
    let output = project_dir
        .imagegen(&["build", "--selftest-dir", "selftest"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    assert_code(&output, 2);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the Docker daemon at unix:///nonexistent/docker.sock"),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
    assert_eq!(
        std::fs::read(project_dir.path().join("imagegen-manifest.json")).unwrap(),
        before,
        "the manifest is untouched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_mid_build_keeps_finished_work_and_the_manifest_whole() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    // First a quick successful build of one image, so the manifest has something to keep.
    assert_code(
        &project.build(&["--only", "2.7.0-cuda12.6-cudnn9-runtime"]),
        0,
    );
    let before = project.manifest();
    std::fs::write(
        project.path().join("matrix.yaml"),
        std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap()
            + "labels:\n  imagegen-test.sleep: \"60\"\n",
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();

    let binary: PathBuf = assert_cmd::cargo::cargo_bin("imagegen");
    let child = std::process::Command::new(binary)
        .current_dir(project.path())
        .env("DOCKER_CONFIG", project.path().join("docker-config"))
        .env("CI", "true")
        .args(["build", "--selftest-dir", "selftest"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a build is inside the sleeping step.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let logs = project.path().join(".imagegen/logs");
    loop {
        let sleeping = std::fs::read_dir(&logs)
            .ok()
            .into_iter()
            .flatten()
            .any(|entry| {
                std::fs::read_to_string(entry.unwrap().path())
                    .is_ok_and(|text| text.contains("sleeping"))
            });
        if sleeping {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no build reached the sleeping step"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let started = std::time::Instant::now();
    // SAFETY: plain kill(2) on our own child process.
    unsafe { libc_kill(child.id() as i32, 2) };
    let output = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "Ctrl-C must stop the build promptly"
    );
    assert_eq!(output.status.code(), Some(130), "{}", text(&output));
    let log = text(&output);
    assert!(log.contains("interrupted"), "{log}");
    let after = project.manifest();
    let kept = project.tag("2.7.0", "runtime");
    assert_eq!(
        after["images"][&kept]["digest"],
        before["images"][&kept]["digest"]
    );
    assert_eq!(
        after["images"][&kept]["build_key"], before["images"][&kept]["build_key"],
        "the earlier result is intact"
    );
    let leftovers: Vec<String> = std::fs::read_dir(project.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no half-written manifest: {leftovers:?}"
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_never_appear_in_output_logs_or_manifest() {
    prepare().await;
    const USER: &str = "ci-robot";
    const PASSWORD: &str = "s3cr3t-Pa55w0rd-do-not-print";
    let registry = Registry::start_with_htpasswd(USER, PASSWORD);
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let auth = base64_encode(format!("{USER}:{PASSWORD}").as_bytes());
    let config = serde_json::json!({"auths": {registry.host(): {"auth": auth}}});
    std::fs::write(
        project.path().join("docker-config/config.json"),
        config.to_string(),
    )
    .unwrap();

    let output = project.build(&["--push", "--only", "2.7.0-cuda12.6-cudnn9-runtime"]);
    assert_code(&output, 0);
    let tag = project.tag("2.7.0", "runtime");
    let client = project.client(Some(Credentials::username_password(USER, PASSWORD)));
    assert!(
        client
            .manifest_digest(&project.repository, &tag)
            .await
            .unwrap()
            .is_some(),
        "pushed with the configured credentials"
    );

    // A wrong password fails, and says so without printing either password.
    let wrong = "wrong-Pa55-also-secret";
    let bad = serde_json::json!({"auths": {registry.host(): {"auth": base64_encode(format!("{USER}:{wrong}").as_bytes())}}});
    std::fs::write(
        project.path().join("docker-config/config.json"),
        bad.to_string(),
    )
    .unwrap();
    project.edit_matrix(
        "torch: [\"2.7.0\", \"2.8.0\"]",
        "torch: [\"2.7.1\", \"2.8.0\"]",
    );
    let failed = project.build(&[
        "--push",
        "--push-attempts",
        "1",
        "--only",
        "2.7.1-cuda12.6-cudnn9-runtime",
    ]);
    assert_code(&failed, 1);

    let mut everything = text(&output) + &text(&failed);
    for entry in std::fs::read_dir(project.path().join(".imagegen/logs")).unwrap() {
        everything.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    everything
        .push_str(&std::fs::read_to_string(project.path().join("imagegen-manifest.json")).unwrap());
    for secret in [PASSWORD.to_string(), wrong.to_string(), auth.clone()] {
        assert!(
            !everything.contains(&secret),
            "a secret leaked into output, logs or manifest"
        );
    }
    let engine = crate::support::engine().await;
    let labels = engine
        .image_labels(&format!(
            "{}/{}:{tag}",
            project.registry, project.repository
        ))
        .await
        .unwrap();
    assert!(
        !format!("{labels:?}").contains(PASSWORD),
        "no secret in image labels"
    );
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The common first build: the base image is not here and its registry cannot be reached. One
/// error for the cause (not the daemon's message once per image), what to do about it, and the
/// error in each image's log.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_base_image_is_one_error_with_what_to_do() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let nowhere = format!("127.0.0.1:{}", crate::support::free_port());
    let base = format!("{nowhere}/imagegen-test/missing-base:1");
    project.edit_matrix("runtime: imagegen-test/base:1", &format!("runtime: {base}"));
    let output = project.build(&[]);
    assert_code(&output, 1);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let log = text(&output);
    assert!(
        !log.contains("Step 1/"),
        "no build starts without its base:\n{log}"
    );
    assert_eq!(
        stdout
            .matches(&format!("base image {base} is not in the Docker daemon"))
            .count(),
        1,
        "one error for the two runtime images on the missing base:\n{stdout}"
    );
    assert_eq!(stdout.matches("connection refused").count(), 1, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{} failed, {} failed:",
            project.tag("2.7.0", "runtime"),
            project.tag("2.8.0", "runtime")
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("hint: where no registry is reachable, load it: `docker save")
            && stdout.contains("`docker load -i base.tar`")
            && stdout.contains("mirrors.base_registry"),
        "{stdout}"
    );
    assert!(stdout.contains("not built: the runtime image each builds on failed"));
    {
        for torch in ["2.7.0", "2.8.0"] {
            let tag = project.tag(torch, "runtime");
            let image_log =
                std::fs::read_to_string(project.path().join(format!(".imagegen/logs/{tag}.log")))
                    .unwrap();
            assert!(
                image_log.contains(&format!("pulling {base}"))
                    && image_log.contains("connection refused"),
                "{tag}'s log holds the error itself:\n{image_log}"
            );
            assert_eq!(project.manifest()["images"][&tag]["status"], "failed");
        }
    }
}

/// In CI (no terminal) a long step is not silence: an image that shows no line for
/// `IMAGEGEN_PROGRESS_SECONDS` gets a `still …` line naming its step and the time so far.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_step_prints_still_lines_in_ci() {
    prepare().await;
    let project = Project::new("127.0.0.1:5000", SELFTEST_PASS);
    std::fs::write(
        project.path().join("matrix.yaml"),
        std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap()
            + "labels:\n  imagegen-test.sleep: \"5\"\n",
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();
    let output = project
        .imagegen(&[
            "build",
            "--selftest-dir",
            "selftest",
            "--only",
            "2.8.0-cuda12.6-cudnn9-runtime",
        ])
        .env("IMAGEGEN_PROGRESS_SECONDS", "1")
        .output()
        .unwrap();
    assert_code(&output, 0);
    let log = text(&output);
    let still: Vec<&str> = log
        .lines()
        .filter(|line| {
            line.contains("] still building the image (docker build): at Step ")
                && line.contains("sleep 5")
        })
        .collect();
    assert!(
        still.len() >= 3,
        "a line a second while the step sleeps, naming the phase and its step:\n{log}"
    );
    assert!(
        still
            .iter()
            .all(|line| line.contains("s in this phase, ") && line.ends_with("s in)")),
        "{still:?}"
    );
    // Every heartbeat names a phase that runs, never an event that happened (`built …`,
    // `normalized …`, `pushed …`, an alias `moving …`).
    let heartbeats: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("] still "))
        .collect();
    assert!(!heartbeats.is_empty());
    for line in &heartbeats {
        let phase = line.split("] still ").nth(1).unwrap();
        assert!(
            ![
                "built ",
                "normalized ",
                "pushed ",
                "moving ",
                "exported ",
                "loaded "
            ]
            .iter()
            .any(|event| phase.starts_with(event)),
            "{line}"
        );
    }
}

/// `imagegen doctor` against the real daemon and a real registry: everything a build needs is
/// there (exit 0); then each piece missing (a daemon that is not there, a registry that does not
/// answer, uv that does not run, no self-test binaries, a base the daemon lacks) is named with
/// what to do (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn doctor_checks_each_piece_and_says_what_to_do() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let uv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin/uv");
    let uv = uv.to_str().unwrap();
    let output = project
        .imagegen(&[
            "doctor",
            "--selftest-dir",
            "selftest",
            "--uv",
            uv,
            "--min-free-gib",
            "0",
        ])
        .output()
        .unwrap();
    let log = text(&output);
    assert_code(&output, 0);
    for line in [
        "docker daemon       ok",
        &format!("registry            ok       {} answers", registry.host()),
        "base image          ok       imagegen-test/base:1 is in the daemon",
        "uv                  ok",
        "self-test binaries  ok",
        "disk                ok",
    ] {
        assert!(log.contains(line), "{line:?} in:\n{log}");
    }
    assert!(!log.contains("missing"), "{log}");

    std::fs::create_dir_all(project.path().join("empty")).unwrap();
    let matrix = std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap();
    std::fs::write(
        project.path().join("matrix.yaml"),
        matrix.replace("imagegen-test/base:1", "imagegen-test/not-here:1"),
    )
    .unwrap();
    let output = project
        .imagegen(&[
            "doctor",
            "--selftest-dir",
            "empty",
            "--uv",
            "/nonexistent/uv",
            "--registry",
            "127.0.0.1:9",
        ])
        .output()
        .unwrap();
    let log = text(&output);
    assert_code(&output, 1);
    for (line, fix) in [
        (
            "base image          missing  imagegen-test/not-here:1 is not in the daemon",
            "base image: `docker pull` or `docker load` it here",
        ),
        (
            "registry            missing  registry 127.0.0.1:9",
            "registry: start it",
        ),
        (
            "uv                  missing  /nonexistent/uv does not run",
            "uv: `imagegen lock` needs it",
        ),
        (
            "self-test binaries  missing",
            "self-test binaries: `bash selftest/build.sh` builds them",
        ),
    ] {
        assert!(log.contains(line), "{line:?} in:\n{log}");
        assert_eq!(log.matches(fix).count(), 1, "{fix:?} once in:\n{log}");
    }
    let output = project
        .imagegen(&["doctor", "--selftest-dir", "selftest", "--uv", uv])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    let log = text(&output);
    assert_code(&output, 1);
    assert!(log.contains("docker daemon       missing"), "{log}");
    assert!(log.contains("docker daemon: start Docker"), "{log}");
}

/// The README quick start's order on a machine without GPUs, with a relative `--project` (run
/// from a folder inside the project, `--project ..`): a plain `build` builds, tests (skipped) and
/// records; then `build --push` of the unchanged images builds nothing and pushes every one as it
/// is, its aliases moved in the registry; then `verify` finds the registry serving what the
/// manifest records. Nothing lands in the folder imagegen runs in. (The real build,
/// `real_build.rs`, runs the quick start's `build --push` then `verify` on the torch images in one
/// build: a push of its four torch images after a plain build would export and compress each
/// again.)
///
/// It guards `find_existing`: a devel image's raw (unnormalized) build stays in the daemon
/// untagged with the build-key label and, inherited from the normalized runtime image it is built
/// FROM, the normalized-epoch label; taking that newer image (as it once did) tagged it and failed
/// the push ("normalizing … again gave another image").
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_build_then_build_push_with_a_relative_project_pushes_without_rebuilding() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_NO_GPU);
    let elsewhere = project.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let imagegen = |args: &[&str]| {
        let mut all = vec!["--project", ".."];
        all.extend_from_slice(args);
        project
            .imagegen(&all)
            .current_dir(&elsewhere)
            .output()
            .unwrap()
    };
    let names: std::collections::BTreeSet<String> = ["2.7.0", "2.8.0"]
        .iter()
        .flat_map(|torch| ["runtime", "devel"].map(|variant| project.tag(torch, variant)))
        .collect();

    let built = imagegen(&["build", "--selftest-dir", "../selftest", "--jobs", "2"]);
    assert_code(&built, 0);
    let inspected = std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{len .RootFS.Layers}}"])
        .arg(crate::support::BASE_IMAGE)
        .output()
        .unwrap();
    let base_layers: usize = String::from_utf8_lossy(&inspected.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the base image's layers: {}", text(&inspected)));
    assert!(base_layers > 0);
    let first = project.manifest();
    for name in &names {
        let record = &first["images"][name];
        assert_eq!(record["status"], "ok", "{name}: {record:#}");
        assert_eq!(record["selftest"]["status"], "skipped", "{record:#}");
        assert!(record["digest"].is_null(), "not pushed yet: {record:#}");
        // A devel image starts with its normalized runtime image's layers: taken as they are,
        // not rewritten and compressed again. A runtime image takes at most its base's layers
        // (when the other runtime image on the same base normalized them first and normalizing
        // changed nothing), never more.
        let log =
            std::fs::read_to_string(project.path().join(format!(".imagegen/logs/{name}.log")))
                .unwrap();
        let taken = log
            .matches("is a layer this run normalized already: taken as it is")
            .count();
        if name.contains("-devel-") {
            assert!(taken > base_layers, "{name}:\n{log}");
        } else {
            assert!(taken <= base_layers, "{name}:\n{log}");
        }
    }

    let push = imagegen(&[
        "build",
        "--selftest-dir",
        "../selftest",
        "--jobs",
        "2",
        "--push",
        "--format",
        "json",
    ]);
    assert_code(&push, 0);
    let log = String::from_utf8_lossy(&push.stderr).into_owned();
    assert!(!log.contains("Step 1/"), "nothing is built again:\n{log}");
    let report: serde_json::Value = serde_json::from_slice(&push.stdout)
        .unwrap_or_else(|error| panic!("{error}:\n{}", text(&push)));
    let results = report["images"].as_array().unwrap();
    assert_eq!(results.len(), names.len(), "{report:#}");
    let manifest = project.manifest();
    let client = project.client(None);
    for result in results {
        let name = result["name"].as_str().unwrap();
        assert!(names.contains(name), "{report:#}");
        assert_eq!(result["status"], "reused", "{report:#}");
        let digest = result["digest"].as_str().unwrap();
        assert!(
            log.contains(&format!(
                "[{name}] == pushed {}/{}:{name} {digest}: ",
                project.registry, project.repository
            )),
            "{name} pushed as {digest}:\n{log}"
        );
        let record = &manifest["images"][name];
        assert_eq!(record["digest"], digest, "{record:#}");
        assert_eq!(record["build_key"], first["images"][name]["build_key"]);
        let served = client
            .manifest_digest(&project.repository, name)
            .await
            .unwrap();
        assert_eq!(
            served.as_ref().map(|digest| digest.as_str()),
            Some(digest),
            "{name}"
        );
    }
    // No GPU: the aliases wait on their images for a passing self-test; none moved.
    for name in &names {
        assert_eq!(
            manifest["images"][name]["awaiting_aliases"]
                .as_array()
                .map(Vec::len),
            Some(2),
            "{name}: {manifest:#}"
        );
    }
    assert!(
        manifest["aliases"]
            .as_object()
            .is_none_or(|aliases| aliases.is_empty()),
        "{manifest:#}"
    );

    let verify = imagegen(&["verify", "--format", "json"]);
    assert_code(&verify, 0);
    let verified: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(verified["checked"], names.len(), "{verified:#}");
    assert_eq!(
        verified["waiting_for_tests"].as_array().map(Vec::len),
        Some(names.len()),
        "{verified:#}"
    );
    let left: Vec<_> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "imagegen wrote into its working folder: {left:?}"
    );
}
