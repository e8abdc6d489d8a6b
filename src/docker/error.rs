//! `DockerError`: every failure of the Docker and registry edge, each naming the daemon address,
//! image reference, container image or registry host it concerns, with a `hint:` line where the
//! user can act. Messages never carry credentials: callers put only redacted text into them.

use std::path::PathBuf;

/// A failure talking to the Docker daemon, a registry or the credential configuration.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The daemon could not be reached at all (socket missing, connection refused, bad address).
    #[error(
        "cannot reach the Docker daemon at {address}: {reason}\n\
         hint: is dockerd running and is its socket readable by this user? \
         Set DOCKER_HOST to the daemon's address (unix:///path/docker.sock or tcp://host:port)"
    )]
    DaemonUnreachable { address: String, reason: String },

    /// The daemon answered, but a request failed.
    #[error("the Docker daemon at {address} failed while {action}: {reason}")]
    Daemon {
        address: String,
        action: String,
        reason: String,
    },

    /// Pulling an image failed (registry unreachable, unknown name, access denied).
    #[error("pulling {reference} through the Docker daemon at {address} failed: {reason}")]
    PullFailed {
        address: String,
        reference: String,
        reason: String,
    },

    /// A local image that an operation needs does not exist.
    #[error("no image `{reference}` in the Docker daemon at {address}")]
    ImageNotFound { address: String, reference: String },

    /// A Dockerfile step failed; carries the step and the last lines of build output.
    #[error("{}", build_failure_text(.tag, .step, .message, .last_lines))]
    BuildFailed {
        tag: String,
        /// The `Step N/M : INSTRUCTION` line of the failing step, when the builder printed one.
        step: Option<String>,
        /// The daemon's error message, e.g. "The command '/bin/sh -c make' returned a non-zero code: 2".
        message: String,
        /// Up to the last 20 lines of build output before the failure.
        last_lines: Vec<String>,
    },

    /// The build context could not be assembled.
    #[error("cannot assemble the build context from {path}: {reason}")]
    Context { path: PathBuf, reason: String },

    /// A push failed; transient failures were retried up to the policy's attempts.
    #[error(
        "pushing {reference} to registry {registry} failed after {attempts} attempt(s): {reason}{}",
        push_hint(*.transient)
    )]
    PushFailed {
        reference: String,
        registry: String,
        attempts: u32,
        /// Whether the last failure looked transient (network, 5xx) rather than permanent (auth).
        transient: bool,
        reason: String,
    },

    /// Creating, starting, waiting for or reading a container failed.
    #[error("running a container from {image} failed while {action}: {reason}")]
    Container {
        image: String,
        action: String,
        reason: String,
    },

    /// A container ran longer than its allowed time; it was killed and removed.
    #[error("the container from {image} did not exit within {timeout_seconds} s; it was killed and removed")]
    ContainerTimeout { image: String, timeout_seconds: u64 },

    /// GPUs were requested but the daemon cannot provide them.
    #[error(
        "cannot give GPUs to a container from {image}: {reason}\n\
         hint: install the NVIDIA Container Toolkit and restart dockerd, or run without GPUs"
    )]
    GpuUnavailable { image: String, reason: String },

    /// A registry, or the credential configuration for one, failed (imagegen_oci).
    #[error(transparent)]
    Registry(#[from] imagegen_oci::RegistryError),
}

fn build_failure_text(
    tag: &str,
    step: &Option<String>,
    message: &str,
    last_lines: &[String],
) -> String {
    let mut text = format!("building image {tag} failed");
    if let Some(step) = step {
        text.push_str(&format!(" at {step}"));
    }
    // The daemon repeats a failed RUN's command (`The command '/bin/sh -c CMD' returned a
    // non-zero code: 3`): said once, as the step, with the exit code.
    let command = step
        .as_deref()
        .and_then(|step| step.split_once(" : RUN ").map(|(_, command)| command));
    match command.and_then(|command| {
        message.trim_end().strip_prefix(&format!(
            "The command '/bin/sh -c {command}' returned a non-zero code: "
        ))
    }) {
        Some(code) => text.push_str(&format!(" (exit code {code})")),
        None => text.push_str(&format!(": {}", message.trim_end())),
    }
    // The step line is in the header already.
    let last_lines: Vec<&String> = last_lines
        .iter()
        .filter(|line| Some(line.as_str()) != step.as_deref())
        .collect();
    if !last_lines.is_empty() {
        text.push_str(&format!(
            "\nlast {} line(s) of build output:",
            last_lines.len()
        ));
        for line in last_lines {
            text.push_str("\n  | ");
            text.push_str(line);
        }
    }
    text
}

fn push_hint(transient: bool) -> &'static str {
    if transient {
        "\nhint: the registry looked temporarily unavailable; check that it is up, then run again"
    } else {
        "\nhint: check the repository name and the credentials for this registry (`docker login`)"
    }
}
