//! The imperative shell: one file per verb, each `run(&Project, &Args) -> Result<Outcome>`. A
//! command loads what it needs through [`Project`], calls the pure stages, does the Docker and
//! file work at the edges, and prints for people (tables) or machines (JSON). Policy lives in the
//! stages, not here.

pub(crate) mod attest;
pub(crate) mod bake;
pub(crate) mod build;
pub(crate) mod ci;
pub(crate) mod diff;
pub(crate) mod diff_build;
pub(crate) mod doctor;
pub(crate) mod k8s;
pub(crate) mod knowledge;
pub(crate) mod ledger;
pub(crate) mod lock;
pub(crate) mod manifest;
pub(crate) mod outcome;
pub(crate) mod output;
pub(crate) mod plan;
pub(crate) mod publish;
pub(crate) mod release;
pub(crate) mod render;
pub(crate) mod resolve;
pub(crate) mod restore;
pub(crate) mod rollback;
pub(crate) mod signals;
pub(crate) mod stages;
pub(crate) mod steps;
pub(crate) mod test;
pub(crate) mod verify;
pub(crate) mod waiting;
pub(crate) mod wheels;

use anyhow::Result;

use crate::cli::{AttestAction, Cli, Command, ManifestAction, TestAction};
use crate::project::Project;

pub use outcome::{describe, Outcome};

/// The command line, parsed, with the ids of the options it (or the environment) gave.
pub fn parse() -> std::result::Result<Cli, clap::Error> {
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let mut level = Some(&matches);
    while let Some(current) = level {
        for id in current.ids() {
            let given = matches!(
                current
                    .try_get_raw(id.as_str())
                    .ok()
                    .flatten()
                    .and(current.value_source(id.as_str())),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
            if given {
                cli.given.push(id.to_string());
            }
        }
        level = current.subcommand().map(|(_, sub)| sub);
    }
    Ok(cli)
}

/// Places the project's paths: with `--project DIR` a relative matrix is in DIR; a path option
/// left at its default (images/, the manifest, .imagegen/logs) is taken in the matrix's folder,
/// so `--matrix ../x/matrix.yaml` uses ../x/images, not a second images/ here. A path given on
/// the command line stays relative to the working directory, as paths typed in a shell are.
/// gpu-selftest's folder, when not given, is found from the project (see
/// [`crate::project::default_selftest_dir`]).
fn place_project_paths(cli: &mut Cli) -> Result<()> {
    if let Some(dir) = &cli.project {
        crate::project::check_project_dir(dir)?;
        if cli.matrix.is_relative() {
            cli.matrix = dir.join(&cli.matrix);
        }
    }
    let root = cli
        .matrix
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let given = cli.given.clone();
    if !given.iter().any(|g| g == "selftest_dir") {
        match &mut cli.command {
            Command::Build(args) => args.selftest_dir = crate::project::default_selftest_dir(&root),
            Command::Bake(args) => args.selftest_dir = crate::project::default_selftest_dir(&root),
            Command::Doctor(args) => {
                args.selftest_dir = crate::project::default_selftest_dir(&root)
            }
            _ => {}
        }
    }
    if root.as_os_str().is_empty() {
        return Ok(());
    }
    let place = |path: &mut std::path::PathBuf, id: &str| {
        if !given.iter().any(|g| g == id) && path.is_relative() {
            *path = root.join(&*path);
        }
    };
    match &mut cli.command {
        Command::Render(args) => place(&mut args.out, "out"),
        Command::Lock(args) => place(&mut args.out, "out"),
        Command::Build(args) => {
            place(&mut args.images, "images");
            place(&mut args.manifest, "manifest");
            place(&mut args.log_dir, "log_dir");
        }
        Command::Plan(args) => place(&mut args.manifest, "manifest"),
        Command::Rollback(args) => place(&mut args.manifest, "manifest"),
        Command::Release(args) => place(&mut args.manifest, "manifest"),
        Command::Restore(args) => place(&mut args.manifest, "manifest"),
        Command::Publish(args) => place(&mut args.manifest, "manifest"),
        Command::Diff(args) => place(&mut args.manifest, "manifest"),
        Command::K8s(args) => place(&mut args.manifest, "manifest"),
        Command::Verify(args) => place(&mut args.manifest, "manifest"),
        Command::Test(args) => {
            place(&mut args.manifest, "manifest");
            match &mut args.action {
                Some(TestAction::Import(import)) => place(&mut import.manifest, "manifest"),
                Some(TestAction::Settle(settle)) => place(&mut settle.manifest, "manifest"),
                None => {}
            }
        }
        Command::Attest(args) => match &mut args.action {
            AttestAction::Sign(sign) => place(&mut sign.manifest, "manifest"),
            AttestAction::Show(show) => place(&mut show.manifest, "manifest"),
            AttestAction::Sbom(sbom) => place(&mut sbom.manifest, "manifest"),
        },
        Command::Manifest(args) => match &mut args.action {
            ManifestAction::Prune(prune) => place(&mut prune.manifest, "manifest"),
            ManifestAction::Merge(_) => {}
        },
        Command::Resolve(_)
        | Command::Bake(_)
        | Command::Ci(_)
        | Command::Knowledge(_)
        | Command::Doctor(_)
        | Command::DiffBuild(_) => {}
    }
    Ok(())
}

/// Runs the command `cli` names.
pub fn run(mut cli: Cli) -> Result<Outcome> {
    place_project_paths(&mut cli)?;
    // Rendered images and their locks live in `images/` unless the command names another folder.
    let images_dir = match &cli.command {
        Command::Render(args) => Some(&args.out),
        Command::Lock(args) => Some(&args.out),
        Command::Build(args) => Some(&args.images),
        _ => None,
    };
    let manifest = match &cli.command {
        Command::Build(args) => Some(&args.manifest),
        Command::Plan(args) => Some(&args.manifest),
        Command::K8s(args) => Some(&args.manifest),
        Command::Publish(args) => Some(&args.manifest),
        Command::Test(args) => Some(&args.manifest),
        _ => None,
    };
    let building = matches!(&cli.command, Command::Build(args) if !args.dry_run);
    let by_project = cli.given.iter().any(|g| g == "project");
    if let Some(note) = crate::project::which_project_note(&cli.matrix, by_project, building) {
        eprintln!("{note}");
    }
    let mut project = Project::open(&cli.matrix, cli.knowledge.as_deref());
    if let Some(dir) = images_dir {
        project = project.with_images_dir(dir);
    }
    if let Some(path) = manifest {
        project = project.with_manifest(path);
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
        Command::Doctor(args) => doctor::run(&project, args),
    }
}
