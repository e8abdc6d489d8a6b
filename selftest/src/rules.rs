//! The pass/fail rules, kept as plain data and pure functions so that each is unit-tested and
//! printed next to the figure it judges.
//!
//! Also the rule that maps an image's CUDA version to the `gpu-selftest-cu<major>` binary built
//! for it; imagegen applies the same rule when it copies the binary into an image.

/// Pinned host↔device bandwidth must reach this share of what the PCIe link allows.
pub const PINNED_SHARE_OF_LINK: f64 = 0.80;
/// The copy/compute overlap check passes when at least this share of the shorter operation hides.
pub const MINIMUM_HIDDEN_SHARE: f64 = 0.50;
/// `/dev/shm` below this size draws a warning (PyTorch DataLoader workers pass batches through it).
pub const MINIMUM_SHM_BYTES: u64 = 1 << 30;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// The rule could not be applied (for example the PCIe link is unknown).
    NotApplied,
}

/// Pinned bandwidth (the best median over the sweep) against the link's theoretical rate.
pub fn judge_pinned_bandwidth(best_pinned_bytes_per_second: f64, link: Option<f64>) -> Verdict {
    match link {
        None => Verdict::NotApplied,
        Some(link_rate) if best_pinned_bytes_per_second >= PINNED_SHARE_OF_LINK * link_rate => {
            Verdict::Pass
        }
        Some(_) => Verdict::Fail,
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

/// Matmul precisions the self-test runs through cuBLAS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Bf16,
    Fp16,
    Tf32,
    Fp32,
}

impl Precision {
    pub const ALL: [Precision; 4] = [
        Precision::Bf16,
        Precision::Fp16,
        Precision::Tf32,
        Precision::Fp32,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Tf32 => "tf32",
            Precision::Fp32 => "fp32",
        }
    }

    pub fn parse(text: &str) -> Option<Precision> {
        Precision::ALL
            .into_iter()
            .find(|precision| precision.name().eq_ignore_ascii_case(text.trim()))
    }

    /// Largest relative error ‖C − C_ref‖/‖C_ref‖ accepted against a float64 reference computed
    /// from the same (already rounded) inputs. bf16 and fp16 lose most in the rounding of the
    /// output (2⁻⁹ and 2⁻¹² relative); tf32 rounds the inputs to 10 mantissa bits; fp32 only
    /// accumulates rounding over the inner dimension.
    pub fn tolerance(self) -> f64 {
        match self {
            Precision::Bf16 => 1e-2,
            Precision::Fp16 => 5e-3,
            Precision::Tf32 => 5e-3,
            Precision::Fp32 => 1e-4,
        }
    }
}

/// The binary imagegen copies into an image whose CUDA version is `cuda_version` ("12.6",
/// "11.8.0", "13.0"): `gpu-selftest-cu11`, `-cu12` or `-cu13`. Versions before 11.8 are refused
/// (cudarc binds 11.4 and up, and the matrix starts at 11.8); unknown majors are refused.
pub fn binary_for_cuda_version(cuda_version: &str) -> Result<&'static str, String> {
    let mut parts = cuda_version.trim().split('.');
    let major: u32 = parts
        .next()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| format!("CUDA version `{cuda_version}` does not start with a number"))?;
    let minor: u32 = match parts.next() {
        Some(text) => text
            .parse()
            .map_err(|_| format!("CUDA version `{cuda_version}` has no numeric minor part"))?,
        None => 0,
    };
    match (major, minor) {
        (11, minor) if minor >= 8 => Ok("gpu-selftest-cu11"),
        (major, _) if major <= 11 => Err(format!(
            "CUDA {cuda_version} is older than 11.8, the oldest CUDA gpu-selftest supports"
        )),
        (12, _) => Ok("gpu-selftest-cu12"),
        (13, _) => Ok("gpu-selftest-cu13"),
        _ => Err(format!(
            "CUDA {cuda_version}: no gpu-selftest binary for CUDA major {major} (built: 11, 12, 13)"
        )),
    }
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
    fn binary_choice_per_cuda_major() {
        assert_eq!(binary_for_cuda_version("11.8"), Ok("gpu-selftest-cu11"));
        assert_eq!(binary_for_cuda_version("11.8.0"), Ok("gpu-selftest-cu11"));
        assert_eq!(binary_for_cuda_version("12.1"), Ok("gpu-selftest-cu12"));
        assert_eq!(binary_for_cuda_version("12.9.1"), Ok("gpu-selftest-cu12"));
        assert_eq!(binary_for_cuda_version("13.0"), Ok("gpu-selftest-cu13"));
        assert_eq!(binary_for_cuda_version(" 13 "), Ok("gpu-selftest-cu13"));
        assert!(binary_for_cuda_version("11.7")
            .unwrap_err()
            .contains("older than 11.8"));
        assert!(binary_for_cuda_version("10.2")
            .unwrap_err()
            .contains("older than 11.8"));
        assert!(binary_for_cuda_version("14.0")
            .unwrap_err()
            .contains("major 14"));
        assert!(binary_for_cuda_version("cuda").is_err());
        assert!(binary_for_cuda_version("12.x").is_err());
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
