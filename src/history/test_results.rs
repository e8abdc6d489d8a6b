//! Self-test results per digest, and the test policy that decides when an image's aliases may
//! move. A result is what one node's gpu-selftest said about one pushed digest (node name, GPU
//! models, driver, a few figures, the verdict); a digest gathers several (one per node), a re-test
//! on a node replaces that node's result, and shards' results merge by node. The policy
//! (`tests.require` in matrix.yaml) names GPU models that must each have a passing result; none
//! named means any one passing result. Aliases a build could not move yet wait on the image's
//! record (`awaiting_aliases`) until the policy holds. Pure: values in, values out.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::history::ledger::Transaction;
use crate::history::manifest::{
    checks_summary, parse_rfc3339, Extra, GpuTestResult, ImageRecord, Manifest, TestStatus, Waiting,
};
use crate::model::digest::Digest;

/// Why a gpu-selftest report cannot be read as a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReportError {
    #[error("it is not a gpu-selftest JSON report: {0}")]
    NotAReport(String),
    #[error("it has schema version {0}; this imagegen reads gpu-selftest reports of version 1")]
    Schema(String),
    #[error("it names no image digest (`image_digest`): run gpu-selftest with --image-digest DIGEST (or GPU_SELFTEST_IMAGE_DIGEST), as `imagegen test` and the Jobs of `imagegen k8s --test` do")]
    NoDigest,
    #[error("its image_digest {0:?} is not a sha256 digest")]
    BadDigest(String),
    #[error("it names no node (`node_name`): run gpu-selftest with --node-name NAME (or GPU_SELFTEST_NODE_NAME)")]
    NoNode,
    #[error("it names the node {0:?}: a node name is letters, digits, `.`, `_` and `-`, at most 253 characters")]
    BadNode(String),
    #[error("its `overall` says {claimed}, but its checks say {recomputed} ({why}); imagegen recomputes a report's verdict from its checks and refuses one that disagrees")]
    VerdictDisagrees {
        claimed: &'static str,
        recomputed: &'static str,
        why: String,
    },
    #[error("its check {check:?} says {status} while {why}; imagegen recomputes each check's verdict from its results and judgements and refuses one that disagrees")]
    CheckDisagrees {
        check: String,
        status: String,
        why: String,
    },
}

/// A report, read: the digest it names and the result it gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReadReport {
    pub(crate) digest: Digest,
    pub(crate) result: GpuTestResult,
}

/// Whether `name` can be a node name (a Kubernetes node name or a host name).
pub(crate) fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Reads gpu-selftest's JSON report (`--format json` with `--image-digest` and a node name) as a
/// result for the digest it names. The verdict is the report's `overall`.
pub(crate) fn read_report(text: &str, at: &str, via: &str) -> Result<ReadReport, ReportError> {
    let report: Value =
        serde_json::from_str(text).map_err(|error| ReportError::NotAReport(error.to_string()))?;
    if report["tool"] != "gpu-selftest" {
        return Err(ReportError::NotAReport(format!(
            "its `tool` is {}, not \"gpu-selftest\"",
            report["tool"]
        )));
    }
    if report["schema_version"] != 1 {
        return Err(ReportError::Schema(report["schema_version"].to_string()));
    }
    let digest_text = report["image_digest"]
        .as_str()
        .ok_or(ReportError::NoDigest)?;
    let digest =
        Digest::parse(digest_text).map_err(|_| ReportError::BadDigest(digest_text.into()))?;
    let node = report["node_name"].as_str().ok_or(ReportError::NoNode)?;
    if !valid_node_name(node) {
        return Err(ReportError::BadNode(node.into()));
    }
    let verdict = read_verdict(&report)?;
    let mut result = result_from_report(&report, node, verdict, at, via);
    result.summary = summary_of(&report);
    Ok(ReadReport { digest, result })
}

/// A report's `overall`, once [`recomputed_verdict`] agrees with it.
pub(crate) fn read_verdict(report: &Value) -> Result<TestStatus, ReportError> {
    let claimed = match report["overall"].as_str() {
        Some("pass") => TestStatus::Pass,
        Some("fail") => TestStatus::Fail,
        Some("error") => TestStatus::Error,
        other => {
            return Err(ReportError::NotAReport(format!(
                "its `overall` is {other:?}, not pass, fail or error"
            )))
        }
    };
    let (verdict, why) = recomputed_verdict(report)?;
    if verdict != claimed {
        return Err(ReportError::VerdictDisagrees {
            claimed: claimed.as_str(),
            recomputed: verdict.as_str(),
            why,
        });
    }
    Ok(verdict)
}

/// The verdict a report's checks give, as gpu-selftest itself sets `overall`: `error` when the
/// run could not complete (`error`), `fail` when a check failed, else `pass` (warnings and skips
/// do not fail a run). Each check's own status is recomputed first from what it carries: a
/// result that did not pass (`passed: false`) or a judgement that failed (any `fail` among a
/// `judgements` entry's verdicts) makes it a failed check, and a check that says otherwise is
/// refused. Returns the verdict and the reason, for messages.
pub(crate) fn recomputed_verdict(report: &Value) -> Result<(TestStatus, String), ReportError> {
    if let Some(error) = report["error"].as_str() {
        return Ok((TestStatus::Error, format!("the run stopped: {error}")));
    }
    let checks = report["checks"]
        .as_array()
        .ok_or_else(|| ReportError::NotAReport("it has no `checks` list".into()))?;
    let mut failed = Vec::new();
    for check in checks {
        let name = check["name"]
            .as_str()
            .ok_or_else(|| ReportError::NotAReport("a check has no `name`".into()))?;
        let status = check["status"].as_str().unwrap_or_default();
        if !["pass", "fail", "warn", "skip"].contains(&status) {
            return Err(ReportError::NotAReport(format!(
                "its check {name:?} has the status {:?}, not pass, fail, warn or skip",
                check["status"]
            )));
        }
        if let Some(evidence) = failing_evidence(check) {
            if status != "fail" {
                return Err(ReportError::CheckDisagrees {
                    check: name.to_string(),
                    status: status.to_string(),
                    why: evidence,
                });
            }
        }
        if status == "fail" {
            failed.push(name.to_string());
        }
    }
    Ok(if failed.is_empty() {
        (
            TestStatus::Pass,
            format!("{} checks, none failed", checks.len()),
        )
    } else {
        (TestStatus::Fail, format!("failed: {}", failed.join(", ")))
    })
}

/// What in a check says it failed: a result with `passed: false`, or a `judgements` entry with a
/// verdict of `fail` (gpu-selftest writes them as `verdict`, `*_verdict`, `h2d`, `d2h`).
fn failing_evidence(check: &Value) -> Option<String> {
    if let Some(results) = check["results"].as_array() {
        if let Some(index) = results.iter().position(|r| r["passed"] == false) {
            return Some(format!("its result {index} did not pass (`passed: false`)"));
        }
    }
    let judgements = check["judgements"].as_array()?;
    judgements
        .iter()
        .enumerate()
        .find_map(|(index, judgement)| {
            judgement.as_object()?.iter().find_map(|(key, value)| {
                (value == "fail").then(|| format!("its judgement {index} has {key}: fail"))
            })
        })
}

/// A result from a report already judged (`verdict`), for `node`.
pub(crate) fn result_from_report(
    report: &Value,
    node: &str,
    verdict: TestStatus,
    at: &str,
    via: &str,
) -> GpuTestResult {
    let inventory = check(report, "inventory");
    let gpus = inventory
        .and_then(|c| c["gpus"].as_array())
        .map(|gpus| {
            gpus.iter()
                .filter_map(|gpu| gpu["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    GpuTestResult {
        node: node.to_string(),
        gpus,
        driver: inventory.and_then(|c| c["driver_version"].as_str().map(String::from)),
        verdict,
        summary: summary_of(report),
        figures: figures_of(report),
        at: at.to_string(),
        via: via.to_string(),
        baseline: None,
        extra: Extra::new(),
    }
}

fn check<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    report["checks"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// The report's failing checks, or how many passed; its error when it could not run.
fn summary_of(report: &Value) -> String {
    if let Some(error) = report["error"].as_str() {
        return error.to_string();
    }
    let Some(checks) = report["checks"].as_array() else {
        return "no checks".into();
    };
    checks_summary(checks)
}

/// The headline figures of a report, the lowest over its GPUs: `matmul_<precision>_tflops`
/// (back to back, the largest size), `h2d_pinned_gbps` and `d2h_pinned_gbps` (best pinned),
/// `allreduce_bus_gbps` (back to back, the largest size), `duration_seconds`.
pub(crate) fn figures_of(report: &Value) -> BTreeMap<String, f64> {
    let mut figures = BTreeMap::new();
    let mut lowest = |key: String, value: f64| {
        let entry = figures.entry(key).or_insert(value);
        if value < *entry {
            *entry = value;
        }
    };
    if let Some(results) = check(report, "matmul").and_then(|c| c["results"].as_array()) {
        let largest = results.iter().filter_map(|r| r["size"].as_u64()).max();
        for result in results {
            if result["size"].as_u64() != largest {
                continue;
            }
            if let (Some(precision), Some(tflops)) = (
                result["precision"].as_str(),
                result["back_to_back_tflops"].as_f64(),
            ) {
                lowest(format!("matmul_{precision}_tflops"), round1(tflops));
            }
        }
    }
    if let Some(judgements) = check(report, "bandwidth").and_then(|c| c["judgements"].as_array()) {
        for judgement in judgements {
            for (direction, key) in [
                ("h2d", "best_pinned_h2d_bytes_per_second"),
                ("d2h", "best_pinned_d2h_bytes_per_second"),
            ] {
                if let Some(rate) = judgement[key].as_f64() {
                    lowest(format!("{direction}_pinned_gbps"), round1(rate / 1e9));
                }
            }
        }
    }
    if let Some(points) = check(report, "nccl").and_then(|c| c["points"].as_array()) {
        if let Some(point) = points.iter().max_by_key(|p| p["size_bytes"].as_u64()) {
            if let Some(rate) = point["back_to_back_bus_bytes_per_second"].as_f64() {
                lowest("allreduce_bus_gbps".into(), round1(rate / 1e9));
            }
        }
    }
    if let Some(seconds) = report["duration_seconds"].as_f64() {
        lowest("duration_seconds".into(), round1(seconds));
    }
    figures
}

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// Whether a GPU named `gpu` (as CUDA reports it) is of the model `required` (a policy entry):
/// every word of the entry is a word of the name, case aside (`H100` is a word of
/// `NVIDIA H100 80GB HBM3`, `A100` of `NVIDIA A100-SXM4-80GB`).
pub(crate) fn gpu_is(gpu: &str, required: &str) -> bool {
    let words: Vec<String> = gpu
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let wanted: Vec<String> = required
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    !wanted.is_empty() && wanted.iter().all(|w| words.contains(w))
}

/// Where a digest stands against the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PolicyState {
    /// Whether its aliases may move.
    pub(crate) holds: bool,
    /// What is still wanted: the required models without a passing result, or `any GPU`.
    pub(crate) missing: Vec<String>,
    /// Models (or `any GPU`) whose latest result on some node failed, with the node.
    pub(crate) failed: Vec<String>,
}

/// The words for "any one GPU" (the default policy) in [`PolicyState::missing`].
pub(crate) const ANY_GPU: &str = "any GPU";

/// Judges `results` against `require` (empty: any one passing result). A model counts as passed
/// when some node with a GPU of that model passed; a failure on another node does not undo it,
/// but is listed in `failed`.
pub(crate) fn judge(require: &[String], results: &[GpuTestResult]) -> PolicyState {
    let passed = |model: Option<&str>| {
        results.iter().any(|r| {
            r.verdict == TestStatus::Pass
                && model.is_none_or(|m| r.gpus.iter().any(|gpu| gpu_is(gpu, m)))
        })
    };
    let failed_on = |model: Option<&str>| -> Vec<String> {
        results
            .iter()
            .filter(|r| matches!(r.verdict, TestStatus::Fail | TestStatus::Error))
            .filter(|r| model.is_none_or(|m| r.gpus.iter().any(|gpu| gpu_is(gpu, m))))
            .map(|r| format!("{} on {}", model.unwrap_or(ANY_GPU), r.node))
            .collect()
    };
    if require.is_empty() {
        let holds = passed(None);
        return PolicyState {
            holds,
            missing: if holds { vec![] } else { vec![ANY_GPU.into()] },
            failed: failed_on(None),
        };
    }
    let missing: Vec<String> = require
        .iter()
        .filter(|model| !passed(Some(model)))
        .cloned()
        .collect();
    PolicyState {
        holds: missing.is_empty(),
        missing,
        failed: require.iter().flat_map(|m| failed_on(Some(m))).collect(),
    }
}

/// Adds `result` to a list: it replaces the result of the same node, else joins; sorted by node.
pub(crate) fn add_result(results: &mut Vec<GpuTestResult>, result: GpuTestResult) {
    results.retain(|r| r.node != result.node);
    results.push(result);
    results.sort_by(|a, b| a.node.cmp(&b.node));
}

/// How bad a verdict is, for ties: a fail or an error never loses to a pass by a tie-break.
fn severity(verdict: TestStatus) -> u8 {
    match verdict {
        TestStatus::Pass => 0,
        TestStatus::Skipped => 1,
        TestStatus::Fail => 2,
        TestStatus::Error => 3,
    }
}

/// Two lists of one digest's results, as shards recorded them: per node the later (`at`) wins;
/// on a tie of times the worse verdict, then the content (a total order, so the merge does not
/// depend on the order of its inputs). A pass and a fail close in time are a conflict the merge
/// reports before it merges (`merge::conflicts`).
pub(crate) fn merge_results(
    left: Vec<GpuTestResult>,
    right: Vec<GpuTestResult>,
) -> Vec<GpuTestResult> {
    let order = |result: &GpuTestResult| {
        (
            parse_rfc3339(&result.at),
            result.at.clone(),
            severity(result.verdict),
            serde_json::to_string(result).unwrap_or_default(),
        )
    };
    let mut by_node: BTreeMap<String, GpuTestResult> = BTreeMap::new();
    for result in left.into_iter().chain(right) {
        match by_node.get(&result.node) {
            Some(kept) if order(kept) >= order(&result) => {}
            _ => {
                by_node.insert(result.node.clone(), result);
            }
        }
    }
    by_node.into_values().collect()
}

/// Applies `change` to every record (current or in a history) that carries `digest`; returns
/// the full tags it changed.
fn for_records_with(
    manifest: &mut Manifest,
    digest: &Digest,
    mut change: impl FnMut(&mut ImageRecord),
) -> Vec<String> {
    let mut tags = Vec::new();
    for record in manifest.images.values_mut() {
        for earlier in record
            .history
            .iter_mut()
            .filter(|h| h.digest.as_ref() == Some(digest))
        {
            change(earlier);
            tags.push(earlier.tag.clone());
        }
        if record.digest.as_ref() == Some(digest) {
            change(record);
            tags.push(record.tag.clone());
        }
    }
    tags.sort();
    tags.dedup();
    tags
}

impl Transaction<'_> {
    /// Records one node's self-test `result` on every record that carries `digest`; the full
    /// tags, or `None` when no record has it.
    pub(crate) fn record_test_result(
        &mut self,
        digest: &Digest,
        result: &GpuTestResult,
    ) -> Option<Vec<String>> {
        record_result(self.manifest_mut(), digest, result)
    }
}

/// Records `result` for `digest` on every record that carries it (the full tag's current record,
/// or an earlier one in a history). Returns the full tags, or `None` when no record has the
/// digest (a report for an unknown digest is refused by the caller).
pub(in crate::history) fn record_result(
    manifest: &mut Manifest,
    digest: &Digest,
    result: &GpuTestResult,
) -> Option<Vec<String>> {
    let tags = for_records_with(manifest, digest, |record| {
        add_result(&mut record.test_results, result.clone())
    });
    (!tags.is_empty()).then_some(tags)
}

/// The results that count for a record: those recorded for its digest, and the self-test of the
/// build that made it when that ran with a report (node `build`).
pub(crate) fn results_of(record: &ImageRecord) -> Vec<GpuTestResult> {
    let mut results = record.test_results.clone();
    if let Some(selftest) = &record.selftest {
        if let Some(report) = &selftest.report {
            if !results.iter().any(|r| r.via == "build") {
                let node = report["node_name"].as_str().unwrap_or("build host");
                let mut result =
                    result_from_report(report, node, selftest.status, &selftest.at, "build");
                result.baseline = selftest.baseline.clone();
                results.push(result);
            }
        }
    }
    results
}

/// Every current image record with aliases awaiting results, judged against `require`.
pub(crate) fn waiting(manifest: &Manifest, require: &[String]) -> Vec<Waiting> {
    manifest
        .images
        .values()
        .filter(|record| !record.awaiting_aliases.is_empty())
        .map(|record| {
            let state = judge(require, &results_of(record));
            Waiting {
                tag: record.tag.clone(),
                digest: record.digest.clone(),
                aliases: record.awaiting_aliases.clone(),
                missing: state.missing,
                failed: state.failed,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(node: &str, gpu: &str, verdict: TestStatus, at: &str) -> GpuTestResult {
        GpuTestResult {
            node: node.into(),
            gpus: vec![gpu.into()],
            driver: Some("580.159.04".into()),
            verdict,
            summary: "s".into(),
            figures: BTreeMap::new(),
            at: at.into(),
            via: "imagegen test".into(),
            baseline: None,
            extra: Extra::new(),
        }
    }

    #[test]
    fn gpu_models_match_by_whole_words() {
        assert!(gpu_is("NVIDIA H100 80GB HBM3", "H100"));
        assert!(gpu_is("NVIDIA H100 NVL", "h100 nvl"));
        assert!(!gpu_is("NVIDIA H100 80GB HBM3", "H100 NVL"));
        assert!(gpu_is("NVIDIA A100-SXM4-80GB", "A100"));
        assert!(!gpu_is("NVIDIA H200", "H20"));
        assert!(!gpu_is("NVIDIA H200", ""));
    }

    #[test]
    fn the_policy_holds_once_every_required_model_passed() {
        let require = vec!["H100".to_string(), "H200".to_string()];
        let mut results = vec![result("a", "NVIDIA H200", TestStatus::Pass, "t1")];
        let state = judge(&require, &results);
        assert!(!state.holds);
        assert_eq!(state.missing, vec!["H100"]);
        add_result(
            &mut results,
            result("b", "NVIDIA H100 80GB HBM3", TestStatus::Fail, "t2"),
        );
        let state = judge(&require, &results);
        assert_eq!(
            (state.holds, state.failed.clone()),
            (false, vec!["H100 on b".to_string()])
        );
        // A re-test on node b replaces its failure.
        add_result(
            &mut results,
            result("b", "NVIDIA H100 80GB HBM3", TestStatus::Pass, "t3"),
        );
        assert_eq!(results.len(), 2);
        assert!(judge(&require, &results).holds);
        // The default policy: any one passing GPU.
        assert!(judge(&[], &results[..1]).holds);
        assert_eq!(judge(&[], &[]).missing, vec![ANY_GPU]);
    }

    #[test]
    fn shards_merge_by_node_the_later_result_winning_in_either_order() {
        let left = vec![
            result("a", "NVIDIA H200", TestStatus::Fail, "2026-12-02T01:00:00Z"),
            result("b", "NVIDIA H100", TestStatus::Pass, "2026-12-02T01:00:00Z"),
        ];
        let right = vec![result(
            "a",
            "NVIDIA H200",
            TestStatus::Pass,
            "2026-12-02T02:00:00Z",
        )];
        let merged = merge_results(left.clone(), right.clone());
        assert_eq!(merged, merge_results(right, left));
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].verdict, TestStatus::Pass);
    }

    #[test]
    fn reports_without_digest_or_node_are_refused() {
        let fixture = include_str!("../../tests/fixtures/test-import/h200-report.json");
        let read = read_report(fixture, "now", "test import").unwrap();
        assert_eq!(
            read.digest.as_str(),
            "sha256:1afc7433dbe2baf7d8fb0d4940e6a918dc7d428f9b6c1a4741a5e2299846dfba"
        );
        assert_eq!(read.result.node, "device-h200-1");
        assert_eq!(read.result.gpus, vec!["NVIDIA H200"]);
        assert_eq!(read.result.verdict, TestStatus::Pass);
        assert!(read.result.figures["matmul_bf16_tflops"] > 500.0);
        let mut value: Value = serde_json::from_str(fixture).unwrap();
        value.as_object_mut().unwrap().remove("image_digest");
        assert_eq!(
            read_report(&value.to_string(), "now", "x").unwrap_err(),
            ReportError::NoDigest
        );
        value["image_digest"] = "sha256:1afc".into();
        assert!(matches!(
            read_report(&value.to_string(), "now", "x"),
            Err(ReportError::BadDigest(_))
        ));
        assert!(matches!(
            read_report("{}", "now", "x"),
            Err(ReportError::NotAReport(_))
        ));
    }

    #[test]
    fn a_reports_verdict_is_recomputed_and_a_disagreement_refused() {
        let fixture = include_str!("../../tests/fixtures/test-import/h200-report.json");
        let pristine: Value = serde_json::from_str(fixture).unwrap();
        let matmul = |report: &mut Value| -> usize {
            report["checks"]
                .as_array()
                .unwrap()
                .iter()
                .position(|c| c["name"] == "matmul")
                .unwrap()
        };
        // A failed matmul under an `overall` that says pass.
        let mut report = pristine.clone();
        let index = matmul(&mut report);
        report["checks"][index]["status"] = "fail".into();
        let error = read_report(&report.to_string(), "now", "x").unwrap_err();
        assert!(
            matches!(&error, ReportError::VerdictDisagrees { claimed: "pass", recomputed: "fail", why } if why.contains("matmul")),
            "{error}"
        );
        // The matmul check calls itself a pass while a product came out wrong ...
        let mut report = pristine.clone();
        let index = matmul(&mut report);
        report["checks"][index]["results"][0]["passed"] = false.into();
        let error = read_report(&report.to_string(), "now", "x").unwrap_err();
        assert!(
            matches!(&error, ReportError::CheckDisagrees { check, .. } if check == "matmul"),
            "{error}"
        );
        // ... or was slow.
        let mut report = pristine.clone();
        let index = matmul(&mut report);
        report["checks"][index]["judgements"][1]["peak_verdict"] = "fail".into();
        let error = read_report(&report.to_string(), "now", "x").unwrap_err();
        assert!(error.to_string().contains("peak_verdict: fail"), "{error}");
        // Told the truth, a failed report is read as a failure.
        let mut report = pristine.clone();
        let index = matmul(&mut report);
        report["checks"][index]["status"] = "fail".into();
        report["checks"][index]["judgements"][1]["peak_verdict"] = "fail".into();
        report["overall"] = "fail".into();
        let read = read_report(&report.to_string(), "now", "x").unwrap();
        assert_eq!(read.result.verdict, TestStatus::Fail);
        // An unknown check status is no pass.
        let mut report = pristine;
        report["checks"][0]["status"] = "fine".into();
        assert!(matches!(
            read_report(&report.to_string(), "now", "x"),
            Err(ReportError::NotAReport(_))
        ));
    }

    #[test]
    fn a_fail_never_loses_to_a_pass_by_a_tie_break() {
        let at = "2026-12-02T01:00:00Z";
        let pass = vec![result("a", "NVIDIA H200", TestStatus::Pass, at)];
        let fail = vec![result("a", "NVIDIA H200", TestStatus::Fail, at)];
        for (left, right) in [(pass.clone(), fail.clone()), (fail, pass)] {
            let merged = merge_results(left, right);
            assert_eq!(merged.len(), 1);
            assert_eq!(merged[0].verdict, TestStatus::Fail);
        }
    }
}
