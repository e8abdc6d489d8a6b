//! The host↔device bandwidth check: H2D and D2H, pinned and pageable host memory, over a sweep
//! of transfer sizes, each the median of repeated copies between CUDA events after a warm-up
//! (the same method as `torch.Tensor.copy_(non_blocking=True)` timed with `torch.cuda.Event`).
//!
//! Rule: the best pinned median (either direction judged separately) reaches 80% of what the
//! GPU's PCIe link generation and width allow (read by the inventory, else the model's datasheet
//! interface); a link narrower than the model's interface warns. With a baseline, every pinned
//! median reaches its share of the baseline's at that size and direction. Pageable copies are
//! reported, not judged: they depend on the host's memory and CPU load more than on the GPU.

use super::{time_repeated, Gpu};
use crate::baseline::BaselineFigure;
use crate::gpu::inventory::GpuFacts;
use crate::plot::{size_label, Series};
use crate::report::{Check, Metric, Status};
use crate::rules::{self, References, Verdict};
use crate::stats;
use anyhow::{Context as _, Result};
use cudarc::driver::{result, sys, CudaSlice, DevicePtr, DevicePtrMut, PinnedHostSlice};
use serde::Serialize;

/// How the sweep runs.
#[derive(Clone, Debug)]
pub struct BandwidthSettings {
    pub sizes: Vec<u64>,
    pub warm_up: usize,
    pub repetitions: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct BandwidthPoint {
    pub gpu: usize,
    pub direction: &'static str,
    pub memory: &'static str,
    pub size_bytes: u64,
    pub median_ms: f64,
    pub bytes_per_second: f64,
}

/// Host buffers shared by every GPU's sweep: page-locked memory registered as portable (pinned
/// for every context) and ordinary pageable memory, each as large as the largest transfer.
pub struct HostBuffers {
    pinned: PinnedHostSlice<u8>,
    pageable: AlignedBuffer,
}

/// Pageable host memory aligned like a framework's allocator would align it (2 MiB, a huge-page
/// boundary): malloc hands large blocks out 16 bytes past a page start, and the driver's staged
/// copies of a misaligned buffer can be slower than those of the tensors they are compared with.
pub struct AlignedBuffer {
    pointer: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedBuffer {
    /// Allocates `length` bytes (at least one) aligned to 2 MiB, every byte written with `fill`
    /// so that no page is mapped lazily during a timed copy.
    pub fn new(length: usize, fill: u8) -> Result<Self> {
        let layout = std::alloc::Layout::from_size_align(length.max(1), 2 << 20)
            .context("bad host buffer size")?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let pointer = std::ptr::NonNull::new(raw).with_context(|| {
            format!(
                "cannot allocate {} of host memory",
                size_label(length as u64)
            )
        })?;
        // SAFETY: the block is `layout.size()` bytes long and exclusively ours.
        unsafe { std::ptr::write_bytes(pointer.as_ptr(), fill, layout.size()) };
        Ok(AlignedBuffer { pointer, layout })
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: allocated and initialised in `new` with this size; borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout.
        unsafe { std::alloc::dealloc(self.pointer.as_ptr(), self.layout) }
    }
}

impl HostBuffers {
    pub fn new(first_gpu: &Gpu, settings: &BandwidthSettings) -> Result<Self> {
        let largest = settings.sizes.iter().copied().max().unwrap_or(0) as usize;
        // Plain page-locked memory (cudarc's default is write-combined, slow to read back),
        // portable so that every GPU's context sees it as pinned.
        let mut pinned = unsafe {
            first_gpu
                .context
                .alloc_pinned_with_flags::<u8>(largest, sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .with_context(|| format!("cannot pin {} of host memory", size_label(largest as u64)))?;
        pinned.as_mut_slice()?.fill(0x5A);
        let pageable = AlignedBuffer::new(largest, 0x5A)?;
        Ok(HostBuffers { pinned, pageable })
    }
}

/// Measures one GPU over the whole sweep.
pub fn measure(
    gpu: &Gpu,
    settings: &BandwidthSettings,
    buffers: &mut HostBuffers,
) -> Result<Vec<BandwidthPoint>> {
    let context = &gpu.context;
    let stream = context.new_stream()?;
    let largest = settings.sizes.iter().copied().max().unwrap_or(0) as usize;
    let mut device: CudaSlice<u8> = unsafe { stream.alloc::<u8>(largest) }.with_context(|| {
        format!(
            "cannot allocate {} on GPU {}",
            size_label(largest as u64),
            gpu.ordinal
        )
    })?;
    let pinned_slice: &mut [u8] = buffers.pinned.as_mut_slice()?;
    let pageable = buffers.pageable.as_mut_slice();
    let mut points = Vec::new();
    // Every size, then pinned before pageable, H2D before D2H: the order PyTorch's reference in
    // bench/gpu/compare.py follows too.
    for &size in &settings.sizes {
        let bytes = size as usize;
        for memory in ["pinned", "pageable"] {
            for direction in ["h2d", "d2h"] {
                let times = {
                    let host: &mut [u8] = if memory == "pinned" {
                        &mut pinned_slice[..bytes]
                    } else {
                        &mut pageable[..bytes]
                    };
                    let cu_stream = stream.cu_stream();
                    if direction == "h2d" {
                        let (pointer, _guard) = device.device_ptr_mut(&stream);
                        time_repeated(
                            context,
                            &stream,
                            settings.warm_up,
                            settings.repetitions,
                            || {
                                unsafe {
                                    result::memcpy_htod_async(pointer, &host[..], cu_stream)
                                }?;
                                Ok(())
                            },
                        )?
                    } else {
                        let (pointer, _guard) = device.device_ptr(&stream);
                        time_repeated(
                            context,
                            &stream,
                            settings.warm_up,
                            settings.repetitions,
                            || {
                                unsafe {
                                    result::memcpy_dtoh_async(&mut host[..], pointer, cu_stream)
                                }?;
                                Ok(())
                            },
                        )?
                    }
                };
                stream.synchronize()?;
                let median_ms = stats::median(&times).unwrap_or(f64::NAN);
                points.push(BandwidthPoint {
                    gpu: gpu.ordinal,
                    direction,
                    memory,
                    size_bytes: size,
                    median_ms,
                    bytes_per_second: stats::bytes_per_second(size, median_ms),
                });
            }
        }
    }
    Ok(points)
}

fn find(
    points: &[BandwidthPoint],
    gpu: usize,
    direction: &str,
    memory: &str,
    size: u64,
) -> Option<f64> {
    points
        .iter()
        .find(|p| {
            p.gpu == gpu && p.direction == direction && p.memory == memory && p.size_bytes == size
        })
        .map(|p| p.bytes_per_second)
}

fn best(points: &[BandwidthPoint], gpu: usize, direction: &str, memory: &str) -> f64 {
    points
        .iter()
        .filter(|p| p.gpu == gpu && p.direction == direction && p.memory == memory)
        .map(|p| p.bytes_per_second)
        .fold(0.0, f64::max)
}

fn gigabytes(rate: f64) -> String {
    format!("{:.1}", rate / 1e9)
}

fn show_rate(value: f64) -> String {
    format!("{:.1} GB/s", value / 1e9)
}

/// The baseline figure name of a pinned direction ("pinned h2d").
fn baseline_figure_name(direction: &str) -> String {
    format!("pinned {direction}")
}

/// Judges the measured points of every GPU and lays them out.
pub fn check(
    points: &[BandwidthPoint],
    facts: &[GpuFacts],
    sizes: &[u64],
    references: &References,
) -> Check {
    let mut status = Status::Pass;
    let mut summaries = Vec::new();
    let mut judgements = Vec::new();
    let mut baseline_judgements = Vec::new();
    let mut lines = Vec::new();
    let mut metrics = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    for gpu in facts {
        let inventory_link = gpu.pcie_max_generation.zip(gpu.pcie_max_width);
        let host_link = rules::host_link(inventory_link, references.model(gpu.index));
        let link = host_link
            .link
            .and_then(|(generation, width)| rules::pcie_link_bytes_per_second(generation, width));
        let link_label = match host_link.link {
            Some((generation, width)) => format!("PCIe Gen{generation} x{width}"),
            None => "PCIe link unknown".to_string(),
        };
        let best_h2d = best(points, gpu.index, "h2d", "pinned");
        let best_d2h = best(points, gpu.index, "d2h", "pinned");
        let verdicts = [
            rules::judge_pinned_bandwidth(best_h2d, link),
            rules::judge_pinned_bandwidth(best_d2h, link),
        ];
        if verdicts.contains(&Verdict::Fail) {
            problems.push(format!(
                "GPU {} pinned below {} ({:.0}% of {link_label})",
                gpu.index,
                show_rate(link.unwrap_or(0.0) * rules::PINNED_SHARE_OF_LINK),
                rules::PINNED_SHARE_OF_LINK * 100.0
            ));
        } else if verdicts.contains(&Verdict::NotApplied) {
            warnings.push(format!("GPU {}: PCIe link unknown, not judged", gpu.index));
        }
        if host_link.narrower_than_model {
            warnings.push(format!(
                "GPU {}: {}",
                gpu.index,
                host_link.note.clone().unwrap_or_default()
            ));
        }
        let share = |rate: f64| {
            link.map(|l| format!(" ({:.0}% of link)", 100.0 * rate / l))
                .unwrap_or_default()
        };
        summaries.push(format!(
            "GPU {} pinned H2D {}{} / D2H {}{} GB/s",
            gpu.index,
            gigabytes(best_h2d),
            share(best_h2d),
            gigabytes(best_d2h),
            share(best_d2h)
        ));
        judgements.push(serde_json::json!({
            "gpu": gpu.index,
            "link": link_label,
            "link_note": host_link.note,
            "link_bytes_per_second": link,
            "required_bytes_per_second": link.map(|l| l * rules::PINNED_SHARE_OF_LINK),
            "best_pinned_h2d_bytes_per_second": best_h2d,
            "best_pinned_d2h_bytes_per_second": best_d2h,
            "h2d": verdicts[0],
            "d2h": verdicts[1],
        }));
        lines.push(format!(
            "GPU {} ({link_label}{}{}) GB/s, median per size:",
            gpu.index,
            link.map(|l| format!(
                ", {:.1} GB/s, best pinned needs {:.1}",
                l / 1e9,
                l * rules::PINNED_SHARE_OF_LINK / 1e9
            ))
            .unwrap_or_default(),
            host_link
                .note
                .as_ref()
                .map(|note| format!("; {note}"))
                .unwrap_or_default()
        ));
        lines.push(format!(
            "  {:>9} {:>10} {:>12} {:>10} {:>12} {:>9} {:>9}",
            "size",
            "H2D pinned",
            "H2D pageable",
            "D2H pinned",
            "D2H pageable",
            "H2D ratio",
            "D2H ratio"
        ));
        for &size in sizes {
            let value =
                |direction: &str, memory: &str| find(points, gpu.index, direction, memory, size);
            let (h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable) = (
                value("h2d", "pinned"),
                value("h2d", "pageable"),
                value("d2h", "pinned"),
                value("d2h", "pageable"),
            );
            let show = |rate: Option<f64>| rate.map(gigabytes).unwrap_or_else(|| "-".to_string());
            let ratio = |pinned: Option<f64>, pageable: Option<f64>| match (pinned, pageable) {
                (Some(p), Some(q)) if q > 0.0 => format!("{:.1}x", p / q),
                _ => "-".to_string(),
            };
            let mut baseline_text = String::new();
            for (direction, measured) in [("h2d", h2d_pinned), ("d2h", d2h_pinned)] {
                let Some(measured) = measured else { continue };
                match references.baseline(
                    "bandwidth",
                    &baseline_figure_name(direction),
                    size,
                    show_rate,
                ) {
                    Some(Ok(expectation)) => {
                        let verdict = expectation.judge(measured);
                        if verdict == Verdict::Fail {
                            problems.push(format!(
                                "GPU {} pinned {} {} at {} < {} ({:.0}% of {})",
                                gpu.index,
                                direction.to_uppercase(),
                                show_rate(measured),
                                size_label(size),
                                show_rate(expectation.required()),
                                expectation.share * 100.0,
                                expectation.basis
                            ));
                        }
                        baseline_text.push_str(&format!(
                            " {} {}",
                            direction.to_uppercase(),
                            rules::expectation_text(&expectation, measured, show_rate)
                        ));
                        baseline_judgements.push(serde_json::json!({
                            "gpu": gpu.index, "direction": direction, "size_bytes": size,
                            "bytes_per_second": measured, "baseline": expectation, "verdict": verdict,
                        }));
                    }
                    Some(Err(reason)) => {
                        warnings.push(format!(
                            "GPU {} {direction} {}: {reason}",
                            gpu.index,
                            size_label(size)
                        ));
                        baseline_text.push_str(&format!(" {}: {reason}", direction.to_uppercase()));
                    }
                    None => {}
                }
            }
            lines.push(format!(
                "  {:>9} {:>10} {:>12} {:>10} {:>12} {:>9} {:>9}{}",
                size_label(size),
                show(h2d_pinned),
                show(h2d_pageable),
                show(d2h_pinned),
                show(d2h_pageable),
                ratio(h2d_pinned, h2d_pageable),
                ratio(d2h_pinned, d2h_pageable),
                if baseline_text.is_empty() {
                    String::new()
                } else {
                    format!("  baseline:{baseline_text}")
                }
            ));
        }
    }
    if !problems.is_empty() {
        status = Status::Fail;
    } else if !warnings.is_empty() {
        status = Status::Warn;
    }
    for point in points {
        metrics.push(
            Metric::new(
                "bandwidth_bytes_per_second",
                "Host-device copy bandwidth, median of repeated copies.",
                point.bytes_per_second,
            )
            .label("gpu", point.gpu)
            .label("direction", point.direction)
            .label("memory", point.memory)
            .label("size_bytes", point.size_bytes),
        );
    }
    let ratios: Vec<serde_json::Value> = facts
        .iter()
        .flat_map(|gpu| {
            sizes.iter().flat_map(move |&size| {
                ["h2d", "d2h"]
                    .into_iter()
                    .map(move |direction| (gpu.index, size, direction))
            })
        })
        .filter_map(|(gpu, size, direction)| {
            let pinned = find(points, gpu, direction, "pinned", size)?;
            let pageable = find(points, gpu, direction, "pageable", size)?;
            Some(serde_json::json!({
                "gpu": gpu, "direction": direction, "size_bytes": size,
                "pinned_over_pageable": if pageable > 0.0 { pinned / pageable } else { f64::NAN },
            }))
        })
        .collect();
    let mut summary = summaries.join("; ");
    if !warnings.is_empty() {
        summary = format!("{summary}; {}", warnings.join("; "));
    }
    if !problems.is_empty() {
        summary = format!("SLOW: {}; {summary}", problems.join("; "));
    }
    let mut result = Check::new("bandwidth", status, summary)
        .with_rule(format!(
            "best pinned median, H2D and D2H each, >= {:.0}% of what the PCIe link generation x width allows (the inventory's link, else the model's datasheet interface; warn when unknown or narrower than the model's){}",
            rules::PINNED_SHARE_OF_LINK * 100.0,
            references.baseline_rule().replace("each figure", "each pinned median")
        ))
        .figure("points", points)
        .figure("pinned_over_pageable", ratios)
        .figure("judgements", judgements);
    if references.baseline.is_some() {
        result = result.figure("baseline_judgements", baseline_judgements);
    }
    result.lines = lines;
    result.metrics = metrics;
    result
}

/// The baseline figures of the sweep: per direction and size, each GPU's pinned median.
pub fn baseline_figures(points: &[BandwidthPoint]) -> Vec<BaselineFigure> {
    let mut keys: Vec<(&'static str, u64)> = points
        .iter()
        .filter(|p| p.memory == "pinned")
        .map(|p| (p.direction, p.size_bytes))
        .collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|(direction, size)| {
            let per_gpu: Vec<f64> = points
                .iter()
                .filter(|p| {
                    p.memory == "pinned" && p.direction == direction && p.size_bytes == size
                })
                .map(|p| p.bytes_per_second)
                .collect();
            BaselineFigure::from_gpus(
                "bandwidth",
                &baseline_figure_name(direction),
                size,
                "bytes_per_second",
                per_gpu,
            )
        })
        .collect()
}

/// The plot's series: per GPU and direction, pinned and pageable.
pub fn plot_series(points: &[BandwidthPoint]) -> Vec<Series> {
    let mut gpus: Vec<usize> = points.iter().map(|p| p.gpu).collect();
    gpus.sort_unstable();
    gpus.dedup();
    let mut series = Vec::new();
    for gpu in gpus {
        for direction in ["h2d", "d2h"] {
            for memory in ["pinned", "pageable"] {
                series.push(Series {
                    label: format!("GPU {gpu} {} {memory}", direction.to_uppercase()),
                    points: points
                        .iter()
                        .filter(|p| p.gpu == gpu && p.direction == direction && p.memory == memory)
                        .map(|p| (p.size_bytes, p.bytes_per_second))
                        .collect(),
                });
            }
        }
    }
    series
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(generation: Option<u32>) -> GpuFacts {
        GpuFacts {
            index: 0,
            name: "NVIDIA H200".to_string(),
            compute_capability: "9.0".to_string(),
            memory_bytes: 1,
            pci_bus_id: "0000:18:00.0".to_string(),
            pcie_max_generation: generation,
            pcie_max_width: Some(16),
            pcie_current_generation: None,
            pcie_current_width: None,
            pcie_source: "nvml".to_string(),
            nvlink_active_links: None,
            nvlink_peers: None,
        }
    }

    fn points(pinned: f64) -> Vec<BandwidthPoint> {
        let mut list = Vec::new();
        for (memory, rate) in [("pinned", pinned), ("pageable", 7.6e9)] {
            for direction in ["h2d", "d2h"] {
                list.push(BandwidthPoint {
                    gpu: 0,
                    direction,
                    memory,
                    size_bytes: 1 << 30,
                    median_ms: (1u64 << 30) as f64 / rate * 1000.0,
                    bytes_per_second: rate,
                });
            }
        }
        list
    }

    fn references(name: &str) -> References<'static> {
        References {
            gpus: vec![(name.to_string(), crate::expected::find(name))],
            baseline: None,
        }
    }

    #[test]
    fn healthy_gen5_link_passes_and_prints_ratios() {
        let check = check(
            &points(55.0e9),
            &[facts(Some(5))],
            &[1 << 30],
            &references("NVIDIA H200"),
        );
        assert_eq!(check.status, Status::Pass, "{}", check.summary);
        assert_eq!(
            check.summary,
            "GPU 0 pinned H2D 55.0 (87% of link) / D2H 55.0 (87% of link) GB/s"
        );
        assert!(check
            .lines
            .iter()
            .any(|l| l.contains("1 GiB") && l.contains("7.2x")));
        assert!(check.lines[0].contains("PCIe Gen5 x16, 63.0 GB/s, best pinned needs 50.4"));
        assert_eq!(check.figures["pinned_over_pageable"][0]["direction"], "h2d");
        assert_eq!(check.figures["judgements"][0]["h2d"], "pass");
    }

    #[test]
    fn slow_pinned_copies_fail_and_unknown_links_warn() {
        let h200 = references("NVIDIA H200");
        let slow = check(&points(30.0e9), &[facts(Some(5))], &[1 << 30], &h200);
        assert_eq!(slow.status, Status::Fail);
        assert!(slow
            .summary
            .starts_with("SLOW: GPU 0 pinned below 50.4 GB/s (80% of PCIe Gen5 x16)"));
        assert_eq!(slow.figures["judgements"][0]["d2h"], "fail");
        // No link read and a model the table does not know: nothing to judge against.
        let unknown = check(
            &points(55.0e9),
            &[facts(None)],
            &[1 << 30],
            &references("NVIDIA GeForce RTX 4090"),
        );
        assert_eq!(unknown.status, Status::Warn);
        assert!(unknown.summary.contains("PCIe link unknown, not judged"));
        assert_eq!(unknown.figures["judgements"][0]["h2d"], "notapplied");
    }

    #[test]
    fn the_models_interface_stands_in_for_an_unread_link_and_a_narrower_slot_warns() {
        let h200 = references("NVIDIA H200");
        let assumed = check(&points(55.0e9), &[facts(None)], &[1 << 30], &h200);
        assert_eq!(assumed.status, Status::Pass, "{}", assumed.summary);
        assert!(assumed.lines[0]
            .contains("link not readable here: the H200 SXM datasheet's PCIe Gen5 x16 assumed"));
        // A Gen4 slot passes by its own rate but warns: the H200 is built for Gen5.
        let narrower = check(&points(25.5e9), &[facts(Some(4))], &[1 << 30], &h200);
        assert_eq!(narrower.status, Status::Warn);
        assert!(narrower
            .summary
            .contains("GPU 0: link at most PCIe Gen4 x16, narrower than the H200 SXM's Gen5 x16"));
    }

    #[test]
    fn a_baseline_judges_every_pinned_size_and_direction() {
        let good_node = crate::baseline::Baseline::new(
            0,
            vec!["NVIDIA H200".to_string()],
            baseline_figures(&points(55.0e9)),
        );
        assert_eq!(
            good_node.reference("bandwidth", "pinned h2d", 1 << 30),
            Some(55.0e9)
        );
        // Pageable copies are not part of a baseline.
        assert_eq!(good_node.figures.len(), 2);
        let mut judged = references("NVIDIA H200");
        judged.baseline = Some((&good_node, "good.json".to_string()));
        let healthy = check(&points(52.0e9), &[facts(Some(5))], &[1 << 30], &judged);
        assert_eq!(healthy.status, Status::Pass, "{}", healthy.summary);
        assert!(healthy
            .rule
            .contains("baseline (good.json): each pinned median >= 80%"));
        assert!(healthy.lines[2]
            .contains("baseline: H2D needs >= 44.0 GB/s (80% of baseline 55.0 GB/s): ok"));
        // A node that clears the link rule (51.0 >= 50.4) but falls 23% below a faster
        // good node's baseline fails by the baseline.
        let fast_node = crate::baseline::Baseline::new(
            0,
            vec!["NVIDIA H200".to_string()],
            baseline_figures(&points(66.0e9)),
        );
        judged.baseline = Some((&fast_node, "fast.json".to_string()));
        let below = check(&points(51.0e9), &[facts(Some(5))], &[1 << 30], &judged);
        assert_eq!(below.status, Status::Fail);
        assert!(below.summary.starts_with(
            "SLOW: GPU 0 pinned H2D 51.0 GB/s at 1 GiB < 52.8 GB/s (80% of baseline 66.0 GB/s)"
        ));
        // A size the baseline lacks warns.
        let mut other_size = points(55.0e9);
        for point in &mut other_size {
            point.size_bytes = 256 << 20;
        }
        let missing = check(&other_size, &[facts(Some(5))], &[256 << 20], &judged);
        assert_eq!(missing.status, Status::Warn);
        assert!(missing
            .summary
            .contains("the baseline has no bandwidth pinned h2d figure at this size"));
    }

    #[test]
    fn pageable_buffer_is_aligned_and_written() {
        let mut buffer = AlignedBuffer::new(3 << 20, 0x5A).unwrap();
        let slice = buffer.as_mut_slice();
        assert_eq!(slice.len(), 3 << 20);
        assert_eq!(slice.as_ptr() as usize % (2 << 20), 0);
        assert!(slice.iter().all(|byte| *byte == 0x5A));
    }

    #[test]
    fn plot_series_split_by_direction_and_memory() {
        let series = plot_series(&points(55.0e9));
        assert_eq!(series.len(), 4);
        assert_eq!(series[0].label, "GPU 0 H2D pinned");
        assert_eq!(series[0].points, vec![(1 << 30, 55.0e9)]);
    }
}
