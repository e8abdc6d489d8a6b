//! The imperative shell: one file per verb, each `run(&Project, &Args) -> Result<Outcome>`. A
//! command loads what it needs through [`Project`], calls the pure stages, does the Docker and
//! file work at the edges, and prints for people (tables) or machines (JSON). Policy lives in the
//! stages, not here.

pub mod attest;
pub mod bake;
pub mod build;
pub mod ci;
pub mod diff;
pub mod diff_build;
pub mod k8s;
pub mod knowledge;
pub mod ledger;
pub mod lock;
pub mod manifest;
pub mod outcome;
pub mod output;
pub mod plan;
pub mod publish;
pub mod release;
pub mod render;
pub mod resolve;
pub mod restore;
pub mod rollback;
pub mod signals;
pub mod stages;
pub mod test;
pub mod verify;
pub mod waiting;

use anyhow::Result;

use crate::cli::{Cli, Command, ManifestAction};
use crate::project::Project;

pub use outcome::{describe, Outcome};
pub use signals::Signal;

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<Outcome> {
    // Rendered images and their locks live in `images/` unless the command names another folder.
    let images_dir = match &cli.command {
        Command::Render(args) => Some(&args.out),
        Command::Lock(args) => Some(&args.out),
        Command::Build(args) => Some(&args.images),
        _ => None,
    };
    let mut project = Project::open(&cli.matrix, cli.knowledge.as_deref());
    if let Some(dir) = images_dir {
        project = project.with_images_dir(dir);
    }
    match &cli.command {
        Command::Resolve(args) => resolve::run(&project, args),
        Command::Render(args) => render::run(&project, args),
        Command::Lock(args) => lock::run(&project, args),
        Command::Build(args) => build::run(&project, args),
        Command::Plan(args) => plan::run(&project, args),
        Command::Rollback(args) => rollback::run(&project, args),
        Command::Restore(args) => restore::run(&project, args),
        Command::Release(args) => release::run(&project, args),
        Command::Publish(args) => publish::run(&project, args),
        Command::Diff(args) => diff::run(&project, args),
        Command::DiffBuild(args) => diff_build::run(&project, args),
        Command::Bake(args) => bake::run(&project, args),
        Command::K8s(args) => k8s::run(&project, args),
        Command::Ci(args) => ci::run(&project, args),
        Command::Test(args) => test::run(&project, args),
        Command::Knowledge(args) => knowledge::run(&project, args),
        Command::Manifest(args) => match &args.action {
            ManifestAction::Merge(merge) => manifest::merge(&project, merge),
            ManifestAction::Prune(prune) => manifest::prune(prune),
        },
        Command::Verify(args) => verify::run(&project, args),
        Command::Attest(args) => attest::run(&project, args),
    }
}
