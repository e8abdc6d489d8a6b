//! Content digests: `sha256:` and 64 lowercase hex digits, the form registries, manifests,
//! fingerprints and build keys use (imagegen's one digest type, re-exported as
//! `imagegen::model::digest::Digest`). A [`Digest`] is checked when it is made (parsed from the
//! manifest, a flag, a registry answer, or computed), so one that is not a digest cannot exist in
//! memory: it can never reach a registry URL path or be compared against as if it were one.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A sha256 content digest, `sha256:<64 hex>`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

/// Why a text is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a digest: {why} (a digest is `sha256:` and 64 hex digits)")]
pub struct DigestError {
    pub(crate) text: String,
    pub(crate) why: &'static str,
}

impl Digest {
    /// Parses `sha256:<64 hex>`; upper-case hex is refused, as registries compare digests as text.
    pub fn parse(text: &str) -> Result<Digest, DigestError> {
        let error = |why| DigestError {
            text: text.chars().take(100).collect(),
            why,
        };
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| error("it does not start with `sha256:`"))?;
        if hex.len() != 64 {
            return Err(error("it does not have 64 hex digits after `sha256:`"));
        }
        if !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(error(
                "it has a character that is not a lowercase hex digit",
            ));
        }
        Ok(Digest(text.to_string()))
    }

    /// The sha256 digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_sha256(Sha256::digest(bytes).as_slice())
    }

    /// The digest whose 32 hash bytes are `hash`.
    pub fn from_sha256(hash: &[u8]) -> Digest {
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        debug_assert_eq!(hex.len(), 64);
        Digest(format!("sha256:{hex}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// `sha256:` and the first 12 hex digits, for tables.
    pub fn short(&self) -> &str {
        &self.0[..19]
    }

    /// The 32 hash bytes (for handing the digest to a crate with a digest type of its own).
    pub fn sha256_bytes(&self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            // Checked when made: 64 lowercase hex digits.
            *byte = u8::from_str_radix(&self.hex()[index * 2..index * 2 + 2], 16).unwrap_or(0);
        }
        bytes
    }
}

impl PartialEq<str> for Digest {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<String> for Digest {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Digest {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.0)
    }
}

impl std::str::FromStr for Digest {
    type Err = DigestError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Digest::parse(text)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Digest::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_and_64_lowercase_hex() {
        let abc = Digest::of(b"abc");
        assert_eq!(
            abc.as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(abc.as_str()).unwrap(), abc);
        assert_eq!(abc.short(), "sha256:ba7816bf8f01");
        assert_eq!(abc.hex().len(), 64);
        assert_eq!(Digest::from_sha256(&abc.sha256_bytes()), abc);
        for bad in [
            "",
            "sha256:",
            "sha256:abc",
            "sha512:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a/",
            "../../v2/evil",
            "latest",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad:?} must not parse");
        }
    }

    #[test]
    fn serde_checks_on_the_way_in() {
        let abc = Digest::of(b"abc");
        let json = serde_json::to_string(&abc).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), abc);
        let error = serde_json::from_str::<Digest>("\"sha256:nothex\"").unwrap_err();
        assert!(error.to_string().contains("is not a digest"), "{error}");
    }
}
