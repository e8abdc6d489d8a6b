//! The host-side wheel cache against real parts: a real lock made by uv against a package index
//! on 127.0.0.1 (`tests/fixtures/wheel-cache/index.py`, small stand-ins for torch, torchvision
//! and torchaudio, plus a Windows torch wheel a Linux image must not fetch), and `imagegen build`
//! on the real daemon: the wheels are fetched once, on the host, into the cache; the image's venv
//! holds them and no layer of the image holds a wheel; with the index stopped a rebuild (a label
//! change) takes everything from the cache; a tampered cached wheel is refused by its sha256 and
//! fetched again.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::project::{assert_code, prepare, text, Project, SELFTEST_PASS};

/// The fixture index, stopped on drop; every request's path is in its log.
pub(crate) struct Index {
    child: Child,
    pub(crate) port: u16,
    log: PathBuf,
}

impl Index {
    fn start(dir: &Path, port: Option<u16>) -> Index {
        Index::start_with(dir, port, &[])
    }

    /// [`Index::start`] with these environment variables (`INDEX_CLASH`).
    pub(crate) fn start_with(dir: &Path, port: Option<u16>, env: &[(&str, &str)]) -> Index {
        let port_file = dir.join(format!("index-{}.port", port.unwrap_or(0)));
        let log = dir.join("index.log");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wheel-cache/index.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&port_file)
            .arg(&log)
            .env("INDEX_PORT", port.unwrap_or(0).to_string())
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 for the fixture index");
        for _ in 0..100 {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                return Index { child, port, log };
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the fixture index did not start");
    }

    /// The paths asked of the index so far.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        self.stop();
    }
}

/// uv from `.ci/venv` (what `.ci/install-deps.sh` installs), else from PATH.
pub(crate) fn uv() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin/uv");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("uv")
    }
}

/// `imagegen build --no-test` with the cache at `cache`.
fn build(project: &Project, cache: &Path) -> std::process::Output {
    project
        .imagegen(&["build", "--selftest-dir", "selftest", "--no-test"])
        .env("IMAGEGEN_WHEEL_CACHE", cache)
        .output()
        .unwrap()
}

/// The cached files: `sha256/<hex>/<file name>` as (hex, file name).
fn cached(cache: &Path) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(cache.join("sha256")).unwrap() {
        let entry = entry.unwrap();
        for file in std::fs::read_dir(entry.path()).unwrap() {
            found.insert((
                entry.file_name().to_string_lossy().into_owned(),
                file.unwrap().file_name().to_string_lossy().into_owned(),
            ));
        }
    }
    found
}

/// Every path in every layer of `image` (from `docker save`), and how many layers were read.
pub(crate) fn layer_paths(image: &str, dir: &Path) -> (BTreeSet<String>, usize) {
    let saved = dir.join("image.tar");
    let output = Command::new("docker")
        .args(["save", "-o"])
        .arg(&saved)
        .arg(image)
        .output()
        .unwrap();
    assert!(output.status.success(), "docker save: {}", text(&output));
    let mut paths = BTreeSet::new();
    let mut layers = 0;
    let mut archive = tar::Archive::new(std::fs::File::open(&saved).unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        // A layer is a tar (ustar magic at 257); the JSON files beside them are not.
        if bytes.len() < 512 || &bytes[257..262] != b"ustar" {
            continue;
        }
        layers += 1;
        for inner in tar::Archive::new(bytes.as_slice()).entries().unwrap() {
            paths.insert(
                inner
                    .unwrap()
                    .path()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    (paths, layers)
}

#[tokio::test(flavor = "multi_thread")]
async fn wheels_come_from_the_host_cache_survive_the_index_going_away_and_a_tampered_one_is_fetched_again(
) {
    prepare().await;
    let scratch = tempfile::tempdir().unwrap();
    let mut index = Index::start(scratch.path(), None);
    let project = Project::from_fixture("wheel-cache", "127.0.0.1:9", SELFTEST_PASS);
    project.add_selftest("gpu-selftest-cu13", SELFTEST_PASS);
    project.edit_matrix("127.0.0.1:9/", &format!("127.0.0.1:{}/", index.port));
    let lock = project
        .imagegen(&["lock", "--uv", uv().to_str().unwrap()])
        .output()
        .unwrap();
    assert_code(&lock, 0);
    let name = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04";
    let lock_text = std::fs::read_to_string(
        project
            .path()
            .join("images")
            .join(name)
            .join("requirements.lock"),
    )
    .unwrap();
    // uv locked torch with both of its files' sha256: the Linux image needs one of them.
    let torch_hashes = lock_text
        .split("\ntorch==2.13.0")
        .nth(1)
        .unwrap_or_else(|| panic!("{lock_text}"))
        .split("\ntorchaudio")
        .next()
        .unwrap()
        .matches("--hash=sha256:")
        .count();
    assert_eq!(torch_hashes, 2, "{lock_text}");

    // Cold: the three wheels fetched on the host, the Windows one never asked for (uv asked the
    // index before: only what the build asked counts).
    let asked_by_uv = index.requests().len();
    let cache = scratch.path().join("cache");
    let first = build(&project, &cache);
    assert_code(&first, 0);
    let log = text(&first);
    assert!(
        log.contains("wheels: 3/3 files ready in"),
        "no progress line: {log}"
    );
    assert!(log.contains("0.0 kB (0 files) from the cache"), "{log}");
    let files = cached(&cache);
    let names: BTreeSet<&str> = files.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "torch-2.13.0-py3-none-any.whl",
            "torchaudio-2.11.0-py3-none-any.whl",
            "torchvision-0.28.0-py3-none-any.whl",
        ])
    );
    for (hash, _) in &files {
        assert!(lock_text.contains(&format!("sha256:{hash}")), "{hash}");
    }
    let requests = index.requests()[asked_by_uv..].to_vec();
    assert!(
        requests.iter().all(|path| !path.contains("win_amd64")),
        "{requests:?}"
    );
    assert_eq!(
        requests
            .iter()
            .filter(|path| path.starts_with("/files/"))
            .count(),
        3,
        "{requests:?}"
    );

    // The image holds the venv made from them, and no layer of it holds a wheel.
    let image = format!("{}/{}:{name}", project.registry, project.repository);
    let installed = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--entrypoint",
            "cat",
            &image,
            "/opt/venv/installed",
        ])
        .output()
        .unwrap();
    assert!(installed.status.success(), "{}", text(&installed));
    let installed = String::from_utf8_lossy(&installed.stdout).to_string();
    for package in ["torch", "torchvision", "torchaudio"] {
        assert!(
            installed.lines().any(|line| line == package),
            "{package} not in the venv: {installed}"
        );
    }
    let (paths, layers) = layer_paths(&image, scratch.path());
    assert!(layers >= 2, "{layers} layers read");
    assert!(
        paths
            .iter()
            .any(|path| path.starts_with("opt/venv/site/torch")),
        "the venv is in a layer: {paths:?}"
    );
    let wheels: Vec<&String> = paths
        .iter()
        .filter(|path| path.ends_with(".whl") || path.contains("imagegen/wheels"))
        .collect();
    assert!(
        wheels.is_empty(),
        "wheels in the image's layers: {wheels:?}"
    );

    // The index stopped, a label changed: rebuilt from the cache alone.
    index.stop();
    project.edit_matrix("imagegen-test.round: \"1\"", "imagegen-test.round: \"2\"");
    let offline = build(&project, &cache);
    assert_code(&offline, 0);
    let log = text(&offline);
    assert!(log.contains("0.0 kB fetched"), "{log}");
    assert!(log.contains("(3 files) from the cache"), "{log}");

    // A tampered cached wheel with the index still away: refused by its sha256, the package
    // named, and nothing built from it.
    let (torch_hash, torch_file) = files
        .iter()
        .find(|(_, name)| name.starts_with("torch-"))
        .unwrap()
        .clone();
    let torch_path = cache.join("sha256").join(&torch_hash).join(&torch_file);
    let original = std::fs::read(&torch_path).unwrap();
    std::fs::write(&torch_path, b"not the wheel the lock names").unwrap();
    project.edit_matrix("imagegen-test.round: \"2\"", "imagegen-test.round: \"3\"");
    let refused = build(&project, &cache);
    assert_code(&refused, 2);
    let log = text(&refused);
    assert!(
        log.contains(&format!("warning: the cached {torch_file}")),
        "{log}"
    );
    assert!(
        log.contains(&format!("not {torch_hash}: removed, fetching it again")),
        "{log}"
    );
    assert!(
        log.contains("torch==2.13.0: no wheel for Python 3.12 on x86_64-manylinux_2_39 with a sha256 the lock allows"),
        "{log}"
    );
    assert!(!torch_path.exists());

    // Tampered again, the index back: refused, fetched again, built.
    std::fs::create_dir_all(torch_path.parent().unwrap()).unwrap();
    std::fs::write(&torch_path, b"not the wheel the lock names").unwrap();
    let index = Index::start(scratch.path(), Some(index.port));
    let asked_before = index.requests().len();
    let refetched = build(&project, &cache);
    assert_code(&refetched, 0);
    let log = text(&refetched);
    assert!(log.contains("1 cached file(s) refused"), "{log}");
    assert!(log.contains("(2 files) from the cache"), "{log}");
    assert_eq!(std::fs::read(&torch_path).unwrap(), original);
    let asked: Vec<String> = index.requests()[asked_before..].to_vec();
    assert_eq!(
        asked
            .iter()
            .filter(|path| path.starts_with("/files/"))
            .collect::<Vec<_>>(),
        [&format!("/files/{torch_file}")],
        "{asked:?}"
    );

    // bake stages the same wheels/ for BuildKit, from the cache (nothing fetched again).
    let asked_before = index.requests().len();
    let bake = project
        .imagegen(&["bake", "--selftest-dir", "selftest"])
        .env("IMAGEGEN_WHEEL_CACHE", &cache)
        .output()
        .unwrap();
    assert_code(&bake, 0);
    let staged: BTreeSet<String> = std::fs::read_dir(
        project
            .path()
            .join(".imagegen/bake")
            .join(name)
            .join("wheels"),
    )
    .unwrap()
    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
    .collect();
    assert_eq!(
        staged,
        BTreeSet::from(
            [
                "SOURCES",
                "torch-2.13.0-py3-none-any.whl",
                "torchaudio-2.11.0-py3-none-any.whl",
                "torchvision-0.28.0-py3-none-any.whl",
            ]
            .map(String::from)
        )
    );
    assert_eq!(index.requests().len(), asked_before);
}

/// Two wheels of a lock that would overwrite one file with other content (the fixture index's
/// torchvision also ships a torch/__init__.py) are refused after the fetch, before any Docker
/// build, naming the image, the file and both wheels; nothing is built and the manifest is not
/// written.
#[tokio::test(flavor = "multi_thread")]
async fn wheels_that_would_overwrite_each_others_files_are_refused_before_any_build() {
    prepare().await;
    let scratch = tempfile::tempdir().unwrap();
    let _index = Index::start_with(scratch.path(), None, &[("INDEX_CLASH", "1")]);
    let project = Project::from_fixture("wheel-cache", "127.0.0.1:9", SELFTEST_PASS);
    project.add_selftest("gpu-selftest-cu13", SELFTEST_PASS);
    project.edit_matrix("127.0.0.1:9/", &format!("127.0.0.1:{}/", _index.port));
    let lock = project
        .imagegen(&["lock", "--uv", uv().to_str().unwrap()])
        .output()
        .unwrap();
    assert_code(&lock, 0);
    let manifest = project.path().join("images/manifest.json");
    let manifest_before = std::fs::read(&manifest).ok();
    let refused = build(&project, &scratch.path().join("cache"));
    assert_code(&refused, 2);
    let log = text(&refused);
    let name = "2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04";
    assert!(log.contains("wheels: 3/3 files ready in"), "{log}");
    assert!(
        log.contains(&format!(
            "{name}: two wheels of its lock install one file with different content"
        )),
        "{log}"
    );
    assert!(
        log.contains(
            "/opt/venv/lib/python3.12/site-packages/torch/__init__.py: torch-2.13.0-py3-none-any.whl and torchvision-0.28.0-py3-none-any.whl both install it, with different content or mode"
        ),
        "{log}"
    );
    assert!(!log.contains("building"), "{log}");
    assert!(log.contains("hint: keep one of the two projects"), "{log}");
    assert_eq!(std::fs::read(&manifest).ok(), manifest_before);
    let image = format!("{}/{}:{name}", project.registry, project.repository);
    let inspect = Command::new("docker")
        .args(["image", "inspect", &image])
        .output()
        .unwrap();
    assert!(!inspect.status.success(), "{image} was built");
}
