//! Hostile inputs: small files that once took gigabytes or minutes (a 1 MB label referenced
//! through 1000 aliases, 400 000 copies of a version, 100 000 levels of nesting). The real binary
//! runs on each with its address space capped at 1 GiB; each must end in one located error with
//! exit 2, fast, with a small peak RSS, and write nothing. Without the bounds these inputs need
//! far more memory than the cap (1.8 GB, 3.2 GB), so the tests fail.
//!
//! The peak RSS is the kernel's (`wait4`'s `ru_maxrss`). A process started straight from this
//! big, multi-threaded test process would inherit its high-water mark at `exec`, so `sh` starts
//! imagegen in the background and exits; imagegen, orphaned, comes back to this process (a child
//! subreaper), which reaps it and reads its own peak.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Instant;

/// The address-space cap of imagegen (KiB, for `ulimit -v`): far above what a bounded run needs,
/// far below what the unbounded runs took.
const ADDRESS_SPACE_CAP_KIB: u64 = 1 << 20;
/// What a bounded run may use; the binary itself takes about 15 MiB.
const MAX_RSS_KIB: i64 = 64 * 1024;
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

/// Runs `imagegen args...` in `dir` under the address-space cap, measuring its time and peak RSS.
fn run_measured(dir: &Path, args: &[&str]) -> Run {
    static SUBREAPER: Once = Once::new();
    SUBREAPER.call_once(|| {
        // SAFETY: a plain prctl on this process.
        let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(done, 0, "prctl: {}", std::io::Error::last_os_error());
    });
    let started = Instant::now();
    let launcher = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_CAP_KIB} && \"$0\" \"$@\" </dev/null >/dev/null 2>stderr.txt & echo $!"
        ))
        .arg(assert_cmd::cargo::cargo_bin("imagegen"))
        .args(args)
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .expect("sh starts imagegen");
    assert!(launcher.status.success(), "{launcher:?}");
    let pid: libc::pid_t = String::from_utf8_lossy(&launcher.stdout)
        .trim()
        .parse()
        .expect("sh prints the pid of imagegen");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for our (adopted) child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    Run {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stderr: std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default(),
        seconds: started.elapsed().as_secs_f64(),
        max_rss_kib: usage.ru_maxrss,
    }
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
        run.max_rss_kib < MAX_RSS_KIB,
        "{name}: peak RSS {} KiB",
        run.max_rss_kib
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
    assert!(run.seconds < MAX_SECONDS && run.max_rss_kib < MAX_RSS_KIB);
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
    assert!(run.seconds < MAX_SECONDS && run.max_rss_kib < MAX_RSS_KIB);
}
