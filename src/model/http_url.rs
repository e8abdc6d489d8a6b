//! The http(s) URLs a matrix names (an extra package index, the mirrors), as a type that can only
//! be built valid. The text goes through the WHATWG URL parser of the `url` crate, the parser
//! uv, pip's `urllib3` successors, curl and node agree with, and every check is made on the parsed
//! value, never on the text: `https:///bob:s3cret@host` and `https:\\bob:s3cret@host` are read
//! as user `bob`, password `s3cret`, and refused like `https://bob:s3cret@host`.
//!
//! What is accepted is exactly what every parser reads the same way: the text must be the URL's
//! own serialization (a host-only URL may leave out its `/`), so what the matrix says is what
//! reaches a Dockerfile, a lock header and a log. Its characters are then checked for the places
//! the templates put it: unquoted on a `RUN` line (pip's `--index-url`) and in a `sed s#…#…#`
//! expression (the apt mirrors).
//!
//! Credentials never enter a matrix (it is committed and reaches the lock's header): an index
//! names the environment variables holding them. No message of this module prints a password:
//! [`redact`] masks the user information of any text, parsed or not, before it is shown.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Characters a serialized URL may hold: no shell metacharacter (`;&|$` backticks quotes
/// spaces `<>()*!` globs), no `#` (the `sed` delimiter), no `\`, no `@` (no user information).
fn safe_character(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~:/%+=,".contains(c)
}

/// An http(s) URL without credentials, query or fragment, safe on a shell line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct HttpUrl(String);

/// Why a text is not an [`HttpUrl`]. Each variant holds the text as [`redact`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UrlError {
    #[error("{shown:?} is not a URL: {reason}")]
    NotAUrl { shown: String, reason: String },
    #[error("{shown:?} must start with http:// or https://")]
    Scheme { shown: String },
    #[error("{shown:?} holds credentials; they never go into matrix.yaml (it is committed, and would reach the lock's header): name them with `username_env`/`password_env` or put them in a netrc file")]
    Credentials { shown: String },
    #[error("{shown:?} has a query or a fragment (`?`, `#`), which an index or mirror URL does not take")]
    QueryOrFragment { shown: String },
    #[error("{shown:?} is read by URL parsers as {parsed:?}: write it that way, so that what the matrix says is what every tool reads")]
    NotCanonical { shown: String, parsed: String },
    #[error("{shown:?} contains {bad:?}, which is not safe on a shell line (a URL here may hold only letters, digits and -._~:/%+=,)")]
    Unsafe { shown: String, bad: char },
}

impl HttpUrl {
    /// Parses `text` as an http(s) URL and checks the parsed value.
    pub(crate) fn parse(text: &str) -> Result<HttpUrl, UrlError> {
        let shown = || redact(text);
        let parsed = url::Url::parse(text).map_err(|error| UrlError::NotAUrl {
            shown: shown(),
            reason: error.to_string(),
        })?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(UrlError::Credentials { shown: shown() });
        }
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(UrlError::Scheme { shown: shown() });
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(UrlError::QueryOrFragment { shown: shown() });
        }
        let serialized = parsed.as_str();
        let host_only_without_slash = parsed.path() == "/" && format!("{text}/") == serialized;
        if serialized != text && !host_only_without_slash {
            return Err(UrlError::NotCanonical {
                shown: shown(),
                parsed: serialized.to_string(),
            });
        }
        if let Some(bad) = text.chars().find(|c| !safe_character(*c)) {
            return Err(UrlError::Unsafe {
                shown: shown(),
                bad,
            });
        }
        Ok(HttpUrl(text.to_string()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
impl From<&str> for HttpUrl {
    /// Test values: a valid URL, or the test fails here.
    fn from(text: &str) -> HttpUrl {
        HttpUrl::parse(text).unwrap_or_else(|error| panic!("{error}"))
    }
}

#[cfg(test)]
impl HttpUrl {
    /// A value no parse would give, to test the defences behind the parse (the `sed` escaping).
    pub(crate) fn unchecked_for_tests(text: &str) -> HttpUrl {
        HttpUrl(text.to_string())
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl AsRef<str> for HttpUrl {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for HttpUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Serialize for HttpUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The error says what is wrong with the redacted text: serde_yaml places it at its line.
        let text = String::deserialize(deserializer)?;
        HttpUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `text` with any user information masked, for messages: a URL the parser reads with a user or
/// password shows as `scheme://***@host/path`; any other text holding `@` shows `***` from after
/// its scheme (or from its start) up to its last `@`. Text without `@` carries no user
/// information for any URL parser and is shown as it is.
pub(crate) fn redact(text: &str) -> String {
    if let Ok(mut parsed) = url::Url::parse(text) {
        if !parsed.username().is_empty() || parsed.password().is_some() {
            // Special schemes always have a host, so neither call can fail for http(s); for
            // others the fallback below masks the text instead.
            if parsed.set_username("").is_ok() && parsed.set_password(None).is_ok() {
                let serialized = parsed.to_string();
                if let Some((scheme, rest)) = serialized.split_once("://") {
                    return format!("{scheme}://***@{rest}");
                }
            }
        }
    }
    let Some(last_at) = text.rfind('@') else {
        return text.to_string();
    };
    let scheme_end = text
        .find(':')
        .filter(|&colon| {
            colon > 0
                && colon < last_at
                && text[..colon]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
        .map(|colon| colon + 1)
        .unwrap_or(0);
    format!("{}***{}", &text[..scheme_end], &text[last_at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_index_and_mirror_urls_pass_as_written() {
        for text in [
            "https://pypi.team.example/simple",
            "https://pypi.team.example/simple/",
            "http://127.0.0.1:5000/simple",
            "https://mirror.example.com/debian",
            "https://mirror.example",
            "https://mirror.example/",
            "https://artifactory.example/api/pypi/pypi-remote/simple",
            "https://mirror.example/%7Euser/debian",
        ] {
            let url = HttpUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(url.as_str(), text);
        }
    }

    #[test]
    fn credentials_are_refused_however_the_authority_is_written() {
        for text in [
            "https://bob:s3cret@pypi.team.example/simple",
            "https:///bob:s3cret@pypi.team.example/simple",
            "https:\\\\bob:s3cret@pypi.team.example/simple",
            "https:/bob:s3cret@pypi.team.example/simple",
            "https:bob:s3cret@pypi.team.example/simple",
            "HTTPS://bob:s3cret@pypi.team.example/simple",
            "https://\tbob:s3cret@pypi.team.example/simple",
            "https://bob:s3cret@@pypi.team.example/simple",
            "https://s3cret@pypi.team.example/simple",
            "https://:s3cret@pypi.team.example/simple",
        ] {
            let error = HttpUrl::parse(text).unwrap_err();
            let message = error.to_string();
            assert!(!message.contains("s3cret"), "{text}: {message}");
            assert!(
                matches!(
                    error,
                    UrlError::Credentials { .. } | UrlError::NotAUrl { .. }
                ),
                "{text}: {error:?}"
            );
        }
    }

    #[test]
    fn a_value_refused_for_another_reason_is_redacted_too() {
        for text in [
            "ftp://bob:s3cret@pypi.team.example/simple",
            "https://bob:s3cret@pypi.team.example/simple?x=1",
            "https://bob:s3cret@/simple",
            "https//bob:s3cret@pypi.team.example",
            "bob:s3cret@pypi.team.example",
            "https://bob:s3cret@pypi team.example/simple",
            "https://pypi.team.example/simple/@bob:s3cret@x",
        ] {
            let message = HttpUrl::parse(text).unwrap_err().to_string();
            assert!(!message.contains("s3cret"), "{text}: {message}");
            assert!(!redact(text).contains("s3cret"), "{text}");
        }
        assert_eq!(
            redact("https:///bob:s3cret@pypi.team.example/simple"),
            "https://***@pypi.team.example/simple"
        );
        assert_eq!(
            redact("https//bob:s3cret@pypi.team.example"),
            "***@pypi.team.example"
        );
        assert_eq!(
            redact("https://pypi.team.example/simple"),
            "https://pypi.team.example/simple"
        );
    }

    #[test]
    fn what_parsers_read_otherwise_or_a_shell_would_run_is_refused() {
        let refused = [
            ("https://PyPI.team.example/simple", "NotCanonical"),
            ("https://pypi.team.example/a/../simple", "NotCanonical"),
            ("https://pypi.team.example/simple#frag", "QueryOrFragment"),
            ("https://pypi.team.example/simple?a=b", "QueryOrFragment"),
            ("https://pypi.team.example/$(id)", "Unsafe"),
            ("https://pypi.team.example/a;id", "Unsafe"),
            ("https://pypi.team.example/a*", "Unsafe"),
            ("file:///etc/passwd", "Scheme"),
            ("pypi.team.example/simple", "NotAUrl"),
            ("https://pypi.team.example/a b", "NotCanonical"),
            ("", "NotAUrl"),
        ];
        for (text, kind) in refused {
            let error = HttpUrl::parse(text).unwrap_err();
            assert!(format!("{error:?}").starts_with(kind), "{text}: {error:?}");
        }
    }
}
