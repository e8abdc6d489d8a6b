//! Executor tests against a fake builder: ordering, parallelism, failure isolation, test-before-
//! alias policy, reuse and interruption. The Docker builder is tested against the real daemon in
//! tests/build.rs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::history::manifest::Packages;
use crate::model::knowledge::Knowledge;
use crate::model::matrix::Matrix;
use crate::pipeline::plan::{plan, select};
use crate::resolve::{resolve, ResolveOptions};

#[derive(Default)]
struct FakeBuilder {
    fail_build: BTreeSet<String>,
    fail_test: BTreeSet<String>,
    no_gpu: bool,
    existing: BTreeSet<String>,
    build_delay_ms: u64,
    calls: Mutex<Vec<String>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl FakeBuilder {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl Builder for FakeBuilder {
    async fn find_existing(&self, image: &PlannedImage) -> anyhow::Result<Option<Existing>> {
        Ok(self
            .existing
            .contains(&image.spec.name)
            .then(|| Existing::Local(format!("sha256:old-{}", image.spec.name))))
    }
    async fn build(&self, image: &PlannedImage) -> anyhow::Result<String> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        self.record(format!("build {}", image.spec.name));
        tokio::time::sleep(Duration::from_millis(self.build_delay_ms)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.record(format!("built {}", image.spec.name));
        if self.fail_build.contains(&image.spec.name) {
            anyhow::bail!(
                "Step 4/9 : RUN pip install torch\nERROR: No matching distribution found"
            );
        }
        Ok(format!("sha256:id-{}", image.spec.name))
    }
    async fn test(&self, image: &PlannedImage) -> TestOutcome {
        self.record(format!("test {}", image.spec.name));
        if self.no_gpu {
            TestOutcome::Skipped {
                summary: "no GPU on this host".into(),
            }
        } else if self.fail_test.contains(&image.spec.name) {
            TestOutcome::Fail {
                summary: "bf16 matmul out of tolerance".into(),
                report: None,
            }
        } else {
            TestOutcome::Pass {
                summary: "all checks passed".into(),
                report: None,
            }
        }
    }
    async fn contents(&self, image: &PlannedImage) -> anyhow::Result<Option<Packages>> {
        self.record(format!("contents {}", image.spec.name));
        Ok(Some(Packages {
            pip: vec![format!("torch=={}", image.spec.torch)],
            os: vec!["libc6=2.39".into()],
        }))
    }
    async fn push(
        &self,
        repository: &str,
        tag: &str,
        _build_key: Option<&Digest>,
    ) -> anyhow::Result<Digest> {
        self.record(format!("push {repository}:{tag}"));
        Ok(Digest::of(format!("digest-{tag}").as_bytes()))
    }
    async fn tag(&self, source: &str, _repository: &str, tag: &str) -> anyhow::Result<()> {
        self.record(format!("tag {source} {tag}"));
        Ok(())
    }
}

fn test_plan() -> Plan {
    let matrix = Matrix::parse(
        "registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu24.04]\n",
        "m.yaml",
    )
    .unwrap();
    let specs = resolve(
        &matrix,
        &Knowledge::test_fixture(),
        &ResolveOptions::default(),
    )
    .images;
    plan(
        &select(&specs, None, None),
        &BTreeMap::new(),
        &crate::history::manifest::Manifest::new(),
        None,
    )
}

fn options(jobs: usize) -> ExecOptions {
    ExecOptions {
        jobs,
        push: true,
        test: true,
        require_gpu: false,
        move_untested_aliases: false,
    }
}

async fn run(builder: &Arc<FakeBuilder>, options: &ExecOptions) -> Vec<ImageResult> {
    execute(
        &test_plan(),
        Arc::clone(builder),
        options,
        std::future::pending(),
        |_| {},
    )
    .await
}

const RUNTIME_126: &str = "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04";
const DEVEL_126: &str = "2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04";

#[tokio::test]
async fn builds_in_parallel_with_devel_after_its_runtime() {
    let builder = Arc::new(FakeBuilder {
        build_delay_ms: 30,
        ..Default::default()
    });
    let results = run(&builder, &options(2)).await;
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|r| r.status == Status::Built),
        "{results:#?}"
    );
    assert_eq!(
        builder.max_running.load(Ordering::SeqCst),
        2,
        "two builds at once with --jobs 2"
    );
    let calls = builder.calls();
    let position = |call: &str| {
        calls
            .iter()
            .position(|c| c == call)
            .unwrap_or_else(|| panic!("no {call} in {calls:#?}"))
    };
    assert!(position(&format!("built {RUNTIME_126}")) < position(&format!("build {DEVEL_126}")));
    // Tested, pushed, then aliases tagged and pushed.
    assert!(
        position(&format!("test {RUNTIME_126}"))
            < position(&format!("push r.example/t/p:{RUNTIME_126}"))
    );
    assert!(
        position(&format!("push r.example/t/p:{RUNTIME_126}"))
            < position("push r.example/t/p:2.7-cuda12.6-runtime")
    );
    let runtime = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(
        runtime.digest,
        Some(Digest::of(format!("digest-{RUNTIME_126}").as_bytes()))
    );
    assert!(
        runtime.aliases_moved.contains(&"latest".to_string())
            || results
                .iter()
                .any(|r| r.aliases_moved.contains(&"latest".to_string()))
    );
}

#[tokio::test]
async fn jobs_one_is_serial() {
    let builder = Arc::new(FakeBuilder {
        build_delay_ms: 10,
        ..Default::default()
    });
    run(&builder, &options(1)).await;
    assert_eq!(builder.max_running.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn one_failed_build_does_not_stop_the_others() {
    let builder = Arc::new(FakeBuilder {
        fail_build: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let results = run(&builder, &options(2)).await;
    let status = |name: &str| results.iter().find(|r| r.name == name).unwrap().status;
    assert_eq!(status(RUNTIME_126), Status::Failed);
    assert_eq!(
        status(DEVEL_126),
        Status::Skipped,
        "its devel image is not attempted"
    );
    assert_eq!(
        status("2.7.1-cuda12.8-cudnn9-runtime-ubuntu24.04"),
        Status::Built
    );
    assert_eq!(
        status("2.7.1-cuda12.8-cudnn9-devel-ubuntu24.04"),
        Status::Built
    );
    let failed = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(failed.failed_stage.as_deref(), Some("build"));
    assert!(failed
        .error
        .as_deref()
        .unwrap()
        .contains("Step 4/9 : RUN pip install torch"));
    assert!(!builder
        .calls()
        .iter()
        .any(|c| c.contains(&format!("push r.example/t/p:{RUNTIME_126}"))));
}

#[tokio::test]
async fn a_failed_test_means_no_push_and_no_alias() {
    let builder = Arc::new(FakeBuilder {
        fail_test: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let results = run(&builder, &options(2)).await;
    let failed = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.failed_stage.as_deref(), Some("test"));
    assert!(failed.aliases_moved.is_empty());
    let calls = builder.calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("push") && c.contains("cuda12.6-cudnn9-runtime")),
        "{calls:#?}"
    );
    assert!(
        !calls.iter().any(|c| c.ends_with(" 2.7-cuda12.6-runtime")),
        "{calls:#?}"
    );
}

#[tokio::test]
async fn without_gpus_images_are_pushed_but_aliases_hold() {
    let builder = Arc::new(FakeBuilder {
        no_gpu: true,
        ..Default::default()
    });
    let results = run(&builder, &options(2)).await;
    for result in &results {
        assert_eq!(result.status, Status::Built);
        assert!(result.aliases_moved.is_empty());
        assert!(result.digest.is_some());
    }
    let held: Vec<&(String, String)> = results.iter().flat_map(|r| &r.aliases_held).collect();
    assert!(
        !held.is_empty()
            && held
                .iter()
                .all(|(_, why)| why.contains("self-test skipped")),
        "{held:?}"
    );

    let moving = ExecOptions {
        move_untested_aliases: true,
        ..options(2)
    };
    let results = run(
        &Arc::new(FakeBuilder {
            no_gpu: true,
            ..Default::default()
        }),
        &moving,
    )
    .await;
    assert!(results.iter().any(|r| !r.aliases_moved.is_empty()));

    let strict = ExecOptions {
        require_gpu: true,
        ..options(2)
    };
    let results = run(
        &Arc::new(FakeBuilder {
            no_gpu: true,
            ..Default::default()
        }),
        &strict,
    )
    .await;
    assert!(results.iter().all(|r| !r.succeeded()));
    assert!(results[0]
        .error
        .as_deref()
        .unwrap()
        .contains("--require-gpu"));
}

#[tokio::test]
async fn existing_images_are_reused_not_rebuilt() {
    let builder = Arc::new(FakeBuilder {
        existing: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let results = run(&builder, &options(2)).await;
    assert_eq!(
        results
            .iter()
            .find(|r| r.name == RUNTIME_126)
            .unwrap()
            .status,
        Status::Reused
    );
    assert!(!builder.calls().contains(&format!("build {RUNTIME_126}")));
    assert!(builder.calls().contains(&format!("build {DEVEL_126}")));
}

#[tokio::test]
async fn cancellation_reports_what_was_interrupted() {
    let builder = Arc::new(FakeBuilder {
        build_delay_ms: 10_000,
        ..Default::default()
    });
    let mut seen = Vec::new();
    let results = execute(
        &test_plan(),
        Arc::clone(&builder),
        &options(2),
        tokio::time::sleep(Duration::from_millis(50)),
        |r| seen.push(r.status),
    )
    .await;
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|r| r.status == Status::Interrupted),
        "{results:#?}"
    );
    assert_eq!(seen.len(), 4, "every interrupted image is reported");
    assert!(!builder.calls().iter().any(|c| c.starts_with("push")));
}
