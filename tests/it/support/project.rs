//! A project directory for CLI-level tests of `imagegen build`, `plan`, `rollback` and `diff`:
//! the build fixture (tests/fixtures/build) rendered for a registry and a unique repository, a
//! stand-in gpu-selftest, and an empty Docker config so the user's own credentials are not used.
#![allow(dead_code)]

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use imagegen::docker::{Credentials, RegistryClient};
use serde_json::Value;

/// gpu-selftest stand-ins, by behaviour.
pub const SELFTEST_NO_GPU: &str = r#"#!/bin/sh
echo '{"schema_version":1,"tool":"gpu-selftest","overall":"error","error":"cannot load libcuda.so.1: no NVIDIA driver in this container","checks":[]}'
echo "gpu-selftest: cannot run: libcuda.so.1 not found" >&2
exit 2
"#;
pub const SELFTEST_PASS: &str = r#"#!/bin/sh
echo '{"schema_version":1,"tool":"gpu-selftest","overall":"pass","checks":[{"name":"matmul","status":"pass","summary":"bf16 790 TFLOP/s within 1e-2"},{"name":"nccl","status":"pass","summary":"sum exact"}]}'
exit 0
"#;
pub const SELFTEST_FAIL: &str = r#"#!/bin/sh
echo '{"schema_version":1,"tool":"gpu-selftest","overall":"fail","checks":[{"name":"bandwidth","status":"fail","summary":"pinned H2D 9.1 GB/s < 80% of PCIe Gen5 x16"}]}'
exit 1
"#;

/// A project directory: the build fixture rendered for `registry`/`repository`, plus a
/// self-test directory and an empty Docker config (so the user's own credentials are not used).
/// Its templates label every layer with its own test case (`TEST_CASE` in the fixture), and
/// dropping it removes every image and container it made.
pub struct Project {
    dir: tempfile::TempDir,
    pub repository: String,
    pub registry: String,
    cleanup: super::Cleanup,
}

impl Project {
    pub fn new(registry: &str, selftest: &str) -> Project {
        Project::from_fixture("build", registry, selftest)
    }

    /// A project from `tests/fixtures/<fixture>` (a matrix.yaml and a templates directory).
    pub fn from_fixture(fixture: &str, registry: &str, selftest: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture);
        let repository = super::unique_name("imagegen-test/torch");
        let cleanup = super::Cleanup::new("project");
        let matrix = std::fs::read_to_string(fixture.join("matrix.yaml"))
            .unwrap()
            .replace("REGISTRY", registry)
            .replace("REPOSITORY", &repository);
        std::fs::write(dir.path().join("matrix.yaml"), matrix).unwrap();
        std::fs::create_dir_all(dir.path().join("templates")).unwrap();
        // A fixture on the repository's own templates has no templates folder.
        let templates = std::fs::read_dir(fixture.join("templates"))
            .into_iter()
            .flatten();
        for entry in templates {
            let path = entry.unwrap().path();
            let template = std::fs::read_to_string(&path)
                .unwrap()
                .replace("TEST_CASE", cleanup.case())
                .replace("TEST_RUN", &super::run_id());
            std::fs::write(
                dir.path().join("templates").join(path.file_name().unwrap()),
                template,
            )
            .unwrap();
        }
        std::fs::create_dir_all(dir.path().join("docker-config")).unwrap();
        std::fs::write(dir.path().join("docker-config/config.json"), "{}").unwrap();
        let project = Project {
            dir,
            repository,
            registry: registry.to_string(),
            cleanup,
        };
        project.set_selftest(selftest);
        project.imagegen(&["render"]).assert().success();
        project
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The label value every image and container of this project carries.
    pub fn case(&self) -> &str {
        self.cleanup.case()
    }

    /// Removes every image and container this project made, now.
    pub async fn remove_images(&self) {
        self.cleanup.remove_now().await;
    }

    pub fn set_selftest(&self, script: &str) {
        self.add_selftest("gpu-selftest-cu12", script);
    }

    /// Writes a stand-in self-test binary under `selftest/<name>`, marked with the test case so
    /// the layer that copies it is this test's own even on `scratch`.
    pub fn add_selftest(&self, name: &str, script: &str) {
        let dir = self.path().join("selftest");
        std::fs::create_dir_all(&dir).unwrap();
        let binary = dir.join(name);
        let (shebang, body) = script.split_once('\n').unwrap_or((script, ""));
        let marked = format!("{shebang}\n# imagegen-test case {}\n{body}", self.case());
        std::fs::write(&binary, marked).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    pub fn edit_matrix(&self, from: &str, to: &str) {
        let path = self.path().join("matrix.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{from:?} not in matrix");
        std::fs::write(&path, text.replace(from, to)).unwrap();
        self.imagegen(&["render"]).assert().success();
    }

    pub fn imagegen(&self, args: &[&str]) -> Command {
        let mut command = Command::cargo_bin("imagegen").unwrap();
        command
            .current_dir(self.path())
            .env("DOCKER_CONFIG", self.path().join("docker-config"))
            .env("CI", "true")
            .args(args);
        command
    }

    pub fn build(&self, extra: &[&str]) -> Output {
        let mut args = vec!["build", "--selftest-dir", "selftest", "--jobs", "2"];
        args.extend_from_slice(extra);
        self.imagegen(&args).output().unwrap()
    }

    pub fn manifest(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.path().join("imagegen-manifest.json")).unwrap(),
        )
        .unwrap()
    }

    pub fn tag(&self, torch: &str, variant: &str) -> String {
        format!("{torch}-cuda12.6-cudnn9-{variant}-ubuntu24.04")
    }

    pub fn client(&self, credentials: Option<Credentials>) -> RegistryClient {
        RegistryClient::new(&self.registry, credentials)
    }
}

pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub fn assert_code(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "expected exit {code}:\n{}",
        text(output)
    );
}

/// The daemon is up and the busybox base image is loaded.
pub async fn prepare() {
    let engine = super::engine().await;
    super::base_image(&engine).await;
}
