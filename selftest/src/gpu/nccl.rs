//! The NCCL check: an all-reduce (float32 sum) across every visible GPU from this one process
//! (`ncclCommInitAll`, the calls between `ncclGroupStart` and `ncclGroupEnd`), bus bandwidth
//! over a sweep of sizes, and an exact check of the sum.
//!
//! Each rank sends small positive integers (1..=251), whose float32 sums are exact, so the
//! result must equal the expected sum bit for bit; the output is poisoned with NaN first.
//! Timing: per iteration, events on every GPU's stream; the iteration's time is the slowest
//! GPU's; the figure is the median after a warm-up (as nccl-tests and torch.distributed time).

use super::{poison, EventPair, Gpu};
use crate::plot::size_label;
use crate::report::{Check, Metric, Status};
use crate::stats;
use anyhow::{anyhow, Context as _, Result};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use cudarc::nccl::{group_end, group_start, Comm, ReduceOp};
use serde::Serialize;
use std::sync::Arc;

/// How the all-reduce sweep runs.
#[derive(Clone, Debug)]
pub struct NcclSettings {
    pub sizes: Vec<u64>,
    pub warm_up: usize,
    pub repetitions: usize,
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

/// Runs the sweep across all GPUs.
pub fn measure(gpus: &[Gpu], settings: &NcclSettings) -> Result<Vec<NcclPoint>> {
    let ranks = gpus.len();
    let largest_elements = (settings.sizes.iter().copied().max().unwrap_or(0) / 4) as usize;
    let streams: Vec<Arc<CudaStream>> = gpus
        .iter()
        .map(|gpu| gpu.context.new_stream())
        .collect::<std::result::Result<_, _>>()?;
    // One communicator per GPU, all created by this process (ncclCommInitAll): the layout of a
    // single-process training job, and no launcher or rendezvous is needed.
    let comms = Comm::from_devices(streams.clone())
        .map_err(|error| anyhow!("ncclCommInitAll over {ranks} GPUs failed: {error:?}"))?;
    // contribution(rank, i) = base[i + 31·rank]: one host pattern serves every rank.
    let base: Vec<f32> = (0..largest_elements + 31 * ranks)
        .map(|index| contribution(0, index))
        .collect();
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
        for stream in &streams {
            stream.synchronize()?;
        }
        let mut times = Vec::with_capacity(settings.repetitions);
        for _ in 0..settings.repetitions {
            for (pair, stream) in events.iter().zip(&streams) {
                pair.start.record(stream)?;
            }
            all_reduce(&mut receives)?;
            for (pair, stream) in events.iter().zip(&streams) {
                pair.end.record(stream)?;
            }
            let mut slowest: f64 = 0.0;
            for pair in &events {
                slowest = slowest.max(pair.elapsed_ms()?);
            }
            times.push(slowest);
        }
        // The checked run: poison, reduce once more, compare every element on every rank. The
        // timed runs above are not checked themselves, so that copying gigabytes back to the
        // host stays out of the figures.
        for (receive, stream) in receives.iter_mut().zip(&streams) {
            let (pointer, _guard) = receive.device_ptr_mut(stream);
            poison(pointer, elements * 4, stream)?;
        }
        all_reduce(&mut receives)?;
        let mut wrong_elements = 0u64;
        for (receive, stream) in receives.iter().zip(&streams) {
            stream.synchronize()?;
            let values: Vec<f32> = stream.clone_dtoh(&receive.slice(0..elements))?;
            wrong_elements += count_wrong(&values, ranks);
        }
        let median_ms = stats::median(&times).unwrap_or(f64::NAN);
        let algorithm = stats::bytes_per_second(size, median_ms);
        points.push(NcclPoint {
            size_bytes: size,
            ranks,
            median_ms,
            algorithm_bytes_per_second: algorithm,
            bus_bytes_per_second: bus_bandwidth(algorithm, ranks),
            sum_exact: wrong_elements == 0,
            wrong_elements,
        });
    }
    drop(comms);
    Ok(points)
}

/// Judges and lays out the sweep.
pub fn check(points: &[NcclPoint], nccl_version: Option<&str>) -> Check {
    let exact = points.iter().all(|p| p.sum_exact);
    let status = if exact { Status::Pass } else { Status::Fail };
    let ranks = points.first().map(|p| p.ranks).unwrap_or(0);
    let largest = points.iter().max_by_key(|p| p.size_bytes);
    let mut summary = match largest {
        Some(point) => format!(
            "{ranks} GPUs, bus bandwidth {:.0} GB/s at {}",
            point.bus_bytes_per_second / 1e9,
            size_label(point.size_bytes)
        ),
        None => format!("{ranks} GPUs, no sizes measured"),
    };
    summary.push_str(if exact {
        ", sums exact"
    } else {
        ", WRONG SUMS"
    });
    let mut result = Check::new("nccl", status, summary)
        .with_rule("all-reduce sum (float32, integer values 1..251 per rank) equal bit for bit to the exact sum on every rank and element")
        .figure("nccl_version", nccl_version)
        .figure("points", points);
    result.lines.push(format!(
        "{:>9} {:>9} {:>12} {:>12} {}",
        "size", "ms", "algbw GB/s", "busbw GB/s", "sum"
    ));
    for point in points {
        result.lines.push(format!(
            "{:>9} {:>9.3} {:>12.1} {:>12.1} {}",
            size_label(point.size_bytes),
            point.median_ms,
            point.algorithm_bytes_per_second / 1e9,
            point.bus_bytes_per_second / 1e9,
            if point.sum_exact {
                "exact".to_string()
            } else {
                format!("{} wrong elements", point.wrong_elements)
            }
        ));
        result.metrics.push(
            Metric::new(
                "nccl_allreduce_bus_bytes_per_second",
                "NCCL all-reduce bus bandwidth across all GPUs, median.",
                point.bus_bytes_per_second,
            )
            .label("size_bytes", point.size_bytes)
            .label("ranks", point.ranks),
        );
    }
    result
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

    #[test]
    fn a_wrong_sum_fails_the_check() {
        let point = |wrong: u64| NcclPoint {
            size_bytes: 512 << 20,
            ranks: 2,
            median_ms: 1.7,
            algorithm_bytes_per_second: 315e9,
            bus_bytes_per_second: 315e9,
            sum_exact: wrong == 0,
            wrong_elements: wrong,
        };
        let good = check(&[point(0)], Some("2.28.3"));
        assert_eq!(good.status, Status::Pass);
        assert_eq!(
            good.summary,
            "2 GPUs, bus bandwidth 315 GB/s at 512 MiB, sums exact"
        );
        assert_eq!(good.figures["nccl_version"], "2.28.3");
        let bad = check(&[point(7)], None);
        assert_eq!(bad.status, Status::Fail);
        assert!(bad.lines[1].ends_with("7 wrong elements"));
    }
}
