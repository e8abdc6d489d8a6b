//! The team's own additions (`pip`, `extra_indexes`, `apt`, `steps`, `env`, `labels`, `user`,
//! `workdir`) as a user writes them in `matrix.yaml`, without Docker or the network: the
//! Dockerfile they render (one snapshot, linted by the real hadolint with the repository's
//! settings), the file:line of each bad value, a step fragment that is refused, and the
//! fingerprints: changing an addition changes exactly the images that have it; and, against the
//! Docker daemon, the apt.lock a build writes for an apt extra. The real build of an image with
//! additions is in `real_build.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::Command as CargoCommand;

use crate::support::project::{assert_code, text, Project, SELFTEST_NO_GPU};

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
os: [ubuntu22.04, ubuntu24.04]
variants: [runtime, devel]
torch_wheels: pypi
devel_toolkit: pypi
tags:
  latest: false
pip:
  - einops>=0.8
  - "rich>=13; python_version >= '3.10'"
  - team-lib==0.1.0
extra_indexes:
  - url: https://pypi.team.example/simple
    username_env: TEAM_INDEX_USER
    password_env: TEAM_INDEX_TOKEN
apt: [htop]
steps: steps/team.Dockerfile
env:
  TEAM_CONFIG: /etc/team/config.toml
user: {name: dev, uid: 1000, gid: 1000}
workdir: /workspace
include:
  - os: ubuntu22.04
    apt: [git]
    labels:
      org.example.team: vision
"#;

const STEPS: &str = "# The team's config, with the image's torch in it.\nRUN mkdir -p /etc/team \\\n && printf 'torch = \"{{ image.torch }}\"\\n' > /etc/team/config.toml\n";

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("matrix.yaml"), MATRIX).unwrap();
    std::fs::create_dir_all(dir.path().join("steps")).unwrap();
    std::fs::write(dir.path().join("steps/team.Dockerfile"), STEPS).unwrap();
    dir
}

fn dockerfile(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join("images").join(name).join("Dockerfile")).unwrap()
}

fn fingerprint(dir: &Path, name: &str) -> String {
    dockerfile(dir, name)
        .lines()
        .find_map(|line| line.strip_prefix("# fingerprint: "))
        .unwrap()
        .to_string()
}

const RUNTIME_22: &str = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu22.04";
const RUNTIME_24: &str = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04";
const DEVEL_22: &str = "2.13.0-cuda13.0-cudnn9-devel-ubuntu22.04";
const DEVEL_24: &str = "2.13.0-cuda13.0-cudnn9-devel-ubuntu24.04";

#[test]
fn additions_render_after_the_lock_install_and_pass_hadolint() {
    let project = project();
    let dir = project.path();
    let render = imagegen(dir, &["render"]);
    assert_code(&render, 0);
    let runtime = dockerfile(dir, RUNTIME_22);
    let devel = dockerfile(dir, DEVEL_22);
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[digest]");
    settings.bind(|| {
        insta::assert_snapshot!(
            "extensions_dockerfiles",
            format!("{runtime}\n=== devel ===\n{devel}")
        );
    });
    // The order docs/extensions.md documents: the team's wheels (with every file of the lock, fetched on
    // the host into wheels/) in the venv's stage, the rest after it and the loader cache, the
    // user last.
    let at = |needle: &str| {
        runtime
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in\n{runtime}"))
    };
    assert!(at("COPY wheels/") < at("COPY requirements.lock"));
    assert!(!runtime.contains("extension-wheels"), "{runtime}");
    assert!(at("COPY --from=venv /opt/venv /opt/venv") < at("&& ldconfig"));
    assert!(at("&& ldconfig") < at("      htop \\\n"));
    assert!(at("      git \\\n") < at("RUN groupadd --gid 1000 dev"));
    assert!(at("RUN groupadd") < at("torch = \"2.13.0\""));
    assert!(at("torch = \"2.13.0\"") < at("ENV TEAM_CONFIG=\"/etc/team/config.toml\""));
    assert!(at("WORKDIR /workspace") < at("USER 1000:1000"));
    assert!(runtime.contains("org.example.team=\"vision\""));
    assert!(!dockerfile(dir, RUNTIME_24).contains("git \\"));
    assert!(
        !runtime.contains("TEAM_INDEX"),
        "no credential variable in a Dockerfile"
    );
    // The devel image is built FROM the runtime image, which installed the additions: it runs its
    // own steps as root and ends as the user, without installing them again.
    assert!(devel.contains("USER 0:0\n"), "{devel}");
    assert!(devel.trim_end().contains("USER 1000:1000"), "{devel}");
    assert!(!devel.contains("htop"), "{devel}");
    assert!(!devel.contains("/etc/team/config.toml\n"), "{devel}");
    let hadolint = repository_root().join(".ci/venv/bin/hadolint");
    let files: Vec<PathBuf> = [RUNTIME_22, RUNTIME_24, DEVEL_22, DEVEL_24]
        .iter()
        .map(|name| dir.join("images").join(name).join("Dockerfile"))
        .collect();
    let lint = Command::new(&hadolint)
        .arg("--config")
        .arg(repository_root().join(".hadolint.yaml"))
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run .ci/install-deps.sh)", hadolint.display()));
    assert!(lint.status.success(), "hadolint:\n{}", text(&lint));
}

#[test]
fn changing_an_addition_rebuilds_exactly_the_images_that_have_it() {
    let project = project();
    let dir = project.path();
    assert_code(&imagegen(dir, &["render"]), 0);
    let names = [RUNTIME_22, RUNTIME_24, DEVEL_22, DEVEL_24];
    let before: Vec<String> = names.iter().map(|n| fingerprint(dir, n)).collect();
    // The 22.04 rule's apt list: the 22.04 images (the devel one through its parent) change.
    let matrix = MATRIX.replace("apt: [git]", "apt: [git, make]");
    std::fs::write(dir.join("matrix.yaml"), &matrix).unwrap();
    assert_code(&imagegen(dir, &["render"]), 0);
    let after: Vec<String> = names.iter().map(|n| fingerprint(dir, n)).collect();
    let changed: Vec<&str> = names
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| b != a)
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(changed, [RUNTIME_22, DEVEL_22]);
    // The step fragment's text: every image that has it (all four here).
    std::fs::write(
        dir.join("steps/team.Dockerfile"),
        STEPS.replace("config.toml", "team.toml"),
    )
    .unwrap();
    assert_code(&imagegen(dir, &["render"]), 0);
    let again: Vec<String> = names.iter().map(|n| fingerprint(dir, n)).collect();
    assert!(after.iter().zip(&again).all(|(a, b)| a != b));
    // An image without additions keeps the fingerprint it had before additions existed: the
    // repository's own images/ are up to date with the same templates.
    assert_code(&imagegen(&repository_root(), &["render", "--check"]), 0);
}

#[test]
fn bad_additions_are_refused_at_their_line() {
    let project = project();
    let dir = project.path();
    // (what to replace, with what, the message): each refused at the line of the new value.
    let cases: &[(&str, &str, &str)] = &[
        (
            "  - einops>=0.8\n",
            "  - \"einops>=0.8 && curl evil\"\n",
            "pip requirement",
        ),
        (
            "  - team-lib==0.1.0\n",
            "  - --index-url=https://evil.example/simple\n",
            "pip requirement",
        ),
        (
            "  - url: https://pypi.team.example/simple\n",
            "  - url: https://bob:s3cret@pypi.team.example/simple\n",
            "extra_indexes[0].url: \"https://***@pypi.team.example/simple\" holds credentials",
        ),
        ("apt: [htop]", "apt: [\"htop; id\"]", "apt package"),
        ("  TEAM_CONFIG:", "  PATH:", "env PATH is reserved"),
        (
            "{name: dev, uid: 1000, gid: 1000}",
            "{name: root, uid: 0, gid: 0}",
            "user must not be root",
        ),
        ("workdir: /workspace", "workdir: ../up", "workdir"),
        (
            "steps: steps/team.Dockerfile",
            "steps: ../outside.Dockerfile",
            "steps",
        ),
        (
            "    apt: [git]\n",
            "    apt: [Git]\n",
            "apt package \"Git\"",
        ),
    ];
    for (from, to, message) in cases {
        assert!(MATRIX.contains(from), "{from}");
        let matrix = MATRIX.replace(from, to);
        let line = matrix[..matrix.find(to).unwrap()].matches('\n').count() + 1;
        std::fs::write(dir.join("matrix.yaml"), &matrix).unwrap();
        let render = imagegen(dir, &["render"]);
        assert_code(&render, 2);
        let stderr = String::from_utf8_lossy(&render.stderr).to_string();
        let wanted = format!("error: matrix.yaml:{line}:");
        assert!(
            stderr.starts_with(&wanted) && stderr.contains(message),
            "{to}: wanted {wanted:?} and {message:?} in\n{stderr}"
        );
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
    // A fragment that starts a new stage: refused at its own line.
    std::fs::write(dir.join("matrix.yaml"), MATRIX).unwrap();
    std::fs::write(
        dir.join("steps/team.Dockerfile"),
        "RUN true\nFROM scratch\n",
    )
    .unwrap();
    let render = imagegen(dir, &["render"]);
    assert_code(&render, 2);
    assert!(
        text(&render)
            .contains("steps/team.Dockerfile:2: a step fragment may not start a new stage"),
        "{}",
        text(&render)
    );
    // A fragment using a value the image does not have: strict, named.
    std::fs::write(
        dir.join("steps/team.Dockerfile"),
        "RUN echo {{ image.no_such_value }}\n",
    )
    .unwrap();
    let render = imagegen(dir, &["render"]);
    assert_code(&render, 2);
    assert!(
        text(&render)
            .contains("steps steps/team.Dockerfile for 2.13.0-cuda13.0-cudnn9-runtime-ubuntu22.04"),
        "{}",
        text(&render)
    );
}

/// Every (images/) file of the project, for "nothing was written".
fn images_tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.join("images")];
    while let Some(folder) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// The holes of the team boundary, each tried as a user would write it: refused by `render`,
/// `resolve --format json`, `plan` and `ci` with one message at its file and line, exit 2,
/// nothing written under images/, and no secret in any output. The validators' corpus is in
/// `model::extensions` and `model::http_url` (a property test); this runs the binary.
#[test]
fn hostile_additions_are_refused_at_their_line_with_nothing_written_and_no_secret_shown() {
    let project = project();
    let dir = project.path();
    assert_code(&imagegen(dir, &["render"]), 0);
    let before = images_tree(dir);
    assert!(
        !before.is_empty(),
        "the project rendered images to compare with"
    );
    // (matrix edit, the message wanted): matrix values.
    let matrix_cases: &[(&str, &str, &str)] = &[
        (
            "  - url: https://pypi.team.example/simple\n",
            "  - url: \"https:///bob:s3cret@pypi.team.example/simple\"\n",
            "extra_indexes[0].url: \"https://***@pypi.team.example/simple\" holds credentials",
        ),
        (
            "  - url: https://pypi.team.example/simple\n",
            "  - url: \"https:\\\\\\\\bob:s3cret@pypi.team.example/simple\"\n",
            "extra_indexes[0].url: \"https://***@pypi.team.example/simple\" holds credentials",
        ),
        (
            "  - url: https://pypi.team.example/simple\n",
            "  - url: \"ftp://bob:s3cret@pypi.team.example/simple\"\n",
            "holds credentials",
        ),
        (
            "  - url: https://pypi.team.example/simple\n",
            "  - url: \"https://bob:s3cret@pypi.team.example/simple?x=$(id)\"\n",
            "holds credentials",
        ),
        (
            "workdir: /workspace",
            "workdir: /opt/venv",
            "workdir /opt/venv is the system folder /opt/venv",
        ),
        (
            "workdir: /workspace",
            "workdir: /",
            "workdir / is the root of the image",
        ),
        (
            "workdir: /workspace",
            "workdir: /opt",
            "workdir /opt is the shared folder /opt",
        ),
        (
            "workdir: /workspace",
            "workdir: /usr/local/lib",
            "inside /usr",
        ),
        (
            "  TEAM_CONFIG:",
            "  LD_PRELOAD:",
            "env LD_PRELOAD is reserved",
        ),
        (
            "  TEAM_CONFIG:",
            "  LD_LIBRARY_PATH:",
            "env LD_LIBRARY_PATH is reserved",
        ),
        (
            "  TEAM_CONFIG:",
            "  PYTHONPATH:",
            "env PYTHONPATH is reserved",
        ),
        (
            "  TEAM_CONFIG:",
            "  PYTHONHOME:",
            "env PYTHONHOME is reserved",
        ),
    ];
    for (from, to, message) in matrix_cases {
        assert!(MATRIX.contains(from), "{from}");
        let matrix = MATRIX.replace(from, to);
        let line = matrix[..matrix.find(to).unwrap()].matches('\n').count() + 1;
        std::fs::write(dir.join("matrix.yaml"), &matrix).unwrap();
        for command in [
            &["render"][..],
            &["resolve", "--format", "json"],
            &["plan"],
            &["ci"],
        ] {
            let output = imagegen(dir, command);
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(output.status.code(), Some(2), "{command:?} {to}: {all}");
            assert!(
                all.contains(&format!("matrix.yaml:{line}:")) && all.contains(message),
                "{command:?} {to}: wanted matrix.yaml:{line}: and {message:?} in\n{all}"
            );
            assert!(!all.contains("s3cret"), "{command:?}: {all}");
        }
        assert_eq!(images_tree(dir), before, "{to}: nothing written");
    }
    // Step fragments: checked as Docker reads them once rendered.
    std::fs::write(dir.join("matrix.yaml"), MATRIX).unwrap();
    let fragment_cases: &[(&str, &str)] = &[
        ("RUN true\nFR\\\nOM busybox:1\n", "steps/team.Dockerfile:2: a step fragment may not start a new stage"),
        ("RUN true\n{{ \"FROM\" }} busybox:1\n", "steps/team.Dockerfile:2: a step fragment may not start a new stage"),
        ("RUN <<EOF\necho hi\nFROM busybox:1\nEOF\n", "steps/team.Dockerfile:1: heredocs"),
        ("COPY --from=busybox:1 /bin/sh /bin/sh\n", "steps/team.Dockerfile:1: COPY --from is refused"),
        ("ONBUILD RUN id\n", "steps/team.Dockerfile:1: ONBUILD is refused"),
        ("SHELL [\"/bin/bash\", \"-c\"]\n", "steps/team.Dockerfile:1: SHELL is refused"),
        ("RUN echo swallow \\\n", "steps/team.Dockerfile:1: the fragment changes how imagegen's own instructions after it are read"),
        ("NOSUCH thing\n", "steps/team.Dockerfile:1: Docker cannot read it"),
    ];
    for (fragment, message) in fragment_cases {
        std::fs::write(dir.join("steps/team.Dockerfile"), fragment).unwrap();
        for command in [&["render"][..], &["plan"], &["ci"]] {
            let output = imagegen(dir, command);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{command:?} {fragment:?}: {}",
                text(&output)
            );
            assert!(
                text(&output).contains(message),
                "{command:?} {fragment:?}: wanted {message:?} in\n{}",
                text(&output)
            );
        }
        assert_eq!(images_tree(dir), before, "{fragment:?}: nothing written");
    }
    // A template syntax error: every command that loads the project names its file and line.
    std::fs::write(
        dir.join("steps/team.Dockerfile"),
        "RUN true\nRUN echo {{ image.torch\n",
    )
    .unwrap();
    for command in [&["render"][..], &["plan"], &["ci"], &["doctor"]] {
        let output = imagegen(dir, command);
        assert_ne!(
            output.status.code(),
            Some(0),
            "{command:?}: {}",
            text(&output)
        );
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            all.contains("steps/team.Dockerfile:2: syntax error"),
            "{command:?}: {all}"
        );
        if command == ["doctor"] {
            assert!(all.contains("templates") && all.contains("broken"), "{all}");
        }
    }
    assert_eq!(images_tree(dir), before, "nothing written");
}

/// The `workdir` step of a rendered Dockerfile, run by the real daemon on the busybox base: a
/// new folder is made and handed to the user; one the image already holds and that is not the
/// user's stops the build with imagegen's message; the user's own folder (its home) passes.
#[tokio::test(flavor = "multi_thread")]
async fn the_workdir_step_hands_over_only_a_folder_it_makes() {
    use crate::support::{base_image, context_dir, engine, unique_name, Cleanup};
    use imagegen::docker::{context_tar, BuildRequest};
    let project = project();
    let dir = project.path();
    assert_code(&imagegen(dir, &["render"]), 0);
    let dockerfile = dockerfile(dir, RUNTIME_22);
    let start = dockerfile
        .find("RUN if [ -e /workspace ]")
        .expect("the workdir step");
    let end = start + dockerfile[start..].find("fi\n").expect("its end") + 3;
    let step = &dockerfile[start..end];
    assert!(step.contains("chown 1000:1000 /workspace"), "{step}");
    let engine = engine().await;
    let base = base_image(&engine).await;
    let cleanup = Cleanup::new("workdir");
    let cases = [
        ("", true),
        ("RUN mkdir /workspace\n", false),
        ("RUN mkdir /workspace && chown 1000:1000 /workspace\n", true),
    ];
    for (setup, passes) in cases {
        let text = cleanup.dockerfile(&format!(
            "FROM {base}\n{setup}{step}RUN [ \"$(stat -c %u:%g /workspace)\" = 1000:1000 ]\n"
        ));
        let context = context_dir(&[("Dockerfile", &text)]);
        let tag = format!("imagegen-test/{}:1", unique_name("workdir"));
        let request = BuildRequest::new(&tag, context_tar(context.path(), &[]).unwrap());
        let mut lines = Vec::new();
        let built = engine
            .build(request, |line| lines.push(line.to_string()))
            .await;
        let log = lines.join("\n");
        assert_eq!(built.is_ok(), passes, "{setup:?}: {built:?}\n{log}");
        if !passes {
            assert!(
                log.contains(
                    "imagegen: workdir /workspace is already in the image and not the user's"
                ),
                "{log}"
            );
        }
    }
    cleanup.remove_now().await;
}

/// The apt extra of an image built on a real Debian base: `images/<image>/apt.lock` holds the
/// version dpkg in the image reports, with what apt pulled in for it and not what the base had;
/// the file is no input (the next build reuses the image, same build key); an apt.lock that
/// records another version makes the next build say what moved (in its summary, and in the
/// image's log when it builds), and it is written again. Cost: two builds with
/// `apt-get install htop` on the kept bookworm base and one reuse (about 40 s in all), and the
/// base's debootstrap (about 1 to 2 min) when it is not kept.
#[test]
#[ignore = "slow tier: real apt (Debian's archive) on a debootstrapped base, what dpkg in the image reports; the quick tier's busybox base has no apt"]
fn apt_lock_records_the_extras_installed_versions_and_says_what_moved() {
    // Its peak, measured: 0.3 GiB (the base and two small apt layers).
    crate::support::require_free_disk(1, "apt_lock");
    crate::support::debian::bookworm_base();
    let project = Project::from_fixture("apt-lock", "registry.invalid", SELFTEST_NO_GPU);
    let tag = "2.7.0-cuda12.6-cudnn9-runtime-ubuntu24.04";
    let build = project.build(&[]);
    assert_code(&build, 0);
    let apt_lock = project.path().join("images").join(tag).join("apt.lock");
    let written = std::fs::read_to_string(&apt_lock).unwrap();
    assert!(written.starts_with("# apt.lock of this image: written by `imagegen build`"));
    let locked: BTreeMap<&str, &str> = written
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split_once('=').unwrap())
        .collect();
    let reference = format!("{}/{}:{tag}", project.registry, project.repository);
    let in_image = |package: &str| {
        let output = Command::new("docker")
            .args(["run", "--rm", "--entrypoint", "dpkg-query"])
            .args(["--label", &format!("imagegen-test.case={}", project.case())])
            .args([&reference, "-W", "-f=${Version}", package])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    assert_eq!(locked["htop"], in_image("htop"), "{written}");
    // What apt installed for htop (libnl), not what the base had (libc6).
    assert_eq!(locked["libnl-3-200"], in_image("libnl-3-200"), "{written}");
    assert!(!locked.contains_key("libc6"), "{written}");
    assert_eq!(
        project.manifest()["images"][tag]["packages"]["apt_extras"]["htop"],
        locked["htop"]
    );
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(stderr.contains("== apt: wrote "), "{stderr}");

    // The last build's htop at an older version: the next build reuses the image (apt.lock is
    // in no build key), says what moved, in its output and log, and writes the file again.
    let older = written.replace(&format!("htop={}\n", locked["htop"]), "htop=0.0.1-0fake\n");
    assert_ne!(older, written);
    std::fs::write(&apt_lock, &older).unwrap();
    let again = project.build(&[]);
    assert_code(&again, 0);
    let moved = format!(
        "apt: htop 0.0.1-0fake -> {} (the archive moved since the last build)",
        locked["htop"]
    );
    let output = text(&again);
    assert!(output.contains("reused"), "{output}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains(&moved),
        "the summary says it:\n{output}"
    );
    assert_eq!(std::fs::read_to_string(&apt_lock).unwrap(), written);

    // A build that builds (another self-test binary changes the build key; apt installs again)
    // says it in the image's log too.
    std::fs::write(&apt_lock, &older).unwrap();
    project.set_selftest(&format!("{SELFTEST_NO_GPU}# another binary\n"));
    let rebuild = project.build(&[]);
    assert_code(&rebuild, 0);
    let log = std::fs::read_to_string(
        project
            .path()
            .join(".imagegen/logs")
            .join(format!("{tag}.log")),
    )
    .unwrap();
    assert!(log.contains("== built"), "{log}");
    assert!(log.contains(&moved), "the log says it:\n{log}");
    assert_eq!(std::fs::read_to_string(&apt_lock).unwrap(), written);
    // Rendering keeps it and does not call it stale.
    assert_code(
        &project.imagegen(&["render", "--check"]).output().unwrap(),
        0,
    );
}

/// The axes the worked example of docs/extensions.md leaves out ("beside the usual axes"): the
/// newest torch of the knowledge with its PyPI CUDA, so that `latest-jupyter` exists as its
/// comments say.
const EXAMPLE_AXES: &str = "registry: ghcr.io\nrepository: acme/pytorch\ntorch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu22.04, ubuntu24.04]\nvariants: [runtime, devel]\n";

/// The text of the code block of docs/extensions.md ("Your own images") that opens with `first`.
fn example_block(fence: &str, first: &str) -> String {
    let page = std::fs::read_to_string(repository_root().join("docs/extensions.md")).unwrap();
    let opening = format!("```{fence}\n{first}");
    assert_eq!(
        page.matches(&opening).count(),
        1,
        "one {opening:?} block in docs/extensions.md"
    );
    let at = page.find(&opening).unwrap() + fence.len() + 4;
    let end = at + page[at..].find("\n```").unwrap();
    page[at..=end].to_string()
}

/// The worked example of docs/extensions.md, as written: its matrix (under axes of the test's own) with its
/// step fragment, and its flavours block, render; resolve names the images and aliases its
/// comments and commands name, and the Dockerfiles hold what it says they do.
#[test]
fn the_documented_extensions_example_renders_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let additions = example_block("yaml", "# matrix.yaml (beside the usual axes)\n");
    let steps = example_block("dockerfile", "# steps/team.Dockerfile");
    std::fs::write(
        dir.join("matrix.yaml"),
        format!("{EXAMPLE_AXES}{additions}"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("steps")).unwrap();
    std::fs::write(dir.join("steps/team.Dockerfile"), &steps).unwrap();
    let render = imagegen(dir, &["render"]);
    assert_code(&render, 0);
    let resolve = imagegen(dir, &["resolve"]);
    assert_code(&resolve, 0);
    let listed = String::from_utf8_lossy(&resolve.stdout).to_string();
    let jupyter = format!("{RUNTIME_24}-jupyter");
    let row = listed
        .lines()
        .find(|line| line.starts_with(&format!("{jupyter} ")))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(row.ends_with("latest-jupyter"), "{row}");
    let runtime = dockerfile(dir, RUNTIME_22);
    for wanted in [
        "      libgl1 \\\n",
        "      htop \\\n",
        "      git \\\n",
        "org.example.team=\"vision\"",
        "printf 'torch = \"2.13.0\"\\n' > /etc/team/config.toml",
        "ENV TEAM_CONFIG=\"/etc/team/config.toml\"",
        "WORKDIR /workspace",
        "RUN groupadd --gid 1000 dev",
    ] {
        assert!(runtime.contains(wanted), "{wanted:?} not in\n{runtime}");
    }
    assert!(runtime.contains("\nUSER 1000:1000\n"), "{runtime}");
    assert!(!dockerfile(dir, RUNTIME_24).contains("libgl1"));
    assert!(!runtime.contains("TEAM_INDEX"), "{runtime}");
    assert!(dockerfile(dir, &jupyter).contains("EXPOSE 8888"));
    assert_code(&imagegen(dir, &["plan"]), 0);

    // The flavours block, with a tools fragment of the test's own (the page shows none).
    let flavours = example_block("yaml", "user: {name: dev, uid: 1000, gid: 1000}");
    std::fs::write(dir.join("matrix.yaml"), format!("{EXAMPLE_AXES}{flavours}")).unwrap();
    std::fs::write(
        dir.join("steps/tools.Dockerfile"),
        "RUN mkdir -p /opt/tools\n",
    )
    .unwrap();
    assert_code(&imagegen(dir, &["render"]), 0);
    let resolve = imagegen(dir, &["resolve"]);
    assert_code(&resolve, 0);
    let listed = String::from_utf8_lossy(&resolve.stdout).to_string();
    for (image, alias) in [
        (format!("{RUNTIME_24}-jupyter"), "latest-jupyter"),
        (format!("{RUNTIME_24}-ssh"), "latest-ssh"),
        (format!("{RUNTIME_24}-tools"), "latest-tools"),
        (format!("{DEVEL_24}-build"), "latest-devel-build"),
    ] {
        let row = listed
            .lines()
            .find(|line| line.starts_with(&format!("{image} ")))
            .unwrap_or_else(|| panic!("{image} not in\n{listed}"));
        assert!(row.contains(alias), "{row}");
    }
    assert!(!listed.contains(&format!("{RUNTIME_24}-build")), "{listed}");
    let ssh = dockerfile(dir, &format!("{RUNTIME_24}-ssh"));
    assert!(ssh.contains("EXPOSE 2222"), "{ssh}");
}
