//! The one place registry clients are made: [`Registries`] reads the user's Docker configuration
//! once (only when a registry is first needed, so a broken configuration matters only then),
//! finds the credentials of each registry host, and hands out one [`RegistryClient`] per host
//! with the run's deadline and retries. Every command and the Docker builder get their clients
//! here; none sets one up by hand.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::credentials::{Credentials, DockerConfig};
use crate::error::RegistryError;
use crate::reference::registry_host_of;
use crate::registry::{RegistryClient, DEFAULT_TIMEOUT};
use crate::retry::RetryPolicy;

/// Registry clients by host, with the user's credentials, one deadline and one retry policy.
pub struct Registries {
    timeout: Duration,
    retry: RetryPolicy,
    config: Mutex<Option<DockerConfig>>,
    credentials: Mutex<BTreeMap<String, Option<Credentials>>>,
    clients: Mutex<BTreeMap<String, RegistryClient>>,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

impl Default for Registries {
    fn default() -> Self {
        Registries::new(DEFAULT_TIMEOUT, RetryPolicy::default())
    }
}

impl Registries {
    /// Clients whose requests each have `timeout` (`--registry-timeout`) and are retried by
    /// `retry`.
    pub fn new(timeout: Duration, retry: RetryPolicy) -> Registries {
        Registries {
            timeout,
            retry,
            config: Mutex::new(None),
            credentials: Mutex::new(BTreeMap::new()),
            clients: Mutex::new(BTreeMap::new()),
        }
    }

    /// The credentials for the registry of `repository` (`host/path`), from the Docker
    /// configuration (`auths`, `credsStore`, `credHelpers`).
    pub fn credentials(&self, repository: &str) -> Result<Option<Credentials>, RegistryError> {
        let host = registry_host_of(repository);
        if let Some(found) = self
            .credentials
            .lock()
            .expect("credentials lock")
            .get(&host)
        {
            return Ok(found.clone());
        }
        let found = {
            let mut config = self.config.lock().expect("config lock");
            if config.is_none() {
                *config = Some(DockerConfig::load_default()?);
            }
            config
                .as_ref()
                .expect("loaded above")
                .credentials_for(&host)?
        };
        self.credentials
            .lock()
            .expect("credentials lock")
            .insert(host, found.clone());
        Ok(found)
    }

    /// The client of the registry of `repository` (shared by every repository of that host).
    pub fn client(&self, repository: &str) -> Result<RegistryClient, RegistryError> {
        let host = registry_host_of(repository);
        if let Some(client) = self.clients.lock().expect("clients lock").get(&host) {
            return Ok(client.clone());
        }
        let credentials = self.credentials(repository)?;
        let client = RegistryClient::new(&host, credentials)
            .with_retry(self.retry)
            .with_timeout(self.timeout);
        self.clients
            .lock()
            .expect("clients lock")
            .insert(host, client.clone());
        Ok(client)
    }
}
