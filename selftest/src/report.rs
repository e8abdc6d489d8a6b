//! The report: what every check found, and its three renderings (table, JSON, Prometheus).
//!
//! The JSON form is a versioned schema (README.md, "JSON schema") that imagegen stores in its
//! manifest, so fields are only ever added; renaming or removing one bumps `SCHEMA_VERSION`.
//! Rendering is pure: a `Report` value in, text out.

use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// Version of the JSON layout below.
pub const SCHEMA_VERSION: u32 = 1;
/// The `tool` field of the JSON report.
pub const TOOL_NAME: &str = "gpu-selftest";

/// Outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Warn,
    Skip,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Warn => "WARN",
            Status::Skip => "SKIP",
        }
    }
}

/// Outcome of the whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Overall {
    Pass,
    Fail,
    Error,
}

impl Overall {
    /// The process exit code: 0 all passed, 1 a check failed, 2 could not run.
    pub fn exit_code(self) -> i32 {
        match self {
            Overall::Pass => 0,
            Overall::Fail => 1,
            Overall::Error => 2,
        }
    }
}

/// One Prometheus sample: a metric name (without the `gpu_selftest_` prefix), labels, a value.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl Metric {
    pub fn new(name: &'static str, help: &'static str, value: f64) -> Self {
        Metric {
            name,
            help,
            labels: Vec::new(),
            value,
        }
    }

    pub fn label(mut self, key: &'static str, value: impl ToString) -> Self {
        self.labels.push((key, value.to_string()));
        self
    }
}

/// One check's result. `figures` holds the check's measurements for the JSON report; `lines`
/// the same figures laid out for the table; `metrics` the Prometheus samples.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub summary: String,
    /// The pass/fail rule in words, printed next to the figures it judged.
    pub rule: String,
    /// Wall-clock seconds the check took.
    pub duration_seconds: f64,
    #[serde(flatten)]
    pub figures: Map<String, Value>,
    #[serde(skip)]
    pub lines: Vec<String>,
    #[serde(skip)]
    pub metrics: Vec<Metric>,
}

impl Check {
    pub fn new(name: &str, status: Status, summary: impl Into<String>) -> Self {
        Check {
            name: name.to_string(),
            status,
            summary: summary.into(),
            rule: String::new(),
            duration_seconds: 0.0,
            figures: Map::new(),
            lines: Vec::new(),
            metrics: Vec::new(),
        }
    }

    pub fn with_rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = rule.into();
        self
    }

    /// Adds one figure to the JSON object of this check.
    pub fn figure(mut self, key: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.figures.insert(key.to_string(), value);
        self
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub tool: &'static str,
    pub version: &'static str,
    /// The CUDA major the binary was built for ("11", "12", "13").
    pub cuda_build_major: &'static str,
    pub overall: Overall,
    /// Seconds since the Unix epoch when the run started.
    pub started_at_unix_seconds: u64,
    pub duration_seconds: f64,
    /// Seconds from the start until the GPUs were open and the inventory read (driver start-up).
    pub setup_seconds: f64,
    /// Seconds the search for the CUDA libraries took before the re-execution (0 without it).
    pub loader_seconds: f64,
    /// Why the run could not complete, when `overall` is "error".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The node the run saw (`--node-name`, `GPU_SELFTEST_NODE_NAME`, else the host name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The image under test, when the caller named it (`--image-digest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn new(started_at_unix_seconds: u64, cuda_build_major: &'static str) -> Self {
        Report {
            schema_version: SCHEMA_VERSION,
            tool: TOOL_NAME,
            version: env!("CARGO_PKG_VERSION"),
            cuda_build_major,
            overall: Overall::Pass,
            started_at_unix_seconds,
            duration_seconds: 0.0,
            setup_seconds: 0.0,
            loader_seconds: 0.0,
            error: None,
            node_name: None,
            image_digest: None,
            checks: Vec::new(),
        }
    }

    /// Sets `overall` from the checks: any failure fails the run; warnings and skips do not.
    /// An error already recorded stays.
    pub fn settle(&mut self) {
        if self.error.is_some() {
            self.overall = Overall::Error;
        } else if self.checks.iter().any(|check| check.status == Status::Fail) {
            self.overall = Overall::Fail;
        } else {
            self.overall = Overall::Pass;
        }
    }
}

/// The JSON rendering (pretty-printed, one trailing newline).
pub fn render_json(report: &Report) -> String {
    let mut text = serde_json::to_string_pretty(report).unwrap_or_else(|error| {
        format!(
            "{{\"schema_version\":{SCHEMA_VERSION},\"overall\":\"error\",\"error\":\"{error}\"}}"
        )
    });
    text.push('\n');
    text
}

/// The readable table: one block per check with its status, summary, rule and figures.
pub fn render_table(report: &Report) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} {} (CUDA {} build)",
        TOOL_NAME, report.version, report.cuda_build_major
    );
    let name_width = report
        .checks
        .iter()
        .map(|check| check.name.len())
        .max()
        .unwrap_or(0);
    for check in &report.checks {
        let _ = writeln!(text);
        let _ = writeln!(
            text,
            "[{}] {:<name_width$}  {} ({:.1} s)",
            check.status.label(),
            check.name,
            check.summary,
            check.duration_seconds
        );
        if !check.rule.is_empty() {
            let _ = writeln!(text, "       rule: {}", check.rule);
        }
        for line in &check.lines {
            let _ = writeln!(text, "       {line}");
        }
    }
    let _ = writeln!(text);
    if let Some(error) = &report.error {
        let _ = writeln!(text, "error: {error}");
    }
    let count = |status: Status| {
        report
            .checks
            .iter()
            .filter(|check| check.status == status)
            .count()
    };
    let _ = writeln!(
        text,
        "overall: {} ({} passed, {} failed, {} warned, {} skipped) in {:.1} s",
        match report.overall {
            Overall::Pass => "PASS",
            Overall::Fail => "FAIL",
            Overall::Error => "ERROR",
        },
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Skip),
        report.duration_seconds
    );
    text
}

/// Escapes a Prometheus label value (backslash, double quote, newline).
fn escape_label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Formats a sample value the way the text exposition format expects.
fn format_sample_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{value}")
    }
}

/// The node-exporter textfile-collector rendering: `# HELP` and `# TYPE gauge` once per metric
/// family, then its samples; every name starts with `gpu_selftest_`.
pub fn render_prometheus(report: &Report) -> String {
    let mut samples: Vec<Metric> = vec![
        Metric::new(
            "overall_status",
            "Outcome of the whole run: 0 pass, 1 fail, 2 error (the exit code).",
            report.overall.exit_code() as f64,
        ),
        Metric::new(
            "run_timestamp_seconds",
            "When the run started, seconds since the Unix epoch.",
            report.started_at_unix_seconds as f64,
        ),
        Metric::new(
            "run_duration_seconds",
            "How long the run took.",
            report.duration_seconds,
        ),
    ];
    for check in &report.checks {
        for status in [Status::Pass, Status::Fail, Status::Warn, Status::Skip] {
            samples.push(
                Metric::new(
                    "check_status",
                    "1 for the status each check ended in, 0 for the others.",
                    if check.status == status { 1.0 } else { 0.0 },
                )
                .label("check", &check.name)
                .label("status", status.label().to_lowercase()),
            );
        }
        samples.push(
            Metric::new(
                "check_duration_seconds",
                "Wall-clock seconds each check took.",
                check.duration_seconds,
            )
            .label("check", &check.name),
        );
        samples.extend(check.metrics.iter().cloned());
    }
    // Group samples by family, keeping the order in which families first appear.
    let mut family_order: Vec<&'static str> = Vec::new();
    for sample in &samples {
        if !family_order.contains(&sample.name) {
            family_order.push(sample.name);
        }
    }
    let mut text = String::new();
    for family in family_order {
        let members: Vec<&Metric> = samples
            .iter()
            .filter(|sample| sample.name == family)
            .collect();
        let _ = writeln!(text, "# HELP gpu_selftest_{family} {}", members[0].help);
        let _ = writeln!(text, "# TYPE gpu_selftest_{family} gauge");
        for sample in members {
            let labels: Vec<String> = sample
                .labels
                .iter()
                .map(|(key, value)| format!("{key}=\"{}\"", escape_label_value(value)))
                .collect();
            let label_text = if labels.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", labels.join(","))
            };
            let _ = writeln!(
                text,
                "gpu_selftest_{family}{label_text} {}",
                format_sample_value(sample.value)
            );
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_report() -> Report {
        let mut report = Report::new(1_764_500_000, "12");
        report.duration_seconds = 12.5;
        let mut bandwidth = Check::new(
            "bandwidth",
            Status::Pass,
            "GPU 0 pinned H2D 55.1 GB/s, D2H 55.3 GB/s",
        )
        .with_rule("pinned >= 80% of PCIe Gen5 x16 (63.0 GB/s)")
        .figure("pinned_share_of_link", 0.87);
        bandwidth.lines.push("size  H2D pinned".to_string());
        bandwidth.metrics.push(
            Metric::new("bandwidth_bytes_per_second", "Copy bandwidth.", 5.5e10)
                .label("gpu", 0)
                .label("direction", "h2d"),
        );
        report.checks.push(bandwidth);
        report.checks.push(Check::new(
            "shm",
            Status::Warn,
            "/dev/shm is 64 MiB \"small\"",
        ));
        report.settle();
        report
    }

    #[test]
    fn overall_follows_the_worst_check() {
        let mut report = sample_report();
        assert_eq!(report.overall, Overall::Pass);
        report.checks.push(Check::new("matmul", Status::Fail, "x"));
        report.settle();
        assert_eq!(report.overall, Overall::Fail);
        assert_eq!(report.overall.exit_code(), 1);
        report.error = Some("libcuda.so.1 not found".to_string());
        report.settle();
        assert_eq!(report.overall.exit_code(), 2);
    }

    #[test]
    fn json_has_the_fields_imagegen_reads() {
        let value: Value = serde_json::from_str(&render_json(&sample_report())).unwrap();
        assert_eq!(value["schema_version"], 1);
        assert_eq!(value["tool"], "gpu-selftest");
        assert_eq!(value["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(value["overall"], "pass");
        assert_eq!(value["cuda_build_major"], "12");
        assert!(value.get("error").is_none());
        let checks = value["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0]["name"], "bandwidth");
        assert_eq!(checks[0]["status"], "pass");
        assert_eq!(
            checks[0]["summary"],
            "GPU 0 pinned H2D 55.1 GB/s, D2H 55.3 GB/s"
        );
        assert_eq!(
            checks[0]["rule"],
            "pinned >= 80% of PCIe Gen5 x16 (63.0 GB/s)"
        );
        assert_eq!(checks[0]["pinned_share_of_link"], 0.87);
        assert!(checks[0].get("lines").is_none() && checks[0].get("metrics").is_none());
        assert_eq!(checks[1]["status"], "warn");
    }

    #[test]
    fn table_shows_status_rule_and_figures() {
        let text = render_table(&sample_report());
        assert!(text.starts_with("gpu-selftest "));
        assert!(
            text.contains("[PASS] bandwidth  GPU 0 pinned H2D 55.1 GB/s, D2H 55.3 GB/s (0.0 s)\n")
        );
        assert!(text.contains("       rule: pinned >= 80% of PCIe Gen5 x16 (63.0 GB/s)\n"));
        assert!(text.contains("       size  H2D pinned\n"));
        assert!(text.contains("[WARN] shm        /dev/shm is 64 MiB"));
        assert!(
            text.ends_with("overall: PASS (1 passed, 0 failed, 1 warned, 0 skipped) in 12.5 s\n")
        );
    }

    #[test]
    fn prometheus_groups_families_and_escapes_labels() {
        let text = render_prometheus(&sample_report());
        assert!(text.starts_with("# HELP gpu_selftest_overall_status "));
        assert!(text
            .contains("# TYPE gpu_selftest_overall_status gauge\ngpu_selftest_overall_status 0\n"));
        assert!(text.contains("gpu_selftest_run_timestamp_seconds 1764500000\n"));
        assert!(text.contains("gpu_selftest_check_status{check=\"bandwidth\",status=\"pass\"} 1\n"));
        assert!(text.contains("gpu_selftest_check_status{check=\"shm\",status=\"pass\"} 0\n"));
        assert!(text.contains(
            "gpu_selftest_bandwidth_bytes_per_second{gpu=\"0\",direction=\"h2d\"} 55000000000\n"
        ));
        assert_eq!(
            text.matches("# TYPE gpu_selftest_check_status gauge")
                .count(),
            1
        );
        // Every non-comment line is `name{labels} value`.
        let mut samples = 0;
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').unwrap();
            assert!(name.starts_with("gpu_selftest_"), "{line}");
            assert!(value.parse::<f64>().is_ok() || value == "NaN", "{line}");
            samples += 1;
        }
        assert!(samples > 1, "{text}");
        assert_eq!(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(format_sample_value(f64::INFINITY), "+Inf");
    }
}
