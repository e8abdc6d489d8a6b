//! Build output for people: a progress bar per running image on a terminal, plain prefixed lines
//! in CI (with a `still …` line for an image quiet for `IMAGEGEN_PROGRESS_SECONDS`, 15 by
//! default), and the full log of every image in its own file. Holds no build logic.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// In CI (no terminal), an image that has shown no line for this long gets a `still …` line, so
/// a long pip install or push is not silence in the log. `IMAGEGEN_PROGRESS_SECONDS` changes it.
const DEFAULT_QUIET_SECONDS: u64 = 15;

/// What CI was last shown of each running image: (started, last line shown, what it is doing).
type Shown = BTreeMap<String, (std::time::Instant, std::time::Instant, String)>;

/// Where build output goes.
pub(crate) struct Progress {
    /// Plain-line mode only: the images running, for the `still …` lines.
    shown: std::sync::Arc<Mutex<Shown>>,
    terminal: Option<MultiProgress>,
    bars: Mutex<BTreeMap<String, ProgressBar>>,
    log_dir: PathBuf,
    logs: Mutex<BTreeMap<String, std::fs::File>>,
    /// The notes said this run (each once, however many images meet its cause).
    said: Mutex<std::collections::BTreeSet<String>>,
}

impl Progress {
    /// Bars when `terminal` is true, plain lines otherwise; full logs under `log_dir`.
    pub(crate) fn new(terminal: bool, log_dir: &Path) -> Progress {
        let shown: std::sync::Arc<Mutex<Shown>> = Default::default();
        if !terminal {
            let quiet = std::env::var("IMAGEGEN_PROGRESS_SECONDS")
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .filter(|seconds| *seconds > 0)
                .unwrap_or(DEFAULT_QUIET_SECONDS);
            let watched = std::sync::Arc::downgrade(&shown);
            // Ends with the Progress (the only strong owner of `shown`).
            std::thread::spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(500));
                let Some(shown) = watched.upgrade() else {
                    return;
                };
                let now = std::time::Instant::now();
                for (name, (started, last, doing)) in shown.lock().expect("shown lock").iter_mut() {
                    if now.duration_since(*last).as_secs() >= quiet {
                        *last = now;
                        line_to_stderr(&format!(
                            "[{name}] still {doing} ({}s in)",
                            now.duration_since(*started).as_secs()
                        ));
                    }
                }
            });
        }
        Progress {
            shown,
            terminal: terminal.then(MultiProgress::new),
            bars: Mutex::new(BTreeMap::new()),
            log_dir: log_dir.to_path_buf(),
            logs: Mutex::new(BTreeMap::new()),
            said: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// A note about the whole run (`note: …` on standard error, or above the bars), said the
    /// first time only.
    pub(crate) fn note_once(&self, text: &str) {
        if !self
            .said
            .lock()
            .expect("note lock")
            .insert(text.to_string())
        {
            return;
        }
        match &self.terminal {
            Some(multi) => {
                multi.println(format!("note: {text}")).ok();
            }
            None => line_to_stderr(&format!("note: {text}")),
        }
    }

    /// The log file of `name`.
    pub(crate) fn log_path(&self, name: &str) -> PathBuf {
        self.log_dir.join(format!("{name}.log"))
    }

    /// An image starts (building, testing or pushing): opens its log and its bar.
    pub(crate) fn start(&self, name: &str, what: &str) {
        if std::fs::create_dir_all(&self.log_dir).is_ok() {
            // A fresh file, never through a link planted at its name (a write would follow it).
            let path = self.log_path(name);
            let _ = std::fs::remove_file(&path);
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path);
            if let Ok(file) = created {
                self.logs
                    .lock()
                    .expect("log lock")
                    .insert(name.to_string(), file);
            }
        }
        match &self.terminal {
            Some(multi) => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg}")
                        .expect("static template"),
                );
                bar.set_prefix(name.to_string());
                bar.set_message(what.to_string());
                bar.enable_steady_tick(std::time::Duration::from_millis(120));
                self.bars
                    .lock()
                    .expect("bar lock")
                    .insert(name.to_string(), bar);
            }
            None => {
                line_to_stderr(&format!("[{name}] {what}"));
                self.shown_now(name, what);
            }
        }
        self.log(name, &format!("== {what}"));
    }

    /// CI was just shown a line of `name` about `doing`.
    fn shown_now(&self, name: &str, doing: &str) {
        let now = std::time::Instant::now();
        let mut shown = self.shown.lock().expect("shown lock");
        let entry = shown
            .entry(name.to_string())
            .or_insert_with(|| (now, now, String::new()));
        entry.1 = now;
        let doing = doing.trim_start_matches("== ");
        entry.2 = if doing.starts_with("Step ") {
            format!("at {doing}")
        } else {
            doing.to_string()
        }
        .chars()
        .take(120)
        .collect();
    }

    /// A line of output from `name`: always logged; shown when it is a step or a status line.
    pub(crate) fn line(&self, name: &str, text: &str) {
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        self.log(name, text);
        let notable = text.starts_with("Step ")
            || text.starts_with("== ")
            || text.starts_with("ERROR")
            || text.contains("error:");
        match &self.terminal {
            Some(_) => {
                if let Some(bar) = self.bars.lock().expect("bar lock").get(name) {
                    if notable {
                        bar.set_message(text.chars().take(160).collect::<String>());
                    }
                }
            }
            None if notable => {
                line_to_stderr(&format!("[{name}] {text}"));
                self.shown_now(name, text);
            }
            None => {}
        }
    }

    /// A line for `name`'s log file only (an error the summary shows once, not per image).
    pub(crate) fn log_only(&self, name: &str, text: &str) {
        self.log(name, text.trim_end());
    }

    /// A stage of `name` begins (test, push, aliases).
    pub(crate) fn stage(&self, name: &str, what: &str) {
        self.line(name, &format!("== {what}"));
    }

    /// `name` is done; `outcome` is a one-line summary.
    pub(crate) fn finish(&self, name: &str, outcome: &str) {
        self.log(name, &format!("== {outcome}"));
        self.logs.lock().expect("log lock").remove(name);
        match &self.terminal {
            Some(multi) => {
                if let Some(bar) = self.bars.lock().expect("bar lock").remove(name) {
                    bar.finish_and_clear();
                    multi.remove(&bar);
                }
                multi.println(format!("{name}: {outcome}")).ok();
            }
            None => {
                self.shown.lock().expect("shown lock").remove(name);
                line_to_stderr(&format!("[{name}] {outcome}"));
            }
        }
    }

    fn log(&self, name: &str, text: &str) {
        if let Some(file) = self.logs.lock().expect("log lock").get_mut(name) {
            let _ = writeln!(file, "{text}");
        }
    }
}

/// A plain progress line on standard error; a closed standard error (`imagegen build 2>&1 | head`)
/// is ignored: the build goes on, and its results are in the logs and the manifest.
fn line_to_stderr(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
