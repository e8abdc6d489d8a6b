//! Summary statistics over repeated timings: median, minimum, maximum and spread; and the
//! host-side helpers that fill and scan the large buffers of the checks on every core.
//!
//! Every figure the self-test reports is the median of several timed repetitions after a
//! warm-up, so one slow repetition (a page fault, a clock ramp) cannot move it. Pure functions.

/// Median of `values`: the middle value, or the mean of the two middle values for an even count.
/// Returns `None` for an empty series or one holding a NaN (a broken timer must not pass).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|value| value.is_nan()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(|left, right| left.total_cmp(right));
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    })
}

/// Relative error ‖measured − reference‖₂ / ‖reference‖₂; infinite when any value is not finite
/// or the reference is all zeros, so that such a result can never pass a tolerance.
pub fn relative_l2_error(measured: &[f64], reference: &[f64]) -> f64 {
    if measured.len() != reference.len() || measured.is_empty() {
        return f64::INFINITY;
    }
    let mut difference_squared = 0.0;
    let mut reference_squared = 0.0;
    for (value, expected) in measured.iter().zip(reference) {
        if !value.is_finite() || !expected.is_finite() {
            return f64::INFINITY;
        }
        difference_squared += (value - expected) * (value - expected);
        reference_squared += expected * expected;
    }
    if reference_squared == 0.0 {
        return f64::INFINITY;
    }
    (difference_squared / reference_squared).sqrt()
}

/// Bytes per second for `bytes` moved in `milliseconds`.
pub fn bytes_per_second(bytes: u64, milliseconds: f64) -> f64 {
    if milliseconds <= 0.0 {
        return 0.0;
    }
    bytes as f64 / (milliseconds / 1000.0)
}

/// A small deterministic pseudo-random generator (SplitMix64), enough for test inputs.
/// The self-test seeds it from the clock so that every run draws fresh inputs.
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }

    /// A value in ±[0.125, 1.0): never zero, so unwritten or zeroed outputs cannot pass.
    pub fn nonzero_unit(&mut self) -> f32 {
        let bits = self.next_u64();
        let magnitude = 0.125 + 0.875 * ((bits >> 40) as f32 / (1u64 << 24) as f32);
        if bits & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    }
}

/// A seed that differs between runs (clock nanoseconds mixed with the process id).
pub fn fresh_seed() -> u64 {
    let nanoseconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as u64)
        .unwrap_or(0);
    nanoseconds ^ ((std::process::id() as u64) << 32)
}

/// Threads for host-side work on large buffers: every core, at most 16.
fn host_threads() -> usize {
    std::thread::available_parallelism()
        .map(|count| count.get())
        .unwrap_or(1)
        .min(16)
}

/// `values[i] = value_at(i)` for every index, split over the cores: filling hundreds of
/// megabytes on one core takes a noticeable part of a second.
pub fn parallel_fill<T: Send>(values: &mut [T], value_at: impl Fn(usize) -> T + Sync) {
    let chunk = values.len().div_ceil(host_threads()).max(1);
    std::thread::scope(|scope| {
        for (part_index, part) in values.chunks_mut(chunk).enumerate() {
            let value_at = &value_at;
            scope.spawn(move || {
                for (offset, value) in part.iter_mut().enumerate() {
                    *value = value_at(part_index * chunk + offset);
                }
            });
        }
    });
}

/// Whether `holds` is true of every value, checked over the cores.
pub fn parallel_all<T: Sync>(values: &[T], holds: impl Fn(&T) -> bool + Sync) -> bool {
    let chunk = values.len().div_ceil(host_threads()).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = values
            .chunks(chunk)
            .map(|part| {
                let holds = &holds;
                scope.spawn(move || part.iter().all(holds))
            })
            .collect();
        workers
            .into_iter()
            .all(|worker| worker.join().unwrap_or(false))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_series() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn median_rejects_empty_and_nan() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), None);
    }

    #[test]
    fn relative_error_detects_differences_and_non_finite_values() {
        assert_eq!(relative_l2_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        let error = relative_l2_error(&[1.0, 2.1], &[1.0, 2.0]);
        assert!((error - 0.1 / 5f64.sqrt()).abs() < 1e-12);
        assert!(relative_l2_error(&[f64::NAN], &[1.0]).is_infinite());
        assert!(relative_l2_error(&[0.0], &[0.0]).is_infinite());
        assert!(relative_l2_error(&[1.0], &[1.0, 2.0]).is_infinite());
    }

    #[test]
    fn bandwidth_from_bytes_and_milliseconds() {
        assert_eq!(bytes_per_second(1_000_000, 1.0), 1e9);
        assert_eq!(bytes_per_second(1, 0.0), 0.0);
    }

    #[test]
    fn parallel_helpers_match_their_serial_meaning() {
        let mut values = vec![0u64; 100_003];
        parallel_fill(&mut values, |index| index as u64 * 3);
        assert!(values.iter().enumerate().all(|(i, v)| *v == i as u64 * 3));
        assert!(parallel_all(&values, |value| value % 3 == 0));
        values[99_999] = 1;
        assert!(!parallel_all(&values, |value| value % 3 == 0));
        assert!(parallel_all(&Vec::<u8>::new(), |_| false));
        let mut empty: Vec<u8> = Vec::new();
        parallel_fill(&mut empty, |_| 1);
    }

    #[test]
    fn random_inputs_are_never_zero_and_differ_by_seed() {
        let mut generator = SplitMix64::new(42);
        let values: Vec<f32> = (0..10_000).map(|_| generator.nonzero_unit()).collect();
        assert!(values
            .iter()
            .all(|value| value.abs() >= 0.125 && value.abs() < 1.0));
        assert!(values.iter().any(|value| *value < 0.0));
        let mut other = SplitMix64::new(43);
        assert_ne!(values[0], other.nonzero_unit());
    }
}
