//! `imagegen resolve`: which images the matrix makes, on which drivers they run, and which cells
//! are impossible and why; a table for people or JSON for machines.

use std::fmt::Write as _;

use anyhow::{anyhow, Result};

use crate::cli::{Format, ResolveArgs};
use crate::commands::outcome::Outcome;
use crate::commands::output::{count, emit, table};
use crate::commands::stages::{no_images, resolve_project};
use crate::project::Project;
use crate::resolve::image::{Resolution, ResolveOptions};

pub(crate) fn run(project: &Project, args: &ResolveArgs) -> Result<Outcome> {
    let driver = match args.driver.as_deref() {
        Some(text) => Some(
            project
                .knowledge()?
                .driver_argument(text)
                .map_err(|why| anyhow!("--driver {text}: {why}"))?,
        ),
        None => None,
    };
    let resolution = resolve_project(
        project,
        ResolveOptions {
            driver,
            forward_compat: args.forward_compat,
            ..Default::default()
        },
    )?;
    match args.format {
        Format::Table => emit(resolution_table(&resolution))?,
        Format::Json => emit(format!("{}\n", serde_json::to_string_pretty(&resolution)?))?,
    }
    // No image for a fleet's driver is an answer; no image at all is a matrix to fix.
    if resolution.images.is_empty() && args.driver.is_none() {
        return Err(no_images(project, &resolution, "", ""));
    }
    Ok(if args.strict && !resolution.rejected.is_empty() {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

/// The resolution as a table for people: images with driver floors and aliases, then rejections.
pub(crate) fn resolution_table(resolution: &Resolution) -> String {
    let mut rows = vec![[
        "IMAGE", "PYTHON", "CUDNN", "DRIVER>=", "COMPAT>=", "ALIASES",
    ]
    .map(String::from)
    .to_vec()];
    for image in &resolution.images {
        rows.push(vec![
            image.tag.clone(),
            image.python.to_string(),
            image.cudnn.to_string(),
            image.driver_min.to_string(),
            image.driver_min_compat.to_string(),
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
        // Cells rejected for the same reason by the same rule share one line, in first-seen order.
        let mut groups: Vec<(String, String, Vec<String>)> = Vec::new();
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
            match groups
                .iter_mut()
                .find(|(o, reason, _)| *o == origin && *reason == rejection.reason)
            {
                Some((_, _, cells)) => cells.push(cell),
                None => groups.push((origin, rejection.reason.clone(), vec![cell])),
            }
        }
        for (origin, reason, cells) in groups {
            writeln!(out, "  {}{origin}: {reason}", cells.join("; ")).ok();
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
        "\n{}, {} rejected",
        count(resolution.images.len(), "image"),
        resolution.rejected.len()
    )
    .ok();
    out
}
