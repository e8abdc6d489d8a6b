//! The commands: turn parsed flags into settings, call the core, print for people (tables) or
//! machines (JSON). Holds no compatibility or tag logic of its own.

use std::fmt::Write as _;

use anyhow::{Context, Result};

use crate::cli::{Cli, Command, Format};
use crate::project::{self, Project};
use crate::render::render_all;
use crate::resolve::{Resolution, ResolveOptions};
use crate::version::DriverVersion;

/// How a command ended, when it could run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// A check, build or test failed (exit 1).
    Failed,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Success => 0,
            Outcome::Failed => 1,
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

pub fn run(cli: Cli) -> Result<Outcome> {
    match cli.command {
        Command::Plan { manifest, format } => {
            let project = Project::load(&cli.matrix, cli.knowledge.as_deref())?;
            crate::upgrade::plan_command(&project, &manifest, format)
        }
        Command::Rollback {
            alias,
            to,
            previous,
            manifest,
        } => crate::upgrade::rollback_command(&alias, to.as_deref(), previous, &manifest),
        Command::Diff { from, to, manifest } => crate::upgrade::diff_command(&from, &to, &manifest),
        Command::Publish {
            manifest,
            allow_untested,
            dry_run,
        } => {
            let project = Project::load(&cli.matrix, cli.knowledge.as_deref())?;
            crate::publish::publish_command(&project, &manifest, allow_untested, dry_run)
        }
        Command::Resolve {
            driver,
            forward_compat,
            format,
            strict,
        } => {
            let project = Project::load(&cli.matrix, cli.knowledge.as_deref())?;
            let driver = driver
                .map(|text| DriverVersion::parse(&text))
                .transpose()
                .context("--driver")?;
            let resolution = project.resolve(ResolveOptions {
                driver,
                forward_compat,
                ..Default::default()
            });
            match format {
                Format::Table => print!("{}", resolution_table(&resolution)),
                Format::Json => println!("{}", serde_json::to_string_pretty(&resolution)?),
            }
            Ok(if strict && !resolution.rejected.is_empty() {
                Outcome::Failed
            } else {
                Outcome::Success
            })
        }
        Command::Build {
            only,
            jobs,
            shard,
            platform,
            push,
            no_test,
            require_gpu,
            move_untested_aliases,
            images,
            selftest_dir,
            manifest,
            log_dir,
            push_attempts,
            dry_run,
        } => {
            let project = Project::load(&cli.matrix, cli.knowledge.as_deref())?;
            let settings = crate::run_build::BuildSettings {
                only,
                jobs,
                shard,
                platform,
                push,
                test: !no_test,
                require_gpu,
                move_untested_aliases,
                images,
                selftest_dir,
                manifest,
                log_dir,
                push_attempts,
                dry_run,
            };
            crate::run_build::run(&project, &settings)
        }
        Command::Render { out, check } => {
            let project = Project::load(&cli.matrix, cli.knowledge.as_deref())?;
            let resolution = project.resolve(ResolveOptions::default());
            let rendered = render_all(&resolution.images, &project.matrix, &project.templates)?;
            if check {
                let drift = project::check(&rendered, &out)?;
                for diff in &drift.diffs {
                    print!("{diff}");
                }
                for name in &drift.stale {
                    println!(
                        "stale: {}/{name} is no longer made by {}",
                        out.display(),
                        project.matrix_path.display()
                    );
                }
                if drift.is_clean() {
                    println!("{}: {} images up to date", out.display(), rendered.len());
                    Ok(Outcome::Success)
                } else {
                    eprintln!(
                        "error: {} is out of date ({} files differ, {} stale images)\nhint: run `imagegen render` and commit the result",
                        out.display(),
                        drift.diffs.len(),
                        drift.stale.len()
                    );
                    Ok(Outcome::Failed)
                }
            } else {
                let (changed, removed) = project::write(&rendered, &out)?;
                for name in &changed {
                    println!("wrote {}/{name}/Dockerfile", out.display());
                }
                for name in &removed {
                    println!("removed {}/{name}", out.display());
                }
                println!(
                    "{} images in {} ({} changed, {} removed, {} cells rejected: see `imagegen resolve`)",
                    rendered.len(),
                    out.display(),
                    changed.len(),
                    removed.len(),
                    resolution.rejected.len()
                );
                Ok(Outcome::Success)
            }
        }
        Command::Bake {
            out,
            selftest_dir,
            no_stage,
        } => crate::fanout_commands::bake(
            &cli.matrix,
            cli.knowledge.as_deref(),
            &out,
            &selftest_dir,
            !no_stage,
        ),
        Command::K8s {
            image,
            gpus,
            nodes,
            namespace,
            name,
            no_driver_affinity,
            manifest,
            command,
        } => {
            let settings = crate::k8s::JobSettings {
                gpus,
                nodes,
                namespace,
                command,
                name,
                driver_affinity: !no_driver_affinity,
                digest: None,
            };
            crate::fanout_commands::k8s(
                &cli.matrix,
                cli.knowledge.as_deref(),
                &image,
                &manifest,
                settings,
            )
        }
        Command::Ci {
            github: _,
            shards,
            per_image: _,
        } => {
            let fan_out = shards.map_or(crate::ci::FanOut::PerImage, crate::ci::FanOut::Shards);
            crate::fanout_commands::ci_github(&cli.matrix, cli.knowledge.as_deref(), fan_out)
        }
        Command::Manifest {
            action: crate::cli::ManifestAction::Merge { inputs, out },
        } => crate::fanout_commands::manifest_merge(&inputs, out.as_deref()),
        Command::Knowledge {
            action:
                crate::cli::KnowledgeAction::Derive {
                    package: crate::cli::DerivePackage::Torch,
                    version,
                    index,
                    check,
                },
        } => crate::knowledge_command::derive_torch(
            &version,
            &index,
            check,
            cli.knowledge.as_deref(),
        ),
    }
}

/// The resolution as a table for people: images with driver floors and aliases, then rejections.
pub fn resolution_table(resolution: &Resolution) -> String {
    let mut rows = vec![[
        "IMAGE", "PYTHON", "CUDNN", "DRIVER>=", "COMPAT>=", "ALIASES",
    ]
    .map(String::from)
    .to_vec()];
    for image in &resolution.images {
        rows.push(vec![
            image.tag.clone(),
            image.python.clone(),
            image.cudnn.clone(),
            image.driver_min.clone(),
            image.driver_min_compat.clone(),
            if image.aliases.is_empty() {
                "-".into()
            } else {
                image.aliases.join(", ")
            },
        ]);
    }
    let mut out = table(&rows);
    if !resolution.rejected.is_empty() {
        writeln!(out, "\nrejected ({}):", resolution.rejected.len()).ok();
        for rejection in &resolution.rejected {
            let mut cell = format!("torch {} cuda {}", rejection.torch, rejection.cuda);
            if let Some(cudnn) = &rejection.cudnn {
                write!(cell, " cudnn {cudnn}").ok();
            }
            if let Some(python) = &rejection.python {
                write!(cell, " python {python}").ok();
            }
            write!(cell, " {} {}", rejection.os, rejection.variant).ok();
            if rejection.platform != "linux/amd64" {
                write!(cell, " {}", rejection.platform).ok();
            }
            let origin = match (&rejection.location, rejection.origin.as_str()) {
                (Some(location), origin) => format!(" [{origin} at {location}]"),
                (None, "axes") => String::new(),
                (None, origin) => format!(" [{origin}]"),
            };
            writeln!(out, "  {cell}{origin}: {}", rejection.reason).ok();
        }
    }
    for warning in &resolution.warnings {
        writeln!(out, "warning: {warning}").ok();
    }
    for image in resolution
        .images
        .iter()
        .filter(|i| !i.unverified.is_empty())
    {
        writeln!(
            out,
            "warning: {} uses unverified knowledge: {}",
            image.tag,
            image.unverified.join("; ")
        )
        .ok();
    }
    writeln!(
        out,
        "\n{} images, {} rejected",
        resolution.images.len(),
        resolution.rejected.len()
    )
    .ok();
    out
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                write!(line, "{cell:<width$}  ", width = widths[index]).ok();
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
