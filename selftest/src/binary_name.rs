//! Which gpu-selftest build serves an image: one build per CUDA major (11.8 and later 11.x, 12.x,
//! 13.x), per architecture. This file is shared by both crates — imagegen includes it by path
//! (`imagegen::model::selftest_binary`) to choose the binary it copies into an image, and
//! gpu-selftest uses it for `--binary-for-cuda` — so the two can never disagree. It depends on
//! nothing but `std`.

/// The oldest CUDA release a gpu-selftest build serves. cudarc binds 11.4 and later, but the CUDA
/// 11 build is compiled against cudarc's 11.8 bindings (`cuda-11080`) and tested against 11.8 only;
/// 11.4–11.7 are refused by choice rather than served by a build never exercised on them (torch
/// 2.0's cu117 cells have a cu118 sibling that is).
pub const OLDEST_CUDA: (u32, u32) = (11, 8);

/// The binary for an image of CUDA `cuda_version` ("12.6", "11.8.0", "13.0") on x86-64:
/// `gpu-selftest-cu11`, `-cu12` or `-cu13`. Versions before 11.8 and unknown majors are refused,
/// with the reason.
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
        (11, minor) if minor >= OLDEST_CUDA.1 => Ok("gpu-selftest-cu11"),
        (major, _) if major <= 11 => Err(format!(
            "CUDA {cuda_version} is older than {}.{}, the oldest CUDA gpu-selftest supports",
            OLDEST_CUDA.0, OLDEST_CUDA.1
        )),
        (12, _) => Ok("gpu-selftest-cu12"),
        (13, _) => Ok("gpu-selftest-cu13"),
        _ => Err(format!(
            "CUDA {cuda_version}: no gpu-selftest binary for CUDA major {major} (built: 11, 12, 13)"
        )),
    }
}

/// The binary for an image of CUDA `cuda_version` on architecture `arch` (`amd64` or `arm64`, as
/// in `linux/arm64`): the x86-64 name, with `-arm64` for the aarch64 (SBSA) builds.
pub fn binary_for(cuda_version: &str, arch: &str) -> Result<String, String> {
    let name = binary_for_cuda_version(cuda_version)?;
    match arch {
        "amd64" => Ok(name.to_string()),
        "arm64" => Ok(format!("{name}-arm64")),
        other => Err(format!(
            "no gpu-selftest build for architecture {other} (built: amd64, arm64)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_choice_per_cuda_major_and_architecture() {
        assert_eq!(binary_for_cuda_version("11.8"), Ok("gpu-selftest-cu11"));
        assert_eq!(binary_for_cuda_version("11.8.0"), Ok("gpu-selftest-cu11"));
        assert_eq!(binary_for_cuda_version("12.1"), Ok("gpu-selftest-cu12"));
        assert_eq!(binary_for_cuda_version("12.9.1"), Ok("gpu-selftest-cu12"));
        assert_eq!(binary_for_cuda_version("13.0"), Ok("gpu-selftest-cu13"));
        assert_eq!(binary_for_cuda_version(" 13 "), Ok("gpu-selftest-cu13"));
        assert!(binary_for_cuda_version("11.7")
            .unwrap_err()
            .contains("older than 11.8"));
        assert!(binary_for_cuda_version("10.2").is_err());
        assert!(binary_for_cuda_version("14.0")
            .unwrap_err()
            .contains("major 14"));
        assert!(binary_for_cuda_version("x").is_err());
        assert_eq!(binary_for("13.0.0", "amd64").unwrap(), "gpu-selftest-cu13");
        assert_eq!(
            binary_for("12.6.3", "arm64").unwrap(),
            "gpu-selftest-cu12-arm64"
        );
        assert!(binary_for("12.6", "riscv64").is_err());
    }
}
