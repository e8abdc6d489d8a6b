//! Build output for people: a progress bar per running image on a terminal, plain prefixed lines
//! in CI (with a `still …` heartbeat for an image quiet for `IMAGEGEN_PROGRESS_SECONDS`, 15 by
//! default), and the full log of every image in its own file. Holds no build logic.
//!
//! The heartbeat names what runs now, never the last thing that happened: each image has a
//! *phase* (`phase`: building, exporting and normalizing, writing the venv's layer, pushing, …),
//! set when it begins, and within it a *detail* (`detail`: the Docker build's step, bytes
//! normalized, files written), while *events* (`stage`: `built …`, `normalized 12 layers`) are
//! shown once and change neither. For a Docker build step the heartbeat also says how long ago
//! the step last printed and what (pip's own lines are not shown in CI, but the heartbeat says
//! they still come). Only images that started have a heartbeat: a line about an alias is an
//! event, never a phase that outlives the move.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// In CI (no terminal), an image that has shown no line for this long gets a `still …` line, so
/// a long pip install or push is not silence in the log. `IMAGEGEN_PROGRESS_SECONDS` changes it.
const DEFAULT_QUIET_SECONDS: u64 = 15;

/// What runs now for one image, for the heartbeat.
#[derive(Debug, Clone)]
struct Running {
    /// When the image started.
    started: Instant,
    /// When CI was last shown a line of it.
    last_shown: Instant,
    /// The phase running now and when it began.
    phase: String,
    phase_started: Instant,
    /// Progress within the phase (a Docker build's step, bytes, files), if it has any.
    detail: Option<String>,
    /// The last line the phase's own work printed that CI does not show, and when.
    output: Option<(String, Instant)>,
}

impl Running {
    fn new(phase: &str, now: Instant) -> Running {
        Running {
            started: now,
            last_shown: now,
            phase: phase.to_string(),
            phase_started: now,
            detail: None,
            output: None,
        }
    }

    /// The heartbeat line of `name` at `now`.
    fn heartbeat(&self, name: &str, now: Instant) -> String {
        let mut line = format!("[{name}] still {}", self.phase);
        if let Some(detail) = &self.detail {
            line.push_str(": ");
            line.push_str(detail);
        }
        if let Some((output, at)) = &self.output {
            line.push_str(&format!(
                "; last output {}s ago: {output}",
                now.duration_since(*at).as_secs()
            ));
        }
        line.push_str(&format!(
            " ({}s in this phase, {}s in)",
            now.duration_since(self.phase_started).as_secs(),
            now.duration_since(self.started).as_secs()
        ));
        line
    }
}

/// The images running, by name.
type Shown = BTreeMap<String, Running>;

/// At most this many characters of a line go into a heartbeat or a bar.
const SHOWN_CHARACTERS: usize = 120;

fn shortened(text: &str) -> String {
    text.trim_start_matches("== ")
        .chars()
        .take(SHOWN_CHARACTERS)
        .collect()
}

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
                let now = Instant::now();
                for (name, running) in shown.lock().expect("shown lock").iter_mut() {
                    if now.duration_since(running.last_shown).as_secs() >= quiet {
                        running.last_shown = now;
                        line_to_stderr(&running.heartbeat(name, now));
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
            None => line_to_stderr(&format!("[{name}] {what}")),
        }
        // The bars read the phase too; only CI's watcher prints heartbeats.
        self.shown
            .lock()
            .expect("shown lock")
            .insert(name.to_string(), Running::new(what, Instant::now()));
        self.log(name, &format!("== {what}"));
    }

    /// Changes what the heartbeat of `name` knows, if `name` is running (started, not finished):
    /// an image that did not start (an alias, a note) has no heartbeat.
    fn update(&self, name: &str, change: impl FnOnce(&mut Running, Instant)) {
        if let Some(running) = self.shown.lock().expect("shown lock").get_mut(name) {
            change(running, Instant::now());
        }
    }

    /// Sets the terminal bar of `name` to `text`.
    fn bar_message(&self, name: &str, text: &str) {
        if let Some(bar) = self.bars.lock().expect("bar lock").get(name) {
            bar.set_message(text.chars().take(160).collect::<String>());
        }
    }

    /// A line of output from `name`: always logged; shown when it is a Docker build's step (the
    /// phase's detail from then on) or a status line (an event). Other lines (pip's own, say)
    /// are only the heartbeat's "last output".
    pub(crate) fn line(&self, name: &str, text: &str) {
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        self.log(name, text);
        let step = text.starts_with("Step ");
        let notable =
            step || text.starts_with("== ") || text.starts_with("ERROR") || text.contains("error:");
        if step {
            self.update(name, |running, _| {
                running.detail = Some(format!("at {}", shortened(text)));
                running.output = None;
            });
        } else if !notable {
            self.update(name, |running, now| {
                running.output = Some((shortened(text), now));
            });
        }
        match &self.terminal {
            Some(_) if notable => self.bar_message(name, text),
            Some(_) => {}
            None if notable => {
                line_to_stderr(&format!("[{name}] {text}"));
                self.update(name, |running, now| running.last_shown = now);
            }
            None => {}
        }
    }

    /// A phase of `name` begins (building, exporting and normalizing, pushing, testing): shown
    /// and logged as `== what`, and what the heartbeat names until the next phase.
    pub(crate) fn phase(&self, name: &str, what: &str) {
        self.log(name, &format!("== {what}"));
        self.update(name, |running, now| {
            running.phase = shortened(what);
            running.phase_started = now;
            running.detail = None;
            running.output = None;
            running.last_shown = now;
        });
        match &self.terminal {
            Some(_) => self.bar_message(name, what),
            None => line_to_stderr(&format!("[{name}] {what}")),
        }
    }

    /// Progress within the phase of `name` (bytes normalized, files written): logged, on the
    /// terminal's bar, and in CI the heartbeat's detail (not a line of its own).
    pub(crate) fn detail(&self, name: &str, text: &str) {
        self.log(name, text);
        self.update(name, |running, _| {
            running.detail = Some(shortened(text));
        });
        if self.terminal.is_some() {
            let phase = self
                .shown
                .lock()
                .expect("shown lock")
                .get(name)
                .map(|running| running.phase.clone());
            match phase {
                Some(phase) => self.bar_message(name, &format!("{phase}: {text}")),
                None => self.bar_message(name, text),
            }
        }
    }

    /// A line for `name`'s log file only (an error the summary shows once, not per image).
    pub(crate) fn log_only(&self, name: &str, text: &str) {
        self.log(name, text.trim_end());
    }

    /// Something happened to `name` (`built …`, `normalized 12 layers`, `pushed …`): shown once
    /// and logged; the phase and its detail stay as they are.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn running(progress: &Progress, name: &str) -> Running {
        progress.shown.lock().unwrap().get(name).cloned().unwrap()
    }

    #[test]
    fn the_heartbeat_names_the_phase_running_now_not_the_last_event() {
        let logs = tempfile::tempdir().unwrap();
        let progress = Progress::new(false, logs.path());
        progress.start("img", "building");
        progress.phase("img", "building the image (docker build)");
        progress.line(
            "img",
            "Step 13/30 : RUN python3 -m pip install -r requirements.lock",
        );
        progress.line("img", "Collecting torch==2.13.0");
        let now = Instant::now();
        let beat = running(&progress, "img").heartbeat("img", now);
        assert!(
            beat.starts_with("[img] still building the image (docker build): at Step 13/30 : RUN python3 -m pip install")
                && beat.contains("; last output 0s ago: Collecting torch==2.13.0")
                && beat.ends_with("s in)"),
            "{beat}"
        );
        // An event is shown once and changes nothing the heartbeat says.
        progress.stage("img", "built sha256:abc");
        assert!(running(&progress, "img")
            .heartbeat("img", now)
            .starts_with("[img] still building the image (docker build): at Step 13/30"));
        // The next phase, with its own progress.
        progress.phase(
            "img",
            "exporting its layers from the daemon and normalizing them",
        );
        progress.detail("img", "normalizing: 1.2 GB compressed to 700 MB (60 MB/s)");
        let beat = running(&progress, "img").heartbeat("img", Instant::now());
        assert!(
            beat.starts_with("[img] still exporting its layers from the daemon and normalizing them: normalizing: 1.2 GB compressed to 700 MB"),
            "{beat}"
        );
        assert!(!beat.contains("built"), "{beat}");
        // An alias (never started) gets no heartbeat, whatever is said of it.
        progress.line("2.13-runtime", "== moving r/p:2.13-runtime to sha256:abc");
        assert!(!progress.shown.lock().unwrap().contains_key("2.13-runtime"));
        // A finished image has none either.
        progress.finish("img", "built and pushed");
        assert!(progress.shown.lock().unwrap().is_empty());
        let log = std::fs::read_to_string(progress.log_path("img")).unwrap();
        assert!(
            log.contains("normalizing: 1.2 GB compressed to 700 MB"),
            "{log}"
        );
    }
}
