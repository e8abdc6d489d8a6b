//! The gpu-selftest result predicate, imagegen's own type ([`PREDICATE_TYPE`], schema
//! `src/attest/gpu-selftest-result.v1.schema.json`, documented in docs/attestations.md): the
//! verdict, the GPU models, driver and CUDA the node reported, each check with its figures,
//! expectation and verdict, the baseline's sha256, the node and the time. The verdict is the
//! recorded self-test status and nothing else: only a run recorded as passed reads `pass`; a
//! failed, skipped or errored run is attached as what it was, and an image never tested reads
//! `not-run`.
//!
//! `nodeResults` lists every node's result recorded under the digest (`history::test_results`:
//! the build host's run and each `imagegen test` / `test import` run, one per node), each with
//! its own verdict as recorded: one statement for the image, re-made and re-signed each time a
//! result is recorded, so the newest `.att` carries every node's result. A failed node reads
//! `fail`; nothing turns it into `pass`.

use serde_json::{json, Map, Value};

use crate::history::manifest::{GpuTestResult, ImageRecord, TestStatus};
use crate::history::test_results::results_of;

pub(crate) const PREDICATE_TYPE: &str = "urn:imagegen:predicate:gpu-selftest-result:v1";

/// The JSON schema (draft 2020-12) the predicate follows (checked against by the tests).
#[cfg(test)]
pub(crate) const SCHEMA: &str = include_str!("gpu-selftest-result.v1.schema.json");

/// The check fields that are not figures.
const CHECK_FIELDS: [&str; 5] = ["name", "status", "summary", "rule", "duration_seconds"];

fn verdict_name(status: TestStatus) -> &'static str {
    match status {
        TestStatus::Pass => "pass",
        TestStatus::Fail => "fail",
        TestStatus::Skipped => "skipped",
        TestStatus::Error => "error",
    }
}

/// One node's recorded result, as the predicate lists it.
fn node_result(result: &GpuTestResult) -> Value {
    json!({
        "node": result.node,
        "result": verdict_name(result.verdict),
        "summary": result.summary,
        "gpus": result.gpus,
        "driver": result.driver,
        "figures": result.figures,
        "testedAt": result.at,
        "via": result.via,
        "baseline": result.baseline.as_ref().map(|digest| json!({ "sha256": digest.hex() })),
    })
}

/// The predicate of `record`'s self-test; `node` is the host the test ran on, when known.
pub(crate) fn selftest_result(record: &ImageRecord, node: Option<&str>) -> Value {
    let mut predicate = build_result(record, node);
    let nodes: Vec<Value> = results_of(record)
        .into_iter()
        .map(|mut result| {
            // A build-time report without its node's name ran on the host that built it.
            if result.via == "build" && result.node == "build host" {
                if let Some(node) = node {
                    result.node = node.to_string();
                }
            }
            node_result(&result)
        })
        .collect();
    predicate["nodeResults"] = Value::Array(nodes);
    predicate
}

/// The build-time run's part of the predicate.
fn build_result(record: &ImageRecord, node: Option<&str>) -> Value {
    let Some(test) = &record.selftest else {
        return json!({
            "result": "not-run",
            "summary": "the image has no self-test record",
            "imageCuda": record.cuda_full,
            "node": node,
            "testedAt": null,
            "baseline": null,
            "gpus": [],
            "driver": null,
            "cuda": null,
            "checks": [],
        });
    };
    let result = verdict_name(test.status);
    let report = test.report.clone().unwrap_or(Value::Null);
    let checks: Vec<Value> = report["checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .map(|check| {
                    let figures: Map<String, Value> = check
                        .as_object()
                        .map(|fields| {
                            fields
                                .iter()
                                .filter(|(key, _)| !CHECK_FIELDS.contains(&key.as_str()))
                                .map(|(key, value)| (key.clone(), value.clone()))
                                .collect()
                        })
                        .unwrap_or_default();
                    json!({
                        "name": check["name"].as_str().unwrap_or_default(),
                        "verdict": check["status"].as_str().unwrap_or("unknown"),
                        "summary": check["summary"].as_str().unwrap_or_default(),
                        "expectation": check["rule"].as_str().unwrap_or_default(),
                        "figures": figures,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let inventory = report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|check| check["name"] == "inventory"))
        .cloned()
        .unwrap_or(Value::Null);
    let gpus: Vec<Value> = inventory["gpus"]
        .as_array()
        .map(|gpus| gpus.iter().map(|gpu| gpu["name"].clone()).collect())
        .unwrap_or_default();
    json!({
        "result": result,
        "summary": test.summary,
        "imageCuda": record.cuda_full,
        "node": node,
        "testedAt": test.at,
        "baseline": test.baseline.as_ref().map(|digest| json!({ "sha256": digest.hex() })),
        "gpus": gpus,
        "driver": inventory["driver_version"].as_str(),
        "cuda": inventory["driver_cuda_version"].as_str(),
        "tool": {
            "name": report["tool"].as_str(),
            "version": report["version"].as_str(),
        },
        "checks": checks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_json_and_names_the_predicate_type() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        assert_eq!(schema["$id"], PREDICATE_TYPE);
        let required = schema["required"].as_array().unwrap();
        assert!(required.contains(&json!("result")));
        let results = schema["properties"]["result"]["enum"].as_array().unwrap();
        assert_eq!(results.len(), 5);
    }
}
