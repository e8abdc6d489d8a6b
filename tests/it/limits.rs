//! Hostile inputs: small files that once took gigabytes or minutes (a 1 MB label referenced
//! through 1000 aliases, 400 000 copies of a version, 100 000 levels of nesting). The real binary
//! runs on each with its address space capped at 1 GiB; each must end in one located error with
//! exit 2, fast, with a small peak RSS, and write nothing. Without the bounds these inputs need
//! far more memory than the cap (1.8 GB, 3.2 GB), so the tests fail.
//!
//! The peak RSS is the kernel's (`wait4`'s `ru_maxrss`, KiB), as GNU time's `%M` reports it for
//! the one child it starts. A process started straight from this big, multi-threaded test process
//! would inherit this process's high-water mark (a forked copy maps all of it, and `exec` keeps
//! the mark), so the measure is taken one process further: this process starts `time` (a small
//! binary), which forks a copy of itself that runs `sh`, which sets the cap and execs imagegen in
//! that same process (no background job, so no reaping race). `time` writes that process's peak
//! to a file and exits with its status. (busybox 1.35's `time -v`, used before, reports
//! `ru_maxrss` as pages, four times the real figure: checked against `/proc/self/status`'s
//! `VmHWM` of a process holding 1 GiB, 4,247,680 against 1,062,076 KiB; GNU time gives 1,061,972.)

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The address-space cap of imagegen (KiB, for `ulimit -v`): far above what a bounded run needs,
/// far below what the unbounded runs took.
const ADDRESS_SPACE_CAP_KIB: u64 = 1 << 20;
/// What a bounded run may use beyond imagegen's own start ([`baseline_rss_kib`]: the binary's
/// pages, the knowledge and the templates; 8 to 21 MiB for the debug build, with the page cache's
/// state). The unbounded runs took 1.8 and 3.2 GB.
const MAX_EXTRA_RSS_KIB: i64 = 32 * 1024;
/// GNU time (Debian's `time`, which `.ci/install-deps.sh` installs).
const GNU_TIME: &str = "/usr/bin/time";
/// What the report's peak line starts with (GNU time's `-f`).
const PEAK: &str = "imagegen peak KiB ";
/// What a bounded run may take on a loaded 2-core machine (it takes well under 0.2 s alone).
const MAX_SECONDS: f64 = 5.0;

const HEAD: &str =
    "registry: ghcr.io\nrepository: acme/pytorch\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\n";

struct Run {
    code: Option<i32>,
    stderr: String,
    seconds: f64,
    max_rss_kib: i64,
}

/// Runs `imagegen args...` in `dir` under the address-space cap, measuring its time and peak RSS
/// (GNU time).
fn run_measured(dir: &Path, args: &[&str]) -> Run {
    let script = format!(
        "ulimit -v {ADDRESS_SPACE_CAP_KIB} && exec \"$0\" \"$@\" </dev/null >/dev/null 2>stderr.txt"
    );
    let imagegen = assert_cmd::cargo::cargo_bin("imagegen");
    let report_path = dir.join("time-report.txt");
    let started = Instant::now();
    let output = Command::new(GNU_TIME)
        .args(["-f", &format!("{PEAK}%M"), "-o"])
        .arg(&report_path)
        .args(["sh", "-c", &script])
        .arg(&imagegen)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("GNU time runs (Debian's time: bash .ci/install-deps.sh)");
    let seconds = started.elapsed().as_secs_f64();
    let report = std::fs::read_to_string(&report_path).unwrap_or_else(|error| {
        panic!(
            "no report from GNU time ({error}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let max_rss_kib = report
        .lines()
        .find_map(|line| line.strip_prefix(PEAK))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in GNU time's report:\n{report}"));
    Run {
        // GNU time exits with 128 + the signal's number when the command was killed.
        code: if report.contains("Command terminated by signal") {
            None
        } else {
            output.status.code()
        },
        stderr: std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default(),
        seconds,
        max_rss_kib,
    }
}

/// The peak of the cheapest refusal (`render` of a one-line malformed matrix): imagegen's start
/// and nothing of the input, measured once per test process.
fn baseline_rss_kib() -> i64 {
    static BASELINE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASELINE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("matrix.yaml"), "registry: [\n").unwrap();
        let run = run_measured(dir.path(), &["render"]);
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        assert!(run.max_rss_kib > 0, "GNU time reported a peak");
        run.max_rss_kib
    })
}

/// Whether `run` stayed within [`MAX_EXTRA_RSS_KIB`] of imagegen's start.
fn small_peak(run: &Run) -> bool {
    run.max_rss_kib < baseline_rss_kib() + MAX_EXTRA_RSS_KIB
}

/// The start of a long message (an echoed 1 MB value must not flood the test output).
fn head(text: &str) -> String {
    text.chars().take(2000).collect()
}

/// Writes `text` as the matrix and runs `render` on it: one located error, fast and small.
fn assert_refused(name: &str, text: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("matrix.yaml"), text).unwrap();
    let run = run_measured(dir.path(), &["render"]);
    eprintln!(
        "{name}: {} bytes, exit {:?}, {:.3} s, peak RSS {} KiB",
        text.len(),
        run.code,
        run.seconds,
        run.max_rss_kib
    );
    assert_eq!(run.code, Some(2), "{name}: {}", head(&run.stderr));
    for needle in expected {
        assert!(
            run.stderr.contains(needle),
            "{name}: expected {needle:?} in:\n{}",
            head(&run.stderr)
        );
    }
    assert_eq!(
        run.stderr.matches("error:").count(),
        1,
        "{}",
        head(&run.stderr)
    );
    assert!(run.stderr.contains("\nhint: "), "{}", head(&run.stderr));
    assert!(
        run.seconds < MAX_SECONDS,
        "{name}: took {:.1} s",
        run.seconds
    );
    assert!(
        small_peak(&run),
        "{name}: peak RSS {} KiB, imagegen's start {} KiB",
        run.max_rss_kib,
        baseline_rss_kib()
    );
    assert!(
        !dir.path().join("images").exists(),
        "{name}: nothing may be written"
    );
}

#[test]
fn a_large_label_repeated_through_aliases_is_refused_at_its_first_alias() {
    let mut text = format!(
        "{HEAD}torch: [\"2.13\"]\nlabels:\n  org.example.big: &label \"{}\"\n",
        "x".repeat(1_000_000)
    );
    for index in 0..1000 {
        text.push_str(&format!("  org.example.l{index}: *label\n"));
    }
    assert!(
        text.len() < 1 << 20,
        "under the size limit: the alias bound must catch it"
    );
    assert_refused(
        "1 MB label through 1000 aliases",
        &text,
        &["matrix.yaml:8:19: aliases expand the document to more than 1048576 characters"],
    );
}

#[test]
fn a_file_larger_than_the_limit_is_not_read_whole() {
    let copies = vec!["\"2.13\""; 400_000].join(", ");
    assert_refused(
        "400 000 copies of 2.13",
        &format!("{HEAD}torch: [{copies}]\n"),
        &["matrix.yaml: the file is larger than 1048576 bytes"],
    );
}

#[test]
fn long_lists_and_many_cells_are_refused() {
    let copies = vec!["\"2.13\""; 20_000].join(", ");
    assert_refused(
        "20 000 copies of 2.13",
        &format!("{HEAD}torch: [{copies}]\n"),
        &["matrix.yaml:5:", "`torch` has more than 10000 entries"],
    );
    let torch: Vec<String> = (0..100).map(|minor| format!("\"2.{minor}.0\"")).collect();
    let cuda: Vec<String> = (0..120).map(|minor| format!("\"12.{minor}\"")).collect();
    assert_refused(
        "100 torch × 120 cuda",
        &format!(
            "registry: ghcr.io\nrepository: acme/pytorch\ntorch: [{}]\ncuda: [{}]\nos: [ubuntu24.04]\n",
            torch.join(", "),
            cuda.join(", ")
        ),
        &["matrix.yaml:4:1: the matrix asks for 24000 cells"],
    );
}

#[test]
fn deep_nesting_is_refused() {
    assert_refused(
        "100 000 levels of nesting",
        &format!(
            "{HEAD}torch: [\"2.13\"]\nlabels: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
        &["matrix.yaml:6:", "nested more than 32 deep"],
    );
}

#[test]
fn knowledge_files_have_the_same_limits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("matrix.yaml"),
        format!("{HEAD}torch: [\"2.13\"]\n"),
    )
    .unwrap();
    let mut knowledge = format!(
        "schema_version: 1\nsources:\n  X: &note \"{}\"\n",
        "x".repeat(1_000_000)
    );
    for index in 0..1000 {
        knowledge.push_str(&format!("  X{index}: *note\n"));
    }
    std::fs::write(dir.path().join("extra.yaml"), knowledge).unwrap();
    let run = run_measured(dir.path(), &["resolve", "--knowledge", "extra.yaml"]);
    eprintln!(
        "knowledge alias bomb: exit {:?}, {:.3} s, peak RSS {} KiB",
        run.code, run.seconds, run.max_rss_kib
    );
    assert_eq!(run.code, Some(2), "{}", head(&run.stderr));
    assert!(
        run.stderr
            .contains("extra.yaml:4:7: aliases expand the document to more than"),
        "{}",
        head(&run.stderr)
    );
    assert!(run.seconds < MAX_SECONDS && small_peak(&run));
    let nested = format!(
        "schema_version: 1\nos: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    std::fs::write(dir.path().join("extra.yaml"), nested).unwrap();
    let run = run_measured(dir.path(), &["resolve", "--knowledge", "extra.yaml"]);
    assert_eq!(run.code, Some(2), "{}", head(&run.stderr));
    assert!(
        run.stderr.contains("nested more than 32 deep"),
        "{}",
        head(&run.stderr)
    );
    assert!(run.seconds < MAX_SECONDS && small_peak(&run));
}

/// The peak is imagegen's, not this test process's: with 256 MiB more of this process resident
/// while it measures, the cheapest refusal reports what it reports without them (a process
/// forked straight from this one would report at least those 256 MiB).
#[test]
fn the_peak_is_imagegens_own_not_the_test_processs() {
    let baseline = baseline_rss_kib();
    let held = vec![1u8; 256 << 20];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("matrix.yaml"), "registry: [\n").unwrap();
    let run = run_measured(dir.path(), &["render"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let held_mib = held.iter().map(|&byte| usize::from(byte)).sum::<usize>() >> 20;
    assert!(
        run.max_rss_kib < baseline + 32 * 1024 && baseline < 256 * 1024,
        "peak RSS {} KiB with this process holding {held_mib} MiB more, {baseline} KiB before",
        run.max_rss_kib,
    );
}

/// The measure is in KiB, not pages: `dd` holding a 64 MiB block (read from /dev/zero, so every
/// page of it is touched) peaks between 64 and 80 MiB by GNU time's `%M`. (A tool that takes
/// `ru_maxrss` for pages, as busybox 1.35's `time` does, reports over 256 MiB.)
#[test]
fn the_peak_measure_is_in_kib() {
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("time-report.txt");
    let status = Command::new(GNU_TIME)
        .args(["-f", &format!("{PEAK}%M"), "-o"])
        .arg(&report_path)
        .args(["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("GNU time runs (Debian's time: bash .ci/install-deps.sh)");
    assert!(status.success());
    let report = std::fs::read_to_string(&report_path).unwrap();
    let kib: i64 = report
        .lines()
        .find_map(|line| line.strip_prefix(PEAK))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in {report}"));
    assert!(
        (64 * 1024..80 * 1024).contains(&kib),
        "dd with a 64 MiB block peaked at {kib} KiB"
    );
}
