//! `imagegen build` honours `DOCKER_HOST`: pointed nowhere, it stops with one clear error naming
//! the address, exit 2, and leaves no manifest behind. Run as a separate process, so the
//! environment variable never reaches the other tests of this binary.

use crate::support::project::{Project, SELFTEST_PASS};

#[test]
fn docker_host_pointing_nowhere_is_one_clear_error() {
    let address = "unix:///nonexistent/imagegen-docker-host.sock";
    let project = Project::new("127.0.0.1:1", SELFTEST_PASS);
    let output = project
        .imagegen(&["build", "--selftest-dir", "selftest"])
        .env("DOCKER_HOST", address)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the Docker daemon at {address}: ")),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    assert_eq!(
        stderr.matches("cannot reach the Docker daemon").count(),
        1,
        "one error, not one per image: {stderr}"
    );
    assert!(!project.path().join("imagegen-manifest.json").exists());
}
