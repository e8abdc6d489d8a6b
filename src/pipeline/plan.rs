//! The build plan: which images to build (selected by `--only` and `--shard`), in which order
//! (devel after the runtime it builds on), with which build key, which aliases each may move
//! once it passed its test, and the steps ([`Step`]) the executor runs for each, from the
//! build's flags ([`PlanOptions`]). Pure: computed from values before the first Docker call, so
//! `imagegen build --dry-run` and `imagegen plan` can always print it.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::aliases::alias_guard;
use crate::history::manifest::{Manifest, RecordStatus, TestStatus};
use crate::history::test_results::{judge, results_of, waiting};
use crate::history::upgrade::upgrade_plan;
use crate::model::digest::Digest;
use crate::model::matrix::WheelSource;
pub(crate) use crate::pipeline::planned::{Plan, PlannedImage};
pub(crate) use crate::pipeline::steps::PlanOptions;
use crate::pipeline::steps::{AliasVia, RunStep, Step, Wheels};
use crate::render::venv_on_host;
use crate::resolve::fingerprint::fingerprint;
use crate::resolve::image::ImageSpec;
pub(crate) use crate::resolve::select::Shard;
pub(crate) use crate::resolve::select::{matches_filter, select_for_build, select_named};

/// The one plan: for `selected` images (of the matrix's `all`), each one's build key (from its
/// fingerprint, the sha256 of its build context and its parent's build key), what the manifest
/// knows of that build key (tested before, pushed before), and the aliases it may move; and the
/// review of what that changes over the whole matrix (`history::upgrade`). The never-backwards
/// guard ([`alias_guard`]) is evaluated here once per alias, and both parts read that verdict.
/// Everything a build decides before its first Docker call is here, down to the steps each
/// image goes through with `options`, and `imagegen plan` prints this same value.
pub(crate) fn plan(
    all: &[ImageSpec],
    selected: &[ImageSpec],
    context_digests: &BTreeMap<String, Digest>,
    manifest: &Manifest,
    selftest_baseline: Option<&Digest>,
    require: &[String],
    options: &PlanOptions,
) -> Plan {
    let holds = alias_holds(all.iter().chain(selected), manifest);
    let mut build_keys: BTreeMap<String, Digest> = BTreeMap::new();
    let mut images = Vec::new();
    for spec in selected {
        // The hashed text is the same as before digests were typed, so recorded build keys hold.
        let mut inputs: BTreeMap<&str, String> = BTreeMap::new();
        inputs.insert("fingerprint", spec.fingerprint.to_string());
        inputs.insert(
            "context",
            context_digests
                .get(&spec.name)
                .map(|digest| digest.hex().to_string())
                .unwrap_or_default(),
        );
        if let Some(parent) = &spec.parent {
            inputs.insert(
                "parent",
                build_keys
                    .get(parent)
                    .map(Digest::to_string)
                    .unwrap_or_default(),
            );
        }
        let build_key = fingerprint(&inputs);
        build_keys.insert(spec.name.clone(), build_key.clone());
        let recorded = manifest
            .images()
            .get(&spec.tag)
            .filter(|r| r.build_key == build_key && r.status == RecordStatus::Ok);
        let (aliases, aliases_blocked) = spec.aliases.iter().cloned().fold(
            (Vec::new(), Vec::new()),
            |(mut allowed, mut blocked), alias| {
                match holds.get(&alias) {
                    Some(reason) => blocked.push((alias, reason.clone())),
                    None => allowed.push(alias),
                }
                (allowed, blocked)
            },
        );
        images.push(PlannedImage {
            spec: spec.clone(),
            reference: format!("{}:{}", spec.repository, spec.tag),
            build_key,
            depends_on: spec.parent.clone(),
            aliases,
            // A pass counts only against the same baseline (or none), so a new fleet baseline
            // tests reused images again.
            passed_before: recorded.is_some_and(|r| {
                r.selftest.as_ref().is_some_and(|t| {
                    t.status == TestStatus::Pass && t.baseline.as_ref() == selftest_baseline
                })
            }),
            selftest_baseline: selftest_baseline.cloned(),
            recorded_digest: recorded.and_then(|r| r.digest.clone()),
            recorded_size: recorded.and_then(|r| r.size.clone()),
            aliases_blocked,
            tests_missing: judge(require, &recorded.map(results_of).unwrap_or_default()).missing,
            steps: Vec::new(),
        });
    }
    for index in 0..images.len() {
        let built_on = images
            .iter()
            .any(|other| other.spec.parent.as_ref() == Some(&images[index].spec.name));
        images[index].steps = image_steps(&images[index], options, built_on);
    }
    let mut review = upgrade_plan(all, manifest, &holds);
    review.waiting_for_tests = waiting(manifest, require);
    Plan {
        before: run_steps(&images, options),
        images,
        review,
    }
}

/// The steps of the run before any image's: the wheels of every image fetched at once (where
/// the Docker build does not download them), and, when pushing, the alias moves earlier runs
/// left pending settled.
fn run_steps(images: &[PlannedImage], options: &PlanOptions) -> Vec<RunStep> {
    let mut steps = Vec::new();
    if options.wheels != WheelSource::Index && !images.is_empty() {
        steps.push(RunStep::FetchWheels {
            images: images.iter().map(|image| image.spec.name.clone()).collect(),
        });
    }
    if options.push && !images.is_empty() {
        let repositories: BTreeSet<String> = images
            .iter()
            .map(|image| image.spec.repository.clone())
            .collect();
        steps.push(RunStep::SettleAliasMoves {
            repositories: repositories.into_iter().collect(),
        });
    }
    steps
}

/// The steps of one image with `options`, in the order they run; `built_on` when another image
/// of the plan is built `FROM` it.
fn image_steps(image: &PlannedImage, options: &PlanOptions, built_on: bool) -> Vec<Step> {
    let spec = &image.spec;
    // Held from the start: whatever happens later, these never move in this run.
    let mut steps: Vec<Step> = image
        .aliases_blocked
        .iter()
        .map(|(alias, reason)| Step::HoldAlias {
            alias: alias.clone(),
            reason: reason.clone(),
        })
        .collect();
    steps.push(Step::FindEarlierBuild {
        in_registry: image.recorded_digest.clone().filter(|_| options.push),
    });
    steps.push(Step::ResolveBase {
        base: spec.base_image.clone(),
        // Only a base image outside the plan is pinned; a parent is this plan's own build.
        pinned_id: spec.base_image_id.clone().filter(|_| spec.parent.is_none()),
        parent: spec.parent.clone(),
    });
    let wheels = if venv_on_host(options.wheels, spec) {
        Wheels::Host
    } else if options.wheels == WheelSource::Index {
        Wheels::Index
    } else {
        Wheels::Cache
    };
    // A venv made on the host is pushed from memory, not loaded, where nothing of this run
    // runs the image here: pushed, untested, and no image of the plan built `FROM` it.
    let runs_here = options.test || built_on || !options.push;
    let load = wheels != Wheels::Host || runs_here;
    steps.push(Step::Build { wheels, load });
    steps.push(Step::ReadPackages);
    steps.push(Step::SelfTest {
        run: options.test,
        require_gpu: options.require_gpu,
        baseline: image.selftest_baseline.clone(),
    });
    if options.push {
        steps.push(Step::ClaimTag);
        steps.push(Step::Push);
        steps.push(Step::RecordPush);
        if options.sign {
            steps.push(Step::Attest);
        }
    }
    match &spec.index {
        Some(index) => steps.extend(image.aliases.iter().map(|alias| Step::HoldAlias {
            alias: alias.clone(),
            reason: format!(
                "moved by `imagegen publish` with the {index} index, once every platform passed"
            ),
        })),
        None if !image.aliases.is_empty() => {
            steps.push(Step::JudgeAliases {
                move_untested: options.move_untested_aliases,
                wait_for: image.tests_missing.clone(),
                untested_wait: options.push,
            });
            let via = if options.push {
                AliasVia::Registry
            } else {
                AliasVia::Daemon
            };
            steps.extend(image.aliases.iter().map(|alias| Step::MoveAlias {
                alias: alias.clone(),
                via,
            }));
        }
        None => {}
    }
    steps.push(Step::Record);
    steps
}

/// The aliases held, with why: by a rollback (until `imagegen release`), or by the
/// never-backwards guard; each alias judged once, for the first image (or index) that takes it.
fn alias_holds<'a>(
    specs: impl Iterator<Item = &'a ImageSpec>,
    manifest: &Manifest,
) -> BTreeMap<String, String> {
    let mut judged = BTreeSet::new();
    let mut holds = BTreeMap::new();
    for spec in specs {
        let published = spec.index.clone().unwrap_or_else(|| spec.tag.clone());
        for alias in &spec.aliases {
            if !judged.insert(alias.clone()) {
                continue;
            }
            if let Some(reason) = manifest.alias_hold(alias).or_else(|| {
                alias_guard(alias, manifest.alias_target(alias), &spec.torch, &published)
            }) {
                holds.insert(alias.clone(), reason);
            }
        }
    }
    holds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::record::test_support::{manifest_with, specs_for};
    use crate::resolve::select::select;

    fn specs() -> Vec<ImageSpec> {
        crate::resolve::test_images("registry: r.example\nrepository: t/p\ntorch: [\"2.7\", \"2.8\"]\ncuda: [\"12.6\", \"12.8\"]\nos: [ubuntu22.04, ubuntu24.04]\n")
    }

    #[test]
    fn shards_partition_whole_families_deterministically() {
        let all = specs();
        let mut seen = BTreeSet::new();
        let mut devels_checked = 0;
        for index in 1..=3 {
            let part = select(&all, None, Some(Shard { index, count: 3 }));
            for spec in &part {
                assert!(
                    seen.insert(spec.name.clone()),
                    "{} in two shards",
                    spec.name
                );
                if let Some(parent) = &spec.parent {
                    assert!(
                        part.iter().any(|s| &s.name == parent),
                        "devel without its runtime in the shard"
                    );
                    devels_checked += 1;
                }
            }
            assert_eq!(
                part.iter().map(|s| &s.name).collect::<Vec<_>>(),
                select(&all, None, Some(Shard { index, count: 3 }))
                    .iter()
                    .map(|s| &s.name)
                    .collect::<Vec<_>>()
            );
        }
        assert_eq!(seen.len(), all.len(), "every image in exactly one shard");
        assert_eq!(
            devels_checked,
            all.len() / 2,
            "each devel image was checked"
        );
    }

    #[test]
    fn only_pulls_in_the_runtime_a_devel_needs_and_orders_it_first() {
        let selected = select(
            &specs(),
            Some("2.8.0-cuda12.8-cudnn9-devel-ubuntu24.04"),
            None,
        );
        let names: Vec<&str> = selected.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04",
                "2.8.0-cuda12.8-cudnn9-devel-ubuntu24.04"
            ]
        );
        assert_eq!(select(&specs(), Some("2.7*runtime*24.04"), None).len(), 2);
    }

    #[test]
    fn only_takes_aliases_and_repository_qualified_names() {
        let all = specs();
        let names = |only: &str| -> Vec<String> {
            select(&all, Some(only), None)
                .into_iter()
                .map(|s| s.name)
                .collect()
        };
        assert_eq!(
            names("2.8-cuda12.8-runtime"),
            vec!["2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04"]
        );
        assert_eq!(
            names("latest"),
            names("2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04")
        );
        assert_eq!(
            names("r.example/t/p:2.7-cuda12.6-devel"),
            vec![
                "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04",
                "2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04"
            ]
        );
        assert_eq!(names("r.example/t/p:2.7*runtime*24.04").len(), 2);
    }

    #[test]
    fn select_named_takes_aliases_without_parents_and_says_what_is_close() {
        let all = specs();
        let names = |only: Option<&str>| -> Vec<String> {
            select_named(&all, only)
                .unwrap()
                .into_iter()
                .map(|s| s.name.clone())
                .collect()
        };
        assert_eq!(names(None).len(), all.len());
        assert_eq!(
            names(Some("r.example/t/p:2.7-cuda12.6-devel")),
            vec!["2.7.1-cuda12.6-cudnn9-devel-ubuntu24.04"]
        );
        assert_eq!(
            names(Some("latest")),
            vec!["2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04"]
        );
        assert_eq!(names(Some("2.7*runtime*24.04")).len(), 2);
        let error = select_named(&all, Some("2.8-cuda12.8-runtme"))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("--only \"2.8-cuda12.8-runtme\" names no image of the matrix\nhint: closest tags and aliases: 2.8-cuda12.8-runtime,"),
            "{error}"
        );
    }

    #[test]
    fn selecting_nothing_says_why() {
        let all = specs();
        let error = select_for_build(&all, Some("2.8-cuda12.8-runtme"), None, None)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("--only \"2.8-cuda12.8-runtme\" names no image of the matrix\nhint: closest tags and aliases: 2.8-cuda12.8-runtime,"),
            "{error}"
        );
        assert!(!error.contains("shard"), "no shard was given: {error}");
        let shard = Shard { index: 1, count: 8 };
        let in_other = select(
            &all,
            Some("2.8.0-cuda12.8-cudnn9-runtime-ubuntu24.04"),
            None,
        );
        let home = (1..=8)
            .find(|index| {
                !select(
                    &all,
                    Some(&in_other[0].name),
                    Some(Shard {
                        index: *index,
                        count: 8,
                    }),
                )
                .is_empty()
            })
            .unwrap();
        let other = Shard {
            index: if home == 1 { 2 } else { 1 },
            ..shard
        };
        let error = select_for_build(&all, Some(&in_other[0].name), Some(other), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("but none of them is in shard"), "{error}");
        let error = select_for_build(&all, None, Some(Shard { index: 9, count: 9 }), None)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("shard 9/9 has no image: the matrix makes 8 image families"),
            "{error}"
        );
    }

    #[test]
    fn filters() {
        assert!(matches_filter(
            "cuda12.6",
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"
        ));
        assert!(matches_filter(
            "2.7*-runtime-*",
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"
        ));
        assert!(!matches_filter(
            "2.8*",
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"
        ));
        assert!(matches_filter(
            "*24.04",
            "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04"
        ));
    }

    #[test]
    fn shard_parsing() {
        assert_eq!(
            "2/4".parse::<Shard>().unwrap(),
            Shard { index: 2, count: 4 }
        );
        for bad in ["0/4", "5/4", "1/0", "x", "1-2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn build_keys_cover_context_and_parent() {
        let selected = select(
            &specs(),
            Some("2.8.0-cuda12.8-cudnn9-devel-ubuntu24.04"),
            None,
        );
        let mut digests = BTreeMap::new();
        digests.insert(selected[0].name.clone(), Digest::of(b"a"));
        digests.insert(selected[1].name.clone(), Digest::of(b"b"));
        let first = plan(
            &selected,
            &selected,
            &digests,
            &Manifest::new(),
            None,
            &[],
            &PlanOptions::default(),
        );
        digests.insert(selected[0].name.clone(), Digest::of(b"changed"));
        let second = plan(
            &selected,
            &selected,
            &digests,
            &Manifest::new(),
            None,
            &[],
            &PlanOptions::default(),
        );
        assert_ne!(first.images[0].build_key, second.images[0].build_key);
        assert_ne!(
            first.images[1].build_key, second.images[1].build_key,
            "a changed runtime rebuilds its devel"
        );
        assert_eq!(
            first.images[1].depends_on.as_deref(),
            Some(selected[0].name.as_str())
        );
    }
    #[test]
    fn aliases_never_move_backwards() {
        let newer = specs_for("2.7.1", "12.6");
        let manifest = manifest_with(
            &newer,
            &[(
                "2.7-cuda12.6-runtime",
                "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04",
            )],
        );
        let older = specs_for("2.7.0", "12.6");
        let plan = plan(
            &older,
            &older,
            &BTreeMap::new(),
            &manifest,
            None,
            &[],
            &PlanOptions::default(),
        );
        assert!(!plan.images[0]
            .aliases
            .contains(&"2.7-cuda12.6-runtime".to_string()));
        assert!(plan.images[0].aliases_blocked[0]
            .1
            .contains("would move backwards from torch 2.7.1"));
        // The review `imagegen plan` prints is the same plan's: the same verdict.
        assert!(plan
            .review
            .alias_holds
            .iter()
            .any(|h| h.alias == "2.7-cuda12.6-runtime"));
    }

    /// The names of each image's steps with `options`.
    fn step_names(options: &PlanOptions) -> Vec<Vec<&'static str>> {
        let selected = select(
            &specs(),
            Some("2.8.0-cuda12.8-cudnn9-devel-ubuntu24.04"),
            None,
        );
        plan(
            &selected,
            &selected,
            &BTreeMap::new(),
            &Manifest::new(),
            None,
            &[],
            options,
        )
        .images
        .iter()
        .map(|image| image.steps.iter().map(Step::name).collect())
        .collect()
    }

    #[test]
    fn the_steps_follow_the_flags_of_the_build() {
        let plain = step_names(&PlanOptions::default());
        assert_eq!(
            plain[0],
            [
                "find-earlier-build",
                "resolve-base",
                "build",
                "read-packages",
                "self-test",
                "judge-aliases",
                "move-alias",
                "move-alias",
                "move-alias",
                "record"
            ]
        );
        let pushed = step_names(&PlanOptions {
            push: true,
            sign: true,
            ..PlanOptions::default()
        });
        assert_eq!(
            pushed[1],
            [
                "find-earlier-build",
                "resolve-base",
                "build",
                "read-packages",
                "self-test",
                "claim-tag",
                "push",
                "record-push",
                "attest",
                "judge-aliases",
                "move-alias",
                "move-alias",
                "move-alias",
                "record"
            ]
        );
        // Signing only where pushing: nothing is signed that is not in a registry.
        let unsigned = step_names(&PlanOptions {
            push: true,
            ..PlanOptions::default()
        });
        assert!(!unsigned[0].contains(&"attest"));
        let selected = select(
            &specs(),
            Some("2.8.0-cuda12.8-cudnn9-devel-ubuntu24.04"),
            None,
        );
        let planned = plan(
            &selected,
            &selected,
            &BTreeMap::new(),
            &Manifest::new(),
            None,
            &[],
            &PlanOptions {
                push: true,
                wheels: WheelSource::Index,
                ..PlanOptions::default()
            },
        );
        assert_eq!(
            planned.before,
            [RunStep::SettleAliasMoves {
                repositories: vec!["r.example/t/p".into()]
            }],
            "no wheels fetched on the host for `wheels: index`"
        );
        assert!(matches!(
            &planned.images[1].steps[1],
            Step::ResolveBase { parent: Some(parent), pinned_id: None, .. } if *parent == selected[0].name
        ));
        assert!(planned.images[0].steps.iter().all(|step| match step {
            Step::MoveAlias { via, .. } => *via == AliasVia::Registry,
            Step::Build { wheels, load } => *wheels == Wheels::Index && *load,
            _ => true,
        }));
        let defaults = plan(
            &selected,
            &selected,
            &BTreeMap::new(),
            &Manifest::new(),
            None,
            &[],
            &PlanOptions::default(),
        );
        assert_eq!(
            defaults.before,
            [RunStep::FetchWheels {
                images: selected.iter().map(|s| s.name.clone()).collect()
            }]
        );
    }

    /// A venv made on the host is loaded only where the run runs something of the image here:
    /// not when it pushes untested and no image of the plan is built on it.
    #[test]
    fn a_venv_made_on_the_host_is_left_unloaded_only_where_nothing_runs_it_here() {
        let specs = crate::resolve::test_images(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
        );
        let build_of = |selected: &[ImageSpec], options: &PlanOptions| -> Vec<Step> {
            plan(
                &specs,
                selected,
                &BTreeMap::new(),
                &Manifest::new(),
                None,
                &[],
                options,
            )
            .images
            .iter()
            .flat_map(|image| image.steps.iter().filter(|s| s.name() == "build").cloned())
            .collect()
        };
        let host_pushed_untested = PlanOptions {
            push: true,
            test: false,
            wheels: WheelSource::Host,
            ..PlanOptions::default()
        };
        let both = select(&specs, None, None);
        // The devel image is built FROM the runtime one: loaded; the devel image installs with
        // pip over it (its wheels in the context) and is loaded as every such image is.
        assert_eq!(
            build_of(&both, &host_pushed_untested),
            [
                Step::Build {
                    wheels: Wheels::Host,
                    load: true
                },
                Step::Build {
                    wheels: Wheels::Cache,
                    load: true
                }
            ]
        );
        let runtime_only: Vec<ImageSpec> = both
            .iter()
            .filter(|s| s.parent.is_none())
            .cloned()
            .collect();
        assert_eq!(
            build_of(&runtime_only, &host_pushed_untested),
            [Step::Build {
                wheels: Wheels::Host,
                load: false
            }]
        );
        let tested = PlanOptions {
            test: true,
            ..host_pushed_untested
        };
        assert_eq!(
            build_of(&runtime_only, &tested),
            [Step::Build {
                wheels: Wheels::Host,
                load: true
            }]
        );
    }

    /// Aliases the plan holds are held from the first step, with why; those of a platform image
    /// of an index are left to `imagegen publish` where the others would move.
    #[test]
    fn held_aliases_are_steps_with_their_reason() {
        let newer = specs_for("2.7.1", "12.6");
        let manifest = manifest_with(
            &newer,
            &[(
                "2.7-cuda12.6-runtime",
                "2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04",
            )],
        );
        let older = specs_for("2.7.0", "12.6");
        let plan = plan(
            &older,
            &older,
            &BTreeMap::new(),
            &manifest,
            None,
            &[],
            &PlanOptions::default(),
        );
        assert!(matches!(
            &plan.images[0].steps[0],
            Step::HoldAlias { alias, reason } if alias == "2.7-cuda12.6-runtime" && reason.contains("backwards")
        ));
        assert!(!plan.images[0].steps.iter().any(|step| matches!(
            step,
            Step::MoveAlias { alias, .. } if alias == "2.7-cuda12.6-runtime"
        )));
    }
}
