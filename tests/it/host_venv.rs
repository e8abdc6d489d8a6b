//! `wheels: host` against real parts: the repository's own runtime template on a real Debian
//! bookworm base (its apt, its python3 and venv, its ldconfig), a real lock made by uv against
//! the fixture index on 127.0.0.1 (tests/fixtures/wheel-cache/index.py: stand-ins for torch,
//! torchvision and torchaudio, and demo-tools with a console script, a `#!python` script, a data
//! file, a module that does not compile and a real ELF library under nvidia/demo/lib), built on
//! the real daemon twice: with `wheels: cache` (pip installs the lock in the Docker build, the
//! loader cache step runs after it) and with `wheels: host` (imagegen installs it on the host,
//! host-venv.sh byte-compiles and builds the loader cache in a container of the build). The two
//! images must hold the same venv and the same loader cache, file by file: path, mode and content
//! (every `.pyc` included, but the source time it records, which must be its source's), but for
//! INSTALLER (`pip` against `imagegen`) and its row in each
//! RECORD; and the same package listing in the manifest, though the host build's was made in
//! host-venv.sh's container, not in the image. Built a third time with `--push --no-test` into a
//! real registry, the image is not loaded into the daemon; pulled back, it is the loaded image of
//! the second build, byte for byte (one image ID). Built a fourth time from the same inputs,
//! the venv the third made is taken from the registry as it is: nothing installed, one digest.
//!
//! Cost: the bookworm base when it is not kept (debootstrap, 1 to 2 min), one `apt-get install`
//! of the template's packages (python3, python3-dev, g++: about 1 min, shared by both builds
//! through the builder's cache), two small builds.

use std::collections::BTreeMap;
use std::process::Command;

use crate::support::project::{assert_code, text, Project, SELFTEST_PASS};
use crate::support::Registry;
use crate::wheel_cache::{layer_paths, uv, Index};

/// `docker image rm image` (which must succeed).
fn untag(image: &str) {
    let removed = Command::new("docker")
        .args(["image", "rm", image])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{}", text(&removed));
}

/// The image ID the daemon holds for `image`, or `None`.
fn image_id(image: &str) -> Option<String> {
    let output = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .output()
        .unwrap();
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Every folder, file and link under the venv and of the loader cache in `image`: path → mode
/// and sha256 (a file), `link` and target (a link), `dir` and mode (a folder). A `.pyc` is hashed
/// without the source time it records (pip's build records the image's epoch, the venv made on
/// the host its own fixed time: `pipeline::venv_cut::VENV_EPOCH`), and says whether that time is
/// its source's, as Python checks before it uses it (`fresh`, else `stale`).
fn tree(image: &str, case: &str) -> BTreeMap<String, String> {
    let script = r#"cd / && python3 - <<'PYTHON'
import hashlib, os, stat
paths = []
for top in ("opt/venv", "etc/ld.so.cache", "etc/ld.so.conf.d"):
    paths.append(top)
    for root, dirs, files in os.walk(top):
        paths.extend(os.path.join(root, name) for name in dirs + files)
for path in sorted(set(paths), key=lambda p: p.encode()):
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        print(f"{path}\tlink {os.readlink(path)}")
    elif stat.S_ISDIR(info.st_mode):
        print(f"{path}\tdir {stat.S_IMODE(info.st_mode):o}")
    else:
        data = open(path, "rb").read()
        extra = ""
        if path.endswith(".pyc") and "/__pycache__/" in path:
            folder, name = path.rsplit("/__pycache__/", 1)
            source = f"{folder}/{name.split('.')[0]}.py"
            recorded = int.from_bytes(data[8:12], "little")
            fresh = recorded == int(os.stat(source).st_mtime) & 0xFFFFFFFF
            extra = " fresh" if fresh else " stale"
            data = data[:8] + bytes(4) + data[12:]
        print(f"{path}\t{stat.S_IMODE(info.st_mode):o} {hashlib.sha256(data).hexdigest()}{extra}")
PYTHON"#;
    run_in(image, case, script)
        .lines()
        .map(|line| {
            let (path, what) = line.split_once('\t').unwrap();
            (path.to_string(), what.to_string())
        })
        .collect()
}

/// `sh -c script` in `image`: its stdout (the run must succeed).
fn run_in(image: &str, case: &str, script: &str) -> String {
    let output = Command::new("docker")
        .args(["run", "--rm", "--entrypoint", "sh"])
        .args(["--label", &format!("imagegen-test.case={case}")])
        .args([image, "-c", script])
        .output()
        .unwrap();
    assert!(output.status.success(), "{script}: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "slow tier: wheels: host on a real Debian base (debootstrap, its apt, python3 and ldconfig), file by file against pip's venv; the quick tier has no real Python in its busybox base"]
async fn a_venv_made_on_the_host_is_the_venv_pip_makes_in_the_build_file_by_file() {
    // Its peak, measured: 2.4 GiB (the base, the apt layer, four small builds, the registry).
    crate::support::require_free_disk(4, "host_venv");
    crate::support::project::prepare().await;
    crate::support::debian::bookworm_base();
    let scratch = tempfile::tempdir().unwrap();
    let index = Index::start_with(scratch.path(), None, &[]);
    let registry = Registry::start();
    let project = Project::from_fixture("host-venv", registry.host(), SELFTEST_PASS);
    project.add_selftest("gpu-selftest-cu13", SELFTEST_PASS);
    project.edit_matrix("127.0.0.1:9/", &format!("127.0.0.1:{}/", index.port));
    // The repository's runtime template, each stage labelled with the test case so every image
    // the builds make is removed with the project.
    let template = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/runtime.Dockerfile.j2"),
    )
    .unwrap();
    let mut labelled = String::new();
    for line in template.lines() {
        labelled.push_str(line);
        labelled.push('\n');
        if line.starts_with("FROM ") {
            labelled.push_str(&format!(
                "LABEL imagegen-test.case=\"{}\"\n",
                project.case()
            ));
        }
    }
    std::fs::write(
        project.path().join("templates/runtime.Dockerfile.j2"),
        labelled,
    )
    .unwrap();
    std::fs::write(
        project.path().join("matrix.yaml"),
        std::fs::read_to_string(project.path().join("matrix.yaml")).unwrap()
            + "templates: templates\n",
    )
    .unwrap();
    let lock = project
        .imagegen(&["lock", "--uv", uv().to_str().unwrap()])
        .output()
        .unwrap();
    assert_code(&lock, 0);
    let name = "2.13.0-cuda13.0-cudnn9-runtime-debian12";
    let image = format!("{}/{}:{name}", project.registry, project.repository);
    let cache = scratch.path().join("cache");
    let build_with = |extra: &[&str]| {
        project
            .imagegen(&[&["build", "--selftest-dir", "selftest", "--no-test"], extra].concat())
            .env("IMAGEGEN_WHEEL_CACHE", &cache)
            .output()
            .unwrap()
    };
    let build = || build_with(&[]);
    let packages = || project.manifest()["images"][name]["packages"].clone();

    // pip in the Docker build.
    let by_pip = build();
    assert_code(&by_pip, 0);
    let pip_tree = tree(&image, project.case());
    let pip_record = run_in(
        &image,
        project.case(),
        "cat /opt/venv/lib/python3.11/site-packages/demo_tools-1.0.dist-info/RECORD",
    );
    let pip_packages = packages();

    // The venv made on the host.
    project.edit_matrix("wheels: cache", "wheels: host");
    let render = project.imagegen(&["render"]).output().unwrap();
    assert_code(&render, 0);
    let folder = project.path().join("images").join(name);
    let dockerfile = std::fs::read_to_string(folder.join("Dockerfile")).unwrap();
    assert!(!dockerfile.contains("--require-hashes"), "{dockerfile}");
    assert!(folder.join("host-venv.sh").exists());
    let on_host = build();
    assert_code(&on_host, 0);
    let log = text(&on_host);
    assert!(
        log.contains("venv installed on the host from 4 wheels"),
        "{log}"
    );
    assert!(
        log.contains("files' layers are written from the 4 wheels beside the Docker build"),
        "{log}"
    );
    let host_tree = tree(&image, project.case());
    let host_record = run_in(
        &image,
        project.case(),
        "cat /opt/venv/lib/python3.11/site-packages/demo_tools-1.0.dist-info/RECORD",
    );
    // Listed in host-venv.sh's container, as pip's image was listed in itself.
    let host_packages = packages();
    assert_eq!(host_packages, pip_packages);
    let listed_pip: Vec<&str> = host_packages["pip"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|package| package.as_str())
        .collect();
    for package in ["demo-tools==1.0", "torch==2.13.0"] {
        assert!(
            listed_pip
                .iter()
                .any(|listed| listed.eq_ignore_ascii_case(package)),
            "{package} not listed: {host_packages:#}"
        );
    }

    // The same files, modes and contents, but INSTALLER and RECORD (compared below).
    let comparable = |tree: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        tree.iter()
            .filter(|(path, _)| {
                !(path.ends_with(".dist-info/INSTALLER") || path.ends_with(".dist-info/RECORD"))
            })
            .map(|(path, what)| (path.clone(), what.clone()))
            .collect()
    };
    let (pip_files, host_files) = (comparable(&pip_tree), comparable(&host_tree));
    let only = |left: &BTreeMap<String, String>, right: &BTreeMap<String, String>| {
        left.iter()
            .filter(|(path, what)| right.get(*path) != Some(*what))
            .map(|(path, what)| format!("{path} {what}"))
            .collect::<Vec<_>>()
    };
    assert!(
        pip_files == host_files,
        "pip's build only: {:#?}\nthe host's only: {:#?}",
        only(&pip_files, &host_files),
        only(&host_files, &pip_files)
    );
    // Every .pyc records its source's time: Python uses it as it is.
    let fresh = host_files
        .values()
        .filter(|what| what.ends_with(" fresh"))
        .count();
    assert!(fresh >= 4, "{fresh} .pyc files: {host_files:#?}");
    assert!(
        !host_files.values().any(|what| what.ends_with(" stale")),
        "{host_files:#?}"
    );
    // The venv's layers are cut along its wheels (these are small: each in its group of eight),
    // and the lock is in the last layer, not the Docker build's.
    let parts = project.manifest()["images"][name]["size"]["parts"].clone();
    let holds: Vec<String> = parts
        .as_array()
        .unwrap()
        .iter()
        .map(|part| part["holds"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        holds
            .iter()
            .any(|holds| holds.starts_with("imagegen: group ")
                && holds.contains("demo_tools-1.0-")
                && holds.contains(" installed into /opt/venv (Python 3.11) on the host")),
        "{holds:#?}"
    );
    assert!(
        holds
            .last()
            .unwrap()
            .contains("what host-venv.sh wrote besides bytecode"),
        "{holds:#?}"
    );
    assert!(
        !holds
            .iter()
            .any(|holds| holds.contains("requirements.lock")),
        "the Docker build does not copy the lock: {holds:#?}"
    );
    assert_eq!(
        run_in(
            &image,
            project.case(),
            "cat /opt/imagegen/requirements.lock"
        ),
        std::fs::read_to_string(folder.join("requirements.lock")).unwrap()
    );
    // What the comparison saw: the lock's packages, their .pyc files (none of the module that
    // does not compile), the scripts, the data file, the library in the loader cache.
    let site = "opt/venv/lib/python3.11/site-packages";
    for path in [
        format!("{site}/torch/__init__.py"),
        format!("{site}/torch/__pycache__/__init__.cpython-311.pyc"),
        format!("{site}/demo_tools/__pycache__/cli.cpython-311.pyc"),
        format!("{site}/demo_tools/broken.py"),
        format!("{site}/nvidia/demo/lib/libz.so.1"),
        "opt/venv/bin/demo-tool".to_string(),
        "opt/venv/bin/demo-run".to_string(),
        "opt/venv/share/demo-tools/README".to_string(),
        "etc/ld.so.cache".to_string(),
        "etc/ld.so.conf.d/imagegen-pip-cuda.conf".to_string(),
    ] {
        assert!(
            host_files.contains_key(&path),
            "{path} missing: {host_files:#?}"
        );
    }
    assert!(!host_files.contains_key(&format!(
        "{site}/demo_tools/__pycache__/broken.cpython-311.pyc"
    )));
    let installer_row = |record: &str| -> Vec<String> {
        record
            .lines()
            .filter(|row| !row.contains(".dist-info/INSTALLER,"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(installer_row(&host_record), installer_row(&pip_record));
    assert!(
        host_record.contains("demo_tools/__pycache__/cli.cpython-311.pyc,,"),
        "{host_record}"
    );
    assert_eq!(
        run_in(
            &image,
            project.case(),
            "cat /opt/venv/lib/python3.11/site-packages/demo_tools-1.0.dist-info/INSTALLER"
        ),
        "imagegen\n"
    );

    // It runs: the console script, the fixed script, pip's own check, the loader cache.
    let ran = run_in(
        &image,
        project.case(),
        "demo-tool && demo-run && pip check && ldconfig -p | grep -c /opt/venv/lib/python3.11/site-packages/nvidia/demo/lib/libz.so.1",
    );
    assert_eq!(
        ran,
        "demo-tool 1.0\n1.0\nNo broken requirements found.\n1\n"
    );
    // No wheel of the lock (Debian's python3-venv brings its own, under usr/share/python-wheels),
    // and nothing host-venv.sh worked on (its script, the list of sources, what it packed), is in
    // a layer of the image.
    let (paths, layers) = layer_paths(&image, scratch.path());
    assert!(layers >= 3, "{layers} layers read");
    assert!(
        paths.contains(&format!("{site}/torch/__init__.py")),
        "the venv is in a layer: {paths:?}"
    );
    let helper: Vec<&String> = paths
        .iter()
        .filter(|path| {
            (path.ends_with(".whl") && !path.starts_with("usr/share/python-wheels/"))
                || path.starts_with("imagegen/")
        })
        .collect();
    assert!(helper.is_empty(), "in the image's layers: {helper:?}");

    // Pushed, and nothing runs it here: not loaded. Pulled back, the same image ID as the
    // loaded build's.
    let loaded_id = image_id(&image).expect("the host build is loaded");
    untag(&image);
    let pushed = build_with(&["--push"]);
    assert_code(&pushed, 0);
    let log = text(&pushed);
    assert!(log.contains("not loaded into the Docker daemon"), "{log}");
    // A venv of these wheels is kept (the loaded build's), so its layer waited for the Docker
    // build; the kept one's layers are in no registry, so it was made again, to the same bytes.
    assert!(log.contains("no longer holds: making it again"), "{log}");
    assert!(!log.contains("beside the Docker build"), "{log}");
    // Pushed right after its build: its layers went to the registry while host-venv.sh ran.
    assert!(
        log.contains("of layers uploaded ahead of the push"),
        "{log}"
    );
    assert_eq!(image_id(&image), None, "{log}");
    assert_eq!(packages(), host_packages);
    let pulled = Command::new("docker")
        .args(["pull", "-q", &image])
        .output()
        .unwrap();
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert_eq!(image_id(&image), Some(loaded_id));

    // The same inputs again where nothing says the image was pushed (no manifest, no image in
    // the daemon): the venv the last run made is taken as it is, both its layers being in the
    // registry; nothing is installed, and it is the same image.
    let digest = project.manifest()["images"][name]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::remove_file(project.path().join("imagegen-manifest.json")).unwrap();
    untag(&image);
    let again = build_with(&["--push"]);
    assert_code(&again, 0);
    let log = text(&again);
    assert!(
        log.contains(&format!("nothing is installed; manifest {digest}")),
        "{log}"
    );
    assert!(!log.contains("venv installed on the host from"), "{log}");
    assert_eq!(
        project.manifest()["images"][name]["digest"].as_str(),
        Some(digest.as_str())
    );
    project.remove_images().await;
}
