//! The copy/compute overlap check: a pinned host→device copy on one stream while bf16 matmuls
//! run on another. It times each alone and both together (from one start event both streams
//! wait on, to the later of their end events), and reports the share of the shorter one hidden.
//!
//! Rule: at least half of the shorter operation is hidden (`rules::MINIMUM_HIDDEN_SHARE`); a
//! stack that serialises copies and kernels hides nothing.

use super::matmul::gemm;
use super::{EventPair, Gpu};
use crate::expected::Precision;
use crate::plot::size_label;
use crate::report::{Check, Metric, Status};
use crate::rules;
use crate::stats;
use anyhow::{anyhow, Context as _, Result};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{result, sys, CudaSlice, DevicePtr, DevicePtrMut, PinnedHostSlice};
use half::bf16;
use serde::Serialize;

/// How the overlap check runs.
#[derive(Clone, Debug)]
pub struct OverlapSettings {
    pub copy_bytes: u64,
    pub matmul_size: usize,
    pub repetitions: usize,
}

/// One GPU's figures.
#[derive(Clone, Debug, Serialize)]
pub struct OverlapResult {
    pub gpu: usize,
    pub copy_bytes: u64,
    pub matmul_size: usize,
    /// Matmuls queued so that the compute side lasts about as long as the copy.
    pub matmul_count: usize,
    pub copy_ms: f64,
    pub matmul_ms: f64,
    pub serial_ms: f64,
    pub together_ms: f64,
    pub hidden_share: f64,
}

/// The host side every GPU's measurement shares: the page-locked source of the copy (portable,
/// so pinned for every context) and the matmul input, made once rather than once per GPU.
pub struct OverlapInputs {
    pinned: PinnedHostSlice<u8>,
    matrix: Vec<bf16>,
}

impl OverlapInputs {
    pub fn new(first_gpu: &Gpu, settings: &OverlapSettings) -> Result<Self> {
        let bytes = settings.copy_bytes as usize;
        let mut pinned = unsafe {
            first_gpu
                .context
                .alloc_pinned_with_flags::<u8>(bytes, sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .with_context(|| {
            format!(
                "cannot pin {} of host memory",
                size_label(settings.copy_bytes)
            )
        })?;
        pinned.as_mut_slice()?.fill(0x3C);
        let elements = settings.matmul_size * settings.matmul_size;
        let matrix = super::matmul::random_values(elements, stats::fresh_seed(), bf16::from_f32);
        Ok(OverlapInputs { pinned, matrix })
    }
}

/// Measures one GPU.
pub fn measure(
    gpu: &Gpu,
    settings: &OverlapSettings,
    inputs: &OverlapInputs,
) -> Result<OverlapResult> {
    let context = &gpu.context;
    let copy_stream = context.new_stream()?;
    let compute_stream = context.new_stream()?;
    let blas_handle = CudaBlas::new(compute_stream.clone())
        .map_err(|error| anyhow!("cannot create a cuBLAS handle: {error:?}"))?;
    let handle = *blas_handle.handle();
    let bytes = settings.copy_bytes as usize;
    let host: &[u8] = inputs.pinned.as_slice()?;
    let mut device: CudaSlice<u8> = unsafe { copy_stream.alloc::<u8>(bytes) }?;
    let (device_pointer, _device_guard) = device.device_ptr_mut(&copy_stream);
    let size = settings.matmul_size;
    let elements = size * size;
    let a: CudaSlice<bf16> = compute_stream.clone_htod(&inputs.matrix)?;
    let b: CudaSlice<bf16> = compute_stream.clone_htod(&inputs.matrix)?;
    let mut c: CudaSlice<bf16> = unsafe { compute_stream.alloc::<bf16>(elements) }?;
    let (a_pointer, _a_guard) = a.device_ptr(&compute_stream);
    let (b_pointer, _b_guard) = b.device_ptr(&compute_stream);
    let (c_pointer, _c_guard) = c.device_ptr_mut(&compute_stream);
    compute_stream.synchronize()?;

    let copy = || -> Result<()> {
        unsafe { result::memcpy_htod_async(device_pointer, host, copy_stream.cu_stream()) }?;
        Ok(())
    };
    let matmuls = |count: usize| -> Result<()> {
        for _ in 0..count {
            unsafe {
                gemm(
                    handle,
                    Precision::Bf16,
                    size,
                    a_pointer,
                    b_pointer,
                    c_pointer,
                )?
            };
        }
        Ok(())
    };
    // Warm up both, and size the compute side to about the copy's length: with both sides of
    // similar length, "hidden" measures real concurrency rather than a short side that fits
    // into any gap.
    copy()?;
    matmuls(3)?;
    copy_stream.synchronize()?;
    compute_stream.synchronize()?;
    let copy_times = super::time_repeated(context, &copy_stream, 0, settings.repetitions, copy)?;
    let single = super::time_repeated(context, &compute_stream, 0, settings.repetitions, || {
        matmuls(1)
    })?;
    let copy_ms = stats::median(&copy_times).unwrap_or(f64::NAN);
    let single_ms = stats::median(&single).unwrap_or(f64::NAN);
    let matmul_count = ((copy_ms / single_ms).round() as usize).clamp(1, 64);
    let matmul_times =
        super::time_repeated(context, &compute_stream, 0, settings.repetitions, || {
            matmuls(matmul_count)
        })?;
    let matmul_ms = stats::median(&matmul_times).unwrap_or(f64::NAN);

    // Together: one event on the copy stream that the compute stream waits on, so both start at
    // the same instant; the run ends at the later of the two end events.
    let start = EventPair::new(context)?;
    let compute_end = EventPair::new(context)?;
    let mut together_times = Vec::new();
    for _ in 0..settings.repetitions {
        start.start.record(&copy_stream)?;
        unsafe {
            sys::cuStreamWaitEvent(compute_stream.cu_stream(), start.start.cu_event(), 0)
                .result()?
        };
        copy()?;
        matmuls(matmul_count)?;
        start.end.record(&copy_stream)?;
        compute_end.end.record(&compute_stream)?;
        let copy_done = start.start.elapsed_ms(&start.end)? as f64;
        let compute_done = start.start.elapsed_ms(&compute_end.end)? as f64;
        together_times.push(copy_done.max(compute_done));
    }
    let together_ms = stats::median(&together_times).unwrap_or(f64::NAN);
    Ok(OverlapResult {
        gpu: gpu.ordinal,
        copy_bytes: settings.copy_bytes,
        matmul_size: size,
        matmul_count,
        copy_ms,
        matmul_ms,
        serial_ms: copy_ms + matmul_ms,
        together_ms,
        hidden_share: rules::hidden_share(copy_ms, matmul_ms, together_ms),
    })
}

/// Judges and lays out the results.
pub fn check(results: &[OverlapResult]) -> Check {
    let passed = results
        .iter()
        .all(|r| r.hidden_share >= rules::MINIMUM_HIDDEN_SHARE);
    let status = if passed { Status::Pass } else { Status::Fail };
    let parts: Vec<String> = results
        .iter()
        .map(|r| format!("GPU {} {:.0}% hidden", r.gpu, r.hidden_share * 100.0))
        .collect();
    let mut result = Check::new("overlap", status, parts.join(", "))
        .with_rule(format!(
            "share of the shorter of (pinned H2D copy, bf16 matmuls) hidden when both run on two streams >= {:.0}%",
            rules::MINIMUM_HIDDEN_SHARE * 100.0
        ))
        .figure("results", results);
    for entry in results {
        result.lines.push(format!(
            "GPU {}: copy {} {:.2} ms, {} x bf16 {}^3 matmul {:.2} ms, serial {:.2} ms, together {:.2} ms -> {:.0}% of the shorter hidden",
            entry.gpu,
            size_label(entry.copy_bytes),
            entry.copy_ms,
            entry.matmul_count,
            entry.matmul_size,
            entry.matmul_ms,
            entry.serial_ms,
            entry.together_ms,
            entry.hidden_share * 100.0
        ));
        result.metrics.push(
            Metric::new(
                "overlap_hidden_ratio",
                "Share of the shorter of copy and matmul hidden by running them on two streams.",
                entry.hidden_share,
            )
            .label("gpu", entry.gpu),
        );
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(together_ms: f64) -> OverlapResult {
        OverlapResult {
            gpu: 0,
            copy_bytes: 256 << 20,
            matmul_size: 8192,
            matmul_count: 3,
            copy_ms: 4.86,
            matmul_ms: 4.3,
            serial_ms: 9.16,
            together_ms,
            hidden_share: rules::hidden_share(4.86, 4.3, together_ms),
        }
    }

    #[test]
    fn overlapped_passes_and_serialised_fails() {
        let good = check(&[result(5.0)]);
        assert_eq!(good.status, Status::Pass);
        assert_eq!(good.summary, "GPU 0 97% hidden");
        let bad = check(&[result(9.1)]);
        assert_eq!(bad.status, Status::Fail);
        assert!(bad.lines[0].contains("together 9.10 ms"));
    }
}
