//! The pass/fail rules, kept as plain data and pure functions so that each is unit-tested and
//! printed next to the figure it judges.
//!
//! Speed rules take a share of a reference: a datasheet peak of the GPU's model
//! (`expected.rs`), the rate of the link between host and GPU or between GPUs, or a baseline
//! saved on a node known to be good (`baseline.rs`). The shares were chosen from measurements
//! on 2×H200 (BENCHMARKS.md, gpu-selftest section): a healthy GPU clears each with margin, a GPU
//! shared with another job or an all-reduce that lost NVLink does not.
//!
//! Also the rule that maps an image's CUDA version to the `gpu-selftest-cu<major>` binary built
//! for it; imagegen applies the same rule when it copies the binary into an image.

use crate::baseline::Baseline;
use crate::expected::{GpuModel, Precision};
use serde::Serialize;

/// Pinned host↔device bandwidth must reach this share of what the PCIe link allows.
pub const PINNED_SHARE_OF_LINK: f64 = 0.80;
/// The copy/compute overlap check passes when at least this share of the shorter operation hides.
pub const MINIMUM_HIDDEN_SHARE: f64 = 0.50;
/// `/dev/shm` below this size draws a warning (PyTorch DataLoader workers pass batches through it).
pub const MINIMUM_SHM_BYTES: u64 = 1 << 30;
/// Each GPU's matmul TFLOP/s (products queued back to back) must reach this share of its
/// model's dense datasheet peak. Healthy H200s reached 0.75–0.86 of it in every precision over
/// three sessions (bf16 790–818 of 989.5, fp32 50–51 of 67); with a second process running bf16
/// matmuls on the same GPU, 0.31–0.33 in every precision (BENCHMARKS.md).
pub const MATMUL_SHARE_OF_PEAK: f64 = 0.60;
/// The peak rule applies from this n on: smaller products cannot fill a large GPU, so their
/// rate says little about its health.
pub const MATMUL_SMALLEST_JUDGED_SIZE: usize = 4096;
/// All-reduce bus bandwidth must reach this share of what one direction of the path between the
/// GPUs carries. 2×H200 over NVLink 4 x18 (450 GB/s per direction) reach 311–315 GB/s back to
/// back at 512 MiB (0.69–0.70; 335 at 2 GiB); with `NCCL_P2P_DISABLE=1` (through host memory)
/// 26–28 GB/s (0.06), and with another process's matmuls on one GPU 142 GB/s (0.32).
pub const NCCL_SHARE_OF_PATH: f64 = 0.50;
/// The path rule applies to sizes from this on; smaller all-reduces are bound by latency.
pub const NCCL_SMALLEST_JUDGED_BYTES: u64 = 256 << 20;
/// With a baseline, every judged figure must reach this share of the baseline's. Repeated runs
/// on 2×H200 machines varied by at most 4% (bf16 790–818 TFLOP/s, all-reduce at 8 MiB 172–179
/// GB/s, pinned copies 41–43 GB/s at 1 MiB), and gpu-anchors.md reports up to 10% between GPUs;
/// a shared GPU or a lost NVLink falls far below 80%.
pub const BASELINE_SHARE: f64 = 0.80;

/// Usable bandwidth of one PCIe lane in one direction, in bytes per second, after line coding.
/// Generation 1 and 2 use 8b/10b coding, 3 to 5 use 128b/130b, 6 uses FLIT mode (242/256).
pub fn pcie_lane_bytes_per_second(generation: u32) -> Option<f64> {
    let transfers_per_second: f64 = match generation {
        1 => 2.5e9,
        2 => 5.0e9,
        3 => 8.0e9,
        4 => 16.0e9,
        5 => 32.0e9,
        6 => 64.0e9,
        _ => return None,
    };
    let coding_efficiency = match generation {
        1 | 2 => 8.0 / 10.0,
        3..=5 => 128.0 / 130.0,
        _ => 242.0 / 256.0,
    };
    Some(transfers_per_second * coding_efficiency / 8.0)
}

/// What a link of `generation` and `width` lanes carries in one direction, in bytes per second.
pub fn pcie_link_bytes_per_second(generation: u32, width: u32) -> Option<f64> {
    if width == 0 {
        return None;
    }
    pcie_lane_bytes_per_second(generation).map(|lane| lane * width as f64)
}

/// The verdict of one rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// The rule could not be applied (for example the PCIe link is unknown).
    #[serde(rename = "notapplied")]
    NotApplied,
}

impl Verdict {
    /// The word printed beside a judged figure.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "ok",
            Verdict::Fail => "SLOW",
            Verdict::NotApplied => "not judged",
        }
    }
}

/// `measured` against `share` × `reference`: Pass when it reaches it, Fail below it or when the
/// measurement is not a finite number, NotApplied without a reference.
pub fn judge_at_least(measured: f64, reference: Option<f64>, share: f64) -> Verdict {
    match reference {
        None => Verdict::NotApplied,
        Some(reference) if measured.is_finite() && measured >= share * reference => Verdict::Pass,
        Some(_) => Verdict::Fail,
    }
}

/// Pinned bandwidth (the best median over the sweep) against the link's theoretical rate.
pub fn judge_pinned_bandwidth(best_pinned_bytes_per_second: f64, link: Option<f64>) -> Verdict {
    judge_at_least(best_pinned_bytes_per_second, link, PINNED_SHARE_OF_LINK)
}

/// What a figure must reach: `share` of `reference`, and what the reference is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    /// The figure the share is taken of, in the unit of the judged figure.
    pub reference: f64,
    pub share: f64,
    /// The reference in words, with its value: "H200 SXM dense bf16 peak 989.5 TFLOP/s".
    pub basis: String,
}

impl Expectation {
    /// The least value that passes.
    pub fn required(&self) -> f64 {
        self.reference * self.share
    }

    pub fn judge(&self, measured: f64) -> Verdict {
        judge_at_least(measured, Some(self.reference), self.share)
    }
}

/// The peak rule of one matmul: `share` of the dense datasheet peak of the GPU's model. `Err`
/// says why it does not apply (a model missing from the table, a product too small to judge);
/// the check then warns.
pub fn matmul_expectation(
    model: Option<&GpuModel>,
    device_name: &str,
    precision: Precision,
    size: usize,
) -> Result<Expectation, String> {
    let model = model.ok_or_else(|| {
        format!("{device_name} is not in the expected-figures table, so no peak to judge against")
    })?;
    if size < MATMUL_SMALLEST_JUDGED_SIZE {
        return Err(format!(
            "n = {size} is below {MATMUL_SMALLEST_JUDGED_SIZE}: too small to fill the GPU, not judged against its peak"
        ));
    }
    let peak = model.dense_tflops(precision).ok_or_else(|| {
        format!(
            "the table has no {} rate for the {}",
            precision.name(),
            model.model
        )
    })?;
    Ok(Expectation {
        reference: peak,
        share: MATMUL_SHARE_OF_PEAK,
        basis: format!(
            "{} dense {} peak {peak:.1} TFLOP/s",
            model.model,
            precision.name()
        ),
    })
}

/// What is known about one GPU's links, for choosing the path of an all-reduce.
#[derive(Clone, Debug)]
pub struct GpuLinks<'a> {
    pub index: usize,
    pub device_name: &'a str,
    pub model: Option<&'a GpuModel>,
    /// Maximum PCIe generation and width of the GPU's link, as the inventory read it.
    pub pcie: Option<(u32, u32)>,
    /// Visible GPUs NVML reports reachable over NVLink; `None` when NVML is not available.
    pub nvlink_peers: Option<Vec<usize>>,
}

/// The path an all-reduce between the GPUs takes, and what one direction of it carries.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CollectivePath {
    /// "nvlink" or "pcie".
    pub kind: &'static str,
    /// "NVLink 4 x18 (H200 SXM datasheet: 900 GB/s both directions)".
    pub label: String,
    pub bytes_per_second_per_direction: f64,
    /// Why the path was chosen when that is not plain from NVML (no NVML, say).
    pub note: Option<String>,
}

/// The path the topology offers an all-reduce across `gpus`: NVLink when NVML reports every
/// pair of visible GPUs joined by it (the slowest model's per-direction NVLink figure), else PCIe
/// (the slowest GPU's link, from the inventory or else from the model's datasheet). `Err` says
/// why no expectation can be formed (NVLink of a model missing from the table, unknown links).
pub fn collective_path(gpus: &[GpuLinks]) -> Result<CollectivePath, String> {
    if gpus.len() < 2 {
        return Err("one GPU: no path between GPUs".to_string());
    }
    let joined_by_nvlink = gpus.iter().all(|gpu| {
        gpu.nvlink_peers.as_ref().is_some_and(|peers| {
            gpus.iter()
                .filter(|other| other.index != gpu.index)
                .all(|other| peers.contains(&other.index))
        })
    });
    if joined_by_nvlink {
        let mut slowest: Option<(&GpuModel, f64)> = None;
        for gpu in gpus {
            let Some((model, nvlink)) = gpu.model.and_then(|m| m.nvlink.map(|n| (m, n))) else {
                return Err(format!(
                    "NVML reports NVLink between the GPUs, but GPU {} ({}) has no NVLink figures in the expected-figures table",
                    gpu.index, gpu.device_name
                ));
            };
            let rate = nvlink.bytes_per_second_per_direction();
            if slowest.is_none_or(|(_, known)| rate < known) {
                slowest = Some((model, rate));
            }
        }
        let (model, rate) = slowest.expect("two or more GPUs were looked at");
        let nvlink = model.nvlink.expect("chosen for its NVLink figures");
        return Ok(CollectivePath {
            kind: "nvlink",
            label: format!(
                "{} ({} datasheet: {} GB/s both directions)",
                nvlink.label(),
                model.model,
                nvlink.datasheet_gigabytes_per_second
            ),
            bytes_per_second_per_direction: rate,
            note: None,
        });
    }
    let mut slowest: Option<(u32, u32, f64, bool)> = None;
    for gpu in gpus {
        let (link, from_datasheet) = match (gpu.pcie, gpu.model) {
            (Some(link), _) => (link, false),
            (None, Some(model)) => ((model.pcie.generation, model.pcie.width), true),
            (None, None) => {
                return Err(format!(
                    "the PCIe link of GPU {} ({}) is unknown and its model is not in the expected-figures table",
                    gpu.index, gpu.device_name
                ))
            }
        };
        let Some(rate) = pcie_link_bytes_per_second(link.0, link.1) else {
            return Err(format!(
                "GPU {}: PCIe Gen{} x{} has no known rate",
                gpu.index, link.0, link.1
            ));
        };
        if slowest.is_none_or(|(_, _, known, _)| rate < known) {
            slowest = Some((link.0, link.1, rate, from_datasheet));
        }
    }
    let (generation, width, rate, from_datasheet) =
        slowest.expect("two or more GPUs were looked at");
    let no_nvml = gpus.iter().any(|gpu| gpu.nvlink_peers.is_none());
    let note = match (no_nvml, from_datasheet) {
        (true, _) => Some("NVLink unknown (no NVML): judged against PCIe".to_string()),
        (false, true) => Some("PCIe link read from the datasheet (unknown here)".to_string()),
        (false, false) => None,
    };
    Ok(CollectivePath {
        kind: "pcie",
        label: format!("PCIe Gen{generation} x{width}"),
        bytes_per_second_per_direction: rate,
        note,
    })
}

/// The all-reduce rule: bus bandwidth at least `NCCL_SHARE_OF_PATH` of one direction of `path`.
pub fn nccl_expectation(path: &CollectivePath) -> Expectation {
    Expectation {
        reference: path.bytes_per_second_per_direction,
        share: NCCL_SHARE_OF_PATH,
        basis: format!(
            "{:.1} GB/s per direction of {}",
            path.bytes_per_second_per_direction / 1e9,
            path.label
        ),
    }
}

/// The baseline rule: at least `BASELINE_SHARE` of the baseline's figure, `reference_text` being
/// that figure with its unit ("790.1 TFLOP/s").
pub fn baseline_expectation(reference: f64, reference_text: &str) -> Expectation {
    Expectation {
        reference,
        share: BASELINE_SHARE,
        basis: format!("baseline {reference_text}"),
    }
}

/// What the checks judge speed against: each visible GPU's name and model (by index) and, with
/// `--baseline`, the baseline and where it came from.
#[derive(Clone, Debug, Default)]
pub struct References<'a> {
    pub gpus: Vec<(String, Option<&'a GpuModel>)>,
    pub baseline: Option<(&'a Baseline, String)>,
}

impl<'a> References<'a> {
    pub fn device_name(&self, gpu: usize) -> &str {
        self.gpus
            .get(gpu)
            .map(|(name, _)| name.as_str())
            .unwrap_or("an unknown GPU")
    }

    pub fn model(&self, gpu: usize) -> Option<&'a GpuModel> {
        self.gpus.get(gpu).and_then(|(_, model)| *model)
    }

    /// The baseline rule of one figure: `None` without a baseline, `Some(Err)` naming the
    /// figure when the baseline lacks it. `show` formats a value with its unit.
    pub fn baseline(
        &self,
        check: &str,
        figure: &str,
        size: u64,
        show: impl Fn(f64) -> String,
    ) -> Option<Result<Expectation, String>> {
        let (baseline, _) = self.baseline.as_ref()?;
        Some(match baseline.reference(check, figure, size) {
            Some(value) => Ok(baseline_expectation(value, &show(value))),
            None => Err(format!(
                "the baseline has no {check} {figure} figure at this size"
            )),
        })
    }

    /// The baseline part of a check's rule text (empty without a baseline).
    pub fn baseline_rule(&self) -> String {
        match &self.baseline {
            Some((_, origin)) => format!(
                "; baseline ({origin}): each figure >= {:.0}% of the good node's (its median over GPUs), a figure the baseline lacks warns",
                BASELINE_SHARE * 100.0
            ),
            None => String::new(),
        }
    }
}

/// "needs >= 593.7 TFLOP/s (60% of H200 SXM dense bf16 peak 989.5 TFLOP/s): ok".
pub fn expectation_text(
    expectation: &Expectation,
    measured: f64,
    show: impl Fn(f64) -> String,
) -> String {
    format!(
        "needs >= {} ({:.0}% of {}): {}",
        show(expectation.required()),
        expectation.share * 100.0,
        expectation.basis,
        expectation.judge(measured).word()
    )
}

/// The PCIe link the bandwidth check judges a GPU against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLink {
    /// Generation and width; `None` when neither the inventory nor the table knows it.
    pub link: Option<(u32, u32)>,
    /// Where the link differs from what was read, or from what the model is built for.
    pub note: Option<String>,
    /// The link carries less than the model's datasheet interface: the check warns.
    pub narrower_than_model: bool,
}

/// The inventory's link when known (a GPU in a narrower slot is judged by the slot, and the
/// check warns that the slot is narrower), else the model's datasheet interface.
pub fn host_link(inventory: Option<(u32, u32)>, model: Option<&GpuModel>) -> HostLink {
    let designed = model.map(|model| (model.pcie.generation, model.pcie.width));
    let rate = |(generation, width): (u32, u32)| {
        pcie_link_bytes_per_second(generation, width).unwrap_or(0.0)
    };
    match (inventory, designed, model) {
        (Some(link), Some(designed), Some(model)) if rate(link) < rate(designed) => HostLink {
            link: Some(link),
            note: Some(format!(
                "link at most PCIe Gen{} x{}, narrower than the {}'s Gen{} x{}",
                link.0, link.1, model.model, designed.0, designed.1
            )),
            narrower_than_model: true,
        },
        (Some(link), _, _) => HostLink {
            link: Some(link),
            note: None,
            narrower_than_model: false,
        },
        (None, Some(designed), Some(model)) => HostLink {
            link: Some(designed),
            note: Some(format!(
                "link not readable here: the {} datasheet's PCIe Gen{} x{} assumed",
                model.model, designed.0, designed.1
            )),
            narrower_than_model: false,
        },
        _ => HostLink {
            link: None,
            note: None,
            narrower_than_model: false,
        },
    }
}

/// Share of the shorter operation hidden when a copy and a matmul run on two streams at once:
/// (copy alone + matmul alone − together) / min(copy alone, matmul alone), clamped to [0, 1].
pub fn hidden_share(copy_ms: f64, matmul_ms: f64, together_ms: f64) -> f64 {
    let shorter = copy_ms.min(matmul_ms);
    if shorter <= 0.0 || !together_ms.is_finite() {
        return 0.0;
    }
    ((copy_ms + matmul_ms - together_ms) / shorter).clamp(0.0, 1.0)
}

/// Splits a dotted version into numbers, ignoring a local part ("2.7.1+cu126" → [2, 7, 1]).
pub fn version_numbers(text: &str) -> Vec<u64> {
    let public = text.trim().split('+').next().unwrap_or("");
    public
        .split('.')
        .map_while(|part| {
            let digits: String = part.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        })
        .collect()
}

/// True when every component the claim gives equals the found version's component
/// ("2.7" matches "2.7.1+cu126"; "2.7.1" does not match "2.7.0").
pub fn version_matches_claim(claimed: &str, found: &str) -> bool {
    let claimed_numbers = version_numbers(claimed);
    let found_numbers = version_numbers(found);
    !claimed_numbers.is_empty()
        && claimed_numbers.len() <= found_numbers.len()
        && claimed_numbers
            .iter()
            .zip(&found_numbers)
            .all(|(left, right)| left == right)
}

/// Turns `torch.backends.cudnn.version()` into "major.minor.patch": cuDNN 9 and later encode
/// major·10000 + minor·100 + patch (90501 → 9.5.1), cuDNN 8 and earlier major·1000 + minor·100 +
/// patch (8907 → 8.9.7).
pub fn cudnn_version_from_integer(encoded: u64) -> String {
    let (major, minor, patch) = if encoded >= 90_000 {
        (encoded / 10_000, (encoded % 10_000) / 100, encoded % 100)
    } else {
        (encoded / 1_000, (encoded % 1_000) / 100, encoded % 100)
    };
    format!("{major}.{minor}.{patch}")
}

/// A cuDNN claim ("9.5.1.17": the wheel's full version) against the encoded integer torch
/// reports, which carries only major, minor and patch: the first three components must match.
pub fn cudnn_matches_claim(claimed: &str, encoded: u64) -> bool {
    let claimed_numbers = version_numbers(claimed);
    let shortened: Vec<String> = claimed_numbers
        .iter()
        .take(3)
        .map(|number| number.to_string())
        .collect();
    version_matches_claim(&shortened.join("."), &cudnn_version_from_integer(encoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_gen5_x16_carries_about_63_gb_per_second() {
        let rate = pcie_link_bytes_per_second(5, 16).unwrap();
        assert!((rate / 1e9 - 63.015).abs() < 0.01, "{rate}");
        let gen3 = pcie_link_bytes_per_second(3, 16).unwrap();
        assert!((gen3 / 1e9 - 15.754).abs() < 0.01, "{gen3}");
        assert_eq!(pcie_link_bytes_per_second(2, 8), Some(4.0e9));
        assert_eq!(pcie_link_bytes_per_second(7, 16), None);
        assert_eq!(pcie_link_bytes_per_second(4, 0), None);
    }

    #[test]
    fn pinned_rule_is_eighty_percent_of_the_link() {
        let link = pcie_link_bytes_per_second(5, 16);
        assert_eq!(judge_pinned_bandwidth(55.3e9, link), Verdict::Pass);
        assert_eq!(judge_pinned_bandwidth(50.5e9, link), Verdict::Pass);
        assert_eq!(judge_pinned_bandwidth(50.3e9, link), Verdict::Fail);
        assert_eq!(judge_pinned_bandwidth(12.0e9, link), Verdict::Fail);
        assert_eq!(judge_pinned_bandwidth(55.0e9, None), Verdict::NotApplied);
    }

    #[test]
    fn a_share_of_a_reference_passes_at_or_above_and_fails_below_or_on_nan() {
        assert_eq!(judge_at_least(60.0, Some(100.0), 0.6), Verdict::Pass);
        assert_eq!(judge_at_least(59.9, Some(100.0), 0.6), Verdict::Fail);
        assert_eq!(judge_at_least(f64::NAN, Some(100.0), 0.6), Verdict::Fail);
        assert_eq!(
            judge_at_least(f64::INFINITY, Some(100.0), 0.6),
            Verdict::Fail
        );
        assert_eq!(judge_at_least(1e9, None, 0.6), Verdict::NotApplied);
        assert_eq!(Verdict::Fail.word(), "SLOW");
        assert_eq!(
            serde_json::to_value(Verdict::NotApplied).unwrap(),
            "notapplied"
        );
    }

    #[test]
    fn the_matmul_rule_is_sixty_percent_of_the_dense_peak_from_n_4096() {
        let h200 = crate::expected::find("NVIDIA H200");
        let bf16 = matmul_expectation(h200, "NVIDIA H200", Precision::Bf16, 8192).unwrap();
        assert_eq!(bf16.reference, 989.5);
        assert!((bf16.required() - 593.7).abs() < 1e-9);
        assert_eq!(bf16.basis, "H200 SXM dense bf16 peak 989.5 TFLOP/s");
        // Healthy H200s in gpu-anchors.md and BENCHMARKS.md: bf16 755-897, tf32 396-437, fp32
        // 50.4-51.3. A product sharing the GPU with another process: about half.
        assert_eq!(bf16.judge(755.0), Verdict::Pass);
        assert_eq!(bf16.judge(392.0), Verdict::Fail);
        let tf32 = matmul_expectation(h200, "NVIDIA H200", Precision::Tf32, 8192).unwrap();
        assert_eq!(tf32.judge(396.0), Verdict::Pass);
        let fp32 = matmul_expectation(h200, "NVIDIA H200", Precision::Fp32, 8192).unwrap();
        assert_eq!(fp32.judge(50.4), Verdict::Pass);
        assert_eq!(fp32.judge(25.5), Verdict::Fail);
        assert!(matmul_expectation(h200, "NVIDIA H200", Precision::Bf16, 4096).is_ok());
        assert!(
            matmul_expectation(h200, "NVIDIA H200", Precision::Bf16, 2048)
                .unwrap_err()
                .contains("n = 2048 is below 4096")
        );
        assert_eq!(
            matmul_expectation(None, "NVIDIA L4", Precision::Bf16, 8192).unwrap_err(),
            "NVIDIA L4 is not in the expected-figures table, so no peak to judge against"
        );
    }

    fn links(
        index: usize,
        name: &'static str,
        pcie: Option<(u32, u32)>,
        nvlink_peers: Option<Vec<usize>>,
    ) -> GpuLinks<'static> {
        GpuLinks {
            index,
            device_name: name,
            model: crate::expected::find(name),
            pcie,
            nvlink_peers,
        }
    }

    #[test]
    fn nvlink_between_every_pair_sets_the_all_reduce_expectation() {
        let path = collective_path(&[
            links(0, "NVIDIA H200", Some((5, 16)), Some(vec![1])),
            links(1, "NVIDIA H200", Some((5, 16)), Some(vec![0])),
        ])
        .unwrap();
        assert_eq!(path.kind, "nvlink");
        assert_eq!(path.bytes_per_second_per_direction, 450e9);
        assert_eq!(
            path.label,
            "NVLink 4 x18 (H200 SXM datasheet: 900 GB/s both directions)"
        );
        let rule = nccl_expectation(&path);
        assert_eq!(rule.required(), 225e9);
        // 2xH200 measured 305-335 GB/s at 512 MiB-2 GiB.
        assert_eq!(rule.judge(305e9), Verdict::Pass);
        assert_eq!(rule.judge(40e9), Verdict::Fail);
        // Mixed models: the slower NVLink bounds the ring.
        let mixed = collective_path(&[
            links(0, "NVIDIA H200", Some((5, 16)), Some(vec![1])),
            links(1, "NVIDIA H100 NVL", Some((5, 16)), Some(vec![0])),
        ])
        .unwrap();
        assert_eq!(mixed.bytes_per_second_per_direction, 300e9);
    }

    #[test]
    fn without_nvlink_between_every_pair_pcie_bounds_the_all_reduce() {
        // GPU 2 has NVLink to GPU 0 only: the ring crosses PCIe somewhere.
        let partial = collective_path(&[
            links(0, "NVIDIA H100 PCIe", Some((5, 16)), Some(vec![1])),
            links(1, "NVIDIA H100 PCIe", Some((5, 16)), Some(vec![0])),
            links(2, "NVIDIA H100 PCIe", Some((4, 16)), Some(vec![])),
        ])
        .unwrap();
        assert_eq!(partial.kind, "pcie");
        assert_eq!(partial.label, "PCIe Gen4 x16");
        assert!((partial.bytes_per_second_per_direction / 1e9 - 31.5).abs() < 0.1);
        assert_eq!(partial.note, None);
        let no_nvml = collective_path(&[
            links(0, "NVIDIA H200", Some((5, 16)), None),
            links(1, "NVIDIA H200", None, None),
        ])
        .unwrap();
        assert_eq!(no_nvml.kind, "pcie");
        assert_eq!(
            no_nvml.note.as_deref(),
            Some("NVLink unknown (no NVML): judged against PCIe")
        );
        let from_datasheet = collective_path(&[
            links(0, "NVIDIA A100 80GB PCIe", None, Some(vec![])),
            links(1, "NVIDIA A100 80GB PCIe", None, Some(vec![])),
        ])
        .unwrap();
        assert_eq!(from_datasheet.label, "PCIe Gen4 x16");
        assert!(from_datasheet.note.unwrap().contains("from the datasheet"));
    }

    #[test]
    fn paths_that_cannot_be_known_say_why() {
        assert!(
            collective_path(&[links(0, "NVIDIA H200", Some((5, 16)), Some(vec![]))])
                .unwrap_err()
                .starts_with("one GPU")
        );
        let unknown_nvlink = collective_path(&[
            links(0, "NVIDIA B300", Some((6, 16)), Some(vec![1])),
            links(1, "NVIDIA B300", Some((6, 16)), Some(vec![0])),
        ])
        .unwrap_err();
        assert!(unknown_nvlink.contains("GPU 0 (NVIDIA B300) has no NVLink figures"));
        let unknown_pcie = collective_path(&[
            links(0, "NVIDIA L4", None, Some(vec![])),
            links(1, "NVIDIA L4", None, Some(vec![])),
        ])
        .unwrap_err();
        assert!(unknown_pcie.contains("PCIe link of GPU 0 (NVIDIA L4) is unknown"));
    }

    #[test]
    fn the_host_link_comes_from_the_inventory_else_the_datasheet() {
        let h200 = crate::expected::find("NVIDIA H200");
        assert_eq!(
            host_link(Some((5, 16)), h200),
            HostLink {
                link: Some((5, 16)),
                note: None,
                narrower_than_model: false
            }
        );
        let narrower = host_link(Some((5, 8)), h200);
        assert!(narrower.narrower_than_model);
        assert_eq!(narrower.link, Some((5, 8)));
        let assumed = host_link(None, h200);
        assert_eq!(assumed.link, Some((5, 16)));
        assert!(!assumed.narrower_than_model && assumed.note.is_some());
        assert_eq!(host_link(None, None).link, None);
        assert_eq!(host_link(Some((3, 16)), None).link, Some((3, 16)));
    }

    #[test]
    fn the_baseline_rule_is_eighty_percent_of_the_good_node() {
        let rule = baseline_expectation(790.0, "790.0 TFLOP/s");
        assert_eq!(rule.required(), 632.0);
        assert_eq!(rule.judge(632.0), Verdict::Pass);
        assert_eq!(rule.judge(631.9), Verdict::Fail);
        assert_eq!(
            expectation_text(&rule, 700.0, |value| format!("{value:.1} TFLOP/s")),
            "needs >= 632.0 TFLOP/s (80% of baseline 790.0 TFLOP/s): ok"
        );
        let without = References::default();
        assert!(without
            .baseline("matmul", "bf16", 8192, |v| v.to_string())
            .is_none());
        assert_eq!(without.baseline_rule(), "");
        assert_eq!(without.device_name(3), "an unknown GPU");
    }

    #[test]
    fn hidden_share_of_the_shorter_operation() {
        // The figures of gpu-anchors.md: the 1.44 ms matmul hides fully behind a 4.86 ms copy.
        let share = hidden_share(4.86, 1.44, 4.88);
        assert!((share - (4.86 + 1.44 - 4.88) / 1.44).abs() < 1e-12);
        assert!(share > 0.98);
        assert_eq!(hidden_share(4.0, 2.0, 6.0), 0.0);
        assert_eq!(hidden_share(4.0, 2.0, 7.0), 0.0);
        assert_eq!(hidden_share(4.0, 2.0, 3.0), 1.0);
        assert_eq!(hidden_share(0.0, 2.0, 2.0), 0.0);
    }

    #[test]
    fn tolerances_order_by_precision() {
        assert!(Precision::Fp32.tolerance() < Precision::Tf32.tolerance());
        assert!(Precision::Fp16.tolerance() < Precision::Bf16.tolerance());
        assert_eq!(Precision::parse("BF16"), Some(Precision::Bf16));
        assert_eq!(Precision::parse("fp8"), None);
    }

    #[test]
    fn version_claims() {
        assert!(version_matches_claim("2.7.1", "2.7.1+cu126"));
        assert!(version_matches_claim("2.7", "2.7.1"));
        assert!(!version_matches_claim("2.7.1", "2.7.0+cu126"));
        assert!(!version_matches_claim("2.7.1", "2.7"));
        assert!(version_matches_claim("12.6", "12.6"));
        assert!(!version_matches_claim("12.6", "12.8"));
        assert!(!version_matches_claim("", "12.8"));
        assert_eq!(version_numbers("2.11.0a0+git1234"), vec![2, 11, 0]);
    }

    #[test]
    fn cudnn_integer_encodings() {
        assert_eq!(cudnn_version_from_integer(90501), "9.5.1");
        assert_eq!(cudnn_version_from_integer(91900), "9.19.0");
        assert_eq!(cudnn_version_from_integer(8907), "8.9.7");
        assert!(cudnn_matches_claim("9.5.1.17", 90501));
        assert!(cudnn_matches_claim("9.19.0.56", 91900));
        assert!(!cudnn_matches_claim("9.5.1.17", 90100));
        assert!(cudnn_matches_claim("8.9.7.29", 8907));
        assert!(cudnn_matches_claim("9", 90501));
    }
}
