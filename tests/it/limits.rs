//! Hostile inputs: small files that once took gigabytes or minutes (a 1 MB label referenced
//! through 1000 aliases, 400 000 copies of a version, 100 000 levels of nesting). The real binary
//! runs on each with its address space capped at 1 GiB; each must end in one located error with
//! exit 2, fast, with a small peak RSS, and write nothing. Without the bounds these inputs need
//! far more memory than the cap (1.8 GB, 3.2 GB), so the tests fail.
//!
//! The peak RSS is the kernel's (`wait4`'s `ru_maxrss`). A process started straight from this
//! big, multi-threaded test process would inherit its high-water mark at `exec`, so `sh` starts
//! imagegen in the background and exits. Imagegen, orphaned, goes to the nearest child subreaper:
//! a child forked from this process for that one measurement, which reaps it, hands its exit
//! status and peak back through a pipe and exits. The test process itself never becomes a
//! subreaper, so the other tests of this binary never inherit orphans they did not start.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
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

/// What the measuring child sends back: imagegen's wait status and peak RSS (KiB).
#[repr(C)]
#[derive(Default)]
struct Measured {
    status: libc::c_int,
    max_rss_kib: libc::c_long,
}

/// Why the measuring child gave up, by its exit code (it cannot format a message).
fn child_failure(code: i32) -> &'static str {
    match code {
        10 => "prctl(PR_SET_CHILD_SUBREAPER) failed",
        11 => "fork of sh failed",
        14 => "wait4 for imagegen failed",
        15 => "writing the result failed",
        _ => "unknown",
    }
}

fn c_string(bytes: &[u8]) -> CString {
    CString::new(bytes).expect("no NUL in an argument")
}

/// Runs `imagegen args...` in `dir` under the address-space cap, measuring its time and peak RSS.
///
/// A child forked for this run marks itself a child subreaper (whatever imagegen starts is
/// adopted by it, not by this process) and starts `sh`, which sets the cap and execs imagegen in
/// its own process; the child reaps it with `wait4` and writes its status and `ru_maxrss` to a
/// pipe. The child is a copy of one thread of this
/// multi-threaded process, so it makes only async-signal-safe calls (no allocation, no lock):
/// everything it needs is made before the fork.
fn run_measured(dir: &Path, args: &[&str]) -> Run {
    let script = format!(
        "ulimit -v {ADDRESS_SPACE_CAP_KIB} && exec \"$0\" \"$@\" </dev/null >/dev/null 2>stderr.txt"
    );
    let imagegen = assert_cmd::cargo::cargo_bin("imagegen");
    let mut argv_strings = vec![
        c_string(b"sh"),
        c_string(b"-c"),
        c_string(script.as_bytes()),
        c_string(imagegen.as_os_str().as_bytes()),
    ];
    argv_strings.extend(args.iter().map(|arg| c_string(OsStr::new(arg).as_bytes())));
    let mut argv: Vec<*const libc::c_char> = argv_strings.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let shell = c_string(b"/bin/sh");
    let directory = c_string(dir.as_os_str().as_bytes());

    // pid_pipe: sh's stdout (the pid of imagegen) to the child; result_pipe: child to us.
    let mut pid_pipe = [0; 2];
    let mut result_pipe = [0; 2];
    // SAFETY: pipe2 fills the two-element arrays.
    unsafe {
        assert_eq!(libc::pipe2(pid_pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
        assert_eq!(libc::pipe2(result_pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
    }
    let started = Instant::now();
    // SAFETY: after fork the child makes only async-signal-safe system calls on memory made
    // before the fork, and ends with _exit; it never returns into Rust code.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        unsafe { measuring_child(&shell, &argv, &directory, pid_pipe, result_pipe[1]) }
    }
    // SAFETY: plain close/read/waitpid on our own descriptors and child.
    let measured = unsafe {
        libc::close(pid_pipe[0]);
        libc::close(pid_pipe[1]);
        libc::close(result_pipe[1]);
        let mut measured = Measured::default();
        let size = std::mem::size_of::<Measured>();
        let read = libc::read(
            result_pipe[0],
            (&mut measured as *mut Measured).cast(),
            size,
        );
        libc::close(result_pipe[0]);
        let mut child_status = 0;
        assert_eq!(libc::waitpid(child, &mut child_status, 0), child);
        let code = libc::WEXITSTATUS(child_status);
        assert!(
            libc::WIFEXITED(child_status) && code == 0 && read == size as isize,
            "the measuring child failed (exit {code}: {})",
            child_failure(code)
        );
        measured
    };
    let status = measured.status;
    Run {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stderr: std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default(),
        seconds: started.elapsed().as_secs_f64(),
        max_rss_kib: measured.max_rss_kib,
    }
}

/// The forked child of [`run_measured`]: subreaper, `sh`, `wait4`, result, `_exit`. Only
/// async-signal-safe calls from here on.
unsafe fn measuring_child(
    shell: &CString,
    argv: &[*const libc::c_char],
    directory: &CString,
    pid_pipe: [libc::c_int; 2],
    result_fd: libc::c_int,
) -> ! {
    if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
        libc::_exit(10);
    }
    let launcher = libc::fork();
    if launcher < 0 {
        libc::_exit(11);
    }
    if launcher == 0 {
        // sh: in the run's folder, its stdout the pid pipe.
        if libc::chdir(directory.as_ptr()) != 0 || libc::dup2(pid_pipe[1], 1) != 1 {
            libc::_exit(127);
        }
        libc::execv(shell.as_ptr(), argv.as_ptr());
        libc::_exit(127);
    }
    libc::close(pid_pipe[1]);
    libc::close(pid_pipe[0]);
    // sh execs imagegen in its own process (no background job: a shell that reaps a job which
    // ended before the shell did leaves nothing to wait for), so the launcher is imagegen.
    let mut usage: libc::rusage = std::mem::zeroed();
    let mut measured = Measured::default();
    loop {
        let waited = libc::wait4(launcher, &mut measured.status, 0, &mut usage);
        if waited == launcher {
            break;
        }
        if waited < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        libc::_exit(14);
    }
    measured.max_rss_kib = usage.ru_maxrss;
    let size = std::mem::size_of::<Measured>();
    if libc::write(result_fd, (&measured as *const Measured).cast(), size) != size as isize {
        libc::_exit(15);
    }
    libc::_exit(0);
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

/// The measurement's subreaper is a child made for it: after a measured run this process is no
/// subreaper, so orphans of other tests in this binary go to init, not to it.
#[test]
fn the_test_process_never_becomes_a_subreaper() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("matrix.yaml"), "registry: [\n").unwrap();
    let run = run_measured(dir.path(), &["render"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.max_rss_kib > 0, "the child reported a peak");
    let mut subreaper: libc::c_int = -1;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int.
    let done = unsafe {
        libc::prctl(
            libc::PR_GET_CHILD_SUBREAPER,
            &mut subreaper as *mut libc::c_int,
        )
    };
    assert_eq!(done, 0, "prctl: {}", std::io::Error::last_os_error());
    assert_eq!(subreaper, 0, "the test process is a child subreaper");
}
