//! The cuBLAS matmul check: n×n×n products in bf16, fp16, tf32 and fp32 through `cublasGemmEx`
//! (fp32 accumulation; tf32 through `CUBLAS_COMPUTE_32F_FAST_TF32`), in TFLOP/s, each checked.
//!
//! Timing: after 3 warm-ups, 20 products queued back to back with an event between each two;
//! the median of the single products and the rate of the whole run are both reported, and the
//! speed rules judge the run's rate, since a GPU shared with another process shows there (its
//! kernels run between ours) while the median of single short products may not see it.
//!
//! Correctness: fresh random inputs every run (values in ±[0.125, 1), never zero), the output
//! poisoned with NaN before the checked product, every element then required to be finite, and
//! a sample of entries compared with a float64 reference of the same (rounded) inputs by
//! relative L2 error against the precision's tolerance (`rules::Precision::tolerance`).

use super::{poison, time_back_to_back, Gpu};
use crate::baseline::BaselineFigure;
use crate::expected::Precision;
use crate::report::{Check, Metric, Status};
use crate::rules::{self, Expectation, References, Verdict};
use crate::stats::{self, SplitMix64};
use anyhow::{anyhow, Context as _, Result};
use cudarc::cublas::{result as blas_result, sys as blas, CudaBlas};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use half::{bf16, f16};
use serde::Serialize;
use std::sync::Arc;

/// How the matmuls run.
#[derive(Clone, Debug)]
pub struct MatmulSettings {
    pub size: usize,
    pub precisions: Vec<Precision>,
    pub warm_up: usize,
    pub repetitions: usize,
    /// Output entries compared with the float64 reference.
    pub samples: usize,
}

/// One precision on one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct MatmulResult {
    pub gpu: usize,
    pub precision: &'static str,
    pub size: usize,
    /// Median of the single products, each between its own pair of events.
    pub median_ms: f64,
    pub tflops: f64,
    /// The whole run of products queued back to back, per product: what a job gets of the GPU
    /// (a GPU shared with another process shows here, not in the median). The speed rules
    /// judge this figure.
    pub back_to_back_ms: f64,
    pub back_to_back_tflops: f64,
    pub relative_error: f64,
    pub tolerance: f64,
    pub all_finite: bool,
    pub passed: bool,
}

/// Host copies of the inputs in the element type cuBLAS reads, plus float64 views for the
/// reference.
enum HostInputs {
    Bf16(Vec<bf16>, Vec<bf16>),
    Fp16(Vec<f16>, Vec<f16>),
    Fp32(Vec<f32>, Vec<f32>),
}

impl HostInputs {
    fn a(&self, index: usize) -> f64 {
        match self {
            HostInputs::Bf16(a, _) => a[index].to_f64(),
            HostInputs::Fp16(a, _) => a[index].to_f64(),
            HostInputs::Fp32(a, _) => a[index] as f64,
        }
    }
    fn b(&self, index: usize) -> f64 {
        match self {
            HostInputs::Bf16(_, b) => b[index].to_f64(),
            HostInputs::Fp16(_, b) => b[index].to_f64(),
            HostInputs::Fp32(_, b) => b[index] as f64,
        }
    }
}

/// Draws `count` random non-zero values in parallel chunks, each chunk with its own seed.
pub fn random_values<T: Send + Copy + Default>(
    count: usize,
    seed: u64,
    convert: fn(f32) -> T,
) -> Vec<T> {
    let mut values = vec![T::default(); count];
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(16);
    let chunk = count.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (index, part) in values.chunks_mut(chunk).enumerate() {
            scope.spawn(move || {
                let mut generator =
                    SplitMix64::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9));
                for value in part.iter_mut() {
                    *value = convert(generator.nonzero_unit());
                }
            });
        }
    });
    values
}

fn draw_inputs(precision: Precision, elements: usize, seed: u64) -> HostInputs {
    match precision {
        Precision::Bf16 => HostInputs::Bf16(
            random_values(elements, seed, bf16::from_f32),
            random_values(elements, seed.rotate_left(17), bf16::from_f32),
        ),
        Precision::Fp16 => HostInputs::Fp16(
            random_values(elements, seed, f16::from_f32),
            random_values(elements, seed.rotate_left(17), f16::from_f32),
        ),
        Precision::Tf32 | Precision::Fp32 => HostInputs::Fp32(
            random_values(elements, seed, |value| value),
            random_values(elements, seed.rotate_left(17), |value| value),
        ),
    }
}

/// cuBLAS data and compute types of a precision.
fn blas_types(precision: Precision) -> (blas::cudaDataType, blas::cublasComputeType_t) {
    use blas::cublasComputeType_t::{CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    use blas::cudaDataType::{CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F};
    match precision {
        Precision::Bf16 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F),
        Precision::Fp16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F),
        Precision::Tf32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
        Precision::Fp32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F),
    }
}

/// One column-major C = A·B of n×n matrices, queued on the handle's stream.
///
/// # Safety
/// The three pointers must hold n·n elements of the precision's data type.
pub unsafe fn gemm(
    handle: blas::cublasHandle_t,
    precision: Precision,
    size: usize,
    a: u64,
    b: u64,
    c: u64,
) -> Result<()> {
    let (data_type, compute_type) = blas_types(precision);
    let (alpha, beta) = (1.0f32, 0.0f32);
    let n = size as i32;
    blas_result::gemm_ex(
        handle,
        blas::cublasOperation_t::CUBLAS_OP_N,
        blas::cublasOperation_t::CUBLAS_OP_N,
        n,
        n,
        n,
        &alpha as *const f32 as *const _,
        a as *const _,
        data_type,
        n,
        b as *const _,
        data_type,
        n,
        &beta as *const f32 as *const _,
        c as *mut _,
        data_type,
        n,
        compute_type,
        blas::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
    )
    .map_err(|error| anyhow!("cublasGemmEx ({}) failed: {error:?}", precision.name()))
}

/// A GPU with the stream and cuBLAS handle its products run on.
struct GpuBlas<'a> {
    gpu: &'a Gpu,
    blas: CudaBlas,
    stream: Arc<CudaStream>,
}

/// Uploads inputs, runs the checked product, then times the repetitions, on one GPU.
fn run_on_gpu<T: DeviceRepr + Copy + Default + Sync + Into<AsFloat64>>(
    lane: &GpuBlas,
    precision: Precision,
    settings: &MatmulSettings,
    (a_host, b_host): (&[T], &[T]),
    inputs: &HostInputs,
    seed: u64,
) -> Result<MatmulResult> {
    let size = settings.size;
    let elements = size * size;
    let (gpu, blas_handle, stream) = (lane.gpu, &lane.blas, &lane.stream);
    let a: CudaSlice<T> = stream.clone_htod(a_host).context("uploading A")?;
    let b: CudaSlice<T> = stream.clone_htod(b_host).context("uploading B")?;
    let mut c: CudaSlice<T> = unsafe { stream.alloc::<T>(elements) }.with_context(|| {
        format!(
            "cannot allocate the {size}x{size} output on GPU {}",
            gpu.ordinal
        )
    })?;
    let (a_pointer, _a_guard) = a.device_ptr(stream);
    let (b_pointer, _b_guard) = b.device_ptr(stream);
    let c_pointer = {
        let (pointer, _guard) = c.device_ptr_mut(stream);
        pointer
    };
    let handle = *blas_handle.handle();
    poison(c_pointer, elements * std::mem::size_of::<T>(), stream)?;
    unsafe { gemm(handle, precision, size, a_pointer, b_pointer, c_pointer)? };
    stream.synchronize()?;
    let output: Vec<T> = stream.clone_dtoh(&c).context("downloading C")?;
    let all_finite = stats::parallel_all(&output, |value| (*value).into().0.is_finite());
    // Sampled entries against a float64 reference of the same inputs (column-major): a grid of
    // rows × columns, so each row of A is gathered once (its elements lie `size` apart).
    let mut generator = SplitMix64::new(seed ^ 0x5EED);
    let side = (settings.samples as f64).sqrt().ceil().max(1.0) as usize;
    let rows: Vec<usize> = (0..side)
        .map(|_| (generator.next_u64() % size as u64) as usize)
        .collect();
    let columns: Vec<usize> = (0..side)
        .map(|_| (generator.next_u64() % size as u64) as usize)
        .collect();
    let mut measured = Vec::with_capacity(side * side);
    let mut reference = Vec::with_capacity(side * side);
    for &row in &rows {
        let a_row: Vec<f64> = (0..size)
            .map(|inner| inputs.a(row + inner * size))
            .collect();
        for &column in &columns {
            let expected: f64 = a_row
                .iter()
                .enumerate()
                .map(|(inner, a_value)| a_value * inputs.b(inner + column * size))
                .sum();
            reference.push(expected);
            measured.push(output[row + column * size].into().0);
        }
    }
    let relative_error = stats::relative_l2_error(&measured, &reference);
    let (times, span_ms) = time_back_to_back(
        &gpu.context,
        stream,
        settings.warm_up,
        settings.repetitions,
        || unsafe { gemm(handle, precision, size, a_pointer, b_pointer, c_pointer) },
    )?;
    let median_ms = stats::median(&times).unwrap_or(f64::NAN);
    let back_to_back_ms = span_ms / settings.repetitions.max(1) as f64;
    let operations = 2.0 * (size as f64).powi(3);
    let tolerance = precision.tolerance();
    Ok(MatmulResult {
        gpu: gpu.ordinal,
        precision: precision.name(),
        size,
        median_ms,
        tflops: operations / (median_ms / 1000.0) / 1e12,
        back_to_back_ms,
        back_to_back_tflops: operations / (back_to_back_ms / 1000.0) / 1e12,
        relative_error,
        tolerance,
        all_finite,
        passed: all_finite && relative_error <= tolerance,
    })
}

/// A float64 view of an element type (a local newtype so the conversions stay in this module).
pub struct AsFloat64(pub f64);
impl From<bf16> for AsFloat64 {
    fn from(value: bf16) -> Self {
        AsFloat64(value.to_f64())
    }
}
impl From<f16> for AsFloat64 {
    fn from(value: f16) -> Self {
        AsFloat64(value.to_f64())
    }
}
impl From<f32> for AsFloat64 {
    fn from(value: f32) -> Self {
        AsFloat64(value as f64)
    }
}

/// Runs `work` once per item on its own thread and returns the results in item order; a panic
/// on one of the threads is raised again here, so the check's guard reports it.
fn on_each<'a, T: Sync, R: Send>(
    items: &'a [T],
    work: impl Fn(&'a T) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .iter()
            .map(|item| {
                let work = &work;
                scope.spawn(move || work(item))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|payload| std::panic::resume_unwind(payload))
            })
            .collect()
    })
}

/// Runs every precision on every GPU with fresh inputs per precision. The GPUs work at the same
/// time, one host thread each: each product is timed by its own GPU's events, and what one GPU
/// does cannot slow another's kernels, while the check takes half the time on two GPUs.
pub fn measure(gpus: &[Gpu], settings: &MatmulSettings) -> Result<Vec<MatmulResult>> {
    // One stream and one cuBLAS handle per GPU for every precision: creating a handle loads
    // cuBLAS's kernels, which costs far more than the products themselves.
    let lanes: Vec<GpuBlas> = on_each(gpus, |gpu| {
        gpu.context.bind_to_thread()?;
        let stream = gpu.context.new_stream()?;
        let blas = CudaBlas::new(stream.clone()).map_err(|error| {
            anyhow!(
                "cannot create a cuBLAS handle on GPU {}: {error:?}",
                gpu.ordinal
            )
        })?;
        Ok(GpuBlas { gpu, blas, stream })
    })
    .into_iter()
    .collect::<Result<_>>()?;
    // Each precision's inputs are drawn while the GPUs run the previous precision: drawing
    // hundreds of megabytes of random numbers is host work the GPUs need not wait for.
    let elements = settings.size * settings.size;
    let draw = |precision: Precision| {
        let seed = stats::fresh_seed();
        (draw_inputs(precision, elements, seed), seed)
    };
    let mut next = settings
        .precisions
        .first()
        .map(|&precision| draw(precision));
    let mut results = Vec::new();
    for (index, &precision) in settings.precisions.iter().enumerate() {
        let (inputs, seed) = next.take().expect("drawn before its turn");
        let (per_gpu, following) = std::thread::scope(|scope| {
            let drawing = settings
                .precisions
                .get(index + 1)
                .map(|&following| scope.spawn(move || draw(following)));
            let per_gpu = on_each(&lanes, |lane| {
                lane.gpu.context.bind_to_thread()?;
                match &inputs {
                    HostInputs::Bf16(a, b) => {
                        run_on_gpu(lane, precision, settings, (a, b), &inputs, seed)
                    }
                    HostInputs::Fp16(a, b) => {
                        run_on_gpu(lane, precision, settings, (a, b), &inputs, seed)
                    }
                    HostInputs::Fp32(a, b) => {
                        run_on_gpu(lane, precision, settings, (a, b), &inputs, seed)
                    }
                }
                .with_context(|| format!("{} matmul on GPU {}", precision.name(), lane.gpu.ordinal))
            });
            let following = drawing.map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|payload| std::panic::resume_unwind(payload))
            });
            (per_gpu, following)
        });
        next = following;
        for result in per_gpu {
            results.push(result?);
        }
    }
    Ok(results)
}

/// The speed rules' view of one result: against the model's peak and against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct SpeedJudgement {
    pub gpu: usize,
    pub precision: &'static str,
    pub size: usize,
    /// The judged figure: the back-to-back rate.
    pub tflops: f64,
    /// The peak rule, or why it does not apply.
    pub peak: Option<Expectation>,
    pub peak_verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_not_applied: Option<String>,
    pub share_of_peak: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Expectation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_verdict: Option<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_missing: Option<String>,
}

fn show_tflops(value: f64) -> String {
    format!("{value:.1} TFLOP/s")
}

/// Judges one result's speed.
pub fn judge_speed(entry: &MatmulResult, references: &References) -> SpeedJudgement {
    let precision = Precision::parse(entry.precision).unwrap_or(Precision::Fp32);
    let peak = rules::matmul_expectation(
        references.model(entry.gpu),
        references.device_name(entry.gpu),
        precision,
        entry.size,
    );
    let (peak, peak_not_applied) = match peak {
        Ok(expectation) => (Some(expectation), None),
        Err(reason) => (None, Some(reason)),
    };
    let baseline = references.baseline("matmul", entry.precision, entry.size as u64, show_tflops);
    let (baseline, baseline_missing) = match baseline {
        Some(Ok(expectation)) => (Some(expectation), None),
        Some(Err(reason)) => (None, Some(reason)),
        None => (None, None),
    };
    let measured = entry.back_to_back_tflops;
    SpeedJudgement {
        gpu: entry.gpu,
        precision: entry.precision,
        size: entry.size,
        tflops: measured,
        peak_verdict: peak
            .as_ref()
            .map(|expectation| expectation.judge(measured))
            .unwrap_or(Verdict::NotApplied),
        share_of_peak: peak
            .as_ref()
            .map(|expectation| measured / expectation.reference),
        peak,
        peak_not_applied,
        baseline_verdict: baseline
            .as_ref()
            .map(|expectation| expectation.judge(measured)),
        baseline,
        baseline_missing,
    }
}

/// Judges and lays out the results: correctness first, then speed against the model's peak and
/// the baseline. A wrong result or a slow one fails; a rate no rule could judge warns.
pub fn check(results: &[MatmulResult], references: &References) -> Check {
    let judgements: Vec<SpeedJudgement> = results
        .iter()
        .map(|entry| judge_speed(entry, references))
        .collect();
    let wrong: Vec<String> = results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| format!("{} on GPU {}", r.precision, r.gpu))
        .collect();
    let mut slow: Vec<String> = Vec::new();
    let mut unjudged: Vec<String> = Vec::new();
    for judgement in &judgements {
        let name = format!("{} on GPU {}", judgement.precision, judgement.gpu);
        if let (Verdict::Fail, Some(peak)) = (judgement.peak_verdict, &judgement.peak) {
            slow.push(format!(
                "{name} {:.1} < {:.1} TFLOP/s ({:.0}% of {})",
                judgement.tflops,
                peak.required(),
                peak.share * 100.0,
                peak.basis
            ));
        }
        if let (Some(Verdict::Fail), Some(baseline)) =
            (judgement.baseline_verdict, &judgement.baseline)
        {
            slow.push(format!(
                "{name} {:.1} < {:.1} TFLOP/s ({:.0}% of {})",
                judgement.tflops,
                baseline.required(),
                baseline.share * 100.0,
                baseline.basis
            ));
        }
        if judgement.peak_verdict == Verdict::NotApplied || judgement.baseline_missing.is_some() {
            unjudged.push(name);
        }
    }
    let status = if !wrong.is_empty() || !slow.is_empty() {
        Status::Fail
    } else if !unjudged.is_empty() {
        Status::Warn
    } else {
        Status::Pass
    };
    let mut precisions: Vec<&str> = results.iter().map(|r| r.precision).collect();
    precisions.dedup();
    let summary_parts: Vec<String> = precisions
        .iter()
        .map(|precision| {
            let rates: Vec<String> = judgements
                .iter()
                .filter(|j| j.precision == *precision)
                .map(|j| match j.share_of_peak {
                    Some(share) => format!("{:.0} ({:.0}%)", j.tflops, share * 100.0),
                    None => format!("{:.0}", j.tflops),
                })
                .collect();
            format!("{precision} {}", rates.join("/"))
        })
        .collect();
    let mut summary = format!(
        "TFLOP/s per GPU (share of peak): {}",
        summary_parts.join(", ")
    );
    if !slow.is_empty() {
        summary = format!("SLOW: {}; {summary}", slow.join("; "));
    }
    if !wrong.is_empty() {
        summary = format!("wrong results: {}; {summary}", wrong.join(", "));
    }
    if status == Status::Warn {
        let reasons: Vec<&str> = judgements
            .iter()
            .filter_map(|j| {
                j.peak_not_applied
                    .as_deref()
                    .or(j.baseline_missing.as_deref())
            })
            .collect();
        let mut distinct: Vec<&str> = reasons.clone();
        distinct.dedup();
        summary = format!("{summary}; not judged: {}", distinct.join("; "));
    }
    let mut result = Check::new("matmul", status, summary)
        .with_rule(format!(
            "correct: every output element finite (output poisoned with NaN first) and relative L2 error of sampled entries vs a float64 reference <= tolerance (bf16 1e-2, fp16 5e-3, tf32 5e-3, fp32 1e-4); fast: from n = {} each GPU's TFLOP/s over 20 products queued back to back >= {:.0}% of its model's dense datasheet peak (data/gpu-models.json), a model not in that table or a smaller n warns{}",
            rules::MATMUL_SMALLEST_JUDGED_SIZE,
            rules::MATMUL_SHARE_OF_PEAK * 100.0,
            references.baseline_rule()
        ))
        .figure("results", results)
        .figure("judgements", &judgements);
    result.lines.push(format!(
        "{:>4} {:>5} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9} {}",
        "GPU",
        "prec",
        "n",
        "ms",
        "TFLOP/s",
        "b2b",
        "rel.error",
        "tolerance",
        "result; speed rules (back-to-back TFLOP/s)"
    ));
    for (entry, judgement) in results.iter().zip(&judgements) {
        let mut speed = match (&judgement.peak, &judgement.peak_not_applied) {
            (Some(peak), _) => format!(
                "{:.0}% of peak; {}",
                judgement.share_of_peak.unwrap_or(0.0) * 100.0,
                rules::expectation_text(peak, judgement.tflops, show_tflops)
            ),
            (None, Some(reason)) => format!("not judged: {reason}"),
            (None, None) => String::new(),
        };
        if let Some(baseline) = &judgement.baseline {
            speed.push_str(&format!(
                "; {}",
                rules::expectation_text(baseline, judgement.tflops, show_tflops)
            ));
        }
        if let Some(reason) = &judgement.baseline_missing {
            speed.push_str(&format!("; {reason}"));
        }
        result.lines.push(format!(
            "{:>4} {:>5} {:>6} {:>9.3} {:>9.1} {:>9.1} {:>10.2e} {:>9.0e} {}; {speed}",
            entry.gpu,
            entry.precision,
            entry.size,
            entry.median_ms,
            entry.tflops,
            entry.back_to_back_tflops,
            entry.relative_error,
            entry.tolerance,
            if entry.passed {
                "correct"
            } else if !entry.all_finite {
                "NON-FINITE OUTPUT"
            } else {
                "WRONG"
            }
        ));
        result.metrics.push(
            Metric::new("matmul_tflops", "cuBLAS matmul rate, median.", entry.tflops)
                .label("gpu", entry.gpu)
                .label("precision", entry.precision)
                .label("size", entry.size),
        );
        result.metrics.push(
            Metric::new(
                "matmul_back_to_back_tflops",
                "cuBLAS matmul rate over products queued back to back.",
                entry.back_to_back_tflops,
            )
            .label("gpu", entry.gpu)
            .label("precision", entry.precision)
            .label("size", entry.size),
        );
        result.metrics.push(
            Metric::new(
                "matmul_relative_error",
                "Relative L2 error of sampled matmul outputs against a float64 reference.",
                entry.relative_error,
            )
            .label("gpu", entry.gpu)
            .label("precision", entry.precision),
        );
        if let Some(share) = judgement.share_of_peak {
            result.metrics.push(
                Metric::new(
                    "matmul_share_of_peak",
                    "Matmul rate over the model's dense datasheet peak.",
                    share,
                )
                .label("gpu", entry.gpu)
                .label("precision", entry.precision)
                .label("size", entry.size),
            );
        }
    }
    result
}

/// The baseline figures of the results: per precision and size, each GPU's back-to-back
/// TFLOP/s.
pub fn baseline_figures(results: &[MatmulResult]) -> Vec<BaselineFigure> {
    let mut keys: Vec<(&'static str, usize)> =
        results.iter().map(|r| (r.precision, r.size)).collect();
    keys.dedup();
    keys.into_iter()
        .filter_map(|(precision, size)| {
            let per_gpu: Vec<f64> = results
                .iter()
                .filter(|r| r.precision == precision && r.size == size)
                .map(|r| r.back_to_back_tflops)
                .collect();
            BaselineFigure::from_gpus("matmul", precision, size as u64, "tflops", per_gpu)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(precision: Precision, relative_error: f64, all_finite: bool) -> MatmulResult {
        timed(precision, 785.4, 8192, relative_error, all_finite)
    }

    fn timed(
        precision: Precision,
        tflops: f64,
        size: usize,
        relative_error: f64,
        all_finite: bool,
    ) -> MatmulResult {
        MatmulResult {
            gpu: 0,
            precision: precision.name(),
            size,
            median_ms: 2.0 * (size as f64).powi(3) / (tflops * 1e12) * 1e3,
            tflops,
            back_to_back_ms: 2.0 * (size as f64).powi(3) / (tflops * 1e12) * 1e3,
            back_to_back_tflops: tflops,
            relative_error,
            tolerance: precision.tolerance(),
            all_finite,
            passed: all_finite && relative_error <= precision.tolerance(),
        }
    }

    fn on(name: &str) -> References<'static> {
        References {
            gpus: vec![(name.to_string(), crate::expected::find(name))],
            baseline: None,
        }
    }

    #[test]
    fn verdicts_follow_tolerance_and_finiteness() {
        let h200 = on("NVIDIA H200");
        let good = check(
            &[
                result(Precision::Bf16, 2e-3, true),
                timed(Precision::Fp32, 51.0, 8192, 1e-6, true),
            ],
            &h200,
        );
        assert_eq!(good.status, Status::Pass, "{}", good.summary);
        assert_eq!(
            good.summary,
            "TFLOP/s per GPU (share of peak): bf16 785 (79%), fp32 51 (76%)"
        );
        let wrong = check(&[timed(Precision::Fp32, 51.0, 8192, 1e-3, true)], &h200);
        assert_eq!(wrong.status, Status::Fail);
        assert!(wrong.summary.starts_with("wrong results: fp32 on GPU 0"));
        let unwritten = check(&[result(Precision::Bf16, 0.0, false)], &h200);
        assert_eq!(unwritten.status, Status::Fail);
        assert!(unwritten.lines[1].contains("NON-FINITE OUTPUT"));
    }

    #[test]
    fn a_healthy_h200_clears_the_peak_rule_and_a_shared_one_does_not() {
        let h200 = on("NVIDIA H200");
        let healthy = check(&[result(Precision::Bf16, 2e-3, true)], &h200);
        assert!(healthy.lines[1].ends_with(
            "correct; 79% of peak; needs >= 593.7 TFLOP/s (60% of H200 SXM dense bf16 peak 989.5 TFLOP/s): ok"
        ), "{}", healthy.lines[1]);
        assert_eq!(healthy.figures["judgements"][0]["peak_verdict"], "pass");
        // Another process's matmuls on the same GPU halve what each product gets.
        let shared = check(&[timed(Precision::Bf16, 392.7, 8192, 2e-3, true)], &h200);
        assert_eq!(shared.status, Status::Fail);
        assert_eq!(
            shared.summary,
            "SLOW: bf16 on GPU 0 392.7 < 593.7 TFLOP/s (60% of H200 SXM dense bf16 peak 989.5 TFLOP/s); TFLOP/s per GPU (share of peak): bf16 393 (40%)"
        );
        assert!(shared.lines[1].ends_with("): SLOW"));
        assert!(shared.rule.contains(
            "each GPU's TFLOP/s over 20 products queued back to back >= 60% of its model's dense datasheet peak"
        ));
        // Measured on 2xH200 with a second process running bf16 matmuls on GPU 0: single short
        // products kept 86% of their speed (the median hides the other process), the run of
        // back-to-back products did not. The run is judged.
        let mut hidden = result(Precision::Bf16, 2e-3, true);
        hidden.tflops = 681.0;
        hidden.back_to_back_tflops = 392.7;
        let judged = check(&[hidden], &h200);
        assert_eq!(judged.status, Status::Fail);
        assert!(judged
            .summary
            .starts_with("SLOW: bf16 on GPU 0 392.7 < 593.7"));
        assert!(
            judged.lines[1].contains("    681.0     392.7 "),
            "{}",
            judged.lines[1]
        );
    }

    #[test]
    fn unknown_models_and_small_products_warn_with_their_figures() {
        let unknown = check(
            &[result(Precision::Bf16, 2e-3, true)],
            &on("NVIDIA GeForce RTX 4090"),
        );
        assert_eq!(unknown.status, Status::Warn);
        assert_eq!(
            unknown.summary,
            "TFLOP/s per GPU (share of peak): bf16 785; not judged: NVIDIA GeForce RTX 4090 is not in the expected-figures table, so no peak to judge against"
        );
        let small = check(
            &[timed(Precision::Bf16, 300.0, 2048, 2e-3, true)],
            &on("NVIDIA H200"),
        );
        assert_eq!(small.status, Status::Warn);
        assert!(small.summary.contains("n = 2048 is below 4096"));
    }

    #[test]
    fn a_baseline_fails_what_the_peak_rule_lets_through() {
        let good_node = crate::baseline::Baseline::new(
            0,
            vec!["NVIDIA H200".to_string()],
            baseline_figures(&[result(Precision::Bf16, 2e-3, true)]),
        );
        assert_eq!(good_node.reference("matmul", "bf16", 8192), Some(785.4));
        let mut judged = on("NVIDIA H200");
        judged.baseline = Some((&good_node, "good.json".to_string()));
        let within = check(&[timed(Precision::Bf16, 700.0, 8192, 2e-3, true)], &judged);
        assert_eq!(within.status, Status::Pass, "{}", within.summary);
        assert!(within.lines[1]
            .ends_with("; needs >= 628.3 TFLOP/s (80% of baseline 785.4 TFLOP/s): ok"));
        // 600 clears 60% of the peak (593.7) but not 80% of the good node (628.3).
        let slower = check(&[timed(Precision::Bf16, 600.0, 8192, 2e-3, true)], &judged);
        assert_eq!(slower.status, Status::Fail);
        assert!(slower.summary.starts_with(
            "SLOW: bf16 on GPU 0 600.0 < 628.3 TFLOP/s (80% of baseline 785.4 TFLOP/s)"
        ));
        let missing = check(&[result(Precision::Fp16, 2e-3, true)], &judged);
        assert_eq!(missing.status, Status::Warn);
        assert!(missing
            .summary
            .contains("the baseline has no matmul fp16 figure at this size"));
    }

    #[test]
    fn baseline_figures_take_the_median_over_gpus() {
        let mut second = result(Precision::Bf16, 2e-3, true);
        second.gpu = 1;
        second.tflops = 805.4;
        second.back_to_back_tflops = 805.4;
        let figures = baseline_figures(&[result(Precision::Bf16, 2e-3, true), second]);
        assert_eq!(figures.len(), 1);
        assert_eq!(figures[0].per_gpu, vec![785.4, 805.4]);
        assert_eq!(figures[0].value, 795.4);
    }

    #[test]
    fn inputs_are_rounded_nonzero_and_fresh() {
        let first = draw_inputs(Precision::Bf16, 1000, 1);
        let second = draw_inputs(Precision::Bf16, 1000, 2);
        let (HostInputs::Bf16(a1, _), HostInputs::Bf16(a2, _)) = (&first, &second) else {
            panic!("bf16 inputs expected");
        };
        assert!(a1.iter().all(|value| value.to_f32() != 0.0));
        assert_ne!(a1, a2);
        // The float64 view reads the rounded value, so the reference uses exactly what the GPU
        // reads.
        assert_eq!(first.a(3), a1[3].to_f64());
    }

    #[test]
    fn cpu_reference_of_a_tiny_product_has_no_error() {
        // A 2x2 column-major product checked with the same sampling arithmetic.
        let inputs = HostInputs::Fp32(vec![1.0, 2.0, 3.0, 4.0], vec![5.0, 6.0, 7.0, 8.0]);
        let entry = |row: usize, column: usize| -> f64 {
            (0..2)
                .map(|inner| inputs.a(row + inner * 2) * inputs.b(inner + column * 2))
                .sum()
        };
        // A = [[1,3],[2,4]], B = [[5,7],[6,8]] → C = [[23,31],[34,46]].
        assert_eq!(
            (entry(0, 0), entry(1, 0), entry(0, 1), entry(1, 1)),
            (23.0, 34.0, 31.0, 46.0)
        );
    }
}
