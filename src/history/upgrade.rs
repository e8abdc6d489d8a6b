//! The upgrade plan: what `imagegen build` would change, compared with the manifest (new and
//! rebuilt images and which input changed, alias moves from which digest to which, aliases held,
//! driver minimums that rise, images no longer produced), for a person to review before tags
//! move. Pure: specs, a manifest and the guard's holds in, the review out. It is part of the one
//! plan (`pipeline::planned::Plan::review`) that `imagegen plan` prints and `build` executes.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::history::manifest::{Manifest, RecordStatus, Waiting};
use crate::model::digest::Digest;
use crate::model::version::DriverVersion;
use crate::resolve::image::ImageSpec;

/// What `imagegen build` would do, compared with the manifest: the upgrade plan a person reviews
/// before tags move.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct UpgradePlan {
    pub(crate) new_images: Vec<PlannedChange>,
    pub(crate) rebuilt: Vec<PlannedChange>,
    pub(crate) unchanged: Vec<String>,
    pub(crate) alias_moves: Vec<AliasMove>,
    pub(crate) alias_holds: Vec<AliasHold>,
    pub(crate) driver_rises: Vec<DriverRise>,
    pub(crate) removed: Vec<RemovedImage>,
    /// Rebuilt images whose full tag was pushed with other content: `build --push` would refuse
    /// them (full tags are immutable), after building. Each names the fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) refused_pushes: Vec<RefusedPush>,
    /// Images pushed with aliases that wait for self-test results (matrix.yaml `tests`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) waiting_for_tests: Vec<Waiting>,
    /// The new and rebuilt flavour images: which flavour, the image each is built FROM now, and
    /// what the manifest records it was built FROM before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) flavours: Vec<PlannedFlavour>,
}

/// A new or rebuilt flavour image and its parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PlannedFlavour {
    pub(crate) tag: String,
    pub(crate) flavour: String,
    /// The full tag of the image it is built FROM.
    pub(crate) from: String,
    /// What the manifest's record says it was built FROM (`FlavourRecord::describe`); `None` for
    /// a new image or a record written before flavours were recorded.
    pub(crate) recorded: Option<String>,
}

/// A new or rebuilt image; `changes` says which inputs differ from the manifest's record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlannedChange {
    pub(crate) tag: String,
    pub(crate) driver_min: DriverVersion,
    pub(crate) changes: Vec<InputChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct InputChange {
    pub(crate) input: String,
    pub(crate) from: String,
    pub(crate) to: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct AliasMove {
    pub(crate) alias: String,
    pub(crate) from_tag: Option<String>,
    pub(crate) from_digest: Option<Digest>,
    pub(crate) to_tag: String,
    /// Known when the target was already built with the same fingerprint.
    pub(crate) to_digest: Option<Digest>,
}

/// A push `build --push` would refuse: new content under a full tag already pushed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RefusedPush {
    pub(crate) tag: String,
    /// The digest the manifest records under the tag.
    pub(crate) digest: Digest,
    pub(crate) fix: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct AliasHold {
    pub(crate) alias: String,
    pub(crate) reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct DriverRise {
    /// An alias whose target needs a newer driver, or a full tag rebuilt with a newer minimum.
    pub(crate) subject: String,
    pub(crate) from: DriverVersion,
    pub(crate) to: DriverVersion,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct RemovedImage {
    pub(crate) tag: String,
    pub(crate) digest: Option<Digest>,
    pub(crate) aliases: Vec<String>,
}

/// Compares the images the matrix makes now with the manifest. `holds` are the aliases the
/// never-backwards guard holds, with why: evaluated once, by the build plan
/// (`pipeline::plan::plan`), whose part this review is.
pub(crate) fn upgrade_plan(
    specs: &[ImageSpec],
    manifest: &Manifest,
    holds: &BTreeMap<String, String>,
) -> UpgradePlan {
    let mut plan = UpgradePlan::default();
    for spec in specs {
        match manifest
            .images
            .get(&spec.tag)
            .filter(|r| r.status == RecordStatus::Ok)
        {
            None => plan.new_images.push(PlannedChange {
                tag: spec.tag.clone(),
                driver_min: spec.driver_min.clone(),
                changes: Vec::new(),
            }),
            Some(record) if record.fingerprint == spec.fingerprint => {
                plan.unchanged.push(spec.tag.clone())
            }
            Some(record) => {
                let mut changes: Vec<InputChange> = spec
                    .inputs
                    .iter()
                    .filter(|(key, value)| record.inputs.get(*key) != Some(value))
                    .map(|(key, value)| InputChange {
                        input: key.clone(),
                        from: record
                            .inputs
                            .get(key)
                            .cloned()
                            .unwrap_or_else(|| "(not recorded)".into()),
                        to: value.clone(),
                    })
                    .collect();
                // An input the image no longer has (an addition taken out of the matrix).
                changes.extend(
                    record
                        .inputs
                        .iter()
                        .filter(|(key, _)| !spec.inputs.contains_key(*key))
                        .map(|(key, value)| InputChange {
                            input: key.clone(),
                            from: value.clone(),
                            to: "(none)".into(),
                        }),
                );
                if changes.is_empty() {
                    changes.push(InputChange {
                        input: "fingerprint".into(),
                        from: record.fingerprint.to_string(),
                        to: spec.fingerprint.to_string(),
                    });
                }
                if spec.driver_min > record.driver_min {
                    plan.driver_rises.push(DriverRise {
                        subject: spec.tag.clone(),
                        from: record.driver_min.clone(),
                        to: spec.driver_min.clone(),
                    });
                }
                if let Some(digest) = &record.digest {
                    plan.refused_pushes.push(RefusedPush {
                        tag: spec.tag.clone(),
                        digest: digest.clone(),
                        fix: format!(
                            "{} already serves {} (pushed {}); full tags are immutable, so `build --push` would build it and then refuse to push: add {{revision}} to tags.full (`{{torch}}-cuda{{cuda}}-cudnn{{cudnn_major}}-{{variant}}-{{os}}-r{{revision}}`), which takes the next revision the manifest has not used for new content, or undo the change to keep the recorded build",
                            spec.tag,
                            digest.short(),
                            record.built_at
                        ),
                    });
                }
                plan.rebuilt.push(PlannedChange {
                    tag: spec.tag.clone(),
                    driver_min: spec.driver_min.clone(),
                    changes,
                });
            }
        }
        // With several platforms, aliases point at the index, which `publish` moves once.
        let published = spec.index.clone().unwrap_or_else(|| spec.tag.clone());
        for alias in &spec.aliases {
            if plan.alias_moves.iter().any(|m| &m.alias == alias)
                || plan.alias_holds.iter().any(|h| &h.alias == alias)
            {
                continue;
            }
            let current_alias = manifest.aliases.get(alias);
            if let Some(reason) = holds.get(alias) {
                plan.alias_holds.push(AliasHold {
                    alias: alias.clone(),
                    reason: reason.clone(),
                });
                continue;
            }
            let known_digest = match &spec.index {
                None => manifest
                    .images
                    .get(&spec.tag)
                    .filter(|r| r.fingerprint == spec.fingerprint)
                    .and_then(|r| r.digest.clone()),
                Some(index) => {
                    let platforms_unchanged = specs
                        .iter()
                        .filter(|s| s.index.as_ref() == Some(index))
                        .all(|s| {
                            manifest
                                .images
                                .get(&s.tag)
                                .is_some_and(|r| r.fingerprint == s.fingerprint)
                        });
                    manifest
                        .indexes
                        .get(index)
                        .filter(|_| platforms_unchanged)
                        .map(|i| i.digest.clone())
                }
            };
            let unchanged = current_alias.is_some_and(|a| {
                a.tag == published && known_digest.is_some() && a.digest == known_digest
            });
            if unchanged {
                continue;
            }
            // The image is built and recorded as it is, and its alias waits for a self-test on
            // GPUs: no build moves it (`imagegen test`, or a report imported, does), so it is no
            // move of this plan; the review lists it among the aliases waiting for a test. On a
            // machine without GPUs the plan then reaches "nothing to build" instead of
            // announcing the same moves on every run.
            let awaits_test = spec.index.is_none()
                && known_digest.is_some()
                && manifest
                    .images
                    .get(&spec.tag)
                    .is_some_and(|record| record.awaiting_aliases.contains(alias));
            if awaits_test {
                continue;
            }
            let current_driver = current_alias.and_then(|a| {
                manifest
                    .images
                    .get(&a.tag)
                    .map(|r| r.driver_min.clone())
                    .or_else(|| manifest.indexes.get(&a.tag).map(|i| i.driver_min.clone()))
            });
            if let Some(from) = current_driver.filter(|from| spec.driver_min > *from) {
                plan.driver_rises.push(DriverRise {
                    subject: alias.clone(),
                    from,
                    to: spec.driver_min.clone(),
                });
            }
            plan.alias_moves.push(AliasMove {
                alias: alias.clone(),
                from_tag: current_alias.map(|a| a.tag.clone()),
                from_digest: current_alias.and_then(|a| a.digest.clone()),
                to_tag: published.clone(),
                to_digest: known_digest,
            });
        }
    }
    let planned: BTreeSet<&str> = plan
        .new_images
        .iter()
        .chain(&plan.rebuilt)
        .map(|change| change.tag.as_str())
        .collect();
    plan.flavours = specs
        .iter()
        .filter(|spec| planned.contains(spec.tag.as_str()))
        .filter_map(|spec| {
            Some(PlannedFlavour {
                tag: spec.tag.clone(),
                flavour: spec.flavour.as_ref()?.name.clone(),
                from: spec.parent_tag.clone()?,
                recorded: manifest
                    .images
                    .get(&spec.tag)
                    .and_then(|record| record.flavour.as_ref())
                    .map(|flavour| flavour.describe()),
            })
        })
        .collect();
    let produced: BTreeSet<&str> = specs
        .iter()
        .flat_map(|s| std::iter::once(s.tag.as_str()).chain(s.index.as_deref()))
        .collect();
    for (tag, index) in &manifest.indexes {
        if !produced.contains(tag.as_str()) {
            plan.removed.push(RemovedImage {
                tag: tag.clone(),
                digest: Some(index.digest.clone()),
                aliases: index.aliases.clone(),
            });
        }
    }
    for (tag, record) in &manifest.images {
        if !produced.contains(tag.as_str()) && record.status == RecordStatus::Ok {
            plan.removed.push(RemovedImage {
                tag: tag.clone(),
                digest: record.digest.clone(),
                aliases: record.aliases.clone(),
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::record::test_support::{manifest_with, specs_for};

    #[test]
    fn upgrade_plan_reports_latest_moving_to_a_newer_driver() {
        let old = specs_for("2.7.1", "12.6");
        let manifest = manifest_with(
            &old,
            &[("latest", "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04")],
        );
        let new = specs_for("2.8.0", "12.8");
        let plan = upgrade_plan(&new, &manifest, &BTreeMap::new());
        let latest = plan
            .alias_moves
            .iter()
            .find(|m| m.alias == "latest")
            .unwrap();
        assert_eq!(
            latest.from_tag.as_deref(),
            Some("2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04")
        );
        assert_eq!(latest.to_digest, None, "not built yet");
        let rise = plan
            .driver_rises
            .iter()
            .find(|r| r.subject == "latest")
            .unwrap();
        assert_eq!(
            (rise.from.as_str(), rise.to.as_str()),
            ("560.35.05", "570.124.06")
        );
        assert_eq!(
            plan.removed[0].tag,
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"
        );
        assert_eq!(plan.removed[0].aliases, vec!["latest"]);
    }

    #[test]
    fn an_alias_waiting_for_a_gpu_test_of_an_unchanged_image_is_no_move_of_the_plan() {
        let specs = specs_for("2.7.1", "12.6");
        let mut manifest = manifest_with(&specs, &[]);
        let runtime = "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04";
        let aliases = specs
            .iter()
            .find(|spec| spec.tag == runtime)
            .unwrap()
            .aliases
            .clone();
        assert!(!aliases.is_empty());
        // Built and recorded, nothing moved: every alias would be a move of the plan.
        let plan = upgrade_plan(&specs, &manifest, &BTreeMap::new());
        assert!(plan.alias_moves.iter().any(|m| m.to_tag == runtime));
        // The same aliases waiting for a GPU test of the unchanged image: no move of a build.
        manifest.images.get_mut(runtime).unwrap().awaiting_aliases = aliases.clone();
        let plan = upgrade_plan(&specs, &manifest, &BTreeMap::new());
        let moved: Vec<&str> = plan
            .alias_moves
            .iter()
            .filter(|m| m.to_tag == runtime)
            .map(|m| m.alias.as_str())
            .collect();
        assert!(moved.is_empty(), "{moved:?}");
        assert!(plan.new_images.is_empty() && plan.rebuilt.is_empty());
        // A rebuilt image's aliases are the plan's moves again (its new digest is not known).
        let mut changed = specs.clone();
        for spec in &mut changed {
            spec.fingerprint = crate::model::digest::Digest::of(b"changed");
        }
        let plan = upgrade_plan(&changed, &manifest, &BTreeMap::new());
        assert!(plan.alias_moves.iter().any(|m| m.to_tag == runtime));
    }

    #[test]
    fn an_addition_changed_rebuilds_exactly_the_images_that_have_it_and_says_which() {
        let matrix = |apt: &str| {
            crate::resolve::test_images(&format!(
                "registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime, devel]\npip: [einops]\ninclude:\n  - {{os: ubuntu22.04, apt: [{apt}]}}\n"
            ))
        };
        let old = matrix("htop");
        assert_eq!(old.len(), 4);
        let manifest = manifest_with(&old, &[]);
        let new = matrix("htop, git");
        let plan = upgrade_plan(&new, &manifest, &BTreeMap::new());
        let rebuilt: Vec<&str> = plan.rebuilt.iter().map(|c| c.tag.as_str()).collect();
        // The 22.04 runtime image has the addition; its devel image is rebuilt on it (its parent
        // changed), and the 24.04 images stay.
        assert_eq!(
            rebuilt,
            [
                "2.7.1-cuda12.6-cudnn9-runtime-ubuntu22.04",
                "2.7.1-cuda12.6-cudnn9-devel-ubuntu22.04"
            ],
            "{plan:#?}"
        );
        assert_eq!(plan.unchanged.len(), 2, "{plan:#?}");
        assert!(plan.rebuilt[0].changes.contains(&InputChange {
            input: "ext.apt".into(),
            from: "htop".into(),
            to: "htop\ngit".into()
        }));
        assert!(plan.rebuilt[1]
            .changes
            .iter()
            .any(|change| change.input == "parent_fingerprint"));
        // Taken out, the addition is named as gone.
        let plain = crate::resolve::test_images("registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime, devel]\n");
        let plan = upgrade_plan(&plain, &manifest, &BTreeMap::new());
        assert_eq!(plan.rebuilt.len(), 4);
        assert!(plan.rebuilt[0].changes.contains(&InputChange {
            input: "ext.pip".into(),
            from: "einops".into(),
            to: "(none)".into()
        }));
    }

    #[test]
    fn a_flavour_changed_rebuilds_exactly_its_images_and_says_which_part() {
        let matrix = |apt: &str| {
            crate::resolve::test_images(&format!(
                "registry: r.example\nrepository: team/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime]\nuser: {{name: dev, uid: 1000, gid: 1000}}\nflavours:\n  jupyter: {{}}\n  tools: {{apt: [{apt}]}}\n"
            ))
        };
        let old = matrix("git");
        assert_eq!(old.len(), 6);
        let manifest = manifest_with(&old, &[]);
        let plan = upgrade_plan(&matrix("git, make"), &manifest, &BTreeMap::new());
        let rebuilt: Vec<&str> = plan.rebuilt.iter().map(|c| c.tag.as_str()).collect();
        assert_eq!(
            rebuilt,
            [
                "2.7.1-cuda12.6-cudnn9-runtime-ubuntu22.04-tools",
                "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04-tools"
            ],
            "{plan:#?}"
        );
        assert_eq!(plan.unchanged.len(), 4, "{plan:#?}");
        assert_eq!(
            plan.rebuilt[0].changes,
            [InputChange {
                input: "flavour.apt".into(),
                from: "git".into(),
                to: "git\nmake".into()
            }]
        );
        // Each rebuilt flavour image says what it is built FROM, and what its record says it was
        // built FROM (the parent's digest as the manifest recorded it).
        let runtime = "2.7.1-cuda12.6-cudnn9-runtime-ubuntu22.04";
        assert_eq!(plan.flavours.len(), 2, "{plan:#?}");
        assert_eq!(
            plan.flavours[0],
            PlannedFlavour {
                tag: format!("{runtime}-tools"),
                flavour: "tools".into(),
                from: runtime.into(),
                recorded: Some(format!(
                    "tools FROM {runtime}@{}",
                    manifest.images[runtime].digest.clone().unwrap()
                )),
            }
        );
        // New flavour images (no record) say where they come from, and nothing recorded.
        let plan = upgrade_plan(&old, &Manifest::new(), &BTreeMap::new());
        assert_eq!(plan.flavours.len(), 4);
        assert!(plan.flavours.iter().all(|f| f.recorded.is_none()));
        assert!(plan
            .flavours
            .iter()
            .all(|f| f.tag == format!("{}-{}", f.from, f.flavour)));
    }

    /// Every kind of addition (on an include rule) and every part of a flavour: changed alone,
    /// it rebuilds exactly the images that have it (and those built FROM them) and `plan` names
    /// it, on the image that has it, as the one input that changed.
    #[test]
    fn every_addition_and_flavour_part_changed_alone_is_named_and_rebuilds_exactly_its_images() {
        const MATRIX: &str = r#"registry: r.example
repository: team/pytorch
torch: ["2.7"]
cuda: ["12.6"]
os: [ubuntu22.04, ubuntu24.04]
variants: [runtime, devel]
user: {name: dev, uid: 1000, gid: 1000}
include:
  - os: ubuntu22.04
    pip: [einops]
    extra_indexes: [{url: "https://pypi.team.example/simple"}]
    apt: [htop]
    steps: steps/team.Dockerfile
    env: {TEAM: "a"}
    labels: {org.example.team: a}
    user: {name: app, uid: 1001, gid: 1001}
    workdir: /workspace
flavours:
  jupyter: {}
  tools:
    pip: [rich]
    apt: [git]
    steps: steps/tools.Dockerfile
    env: {TOOLS: "a"}
    labels: {org.example.tools: a}
"#;
        const TEAM: &str = "steps/team.Dockerfile";
        const TOOLS: &str = "steps/tools.Dockerfile";
        let resolve = |yaml: &str, team: &str, tools: &str| {
            let matrix = crate::model::matrix::Matrix::parse(yaml, "matrix.yaml").unwrap();
            let options = crate::resolve::image::ResolveOptions {
                fragments: BTreeMap::from([
                    (TEAM.to_string(), Digest::of(team.as_bytes())),
                    (TOOLS.to_string(), Digest::of(tools.as_bytes())),
                ]),
                ..Default::default()
            };
            crate::resolve::resolve(
                &matrix,
                &crate::model::knowledge::Knowledge::test_fixture(),
                &options,
            )
            .images
        };
        let old = resolve(MATRIX, "RUN true\n", "RUN true\n");
        let tags: Vec<&str> = old.iter().map(|spec| spec.tag.as_str()).collect();
        let runtime_22 = "2.7.1-cuda12.6-cudnn9-runtime-ubuntu22.04";
        let runtime_24 = "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04";
        let of = |runtime: &str, suffix: &str| format!("{runtime}{suffix}");
        assert_eq!(tags.len(), 8, "{tags:?}");
        let manifest = manifest_with(&old, &[]);
        // The 22.04 family: its runtime image has the additions; its devel image and flavours are
        // built FROM it.
        let family_22 = vec![
            runtime_22.to_string(),
            of(runtime_22, "-jupyter"),
            of(runtime_22, "-tools"),
            "2.7.1-cuda12.6-cudnn9-devel-ubuntu22.04".to_string(),
        ];
        let tools = vec![of(runtime_22, "-tools"), of(runtime_24, "-tools")];
        let additions = [
            ("ext.pip", "    pip: [einops, rich]\n"),
            (
                "ext.extra_indexes",
                "    extra_indexes: [{url: \"https://pypi2.team.example/simple\"}]\n",
            ),
            ("ext.apt", "    apt: [htop, git]\n"),
            ("ext.steps", "    steps: steps/other.Dockerfile\n"),
            ("ext.env", "    env: {TEAM: \"b\"}\n"),
            ("ext.labels", "    labels: {org.example.team: b}\n"),
            ("ext.user", "    user: {name: app, uid: 1002, gid: 1001}\n"),
            ("ext.workdir", "    workdir: /work\n"),
        ];
        let parts = [
            ("flavour.pip", "    pip: [rich, einops]\n"),
            ("flavour.apt", "    apt: [git, make]\n"),
            ("flavour.steps", "    steps: steps/other.Dockerfile\n"),
            ("flavour.env", "    env: {TOOLS: \"b\"}\n"),
            ("flavour.labels", "    labels: {org.example.tools: b}\n"),
        ];
        /// The matrix and fragments after, the input named, the images rebuilt, and those whose
        /// one changed input it is.
        struct Case {
            yaml: String,
            team: &'static str,
            tools: &'static str,
            input: &'static str,
            rebuilt: Vec<String>,
            named_on: Vec<String>,
        }
        let mut cases: Vec<Case> = Vec::new();
        for (input, line) in additions {
            let key = line.trim_start().split(':').next().unwrap();
            let old_line = MATRIX[MATRIX.find("include:").unwrap()..]
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{key}:")))
                .unwrap();
            let yaml = MATRIX.replacen(&format!("{old_line}\n"), line, 1);
            assert_ne!(yaml, MATRIX, "{input}");
            cases.push(Case {
                yaml,
                team: "RUN true\n",
                tools: "RUN true\n",
                input,
                rebuilt: family_22.clone(),
                named_on: vec![runtime_22.to_string()],
            });
        }
        for (input, line) in parts {
            let key = line.trim_start().split(':').next().unwrap();
            let flavours = MATRIX.find("flavours:").unwrap();
            let old_line = MATRIX[flavours..]
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{key}:")))
                .unwrap();
            let yaml = format!(
                "{}{}",
                &MATRIX[..flavours],
                MATRIX[flavours..].replacen(&format!("{old_line}\n"), line, 1)
            );
            assert_ne!(yaml, MATRIX, "{input}");
            cases.push(Case {
                yaml,
                team: "RUN true\n",
                tools: "RUN true\n",
                input,
                rebuilt: tools.clone(),
                named_on: tools.clone(),
            });
        }
        // A fragment's text, its path unchanged.
        cases.push(Case {
            yaml: MATRIX.to_string(),
            team: "RUN false\n",
            tools: "RUN true\n",
            input: "ext.steps",
            rebuilt: family_22.clone(),
            named_on: vec![runtime_22.to_string()],
        });
        cases.push(Case {
            yaml: MATRIX.to_string(),
            team: "RUN true\n",
            tools: "RUN false\n",
            input: "flavour.steps",
            rebuilt: tools.clone(),
            named_on: tools.clone(),
        });
        for Case {
            yaml,
            team,
            tools,
            input,
            rebuilt: wanted,
            named_on,
        } in cases
        {
            let new = resolve(&yaml, team, tools);
            let plan = upgrade_plan(&new, &manifest, &BTreeMap::new());
            let mut rebuilt: Vec<String> = plan.rebuilt.iter().map(|c| c.tag.clone()).collect();
            rebuilt.sort();
            let mut wanted = wanted.clone();
            wanted.sort();
            assert_eq!(rebuilt, wanted, "{input}: {plan:#?}");
            assert!(plan.new_images.is_empty(), "{input}: {plan:#?}");
            for change in &plan.rebuilt {
                let named: Vec<&str> = change.changes.iter().map(|c| c.input.as_str()).collect();
                if named_on.contains(&change.tag) {
                    // The image that has it: that input alone.
                    assert_eq!(named, [input], "{input}: {change:#?}");
                } else {
                    // Those built FROM it: their parent changed.
                    assert!(
                        named.contains(&"parent_fingerprint"),
                        "{input}: {change:#?}"
                    );
                }
            }
        }
    }

    #[test]
    fn upgrade_plan_says_which_input_changed() {
        let old = specs_for("2.7.1", "12.6");
        let mut manifest = manifest_with(&old, &[]);
        let mut record = manifest.images.values().next().unwrap().clone();
        record
            .inputs
            .insert("wheel_index".into(), "https://old.example/whl/cu126".into());
        record.fingerprint = Digest::of(b"sha256:old");
        manifest.images.insert(record.tag.clone(), record);
        let plan = upgrade_plan(&old, &manifest, &BTreeMap::new());
        assert_eq!(plan.rebuilt.len(), 1);
        assert_eq!(
            plan.rebuilt[0].changes,
            vec![InputChange {
                input: "wheel_index".into(),
                from: "https://old.example/whl/cu126".into(),
                to: "https://download.pytorch.org/whl/cu126".into()
            }]
        );
    }
}
