//! The two test tiers (docs/development.md, "Test tiers"): `cargo test --workspace` is the quick
//! tier; a test of the slow tier is `#[ignore = "slow tier: …"]` and its reason says what it
//! proves that the quick tier cannot; `.ci/run` runs the slow tier with `--ignored`. This test
//! keeps that true: every `#[ignore]` of the tree gives a reason of one of the known kinds, the
//! slow tier is not empty, and every ignored test of the integration binary that is not of the
//! slow tier is skipped by name in `.ci/run` (so `--ignored` runs the slow tier and nothing else).

use std::path::{Path, PathBuf};

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// (file, the test's name, the reason) of every `#[ignore]` in the tree's tests and sources.
fn ignored_tests() -> Vec<(PathBuf, String, String)> {
    let root = repository_root();
    let mut files = Vec::new();
    for dir in ["src", "tests", "selftest/src", "selftest/tests"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut files);
        }
    }
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let line = line.trim();
            if !line.starts_with("#[ignore") {
                continue;
            }
            let reason = line
                .strip_prefix("#[ignore = \"")
                .and_then(|rest| rest.strip_suffix("\"]"))
                .unwrap_or_else(|| {
                    panic!(
                        "{}:{}: an #[ignore] without a reason (`#[ignore = \"slow tier: …\"]`)",
                        file.display(),
                        index + 1
                    )
                })
                .to_string();
            let name = lines[index + 1..]
                .iter()
                .find_map(|next| {
                    let next = next.trim();
                    let after = next
                        .strip_prefix("async fn ")
                        .or_else(|| next.strip_prefix("fn "))?;
                    Some(after.split('(').next().unwrap().to_string())
                })
                .unwrap_or_else(|| {
                    panic!("{}:{}: no fn after #[ignore]", file.display(), index + 1)
                });
            found.push((file.clone(), name, reason));
        }
    }
    found
}

#[test]
fn every_ignored_test_is_of_the_slow_tier_or_manual_and_ci_runs_the_slow_tier_alone() {
    let root = repository_root();
    let ignored = ignored_tests();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.contains("cargo test --locked --test it -- --ignored"),
        ".ci/run runs the slow tier"
    );
    let mut slow = 0;
    for (file, name, reason) in &ignored {
        let in_it = file.starts_with(root.join("tests/it"));
        if let Some(what) = reason.strip_prefix("slow tier") {
            // What it proves that the quick tier cannot, after the colon.
            let proves = what
                .split_once(": ")
                .map(|(_, proves)| proves)
                .unwrap_or("");
            assert!(
                proves.len() >= 40,
                "{}: {name}: a slow-tier test says what it proves that the quick tier cannot: {reason:?}",
                file.display()
            );
            assert!(
                in_it,
                "{}: {name}: the slow tier is in tests/it",
                file.display()
            );
            slow += 1;
        } else if reason.starts_with("manual") || reason.starts_with("needs ") {
            if in_it {
                assert!(
                    ci.contains(&format!("--skip {name}")),
                    "{}: {name} is ignored but not of the slow tier: .ci/run must skip it by name",
                    file.display()
                );
            }
        } else {
            panic!(
                "{}: {name}: an ignore reason starts with \"slow tier\", \"manual\" or \"needs \": {reason:?}",
                file.display()
            );
        }
    }
    assert!(slow >= 1, "the slow tier has no test: {ignored:#?}");
}
