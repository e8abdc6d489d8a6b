//! How a command ended: its outcome and exit code, and an error chain worded for people.

use std::fmt::Write as _;

use crate::commands::signals::Signal;

/// How a command ended, when it could run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// A check, build or test failed (exit 1).
    Failed,
    /// The inputs disagree in a way no rule settles (`manifest merge`, exit 3).
    Conflict,
    /// Nothing that could be checked failed, but something could not be checked
    /// (`knowledge derive --check` without METADATA for a platform, exit 4).
    Unchecked,
    /// Stopped by SIGINT (exit 130) or SIGTERM (exit 143) after cleaning up.
    Interrupted(Signal),
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::Failed => 1,
            Outcome::Conflict => 3,
            Outcome::Unchecked => 4,
            Outcome::Interrupted(signal) => signal.exit_code(),
        }
    }
}

/// The whole error chain on one line each, with any `hint:` kept on its own line.
pub fn describe(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            write!(text, "\n  caused by: {cause}").ok();
        }
    }
    text
}
