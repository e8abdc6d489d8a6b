//! The `/dev/shm` check: its size, with a warning below 1 GiB. PyTorch DataLoader workers pass
//! batches through shared memory, and Docker's default of 64 MiB makes them fail with "bus error".

use crate::plot::size_label;
use crate::report::{Check, Metric, Status};
use crate::rules::MINIMUM_SHM_BYTES;
use std::ffi::CString;
use std::path::Path;

/// Total size in bytes of the file system holding `path`, through statvfs.
pub fn filesystem_bytes(path: &Path) -> Option<u64> {
    let text = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut info: libc::statvfs = unsafe { std::mem::zeroed() };
    let status = unsafe { libc::statvfs(text.as_ptr(), &mut info) };
    (status == 0).then(|| info.f_blocks as u64 * info.f_frsize as u64)
}

/// Judges a measured size (`None`: `/dev/shm` is missing). Too little shared memory only warns:
/// the GPUs work, and only multi-process data loading or NCCL's shared-memory transport suffer.
pub fn check(path: &Path, size: Option<u64>) -> Check {
    let rule = format!(
        "warn below {} (Docker's default is 64 MiB: run with --shm-size or --ipc=host)",
        size_label(MINIMUM_SHM_BYTES)
    );
    match size {
        None => Check::new(
            "shm",
            Status::Warn,
            format!("{} is missing or unreadable", path.display()),
        )
        .with_rule(rule),
        Some(bytes) => {
            let status = if bytes < MINIMUM_SHM_BYTES {
                Status::Warn
            } else {
                Status::Pass
            };
            let human = format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64);
            let summary = if status == Status::Warn {
                format!(
                    "{} is {human}: too small for DataLoader workers",
                    path.display()
                )
            } else {
                format!("{} is {human}", path.display())
            };
            let mut result = Check::new("shm", status, summary)
                .with_rule(rule)
                .figure("path", path.display().to_string())
                .figure("bytes", bytes);
            result
                .metrics
                .push(Metric::new("shm_bytes", "Size of /dev/shm.", bytes as f64));
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_default_warns_and_a_large_shm_passes() {
        let small = check(Path::new("/dev/shm"), Some(64 << 20));
        assert_eq!(small.status, Status::Warn);
        assert_eq!(
            small.summary,
            "/dev/shm is 0.06 GiB: too small for DataLoader workers"
        );
        let large = check(Path::new("/dev/shm"), Some(16 << 30));
        assert_eq!(large.status, Status::Pass);
        assert_eq!(large.figures["bytes"], 16u64 << 30);
        assert_eq!(check(Path::new("/nope"), None).status, Status::Warn);
    }

    #[test]
    fn statvfs_reads_a_real_filesystem() {
        assert!(filesystem_bytes(Path::new("/")).unwrap() > 0);
        assert_eq!(filesystem_bytes(Path::new("/nonexistent/path")), None);
    }
}
