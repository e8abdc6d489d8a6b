//! Everything that runs on the GPUs, through cudarc's driver, cuBLAS and NCCL bindings.
//!
//! Each submodule is one check; this file holds what they share: opening a context per GPU
//! (with cudarc's automatic event tracking off, since every check orders its own streams),
//! event timing, and filling device memory with a poison pattern. Host-side logic that does not
//! need a GPU (rules, statistics, formats) lives outside `gpu/` so it is unit-tested on CI.

pub mod bandwidth;
pub mod inventory;
pub mod matmul;
pub mod nccl;
pub mod overlap;

use anyhow::{Context as _, Result};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use std::sync::Arc;

/// One visible GPU with its primary context.
pub struct Gpu {
    pub ordinal: usize,
    pub context: Arc<CudaContext>,
}

/// Opens every visible GPU. The driver must already be known to load. Creating a primary
/// context takes a good part of a second on a large GPU and the GPUs are independent, so they
/// are opened side by side, one thread each.
pub fn open_all() -> Result<Vec<Gpu>> {
    let count = CudaContext::device_count().context("cuInit / cuDeviceGetCount failed")?;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count as usize)
            .map(|ordinal| scope.spawn(move || open(ordinal)))
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

fn open(ordinal: usize) -> Result<Gpu> {
    let context = CudaContext::new(ordinal)
        .with_context(|| format!("cannot create a context on GPU {ordinal}"))?;
    // Every check synchronises its own streams; automatic event tracking would insert waits
    // between the copy stream and the compute stream of the overlap check.
    unsafe { context.disable_event_tracking() };
    Ok(Gpu { ordinal, context })
}

/// A start/end pair of timing events.
pub struct EventPair {
    pub start: CudaEvent,
    pub end: CudaEvent,
}

impl EventPair {
    pub fn new(context: &Arc<CudaContext>) -> Result<Self> {
        // `new_event(None)` would disable timing; the default flags keep it.
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(EventPair {
            start: context.new_event(flags)?,
            end: context.new_event(flags)?,
        })
    }

    /// Milliseconds between the two recorded events (waits for the end event).
    pub fn elapsed_ms(&self) -> Result<f64> {
        Ok(self.start.elapsed_ms(&self.end)? as f64)
    }
}

/// Times `repetitions` runs of `work` on `stream` after `warm_up` untimed runs, each run between
/// its own pair of events; returns the per-run milliseconds.
pub fn time_repeated(
    context: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    warm_up: usize,
    repetitions: usize,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    // `work` may call the raw driver API, which uses the thread's current context.
    context.bind_to_thread()?;
    for _ in 0..warm_up {
        work()?;
    }
    stream.synchronize()?;
    let events = EventPair::new(context)?;
    let mut times = Vec::with_capacity(repetitions);
    for _ in 0..repetitions {
        events.start.record(stream)?;
        work()?;
        events.end.record(stream)?;
        times.push(events.elapsed_ms()?);
    }
    Ok(times)
}

/// Times `repetitions` runs of `work` queued back to back on `stream` after `warm_up` untimed
/// runs, with an event before, between and after them; returns each run's milliseconds and the
/// whole span's. Nothing waits between the runs, so the GPU goes from one to the next as a
/// training loop's kernels do, and the span also holds whatever else the GPU did meanwhile
/// (another process's kernels on a shared GPU), which the median of single runs leaves out.
pub fn time_back_to_back(
    context: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    warm_up: usize,
    repetitions: usize,
    mut work: impl FnMut() -> Result<()>,
) -> Result<(Vec<f64>, f64)> {
    context.bind_to_thread()?;
    for _ in 0..warm_up {
        work()?;
    }
    stream.synchronize()?;
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let events = (0..=repetitions)
        .map(|_| context.new_event(flags))
        .collect::<std::result::Result<Vec<CudaEvent>, _>>()?;
    events[0].record(stream)?;
    for event in &events[1..] {
        work()?;
        event.record(stream)?;
    }
    let per_run = events
        .windows(2)
        .map(|pair| Ok(pair[0].elapsed_ms(&pair[1])? as f64))
        .collect::<Result<Vec<f64>>>()?;
    let span = events[0].elapsed_ms(&events[repetitions])? as f64;
    Ok((per_run, span))
}

/// Fills `bytes` bytes at `pointer` with 0xFF on `stream`: NaN in fp32, fp16 and bf16, so that
/// an element a kernel forgot to write cannot pass a check.
pub fn poison(pointer: sys::CUdeviceptr, bytes: usize, stream: &CudaStream) -> Result<()> {
    unsafe { sys::cuMemsetD8Async(pointer, 0xFF, bytes, stream.cu_stream()).result() }
        .context("cuMemsetD8Async failed")
}

/// The CUDA version the driver supports, as "major.minor" (cuDriverGetVersion 13000 → "13.0").
pub fn driver_cuda_version() -> Result<String> {
    let mut version = 0;
    unsafe { sys::cuDriverGetVersion(&mut version).result() }
        .context("cuDriverGetVersion failed")?;
    Ok(format!("{}.{}", version / 1000, (version % 1000) / 10))
}
