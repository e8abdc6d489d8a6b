//! The offline example (`examples/offline/`) and the README's quick start that uses it, checked
//! without building an image: the example's matrix is the real-build test's matrix
//! (`tests/fixtures/real-build/matrix.yaml`) but for the placeholders that test fills in and the
//! team's private index, so every real build proves the example builds; and the quick start's
//! commands (between `<!-- quickstart -->` markers in README.md) that build nothing run on a copy
//! of the example and say what the README says they do. A line of the quick start this test does
//! not know fails it, so the README cannot drift from what is checked here. (No test name here
//! contains `real_build`: `--skip real_build` must not skip these cheap tests.)

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};

use crate::support::project::text;

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example_dir() -> PathBuf {
    repository_root().join("examples/offline")
}

fn read_yaml(path: &Path) -> Mapping {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn key(name: &str) -> Value {
    Value::String(name.to_string())
}

fn string_at<'a>(mapping: &'a Mapping, path: &[&str]) -> &'a str {
    let mut value = mapping
        .get(key(path[0]))
        .unwrap_or_else(|| panic!("no {}", path[0]));
    for name in &path[1..] {
        value = value
            .get(*name)
            .unwrap_or_else(|| panic!("no {} in {path:?}", name));
    }
    value
        .as_str()
        .unwrap_or_else(|| panic!("{path:?} is not a string"))
}

/// The packages the team's index of the real build serves (`tests/fixtures/real-build/team_index.py`:
/// `"NAME": wheel("NAME", ...)`), which a machine without that index cannot install.
fn team_index_packages() -> Vec<String> {
    let script =
        std::fs::read_to_string(repository_root().join("tests/fixtures/real-build/team_index.py"))
            .unwrap();
    let packages: Vec<String> = script
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().strip_prefix('"')?.split_once("\": wheel(\"")?;
            rest.starts_with(&format!("{name}\""))
                .then(|| name.to_string())
        })
        .collect();
    assert_eq!(packages, ["team-lib", "team-conflict"], "{script}");
    packages
}

/// The default base image of `make-base.sh`: `imagegen-example/SUITE:1` of its default suite
/// (`suite="..."`), and that suite, which the example's Debian OS must be.
fn make_base_image() -> (String, String) {
    let script = std::fs::read_to_string(example_dir().join("make-base.sh")).unwrap();
    let suite = script
        .lines()
        .find_map(|line| line.strip_prefix("suite=\"")?.strip_suffix('"'))
        .unwrap_or_else(|| panic!("make-base.sh sets no suite=\"...\":\n{script}"))
        .to_string();
    assert!(
        script.contains("image=\"${image:-imagegen-example/$suite:1}\""),
        "make-base.sh's default image is not imagegen-example/SUITE:1:\n{script}"
    );
    (format!("imagegen-example/{suite}:1"), suite)
}

/// A Rust string literal's body for `text` (as real_build.rs writes its step fragment).
fn rust_literal(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[test]
fn the_offline_example_is_the_fixture_of_the_real_image_build_but_for_placeholders_and_team_index()
{
    let example = read_yaml(&example_dir().join("matrix.yaml"));
    let mut expected = read_yaml(&repository_root().join("tests/fixtures/real-build/matrix.yaml"));

    // The placeholders real_build.rs fills in (REGISTRY: the registry on 127.0.0.1 it starts and
    // pushes to; REPOSITORY; BASE_IMAGE) take the example's values: the local registry
    // registry.yml starts, and the base make-base.sh makes.
    let registry = string_at(&example, &["registry"]);
    let registry_config = read_yaml(&example_dir().join("registry.yml"));
    assert_eq!(registry, string_at(&registry_config, &["http", "addr"]));
    assert!(registry.starts_with("127.0.0.1:"), "{registry}");
    assert_eq!(string_at(&expected, &["registry"]), "REGISTRY");
    assert_eq!(string_at(&expected, &["repository"]), "REPOSITORY");
    assert_eq!(
        string_at(&expected, &["base_images", "runtime", "debian13"]),
        "BASE_IMAGE"
    );
    let base = string_at(&example, &["base_images", "runtime", "debian13"]);
    let (default_image, suite) = make_base_image();
    assert_eq!(base, default_image);
    assert_eq!(suite, "trixie", "the example's os is debian13 (trixie)");
    expected.insert(key("registry"), key(registry));
    expected.insert(key("repository"), key(string_at(&example, &["repository"])));
    expected.insert(
        key("base_images"),
        serde_yaml::from_str(&format!("runtime: {{debian13: \"{base}\"}}")).unwrap(),
    );

    // The team's private index: its address (PORT), its credentials and what only it serves.
    let team_packages = team_index_packages();
    assert!(expected.remove(key("extra_indexes")).is_some());
    let pip = expected
        .get_mut(key("pip"))
        .and_then(Value::as_sequence_mut)
        .expect("the fixture's pip list");
    let before = pip.len();
    pip.retain(|requirement| {
        let requirement = requirement.as_str().unwrap();
        let name = requirement.split(['=', '<', '>', '~', '!']).next().unwrap();
        !team_packages.iter().any(|package| package == name)
    });
    assert_eq!(
        pip.len(),
        before - 1,
        "one team package in the fixture's pip"
    );

    // Compared as data (order and comments aside): JSON objects sort their keys.
    let as_json = |mapping: &Mapping| serde_json::to_value(mapping).unwrap();
    assert_eq!(
        as_json(&example),
        as_json(&expected),
        "examples/offline/matrix.yaml differs from tests/fixtures/real-build/matrix.yaml beyond \
         the placeholders and the team's index: change both (the real build proves the example)"
    );

    // The step fragment is the one real_build.rs writes beside the fixture.
    let step = example
        .get(key("include"))
        .and_then(Value::as_sequence)
        .and_then(|rules| rules.iter().find_map(|rule| rule.get("steps")))
        .and_then(Value::as_str)
        .expect("the example's include rule with the devel image's steps");
    let fragment = std::fs::read_to_string(example_dir().join(step)).unwrap();
    let real_build =
        std::fs::read_to_string(repository_root().join("tests/it/real_build.rs")).unwrap();
    assert!(
        real_build.contains(&format!(
            "dir.join(\"{step}\"),\n        \"{}\",",
            rust_literal(&fragment)
        )),
        "examples/offline/{step} is not the fragment tests/it/real_build.rs writes:\n{fragment}"
    );
}

/// One line of the quick start, as this test knows it.
enum Step {
    /// Installs, starts a service or builds: only checked to be the line the README has.
    Skipped,
    /// Run as written (in bash, in the copy, after the `export` lines before it).
    Run,
    /// Run with `--help` appended.
    RunHelp,
    /// An `export` line, applied to the lines after it.
    Export,
}

/// The quick start's lines in order: what each must start with, and what is done with it.
const QUICK_START: &[(&str, Step)] = &[
    ("bash .ci/install-deps.sh", Step::Skipped),
    (
        "if systemctl is-active --quiet docker-registry 2>/dev/null; then $(command -v sudo) systemctl disable --now docker-registry; fi",
        Step::Skipped,
    ),
    ("bash examples/offline/make-base.sh", Step::RunHelp),
    (
        "docker-registry serve examples/offline/registry.yml ",
        Step::Skipped,
    ),
    (
        "cp /etc/ssl/certs/ca-certificates.crt examples/offline/host-ca.pem",
        Step::Run,
    ),
    ("bash selftest/build.sh ", Step::Skipped),
    ("cargo build --release", Step::Skipped),
    ("export PATH=", Step::Export),
    ("imagegen --project examples/offline resolve", Step::Run),
    ("imagegen --project examples/offline lock", Step::Skipped),
    ("imagegen --project examples/offline doctor", Step::Run),
    ("imagegen --project examples/offline plan", Step::Run),
    (
        "imagegen --project examples/offline build --push",
        Step::Skipped,
    ),
    ("imagegen --project examples/offline verify", Step::Skipped),
];

/// The commands between `<!-- quickstart -->` and `<!-- /quickstart -->` in README.md, each
/// without its trailing comment.
fn quick_start_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(repository_root().join("README.md")).unwrap();
    let block = readme
        .split_once("<!-- quickstart -->\n```sh\n")
        .and_then(|(_, rest)| rest.split_once("```\n<!-- /quickstart -->"))
        .map(|(block, _)| block)
        .expect("README.md has a ```sh block between <!-- quickstart --> and <!-- /quickstart -->");
    block
        .lines()
        .map(|line| match line.find("  #") {
            Some(comment) => line[..comment].trim_end().to_string(),
            None => line.trim_end().to_string(),
        })
        .filter(|line| !line.is_empty())
        .collect()
}

/// Copies the example's own files (not what a quick start run left there).
fn copy_example(to: &Path) {
    let ignored = [
        "host-ca.pem",
        "images",
        "imagegen-manifest.json",
        ".imagegen",
    ];
    let mut stack = vec![(example_dir(), to.to_path_buf())];
    while let Some((from, to)) = stack.pop() {
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if from == example_dir() && ignored.iter().any(|ignored| name == *ignored) {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push((entry.path(), to.join(&name)));
            } else {
                std::fs::copy(entry.path(), to.join(&name)).unwrap();
            }
        }
    }
}

#[test]
fn the_readme_quick_start_runs_on_the_offline_example_up_to_the_build() {
    let lines = quick_start_lines();
    let known: Vec<&str> = QUICK_START.iter().map(|(prefix, _)| *prefix).collect();
    assert_eq!(
        lines.len(),
        QUICK_START.len(),
        "the README's quick start has {} lines, this test knows {}: {known:#?}\nREADME: {lines:#?}",
        lines.len(),
        QUICK_START.len()
    );

    // A checkout in miniature: the example's files, and `target/release/imagegen` (which the
    // quick start builds) standing for this build of imagegen.
    let root = tempfile::tempdir().unwrap();
    copy_example(&root.path().join("examples/offline"));
    std::fs::create_dir_all(root.path().join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_imagegen"),
        root.path().join("target/release/imagegen"),
    )
    .unwrap();
    std::fs::create_dir_all(root.path().join("docker-config")).unwrap();
    std::fs::write(root.path().join("docker-config/config.json"), "{}").unwrap();

    let mut exports = String::new();
    let mut outputs = Vec::new();
    for (line, (prefix, step)) in lines.iter().zip(QUICK_START) {
        assert!(
            line.starts_with(prefix),
            "README quick start line `{line}` is not the one this test knows here: `{prefix}...`"
        );
        let command = match step {
            Step::Skipped => continue,
            Step::Export => {
                exports.push_str(line);
                exports.push('\n');
                continue;
            }
            Step::Run => line.clone(),
            Step::RunHelp => format!("{line} --help"),
        };
        let output = Command::new("bash")
            .arg("-c")
            .arg(format!("set -e\n{exports}{command}"))
            .current_dir(root.path())
            .env("DOCKER_CONFIG", root.path().join("docker-config"))
            .env_remove("IMAGEGEN_MATRIX")
            .env_remove("IMAGEGEN_PROJECT")
            .env_remove("IMAGEGEN_REGISTRY")
            .output()
            .unwrap();
        outputs.push((*prefix, line.clone(), output));
    }
    // The output of the line this test knows by `verb`, with the line as the README has it.
    let find = |verb: &str| {
        outputs
            .iter()
            .find(|(prefix, _, _)| prefix.ends_with(verb))
            .map(|(_, line, output)| (line.as_str(), output))
            .unwrap_or_else(|| panic!("no `{verb}` line ran"))
    };

    let (help_line, help) = find("make-base.sh");
    assert_eq!(
        help.status.code(),
        Some(0),
        "{help_line} --help\n{}",
        text(help)
    );
    assert!(
        text(help).contains("Usage: bash examples/offline/make-base.sh [--suite SUITE] [IMAGE]"),
        "{}",
        text(help)
    );
    let (copy_line, copy) = find("host-ca.pem");
    assert_eq!(copy.status.code(), Some(0), "{copy_line}\n{}", text(copy));

    // resolve: the four images, nothing rejected, each needing the self-test the quick start
    // builds (`bash selftest/build.sh cu13`).
    let (resolve_line, resolve) = find("resolve");
    assert_eq!(
        resolve.status.code(),
        Some(0),
        "{resolve_line}\n{}",
        text(resolve)
    );
    assert!(
        text(resolve).contains("4 images, 0 rejected"),
        "{}",
        text(resolve)
    );
    let json = Command::new(root.path().join("target/release/imagegen"))
        .args([
            "--project",
            "examples/offline",
            "resolve",
            "--format",
            "json",
        ])
        .current_dir(root.path())
        .output()
        .unwrap();
    let resolution: serde_json::Value = serde_json::from_slice(&json.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", text(&json)));
    let mut needed: Vec<&str> = resolution["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|image| {
            image["selftest"]
                .as_str()
                .unwrap()
                .strip_prefix("gpu-selftest-")
                .unwrap()
        })
        .collect();
    needed.sort();
    needed.dedup();
    let selftest_line = lines
        .iter()
        .find(|line| line.starts_with("bash selftest/build.sh "))
        .unwrap();
    let named: Vec<&str> = selftest_line
        .trim_start_matches("bash selftest/build.sh ")
        .split_whitespace()
        .collect();
    assert_eq!(
        named, needed,
        "the quick start builds the self-tests the images need"
    );

    // doctor: the matrix is fine and the daemon answers; what may be missing here is only what
    // the skipped lines make (the base, the registry, uv, the self-test).
    let (doctor_line, doctor) = find("doctor");
    let doctor_text = text(doctor);
    assert!(
        matches!(doctor.status.code(), Some(0 | 1)),
        "{doctor_line}\n{doctor_text}"
    );
    let rows: Vec<(&str, &str)> = doctor_text
        .lines()
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let (name, rest) = line.split_once("  ")?;
            Some((name.trim(), rest.split_whitespace().next()?))
        })
        .collect();
    assert!(rows.contains(&("matrix", "ok")), "{doctor_text}");
    assert!(rows.contains(&("docker daemon", "ok")), "{doctor_text}");
    for (name, status) in &rows {
        if *status == "missing" {
            assert!(
                ["base image", "registry", "uv", "self-test binaries"].contains(name),
                "doctor finds {name} missing, which no skipped quick-start line makes:\n{doctor_text}"
            );
        }
    }
    assert!(
        doctor_text.contains("imagegen-example/trixie:1"),
        "{doctor_text}"
    );
    assert!(doctor_text.contains("127.0.0.1:5000"), "{doctor_text}");

    // plan: every image new, said against the project's manifest path.
    let (plan_line, plan) = find("plan");
    assert_eq!(plan.status.code(), Some(0), "{plan_line}\n{}", text(plan));
    assert!(
        text(plan).contains("4 new, 0 rebuilt, 0 unchanged"),
        "{}",
        text(plan)
    );
    assert!(
        text(plan).contains("no manifest at examples/offline/imagegen-manifest.json"),
        "{}",
        text(plan)
    );
}
