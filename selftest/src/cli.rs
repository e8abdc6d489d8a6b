//! Command-line flags (clap derive) and their translation into settings. No logic beyond parsing
//! and validating: sizes such as `256M`, check names, precisions.

use crate::expected::Precision;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// The checks, in the order they print; `app::CHECKS` registers each one (a test there keeps
/// the two equal).
pub const CHECK_NAMES: [&str; 8] = [
    "inventory",
    "bandwidth",
    "overlap",
    "matmul",
    "nccl",
    "health",
    "shm",
    "framework",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Prometheus,
}

/// Checks that the GPUs of this machine or container run at full speed with this CUDA stack.
///
/// Exit status: 0 every check passed (warnings allowed), 1 a check failed, 2 could not run
/// (no driver, no GPU, a missing library; the message names what and where it looked).
#[derive(Debug, Parser)]
#[command(name = "gpu-selftest", version, about, long_about = None)]
pub struct Cli {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,

    /// Write the report to FILE (atomically) instead of standard output; for the Prometheus
    /// textfile collector, point it into the collector's folder with a `.prom` name.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also draw host<->device bandwidth against transfer size (pinned and pageable) as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Run only these checks (comma-separated): inventory, bandwidth, overlap, matmul, nccl,
    /// health, shm, framework. Inventory always runs.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub checks: Option<Vec<String>>,

    /// Skip these checks (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub skip: Vec<String>,

    /// Skip the framework (torch) check.
    #[arg(long)]
    pub no_framework: bool,

    /// In the framework check, compile a torch.compile function instead of a Triton kernel
    /// (adds Dynamo's and Inductor's start-up: seconds longer).
    #[arg(long)]
    pub framework_torch_compile: bool,

    /// Judge every figure also against this baseline (saved with --save-baseline on a good node
    /// of the same GPU model): fail below 80% of it. A value starting with `{` is the baseline
    /// itself, so a container can be handed one through the environment alone.
    #[arg(long, env = "GPU_SELFTEST_BASELINE", value_name = "FILE|JSON")]
    pub baseline: Option<String>,

    /// The image this run tests, by digest (`sha256:…`): written into the JSON report as
    /// `image_digest`, so `imagegen test import` can file the result under the digest it was
    /// recorded with. `imagegen test` and the Kubernetes Jobs of `imagegen k8s --test` set it.
    #[arg(long, env = "GPU_SELFTEST_IMAGE_DIGEST", value_name = "DIGEST")]
    pub image_digest: Option<String>,

    /// The node's name in the report (`node_name`); default the host name. A Kubernetes Job
    /// sets it from the downward API (`spec.nodeName`), since a pod's host name is its own.
    #[arg(long, env = "GPU_SELFTEST_NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,

    /// After the run, save its figures as a baseline to FILE (only when no check failed).
    #[arg(long, value_name = "FILE")]
    pub save_baseline: Option<PathBuf>,

    /// Transfer sizes of the bandwidth sweep (K, M, G are KiB, MiB, GiB). Pinned copies reach
    /// their peak by 16-64 MiB; 1 GiB would add seconds of pageable copies and no information.
    #[arg(long, value_delimiter = ',', default_value = "1M,4M,16M,64M,256M")]
    pub bandwidth_sizes: Vec<String>,

    /// Timed copies per size and mode (the median is reported), after one warm-up copy.
    #[arg(long, default_value_t = 5)]
    pub bandwidth_repeats: usize,

    /// Size of the pinned copy in the overlap check.
    #[arg(long, default_value = "256M")]
    pub overlap_bytes: String,

    /// n of the n x n x n matmuls.
    #[arg(long, default_value_t = 8192)]
    pub matmul_size: usize,

    /// Matmul precisions (bf16, fp16, tf32, fp32).
    #[arg(long, value_delimiter = ',', default_value = "bf16,fp16,tf32,fp32")]
    pub matmul_precisions: Vec<String>,

    /// Timed matmuls per precision (median reported), after 3 warm-ups.
    #[arg(long, default_value_t = 20)]
    pub matmul_repeats: usize,

    /// All-reduce sizes (bytes of float32 per GPU).
    #[arg(long, value_delimiter = ',', default_value = "8M,64M,512M")]
    pub nccl_sizes: Vec<String>,

    /// Timed all-reduces per size (median reported), after 5 warm-ups; also the all-reduces
    /// queued in each back-to-back run.
    #[arg(long, default_value_t = 20)]
    pub nccl_repeats: usize,

    /// Back-to-back runs per all-reduce size (median reported).
    #[arg(long, default_value_t = 5)]
    pub nccl_runs: usize,

    /// Python interpreter for the framework check.
    #[arg(long, default_value = "python3")]
    pub python: String,

    /// Seconds the framework check may take (importing torch and compiling included).
    #[arg(long, default_value_t = 300)]
    pub framework_timeout: u64,

    /// torch version the image claims (e.g. 2.7.1).
    #[arg(long, env = "IMAGEGEN_TORCH")]
    pub expect_torch: Option<String>,

    /// CUDA version (major.minor) torch must be built with.
    #[arg(long, env = "IMAGEGEN_CUDA")]
    pub expect_cuda: Option<String>,

    /// cuDNN version the image claims (e.g. 9.5.1.17; compared on major.minor.patch).
    #[arg(long, env = "IMAGEGEN_CUDNN")]
    pub expect_cudnn: Option<String>,

    /// NCCL version torch must report (e.g. 2.21.5).
    #[arg(long, env = "IMAGEGEN_NCCL")]
    pub expect_nccl: Option<String>,

    /// Load the CUDA libraries of pip's wheels (site-packages/nvidia/*/lib, the ones torch uses)
    /// in preference to the loader cache and /usr/local/cuda.
    #[arg(long)]
    pub prefer_pip_libraries: bool,

    /// Print which gpu-selftest binary serves an image with this CUDA version on this machine's
    /// architecture (gpu-selftest-cu11, -cu12, -cu13; -arm64 on aarch64) and exit; runs no check.
    #[arg(long, value_name = "CUDA_VERSION")]
    pub binary_for_cuda: Option<String>,
}

/// Parses "256M", "1G", "64K", "1048576" into bytes (binary multiples).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let upper = trimmed.to_ascii_uppercase();
    let without_bytes = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (number, multiplier) = match without_bytes.chars().last() {
        Some('K') => (&without_bytes[..without_bytes.len() - 1], 1u64 << 10),
        Some('M') => (&without_bytes[..without_bytes.len() - 1], 1u64 << 20),
        Some('G') => (&without_bytes[..without_bytes.len() - 1], 1u64 << 30),
        _ => (without_bytes, 1),
    };
    let value: u64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{trimmed}` is not a size (examples: 1M, 256M, 1G)"))?;
    if value == 0 {
        return Err(format!("`{trimmed}`: a size must be larger than zero"));
    }
    value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{trimmed}` is too large"))
}

/// Parses a list of sizes, sorted and without duplicates.
pub fn parse_sizes(texts: &[String]) -> Result<Vec<u64>, String> {
    let mut sizes = texts
        .iter()
        .map(|text| parse_size(text))
        .collect::<Result<Vec<_>, _>>()?;
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return Err("the size list is empty".to_string());
    }
    Ok(sizes)
}

/// The checks selected by `--checks`, `--skip` and `--no-framework`, in run order.
pub fn selected_checks(
    only: Option<&[String]>,
    skip: &[String],
    no_framework: bool,
) -> Result<Vec<&'static str>, String> {
    for name in only.unwrap_or(&[]).iter().chain(skip) {
        if !CHECK_NAMES.contains(&name.trim()) {
            return Err(format!(
                "unknown check `{name}` (checks: {})",
                CHECK_NAMES.join(", ")
            ));
        }
    }
    Ok(CHECK_NAMES
        .into_iter()
        .filter(|name| {
            *name == "inventory"
                || only.is_none_or(|list| list.iter().any(|wanted| wanted.trim() == *name))
        })
        .filter(|name| !skip.iter().any(|skipped| skipped.trim() == *name))
        .filter(|name| !(no_framework && *name == "framework"))
        .collect())
}

/// Parses the precision list.
pub fn parse_precisions(texts: &[String]) -> Result<Vec<Precision>, String> {
    texts
        .iter()
        .map(|text| {
            Precision::parse(text)
                .ok_or_else(|| format!("unknown precision `{text}` (bf16, fp16, tf32, fp32)"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0M").is_err());
        assert!(parse_size("lots")
            .unwrap_err()
            .contains("`lots` is not a size"));
        assert_eq!(
            parse_sizes(&["1G".into(), "1M".into(), "1M".into()]),
            Ok(vec![1 << 20, 1 << 30])
        );
    }

    #[test]
    fn check_selection() {
        let all = selected_checks(None, &[], false).unwrap();
        assert_eq!(all, CHECK_NAMES.to_vec());
        let only = selected_checks(Some(&["matmul".to_string()]), &[], false).unwrap();
        assert_eq!(only, vec!["inventory", "matmul"]);
        let skipped = selected_checks(None, &["nccl".to_string()], true).unwrap();
        assert!(!skipped.contains(&"nccl") && !skipped.contains(&"framework"));
        assert!(selected_checks(Some(&["gpu".to_string()]), &[], false)
            .unwrap_err()
            .contains("unknown check `gpu`"));
    }

    #[test]
    fn flags_and_environment_claims() {
        let cli = Cli::try_parse_from([
            "gpu-selftest",
            "--format",
            "json",
            "--checks",
            "bandwidth,shm",
            "--expect-torch",
            "2.7.1",
        ])
        .unwrap();
        assert_eq!(cli.format, Format::Json);
        assert_eq!(cli.checks.unwrap(), vec!["bandwidth", "shm"]);
        assert_eq!(cli.expect_torch.as_deref(), Some("2.7.1"));
        assert_eq!(cli.matmul_size, 8192);
        assert!(parse_precisions(&["bf16".into(), "fp8".into()]).is_err());
        assert!(!cli.framework_torch_compile && cli.save_baseline.is_none());
        let cli = Cli::try_parse_from([
            "gpu-selftest",
            "--baseline",
            "good.json",
            "--save-baseline",
            "new.json",
            "--framework-torch-compile",
        ])
        .unwrap();
        assert_eq!(cli.baseline.as_deref(), Some("good.json"));
        assert_eq!(cli.save_baseline, Some(PathBuf::from("new.json")));
        assert!(cli.framework_torch_compile);
    }
}
