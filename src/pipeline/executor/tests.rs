//! Executor tests against a fake builder and a journal in memory: ordering, parallelism, failure
//! isolation, test-before-alias policy, reuse, interruption, and what is written down when (the
//! full tag before its aliases, each alias move before and after). The Docker builder is tested
//! against the real daemon in tests/it/build.rs and tests/it/faults.rs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::*;
use crate::history::ledger::{changed, CommitToken, MemoryStore, Transaction};
use crate::history::manifest::{ImageSize, Manifest, Packages};
use crate::pipeline::plan::{plan, PlanOptions};
use crate::pipeline::record::{record, AliasesMoved};
use crate::resolve::select::select;

#[derive(Default)]
struct FakeBuilder {
    fail_base: BTreeSet<String>,
    fail_build: BTreeSet<String>,
    fail_test: BTreeSet<String>,
    no_gpu: bool,
    /// The GPU a passing test reports in its inventory (none: a pass without a report).
    gpu_name: Option<String>,
    existing: BTreeSet<String>,
    /// Alias moves that fail (the registry died).
    fail_alias: BTreeSet<String>,
    /// The registry does not answer: every push fails as unreachable.
    registry_down: bool,
    build_delay_ms: u64,
    /// What the registry serves for each alias.
    served: Mutex<BTreeMap<String, Digest>>,
    calls: Mutex<Vec<String>>,
    /// The references of the images built and not loaded (the plan's `load: false`).
    left_out: Mutex<Vec<String>>,
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
    async fn find_existing(
        &self,
        image: &PlannedImage,
        _in_registry: Option<&Digest>,
    ) -> anyhow::Result<Option<Existing>> {
        Ok(self
            .existing
            .contains(&image.spec.name)
            .then(|| Existing::Local(Digest::of(format!("old-{}", image.spec.name).as_bytes()))))
    }
    async fn resolve_base(
        &self,
        image: &PlannedImage,
        base: &str,
        _pinned_id: Option<&Digest>,
        built_first: bool,
    ) -> anyhow::Result<()> {
        self.record(format!("base {} {base} {built_first}", image.spec.name));
        if self.fail_base.contains(&image.spec.name) {
            anyhow::bail!("base image {base} is not in the Docker daemon");
        }
        Ok(())
    }
    async fn build(
        &self,
        image: &PlannedImage,
        _wheels: Wheels,
        load: bool,
    ) -> anyhow::Result<Digest> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        self.record(format!("build {}", image.spec.name));
        if !load {
            self.left_out.lock().unwrap().push(image.reference.clone());
        }
        tokio::time::sleep(Duration::from_millis(self.build_delay_ms)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.record(format!("built {}", image.spec.name));
        if self.fail_build.contains(&image.spec.name) {
            anyhow::bail!(
                "Step 4/9 : RUN pip install torch\nERROR: No matching distribution found"
            );
        }
        Ok(Digest::of(format!("id-{}", image.spec.name).as_bytes()))
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
                report: self.gpu_name.as_ref().map(|gpu| {
                    serde_json::json!({"overall": "pass", "checks": [
                        {"name": "inventory", "status": "pass", "gpus": [{"index": 0, "name": gpu}]}
                    ]})
                }),
            }
        }
    }
    async fn contents(&self, image: &PlannedImage) -> anyhow::Result<Option<Packages>> {
        self.record(format!("contents {}", image.spec.name));
        Ok(Some(Packages {
            pip: vec![format!("torch=={}", image.spec.torch)],
            os: vec!["libc6=2.39".into()],
            ..Packages::default()
        }))
    }
    async fn push(
        &self,
        repository: &str,
        tag: &str,
        _build_key: Option<&Digest>,
    ) -> anyhow::Result<Digest> {
        self.record(format!("push {repository}:{tag}"));
        if self.registry_down {
            return Err(anyhow::Error::new(FakeUnreachable).context(format!("pushing {tag}")));
        }
        Ok(Digest::of(format!("digest-{tag}").as_bytes()))
    }
    fn size(&self, image_id: &Digest) -> Option<ImageSize> {
        // Sizes of the images this builder made: a reused one (`old-…`) is not measured.
        let built = self.calls().iter().any(|call| {
            call.strip_prefix("built ")
                .is_some_and(|name| Digest::of(format!("id-{name}").as_bytes()) == *image_id)
        });
        built.then(|| fake_size(image_id))
    }
    async fn tag(&self, source: &str, _repository: &str, tag: &str) -> anyhow::Result<()> {
        self.record(format!("tag {source} {tag}"));
        Ok(())
    }
    fn unreachable_registry(&self, error: &anyhow::Error) -> Option<Unreachable> {
        error
            .chain()
            .any(|cause| cause.is::<FakeUnreachable>())
            .then(|| Unreachable {
                host: "r.example".into(),
                reason: "connection refused".into(),
            })
    }
}

/// The size the fake builder reports for an image it built, different for each image id.
fn fake_size(image_id: &Digest) -> ImageSize {
    let seed = u64::from(image_id.hex().as_bytes()[0]);
    ImageSize {
        compressed_bytes: 1_000_000 * seed,
        unpacked_bytes: 2_600_000 * seed,
        layers: 4,
        parts: Vec::new(),
    }
}

/// The fake registry's "connection refused".
#[derive(Debug, thiserror::Error)]
#[error("registry r.example is unreachable: connection refused")]
struct FakeUnreachable;

impl AliasRegistry for FakeBuilder {
    async fn served(&self, _repository: &str, alias: &str) -> anyhow::Result<Option<Digest>> {
        Ok(self.served.lock().unwrap().get(alias).cloned())
    }
    async fn point(&self, repository: &str, alias: &str, digest: &Digest) -> anyhow::Result<()> {
        if self.fail_alias.contains(alias) {
            anyhow::bail!("registry unreachable while moving {alias}");
        }
        self.record(format!("push {repository}:{alias}"));
        self.served
            .lock()
            .unwrap()
            .insert(alias.to_string(), digest.clone());
        Ok(())
    }
}

/// The journal over a manifest in memory, with the same folds the manifest file gets, and a log
/// of what was written in which order.
#[derive(Default)]
struct MemoryJournal {
    store: MemoryStore,
    log: Mutex<Vec<String>>,
    /// Images whose signing fails.
    refuse_signing: BTreeSet<String>,
}

impl MemoryJournal {
    fn with(manifest: Manifest) -> MemoryJournal {
        MemoryJournal {
            store: MemoryStore::new(manifest),
            ..Default::default()
        }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    fn manifest(&self) -> Manifest {
        self.store.manifest()
    }
}

impl Journal for MemoryJournal {
    async fn claim(&self, image: &PlannedImage) -> anyhow::Result<Claim> {
        self.log
            .lock()
            .unwrap()
            .push(format!("claim {}", image.spec.name));
        Ok(Box::new(()))
    }
    fn image(&self, image: &PlannedImage, result: &ImageResult) -> anyhow::Result<()> {
        self.log.lock().unwrap().push(format!(
            "image {} {:?} {}",
            image.spec.name,
            result.status,
            result.digest.is_some()
        ));
        let mut transaction = Transaction::begin(self)?;
        record(
            &mut transaction,
            image,
            result,
            None,
            "t1",
            AliasesMoved::InRegistry,
        );
        transaction.commit()
    }
    async fn attest(&self, image: &PlannedImage, digest: &Digest) -> anyhow::Result<()> {
        let recorded = self
            .manifest()
            .images()
            .values()
            .any(|record| record.digest.as_ref() == Some(digest));
        anyhow::ensure!(
            recorded,
            "{}: signed before its digest was recorded",
            image.spec.name
        );
        self.log
            .lock()
            .unwrap()
            .push(format!("sign {}", image.spec.name));
        if self.refuse_signing.contains(&image.spec.name) {
            anyhow::bail!("the registry refused the .att manifest");
        }
        Ok(())
    }
}

impl Store for MemoryJournal {
    fn read(&self) -> anyhow::Result<Manifest> {
        self.store.read()
    }
    fn lock(&self) -> anyhow::Result<Claim> {
        self.store.lock()
    }
    /// Logs the intents begun (`intent A`) and the moves recorded (`moved A`) by each write.
    fn write(&self, manifest: &Manifest, token: CommitToken) -> anyhow::Result<()> {
        let before = self.store.manifest();
        let mut log = self.log.lock().unwrap();
        for alias in manifest.pending_aliases().keys() {
            if !before.pending_aliases().contains_key(alias) {
                log.push(format!("intent {alias}"));
            }
        }
        for (alias, record) in manifest.aliases() {
            if before.aliases().get(alias) != Some(record) {
                log.push(format!("moved {alias}"));
            }
        }
        self.store.write(manifest, token)
    }
    fn hold_alias<'a>(&'a self, alias: &'a str) -> BoxFuture<'a, anyhow::Result<Claim>> {
        self.log.lock().unwrap().push(format!("hold {alias}"));
        self.store.hold_alias(alias)
    }
    fn try_hold_alias(&self, alias: &str) -> anyhow::Result<Result<Claim, String>> {
        self.store.try_hold_alias(alias)
    }
}

/// Two runtime images and their devel images, planned with `options`, the test policy wanting
/// passes on `require` (any GPU when empty).
fn test_plan_with(options: &PlanOptions, require: &[String]) -> Plan {
    let specs = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu24.04]\n");
    plan(
        &specs,
        &select(&specs, None, None),
        &BTreeMap::new(),
        &crate::history::manifest::Manifest::new(),
        None,
        require,
        options,
    )
}

fn test_plan() -> Plan {
    test_plan_with(&options(1).plan, &[])
}

/// How a test runs: the executor's options, and the build's flags the plan is made with.
#[derive(Clone)]
struct Options {
    exec: ExecOptions,
    plan: PlanOptions,
}

/// `build --push --jobs N` with a signing key.
fn options(jobs: usize) -> Options {
    Options {
        exec: ExecOptions {
            jobs,
            owner: crate::history::alias_transaction::Owner {
                run: "test-run".into(),
                by: "pid 1 (test)".into(),
            },
            registry_start: BTreeMap::new(),
        },
        plan: PlanOptions {
            push: true,
            sign: true,
            ..PlanOptions::default()
        },
    }
}

async fn run(builder: &Arc<FakeBuilder>, options: &Options) -> Vec<ImageResult> {
    run_with(builder, &Arc::new(MemoryJournal::default()), options).await
}

async fn run_with(
    builder: &Arc<FakeBuilder>,
    journal: &Arc<MemoryJournal>,
    options: &Options,
) -> Vec<ImageResult> {
    execute(
        &test_plan_with(&options.plan, &[]),
        Arc::clone(builder),
        Arc::clone(journal),
        &options.exec,
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
    assert_eq!(failed.failed_stage, Some(Stage::Build));
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
    assert_eq!(failed.failed_stage, Some(Stage::Test));
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
async fn a_pass_on_one_gpu_model_moves_aliases_only_when_it_is_all_the_policy_wants() {
    let builder = Arc::new(FakeBuilder {
        gpu_name: Some("NVIDIA H200".into()),
        ..Default::default()
    });
    let journal = Arc::new(MemoryJournal::default());
    let plan = test_plan_with(&options(2).plan, &["H100".into(), "H200".into()]);
    let results = execute(
        &plan,
        builder.clone(),
        journal.clone(),
        &options(2).exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    let waiting: usize = results.iter().map(|r| r.aliases_awaiting.len()).sum();
    assert!(waiting > 0);
    for result in &results {
        assert!(result.aliases_moved.is_empty(), "{result:?}");
        // Waiting for the H100's result, which is not a hold.
        assert!(result.aliases_held.is_empty(), "{result:?}");
        if !result.aliases_awaiting.is_empty() {
            assert_eq!(result.awaiting_results_on, vec!["H100"], "{result:?}");
        }
    }
    // The same pass when the policy wants an H200 only: the aliases move.
    let builder = Arc::new(FakeBuilder {
        gpu_name: Some("NVIDIA H200".into()),
        ..Default::default()
    });
    let plan = test_plan_with(&options(2).plan, &["H200".into()]);
    let results = execute(
        &plan,
        builder,
        Arc::new(MemoryJournal::default()),
        &options(2).exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    let moved: usize = results.iter().map(|r| r.aliases_moved.len()).sum();
    assert_eq!(moved, waiting);
    assert!(results.iter().all(|r| r.aliases_awaiting.is_empty()));
}

#[tokio::test]
async fn without_gpus_images_are_pushed_and_aliases_wait_for_test_results() {
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
    // They wait for a test on any GPU; none is held.
    let held: Vec<&(String, String)> = results.iter().flat_map(|r| &r.aliases_held).collect();
    assert!(held.is_empty(), "{held:?}");
    let awaiting: usize = results.iter().map(|r| r.aliases_awaiting.len()).sum();
    assert!(awaiting > 0);
    for result in results.iter().filter(|r| !r.aliases_awaiting.is_empty()) {
        assert_eq!(result.awaiting_results_on, vec!["any GPU"], "{result:?}");
    }

    let moving = Options {
        plan: PlanOptions {
            move_untested_aliases: true,
            ..options(2).plan
        },
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

    let strict = Options {
        plan: PlanOptions {
            require_gpu: true,
            ..options(2).plan
        },
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

/// `wheels: host`, pushed and untested: the runtime image is pushed from memory and never
/// loaded, so its aliases move in the registry alone (a daemon tag of an image the daemon does not
/// hold would fail the image after its alias moved).
#[tokio::test]
async fn an_image_left_out_of_the_daemon_moves_its_aliases_in_the_registry_alone() {
    let builder = Arc::new(FakeBuilder::default());
    let options = Options {
        plan: PlanOptions {
            test: false,
            move_untested_aliases: true,
            wheels: crate::model::matrix::WheelSource::Host,
            ..options(2).plan
        },
        ..options(2)
    };
    // Runtime images alone: none is built FROM another, so none is loaded.
    let specs = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
    let plan = plan(
        &specs,
        &select(&specs, None, None),
        &BTreeMap::new(),
        &crate::history::manifest::Manifest::new(),
        None,
        &[],
        &options.plan,
    );
    let results = execute(
        &plan,
        Arc::clone(&builder),
        Arc::new(MemoryJournal::default()),
        &options.exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    let left_out = builder.left_out.lock().unwrap().clone();
    assert!(
        !left_out.is_empty(),
        "no image of the plan was left out of the daemon"
    );
    let calls = builder.calls();
    let mut moved = 0;
    for result in &results {
        assert!(result.succeeded(), "{result:?}");
        let reference = calls
            .iter()
            .find_map(|call| {
                call.strip_prefix("build ")
                    .filter(|name| *name == result.name)
            })
            .map(|_| result.name.clone());
        assert!(reference.is_some(), "{} was built: {calls:#?}", result.name);
    }
    for reference in &left_out {
        let result = results
            .iter()
            .find(|result| {
                reference.ends_with(&format!(":{}", result.tag)) || reference.contains(&result.name)
            })
            .unwrap_or_else(|| panic!("{reference} in no result"));
        moved += result.aliases_moved.len();
        for alias in &result.aliases_moved {
            assert!(
                !calls
                    .iter()
                    .any(|call| call.starts_with(&format!("tag {reference} "))),
                "{alias}: {reference} tagged in the daemon, which does not hold it: {calls:#?}"
            );
        }
    }
    assert!(
        moved > 0,
        "no alias of an image left out moved: {results:#?}"
    );
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
        Arc::new(MemoryJournal::default()),
        &options(2).exec,
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

#[tokio::test]
async fn the_full_tag_is_written_down_before_its_aliases_and_each_alias_before_and_after() {
    let builder = Arc::new(FakeBuilder::default());
    let journal = Arc::new(MemoryJournal::default());
    run_with(&builder, &journal, &options(1)).await;
    let log = journal.log();
    let position = |entry: &str| {
        log.iter()
            .position(|e| e == entry)
            .unwrap_or_else(|| panic!("no {entry} in {log:#?}"))
    };
    let pushed = position(&format!("image {RUNTIME_126} Built true"));
    assert!(position(&format!("claim {RUNTIME_126}")) < pushed);
    let signed = position(&format!("sign {RUNTIME_126}"));
    assert!(pushed < signed, "signed after its full tag is recorded");
    assert!(
        signed < position("intent 2.7-cuda12.6-runtime"),
        "and before its alias moves"
    );
    assert!(position("intent 2.7-cuda12.6-runtime") < position("moved 2.7-cuda12.6-runtime"));
    let manifest = journal.manifest();
    assert!(manifest.pending_aliases().is_empty(), "every move finished");
    assert_eq!(
        manifest.aliases()["2.7-cuda12.6-runtime"].digest,
        Some(Digest::of(format!("digest-{RUNTIME_126}").as_bytes()))
    );
}

#[tokio::test]
async fn a_failed_alias_push_keeps_the_pushed_full_tag_and_leaves_the_move_pending() {
    let builder = Arc::new(FakeBuilder {
        fail_alias: ["2.7-cuda12.6-runtime".to_string()].into(),
        ..Default::default()
    });
    let journal = Arc::new(MemoryJournal::default());
    let results = run_with(&builder, &journal, &options(1)).await;
    let failed = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.failed_stage, Some(Stage::Alias));
    assert!(
        failed.error.as_deref().unwrap().contains("pending"),
        "{failed:?}"
    );
    let digest = Digest::of(format!("digest-{RUNTIME_126}").as_bytes());
    assert_eq!(failed.digest.as_ref(), Some(&digest));
    let manifest = journal.manifest();
    let record = &manifest.images()[RUNTIME_126];
    assert_eq!(
        record.status,
        crate::history::manifest::RecordStatus::Ok,
        "pushed, so recorded as good"
    );
    assert_eq!(record.digest.as_ref(), Some(&digest), "with its digest");
    assert!(record
        .last_error
        .as_deref()
        .unwrap()
        .contains("registry unreachable"));
    assert_eq!(
        manifest.pending_aliases()["2.7-cuda12.6-runtime"].to,
        digest,
        "the move begun is written down as pending"
    );
    assert!(!manifest.aliases().contains_key("2.7-cuda12.6-runtime"));
}

#[tokio::test]
async fn a_failed_signing_fails_the_image_and_holds_its_aliases() {
    let builder = Arc::new(FakeBuilder::default());
    let journal = Arc::new(MemoryJournal {
        refuse_signing: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let results = run_with(&builder, &journal, &options(1)).await;
    let failed = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.failed_stage, Some(Stage::Sign));
    assert!(
        failed
            .error
            .as_deref()
            .unwrap()
            .contains("refused the .att"),
        "{failed:?}"
    );
    assert_eq!(failed.aliases_moved, Vec::<String>::new());
    let held: Vec<&str> = failed
        .aliases_held
        .iter()
        .map(|(a, _)| a.as_str())
        .collect();
    assert_eq!(
        held,
        [
            "2.7-cuda12.6-runtime",
            "2.7-cuda12.6-runtime-ubuntu24.04",
            "latest"
        ]
    );
    assert!(failed
        .aliases_held
        .iter()
        .all(|(_, why)| why == "not moved: the image is not signed"));
    let digest = Digest::of(format!("digest-{RUNTIME_126}").as_bytes());
    let manifest = journal.manifest();
    assert_eq!(
        manifest.images()[RUNTIME_126].digest.as_ref(),
        Some(&digest),
        "the pushed full tag stays recorded"
    );
    for alias in &held {
        assert!(
            !manifest.aliases().contains_key(*alias),
            "{alias} not moved"
        );
        assert!(!manifest.pending_aliases().contains_key(*alias));
        let pushed_alias = format!(":{alias}");
        assert!(!builder.calls().iter().any(|c| c.ends_with(&pushed_alias)));
    }
    // The other pushed images were signed and their aliases moved.
    let signed = journal
        .log()
        .iter()
        .filter(|e| e.starts_with("sign "))
        .count();
    let pushed: Vec<&ImageResult> = results.iter().filter(|r| r.digest.is_some()).collect();
    assert!(pushed.len() >= 2, "{results:?}");
    assert_eq!(signed, pushed.len());
    assert!(pushed
        .iter()
        .filter(|r| r.name != RUNTIME_126)
        .all(|r| r.succeeded() && !r.aliases_moved.is_empty()));
}

#[tokio::test]
async fn an_alias_another_run_moved_forward_meanwhile_is_held_not_moved_back() {
    let builder = Arc::new(FakeBuilder::default());
    // Another run recorded 2.7-cuda12.6-runtime at a newer torch release after this plan was made.
    let mut newer =
        crate::pipeline::record::image_record(&test_plan().images[0].spec, &Digest::of(b"k"), "t0");
    newer.tag = "2.7.9-cuda12.6-cudnn9-runtime-ubuntu24.04".into();
    newer.torch = "2.7.9".into();
    newer.digest = Some(Digest::of(b"newer"));
    let journal = Arc::new(MemoryJournal::with(changed(
        Manifest::new(),
        |transaction| transaction.record_image(newer, &["2.7-cuda12.6-runtime".into()], "t0"),
    )));
    let results = run_with(&builder, &journal, &options(1)).await;
    let runtime = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(runtime.status, Status::Built);
    assert!(runtime
        .aliases_held
        .iter()
        .any(|(alias, why)| alias == "2.7-cuda12.6-runtime" && why.contains("backwards")));
    assert!(!runtime
        .aliases_moved
        .contains(&"2.7-cuda12.6-runtime".to_string()));
    assert_eq!(
        journal.manifest().aliases()["2.7-cuda12.6-runtime"].digest,
        Some(Digest::of(b"newer"))
    );
}

#[tokio::test]
async fn an_interruption_names_the_step_each_image_was_at() {
    let builder = Arc::new(FakeBuilder {
        build_delay_ms: 10_000,
        ..Default::default()
    });
    let results = execute(
        &test_plan(),
        Arc::clone(&builder),
        Arc::new(MemoryJournal::default()),
        &options(1).exec,
        tokio::time::sleep(Duration::from_millis(50)),
        |_| {},
    )
    .await;
    assert_eq!(results.len(), 4, "{results:#?}");
    let first = &results[0];
    assert_eq!(first.status, Status::Interrupted);
    assert!(
        first
            .error
            .as_deref()
            .unwrap()
            .contains("interrupted while building"),
        "{first:?}"
    );
    assert!(results[1..]
        .iter()
        .all(|r| r.error.as_deref() == Some("not started")));
}

/// One image recorded twice in one run (after its push, after its aliases), a second apart: the
/// build and self-test times stay those of the first write, which the signed statements carry.
#[test]
fn recording_an_image_again_keeps_its_build_and_test_times() {
    let plan = test_plan();
    let image = &plan.images[0];
    let mut result = ImageResult::new(&image.spec.name, &image.spec.tag, Status::Built);
    result.image_id = Some(Digest::parse(&format!("sha256:{}", "1".repeat(64))).unwrap());
    result.digest = Some(Digest::of(b"pushed"));
    result.test = Some(TestOutcome::Skipped {
        summary: "no GPU".into(),
    });
    let record_at = |manifest: Manifest, result: &ImageResult, at: &str| {
        changed(manifest, |transaction| {
            record(
                transaction,
                image,
                result,
                None,
                at,
                AliasesMoved::InRegistry,
            )
        })
    };
    let manifest = record_at(Manifest::new(), &result, "2026-12-02T10:00:00Z");
    let manifest = record_at(manifest, &result, "2026-12-02T10:00:01Z");
    let recorded = &manifest.images()[&image.spec.tag];
    assert_eq!(recorded.built_at, "2026-12-02T10:00:00Z");
    assert_eq!(
        recorded.selftest.as_ref().unwrap().at,
        "2026-12-02T10:00:00Z"
    );
    // Another build of the same tag (another image id) is recorded at its own time.
    result.image_id = Some(Digest::parse(&format!("sha256:{}", "2".repeat(64))).unwrap());
    let manifest = record_at(manifest, &result, "2026-12-02T11:00:00Z");
    let recorded = &manifest.images()[&image.spec.tag];
    assert_eq!(recorded.built_at, "2026-12-02T11:00:00Z");
    assert_eq!(
        recorded.selftest.as_ref().unwrap().at,
        "2026-12-02T11:00:00Z"
    );
}

/// A flavour image is built after its runtime image, and its record names its flavour and the
/// runtime image it was built FROM, with the digest the run pushed that image under; a record of
/// the parent that is not the one the flavour was built on gives the tag but no digest.
#[tokio::test]
async fn a_flavour_is_recorded_with_its_flavour_and_the_digest_of_its_parent() {
    let specs = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\nflavours:\n  tools: {apt: [git]}\n");
    let plan = plan(
        &specs,
        &select(&specs, None, None),
        &BTreeMap::new(),
        &Manifest::new(),
        None,
        &[],
        &options(2).plan,
    );
    let flavour_tag = format!("{RUNTIME_126}-tools");
    let builder = Arc::new(FakeBuilder::default());
    let journal = Arc::new(MemoryJournal::default());
    let results = execute(
        &plan,
        Arc::clone(&builder),
        Arc::clone(&journal),
        &options(2).exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    assert!(
        results.iter().all(|r| r.status == Status::Built),
        "{results:#?}"
    );
    let calls = builder.calls();
    let position = |call: &str| calls.iter().position(|c| c == call).unwrap();
    assert!(position(&format!("built {RUNTIME_126}")) < position(&format!("build {flavour_tag}")));
    let manifest = journal.manifest();
    let parent = &manifest.images()[RUNTIME_126];
    assert_eq!(parent.flavour, None);
    let flavour = manifest.images()[&flavour_tag].flavour.clone().unwrap();
    assert_eq!(flavour.name, "tools");
    assert_eq!(flavour.parent, RUNTIME_126);
    assert_eq!(
        flavour.parent_digest,
        Some(Digest::of(format!("digest-{RUNTIME_126}").as_bytes()))
    );
    assert_eq!(flavour.parent_digest, parent.digest);
    assert_eq!(flavour.parent_image_id, parent.image_id);
    assert!(flavour.parent_image_id.is_some());
    assert_eq!(
        flavour.describe(),
        format!(
            "tools FROM {RUNTIME_126}@{}",
            parent.digest.clone().unwrap()
        )
    );

    // The parent's record is of another build (another fingerprint): no digest is claimed.
    let mut another = manifest.images()[RUNTIME_126].clone();
    another.fingerprint = Digest::of(b"another build");
    let stale = changed(manifest.clone(), |transaction| {
        transaction.record_image(another, &[], "t2")
    });
    let flavour_planned = plan
        .images
        .iter()
        .find(|i| i.spec.tag == flavour_tag)
        .unwrap();
    let result = results.iter().find(|r| r.name == flavour_tag).unwrap();
    let stale = changed(stale, |transaction| {
        record(
            transaction,
            flavour_planned,
            result,
            None,
            "t2",
            AliasesMoved::InRegistry,
        )
    });
    let flavour = stale.images()[&flavour_tag].flavour.clone().unwrap();
    assert_eq!(flavour.describe(), format!("tools FROM {RUNTIME_126}"));
    assert_eq!(
        (flavour.parent_digest, flavour.parent_image_id),
        (None, None)
    );
}

/// A built image carries the size its builder measured, into its result and its record; a
/// reused image, which the builder does not measure again, carries the size the manifest records
/// for its build key, and none when the manifest records none.
#[tokio::test]
async fn sizes_are_measured_for_built_images_and_kept_for_reused_ones() {
    let builder = Arc::new(FakeBuilder {
        existing: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let journal = Arc::new(MemoryJournal::default());
    let results = run_with(&builder, &journal, &options(2)).await;
    let result = |results: &[ImageResult], name: &str| {
        results.iter().find(|r| r.name == name).unwrap().clone()
    };
    let devel = result(&results, DEVEL_126);
    assert_eq!(devel.status, Status::Built);
    let measured = fake_size(devel.image_id.as_ref().unwrap());
    assert_eq!(devel.size, Some(measured.clone()));
    let manifest = journal.manifest();
    assert_eq!(manifest.images()[DEVEL_126].size, Some(measured));
    assert_eq!(result(&results, RUNTIME_126).status, Status::Reused);
    assert_eq!(result(&results, RUNTIME_126).size, None);
    assert_eq!(manifest.images()[RUNTIME_126].size, None);

    // The manifest knows the reused image's size (an earlier run measured it): kept.
    let recorded = ImageSize {
        compressed_bytes: 7,
        unpacked_bytes: 9,
        layers: 2,
        parts: Vec::new(),
    };
    let mut measured_before = manifest.images()[RUNTIME_126].clone();
    measured_before.size = Some(recorded.clone());
    let manifest = changed(manifest, |transaction| {
        transaction.record_image(measured_before, &[], "t1")
    });
    let specs = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu24.04]\n");
    let again = plan(
        &specs,
        &select(&specs, None, None),
        &BTreeMap::new(),
        &manifest,
        None,
        &[],
        &options(2).plan,
    );
    let planned = again
        .images
        .iter()
        .find(|i| i.spec.tag == RUNTIME_126)
        .unwrap();
    assert_eq!(planned.recorded_size, Some(recorded.clone()));
    let builder = Arc::new(FakeBuilder {
        existing: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let journal = Arc::new(MemoryJournal::with(manifest));
    let results = execute(
        &again,
        Arc::clone(&builder),
        Arc::clone(&journal),
        &options(2).exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    assert_eq!(result(&results, RUNTIME_126).status, Status::Reused);
    assert_eq!(result(&results, RUNTIME_126).size, Some(recorded.clone()));
    assert_eq!(
        journal.manifest().images()[RUNTIME_126].size,
        Some(recorded)
    );
}

/// The executor runs the plan's step values and nothing else: a plan without the alias and
/// push steps moves and pushes nothing, and the builder is asked for what each step names.
#[tokio::test]
async fn the_executor_runs_the_plans_steps_and_only_those() {
    let builder = Arc::new(FakeBuilder::default());
    let journal = Arc::new(MemoryJournal::default());
    let mut plan = test_plan();
    for image in &mut plan.images {
        image.steps.retain(|step| {
            !matches!(
                step,
                Step::Push | Step::RecordPush | Step::Attest | Step::MoveAlias { .. }
            )
        });
    }
    let results = execute(
        &plan,
        Arc::clone(&builder),
        Arc::clone(&journal),
        &options(1).exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    assert!(results.iter().all(|r| r.status == Status::Built));
    assert!(results
        .iter()
        .all(|r| r.aliases_moved.is_empty() && r.digest.is_none()));
    let calls = builder.calls();
    assert!(!calls.iter().any(|c| c.starts_with("push")), "{calls:#?}");
    // Each image: its base, its build, its packages, its test, in the plan's order.
    let of_runtime: Vec<&str> = calls
        .iter()
        .filter(|c| c.split_whitespace().nth(1) == Some(RUNTIME_126))
        .map(String::as_str)
        .collect();
    let base = base_of(&plan.images[0]);
    assert_eq!(
        of_runtime,
        [
            format!("base {RUNTIME_126} {base} false").as_str(),
            &format!("build {RUNTIME_126}"),
            &format!("built {RUNTIME_126}"),
            &format!("contents {RUNTIME_126}"),
            &format!("test {RUNTIME_126}"),
        ]
    );
    let log = journal.log();
    assert!(log.contains(&format!("claim {RUNTIME_126}")), "{log:#?}");
    assert!(!log.iter().any(|e| e.starts_with("sign")), "{log:#?}");
}

/// The base a plan's `resolve-base` step names.
fn base_of(image: &PlannedImage) -> String {
    image
        .steps
        .iter()
        .find_map(|step| match step {
            Step::ResolveBase { base, .. } => Some(base.clone()),
            _ => None,
        })
        .expect("a resolve-base step")
}

/// A base that cannot be had fails the image at its build stage, before any Docker build, and
/// the devel image on it is not attempted; a devel image's base is its runtime image, built
/// first.
#[tokio::test]
async fn a_missing_base_fails_the_build_stage_before_the_build() {
    let builder = Arc::new(FakeBuilder {
        fail_base: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    let results = run(&builder, &options(1)).await;
    let failed = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.failed_stage, Some(Stage::Build));
    assert!(failed
        .error
        .as_deref()
        .unwrap()
        .contains("is not in the Docker daemon"));
    let calls = builder.calls();
    assert!(
        !calls.contains(&format!("build {RUNTIME_126}")),
        "{calls:#?}"
    );
    let devel = results.iter().find(|r| r.name == DEVEL_126).unwrap();
    assert_eq!(devel.status, Status::Skipped);
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("base 2.7.1-cuda12.8-cudnn9-devel") && c.ends_with(" true")),
        "a devel image's base is built first: {calls:#?}"
    );
}

/// An image found by its build key passes over `resolve-base` and `build`.
#[tokio::test]
async fn a_reused_image_passes_over_its_base_and_build() {
    let builder = Arc::new(FakeBuilder {
        existing: [RUNTIME_126.to_string()].into(),
        ..Default::default()
    });
    run(&builder, &options(1)).await;
    let calls = builder.calls();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with(&format!("base {RUNTIME_126} "))),
        "{calls:#?}"
    );
}

/// A registry that does not answer: images unchanged since the push the manifest records are
/// `unchecked` (their recorded digest, their records untouched, the images built on them going
/// on, the start command named where the project knows it), never failed or skipped; an image
/// the registry never had fails as before.
#[tokio::test]
async fn a_registry_that_does_not_answer_leaves_pushed_images_unchecked_not_failed() {
    // The first run pushes and records everything.
    let journal = Arc::new(MemoryJournal::default());
    run_with(&Arc::new(FakeBuilder::default()), &journal, &options(2)).await;
    let before = journal.manifest();

    let specs = crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu24.04]\n");
    let again = plan(
        &specs,
        &select(&specs, None, None),
        &BTreeMap::new(),
        &before,
        None,
        &[],
        &options(2).plan,
    );
    let builder = Arc::new(FakeBuilder {
        existing: specs.iter().map(|spec| spec.name.clone()).collect(),
        registry_down: true,
        ..Default::default()
    });
    let mut exec = options(2).exec;
    exec.registry_start.insert(
        "r.example".into(),
        "docker-registry serve registry.yml &".into(),
    );
    let journal = Arc::new(MemoryJournal::with(before.clone()));
    let results = execute(
        &again,
        Arc::clone(&builder),
        Arc::clone(&journal),
        &exec,
        std::future::pending(),
        |_| {},
    )
    .await;
    assert_eq!(results.len(), 4);
    for result in &results {
        assert_eq!(result.status, Status::Unchecked, "{result:?}");
        assert_eq!(result.failed_stage, None);
        assert_eq!(
            result.digest,
            before.images()[&result.tag].digest,
            "the recorded digest"
        );
        let error = result.error.as_deref().unwrap();
        assert!(
            error.starts_with("unchanged since its recorded push, registry unreachable: not checked (the registry r.example did not answer: connection refused)"),
            "{error}"
        );
        assert!(
            error.contains("hint: is the registry at r.example running? This project's registry.yml configures it: `docker-registry serve registry.yml &` starts it. Once it runs, `imagegen verify` checks"),
            "{error}"
        );
    }
    for tag in [RUNTIME_126, DEVEL_126] {
        assert!(
            builder
                .calls()
                .iter()
                .any(|call| call.starts_with("push ") && call.ends_with(&format!(":{tag}"))),
            "{tag}: the devel image goes on to its own push: {:?}",
            builder.calls()
        );
    }
    assert_eq!(journal.manifest(), before, "nothing recorded");

    // Never pushed: the same registry failure fails the image, as before.
    let builder = Arc::new(FakeBuilder {
        registry_down: true,
        ..Default::default()
    });
    let results = run(&builder, &options(2)).await;
    let runtime = results.iter().find(|r| r.name == RUNTIME_126).unwrap();
    assert_eq!(runtime.status, Status::Failed);
    assert_eq!(runtime.failed_stage, Some(Stage::Push));
}
