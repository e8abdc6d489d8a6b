//! The content fingerprint of an image: a sha256 over everything that determines what goes into it
//! (versions, base image, wheel index, mirrors, template text, the parent's fingerprint), fed as
//! canonical `key=value` lines in sorted order, so the same inputs give the same fingerprint on any
//! machine. Pure; no I/O.

use std::collections::BTreeMap;

use sha2::{Digest as _, Sha256};

use crate::model::digest::Digest;

/// Lowercase hex of a sha256 digest.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The fingerprint of `inputs` as `sha256:<hex>`. Keys are sorted (BTreeMap) and each entry is
/// written as `len(key):key=len(value):value\n`, so no two different maps hash the same bytes.
pub(crate) fn fingerprint<K: AsRef<str>>(inputs: &BTreeMap<K, String>) -> Digest {
    let mut hasher = Sha256::new();
    hasher.update(b"imagegen-fingerprint-v1\n");
    for (key, value) in inputs {
        let key = key.as_ref();
        hasher.update(format!("{}:{key}={}:{value}\n", key.len(), value.len()).as_bytes());
    }
    Digest::from_sha256(hasher.finalize().as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inputs_same_fingerprint_any_order() {
        let mut a = BTreeMap::new();
        a.insert("torch", "2.7.1".to_string());
        a.insert("cuda", "12.6".to_string());
        let mut b = BTreeMap::new();
        b.insert("cuda", "12.6".to_string());
        b.insert("torch", "2.7.1".to_string());
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert!(fingerprint(&a).as_str().starts_with("sha256:"));
    }

    #[test]
    fn any_change_changes_it() {
        let mut a = BTreeMap::new();
        a.insert("torch", "2.7.1".to_string());
        let before = fingerprint(&a);
        a.insert("torch", "2.7.0".to_string());
        assert_ne!(before, fingerprint(&a));
        // Moving a character between key and value must not collide.
        let mut x = BTreeMap::new();
        x.insert("ab", "c".to_string());
        let mut y = BTreeMap::new();
        y.insert("a", "bc".to_string());
        assert_ne!(fingerprint(&x), fingerprint(&y));
    }

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
