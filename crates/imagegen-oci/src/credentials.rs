//! Registry credentials from the Docker client configuration (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`): `credHelpers` (per registry), `credsStore` (for all registries) and
//! `auths` entries (base64 `auth`, `username`/`password`, `identitytoken`), looked up in the same
//! order as the docker CLI. Helpers are run as `docker-credential-<name> get`.
//!
//! Secrets never leave this module in readable form except through the accessors that hand them
//! to the wire: `Debug` prints `<redacted>`, and error messages carry no helper output that could
//! hold a secret. This module does not choose which registry to log into.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::RegistryError;

/// Key the docker CLI uses for Docker Hub in `auths` and in credential helpers.
const DOCKER_HUB_AUTH_KEY: &str = "https://index.docker.io/v1/";

/// Credentials for one registry. `Debug` never shows the password or token.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user name and a password (or a personal access token used as a password).
    UsernamePassword { username: String, password: String },
    /// An OAuth2 refresh token (`identitytoken` in the config, `<token>` user of a helper).
    IdentityToken { token: String },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::UsernamePassword { username, .. } => formatter
                .debug_struct("UsernamePassword")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::IdentityToken { .. } => formatter
                .debug_struct("IdentityToken")
                .field("token", &"<redacted>")
                .finish(),
        }
    }
}

impl Credentials {
    /// Convenience constructor for a user name and password.
    pub fn username_password(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials::UsernamePassword {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The secret part (password or token).
    fn secret(&self) -> &str {
        match self {
            Credentials::UsernamePassword { password, .. } => password,
            Credentials::IdentityToken { token } => token,
        }
    }

    /// Replaces every occurrence of the secret (and of its basic-auth encoding) in `text` with
    /// `<redacted>`; used on any text from a daemon or registry before it goes into an error.
    pub fn redact(&self, text: &str) -> String {
        let mut redacted = text.to_string();
        let mut secrets = vec![self.secret().to_string()];
        if let Credentials::UsernamePassword { username, password } = self {
            secrets.push(
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}")),
            );
        }
        for secret in secrets.iter().filter(|secret| !secret.is_empty()) {
            redacted = redacted.replace(secret.as_str(), "<redacted>");
        }
        redacted
    }

    /// `Authorization: Basic ...` value, for registries that ask for basic auth.
    pub(crate) fn basic_authorization(&self) -> Option<String> {
        match self {
            Credentials::UsernamePassword { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            Credentials::IdentityToken { .. } => None,
        }
    }

    pub(crate) fn identity_token(&self) -> Option<&str> {
        match self {
            Credentials::IdentityToken { token } => Some(token),
            Credentials::UsernamePassword { .. } => None,
        }
    }
}

fn normalize_registry_key(key: &str) -> String {
    let without_scheme = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = without_scheme.split('/').next().unwrap_or(without_scheme);
    match host {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        other => other.to_ascii_lowercase(),
    }
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    username: String,
    secret: String,
}

/// A parsed Docker client configuration. `Debug` lists registries and helpers, never secrets.
pub struct DockerConfig {
    /// The `config.json` this came from (it need not exist).
    path: PathBuf,
    file: ConfigFile,
    /// Where to look for `docker-credential-*` first; `None` means `PATH` only.
    helper_dir: Option<PathBuf>,
}

impl fmt::Debug for DockerConfig {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("DockerConfig")
            .field("path", &self.path)
            .field("auths", &self.file.auths.keys().collect::<Vec<_>>())
            .field("creds_store", &self.file.creds_store)
            .field("cred_helpers", &self.file.cred_helpers)
            .finish()
    }
}

impl DockerConfig {
    /// `$DOCKER_CONFIG`, else `$HOME/.docker`.
    pub(crate) fn default_dir() -> Option<PathBuf> {
        std::env::var_os("DOCKER_CONFIG")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker")))
    }

    /// Loads the configuration from [`DockerConfig::default_dir`]; no directory or no file means
    /// an empty configuration (anonymous access everywhere).
    pub(crate) fn load_default() -> Result<DockerConfig, RegistryError> {
        match Self::default_dir() {
            Some(dir) => Self::load(&dir),
            None => Ok(DockerConfig {
                path: PathBuf::from("config.json"),
                file: ConfigFile::default(),
                helper_dir: None,
            }),
        }
    }

    /// Loads `dir/config.json`; a missing file is an empty configuration, an unreadable or
    /// malformed one is an error naming the file.
    pub fn load(dir: &Path) -> Result<DockerConfig, RegistryError> {
        let path = dir.join("config.json");
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<ConfigFile>(&bytes).map_err(|error| {
                RegistryError::Credentials {
                    registry: "any registry".into(),
                    origin: path.display().to_string(),
                    // serde_json errors name a line and column, never the value.
                    reason: format!("not a valid Docker config: {error}"),
                }
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => ConfigFile::default(),
            Err(error) => {
                return Err(RegistryError::Credentials {
                    registry: "any registry".into(),
                    origin: path.display().to_string(),
                    reason: error.to_string(),
                })
            }
        };
        Ok(DockerConfig {
            path,
            file,
            helper_dir: None,
        })
    }

    /// Looks for `docker-credential-<name>` in `dir` before `PATH` (tests, vendored helpers).
    #[cfg(test)]
    pub(crate) fn with_helper_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.helper_dir = Some(dir.into());
        self
    }

    /// Credentials for `registry_host` (as [`registry_host_of`] returns it), or `None` for
    /// anonymous access. Order: `credHelpers`, `credsStore`, then `auths`.
    pub fn credentials_for(
        &self,
        registry_host: &str,
    ) -> Result<Option<Credentials>, RegistryError> {
        let wanted = normalize_registry_key(registry_host);
        let server_address = if wanted == "docker.io" {
            DOCKER_HUB_AUTH_KEY.to_string()
        } else {
            registry_host.to_string()
        };

        let helper = self
            .file
            .cred_helpers
            .iter()
            .find(|(key, helper)| normalize_registry_key(key) == wanted && !helper.is_empty())
            .map(|(_, helper)| helper.clone())
            .or_else(|| {
                self.file
                    .creds_store
                    .clone()
                    .filter(|store| !store.is_empty())
            });
        if let Some(helper) = helper {
            if let Some(credentials) = self.run_helper(&helper, &server_address, registry_host)? {
                return Ok(Some(credentials));
            }
        }

        let entry = self
            .file
            .auths
            .iter()
            .find(|(key, _)| normalize_registry_key(key) == wanted)
            .map(|(_, entry)| entry);
        let Some(entry) = entry else {
            return Ok(None);
        };
        if let Some(token) = entry
            .identitytoken
            .as_ref()
            .filter(|token| !token.is_empty())
        {
            return Ok(Some(Credentials::IdentityToken {
                token: token.clone(),
            }));
        }
        if let Some(encoded) = entry.auth.as_ref().filter(|auth| !auth.is_empty()) {
            return self.decode_auth(encoded, registry_host).map(Some);
        }
        match (&entry.username, &entry.password) {
            (Some(username), Some(password)) if !username.is_empty() => {
                Ok(Some(Credentials::username_password(username, password)))
            }
            _ => Ok(None),
        }
    }

    fn decode_auth(
        &self,
        encoded: &str,
        registry_host: &str,
    ) -> Result<Credentials, RegistryError> {
        let invalid = |reason: &str| RegistryError::Credentials {
            registry: registry_host.to_string(),
            origin: self.path.display().to_string(),
            reason: reason.to_string(),
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(encoded.trim()))
            .map_err(|_| invalid("the `auth` entry is not valid base64"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| invalid("the `auth` entry does not decode to UTF-8 text"))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| invalid("the `auth` entry does not decode to `user:password`"))?;
        Ok(Credentials::username_password(username, password))
    }

    fn helper_program(&self, helper: &str) -> PathBuf {
        let name = format!("docker-credential-{helper}");
        if let Some(dir) = &self.helper_dir {
            let candidate = dir.join(&name);
            if candidate.exists() {
                return candidate;
            }
        }
        PathBuf::from(name)
    }

    /// Runs the helper; `Ok(None)` when it knows no credentials for this registry.
    fn run_helper(
        &self,
        helper: &str,
        server_address: &str,
        registry_host: &str,
    ) -> Result<Option<Credentials>, RegistryError> {
        let program = self.helper_program(helper);
        let helper_error = |reason: String| RegistryError::Credentials {
            registry: registry_host.to_string(),
            origin: format!(
                "credential helper `{}` (configured in {})",
                program.display(),
                self.path.display()
            ),
            reason,
        };
        let mut child = Command::new(&program)
            .arg("get")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| helper_error(format!("cannot start it: {error}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            match stdin.write_all(server_address.as_bytes()) {
                // A helper may exit without reading (e.g. "not found"); its exit status and
                // output below say what happened.
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(error) => return Err(helper_error(format!("cannot write to it: {error}"))),
                Ok(()) => {}
            }
        }
        let output = child
            .wait_with_output()
            .map_err(|error| helper_error(format!("cannot read its answer: {error}")))?;
        if !output.status.success() {
            // On failure helpers print a plain message (no secret), e.g.
            // "credentials not found in native keychain".
            let message = format!(
                "{} {}",
                String::from_utf8_lossy(&output.stdout).trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
            if message
                .to_ascii_lowercase()
                .contains("credentials not found")
            {
                return Ok(None);
            }
            let message: String = message.trim().chars().take(300).collect();
            return Err(helper_error(format!(
                "it failed ({}): {message}",
                output.status
            )));
        }
        // On success stdout holds the secret: never quote it in an error.
        let answer: HelperAnswer = serde_json::from_slice(&output.stdout).map_err(|_| {
            helper_error(
                "its answer is not the expected JSON {\"Username\":...,\"Secret\":...}".into(),
            )
        })?;
        if answer.secret.is_empty() {
            return Ok(None);
        }
        if answer.username == "<token>" {
            Ok(Some(Credentials::IdentityToken {
                token: answer.secret,
            }))
        } else {
            Ok(Some(Credentials::username_password(
                answer.username,
                answer.secret,
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::registry_host_of;
    use std::os::unix::fs::PermissionsExt;

    fn config_dir(json: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), json).unwrap();
        dir
    }

    fn write_helper(dir: &Path, name: &str, script: &str) {
        let path = dir.join(format!("docker-credential-{name}"));
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn base64_auth_entry() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:s3cret-pw");
        let dir = config_dir(&format!(
            r#"{{"auths":{{"https://registry.example.com/v1/":{{"auth":"{encoded}"}}}}}}"#
        ));
        let config = DockerConfig::load(dir.path()).unwrap();
        assert_eq!(
            config.credentials_for("registry.example.com").unwrap(),
            Some(Credentials::username_password("alice", "s3cret-pw"))
        );
        assert_eq!(config.credentials_for("other.example.com").unwrap(), None);
    }

    #[test]
    fn username_password_and_identity_token_entries() {
        let dir = config_dir(
            r#"{"auths":{
                "a.example.com":{"username":"bob","password":"pw-b"},
                "b.example.com":{"identitytoken":"tok-123"}}}"#,
        );
        let config = DockerConfig::load(dir.path()).unwrap();
        assert_eq!(
            config.credentials_for("a.example.com").unwrap(),
            Some(Credentials::username_password("bob", "pw-b"))
        );
        assert_eq!(
            config.credentials_for("b.example.com").unwrap(),
            Some(Credentials::IdentityToken {
                token: "tok-123".into()
            })
        );
    }

    #[test]
    fn docker_hub_aliases_match() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("hubuser:hubpw");
        let dir = config_dir(&format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{encoded}"}}}}}}"#
        ));
        let config = DockerConfig::load(dir.path()).unwrap();
        assert_eq!(registry_host_of("library/ubuntu"), "docker.io");
        assert_eq!(
            config.credentials_for("docker.io").unwrap(),
            Some(Credentials::username_password("hubuser", "hubpw"))
        );
    }

    #[test]
    fn missing_config_is_anonymous_and_bad_json_names_the_file() {
        let empty = tempfile::tempdir().unwrap();
        let config = DockerConfig::load(empty.path()).unwrap();
        assert_eq!(config.credentials_for("x.example.com").unwrap(), None);

        let bad = config_dir("{not json");
        let error = DockerConfig::load(bad.path()).unwrap_err().to_string();
        assert!(error.contains("config.json"), "{error}");
    }

    #[test]
    fn cred_helpers_take_precedence_and_tokens_are_recognised() {
        let dir = config_dir(
            r#"{"credHelpers":{"h.example.com":"fake"},"credsStore":"store",
                "auths":{"h.example.com":{"username":"file","password":"file-pw"}}}"#,
        );
        write_helper(
            dir.path(),
            "fake",
            "#!/bin/sh\nread server\n[ \"$1\" = get ] || exit 2\n\
             echo \"{\\\"ServerURL\\\":\\\"$server\\\",\\\"Username\\\":\\\"<token>\\\",\\\"Secret\\\":\\\"tok-for-$server\\\"}\"\n",
        );
        write_helper(
            dir.path(),
            "store",
            "#!/bin/sh\nread server\necho \"{\\\"Username\\\":\\\"carol\\\",\\\"Secret\\\":\\\"store-pw\\\"}\"\n",
        );
        let config = DockerConfig::load(dir.path())
            .unwrap()
            .with_helper_dir(dir.path());
        assert_eq!(
            config.credentials_for("h.example.com").unwrap(),
            Some(Credentials::IdentityToken {
                token: "tok-for-h.example.com".into()
            })
        );
        assert_eq!(
            config.credentials_for("other.example.com").unwrap(),
            Some(Credentials::username_password("carol", "store-pw"))
        );
    }

    #[test]
    fn helper_not_found_falls_back_and_failure_hides_output_on_success_path() {
        let dir = config_dir(
            r#"{"credsStore":"empty","credHelpers":{"bad.example.com":"garbage"},
                "auths":{"f.example.com":{"username":"file","password":"file-pw"}}}"#,
        );
        write_helper(
            dir.path(),
            "empty",
            "#!/bin/sh\necho 'credentials not found in native keychain'\nexit 1\n",
        );
        write_helper(
            dir.path(),
            "garbage",
            "#!/bin/sh\necho 'SECRET-LEAK-notjson'\n",
        );
        let config = DockerConfig::load(dir.path())
            .unwrap()
            .with_helper_dir(dir.path());
        assert_eq!(
            config.credentials_for("f.example.com").unwrap(),
            Some(Credentials::username_password("file", "file-pw"))
        );
        let error = config
            .credentials_for("bad.example.com")
            .unwrap_err()
            .to_string();
        assert!(error.contains("bad.example.com"), "{error}");
        assert!(!error.contains("SECRET-LEAK"), "{error}");
    }

    #[test]
    fn missing_helper_is_an_error_naming_it() {
        let dir = config_dir(r#"{"credsStore":"imagegen-no-such-helper"}"#);
        let config = DockerConfig::load(dir.path()).unwrap();
        let error = config
            .credentials_for("x.example.com")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("docker-credential-imagegen-no-such-helper"),
            "{error}"
        );
    }

    #[test]
    fn debug_and_redact_hide_secrets() {
        let credentials = Credentials::username_password("alice", "hunter2-secret");
        let debug = format!("{credentials:?}");
        assert!(!debug.contains("hunter2-secret"), "{debug}");
        assert!(debug.contains("alice"), "{debug}");
        let token = Credentials::IdentityToken {
            token: "tok-secret".into(),
        };
        assert!(!format!("{token:?}").contains("tok-secret"));

        let basic = base64::engine::general_purpose::STANDARD.encode("alice:hunter2-secret");
        let text = format!("server said hunter2-secret and Basic {basic}");
        let redacted = credentials.redact(&text);
        assert!(!redacted.contains("hunter2-secret"), "{redacted}");
        assert!(!redacted.contains(&basic), "{redacted}");

        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:hunter2-secret");
        let dir = config_dir(&format!(
            r#"{{"auths":{{"x.example.com":{{"auth":"{encoded}"}}}}}}"#
        ));
        let config = DockerConfig::load(dir.path()).unwrap();
        assert!(!format!("{config:?}").contains(&encoded));
    }
}
