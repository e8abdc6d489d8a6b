//! `Engine::connect` honours `DOCKER_HOST`. Alone in its own test binary because it changes the
//! process environment, which would race with tests running in parallel threads.

use imagegen::docker::{DockerError, Engine};

#[tokio::test]
async fn docker_host_pointing_nowhere_is_one_clear_error() {
    let address = "unix:///nonexistent/imagegen-docker-host.sock";
    std::env::set_var("DOCKER_HOST", address);
    let error = Engine::connect().await.unwrap_err();
    std::env::remove_var("DOCKER_HOST");
    assert!(
        matches!(error, DockerError::DaemonUnreachable { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("cannot reach the Docker daemon at {address}: ")),
        "{text}"
    );
    assert!(text.contains("hint:"), "{text}");
}
