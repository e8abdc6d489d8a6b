//! The NCCL check: an all-reduce (float32 sum) across every visible GPU from this one process
//! (`ncclCommInitAll`, the calls between `ncclGroupStart` and `ncclGroupEnd`), bus bandwidth
//! over a sweep of sizes, and an exact check of the sum.
//!
//! Each rank sends small positive integers (1..=251), whose float32 sums are exact, so the
//! result must equal the expected sum bit for bit; the output is poisoned with NaN first.
//!
//! Two timings per size. Per call: events on every GPU's stream around each all-reduce, the
//! slowest GPU's time, the median (as torch.distributed code times one step). Back to back: as
//! nccl-tests does, a host clock around a run of all-reduces queued one after another, from
//! synchronised streams to synchronised streams, divided by the count; the median of several
//! runs. Launch gaps hide behind the previous collective there, so small sizes come out faster;
//! the speed rules judge this figure, the one nccl-tests and a training loop see.

use super::{poison, EventPair, Gpu};
use crate::baseline::BaselineFigure;
use crate::plot::size_label;
use crate::report::{Check, Metric, Status};
use crate::rules::{self, CollectivePath, Expectation, References, Verdict};
use crate::stats;
use anyhow::{anyhow, Context as _, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut};
use cudarc::nccl::{group_end, group_start, Comm, ReduceOp};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// How the all-reduce sweep runs.
#[derive(Clone, Debug)]
pub struct NcclSettings {
    pub sizes: Vec<u64>,
    pub warm_up: usize,
    /// Timed calls for the per-call median, and all-reduces in each back-to-back run.
    pub repetitions: usize,
    /// Back-to-back runs per size (their median is reported).
    pub back_to_back_runs: usize,
}

/// One size.
#[derive(Clone, Debug, Serialize)]
pub struct NcclPoint {
    pub size_bytes: u64,
    pub ranks: usize,
    pub median_ms: f64,
    pub algorithm_bytes_per_second: f64,
    pub bus_bytes_per_second: f64,
    pub sum_exact: bool,
    /// Elements that differed from the exact sum (0 when `sum_exact`).
    pub wrong_elements: u64,
    /// Milliseconds per all-reduce in a run of `collectives_per_run` queued back to back
    /// (median of `back_to_back_runs` runs), timed like nccl-tests.
    pub back_to_back_ms: f64,
    pub back_to_back_algorithm_bytes_per_second: f64,
    pub back_to_back_bus_bytes_per_second: f64,
    pub back_to_back_runs: usize,
    pub collectives_per_run: usize,
    /// Wall-clock seconds this size took, warm-ups and the checked run included (the first
    /// size also pays for anything NCCL sets up at its first collective).
    pub seconds: f64,
}

/// What rank `rank` contributes at element `index`.
pub fn contribution(rank: usize, index: usize) -> f32 {
    (1 + (index + 31 * rank) % 251) as f32
}

/// The exact all-reduce sum at element `index` over `ranks` ranks.
pub fn expected_sum(ranks: usize, index: usize) -> f32 {
    (0..ranks).map(|rank| contribution(rank, index)).sum()
}

/// Elements of an all-reduce result that differ from the exact sum, compared bit for bit, in
/// parallel. The expected values repeat with period 251, so each block of 251 elements is
/// compared against one table.
pub fn count_wrong(values: &[f32], ranks: usize) -> u64 {
    const PERIOD: usize = 251;
    let table: Vec<u32> = (0..PERIOD)
        .map(|index| expected_sum(ranks, index).to_bits())
        .collect();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(16);
    let chunk = values.len().div_ceil(threads).div_ceil(PERIOD).max(1) * PERIOD;
    std::thread::scope(|scope| {
        let workers: Vec<_> = values
            .chunks(chunk)
            .map(|part| {
                let table = &table;
                scope.spawn(move || {
                    part.chunks(PERIOD)
                        .map(|block| {
                            block
                                .iter()
                                .zip(table)
                                .filter(|(value, expected)| value.to_bits() != **expected)
                                .count() as u64
                        })
                        .sum::<u64>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or(u64::MAX))
            .sum()
    })
}

/// Bus bandwidth of an all-reduce: algorithm bandwidth × 2(n−1)/n (nccl-tests' definition).
pub fn bus_bandwidth(algorithm_bytes_per_second: f64, ranks: usize) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    algorithm_bytes_per_second * 2.0 * (ranks as f64 - 1.0) / ranks as f64
}

/// One communicator per GPU, all created by this process (ncclCommInitAll): the layout of a
/// single-process training job, and no launcher or rendezvous is needed.
pub struct Communicators {
    streams: Vec<Arc<CudaStream>>,
    comms: Vec<Comm>,
    /// Seconds `ncclCommInitAll` took (topology search, buffers, connections).
    pub seconds: f64,
}

// SAFETY: an NCCL communicator may be used from any thread as long as one thread at a time
// does; `Communicators` is made on a helper thread and then handed whole to the one thread that
// measures, never shared.
unsafe impl Send for Communicators {}

impl Communicators {
    /// Creates a stream and a communicator on every GPU whose context is given.
    pub fn create(contexts: &[Arc<CudaContext>]) -> Result<Communicators> {
        let started = Instant::now();
        let streams: Vec<Arc<CudaStream>> = contexts
            .iter()
            .map(|context| context.new_stream())
            .collect::<std::result::Result<_, _>>()?;
        let comms = Comm::from_devices(streams.clone()).map_err(|error| {
            anyhow!(
                "ncclCommInitAll over {} GPUs failed: {error:?}",
                contexts.len()
            )
        })?;
        Ok(Communicators {
            streams,
            comms,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Runs the sweep across all GPUs over `communicators`.
pub fn measure(
    gpus: &[Gpu],
    communicators: &Communicators,
    settings: &NcclSettings,
) -> Result<Vec<NcclPoint>> {
    let ranks = gpus.len();
    let largest_elements = (settings.sizes.iter().copied().max().unwrap_or(0) / 4) as usize;
    let (streams, comms) = (
        communicators.streams.as_slice(),
        communicators.comms.as_slice(),
    );
    // contribution(rank, i) = base[i + 31·rank]: one host pattern serves every rank.
    let mut base = vec![0f32; largest_elements + 31 * ranks];
    stats::parallel_fill(&mut base, |index| contribution(0, index));
    let mut sends: Vec<CudaSlice<f32>> = Vec::new();
    let mut receives: Vec<CudaSlice<f32>> = Vec::new();
    for (rank, stream) in streams.iter().enumerate() {
        let host = &base[31 * rank..31 * rank + largest_elements];
        sends.push(
            stream
                .clone_htod(host)
                .with_context(|| format!("uploading rank {rank}'s data"))?,
        );
        receives.push(unsafe { stream.alloc::<f32>(largest_elements) }?);
    }
    let events: Vec<EventPair> = gpus
        .iter()
        .map(|gpu| EventPair::new(&gpu.context))
        .collect::<Result<_>>()?;
    let mut points = Vec::new();
    for &size in &settings.sizes {
        let size_started = Instant::now();
        let elements = (size / 4) as usize;
        let all_reduce = |receives: &mut Vec<CudaSlice<f32>>| -> Result<()> {
            group_start().map_err(|error| anyhow!("ncclGroupStart failed: {error:?}"))?;
            for ((comm, send), receive) in comms.iter().zip(&sends).zip(receives.iter_mut()) {
                let mut target = receive.slice_mut(0..elements);
                comm.all_reduce(&send.slice(0..elements), &mut target, &ReduceOp::Sum)
                    .map_err(|error| {
                        anyhow!("ncclAllReduce of {} failed: {error:?}", size_label(size))
                    })?;
            }
            group_end().map_err(|error| anyhow!("ncclGroupEnd failed: {error:?}"))?;
            Ok(())
        };
        for _ in 0..settings.warm_up {
            all_reduce(&mut receives)?;
        }
        for stream in streams {
            stream.synchronize()?;
        }
        let mut times = Vec::with_capacity(settings.repetitions);
        for _ in 0..settings.repetitions {
            for (pair, stream) in events.iter().zip(streams) {
                pair.start.record(stream)?;
            }
            all_reduce(&mut receives)?;
            for (pair, stream) in events.iter().zip(streams) {
                pair.end.record(stream)?;
            }
            let mut slowest: f64 = 0.0;
            for pair in &events {
                slowest = slowest.max(pair.elapsed_ms()?);
            }
            times.push(slowest);
        }
        // Back to back, as nccl-tests times: from synchronised streams, queue the collectives
        // one after another, wait for every stream, divide the host clock's span by the count.
        let mut run_times = Vec::with_capacity(settings.back_to_back_runs);
        for _ in 0..settings.back_to_back_runs {
            for stream in streams {
                stream.synchronize()?;
            }
            let started = Instant::now();
            for _ in 0..settings.repetitions {
                all_reduce(&mut receives)?;
            }
            for stream in streams {
                stream.synchronize()?;
            }
            run_times.push(started.elapsed().as_secs_f64() * 1000.0 / settings.repetitions as f64);
        }
        // The checked run: poison, reduce once more, compare every element on every rank. The
        // timed runs above are not checked themselves, so that copying gigabytes back to the
        // host stays out of the figures.
        for (receive, stream) in receives.iter_mut().zip(streams) {
            let (pointer, _guard) = receive.device_ptr_mut(stream);
            poison(pointer, elements * 4, stream)?;
        }
        all_reduce(&mut receives)?;
        let mut wrong_elements = 0u64;
        for (receive, stream) in receives.iter().zip(streams) {
            stream.synchronize()?;
            let values: Vec<f32> = stream.clone_dtoh(&receive.slice(0..elements))?;
            wrong_elements += count_wrong(&values, ranks);
        }
        let median_ms = stats::median(&times).unwrap_or(f64::NAN);
        let algorithm = stats::bytes_per_second(size, median_ms);
        let back_to_back_ms = stats::median(&run_times).unwrap_or(f64::NAN);
        let back_to_back_algorithm = stats::bytes_per_second(size, back_to_back_ms);
        points.push(NcclPoint {
            size_bytes: size,
            ranks,
            median_ms,
            algorithm_bytes_per_second: algorithm,
            bus_bytes_per_second: bus_bandwidth(algorithm, ranks),
            sum_exact: wrong_elements == 0,
            wrong_elements,
            back_to_back_ms,
            back_to_back_algorithm_bytes_per_second: back_to_back_algorithm,
            back_to_back_bus_bytes_per_second: bus_bandwidth(back_to_back_algorithm, ranks),
            back_to_back_runs: run_times.len(),
            collectives_per_run: settings.repetitions,
            seconds: size_started.elapsed().as_secs_f64(),
        });
    }
    Ok(points)
}

/// The name of the all-reduce figure in a baseline (it carries the GPU count, since the figure
/// of 2 GPUs says nothing about 8).
pub fn baseline_figure_name(ranks: usize) -> String {
    format!("all-reduce bus bandwidth, {ranks} GPUs")
}

fn show_rate(value: f64) -> String {
    format!("{:.1} GB/s", value / 1e9)
}

/// The speed rules' view of one size.
#[derive(Clone, Debug, Serialize)]
pub struct SpeedJudgement {
    pub size_bytes: u64,
    pub bus_bytes_per_second: f64,
    /// The path rule (sizes from `rules::NCCL_SMALLEST_JUDGED_BYTES`), or why it does not apply.
    pub path: Option<Expectation>,
    pub path_verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_not_applied: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Expectation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_verdict: Option<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_missing: Option<String>,
}

/// Judges one size's back-to-back bus bandwidth against the path and the baseline.
pub fn judge_speed(
    point: &NcclPoint,
    path: &Result<CollectivePath, String>,
    references: &References,
) -> SpeedJudgement {
    let measured = point.back_to_back_bus_bytes_per_second;
    let (expectation, not_applied) = if point.size_bytes < rules::NCCL_SMALLEST_JUDGED_BYTES {
        (
            None,
            Some(format!(
                "below {}, bound by latency: not judged against the path",
                size_label(rules::NCCL_SMALLEST_JUDGED_BYTES)
            )),
        )
    } else {
        match path {
            Ok(path) => (Some(rules::nccl_expectation(path)), None),
            Err(reason) => (None, Some(reason.clone())),
        }
    };
    let baseline = references.baseline(
        "nccl",
        &baseline_figure_name(point.ranks),
        point.size_bytes,
        show_rate,
    );
    let (baseline, baseline_missing) = match baseline {
        Some(Ok(expectation)) => (Some(expectation), None),
        Some(Err(reason)) => (None, Some(reason)),
        None => (None, None),
    };
    SpeedJudgement {
        size_bytes: point.size_bytes,
        bus_bytes_per_second: measured,
        path_verdict: expectation
            .as_ref()
            .map(|e| e.judge(measured))
            .unwrap_or(Verdict::NotApplied),
        path: expectation,
        path_not_applied: not_applied,
        baseline_verdict: baseline.as_ref().map(|e| e.judge(measured)),
        baseline,
        baseline_missing,
    }
}

/// Judges and lays out the sweep: every sum exact; from 256 MiB, the back-to-back bus bandwidth
/// at least half of what one direction of the path between the GPUs carries; with a baseline,
/// every size at least its share of the baseline. A size no rule could judge (the path unknown,
/// a figure the baseline lacks) warns, but sizes below 256 MiB without a baseline do not.
pub fn check(
    points: &[NcclPoint],
    nccl_version: Option<&str>,
    path: &Result<CollectivePath, String>,
    references: &References,
) -> Check {
    let exact = points.iter().all(|p| p.sum_exact);
    let judgements: Vec<SpeedJudgement> = points
        .iter()
        .map(|point| judge_speed(point, path, references))
        .collect();
    let mut slow: Vec<String> = Vec::new();
    for judgement in &judgements {
        for (verdict, expectation) in [
            (Some(judgement.path_verdict), &judgement.path),
            (judgement.baseline_verdict, &judgement.baseline),
        ] {
            if let (Some(Verdict::Fail), Some(expectation)) = (verdict, expectation) {
                slow.push(format!(
                    "bus bandwidth {} at {} < {} ({:.0}% of {})",
                    show_rate(judgement.bus_bytes_per_second),
                    size_label(judgement.size_bytes),
                    show_rate(expectation.required()),
                    expectation.share * 100.0,
                    expectation.basis
                ));
            }
        }
    }
    let judged_sizes = judgements
        .iter()
        .filter(|j| j.size_bytes >= rules::NCCL_SMALLEST_JUDGED_BYTES)
        .count();
    let mut unjudged: Vec<String> = judgements
        .iter()
        .filter(|j| j.size_bytes >= rules::NCCL_SMALLEST_JUDGED_BYTES)
        .filter_map(|j| j.path_not_applied.clone())
        .chain(judgements.iter().filter_map(|j| {
            j.baseline_missing
                .as_ref()
                .map(|reason| format!("{reason} ({})", size_label(j.size_bytes)))
        }))
        .collect();
    if judged_sizes == 0 && !points.is_empty() && references.baseline.is_none() {
        unjudged.push(format!(
            "no size from {} measured, so no speed rule applied",
            size_label(rules::NCCL_SMALLEST_JUDGED_BYTES)
        ));
    }
    unjudged.dedup();
    let status = if !exact || !slow.is_empty() {
        Status::Fail
    } else if !unjudged.is_empty() {
        Status::Warn
    } else {
        Status::Pass
    };
    let ranks = points.first().map(|p| p.ranks).unwrap_or(0);
    let largest = points.iter().max_by_key(|p| p.size_bytes);
    let over = match path {
        Ok(path) => format!(
            " over {}",
            path.label.split(" (").next().unwrap_or(&path.label)
        ),
        Err(_) => String::new(),
    };
    let mut summary = match largest {
        Some(point) => format!(
            "{ranks} GPUs{over}: bus bandwidth {:.0} GB/s at {} back to back ({:.0} per call)",
            point.back_to_back_bus_bytes_per_second / 1e9,
            size_label(point.size_bytes),
            point.bus_bytes_per_second / 1e9,
        ),
        None => format!("{ranks} GPUs, no sizes measured"),
    };
    summary.push_str(if exact {
        ", sums exact"
    } else {
        ", WRONG SUMS"
    });
    if !slow.is_empty() {
        summary = format!("SLOW: {}; {summary}", slow.join("; "));
    }
    if status == Status::Warn {
        summary = format!("{summary}; not judged: {}", unjudged.join("; "));
    }
    let path_text = match path {
        Ok(path) => format!(
            "{} = {:.1} GB/s per direction{}",
            path.label,
            path.bytes_per_second_per_direction / 1e9,
            path.note
                .as_ref()
                .map(|note| format!(", {note}"))
                .unwrap_or_default()
        ),
        Err(reason) => format!("unknown ({reason})"),
    };
    let mut result = Check::new("nccl", status, summary)
        .with_rule(format!(
            "all-reduce sum (float32, integer values 1..251 per rank) equal bit for bit to the exact sum on every rank and element; from {} the back-to-back bus bandwidth >= {:.0}% of one direction of the path between the GPUs (NVLink when NVML reports it between every pair, from data/gpu-models.json; else the slowest PCIe link), here {path_text}; a path that cannot be known warns{}",
            size_label(rules::NCCL_SMALLEST_JUDGED_BYTES),
            rules::NCCL_SHARE_OF_PATH * 100.0,
            references.baseline_rule()
        ))
        .figure("nccl_version", nccl_version)
        .figure("path", path.as_ref().ok())
        .figure("points", points)
        .figure("judgements", &judgements);
    result.lines.push(format!(
        "{:>9} {:>9} {:>11} {:>11} {:>11} {} ",
        "size",
        "ms/call",
        "busbw/call",
        "ms b2b",
        "busbw b2b",
        "sum; speed rules (GB/s, back to back)"
    ));
    for (point, judgement) in points.iter().zip(&judgements) {
        let mut rules_text = match (&judgement.path, &judgement.path_not_applied) {
            (Some(expectation), _) => rules::expectation_text(
                expectation,
                point.back_to_back_bus_bytes_per_second,
                show_rate,
            ),
            (None, Some(reason)) => format!("path: {reason}"),
            (None, None) => String::new(),
        };
        if let Some(baseline) = &judgement.baseline {
            rules_text.push_str(&format!(
                "; {}",
                rules::expectation_text(
                    baseline,
                    point.back_to_back_bus_bytes_per_second,
                    show_rate
                )
            ));
        }
        if let Some(reason) = &judgement.baseline_missing {
            rules_text.push_str(&format!("; {reason}"));
        }
        result.lines.push(format!(
            "{:>9} {:>9.3} {:>11.1} {:>11.3} {:>11.1} {}; {rules_text}",
            size_label(point.size_bytes),
            point.median_ms,
            point.bus_bytes_per_second / 1e9,
            point.back_to_back_ms,
            point.back_to_back_bus_bytes_per_second / 1e9,
            if point.sum_exact {
                "exact".to_string()
            } else {
                format!("{} wrong elements", point.wrong_elements)
            }
        ));
        result.metrics.push(
            Metric::new(
                "nccl_allreduce_bus_bytes_per_second",
                "NCCL all-reduce bus bandwidth across all GPUs, median per call.",
                point.bus_bytes_per_second,
            )
            .label("size_bytes", point.size_bytes)
            .label("ranks", point.ranks),
        );
        result.metrics.push(
            Metric::new(
                "nccl_allreduce_back_to_back_bus_bytes_per_second",
                "NCCL all-reduce bus bandwidth across all GPUs, collectives queued back to back (as nccl-tests times).",
                point.back_to_back_bus_bytes_per_second,
            )
            .label("size_bytes", point.size_bytes)
            .label("ranks", point.ranks),
        );
    }
    result
}

/// The baseline figures of the sweep: per size, the back-to-back bus bandwidth.
pub fn baseline_figures(points: &[NcclPoint]) -> Vec<BaselineFigure> {
    points
        .iter()
        .filter_map(|point| {
            BaselineFigure::from_gpus(
                "nccl",
                &baseline_figure_name(point.ranks),
                point.size_bytes,
                "bytes_per_second",
                vec![point.back_to_back_bus_bytes_per_second],
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contributions_are_nonzero_integers_with_exact_sums() {
        for ranks in 1..=8 {
            for index in 0..600 {
                let sum = expected_sum(ranks, index);
                assert!(sum >= ranks as f32 && sum <= 251.0 * ranks as f32);
                assert_eq!(sum.fract(), 0.0);
            }
        }
        assert_ne!(contribution(0, 5), contribution(1, 5));
    }

    #[test]
    fn wrong_elements_are_counted_wherever_they_are() {
        let ranks = 3;
        let mut values: Vec<f32> = (0..100_000)
            .map(|index| expected_sum(ranks, index))
            .collect();
        assert_eq!(count_wrong(&values, ranks), 0);
        values[0] = f32::NAN;
        values[77_777] += 1.0;
        values[99_999] = 0.0;
        assert_eq!(count_wrong(&values, ranks), 3);
        assert_eq!(
            count_wrong(&values, 2),
            100_000 - count_matching_two_ranks(&values)
        );
    }

    fn count_matching_two_ranks(values: &[f32]) -> u64 {
        values
            .iter()
            .enumerate()
            .filter(|(index, value)| value.to_bits() == expected_sum(2, *index).to_bits())
            .count() as u64
    }

    #[test]
    fn bus_bandwidth_follows_nccl_tests() {
        assert_eq!(bus_bandwidth(300e9, 2), 300e9);
        assert_eq!(bus_bandwidth(100e9, 4), 150e9);
        assert_eq!(bus_bandwidth(100e9, 1), 0.0);
    }

    fn point(size_bytes: u64, bus_bytes_per_second: f64, wrong: u64) -> NcclPoint {
        let ms = size_bytes as f64 / bus_bytes_per_second * 1000.0;
        NcclPoint {
            size_bytes,
            ranks: 2,
            median_ms: ms * 1.05,
            algorithm_bytes_per_second: bus_bytes_per_second / 1.05,
            bus_bytes_per_second: bus_bytes_per_second / 1.05,
            sum_exact: wrong == 0,
            wrong_elements: wrong,
            back_to_back_ms: ms,
            back_to_back_algorithm_bytes_per_second: bus_bytes_per_second,
            back_to_back_bus_bytes_per_second: bus_bytes_per_second,
            back_to_back_runs: 5,
            collectives_per_run: 20,
            seconds: 0.1,
        }
    }

    fn h200_pair() -> References<'static> {
        let model = crate::expected::find("NVIDIA H200");
        References {
            gpus: vec![
                ("NVIDIA H200".to_string(), model),
                ("NVIDIA H200".to_string(), model),
            ],
            baseline: None,
        }
    }

    /// The path of two H200s that NVML reports joined by NVLink.
    fn nvlink_path() -> Result<CollectivePath, String> {
        let model = crate::expected::find("NVIDIA H200");
        rules::collective_path(&[
            rules::GpuLinks {
                index: 0,
                device_name: "NVIDIA H200",
                model,
                pcie: Some((5, 16)),
                nvlink_peers: Some(vec![1]),
            },
            rules::GpuLinks {
                index: 1,
                device_name: "NVIDIA H200",
                model,
                pcie: Some((5, 16)),
                nvlink_peers: Some(vec![0]),
            },
        ])
    }

    #[test]
    fn a_wrong_sum_fails_the_check() {
        let references = h200_pair();
        let good = check(
            &[point(512 << 20, 315e9, 0)],
            Some("2.28.3"),
            &nvlink_path(),
            &references,
        );
        assert_eq!(good.status, Status::Pass, "{}", good.summary);
        assert_eq!(
            good.summary,
            "2 GPUs over NVLink 4 x18: bus bandwidth 315 GB/s at 512 MiB back to back (300 per call), sums exact"
        );
        assert_eq!(good.figures["nccl_version"], "2.28.3");
        assert_eq!(good.figures["path"]["kind"], "nvlink");
        let bad = check(
            &[point(512 << 20, 315e9, 7)],
            None,
            &nvlink_path(),
            &references,
        );
        assert_eq!(bad.status, Status::Fail);
        assert!(bad.lines[1].contains("7 wrong elements"));
    }

    #[test]
    fn losing_nvlink_fails_naming_the_nvlink_figure() {
        let references = h200_pair();
        let healthy = check(
            &[point(8 << 20, 160e9, 0), point(512 << 20, 310e9, 0)],
            None,
            &nvlink_path(),
            &references,
        );
        assert_eq!(healthy.status, Status::Pass, "{}", healthy.summary);
        // 8 MiB is reported, not judged against the path.
        assert!(healthy.lines[1].contains("path: below 256 MiB, bound by latency"));
        assert!(healthy.lines[2].ends_with(
            "exact; needs >= 225.0 GB/s (50% of 450.0 GB/s per direction of NVLink 4 x18 (H200 SXM datasheet: 900 GB/s both directions)): ok"
        ), "{}", healthy.lines[2]);
        // NCCL_P2P_DISABLE=1: the reduction goes through host memory.
        let through_host = check(
            &[point(8 << 20, 20e9, 0), point(512 << 20, 25e9, 0)],
            None,
            &nvlink_path(),
            &references,
        );
        assert_eq!(through_host.status, Status::Fail);
        assert!(through_host.summary.starts_with(
            "SLOW: bus bandwidth 25.0 GB/s at 512 MiB < 225.0 GB/s (50% of 450.0 GB/s per direction of NVLink 4 x18 (H200 SXM datasheet: 900 GB/s both directions))"
        ), "{}", through_host.summary);
        assert_eq!(
            through_host.figures["judgements"][1]["path_verdict"],
            "fail"
        );
    }

    #[test]
    fn sweeps_that_no_rule_can_judge_warn() {
        let references = h200_pair();
        let small_only = check(
            &[point(8 << 20, 160e9, 0)],
            None,
            &nvlink_path(),
            &references,
        );
        assert_eq!(small_only.status, Status::Warn);
        assert!(small_only
            .summary
            .ends_with("not judged: no size from 256 MiB measured, so no speed rule applied"));
        let unknown_path: Result<CollectivePath, String> =
            Err("GPU 0 (NVIDIA B300) has no NVLink figures".to_string());
        let unknown = check(
            &[point(512 << 20, 700e9, 0)],
            None,
            &unknown_path,
            &references,
        );
        assert_eq!(unknown.status, Status::Warn);
        assert!(unknown
            .summary
            .ends_with("not judged: GPU 0 (NVIDIA B300) has no NVLink figures"));
        assert!(unknown
            .rule
            .contains("here unknown (GPU 0 (NVIDIA B300) has no NVLink figures)"));
    }

    #[test]
    fn a_baseline_judges_every_size() {
        let good_node = crate::baseline::Baseline::new(
            0,
            vec!["NVIDIA H200".to_string(); 2],
            baseline_figures(&[point(8 << 20, 160e9, 0), point(512 << 20, 310e9, 0)]),
        );
        assert_eq!(
            good_node.reference("nccl", "all-reduce bus bandwidth, 2 GPUs", 8 << 20),
            Some(160e9)
        );
        let mut references = h200_pair();
        references.baseline = Some((&good_node, "good.json".to_string()));
        let slow_small = check(
            &[point(8 << 20, 100e9, 0), point(512 << 20, 300e9, 0)],
            None,
            &nvlink_path(),
            &references,
        );
        assert_eq!(slow_small.status, Status::Fail);
        assert!(slow_small.summary.starts_with(
            "SLOW: bus bandwidth 100.0 GB/s at 8 MiB < 128.0 GB/s (80% of baseline 160.0 GB/s)"
        ));
        let other_size = check(
            &[point(64 << 20, 250e9, 0), point(512 << 20, 300e9, 0)],
            None,
            &nvlink_path(),
            &references,
        );
        assert_eq!(other_size.status, Status::Warn);
        assert!(other_size.summary.contains(
            "the baseline has no nccl all-reduce bus bandwidth, 2 GPUs figure at this size (64 MiB)"
        ));
    }
}
