//! The step `self-test`: gpu-selftest in a container of the image with all GPUs (`/dev/shm`
//! 8 GiB, the baseline through the environment), or without GPUs where the daemon has none (said
//! once for the run). The container is the one `imagegen test` runs too
//! (`docker_builder::selftest_request`).

use std::collections::BTreeMap;

use super::{selftest_request, EngineBuilder};
use crate::pipeline::executor::TestOutcome;
use crate::pipeline::planned::PlannedImage;
use crate::pipeline::selftest::interpret_selftest;

/// Said once per run when the daemon has no GPU runtime, instead of with every image.
const NO_GPU_NOTE: &str = "no GPU runtime on this Docker daemon: each image's gpu-selftest runs without GPUs and is recorded as skipped (the reason in .imagegen/logs/<image>.log); aliases wait for a passing result from `imagegen test` on a GPU node (or move with --move-untested-aliases); --require-gpu fails such images instead";

impl EngineBuilder {
    pub(super) async fn run_selftest(&self, image: &PlannedImage) -> TestOutcome {
        let name = &image.spec.name;
        if !self.runs_here(image).await {
            let host = self.host_platform().await;
            return TestOutcome::Skipped {
                summary: format!("cannot run {} images on this {host} host; run `imagegen build --platform {}` on a {} runner to test them", image.spec.platform, image.spec.platform, image.spec.platform),
            };
        }
        if let Err(error) = self.ensure_loaded(&image.reference).await {
            return TestOutcome::Error {
                summary: format!("{error:#}"),
                report: None,
            };
        }
        let gpus = self.gpus().await;
        if gpus {
            self.progress.stage(name, "gpu-selftest on all GPUs");
        } else {
            self.progress.note_once(NO_GPU_NOTE);
            self.progress.stage(name, "gpu-selftest without GPUs");
        }
        let request = selftest_request(
            &image.reference,
            gpus,
            self.settings.selftest_shm_bytes,
            self.container_labels("imagegen.selftest", name),
            self.settings.selftest_baseline.as_deref(),
            BTreeMap::new(),
        );
        let output = match self.engine.run(request).await {
            Ok(output) => output,
            Err(error) => {
                return TestOutcome::Error {
                    summary: error.to_string(),
                    report: None,
                }
            }
        };
        for line in output.stderr.lines() {
            self.progress.line(name, line);
        }
        let outcome = interpret_selftest(output.exit_code, &output.stdout, &output.stderr, gpus);
        let said = format!("self-test {}: {}", outcome.status(), outcome.summary());
        if matches!(outcome, TestOutcome::Skipped { .. }) && !gpus {
            // The run's note said why; what the binary said stays in the image's log.
            self.progress.log_only(name, &format!("== {said}"));
            self.progress.stage(name, "self-test skipped (no GPU)");
        } else {
            self.progress.stage(name, &said);
        }
        outcome
    }
}
