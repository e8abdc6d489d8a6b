//! What `build` prints for people: the plan of `--dry-run` (with its steps), each image's one
//! line when it finishes, the summary table (held aliases and failures grouped by cause, each
//! said once) and what was left undone, each with the command that finishes it. Formatting only:
//! the values come from the plan, the results and the manifest.

use crate::commands::output::{count, table};
use crate::commands::steps::steps_text;
use crate::history::manifest::Manifest;
use crate::model::digest::Digest;
use crate::pipeline::executor::{ImageResult, Status};
use crate::pipeline::planned::Plan;

pub(super) fn one_line(result: &ImageResult) -> String {
    let mut text = format!("{:?}", result.status).to_lowercase();
    if let Some(test) = &result.test {
        text.push_str(&format!(", self-test {}", test.status()));
    }
    if let Some(digest) = &result.digest {
        text.push_str(&format!(", {digest}"));
    }
    if let Some(stage) = &result.failed_stage {
        text.push_str(&format!(" (failed at {stage})"));
    }
    text
}

pub(super) fn plan_table(plan: &Plan, manifest: &Manifest) -> String {
    let mut rows = vec![["IMAGE", "BUILD KEY", "AFTER", "ACTION", "ALIASES"]
        .map(String::from)
        .to_vec()];
    for image in &plan.images {
        let known = manifest
            .images()
            .get(&image.spec.tag)
            .is_some_and(|r| r.build_key == image.build_key);
        rows.push(vec![
            image.reference.clone(),
            image.build_key.hex()[..12].to_string(),
            image
                .spec
                .parent_tag
                .clone()
                .or_else(|| image.depends_on.clone())
                .unwrap_or_else(|| "-".into()),
            if known {
                "reuse if present, else build".into()
            } else {
                "build".into()
            },
            alias_cell(&image.aliases, &image.aliases_blocked),
        ]);
    }
    let mut out = table(&rows);
    out.push_str(&format!(
        "\n{} planned\n",
        count(plan.images.len(), "image")
    ));
    for image in &plan.images {
        for (alias, reason) in &image.aliases_blocked {
            out.push_str(&format!("held: {alias}: {reason}\n"));
        }
    }
    out.push('\n');
    out.push_str(&steps_text(plan));
    out
}

/// The aliases column: those moved (or to move) and those held, both named.
fn alias_cell(moved: &[String], held: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    if !moved.is_empty() {
        parts.push(moved.join(", "));
    }
    if !held.is_empty() {
        parts.push(format!(
            "held: {}",
            held.iter()
                .map(|(alias, _)| alias.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join("; ")
    }
}

pub(super) fn summary_table(results: &[ImageResult]) -> String {
    let mut rows = vec![[
        "IMAGE", "RESULT", "TEST", "DIGEST", "SIZE", "SECONDS", "ALIASES",
    ]
    .map(String::from)
    .to_vec()];
    for result in results {
        let moved = if result.aliases_moved.is_empty() {
            String::new()
        } else {
            format!("moved: {}", result.aliases_moved.join(", "))
        };
        let mut parts = Vec::new();
        if !moved.is_empty() {
            parts.push(moved);
        }
        if !result.aliases_awaiting.is_empty() {
            parts.push(format!(
                "waiting for a GPU test: {}",
                result.aliases_awaiting.join(", ")
            ));
        }
        if !result.aliases_held.is_empty() {
            parts.push(held_text(result));
        }
        let aliases = if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join("; ")
        };
        rows.push(vec![
            result.tag.clone(),
            format!("{:?}", result.status).to_lowercase(),
            result
                .test
                .as_ref()
                .map(|t| t.status().to_string())
                .unwrap_or_else(|| "-".into()),
            result
                .digest
                .as_ref()
                .map(|d| d.short().to_string())
                .unwrap_or_else(|| "-".into()),
            result
                .size
                .as_ref()
                .map(|size| size.to_string())
                .unwrap_or_else(|| "-".into()),
            format!("{:.1}", result.seconds),
            aliases,
        ]);
    }
    let mut out = String::from("\n");
    out.push_str(&table(&rows));
    for result in results.iter().filter(|r| !r.notes.is_empty()) {
        out.push_str(&format!("\n{}: {}\n", result.tag, result.notes.join("; ")));
    }
    // The aliases waiting for a GPU test, once per set of GPUs wanted (a run without GPUs leaves
    // them all alike): waiting is not held, `imagegen test` on such a node moves them.
    let mut waiting: Vec<(&[String], Vec<String>)> = Vec::new();
    for result in results.iter().filter(|r| !r.aliases_awaiting.is_empty()) {
        let named = result
            .aliases_awaiting
            .iter()
            .map(|alias| format!("{alias} ({})", result.tag));
        match waiting
            .iter_mut()
            .find(|(wanted, _)| *wanted == result.awaiting_results_on.as_slice())
        {
            Some((_, aliases)) => aliases.extend(named),
            None => waiting.push((&result.awaiting_results_on, named.collect())),
        }
    }
    for (wanted, aliases) in &waiting {
        out.push_str(&format!(
            "\nwaiting for a GPU test: {}: waits for passing self-test results on {} (matrix.yaml `tests`); `imagegen test` on such a node moves them",
            aliases.join(", "),
            wanted.join(", ")
        ));
    }
    if !waiting.is_empty() {
        out.push('\n');
    }
    // Each reason once, with every alias it holds.
    let mut reasons: Vec<(&str, Vec<String>)> = Vec::new();
    for result in results {
        for (alias, reason) in &result.aliases_held {
            let held = format!("{alias} ({})", result.tag);
            match reasons
                .iter_mut()
                .find(|(known, _)| *known == reason.as_str())
            {
                Some((_, aliases)) => aliases.push(held),
                None => reasons.push((reason, vec![held])),
            }
        }
    }
    for (reason, aliases) in &reasons {
        out.push_str(&format!("\nheld: {}: {reason}", aliases.join(", ")));
    }
    if !reasons.is_empty() {
        out.push('\n');
    }
    // One entry per cause: images that failed with the same error (a missing base image, a
    // registry down) share it, each with its own log.
    let mut causes: Vec<(String, Vec<&ImageResult>)> = Vec::new();
    for result in results.iter().filter(|r| !r.succeeded()) {
        let cause = cause_of(result);
        match causes.iter_mut().find(|(known, _)| *known == cause) {
            Some((_, members)) => members.push(result),
            None => causes.push((cause, vec![result])),
        }
    }
    for (cause, members) in &causes {
        let names: Vec<String> = members
            .iter()
            .map(|r| format!("{} {}", r.tag, format!("{:?}", r.status).to_lowercase()))
            .collect();
        out.push_str(&format!(
            "\n{}:\n  {}\n",
            names.join(", "),
            cause.replace('\n', "\n  ")
        ));
        for log in members.iter().filter_map(|r| full_log_of(r)) {
            out.push_str(&format!("  {log}\n"));
        }
    }
    let unchecked = results
        .iter()
        .filter(|r| r.status == Status::Unchecked)
        .count();
    let failed = results.iter().filter(|r| !r.succeeded()).count() - unchecked;
    out.push_str(&format!(
        "\n{}: {} ok, {}{} not ok\n",
        count(results.len(), "image"),
        results.len() - failed - unchecked,
        if unchecked > 0 {
            format!("{unchecked} unchanged but not checked (registry unreachable), ")
        } else {
            String::new()
        },
        failed
    ));
    out
}

/// A result's error without its `full log:` line, so images failing alike group together; devel
/// images not built because their runtime image failed share one cause.
fn cause_of(result: &ImageResult) -> String {
    let error = result.error.as_deref().unwrap_or("");
    if result.status == Status::Skipped && error.starts_with("not built: the image it builds on") {
        return "not built: the runtime image each builds on failed (above)".into();
    }
    result
        .error
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter(|line| !line.starts_with("full log: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `full log: ...` line of a result's error, if it has one.
fn full_log_of(result: &ImageResult) -> Option<&str> {
    result
        .error
        .as_deref()?
        .lines()
        .find(|line| line.starts_with("full log: "))
}

/// `held (reason): a, b` for one reason, or each alias with its own.
/// The held aliases of an image, by name; their reasons follow the table, each once.
fn held_text(result: &ImageResult) -> String {
    let names: Vec<&str> = result
        .aliases_held
        .iter()
        .map(|(a, _)| a.as_str())
        .collect();
    format!("held (reason below): {}", names.join(", "))
}

/// What this run did not get to: images interrupted or failed before they were pushed, aliases
/// that did not move, and alias moves it began and did not finish (pending in the manifest),
/// each with the command that finishes it.
pub(super) fn left_undone(
    plan: &Plan,
    results: &[ImageResult],
    manifest: &Manifest,
    by: &str,
    push: bool,
) -> String {
    let mut lines = Vec::new();
    let rerun = |name: &str| {
        format!(
            "imagegen build{} --only {name}",
            if push { " --push" } else { "" }
        )
    };
    for result in results {
        let Some(planned) = plan.images.iter().find(|i| i.spec.name == result.name) else {
            continue;
        };
        let unmoved: Vec<&str> = planned
            .aliases
            .iter()
            .filter(|alias| {
                !result.aliases_moved.contains(alias)
                    && !result.aliases_awaiting.contains(alias)
                    && !result.aliases_held.iter().any(|(held, _)| held == *alias)
            })
            .map(String::as_str)
            .collect();
        match result.status {
            Status::Interrupted => lines.push(format!(
                "{}: {}; to finish: {}",
                result.tag,
                result.error.as_deref().unwrap_or("interrupted"),
                rerun(&result.tag)
            )),
            Status::Failed | Status::Skipped if result.digest.is_some() => lines.push(format!(
                "{}: pushed as {}, but aliases not moved: {}; to finish: {}",
                result.tag,
                result
                    .digest
                    .as_ref()
                    .map(Digest::to_string)
                    .unwrap_or_default(),
                if unmoved.is_empty() {
                    "-".to_string()
                } else {
                    unmoved.join(", ")
                },
                rerun(&result.tag)
            )),
            Status::Failed | Status::Skipped => lines.push(format!(
                "{}: not {} (failed at {}); after fixing it: {}",
                result.tag,
                if push { "pushed" } else { "built" },
                result
                    .failed_stage
                    .map_or("an earlier image".to_string(), |stage| stage.to_string()),
                rerun(&result.tag)
            )),
            Status::Unchecked => lines.push(format!(
                "{}: unchanged since its recorded push ({}), not checked: its registry did not answer; once it does: imagegen verify",
                result.tag,
                result
                    .digest
                    .as_ref()
                    .map(Digest::to_string)
                    .unwrap_or_default(),
            )),
            Status::Built | Status::Reused => {}
        }
    }
    for (alias, pending) in manifest.pending_aliases() {
        if pending.by == by {
            lines.push(format!(
                "alias {alias}: the move to {} ({}) is written down as pending, not as done; `imagegen verify --adopt` settles it by what the registry serves, `imagegen build --push` makes it",
                pending.to, pending.tag
            ));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nleft undone:\n");
    for line in lines {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_waiting_for_a_gpu_test_are_waiting_never_held() {
        let mut runtime = ImageResult::new(
            "2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
            "2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
            Status::Built,
        );
        runtime.aliases_awaiting = vec!["2.7-runtime".into(), "latest".into()];
        runtime.awaiting_results_on = vec!["H100".into(), "H200".into()];
        let mut devel = ImageResult::new(
            "2.7.0-cuda12.6-cudnn9-devel-ubuntu24.04",
            "2.7.0-cuda12.6-cudnn9-devel-ubuntu24.04",
            Status::Built,
        );
        devel.aliases_awaiting = vec!["2.7-devel".into()];
        devel.awaiting_results_on = vec!["H100".into(), "H200".into()];
        devel.aliases_held = vec![(
            "latest-devel".into(),
            "held by a rollback until `imagegen release latest-devel`".into(),
        )];
        let summary = summary_table(&[runtime, devel]);
        assert!(
            summary.contains("waiting for a GPU test: 2.7-runtime, latest\n")
                && summary.contains(
                    "waiting for a GPU test: 2.7-devel; held (reason below): latest-devel"
                ),
            "{summary}"
        );
        // One line for both images (the same GPUs wanted), and the rollback's hold on its own.
        assert_eq!(
            summary
                .matches("waits for passing self-test results")
                .count(),
            1,
            "{summary}"
        );
        assert!(
            summary.contains("\nwaiting for a GPU test: 2.7-runtime (2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04), latest (2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04), 2.7-devel (2.7.0-cuda12.6-cudnn9-devel-ubuntu24.04): waits for passing self-test results on H100, H200")
                && summary.contains("\nheld: latest-devel (2.7.0-cuda12.6-cudnn9-devel-ubuntu24.04): held by a rollback"),
            "{summary}"
        );
        assert!(!summary.contains("held: 2.7-runtime"), "{summary}");
    }

    #[test]
    fn the_summary_names_held_aliases_beside_moved_ones() {
        let mut result = ImageResult::new(
            "2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
            "2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04",
            Status::Built,
        );
        result.aliases_moved = vec!["2.7-cuda12.6-runtime-ubuntu24.04".into()];
        result.aliases_held = vec![(
            "2.7-cuda12.6-runtime".into(),
            "2.7-cuda12.6-runtime would move backwards from torch 2.7.1".into(),
        )];
        let summary = summary_table(&[result]);
        assert!(
            summary.contains("moved: 2.7-cuda12.6-runtime-ubuntu24.04; held (reason below): 2.7-cuda12.6-runtime"),
            "{summary}"
        );
        assert!(
            summary.contains("held: 2.7-cuda12.6-runtime (2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04): 2.7-cuda12.6-runtime would move backwards"),
            "{summary}"
        );
        assert_eq!(
            summary.matches("would move backwards").count(),
            1,
            "{summary}"
        );
    }
}
