//! `imagegen diff A B`: what changed between two recorded images (tags, aliases or digests):
//! versions, every pip and OS package, and the crates of the binaries imagegen put in (gpu-selftest).

use std::fmt::Write as _;

use anyhow::{anyhow, Result};

use crate::cli::DiffArgs;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, one_line_cell};
use crate::history::diff::diff_records;
use crate::history::manifest::human_bytes;
use crate::project::{load_manifest, Project};

pub(crate) fn run(_project: &Project, args: &DiffArgs) -> Result<Outcome> {
    let (from, to, manifest_path) = (
        args.from.as_str(),
        args.to.as_str(),
        args.manifest.as_path(),
    );
    let manifest = load_manifest(manifest_path)?;
    let find = |reference: &str| {
        manifest.find(reference).ok_or_else(|| {
            anyhow!(
                "{reference} is not a tag, alias or digest recorded in {}",
                manifest_path.display()
            )
        })
    };
    let (a, b) = (find(from)?, find(to)?);
    let diff = diff_records(a, b);
    let mut out = String::new();
    for (field, x, y) in &diff.fields {
        writeln!(out, "{field}: {x} -> {y}").ok();
    }
    for (title, list, missing) in [
        (
            "pip",
            &diff.pip,
            a.packages.is_none() || b.packages.is_none(),
        ),
        ("os", &diff.os, false),
        ("crates", &diff.crates, false),
        ("label", &diff.labels, false),
    ] {
        if missing {
            writeln!(out, "{title}: package lists not recorded for both images").ok();
            continue;
        }
        // A multi-line label value stays on its line (`\n`).
        for name in &list.added {
            writeln!(out, "{title} + {}", one_line_cell(name)).ok();
        }
        for name in &list.removed {
            writeln!(out, "{title} - {}", one_line_cell(name)).ok();
        }
        for (name, x, y) in &list.changed {
            writeln!(
                out,
                "{title} ~ {name} {} -> {}",
                one_line_cell(x),
                one_line_cell(y)
            )
            .ok();
        }
    }
    if out.is_empty() {
        out.push_str("no difference\n");
    }
    match (&diff.pull, diff.new_to_registry) {
        (Some(pull), Some(added)) => {
            writeln!(out, "pull: a node holding {from} pulls {pull} for {to}").ok();
            writeln!(
                out,
                "registry: {to} adds {} beside {from}",
                human_bytes(added)
            )
            .ok();
        }
        _ => {
            writeln!(
                out,
                "pull: layers not recorded for both images (written before imagegen recorded each layer; rebuilt images record them)"
            )
            .ok();
        }
    }
    emit(&out)?;
    Ok(Outcome::Success)
}
