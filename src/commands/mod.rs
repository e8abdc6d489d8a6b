//! The imperative shell: one file per verb, each `run(&Project, &Args) -> Result<Outcome>`. A
//! command loads what it needs through [`Project`], calls the pure stages, does the Docker and
//! file work at the edges, and prints for people (tables) or machines (JSON). Policy lives in the
//! stages, not here.

pub mod bake;
pub mod build;
pub mod ci;
pub mod diff;
pub mod k8s;
pub mod manifest;
pub mod output;
pub mod plan;
pub mod publish;
pub mod render;
pub mod resolve;
pub mod rollback;
pub mod signals;

use std::fmt::Write as _;

use anyhow::Result;

use crate::cli::{Cli, Command, ManifestAction};
use crate::project::Project;

pub use signals::Signal;

/// How a command ended, when it could run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// A check, build or test failed (exit 1).
    Failed,
    /// Stopped by SIGINT (exit 130) or SIGTERM (exit 143) after cleaning up.
    Interrupted(Signal),
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::Failed => 1,
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

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<Outcome> {
    let project = Project::open(&cli.matrix, cli.knowledge.as_deref());
    match &cli.command {
        Command::Resolve(args) => resolve::run(&project, args),
        Command::Render(args) => render::run(&project, args),
        Command::Build(args) => build::run(&project, args),
        Command::Plan(args) => plan::run(&project, args),
        Command::Rollback(args) => rollback::run(&project, args),
        Command::Publish(args) => publish::run(&project, args),
        Command::Diff(args) => diff::run(&project, args),
        Command::Bake(args) => bake::run(&project, args),
        Command::K8s(args) => k8s::run(&project, args),
        Command::Ci(args) => ci::run(&project, args),
        Command::Manifest(args) => match &args.action {
            ManifestAction::Merge(merge) => manifest::merge(&project, merge),
        },
    }
}
