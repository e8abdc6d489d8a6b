//! What a CA bundle holds, for people: its certificates by subject and sha256, and the change
//! between two bundles as a summary (`render --check` prints it instead of a diff of base64).
//! Pure; reads only the PEM text it is handed and as much DER as finding the subject needs.

use std::collections::BTreeMap;

use base64::Engine as _;

use crate::resolve::fingerprint::sha256_hex;

/// The most certificates a summary names on each side; the rest are counted.
const NAMED_AT_MOST: usize = 20;

/// One certificate of a bundle: its subject as `CN=…` (or `O=…`, else `?`) and the sha256 of
/// its DER bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Certificate {
    pub(crate) subject: String,
    pub(crate) sha256: String,
}

/// The certificates of a PEM bundle, in order; blocks that are not valid base64 are skipped
/// (`check_ca_bundle` refuses them before rendering).
pub(crate) fn certificates(text: &str) -> Vec<Certificate> {
    let mut found = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines().map(str::trim_end) {
        match (&mut body, line) {
            (None, "-----BEGIN CERTIFICATE-----") => body = Some(String::new()),
            (Some(collected), "-----END CERTIFICATE-----") => {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(&*collected) {
                    found.push(Certificate {
                        subject: subject_of(&der).unwrap_or_else(|| "?".into()),
                        sha256: sha256_hex(&der),
                    });
                }
                body = None;
            }
            (Some(collected), line) => collected.push_str(line.trim()),
            (None, _) => {}
        }
    }
    found
}

/// The change from bundle `before` to `after`: counts, then each certificate added or removed by
/// subject and short sha256.
pub(crate) fn change_summary(before: &str, after: &str) -> String {
    let old = certificates(before);
    let new = certificates(after);
    let by_hash = |list: &[Certificate]| -> BTreeMap<String, String> {
        list.iter()
            .map(|c| (c.sha256.clone(), c.subject.clone()))
            .collect()
    };
    let (old_set, new_set) = (by_hash(&old), by_hash(&new));
    let added: Vec<_> = new_set
        .iter()
        .filter(|(hash, _)| !old_set.contains_key(*hash))
        .collect();
    let removed: Vec<_> = old_set
        .iter()
        .filter(|(hash, _)| !new_set.contains_key(*hash))
        .collect();
    let mut text = format!(
        "CA bundle: {} certificates -> {} ({} added, {} removed{})\n",
        old.len(),
        new.len(),
        added.len(),
        removed.len(),
        if added.is_empty() && removed.is_empty() {
            "; the same certificates, in another order or with other text around them"
        } else {
            ""
        }
    );
    for (sign, list) in [("+", &added), ("-", &removed)] {
        let mut named: Vec<_> = list
            .iter()
            .map(|(hash, subject)| format!("{sign} {subject} (sha256 {})\n", &hash[..12]))
            .collect();
        named.sort();
        let more = named.len().saturating_sub(NAMED_AT_MOST);
        named.truncate(NAMED_AT_MOST);
        text.extend(named);
        if more > 0 {
            text.push_str(&format!("{sign} … and {more} more\n"));
        }
    }
    text
}

/// One DER element at the start of `bytes`: (tag, contents, the rest after it).
fn element(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |sum, &b| (sum << 8) | usize::from(b));
        (length, &rest[count..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// The subject's common name (`CN=`), else its organization (`O=`), of a DER certificate.
fn subject_of(der: &[u8]) -> Option<String> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else {
        return None;
    };
    // [0] version is optional; then serial, signature algorithm, issuer, validity, subject.
    if tbs.first() == Some(&0xa0) {
        tbs = element(tbs)?.2;
    }
    for _ in 0..4 {
        tbs = element(tbs)?.2;
    }
    let (SEQUENCE, mut name, _) = element(tbs)? else {
        return None;
    };
    let mut attributes = BTreeMap::new();
    while !name.is_empty() {
        let (_, set, rest) = element(name)?;
        name = rest;
        let (_, pair, _) = element(set)?;
        let (_, oid, after) = element(pair)?;
        let (_, value, _) = element(after)?;
        let key = match oid {
            [0x55, 0x04, 0x03] => "CN",
            [0x55, 0x04, 0x0a] => "O",
            _ => continue,
        };
        attributes
            .entry(key)
            .or_insert_with(|| String::from_utf8_lossy(value).into_owned());
    }
    attributes
        .get("CN")
        .map(|cn| format!("CN={cn}"))
        .or_else(|| attributes.get("O").map(|o| format!("O={o}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two certificates of the system store, as its PEM text.
    fn system_certificates(count: usize) -> Vec<String> {
        let text = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap();
        text.split_inclusive("-----END CERTIFICATE-----\n")
            .take(count)
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_changed_bundle_is_summarized_by_subject() {
        let blocks = system_certificates(3);
        assert_eq!(blocks.len(), 3);
        let before = blocks[..2].concat();
        let after = format!("{}{}", blocks[1], blocks[2]);
        let listed = certificates(&before);
        assert_eq!(listed.len(), 2);
        assert!(
            listed
                .iter()
                .all(|c| c.subject.starts_with("CN=") || c.subject.starts_with("O=")),
            "{listed:?}"
        );
        let summary = change_summary(&before, &after);
        assert!(
            summary.starts_with("CA bundle: 2 certificates -> 2 (1 added, 1 removed)\n"),
            "{summary}"
        );
        let added = &certificates(&after)[1];
        assert!(
            summary.contains(&format!(
                "+ {} (sha256 {})",
                added.subject,
                &added.sha256[..12]
            )),
            "{summary}"
        );
        assert!(
            summary.contains(&format!("- {}", listed[0].subject)),
            "{summary}"
        );
        assert!(!summary.contains("BEGIN CERTIFICATE"), "{summary}");
    }
}
