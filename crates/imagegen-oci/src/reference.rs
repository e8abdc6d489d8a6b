//! A Docker image reference, `[registry/]repository[:tag][@digest]`, parsed once by the grammar of
//! `distribution/reference` (what dockerd and every registry client read): the registry is the
//! first `/`-separated component when it looks like a host (has a `.` or a `:`, or is
//! `localhost`), else Docker Hub; a `:` after the last `/` starts the tag; `@` starts the digest.
//! A [`Reference`] shows as it was written: no `docker.io/`, `library/` or `:latest` is added,
//! because imagegen records and prints references as the matrix names them.
//!
//! Why not `oci-client`'s or `oci-spec`'s `Reference`: both fill in the defaults when they parse
//! (`ubuntu` reads back as `docker.io/library/ubuntu:latest`), so the text a lock file or the
//! record keys on would change; and `oci-client` pulls reqwest into a crate that needs only text.

use std::fmt;
use std::str::FromStr;

/// The registry of a reference that names none.
pub const DOCKER_HUB: &str = "docker.io";

/// The longest name (registry and repository) the grammar allows.
const MAX_NAME_LENGTH: usize = 255;

/// Why a text is not a [`Reference`]; shows the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an image reference: {reason}")]
pub struct ReferenceError {
    text: String,
    reason: String,
}

/// An image reference as written, split into its parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    registry: Option<String>,
    path: String,
    tag: Option<String>,
    digest: Option<String>,
}

/// `name` split into its registry (when its first component is a host) and its path.
pub(crate) fn split_registry(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    }
}

/// The registry host of a repository (`127.0.0.1:5000/team/app` → `127.0.0.1:5000`,
/// `ghcr.io/org/app` → `ghcr.io`, `library/ubuntu` or `ubuntu` → `docker.io`).
pub fn registry_host_of(repository: &str) -> String {
    split_registry(repository)
        .0
        .unwrap_or(DOCKER_HUB)
        .to_string()
}

/// The repository's path inside its registry, as the distribution API wants it:
/// `127.0.0.1:5000/team/app` → `team/app`, `ghcr.io/org/app` → `org/app`, `ubuntu` → `ubuntu`.
/// Pairs with [`registry_host_of`].
pub fn repository_path_of(repository: &str) -> &str {
    split_registry(repository).1
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Reference, ReferenceError> {
        let error = |reason: &str| ReferenceError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => (rest, Some(digest)),
            None => (text, None),
        };
        let (name, tag) = match rest.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
            _ => (rest, None),
        };
        if name.len() > MAX_NAME_LENGTH {
            return Err(error("the name is longer than 255 characters"));
        }
        let (registry, path) = split_registry(name);
        if let Some(registry) = registry {
            check_registry(registry).map_err(|why| error(&why))?;
        }
        check_path(path).map_err(|why| error(&why))?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(|why| error(&why))?;
        }
        if let Some(digest) = digest {
            check_digest(digest).map_err(|why| error(&why))?;
        }
        Ok(Reference {
            registry: registry.map(str::to_string),
            path: path.to_string(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        })
    }
}

/// `host[:port]`: dot-separated labels of letters, digits and inner `-`, or a bracketed IPv6
/// address.
fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = if let Some(inner) = registry.strip_prefix('[') {
        let (address, after) = inner
            .split_once(']')
            .ok_or("the registry's IPv6 address is not closed with `]`")?;
        address
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{address:?} is not an IPv6 address"))?;
        (None, after.strip_prefix(':'))
    } else {
        match registry.rsplit_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(registry), None),
        }
    };
    if let Some(host) = host {
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if !host.split('.').all(label_ok) {
            return Err(format!("the registry {registry:?} is not a host name"));
        }
    }
    if let Some(port) = port {
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("the registry {registry:?} has no valid port"));
        }
    }
    Ok(())
}

/// `/`-separated components, each lowercase letters and digits joined by one `.`, one or two
/// `_`, or any number of `-`.
fn check_path(path: &str) -> Result<(), String> {
    for component in path.split('/') {
        let bad = || {
            format!("the repository component {component:?} is not valid (lowercase letters and digits, joined by `.`, `_`, `__` or dashes)")
        };
        let mut separator = String::new();
        let mut seen_alphanumeric = false;
        for c in component.chars() {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                let separator_ok = matches!(separator.as_str(), "" | "." | "_" | "__")
                    || separator.chars().all(|s| s == '-');
                if !separator_ok || (!seen_alphanumeric && !separator.is_empty()) {
                    return Err(bad());
                }
                separator.clear();
                seen_alphanumeric = true;
            } else if "._-".contains(c) {
                separator.push(c);
            } else {
                return Err(bad());
            }
        }
        if !seen_alphanumeric || !separator.is_empty() {
            return Err(bad());
        }
    }
    Ok(())
}

/// A word character, then up to 127 word characters, `.` or `-`.
fn check_tag(tag: &str) -> Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let valid = tag.len() <= 128
        && tag.chars().next().is_some_and(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!("the tag {tag:?} is not valid (a letter, digit or `_`, then up to 127 of those, `.` and `-`)"))
    }
}

/// `algorithm:hex`, the algorithm's components letters then letters and digits, joined by
/// `+.-_`; the hex at least 32 digits (`sha256:` takes exactly 64, lowercase).
fn check_digest(digest: &str) -> Result<(), String> {
    let bad = || format!("the digest {digest:?} is not `algorithm:hex`");
    let (algorithm, hex) = digest.split_once(':').ok_or_else(bad)?;
    let component_ok = |component: &str| {
        component
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && component.chars().all(|c| c.is_ascii_alphanumeric())
    };
    if !algorithm.split(['+', '.', '-', '_']).all(component_ok)
        || hex.len() < 32
        || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(bad());
    }
    if algorithm == "sha256" && (hex.len() != 64 || hex.bytes().any(|b| b.is_ascii_uppercase())) {
        return Err(format!(
            "the digest {digest:?} is not sha256 and 64 lowercase hex digits"
        ));
    }
    Ok(())
}

impl Reference {
    /// The registry host: the one written, else `docker.io`.
    pub fn registry(&self) -> &str {
        self.registry.as_deref().unwrap_or(DOCKER_HUB)
    }

    /// The repository's path inside its registry (`team/app`, `nvidia/cuda`, `ubuntu`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The repository as written: registry (if written) and path, without tag or digest.
    pub fn name(&self) -> String {
        match &self.registry {
            Some(registry) => format!("{registry}/{}", self.path),
            None => self.path.clone(),
        }
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// The reference without its digest (`nvidia/cuda:13.0.0-base@sha256:…` →
    /// `nvidia/cuda:13.0.0-base`).
    pub fn without_digest(&self) -> String {
        match &self.tag {
            Some(tag) => format!("{}:{tag}", self.name()),
            None => self.name(),
        }
    }

    /// The reference by its digest alone when it has one (`name@sha256:…`, as the daemon looks
    /// up an image whose tag may name other bytes), else as written.
    pub fn by_digest(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{}@{digest}", self.name()),
            None => self.to_string(),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.without_digest())?;
        if let Some(digest) = &self.digest {
            write!(formatter, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn reference(text: &str) -> Reference {
        text.parse().unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn references_split_into_registry_path_tag_and_digest() {
        for (text, registry, path, tag, digest) in [
            ("ubuntu", "docker.io", "ubuntu", None, None),
            ("nvidia/cuda:13.0.0-base-ubuntu24.04", "docker.io", "nvidia/cuda", Some("13.0.0-base-ubuntu24.04"), None),
            ("127.0.0.1:5000/team/app:1", "127.0.0.1:5000", "team/app", Some("1"), None),
            ("localhost/app", "localhost", "app", None, None),
            ("ghcr.io/org/app@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "ghcr.io", "org/app", None, Some(DIGEST)),
            ("[::1]:5000/a__b/c-d.e:v1.2_3", "[::1]:5000", "a__b/c-d.e", Some("v1.2_3"), None),
        ] {
            let parsed = reference(text);
            assert_eq!(parsed.registry(), registry, "{text}");
            assert_eq!(parsed.path(), path, "{text}");
            assert_eq!(parsed.tag(), tag, "{text}");
            assert_eq!(parsed.digest(), digest, "{text}");
            assert_eq!(parsed.to_string(), text, "shown as written");
        }
        let pinned = reference(&format!(
            "registry.example:5000/hub/nvidia/cuda:13.0.0@{DIGEST}"
        ));
        assert_eq!(
            pinned.without_digest(),
            "registry.example:5000/hub/nvidia/cuda:13.0.0"
        );
        assert_eq!(
            pinned.by_digest(),
            format!("registry.example:5000/hub/nvidia/cuda@{DIGEST}")
        );
        assert_eq!(pinned.name(), "registry.example:5000/hub/nvidia/cuda");
        assert_eq!(reference("ubuntu:24.04").by_digest(), "ubuntu:24.04");
    }

    #[test]
    fn what_the_grammar_refuses_is_refused() {
        for bad in [
            "",
            "Ubuntu",
            "team//app",
            "team/app:",
            "team/app:-x",
            "team/app@sha256:abc",
            "team/app@sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "-bad.example/app",
            "bad_host.example/app",
            "host.example:port/app",
            "app-",
            "a...b",
            "a___b",
            "team/app:1 ; id",
            "team/app:$(id)",
        ] {
            assert!(bad.parse::<Reference>().is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn repository_references_split_into_host_and_path() {
        for (repository, host, path) in [
            ("127.0.0.1:5000/team/app", "127.0.0.1:5000", "team/app"),
            ("ghcr.io/org/app", "ghcr.io", "org/app"),
            ("localhost/app", "localhost", "app"),
            ("team/app", "docker.io", "team/app"),
            ("ubuntu", "docker.io", "ubuntu"),
            ("library/ubuntu", "docker.io", "library/ubuntu"),
        ] {
            assert_eq!(registry_host_of(repository), host, "{repository}");
            assert_eq!(repository_path_of(repository), path, "{repository}");
        }
    }
}
