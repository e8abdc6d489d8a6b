//! The gpu-selftest result predicate, imagegen's own type ([`PREDICATE_TYPE`], its JSON schema
//! [`SCHEMA`], `gpu-selftest-result.v1.schema.json` beside this file, documented in
//! docs/attestations.md): the verdict, the GPU models, driver and CUDA the node reported, each
//! check with its figures, expectation and verdict, the baseline's sha256, the node and the
//! time, and `nodeResults`, every node's recorded result with its own verdict. The verdict is
//! the recorded status and nothing else: only a run recorded as passed reads `pass`; a failed,
//! skipped or errored run is written as what it was, and an image never tested reads `not-run`.
//! The predicate of an OCI image index ([`index_selftest`]) reads `pass` only when every
//! platform image's does.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::digest::Digest;

pub const PREDICATE_TYPE: &str = "urn:imagegen:predicate:gpu-selftest-result:v1";

/// The JSON schema (draft 2020-12) the predicate follows.
pub const SCHEMA: &str = include_str!("gpu-selftest-result.v1.schema.json");

/// The check fields of gpu-selftest's report that are not figures.
const CHECK_FIELDS: [&str; 5] = ["name", "status", "summary", "rule", "duration_seconds"];

/// A recorded self-test verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    Skipped,
    Error,
}

impl Verdict {
    /// As the predicate writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skipped => "skipped",
            Verdict::Error => "error",
        }
    }
}

/// The self-test run of the build, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildRun {
    pub verdict: Verdict,
    pub summary: String,
    /// When it ran, as recorded.
    pub tested_at: String,
    pub baseline: Option<Digest>,
    /// gpu-selftest's JSON report, when the run left one.
    pub report: Option<Value>,
}

/// One node's recorded result.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeResult {
    pub node: String,
    pub verdict: Verdict,
    pub summary: String,
    pub gpus: Vec<String>,
    pub driver: Option<String>,
    pub figures: BTreeMap<String, f64>,
    /// When it ran, as recorded.
    pub tested_at: String,
    /// How it was recorded: `build`, `test`, `import`.
    pub via: String,
    pub baseline: Option<Digest>,
}

fn baseline(digest: Option<&Digest>) -> Value {
    digest.map_or(Value::Null, |digest| json!({ "sha256": digest.hex() }))
}

fn node_result(result: &NodeResult) -> Value {
    json!({
        "node": result.node,
        "result": result.verdict.as_str(),
        "summary": result.summary,
        "gpus": result.gpus,
        "driver": result.driver,
        "figures": result.figures,
        "testedAt": result.tested_at,
        "via": result.via,
        "baseline": baseline(result.baseline.as_ref()),
    })
}

/// The predicate of an image of CUDA `image_cuda` whose build ran `build` (none: never tested)
/// on `node` (when known), with every node's result `nodes`.
pub fn selftest_result(
    image_cuda: &str,
    node: Option<&str>,
    build: Option<&BuildRun>,
    nodes: &[NodeResult],
) -> Value {
    let mut predicate = build_result(image_cuda, node, build);
    predicate["nodeResults"] = nodes.iter().map(node_result).collect();
    predicate
}

/// The build-time run's part of the predicate.
fn build_result(image_cuda: &str, node: Option<&str>, build: Option<&BuildRun>) -> Value {
    let Some(test) = build else {
        return json!({
            "result": "not-run",
            "summary": "the image has no self-test record",
            "imageCuda": image_cuda,
            "node": node,
            "testedAt": null,
            "baseline": null,
            "gpus": [],
            "driver": null,
            "cuda": null,
            "checks": [],
        });
    };
    let report = test.report.clone().unwrap_or(Value::Null);
    let checks: Vec<Value> = report["checks"]
        .as_array()
        .map(|checks| checks.iter().map(check).collect())
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
        "result": test.verdict.as_str(),
        "summary": test.summary,
        "imageCuda": image_cuda,
        "node": node,
        "testedAt": test.tested_at,
        "baseline": baseline(test.baseline.as_ref()),
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

/// One check of gpu-selftest's report as the predicate lists it: its fields that are not
/// figures renamed, the rest as figures.
fn check(check: &Value) -> Value {
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
}

/// One platform image of an index: its platform (`linux/amd64`), digest and gpu-selftest
/// predicate.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformSelftest<'a> {
    pub platform: &'a str,
    pub digest: &'a Digest,
    pub selftest: &'a Value,
}

/// How bad a verdict is, for the index's: the worst platform's.
fn badness(result: &str) -> u8 {
    match result {
        "pass" => 0,
        "not-run" => 1,
        "skipped" => 2,
        "error" => 3,
        _ => 4,
    }
}

/// The gpu-selftest predicate of an OCI image index: `pass` only when every platform's result
/// is `pass`; otherwise the worst of them (`fail` before `error` before `skipped` before
/// `not-run`); each platform's predicate under `platforms`.
pub fn index_selftest(platforms: &[PlatformSelftest<'_>]) -> Value {
    let results: Vec<(&str, &str)> = platforms
        .iter()
        .map(|p| {
            (
                p.platform,
                p.selftest["result"].as_str().unwrap_or("not-run"),
            )
        })
        .collect();
    let result = results
        .iter()
        .map(|(_, result)| *result)
        .max_by_key(|result| badness(result))
        .unwrap_or("not-run");
    let summary = if platforms.is_empty() {
        "the index has no platform images".to_string()
    } else if result == "pass" {
        let mut names: Vec<&str> = platforms.iter().map(|p| p.platform).collect();
        names.sort();
        format!("every platform passed: {}", names.join(", "))
    } else {
        results
            .iter()
            .filter(|(_, verdict)| *verdict != "pass")
            .map(|(platform, verdict)| format!("{platform}: {verdict}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut gpus: Vec<String> = platforms
        .iter()
        .flat_map(|p| p.selftest["gpus"].as_array().cloned().unwrap_or_default())
        .filter_map(|gpu| gpu.as_str().map(str::to_string))
        .collect();
    gpus.sort();
    gpus.dedup();
    let tested_at = platforms
        .iter()
        .filter_map(|p| p.selftest["testedAt"].as_str())
        .max()
        .map(str::to_string);
    let image_cuda = platforms
        .first()
        .and_then(|p| p.selftest["imageCuda"].as_str())
        .unwrap_or_default();
    let per_platform: Map<String, Value> = platforms
        .iter()
        .map(|p| {
            (
                p.platform.to_string(),
                json!({ "digest": p.digest.to_string(), "predicate": p.selftest }),
            )
        })
        .collect();
    json!({
        "result": result,
        "summary": summary,
        "imageCuda": image_cuda,
        "node": null,
        "testedAt": tested_at,
        "baseline": null,
        "gpus": gpus,
        "driver": null,
        "cuda": null,
        "checks": [],
        "platforms": per_platform,
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

    #[test]
    fn a_failed_or_untested_image_is_never_written_as_passing() {
        let run = |verdict| BuildRun {
            verdict,
            summary: String::new(),
            tested_at: "2026-12-01T10:00:05Z".into(),
            baseline: None,
            report: None,
        };
        assert_eq!(
            selftest_result("13.0.2", None, Some(&run(Verdict::Fail)), &[])["result"],
            "fail"
        );
        assert_eq!(
            selftest_result("13.0.2", None, None, &[])["result"],
            "not-run"
        );
        let pass = selftest_result("13.0.2", None, Some(&run(Verdict::Pass)), &[]);
        let fail = selftest_result("13.0.2", None, Some(&run(Verdict::Fail)), &[]);
        let digest = Digest::of(b"i");
        let index = index_selftest(&[
            PlatformSelftest {
                platform: "linux/amd64",
                digest: &digest,
                selftest: &pass,
            },
            PlatformSelftest {
                platform: "linux/arm64",
                digest: &digest,
                selftest: &fail,
            },
        ]);
        assert_eq!(index["result"], "fail");
        assert_eq!(index["summary"], "linux/arm64: fail");
    }
}
