//! in-toto Statement v1 (<https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md>):
//! `_type`, `subject` (name and digest of the image), `predicateType`, `predicate`. Serialized
//! with sorted keys, so the same statement is the same bytes.

use serde_json::{json, Value};

use crate::digest::Digest;

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// What a statement is about: an image repository and its manifest digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The repository, e.g. `127.0.0.1:5000/team/pytorch` (cosign uses the repository name).
    pub name: String,
    pub digest: Digest,
}

/// A statement read back from an envelope's payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub subjects: Vec<Subject>,
    pub predicate_type: String,
    pub predicate: Value,
}

/// Why a payload is not an in-toto statement v1 imagegen can check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    #[error("the payload is not JSON: {0}")]
    NotJson(String),
    #[error("`_type` is {found:?}, not {STATEMENT_TYPE:?}")]
    WrongType { found: String },
    #[error("the statement has no subject")]
    NoSubject,
    #[error("subject {index} has no sha256 digest that is a digest: {reason}")]
    BadSubject { index: usize, reason: String },
    #[error("the statement has no `predicateType`")]
    NoPredicateType,
}

/// The statement's JSON.
pub fn statement(subject: &Subject, predicate_type: &str, predicate: Value) -> Value {
    json!({
        "_type": STATEMENT_TYPE,
        "subject": [{
            "name": subject.name,
            "digest": { "sha256": subject.digest.hex() },
        }],
        "predicateType": predicate_type,
        "predicate": predicate,
    })
}

/// The statement's bytes, as signed: compact JSON with sorted keys.
pub fn statement_bytes(subject: &Subject, predicate_type: &str, predicate: Value) -> Vec<u8> {
    serde_json::to_vec(&statement(subject, predicate_type, predicate))
        .expect("a JSON value always serializes")
}

/// Reads a statement back, checking its type and that every subject names a sha256 digest.
pub fn parse_statement(bytes: &[u8]) -> Result<Statement, StatementError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|error| StatementError::NotJson(error.to_string()))?;
    let found = value["_type"].as_str().unwrap_or_default();
    if found != STATEMENT_TYPE {
        return Err(StatementError::WrongType {
            found: found.to_string(),
        });
    }
    let entries = value["subject"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        return Err(StatementError::NoSubject);
    }
    let mut subjects = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let hex = entry["digest"]["sha256"].as_str().unwrap_or_default();
        let digest = Digest::parse_hex(hex).map_err(|error| StatementError::BadSubject {
            index,
            reason: error.to_string(),
        })?;
        subjects.push(Subject {
            name: entry["name"].as_str().unwrap_or_default().to_string(),
            digest,
        });
    }
    let predicate_type = value["predicateType"]
        .as_str()
        .ok_or(StatementError::NoPredicateType)?
        .to_string();
    Ok(Statement {
        subjects,
        predicate_type,
        predicate: value["predicate"].clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            name: "127.0.0.1:5000/team/app".into(),
            digest: Digest::of(b"image"),
        }
    }

    #[test]
    fn a_statement_reads_back_as_written() {
        let bytes = statement_bytes(&subject(), "urn:x", json!({"a": 1}));
        let read = parse_statement(&bytes).unwrap();
        assert_eq!(read.subjects, vec![subject()]);
        assert_eq!(read.predicate_type, "urn:x");
        assert_eq!(read.predicate, json!({"a": 1}));
        // Sorted keys: `_type` first, `subject` last.
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with(r#"{"_type":"https://in-toto.io/Statement/v1","predicate""#));
    }

    #[test]
    fn statements_that_are_not_statements_are_refused() {
        assert!(matches!(
            parse_statement(b"{"),
            Err(StatementError::NotJson(_))
        ));
        assert!(matches!(
            parse_statement(br#"{"_type":"https://in-toto.io/Statement/v0.1"}"#),
            Err(StatementError::WrongType { .. })
        ));
        assert_eq!(
            parse_statement(br#"{"_type":"https://in-toto.io/Statement/v1","subject":[]}"#),
            Err(StatementError::NoSubject)
        );
        assert!(matches!(
            parse_statement(
                br#"{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"sha256":"abc"}}],"predicateType":"p"}"#
            ),
            Err(StatementError::BadSubject { index: 0, .. })
        ));
    }
}
