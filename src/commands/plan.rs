//! `imagegen plan`: what a build would change, compared with the manifest, as a table for a
//! terminal, JSON, or markdown for a pull-request comment, and the steps it would run for each
//! image. It prints the one plan `build` executes (`pipeline::plan::plan`, over every image of
//! the matrix, with the flags `build` would get); this file only prints it. Build keys, which
//! need the build contexts and gpu-selftest binaries, are not part of what it prints
//! (`build --dry-run` shows them).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{PlanArgs, PlanFormat};
use crate::commands::attest::signing_configured;
use crate::commands::outcome::Outcome;
use crate::commands::output::{emit, note, short, table};
use crate::commands::stages::render_project;
use crate::commands::steps::steps_text;
use crate::commands::waiting::waiting_text;
use crate::history::manifest::{human_bytes, Manifest};
use crate::history::pull_cost::{alias_pulls, AliasPull, Pins};
use crate::history::upgrade::{InputChange, UpgradePlan};
use crate::pipeline::plan::{plan, Plan, PlanOptions};
use crate::pipeline::steps::{RunStep, Step};
use crate::project::{load_manifest_if_present, Project};

pub(crate) fn run(project: &Project, args: &PlanArgs) -> Result<Outcome> {
    // A missing manifest is said, not taken silently for an empty one (a wrong directory or
    // --manifest makes every image look new).
    let manifest = match load_manifest_if_present(&args.manifest)? {
        Some(manifest) => manifest,
        None => {
            note(format!(
                "note: no manifest at {}: every image is planned as new (the first `imagegen build --push` writes it; `--manifest FILE` names another)",
                args.manifest.display()
            ));
            Manifest::new()
        }
    };
    // Rendered in memory, not only resolved: what `render` and `build` would refuse (a step
    // fragment, a template) is refused here too, at its file and line.
    let (resolution, _) = render_project(project)?;
    // The review and the steps do not depend on the build contexts: planned without them.
    let plan = plan(
        &resolution.images,
        &resolution.images,
        &BTreeMap::new(),
        &manifest,
        None,
        &project.matrix()?.tests.require,
        &PlanOptions {
            push: args.push,
            test: !args.no_test,
            require_gpu: args.require_gpu,
            move_untested_aliases: args.move_untested_aliases,
            sign: args.push && signing_configured(&args.signing),
            wheels: project.matrix()?.wheels,
        },
    );
    let pulls = alias_pulls(
        &plan.review.alias_moves,
        &manifest,
        &resolution.images,
        &lock_pins(project)?,
    );
    match args.format {
        PlanFormat::Json => emit(format!(
            "{}\n",
            serde_json::to_string_pretty(&PlanJson::of(&plan, &pulls))?
        ))?,
        PlanFormat::Table => emit(format!(
            "{}{}\n{}",
            pulls_text(&pulls),
            plan_text(&plan.review),
            steps_text(&plan)
        ))?,
        PlanFormat::Markdown => emit(format!(
            "{}{}",
            plan_markdown(&plan.review),
            pulls_markdown(&pulls)
        ))?,
    }
    Ok(Outcome::Success)
}

/// What each image's lock pins, by image name (a lock the reader refuses is left out: `render`
/// and `build` say why).
fn lock_pins(project: &Project) -> Result<BTreeMap<String, Pins>> {
    Ok(project
        .locks()?
        .into_iter()
        .filter_map(|(name, text)| {
            let packages = imagegen_python::parse_lock(&text).ok()?;
            Some((
                name,
                packages
                    .into_iter()
                    .map(|package| (package.name, package.version))
                    .collect(),
            ))
        })
        .collect())
}

/// The cost of each alias move for a node that runs the alias's current image, as text.
pub(crate) fn pulls_text(pulls: &[AliasPull]) -> String {
    if pulls.is_empty() {
        return String::new();
    }
    let mut rows = vec![vec![
        "ALIAS".to_string(),
        "FROM".into(),
        "TO".into(),
        "A NODE WITH IT PULLS".into(),
        "NEW TO THE REGISTRY".into(),
    ]];
    rows.extend(pulls.iter().map(|pull| {
        vec![
            pull.alias.clone(),
            pull.from_tag.clone(),
            pull.to_tag.clone(),
            pull.describe(),
            pull.new_to_registry
                .map(|bytes| {
                    let text = human_bytes(bytes);
                    if pull.estimated {
                        format!("about {text}")
                    } else {
                        text
                    }
                })
                .unwrap_or_else(|| "-".into()),
        ]
    }));
    let mut out = String::from(
        "what a node running each alias's image pulls for its new one (Docker Engine; containerd fetches only the blobs it lacks):\n",
    );
    for line in table(&rows).lines() {
        writeln!(out, "  {line}").ok();
    }
    out.push('\n');
    out
}

/// The same as markdown.
fn pulls_markdown(pulls: &[AliasPull]) -> String {
    if pulls.is_empty() {
        return String::new();
    }
    let mut out = String::from("### What a node pulls for each alias move\n\n| alias | from | to | a node with it pulls | new to the registry |\n| --- | --- | --- | --- | --- |\n");
    for pull in pulls {
        writeln!(
            out,
            "| `{}` | `{}` | `{}` | {} | {} |",
            pull.alias,
            pull.from_tag,
            pull.to_tag,
            pull.describe(),
            pull.new_to_registry
                .map(human_bytes)
                .unwrap_or_else(|| "-".into())
        )
        .ok();
    }
    out.push('\n');
    out
}

/// What `imagegen plan --format json` prints (docs/building.md, "The plan"): the review's
/// fields, then the steps of the run (`before`) and of each image in build order (`images`).
#[derive(Serialize)]
struct PlanJson<'a> {
    #[serde(flatten)]
    review: &'a UpgradePlan,
    /// What each alias move costs a node running the alias's current image.
    pulls: &'a [AliasPull],
    before: &'a [RunStep],
    images: Vec<ImageSteps<'a>>,
}

/// One image's steps, as `imagegen plan --format json` prints them.
#[derive(Serialize)]
struct ImageSteps<'a> {
    /// The full tag.
    image: &'a str,
    /// `repository:tag`.
    reference: &'a str,
    /// The image of the plan it is built `FROM`, built first.
    after: Option<&'a str>,
    steps: &'a [Step],
}

impl PlanJson<'_> {
    fn of<'a>(plan: &'a Plan, pulls: &'a [AliasPull]) -> PlanJson<'a> {
        PlanJson {
            review: &plan.review,
            pulls,
            before: &plan.before,
            images: plan
                .images
                .iter()
                .map(|image| ImageSteps {
                    image: &image.spec.tag,
                    reference: &image.reference,
                    after: image.depends_on.as_deref(),
                    steps: &image.steps,
                })
                .collect(),
        }
    }
}

/// The plan as text for a terminal.
pub(crate) fn plan_text(plan: &UpgradePlan) -> String {
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
            .map(|c| vec![c.tag.clone(), c.driver_min.to_string()]),
    );
    section(&mut out, "new images", rows);
    let mut rows = vec![vec!["IMAGE".to_string(), "WHY".into()]];
    rows.extend(
        plan.rebuilt
            .iter()
            .map(|c| vec![c.tag.clone(), change_summary(&c.changes)]),
    );
    section(&mut out, "rebuilt images", rows);
    let mut rows = vec![vec![
        "IMAGE".to_string(),
        "FLAVOUR".into(),
        "FROM".into(),
        "RECORDED FROM".into(),
    ]];
    rows.extend(plan.flavours.iter().map(|f| {
        vec![
            f.tag.clone(),
            f.flavour.clone(),
            f.from.clone(),
            f.recorded.clone().unwrap_or_else(|| "-".into()),
        ]
    }));
    section(
        &mut out,
        "flavour images (built FROM their runtime image, or devel image with `from: devel`)",
        rows,
    );
    let mut rows = vec![vec!["IMAGE".to_string(), "FIX".into()]];
    rows.extend(
        plan.refused_pushes
            .iter()
            .map(|r| vec![r.tag.clone(), r.fix.clone()]),
    );
    section(
        &mut out,
        "pushes build --push would refuse (new content under a pushed full tag)",
        rows,
    );
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
            .map(|r| vec![r.subject.clone(), r.from.to_string(), r.to.to_string()]),
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
    out.push_str(&waiting_text(&plan.waiting_for_tests));
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

fn change_summary(changes: &[InputChange]) -> String {
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
pub(crate) fn plan_markdown(plan: &UpgradePlan) -> String {
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
            // A cell is one line of the table: `|` escaped, line breaks as `<br>`.
            let cells: Vec<String> = row
                .iter()
                .map(|c| {
                    c.replace('|', "\\|")
                        .replace("\r\n", "<br>")
                        .replace('\n', "<br>")
                })
                .collect();
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
            .map(|c| vec![code(&c.tag), c.driver_min.to_string()])
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
        "Flavour images (built FROM their runtime image, or devel image with `from: devel`)",
        &["image", "flavour", "from", "recorded from"],
        plan.flavours
            .iter()
            .map(|f| {
                vec![
                    code(&f.tag),
                    f.flavour.clone(),
                    code(&f.from),
                    f.recorded
                        .as_deref()
                        .map(code)
                        .unwrap_or_else(|| "-".into()),
                ]
            })
            .collect(),
    );
    table(
        &mut out,
        "⚠️ Pushes `build --push` would refuse (new content under a pushed full tag)",
        &["image", "fix"],
        plan.refused_pushes
            .iter()
            .map(|r| vec![code(&r.tag), r.fix.clone()])
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
            .map(|r| vec![code(&r.subject), r.from.to_string(), r.to.to_string()])
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
