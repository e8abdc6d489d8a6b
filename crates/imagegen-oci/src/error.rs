//! `RegistryError`: every failure of a registry exchange and of the Docker credential
//! configuration, each naming the registry host (and the action) it concerns, with a `hint:` line
//! where the user can act. Messages never carry credentials: only redacted text goes into them.

/// A failure talking to a registry or reading the credentials for one.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The Docker credential configuration could not be read or a helper failed.
    #[error(
        "cannot get Docker credentials for {registry} from {origin}: {reason}\n\
         hint: check the file, or run `docker login {registry}` again"
    )]
    Credentials {
        registry: String,
        origin: String,
        reason: String,
    },

    /// The registry could not be reached (after retries).
    #[error(
        "registry {host} is unreachable after {attempts} attempt(s) ({url}): {reason}\n\
         hint: is the registry running and is {host} the right address?"
    )]
    Unreachable {
        host: String,
        url: String,
        attempts: u32,
        reason: String,
    },

    /// The registry accepted the connection and did not answer within the deadline (after
    /// retries).
    #[error(
        "registry {host} did not answer within {seconds} s ({url}), {attempts} attempt(s)\n\
         hint: is the registry at {host} up and answering? A slow registry needs a longer \
         deadline: --registry-timeout or IMAGEGEN_REGISTRY_TIMEOUT"
    )]
    Timeout {
        host: String,
        url: String,
        attempts: u32,
        seconds: u64,
    },

    /// The registry's TLS certificate was rejected; not retried.
    #[error(
        "cannot connect securely to registry {host} ({url}): {reason}\n\
         hint: install the registry's CA certificate in the system trust store \
         (e.g. /usr/local/share/ca-certificates, then update-ca-certificates), \
         or write the host as http://{host} if it only serves plain HTTP"
    )]
    Tls {
        host: String,
        url: String,
        reason: String,
    },

    /// The registry refused the credentials, or asked for some when none were given.
    #[error(
        "registry {host} refused {action} ({status}): {detail}\n\
         hint: check the credentials for {host} in the Docker config (`docker login {host}`)"
    )]
    Auth {
        host: String,
        action: String,
        status: u16,
        detail: String,
    },

    /// The registry answered with an unexpected status.
    #[error("registry {host} answered {status} to {action}: {detail}")]
    Status {
        host: String,
        action: String,
        status: u16,
        detail: String,
    },

    /// The registry's answer could not be understood.
    #[error("registry {host} sent an invalid answer to {action}: {reason}")]
    Protocol {
        host: String,
        action: String,
        reason: String,
    },
}
