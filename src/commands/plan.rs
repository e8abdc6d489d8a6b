//! The upgrade and rollback commands: `plan` (what a build would change, for people and pull
//! requests), `rollback` (re-point an alias to a recorded digest through the registry API, no
//! rebuild) and `diff` (what changed between two recorded images). The decisions are pure
//! functions in `plan` and here; the registry call is the only I/O besides the manifest.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::cli::PlanFormat;
use crate::commands::{table, Outcome};
use crate::docker::{registry_host_of, repository_path_of, DockerConfig, RegistryClient};
use crate::history::manifest::{now_rfc3339, ImageRecord, Manifest};
use crate::pipeline::plan::{upgrade_plan, UpgradePlan};
use crate::project::Project;
use crate::resolve::ResolveOptions;

pub fn plan_command(
    project: &Project,
    manifest_path: &Path,
    format: PlanFormat,
) -> Result<Outcome> {
    let manifest = Manifest::load(manifest_path)?;
    let resolution = project.resolve(ResolveOptions::default());
    let plan = upgrade_plan(&resolution.images, &manifest);
    match format {
        PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
        PlanFormat::Table => print!("{}", plan_text(&plan)),
        PlanFormat::Markdown => print!("{}", plan_markdown(&plan)),
    }
    Ok(Outcome::Success)
}

fn short(digest: &Option<String>) -> String {
    digest
        .as_deref()
        .map(|d| d.chars().take(19).collect())
        .unwrap_or_else(|| "(new build)".into())
}

/// The plan as text for a terminal.
pub fn plan_text(plan: &UpgradePlan) -> String {
    let mut out = String::new();
    let section = |out: &mut String, title: &str, rows: Vec<Vec<String>>| {
        if rows.len() > 1 {
            writeln!(out, "{title}:").ok();
            for line in table(&rows).lines() {
                writeln!(out, "  {line}").ok();
            }
            out.push('\n');
        }
    };
    let mut rows = vec![vec!["IMAGE".to_string(), "DRIVER>=".into()]];
    rows.extend(
        plan.new_images
            .iter()
            .map(|c| vec![c.tag.clone(), c.driver_min.clone()]),
    );
    section(&mut out, "new images", rows);
    let mut rows = vec![vec!["IMAGE".to_string(), "WHY".into()]];
    rows.extend(
        plan.rebuilt
            .iter()
            .map(|c| vec![c.tag.clone(), change_summary(&c.changes)]),
    );
    section(&mut out, "rebuilt images", rows);
    let mut rows = vec![vec!["ALIAS".to_string(), "FROM".into(), "TO".into()]];
    rows.extend(plan.alias_moves.iter().map(|m| {
        vec![
            m.alias.clone(),
            match &m.from_tag {
                Some(tag) => format!("{tag} {}", short(&m.from_digest)),
                None => "(new alias)".into(),
            },
            format!("{} {}", m.to_tag, short(&m.to_digest)),
        ]
    }));
    section(
        &mut out,
        "aliases that would move (after their image passes its test)",
        rows,
    );
    let mut rows = vec![vec!["ALIAS".to_string(), "WHY".into()]];
    rows.extend(
        plan.alias_holds
            .iter()
            .map(|h| vec![h.alias.clone(), h.reason.clone()]),
    );
    section(&mut out, "aliases held", rows);
    let mut rows = vec![vec![
        "IMAGE OR ALIAS".to_string(),
        "DRIVER>= NOW".into(),
        "AFTER".into(),
    ]];
    rows.extend(
        plan.driver_rises
            .iter()
            .map(|r| vec![r.subject.clone(), r.from.clone(), r.to.clone()]),
    );
    section(&mut out, "driver minimums that would rise", rows);
    let mut rows = vec![vec!["IMAGE".to_string(), "DIGEST".into(), "ALIASES".into()]];
    rows.extend(plan.removed.iter().map(|r| {
        vec![
            r.tag.clone(),
            short(&r.digest),
            if r.aliases.is_empty() {
                "-".into()
            } else {
                r.aliases.join(", ")
            },
        ]
    }));
    section(
        &mut out,
        "no longer produced (kept in the registry and the manifest)",
        rows,
    );
    writeln!(
        out,
        "{} new, {} rebuilt, {} unchanged, {} alias moves, {} held, {} driver rises, {} no longer produced",
        plan.new_images.len(),
        plan.rebuilt.len(),
        plan.unchanged.len(),
        plan.alias_moves.len(),
        plan.alias_holds.len(),
        plan.driver_rises.len(),
        plan.removed.len()
    )
    .ok();
    out
}

fn change_summary(changes: &[crate::pipeline::plan::InputChange]) -> String {
    changes
        .iter()
        .map(|c| {
            if c.from.len() > 40 || c.to.len() > 40 {
                format!("{} changed", c.input)
            } else {
                format!("{} {} → {}", c.input, c.from, c.to)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The plan as GitHub-flavoured markdown, for a pull-request comment or `$GITHUB_STEP_SUMMARY`.
pub fn plan_markdown(plan: &UpgradePlan) -> String {
    let mut out = String::from("## imagegen plan\n\n");
    writeln!(
        out,
        "**{}** new · **{}** rebuilt · **{}** unchanged · **{}** alias moves · **{}** held · **{}** driver rises · **{}** no longer produced\n",
        plan.new_images.len(),
        plan.rebuilt.len(),
        plan.unchanged.len(),
        plan.alias_moves.len(),
        plan.alias_holds.len(),
        plan.driver_rises.len(),
        plan.removed.len()
    )
    .ok();
    let table = |out: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>| {
        if rows.is_empty() {
            return;
        }
        writeln!(out, "### {title}\n").ok();
        writeln!(out, "| {} |", header.join(" | ")).ok();
        writeln!(out, "|{}", " --- |".repeat(header.len())).ok();
        for row in rows {
            let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
            writeln!(out, "| {} |", cells.join(" | ")).ok();
        }
        out.push('\n');
    };
    let code = |text: &str| format!("`{text}`");
    table(
        &mut out,
        "New images",
        &["image", "driver ≥"],
        plan.new_images
            .iter()
            .map(|c| vec![code(&c.tag), c.driver_min.clone()])
            .collect(),
    );
    table(
        &mut out,
        "Rebuilt images",
        &["image", "why"],
        plan.rebuilt
            .iter()
            .map(|c| vec![code(&c.tag), change_summary(&c.changes)])
            .collect(),
    );
    table(
        &mut out,
        "Alias moves (after the image passes gpu-selftest)",
        &["alias", "from", "to"],
        plan.alias_moves
            .iter()
            .map(|m| {
                vec![
                    code(&m.alias),
                    m.from_tag
                        .as_ref()
                        .map(|t| format!("{} {}", code(t), short(&m.from_digest)))
                        .unwrap_or_else(|| "new alias".into()),
                    format!("{} {}", code(&m.to_tag), short(&m.to_digest)),
                ]
            })
            .collect(),
    );
    table(
        &mut out,
        "Aliases held",
        &["alias", "why"],
        plan.alias_holds
            .iter()
            .map(|h| vec![code(&h.alias), h.reason.clone()])
            .collect(),
    );
    table(
        &mut out,
        "⚠️ Driver minimums that rise",
        &["image or alias", "driver ≥ now", "after"],
        plan.driver_rises
            .iter()
            .map(|r| vec![code(&r.subject), r.from.clone(), r.to.clone()])
            .collect(),
    );
    table(
        &mut out,
        "No longer produced",
        &["image", "digest", "aliases"],
        plan.removed
            .iter()
            .map(|r| vec![code(&r.tag), short(&r.digest), r.aliases.join(", ")])
            .collect(),
    );
    out
}

/// Where `rollback` moves an alias: a recorded image or index.
#[derive(Debug, Clone, PartialEq)]
pub struct RollbackTarget {
    pub repository: String,
    pub tag: String,
    pub digest: String,
}

/// Which recorded digest `rollback` moves `alias` to: `--to` a digest the manifest recorded (an
/// image or a multi-platform index, current or historical), or `--previous` target of the alias.
pub fn rollback_target(
    manifest: &Manifest,
    alias: &str,
    to: Option<&str>,
    previous: bool,
) -> Result<RollbackTarget> {
    let current = manifest.aliases.get(alias).ok_or_else(|| {
        let known: Vec<&str> = manifest.aliases.keys().map(String::as_str).collect();
        anyhow!(
            "alias {alias} is not in the manifest (it records: {})",
            if known.is_empty() {
                "no aliases".to_string()
            } else {
                known.join(", ")
            }
        )
    })?;
    let digest = match (to, previous) {
        (Some(digest), _) => digest.to_string(),
        (None, true) => current
            .history
            .iter()
            .find(|target| target.digest.is_some() && target.digest != current.digest)
            .and_then(|target| target.digest.clone())
            .ok_or_else(|| {
                anyhow!("alias {alias} has no earlier digest in the manifest to go back to")
            })?,
        (None, false) => bail!("say where to: --to DIGEST or --previous"),
    };
    if current.digest.as_deref() == Some(digest.as_str()) {
        bail!("alias {alias} already points at {digest}");
    }
    let image = manifest
        .all_records()
        .find(|r| r.digest.as_deref() == Some(digest.as_str()))
        .map(|r| RollbackTarget {
            repository: r.repository.clone(),
            tag: r.tag.clone(),
            digest: digest.clone(),
        });
    let index = || {
        manifest
            .indexes
            .values()
            .flat_map(|i| std::iter::once(i).chain(i.history.iter()))
            .find(|i| i.digest == digest)
            .map(|i| RollbackTarget {
                repository: i.repository.clone(),
                tag: i.tag.clone(),
                digest: digest.clone(),
            })
    };
    image.or_else(index).ok_or_else(|| {
        let known: Vec<String> = std::iter::once(current.digest.clone()).chain(current.history.iter().map(|t| t.digest.clone())).flatten().collect();
        anyhow!("digest {digest} is not recorded in the manifest; rollback only goes to digests imagegen built and recorded (this alias has had: {})", known.join(", "))
    })
}

pub fn rollback_command(
    alias: &str,
    to: Option<&str>,
    previous: bool,
    manifest_path: &Path,
) -> Result<Outcome> {
    let mut manifest = Manifest::load(manifest_path)?;
    let target = rollback_target(&manifest, alias, to, previous)?;
    let (repository, target_tag, digest) = (target.repository, target.tag, target.digest);
    let from = manifest.aliases[alias].clone();
    let start = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let host = registry_host_of(&repository);
        let credentials = DockerConfig::load_default()?.credentials_for(&host)?;
        let client = RegistryClient::new(&host, credentials);
        let path = repository_path_of(&repository);
        let stored = client
            .get_manifest(path, &digest)
            .await?
            .ok_or_else(|| anyhow!("the registry {host} no longer has {repository}@{digest}; it cannot be restored without a rebuild"))?;
        let written = client.put_manifest(path, alias, &stored.media_type, stored.bytes).await?;
        if written != digest {
            bail!("the registry stored {alias} as {written}, not {digest}");
        }
        Ok::<_, anyhow::Error>(())
    })?;
    manifest.move_alias(alias, &target_tag, Some(digest.clone()), &now_rfc3339());
    manifest.save(manifest_path).with_context(|| {
        format!("the registry moved {alias}, but the manifest could not record it")
    })?;
    println!(
        "{repository}:{alias}: {} ({}) -> {} ({}) in {:.1} s, no rebuild; recorded in {}",
        short(&from.digest),
        from.tag,
        short(&Some(digest)),
        target_tag,
        start.elapsed().as_secs_f64(),
        manifest_path.display()
    );
    Ok(Outcome::Success)
}

/// What changed between two recorded images.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ImageDiff {
    pub fields: Vec<(String, String, String)>,
    pub pip: ListDiff,
    pub os: ListDiff,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ListDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// name, from version, to version
    pub changed: Vec<(String, String, String)>,
}

/// Compares package lists of `name==version` (pip) or `name=version` (dpkg) lines.
pub fn diff_lists(from: &[String], to: &[String]) -> ListDiff {
    let split = |line: &String| -> (String, String) {
        match line
            .split_once("==")
            .or_else(|| line.split_once('='))
            .or_else(|| line.split_once(" @ "))
        {
            Some((name, version)) => (name.to_string(), version.to_string()),
            None => (line.clone(), String::new()),
        }
    };
    let before: BTreeMap<String, String> = from.iter().map(split).collect();
    let after: BTreeMap<String, String> = to.iter().map(split).collect();
    let mut diff = ListDiff::default();
    for (name, version) in &after {
        match before.get(name) {
            None => diff
                .added
                .push(format!("{name} {version}").trim().to_string()),
            Some(old) if old != version => {
                diff.changed
                    .push((name.clone(), old.clone(), version.clone()))
            }
            _ => {}
        }
    }
    for (name, version) in &before {
        if !after.contains_key(name) {
            diff.removed
                .push(format!("{name} {version}").trim().to_string());
        }
    }
    diff
}

pub fn diff_records(from: &ImageRecord, to: &ImageRecord) -> ImageDiff {
    let fields = |r: &ImageRecord| -> Vec<(&'static str, String)> {
        vec![
            ("tag", r.tag.clone()),
            ("digest", r.digest.clone().unwrap_or_default()),
            ("torch", r.torch.clone()),
            ("torchvision", r.torchvision.clone()),
            ("cuda", r.cuda_full.clone()),
            ("cudnn", r.cudnn.clone()),
            ("python", r.python.clone()),
            ("os", r.os.clone()),
            ("driver_min", r.driver_min.clone()),
            ("built_at", r.built_at.clone()),
        ]
    };
    let mut diff = ImageDiff::default();
    for ((name, a), (_, b)) in fields(from).into_iter().zip(fields(to)) {
        if a != b {
            diff.fields.push((name.to_string(), a, b));
        }
    }
    let empty = crate::history::manifest::Packages::default();
    let (a, b) = (
        from.packages.as_ref().unwrap_or(&empty),
        to.packages.as_ref().unwrap_or(&empty),
    );
    diff.pip = diff_lists(&a.pip, &b.pip);
    diff.os = diff_lists(&a.os, &b.os);
    diff
}

pub fn diff_command(from: &str, to: &str, manifest_path: &Path) -> Result<Outcome> {
    let manifest = Manifest::load(manifest_path)?;
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
    ] {
        if missing {
            writeln!(out, "{title}: package lists not recorded for both images").ok();
            continue;
        }
        for name in &list.added {
            writeln!(out, "{title} + {name}").ok();
        }
        for name in &list.removed {
            writeln!(out, "{title} - {name}").ok();
        }
        for (name, x, y) in &list.changed {
            writeln!(out, "{title} ~ {name} {x} -> {y}").ok();
        }
    }
    if out.is_empty() {
        out.push_str("no difference\n");
    }
    print!("{out}");
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_lists_diff_by_name() {
        let from = vec![
            "numpy==2.1.0".to_string(),
            "torch==2.7.0+cu126".into(),
            "sympy==1.13".into(),
        ];
        let to = vec![
            "numpy==2.1.0".to_string(),
            "torch==2.7.1+cu126".into(),
            "triton==3.3.1".into(),
        ];
        let diff = diff_lists(&from, &to);
        assert_eq!(diff.added, vec!["triton 3.3.1"]);
        assert_eq!(diff.removed, vec!["sympy 1.13"]);
        assert_eq!(
            diff.changed,
            vec![(
                "torch".to_string(),
                "2.7.0+cu126".to_string(),
                "2.7.1+cu126".to_string()
            )]
        );
        let os = diff_lists(
            &["libc6=2.39-0ubuntu8".to_string()],
            &["libc6=2.39-0ubuntu8.4".to_string()],
        );
        assert_eq!(os.changed[0].2, "2.39-0ubuntu8.4");
    }
}
