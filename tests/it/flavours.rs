//! Flavours (`flavours:` in `matrix.yaml`) as a user writes them, without Docker or the network:
//! the Dockerfiles of the built-in jupyter and ssh flavours and of one of the team's own (one
//! snapshot, linted by the real hadolint with the repository's settings), the files their build
//! contexts carry, how the CI fan-out and the bake file treat them (after their runtime image, in
//! its job or with it as a named context), `render --check` after a flavour changed, a flavour
//! `from: devel`, and what `plan` and `diff` say of a flavour's parent. One test builds flavour
//! images for real on the build fixture's busybox stand-ins (with `tests/fixtures/flavour`'s
//! stand-in template): pushed, recorded with their parent's digest, run by `k8s`, rolled back;
//! another runs the `{revision}` workflow (a bump, `--only`, a flavour changed alone).
//! The built-in flavours built and started for real are in `real_build.rs` and
//! `flavour_services.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::Command as CargoCommand;

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};
use crate::support::Registry;

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn imagegen(dir: &Path, args: &[&str]) -> std::process::Output {
    CargoCommand::cargo_bin("imagegen")
        .unwrap()
        .current_dir(dir)
        .env_remove("IMAGEGEN_MATRIX")
        .args(args)
        .output()
        .unwrap()
}

const MATRIX: &str = r#"registry: registry.example.com
repository: team/pytorch
torch: ["2.13"]
cuda: ["13.0"]
os: [ubuntu24.04]
variants: [runtime, devel]
torch_wheels: pypi
devel_toolkit: pypi
pip: [einops]
user: {name: dev, uid: 1000, gid: 1000}
workdir: /workspace
flavours:
  jupyter: {}
  ssh: {}
  tools:
    pip: [rich]
    apt: [git]
    steps: steps/tools.Dockerfile
    env:
      TOOLS_HOME: /opt/tools
    labels:
      org.example.flavour: tools
"#;

const STEPS: &str =
    "RUN mkdir -p /opt/tools \\\n && printf 'torch {{ image.torch }}\\n' > /opt/tools/VERSION\n";

const RUNTIME: &str = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04";

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("matrix.yaml"), MATRIX).unwrap();
    std::fs::create_dir_all(dir.path().join("steps")).unwrap();
    std::fs::write(dir.path().join("steps/tools.Dockerfile"), STEPS).unwrap();
    dir
}

fn read(dir: &Path, name: &str, file: &str) -> String {
    std::fs::read_to_string(dir.join("images").join(name).join(file))
        .unwrap_or_else(|error| panic!("{name}/{file}: {error}"))
}

#[test]
fn flavours_render_from_their_runtime_image_and_pass_hadolint() {
    let project = project();
    let dir = project.path();
    let resolve = imagegen(dir, &["resolve"]);
    assert_code(&resolve, 0);
    assert!(
        text(&resolve).contains(&format!("{RUNTIME}-jupyter")),
        "{}",
        text(&resolve)
    );
    assert_code(&imagegen(dir, &["render"]), 0);
    let jupyter = read(dir, &format!("{RUNTIME}-jupyter"), "Dockerfile");
    let ssh = read(dir, &format!("{RUNTIME}-ssh"), "Dockerfile");
    let tools = read(dir, &format!("{RUNTIME}-tools"), "Dockerfile");
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[digest]");
    settings.bind(|| {
        insta::assert_snapshot!(
            "flavour_dockerfiles",
            format!("{jupyter}\n=== ssh ===\n{ssh}\n=== tools ===\n{tools}")
        );
    });
    for dockerfile in [&jupyter, &ssh, &tools] {
        assert!(
            [
                format!("FROM registry.example.com/team/pytorch:{RUNTIME}\n"),
                format!("FROM registry.example.com/team/pytorch:{RUNTIME} AS system\n"),
            ]
            .iter()
            .any(|from| dockerfile.contains(from.as_str())),
            "{dockerfile}"
        );
        assert!(dockerfile.trim_end().ends_with('"'), "labels last");
        assert!(dockerfile.contains("\nUSER 1000:1000\n"), "{dockerfile}");
    }
    // The built-ins' files are in their contexts, as the templates have them.
    assert_eq!(
        read(dir, &format!("{RUNTIME}-jupyter"), "imagegen-jupyter"),
        std::fs::read_to_string(repository_root().join("templates/imagegen-jupyter")).unwrap()
    );
    for file in ["imagegen-sshd", "sshd_config"] {
        assert_eq!(
            read(dir, &format!("{RUNTIME}-ssh"), file),
            std::fs::read_to_string(repository_root().join("templates").join(file)).unwrap()
        );
    }
    // The team's step is rendered with the image's values, as root, before the switch back.
    assert!(tools.find("printf 'torch 2.13.0") < tools.find("USER 1000:1000"));
    assert!(tools.contains("org.example.flavour=\"tools\""), "{tools}");
    assert!(tools.contains("imagegen.flavour=\"tools\""), "{tools}");
    let hadolint = repository_root().join(".ci/venv/bin/hadolint");
    let lint = Command::new(&hadolint)
        .arg("--config")
        .arg(repository_root().join(".hadolint.yaml"))
        .args(["jupyter", "ssh", "tools"].map(|flavour| {
            dir.join("images")
                .join(format!("{RUNTIME}-{flavour}"))
                .join("Dockerfile")
        }))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run .ci/install-deps.sh)", hadolint.display()));
    assert!(lint.status.success(), "hadolint:\n{}", text(&lint));

    // A flavour changed: render --check names exactly its image, and a render brings it back.
    std::fs::write(
        dir.join("matrix.yaml"),
        MATRIX.replace("apt: [git]", "apt: [git, make]"),
    )
    .unwrap();
    let check = imagegen(dir, &["render", "--check"]);
    assert_code(&check, 1);
    let said = text(&check);
    let changed: Vec<&str> = said
        .lines()
        .filter_map(|line| line.strip_prefix("--- "))
        .map(|path| {
            path.split('/')
                .find(|part| part.starts_with("2.13.0"))
                .unwrap_or(path)
        })
        .collect();
    assert_eq!(changed, [format!("{RUNTIME}-tools")], "{}", text(&check));
}

const DEVEL: &str = "2.13.0-cuda13.0-cudnn9-devel-ubuntu24.04";

/// A flavour of the team's own built FROM each devel image (`from: devel`).
const DEVEL_FLAVOUR: &str =
    "  build:\n    from: devel\n    pip: [ninja]\n    apt: [make]\n    env:\n      BUILD_HOME: /opt/build\n";

#[test]
fn a_flavour_from_devel_renders_from_the_devel_image_and_runtime_flavours_stay_byte_identical() {
    let project = project();
    let dir = project.path();
    assert_code(&imagegen(dir, &["render"]), 0);
    let runtime_flavours = ["jupyter", "ssh", "tools"].map(|flavour| {
        let name = format!("{RUNTIME}-{flavour}");
        (name.clone(), read(dir, &name, "Dockerfile"))
    });
    std::fs::write(dir.join("matrix.yaml"), format!("{MATRIX}{DEVEL_FLAVOUR}")).unwrap();
    let resolve = imagegen(dir, &["resolve"]);
    assert_code(&resolve, 0);
    assert!(
        text(&resolve).contains(&format!("{DEVEL}-build")),
        "{}",
        text(&resolve)
    );
    assert_code(&imagegen(dir, &["render"]), 0);
    // The runtime flavours are rendered byte for byte as they were (fingerprints included).
    for (name, before) in &runtime_flavours {
        assert_eq!(&read(dir, name, "Dockerfile"), before, "{name}");
    }
    assert!(
        !dir.join("images").join(format!("{RUNTIME}-build")).exists(),
        "a devel flavour is not built on the runtime image"
    );
    let build = read(dir, &format!("{DEVEL}-build"), "Dockerfile");
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[digest]");
    settings.bind(|| insta::assert_snapshot!("devel_flavour_dockerfile", build));
    assert!(
        build.contains(&format!(
            "FROM registry.example.com/team/pytorch:{DEVEL} AS system\n"
        )),
        "{build}"
    );
    assert!(build.contains("imagegen.variant=\"devel\""), "{build}");
    assert!(build.contains("imagegen.flavour=\"build\""), "{build}");
    assert!(build.contains("of the devel image's lock"), "{build}");
    assert!(!build.contains("runtime image"), "{build}");
    assert!(build.contains("\nUSER 1000:1000\n"), "{build}");
    let hadolint = repository_root().join(".ci/venv/bin/hadolint");
    let lint = Command::new(&hadolint)
        .arg("--config")
        .arg(repository_root().join(".hadolint.yaml"))
        .arg(
            dir.join("images")
                .join(format!("{DEVEL}-build"))
                .join("Dockerfile"),
        )
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run .ci/install-deps.sh)", hadolint.display()));
    assert!(lint.status.success(), "hadolint:\n{}", text(&lint));

    // `plan` lists it FROM its devel image.
    let plan = imagegen(dir, &["plan"]);
    assert_code(&plan, 0);
    let plan = String::from_utf8_lossy(&plan.stdout).to_string();
    let section = &plan[plan
        .find("flavour images (built FROM their runtime image, or devel image with `from: devel`)")
        .unwrap_or_else(|| panic!("{plan}"))..];
    let row = section
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{DEVEL}-build ")))
        .unwrap_or_else(|| panic!("{plan}"));
    assert_eq!(
        row.split_whitespace().take(3).collect::<Vec<_>>(),
        [format!("{DEVEL}-build").as_str(), "build", DEVEL],
        "{plan}"
    );

    // CI builds it in its family's job after its devel image; bake gives it the devel target as
    // its parent's context.
    let ci = imagegen(dir, &["ci", "--format", "github"]);
    assert_code(&ci, 0);
    let matrix: serde_json::Value = serde_json::from_slice(&ci.stdout).unwrap();
    let images: Vec<&str> = matrix["include"][0]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    let position = |name: &str| images.iter().position(|image| *image == name).unwrap();
    assert!(
        position(DEVEL) < position(&format!("{DEVEL}-build")),
        "{images:?}"
    );
    let bake = imagegen(dir, &["bake", "--out", "-", "--no-stage"]);
    assert_code(&bake, 0);
    let bake: serde_json::Value = serde_json::from_slice(&bake.stdout).unwrap();
    let target = |name: &str| name.replace('.', "_");
    assert_eq!(
        bake["target"][target(&format!("{DEVEL}-build"))]["contexts"]
            [format!("registry.example.com/team/pytorch:{DEVEL}")],
        format!("target:{}", target(DEVEL))
    );
}

#[test]
fn ci_and_bake_build_each_flavour_after_its_runtime_image() {
    let project = project();
    let dir = project.path();
    let ci = imagegen(dir, &["ci", "--format", "github"]);
    assert_code(&ci, 0);
    let matrix: serde_json::Value = serde_json::from_slice(&ci.stdout).unwrap();
    let jobs = matrix["include"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "one family: {matrix:#}");
    let images: Vec<&str> = jobs[0]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    assert_eq!(images[0], RUNTIME, "{images:?}");
    for flavour in ["jupyter", "ssh", "tools"] {
        assert!(
            images.contains(&format!("{RUNTIME}-{flavour}").as_str()),
            "{images:?}"
        );
    }

    let bake = imagegen(dir, &["bake", "--out", "-", "--no-stage"]);
    assert_code(&bake, 0);
    let bake: serde_json::Value = serde_json::from_slice(&bake.stdout).unwrap();
    let target = |name: &str| name.replace('.', "_");
    let jupyter = &bake["target"][target(&format!("{RUNTIME}-jupyter"))];
    assert_eq!(
        jupyter["contexts"][format!("registry.example.com/team/pytorch:{RUNTIME}")],
        format!("target:{}", target(RUNTIME)),
        "{jupyter:#}"
    );
    assert!(jupyter["tags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|tag| tag.as_str().unwrap().ends_with(":latest-jupyter")));
    assert_eq!(
        bake["group"]["jupyter"]["targets"],
        serde_json::json!([target(&format!("{RUNTIME}-jupyter"))])
    );
    let default: Vec<&str> = bake["group"]["default"]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(default.len(), 5, "{default:?}");
}

/// A manifest record of the matrix's images, as `build --push` writes one (the fields `plan` and
/// `diff` read), with `extra` on top.
fn record(tag: &str, digest: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut record = serde_json::json!({
        "repository": "registry.example.com/team/pytorch", "tag": tag,
        "digest": digest, "fingerprint": format!("sha256:{}", "f".repeat(64)),
        "build_key": format!("sha256:{}", "b".repeat(64)), "variant": "runtime",
        "torch": "2.13.0", "torchvision": "0.28.0", "cuda": "13.0", "cuda_full": "13.0.2",
        "cudnn": "9", "python": "3.12", "os": "ubuntu24.04", "base_image": "b",
        "driver_min": "580.65.06", "driver_min_compat": "580.65.06",
        "require_cuda": "cuda>=13.0", "built_at": "2026-12-01T07:00:00Z", "status": "ok"
    });
    for (key, value) in extra.as_object().unwrap() {
        record[key] = value.clone();
    }
    record
}

#[test]
fn plan_and_diff_say_which_flavour_and_which_parent_an_image_was_built_from() {
    let project = project();
    let dir = project.path();
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let tools = format!("{RUNTIME}-tools");
    let manifest = serde_json::json!({
        "schema_version": 1,
        "images": {
            RUNTIME: record(RUNTIME, &digest('1'), serde_json::json!({})),
            tools.clone(): record(&tools, &digest('2'), serde_json::json!({
                "flavour": {"name": "tools", "parent": RUNTIME, "parent_digest": digest('1')},
                "history": [record(&tools, &digest('3'), serde_json::json!({
                    "built_at": "2026-11-01T07:00:00Z",
                    "flavour": {"name": "tools", "parent": RUNTIME, "parent_digest": digest('9')}
                }))]
            })),
            // Written before flavours were recorded: it loads, and says nothing of its parent.
            format!("{RUNTIME}-ssh"): record(&format!("{RUNTIME}-ssh"), &digest('4'), serde_json::json!({})),
        }
    });
    std::fs::write(
        dir.join("imagegen-manifest.json"),
        serde_json::to_string_pretty(&manifest).unwrap(),
    )
    .unwrap();

    let plan = imagegen(dir, &["plan"]);
    assert_code(&plan, 0);
    let said = text(&plan);
    let section: Vec<String> = said
        .lines()
        .skip_while(|line| !line.starts_with("flavour images"))
        .skip(2)
        .take_while(|line| !line.trim().is_empty())
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        section,
        [
            format!("{RUNTIME}-jupyter jupyter {RUNTIME} -"),
            format!("{RUNTIME}-ssh ssh {RUNTIME} -"),
            format!(
                "{tools} tools {RUNTIME} tools FROM {RUNTIME}@{}",
                digest('1')
            ),
        ],
        "{said}"
    );
    let json = imagegen(dir, &["plan", "--format", "json"]);
    assert_code(&json, 0);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["flavours"].as_array().unwrap().len(), 3, "{json:#}");
    assert_eq!(json["flavours"][2]["from"], RUNTIME);
    let markdown = imagegen(dir, &["plan", "--format", "markdown"]);
    assert!(
        text(&markdown).contains(&format!(
            "| `{tools}` | tools | `{RUNTIME}` | `tools FROM {RUNTIME}@{}` |",
            digest('1')
        )),
        "{}",
        text(&markdown)
    );

    // `diff` of the runtime image and its flavour, and of two builds of the flavour on two builds
    // of its runtime image (the earlier one by its digest, from the record's history).
    let diff = imagegen(dir, &["diff", RUNTIME, &tools]);
    assert_code(&diff, 0);
    assert!(
        text(&diff).contains(&format!(
            "flavour: (none) -> tools FROM {RUNTIME}@{}\n",
            digest('1')
        )),
        "{}",
        text(&diff)
    );
    let diff = imagegen(dir, &["diff", &digest('3'), &tools]);
    assert_code(&diff, 0);
    assert!(
        text(&diff).contains(&format!(
            "flavour: tools FROM {RUNTIME}@{} -> tools FROM {RUNTIME}@{}\n",
            digest('9'),
            digest('1')
        )),
        "{}",
        text(&diff)
    );
}

/// The build fixture (tests/fixtures/build: busybox stand-ins) with the flavour stand-in template
/// and two flavours: `tools` FROM the runtime images, `build` FROM the devel images.
fn build_project(registry: &str) -> Project {
    let project = Project::new(registry, SELFTEST_PASS);
    let template = std::fs::read_to_string(
        repository_root().join("tests/fixtures/flavour/flavour.Dockerfile.j2"),
    )
    .unwrap()
    .replace("TEST_CASE", project.case())
    .replace("TEST_RUN", &crate::support::run_id());
    std::fs::write(
        project.path().join("templates/flavour.Dockerfile.j2"),
        template,
    )
    .unwrap();
    let matrix = project.path().join("matrix.yaml");
    let text = std::fs::read_to_string(&matrix).unwrap();
    std::fs::write(
        &matrix,
        format!(
            "{text}flavours:\n  tools: {{apt: [git]}}\n  build: {{from: devel, apt: [make]}}\n"
        ),
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();
    project
}

/// The alias of the 2.7 runtime image's `tools` flavour (the runtime image's, with `-tools`).
const ALIAS: &str = "2.7-cuda12.6-runtime-tools";

/// What a container of `reference` prints for `command` (busybox's sh).
fn run_in(reference: &str, command: &str) -> String {
    let output = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--entrypoint",
            "sh",
            reference,
            "-c",
            command,
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{reference}: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Flavour images built, pushed and recorded like any image: FROM their parent (runtime or devel),
/// each record naming its flavour and the parent's digest; `k8s` runs a flavour alias pinned to
/// its digest; a new torch release moves the flavour's alias to the new flavour image (the other
/// images reused), and `rollback` moves it back to the digest it had, which `k8s` then runs.
#[tokio::test(flavor = "multi_thread")]
async fn flavour_images_build_push_record_run_in_k8s_and_roll_back_like_any_image() {
    prepare().await;
    let registry = Registry::start();
    let project = build_project(registry.host());
    let runtime = project.tag("2.8.0", "runtime");
    let devel = project.tag("2.8.0", "devel");
    let (tools, build) = (format!("{runtime}-tools"), format!("{devel}-build"));
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let manifest = project.manifest();
    let digest = |manifest: &serde_json::Value, tag: &str| {
        manifest["images"][tag]["digest"]
            .as_str()
            .unwrap_or_else(|| panic!("no digest for {tag} in {manifest:#}"))
            .to_string()
    };
    // Recorded with their flavour and the digest (and id) of the image they were built FROM.
    for (flavour, parent, name) in [(&tools, &runtime, "tools"), (&build, &devel, "build")] {
        let record = &manifest["images"][flavour];
        assert_eq!(record["flavour"]["name"], name, "{record:#}");
        assert_eq!(record["flavour"]["parent"], parent.as_str(), "{record:#}");
        assert_eq!(
            record["flavour"]["parent_digest"],
            digest(&manifest, parent).as_str()
        );
        assert_eq!(
            record["flavour"]["parent_image_id"],
            manifest["images"][parent]["image_id"]
        );
        assert!(record["selftest"]["status"] == "pass", "{record:#}");
    }
    assert!(manifest["images"][&runtime].get("flavour").is_none());
    // Built FROM the parent: its content and its layers are there, with the flavour's on top.
    let reference = |tag: &str| format!("{}/{}:{tag}", project.registry, project.repository);
    assert_eq!(
        run_in(
            &reference(&build),
            "cat /etc/imagegen-devel /etc/imagegen-flavour"
        ),
        "nvcc for CUDA 12.6\nflavour build from devel apt make"
    );
    assert_eq!(
        run_in(&reference(&tools), "cat /etc/imagegen-flavour"),
        "flavour tools from runtime apt git"
    );
    let layers = |tag: &str| -> Vec<String> {
        let output = Command::new("docker")
            .args([
                "image",
                "inspect",
                "--format",
                "{{json .RootFS.Layers}}",
                &reference(tag),
            ])
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let (parent_layers, flavour_layers) = (layers(&devel), layers(&build));
    assert_eq!(
        flavour_layers[..parent_layers.len()],
        parent_layers[..],
        "the devel flavour's first layers are the devel image's"
    );
    // Aliases: the parent's with -<flavour>, moved in the registry; `k8s` of the alias runs the
    // flavour image pinned to its digest.
    let old_tools = format!("{}-tools", project.tag("2.7.0", "runtime"));
    let aliases: Vec<String> = manifest["images"][&old_tools]["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|alias| alias.as_str().unwrap().to_string())
        .collect();
    assert!(aliases.contains(&ALIAS.to_string()), "{aliases:?}");
    let client = project.client(None);
    let path = imagegen::docker::repository_path_of(&project.repository);
    let first = digest(&manifest, &old_tools);
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(first.clone())
    );
    let k8s = |project: &Project| {
        let output = project.imagegen(&["k8s", ALIAS]).output().unwrap();
        assert_code(&output, 0);
        text(&output)
    };
    let job = k8s(&project);
    assert!(
        job.contains(&format!("image: {}@{first}\n", reference(&old_tools))),
        "{job}"
    );

    // A new torch release: its runtime image and its flavour are new, the flavour's alias moves
    // to the new flavour image, and the 2.8.0 images are reused as they were.
    project.edit_matrix(
        "torch: [\"2.7.0\", \"2.8.0\"]",
        "torch: [\"2.7.1\", \"2.8.0\"]",
    );
    let (new_runtime, new_tools) = (
        project.tag("2.7.1", "runtime"),
        format!("{}-tools", project.tag("2.7.1", "runtime")),
    );
    let plan = project.imagegen(&["plan"]).output().unwrap();
    assert!(
        text(&plan).lines().any(|line| {
            line.split_whitespace().collect::<Vec<_>>() == [&new_tools, "tools", &new_runtime, "-"]
        }),
        "{}",
        text(&plan)
    );
    let before = manifest;
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let manifest = project.manifest();
    let second = digest(&manifest, &new_tools);
    assert_ne!(first, second);
    assert_eq!(
        manifest["images"][&new_tools]["flavour"]["parent_digest"],
        digest(&manifest, &new_runtime).as_str()
    );
    for unchanged in [&runtime, &devel, &tools, &build] {
        assert_eq!(
            manifest["images"][unchanged]["digest"], before["images"][unchanged]["digest"],
            "{unchanged}"
        );
    }
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(second.clone())
    );
    // Rolled back: the registry serves the first flavour image again, the manifest says so, and
    // `k8s` runs it.
    let rollback = project
        .imagegen(&["rollback", ALIAS, "--previous"])
        .output()
        .unwrap();
    assert_code(&rollback, 0);
    assert_eq!(
        client
            .manifest_digest(path, ALIAS)
            .await
            .unwrap()
            .map(|digest| digest.to_string()),
        Some(first.clone())
    );
    assert_eq!(
        project.manifest()["aliases"][ALIAS]["digest"],
        first.as_str()
    );
    let job = k8s(&project);
    assert!(job.contains(&format!("@{first}\n")), "{job}");
}

/// `imagegen lock` of a matrix with a flavour FROM devel: each lock is resolved once its parent's
/// is on disk (runtime, then devel and the runtime flavours, then the devel flavour), so the
/// devel flavour's lock names the devel lock it was resolved against and `render --check` finds
/// nothing stale.
#[test]
fn lock_resolves_a_devel_flavour_after_its_devel_image() {
    let project = project();
    let dir = project.path();
    std::fs::write(dir.join("matrix.yaml"), format!("{MATRIX}{DEVEL_FLAVOUR}")).unwrap();
    let uv = crate::support::uv::fake_uv(dir);
    let lock = CargoCommand::cargo_bin("imagegen")
        .unwrap()
        .current_dir(dir)
        .env_remove("IMAGEGEN_MATRIX")
        .env("FAKE_UV_LOG", dir.join("uv.log"))
        .args(["lock", "--no-bases", "--uv", uv.to_str().unwrap()])
        .output()
        .unwrap();
    assert_code(&lock, 0);
    let flavour_lock = read(dir, &format!("{DEVEL}-build"), "requirements.lock");
    let devel_lock = read(dir, DEVEL, "requirements.lock");
    let devel_digest = format!("sha256:{}", sha256_hex(devel_lock.as_bytes()));
    assert!(
        flavour_lock.contains(&format!("../{DEVEL}/requirements.lock ({devel_digest})")),
        "{flavour_lock}"
    );
    assert!(flavour_lock.contains("ninja=="), "{flavour_lock}");
    let check = imagegen(dir, &["render", "--check"]);
    assert_code(&check, 0);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The `{revision}` workflow as a team runs it, with flavours: `-r{revision}` in `tags.full`, a
/// build, a change to every image (a label), a second build. The summary names each tag pushed
/// (with its revision), each flavour's record names the parent tag it was built FROM now and that
/// image's digest, the folders in `images/` carry no revision (docs/tags.md), and `--only` a
/// full tag selects that image (with the images it is built FROM), never the flavours built on it.
/// A change to a flavour alone gives that flavour the next revision, its parent keeps its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_revision_bump_names_the_pushed_tags_and_records_each_flavour_on_its_parent() {
    prepare().await;
    let registry = Registry::start();
    let project = build_project(registry.host());
    project.edit_matrix("torch: [\"2.7.0\", \"2.8.0\"]", "torch: [\"2.8.0\"]");
    project.edit_matrix(
        "  default_os: ubuntu24.04\n",
        "  default_os: ubuntu24.04\n  full: \"{torch}-cuda{cuda}-cudnn{cudnn_major}-{variant}-{os}-r{revision}\"\n",
    );
    let (runtime, devel) = (
        project.tag("2.8.0", "runtime"),
        project.tag("2.8.0", "devel"),
    );
    let folders = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(project.path().join("images"))
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.path().is_dir())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let expected_folders = [
        devel.clone(),
        format!("{devel}-build"),
        runtime.clone(),
        format!("{runtime}-tools"),
    ];
    assert_eq!(
        folders(),
        expected_folders,
        "no revision in a folder's name"
    );
    assert_code(&project.build(&["--push"]), 0);

    // Every image changes (a label): each gets revision 2.
    let text_of = |path: &str| std::fs::read_to_string(project.path().join(path)).unwrap();
    std::fs::write(
        project.path().join("matrix.yaml"),
        format!(
            "{}labels:\n  org.example.team: ml\n",
            text_of("matrix.yaml")
        ),
    )
    .unwrap();
    project.imagegen(&["render"]).assert().success();
    assert_eq!(
        folders(),
        expected_folders,
        "a new revision keeps its folder"
    );
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let said = text(&output);
    let manifest = project.manifest();
    let tags = [
        format!("{runtime}-r2"),
        format!("{devel}-r2"),
        format!("{runtime}-r2-tools"),
        format!("{devel}-r2-build"),
    ];
    for tag in &tags {
        assert!(
            said.lines()
                .any(|line| line.split_whitespace().next() == Some(tag.as_str())),
            "the summary names {tag}, the tag pushed:\n{said}"
        );
        assert!(
            manifest["images"][tag]["digest"].is_string(),
            "{manifest:#}"
        );
    }
    for (flavour, parent) in [(&tags[2], &tags[0]), (&tags[3], &tags[1])] {
        let record = &manifest["images"][flavour]["flavour"];
        assert_eq!(record["parent"], parent.as_str(), "{manifest:#}");
        assert_eq!(
            record["parent_digest"], manifest["images"][parent]["digest"],
            "{manifest:#}"
        );
    }
    project.imagegen(&["render", "--check"]).assert().success();

    // `--only` a full tag: that image and what it is built FROM, not the flavours built on it.
    let selected = |only: &str| -> Vec<String> {
        let output = project
            .imagegen(&[
                "build",
                "--selftest-dir",
                "selftest",
                "--dry-run",
                "--format",
                "json",
                "--only",
                only,
            ])
            .output()
            .unwrap();
        assert_code(&output, 0);
        let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        plan["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|image| image["spec"]["tag"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(selected(&tags[0]), [tags[0].clone()]);
    assert_eq!(selected(&tags[1]), [tags[0].clone(), tags[1].clone()]);
    assert_eq!(selected(&tags[2]), [tags[0].clone(), tags[2].clone()]);
    // The folder's name names the image too; part of a tag still selects every image with it.
    assert_eq!(selected(&runtime), [tags[0].clone()]);
    assert_eq!(
        selected("runtime-ubuntu24.04-r2"),
        [tags[0].clone(), tags[2].clone()]
    );

    // A change to the flavour alone: its next revision, on its parent's present one.
    project.edit_matrix("tools: {apt: [git]}", "tools: {apt: [git, less]}");
    let output = project.build(&["--push"]);
    assert_code(&output, 0);
    let manifest = project.manifest();
    let tools = format!("{runtime}-r3-tools");
    assert_eq!(
        manifest["images"][&tools]["flavour"]["parent"],
        tags[0].as_str(),
        "{manifest:#}"
    );
    assert_eq!(
        manifest["images"][&tools]["flavour"]["parent_digest"],
        manifest["images"][&tags[0]]["digest"]
    );
    assert!(
        manifest["images"].get(format!("{runtime}-r3")).is_none(),
        "the runtime image keeps its revision: {manifest:#}"
    );
}
