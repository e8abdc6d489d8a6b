//! The gpu-selftest result predicate of one image record (its shape, schema and the index's
//! verdict are `imagegen_attest::selftest`'s): the build's recorded run, and `nodeResults`, every
//! node's result recorded under the digest (`history::test_results`: the build host's run and
//! each `imagegen test` / `test import` run, one per node), each with its own verdict as
//! recorded: one statement for the image, re-made and re-signed each time a result is recorded,
//! so the newest `.att` carries every node's result. A failed node reads `fail`; nothing turns
//! it into `pass`.

use imagegen_attest::selftest::{BuildRun, NodeResult, Verdict};
use serde_json::Value;

use super::to_attest;
use crate::history::manifest::{ImageRecord, TestStatus};
use crate::history::test_results::results_of;

fn verdict(status: TestStatus) -> Verdict {
    match status {
        TestStatus::Pass => Verdict::Pass,
        TestStatus::Fail => Verdict::Fail,
        TestStatus::Skipped => Verdict::Skipped,
        TestStatus::Error => Verdict::Error,
    }
}

/// The predicate of `record`'s self-test; `node` is the host the test ran on, when known.
pub(crate) fn selftest_result(record: &ImageRecord, node: Option<&str>) -> Value {
    let build = record.selftest.as_ref().map(|test| BuildRun {
        verdict: verdict(test.status),
        summary: test.summary.clone(),
        tested_at: test.at.clone(),
        baseline: test.baseline.as_ref().map(to_attest),
        report: test.report.clone(),
    });
    let nodes: Vec<NodeResult> = results_of(record)
        .into_iter()
        .map(|result| {
            // A build-time report without its node's name ran on the host that built it.
            let node = match node {
                Some(node) if result.via == "build" && result.node == "build host" => {
                    node.to_string()
                }
                _ => result.node,
            };
            NodeResult {
                node,
                verdict: verdict(result.verdict),
                summary: result.summary,
                gpus: result.gpus,
                driver: result.driver,
                figures: result.figures,
                tested_at: result.at,
                via: result.via,
                baseline: result.baseline.as_ref().map(to_attest),
            }
        })
        .collect();
    imagegen_attest::selftest::selftest_result(
        record.cuda_full.as_ref(),
        node,
        build.as_ref(),
        &nodes,
    )
}
