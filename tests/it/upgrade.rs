//! `imagegen plan`, `rollback`, `diff`, tag immutability and never-backwards aliases against the
//! real Docker daemon and a real registry on 127.0.0.1 (the build tests' fixture).

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};
use crate::support::Registry;
use serde_json::Value;

const ALIAS: &str = "2.7-cuda12.6-runtime";

fn plan_json(project: &Project) -> Value {
    let output = project
        .imagegen(&["plan", "--format", "json"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_upgrade_roll_back_and_refuse_to_go_backwards() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let client = project.client(None);

    // Nothing built yet: every image is new and every alias a new alias.
    let plan = plan_json(&project);
    assert_eq!(plan["new_images"].as_array().unwrap().len(), 4);
    let moves = plan["alias_moves"].as_array().unwrap();
    assert!(
        !moves.is_empty() && moves.iter().all(|m| m["from_tag"].is_null()),
        "{plan:#}"
    );

    assert_code(&project.build(&["--push"]), 0);
    let old_tag = project.tag("2.7.0", "runtime");
    let old_digest = project.manifest()["images"][&old_tag]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest = project.manifest();
    assert_eq!(
        manifest["images"][&old_tag]["packages"]["pip"],
        serde_json::json!(["numpy==2.1.0", "torch==2.7.0+cu126"])
    );
    assert_eq!(
        manifest["images"][&old_tag]["packages"]["os"],
        serde_json::json!(["libc6=2.39-0ubuntu8"])
    );

    // After the build, the plan is empty.
    let plan = plan_json(&project);
    assert_eq!(plan["unchanged"].as_array().unwrap().len(), 4, "{plan}");
    assert!(plan["alias_moves"].as_array().unwrap().is_empty(), "{plan}");

    // A new patch: the plan names new images, the alias move with its current digest, and what
    // is no longer produced; markdown is ready for a pull request.
    project.edit_matrix(
        "torch: [\"2.7.0\", \"2.8.0\"]",
        "torch: [\"2.7.1\", \"2.8.0\"]",
    );
    let plan = plan_json(&project);
    let new: Vec<&str> = plan["new_images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tag"].as_str().unwrap())
        .collect();
    assert_eq!(
        new,
        vec![
            project.tag("2.7.1", "runtime"),
            project.tag("2.7.1", "devel")
        ]
    );
    let alias_move = plan["alias_moves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["alias"] == ALIAS)
        .unwrap();
    assert_eq!(alias_move["from_tag"], old_tag.as_str());
    assert_eq!(alias_move["from_digest"], old_digest.as_str());
    assert_eq!(alias_move["to_tag"], project.tag("2.7.1", "runtime"));
    let removed: Vec<&str> = plan["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tag"].as_str().unwrap())
        .collect();
    assert!(removed.contains(&old_tag.as_str()));
    let markdown = project
        .imagegen(&["plan", "--format", "markdown"])
        .output()
        .unwrap();
    let markdown = String::from_utf8(markdown.stdout).unwrap();
    assert!(markdown.starts_with("## imagegen plan\n"), "{markdown}");
    assert!(
        markdown.contains(&format!("| `{ALIAS}` | `{old_tag}` sha256:")),
        "{markdown}"
    );

    assert_code(&project.build(&["--push"]), 0);
    let new_tag = project.tag("2.7.1", "runtime");
    let new_digest = project.manifest()["images"][&new_tag]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        client
            .manifest_digest(&project.repository, ALIAS)
            .await
            .unwrap()
            .as_ref()
            .map(|digest| digest.as_str()),
        Some(new_digest.as_str())
    );

    // What changed between the two images, package by package.
    let diff = project
        .imagegen(&["diff", &old_tag, ALIAS])
        .output()
        .unwrap();
    assert_code(&diff, 0);
    let diff = String::from_utf8(diff.stdout).unwrap();
    assert!(diff.contains("torch: 2.7.0 -> 2.7.1"), "{diff}");
    assert!(
        diff.contains("pip ~ torch 2.7.0+cu126 -> 2.7.1+cu126"),
        "{diff}"
    );
    assert!(
        !diff.contains("numpy"),
        "unchanged packages are not listed: {diff}"
    );

    // Rollback: the alias goes back to the recorded digest in the registry, without a rebuild.
    let output = project
        .imagegen(&["rollback", ALIAS, "--previous"])
        .output()
        .unwrap();
    assert_code(&output, 0);
    assert!(text(&output).contains("no rebuild"), "{}", text(&output));
    assert_eq!(
        client
            .manifest_digest(&project.repository, ALIAS)
            .await
            .unwrap()
            .as_ref()
            .map(|digest| digest.as_str()),
        Some(old_digest.as_str())
    );
    let manifest = project.manifest();
    assert_eq!(manifest["aliases"][ALIAS]["tag"], old_tag.as_str());
    assert_eq!(
        manifest["aliases"][ALIAS]["history"][0]["digest"],
        new_digest.as_str()
    );
    // And forward again, by digest.
    assert_code(
        &project
            .imagegen(&["rollback", ALIAS, "--to", &new_digest])
            .output()
            .unwrap(),
        0,
    );
    assert_eq!(
        client
            .manifest_digest(&project.repository, ALIAS)
            .await
            .unwrap()
            .as_ref()
            .map(|digest| digest.as_str()),
        Some(new_digest.as_str())
    );
    let unknown = project
        .imagegen(&[
            "rollback",
            ALIAS,
            "--to",
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ])
        .output()
        .unwrap();
    assert_code(&unknown, 2);
    assert!(
        text(&unknown).contains("is not recorded in the manifest"),
        "{}",
        text(&unknown)
    );
    let no_alias = project
        .imagegen(&["rollback", "nope", "--previous"])
        .output()
        .unwrap();
    assert_code(&no_alias, 2);
    assert!(
        text(&no_alias).contains(&format!("it records: {ALIAS}"))
            || text(&no_alias).contains(ALIAS),
        "{}",
        text(&no_alias)
    );

    // A rollback, forward too, holds the alias; released, builds may move it again.
    assert_eq!(
        project.manifest()["aliases"][ALIAS]["held"]["from"],
        old_digest.as_str()
    );
    let released = project.imagegen(&["release", ALIAS]).output().unwrap();
    assert_code(&released, 0);
    assert!(project.manifest()["aliases"][ALIAS].get("held").is_none());

    // Back to 2.7.0 in the matrix: the alias must not move backwards.
    project.edit_matrix(
        "torch: [\"2.7.1\", \"2.8.0\"]",
        "torch: [\"2.7.0\", \"2.8.0\"]",
    );
    let plan = plan_json(&project);
    let held = plan["alias_holds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["alias"] == ALIAS)
        .expect("held");
    assert!(
        held["reason"]
            .as_str()
            .unwrap()
            .contains("would move backwards from torch 2.7.1"),
        "{held}"
    );
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    assert!(
        text(&output).contains("would move backwards"),
        "{}",
        text(&output)
    );
    assert_eq!(
        client
            .manifest_digest(&project.repository, ALIAS)
            .await
            .unwrap()
            .as_ref()
            .map(|digest| digest.as_str()),
        Some(new_digest.as_str()),
        "the alias stayed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn full_tags_are_immutable_in_the_registry() {
    prepare().await;
    let registry = Registry::start();
    let project = Project::new(registry.host(), SELFTEST_PASS);
    let only = ["--push", "--only", "2.8.0-cuda12.6-cudnn9-runtime"];
    assert_code(&project.build(&only), 0);
    let tag = project.tag("2.8.0", "runtime");
    let pushed = project.manifest()["images"][&tag]["digest"]
        .as_str()
        .unwrap()
        .to_string();

    // Same tag, different content (a new label changes the build): refused, with the way out.
    std::fs::write(
        project.path().join("matrix.yaml"),
        std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap()
            + "labels:\n  org.opencontainers.image.vendor: Example\n",
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();
    let plan = project.imagegen(&["plan"]).output().unwrap();
    assert!(
        text(&plan).contains("labels"),
        "the plan says which input changed: {}",
        text(&plan)
    );
    let output = project.build(&only);
    assert_code(&output, 1);
    let log = text(&output);
    assert!(log.contains("full tags are immutable"), "{log}");
    assert!(
        log.contains("hint: to publish a rebuild under a new tag"),
        "{log}"
    );
    let client = project.client(None);
    assert_eq!(
        client
            .manifest_digest(&project.repository, &tag)
            .await
            .unwrap()
            .as_ref()
            .map(|digest| digest.as_str()),
        Some(pushed.as_str()),
        "the registry is unchanged"
    );
    assert_eq!(
        project.manifest()["images"][&tag]["digest"],
        pushed.as_str(),
        "the manifest keeps the pushed record"
    );
}
