//! Baselines: the figures of a run on a node known to be good, saved with `--save-baseline FILE`
//! and judged against with `--baseline FILE` (or `GPU_SELFTEST_BASELINE`) on later runs, so a
//! fleet can hold every node to what its best one does, also for GPU models the expected-figures
//! table does not know.
//!
//! A baseline holds one reference per check, figure and size: the median over the GPUs of the
//! good node, with each GPU's value beside it. Later, every GPU's figure must reach
//! `rules::BASELINE_SHARE` of that reference. This module parses, renders and looks up; the
//! checks do the judging. No I/O beyond reading and writing the file it is handed.

use crate::stats;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Version of the file layout below; a later gpu-selftest refuses files of another version.
pub const BASELINE_SCHEMA_VERSION: u32 = 1;
/// The `kind` field that tells a baseline apart from a report.
const KIND: &str = "gpu-selftest-baseline";

/// A saved baseline.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub schema_version: u32,
    /// Always "gpu-selftest-baseline".
    pub kind: String,
    /// The gpu-selftest version that saved it.
    pub saved_by: String,
    pub saved_at_unix_seconds: u64,
    /// The name CUDA reports for each GPU of the good node, in index order.
    pub gpus: Vec<String>,
    pub figures: Vec<BaselineFigure>,
}

/// One figure of the good node.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BaselineFigure {
    /// "bandwidth", "matmul" or "nccl".
    pub check: String,
    /// What was measured: "pinned h2d", "bf16", "all-reduce bus bandwidth, 2 GPUs".
    pub figure: String,
    /// Transfer size in bytes, or n of an n×n×n product.
    pub size: u64,
    /// "bytes_per_second" or "tflops".
    pub unit: String,
    /// The reference: the median of `per_gpu` (one value for all-GPU figures).
    pub value: f64,
    pub per_gpu: Vec<f64>,
}

impl BaselineFigure {
    /// A figure whose reference is the median of the GPUs' values.
    pub fn from_gpus(
        check: &str,
        figure: &str,
        size: u64,
        unit: &str,
        per_gpu: Vec<f64>,
    ) -> Option<BaselineFigure> {
        let value = stats::median(&per_gpu)?;
        Some(BaselineFigure {
            check: check.to_string(),
            figure: figure.to_string(),
            size,
            unit: unit.to_string(),
            value,
            per_gpu,
        })
    }
}

impl Baseline {
    pub fn new(
        saved_at_unix_seconds: u64,
        gpus: Vec<String>,
        figures: Vec<BaselineFigure>,
    ) -> Self {
        Baseline {
            schema_version: BASELINE_SCHEMA_VERSION,
            kind: KIND.to_string(),
            saved_by: format!("gpu-selftest {}", env!("CARGO_PKG_VERSION")),
            saved_at_unix_seconds,
            gpus,
            figures,
        }
    }

    /// The reference of one check, figure and size, when the baseline has it.
    pub fn reference(&self, check: &str, figure: &str, size: u64) -> Option<f64> {
        self.figures
            .iter()
            .find(|entry| entry.check == check && entry.figure == figure && entry.size == size)
            .map(|entry| entry.value)
            .filter(|value| value.is_finite() && *value > 0.0)
    }

    /// A baseline taken on other GPU models means nothing here: `Err` names both sides. The
    /// number of GPUs may differ (figures per GPU are judged per GPU; the all-reduce figure
    /// names its GPU count).
    pub fn check_models(&self, gpus_here: &[String]) -> Result<(), String> {
        let distinct = |names: &[String]| {
            let mut list: Vec<String> = names.iter().map(|name| name.trim().to_string()).collect();
            list.sort();
            list.dedup();
            list
        };
        let (saved, here) = (distinct(&self.gpus), distinct(gpus_here));
        if saved == here {
            Ok(())
        } else {
            Err(format!(
                "the baseline was saved on {} but this node has {}; save one on a good node of this kind with --save-baseline",
                saved.join(", "),
                here.join(", ")
            ))
        }
    }
}

/// Parses a baseline's text.
pub fn parse(text: &str) -> Result<Baseline, String> {
    let baseline: Baseline = serde_json::from_str(text)
        .map_err(|error| format!("not a gpu-selftest baseline: {error}"))?;
    if baseline.kind != KIND {
        return Err(format!(
            "not a gpu-selftest baseline: kind is `{}`, expected `{KIND}`",
            baseline.kind
        ));
    }
    if baseline.schema_version != BASELINE_SCHEMA_VERSION {
        return Err(format!(
            "baseline schema version {} is not {BASELINE_SCHEMA_VERSION}, the one this gpu-selftest reads; save it again",
            baseline.schema_version
        ));
    }
    Ok(baseline)
}

/// Reads the baseline `argument` names: the baseline itself when it starts with `{` (so that a
/// container can be handed one through an environment variable alone), else a file's path.
/// Returns the baseline and where it came from, for the rules printed beside the figures.
pub fn load(argument: &str) -> Result<(Baseline, String), String> {
    if argument.trim_start().starts_with('{') {
        let baseline = parse(argument).map_err(|message| format!("inline baseline: {message}"))?;
        return Ok((baseline, "inline baseline".to_string()));
    }
    let path = Path::new(argument);
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read the baseline {}: {error}", path.display()))?;
    let baseline = parse(&text).map_err(|message| format!("{}: {message}", path.display()))?;
    Ok((baseline, path.display().to_string()))
}

/// The file's text: pretty JSON, one trailing newline.
pub fn render(baseline: &Baseline) -> String {
    let mut text = serde_json::to_string_pretty(baseline).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Baseline {
        Baseline::new(
            1_796_034_872,
            vec!["NVIDIA H200".to_string(), "NVIDIA H200".to_string()],
            vec![
                BaselineFigure::from_gpus(
                    "matmul",
                    "bf16",
                    8192,
                    "tflops",
                    vec![780.0, 800.0, 790.0],
                )
                .unwrap(),
                BaselineFigure::from_gpus(
                    "nccl",
                    "all-reduce bus bandwidth, 2 GPUs",
                    512 << 20,
                    "bytes_per_second",
                    vec![310e9],
                )
                .unwrap(),
            ],
        )
    }

    #[test]
    fn the_reference_is_the_median_over_gpus() {
        let baseline = sample();
        assert_eq!(baseline.reference("matmul", "bf16", 8192), Some(790.0));
        assert_eq!(
            baseline.reference("nccl", "all-reduce bus bandwidth, 2 GPUs", 512 << 20),
            Some(310e9)
        );
        assert_eq!(baseline.reference("matmul", "bf16", 4096), None);
        assert_eq!(baseline.reference("matmul", "fp16", 8192), None);
        assert!(BaselineFigure::from_gpus("matmul", "bf16", 1, "tflops", vec![]).is_none());
    }

    #[test]
    fn a_saved_baseline_reads_back_equal() {
        let text = render(&sample());
        assert!(text.contains("\"kind\": \"gpu-selftest-baseline\""));
        assert_eq!(parse(&text).unwrap(), sample());
        let (inline, origin) = load(&text).unwrap();
        assert_eq!((inline, origin.as_str()), (sample(), "inline baseline"));
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("good-node.json");
        std::fs::write(&path, &text).unwrap();
        let (from_file, origin) = load(path.to_str().unwrap()).unwrap();
        assert_eq!(from_file, sample());
        assert_eq!(origin, path.display().to_string());
    }

    #[test]
    fn wrong_files_are_refused_with_a_reason() {
        assert!(load("/nonexistent/baseline.json")
            .unwrap_err()
            .starts_with("cannot read the baseline /nonexistent/baseline.json"));
        let report = r#"{"schema_version": 1, "tool": "gpu-selftest", "checks": []}"#;
        assert!(parse(report)
            .unwrap_err()
            .starts_with("not a gpu-selftest baseline"));
        let mut later = sample();
        later.schema_version = 2;
        assert!(parse(&render(&later))
            .unwrap_err()
            .contains("schema version 2"));
        let mut other_kind = sample();
        other_kind.kind = "report".to_string();
        assert!(parse(&render(&other_kind))
            .unwrap_err()
            .contains("kind is `report`"));
    }

    #[test]
    fn a_baseline_of_other_gpus_is_refused() {
        let baseline = sample();
        assert!(baseline.check_models(&["NVIDIA H200".to_string()]).is_ok());
        let error = baseline
            .check_models(&vec!["NVIDIA H100 80GB HBM3".to_string(); 8])
            .unwrap_err();
        assert!(error.starts_with(
            "the baseline was saved on NVIDIA H200 but this node has NVIDIA H100 80GB HBM3"
        ));
    }
}
