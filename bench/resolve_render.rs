//! Benchmark: resolve and render every valid cell of the whole torch history in the knowledge
//! (every release × each of its CUDA variants × three Ubuntu releases × runtime and devel).
//! Prints the time of each stage, images per second, and the ratio to the 1 s budget.
//!
//! Run: `cargo bench --bench resolve_render` (release profile).

use std::time::{Duration, Instant};

use imagegen::model::knowledge::Knowledge;
use imagegen::model::matrix::Matrix;
use imagegen::render::{render_all, Templates};
use imagegen::resolve::{resolve, ResolveOptions};

fn main() {
    let knowledge = Knowledge::embedded();
    let torch: Vec<String> = knowledge
        .torch
        .iter()
        .flat_map(|s| s.releases.iter().map(|r| format!("\"{}\"", r.torch)))
        .collect();
    let mut cuda: Vec<String> = knowledge
        .torch
        .iter()
        .flat_map(|s| s.cuda.iter().map(|c| format!("\"{}\"", c.cuda)))
        .collect();
    cuda.sort();
    cuda.dedup();
    let text = format!(
        "registry: registry.example.com\nrepository: bench/pytorch\ntorch: [{}]\ncuda: [{}]\nos: [ubuntu20.04, ubuntu22.04, ubuntu24.04]\nvariants: [runtime, devel]\nallow_unverified: true\n",
        torch.join(", "),
        cuda.join(", ")
    );
    let matrix = Matrix::parse(&text, "bench.yaml").expect("bench matrix");
    let templates = Templates::embedded();
    let options = ResolveOptions {
        template_digest: templates.digest(),
        ..Default::default()
    };

    let rounds = 20;
    let mut resolve_times = Vec::new();
    let mut render_times = Vec::new();
    let mut images = 0;
    let mut rejected = 0;
    let mut bytes = 0;
    for _ in 0..rounds {
        let start = Instant::now();
        let resolution = resolve(&matrix, &knowledge, &options);
        let resolved = start.elapsed();
        let rendered = render_all(&resolution.images, &matrix, &templates, None).expect("render");
        let total = start.elapsed();
        resolve_times.push(resolved);
        render_times.push(total - resolved);
        images = resolution.images.len();
        rejected = resolution.rejected.len();
        bytes = rendered
            .iter()
            .map(|r| r.files.values().map(String::len).sum::<usize>())
            .sum();
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let resolve_median = median(&mut resolve_times);
    let render_median = median(&mut render_times);
    let total = resolve_median + render_median;
    println!(
        "cells: {} torch releases x {} CUDA versions x 3 OS x 2 variants = {} requested",
        torch.len(),
        cuda.len(),
        torch.len() * cuda.len() * 6
    );
    println!("valid images: {images}, rejected cells: {rejected}, Dockerfile bytes: {bytes}");
    println!(
        "median of {rounds} rounds: resolve {:.2} ms, render {:.2} ms, total {:.2} ms",
        ms(resolve_median),
        ms(render_median),
        ms(total)
    );
    println!(
        "images per second: {:.0}",
        images as f64 / total.as_secs_f64()
    );
    println!(
        "ratio to the 1 s budget: {:.4} (below 1 is within budget)",
        total.as_secs_f64() / 1.0
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
