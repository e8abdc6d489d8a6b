//! DSSE envelopes (<https://github.com/secure-systems-lab/dsse/blob/v1.0.0/envelope.md>) signed
//! with ECDSA P-256 over SHA-256, the signature in ASN.1 DER as cosign and securesystemslib
//! write it. Keys arrive as PEM text (PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`; public
//! keys as `PUBLIC KEY`); no message here ever holds key material. The key id ([`KeyId`]) is the
//! sha256 of the public key's DER SubjectPublicKeyInfo, in hex, as cosign and securesystemslib
//! compute it.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePublicKey as _, LineEnding};
use serde::{Deserialize, Serialize};

use crate::digest::Digest;

/// The DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A DSSE envelope as stored in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Base64 (standard, padded) of the payload bytes.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// The signer's key id as the envelope names it (anyone's text: it is not trusted, the
    /// signature is checked with the key the caller holds).
    #[serde(default)]
    pub keyid: String,
    /// Base64 of the DER signature over the PAE.
    pub sig: String,
}

/// Why a key cannot be used. Never holds the key's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the private key is encrypted; imagegen reads unencrypted PKCS#8 or SEC1 keys (see docs/attestations.md, \"The key\")")]
    Encrypted,
    #[error("the private key is not an ECDSA P-256 key in PEM (`BEGIN PRIVATE KEY` or `BEGIN EC PRIVATE KEY`): {0}")]
    NotPrivateKey(String),
    #[error("the public key is not an ECDSA P-256 key in PEM (`BEGIN PUBLIC KEY`): {0}")]
    NotPublicKey(String),
}

/// Why an envelope does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("the envelope is not DSSE JSON: {0}")]
    NotJson(String),
    #[error("the payload type is {0:?}, not {PAYLOAD_TYPE:?}")]
    PayloadType(String),
    #[error("the payload is not base64")]
    PayloadEncoding,
    #[error("the envelope has no signature")]
    Unsigned,
    #[error("no signature verifies with key {key_id} ({count} signature(s) tried)")]
    BadSignature { key_id: KeyId, count: usize },
}

/// The kind of a PEM private key that is not ECDSA P-256, read from the key's own algorithm
/// identifier (PKCS#8) or its PEM label (PKCS#1, OpenSSH): `None` for a P-256 key or text that
/// is no key (whose own error then says why). Names the key's algorithm, never its bytes.
fn other_key_algorithm(text: &str) -> Option<String> {
    use p256::pkcs8::der::{pem, Decode as _};
    use p256::pkcs8::{ObjectIdentifier, PrivateKeyInfo};
    let (label, der) = pem::decode_vec(text.as_bytes()).ok()?;
    match label {
        "RSA PRIVATE KEY" => return Some("an RSA key (PKCS#1)".into()),
        "OPENSSH PRIVATE KEY" => {
            return Some("an OpenSSH key (convert or make a PKCS#8 PEM key)".into())
        }
        "DSA PRIVATE KEY" => return Some("a DSA key".into()),
        _ => {}
    }
    let info = PrivateKeyInfo::from_der(&der).ok()?;
    let oid = |text: &str| ObjectIdentifier::new_unwrap(text);
    let algorithm = info.algorithm.oid;
    let named = if algorithm == oid("1.2.840.113549.1.1.1") {
        "an RSA key".to_string()
    } else if algorithm == oid("1.2.840.113549.1.1.10") {
        "an RSA-PSS key".to_string()
    } else if algorithm == oid("1.3.101.112") {
        "an Ed25519 key".to_string()
    } else if algorithm == oid("1.3.101.113") {
        "an Ed448 key".to_string()
    } else if algorithm == oid("1.2.840.10045.2.1") {
        let curve = info.algorithm.parameters_oid().ok()?;
        if curve == oid("1.2.840.10045.3.1.7") {
            return None;
        }
        let name = match curve.to_string().as_str() {
            "1.3.132.0.34" => "P-384".to_string(),
            "1.3.132.0.35" => "P-521".to_string(),
            "1.3.132.0.10" => "secp256k1".to_string(),
            other => format!("the curve {other}"),
        };
        format!("an ECDSA key on {name}, not P-256")
    } else {
        format!("a key of the algorithm {algorithm}")
    };
    Some(format!("{named} (algorithm {algorithm})"))
}

/// A key id: the sha256 of a public key's DER SubjectPublicKeyInfo, 64 hex digits (what a DSSE
/// signature's `keyid` and cosign's key ids hold). Made only from a key, so it is always one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(Digest);

impl KeyId {
    fn of(key: &VerifyingKey) -> KeyId {
        let der = key
            .to_public_key_der()
            .expect("a P-256 public key always encodes");
        KeyId(Digest::of(der.as_bytes()))
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        self.0.hex()
    }

    /// The first 12 hex digits, for tables.
    pub fn short(&self) -> &str {
        &self.as_str()[..12]
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl Serialize for KeyId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PartialEq<str> for KeyId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// A signing key and its key id.
pub struct Signer {
    key: SigningKey,
    key_id: KeyId,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Signer(key id {})", self.key_id)
    }
}

impl Signer {
    /// Reads a PEM private key.
    pub fn from_pem(text: &str) -> Result<Signer, KeyError> {
        let text = text.trim();
        if text.contains("ENCRYPTED") {
            return Err(KeyError::Encrypted);
        }
        let key = if text.contains("-----BEGIN EC PRIVATE KEY-----") {
            p256::SecretKey::from_sec1_pem(text)
                .map(SigningKey::from)
                .map_err(|_| {
                    KeyError::NotPrivateKey("the SEC1 key does not parse as P-256".into())
                })?
        } else if let Some(other) = other_key_algorithm(text) {
            return Err(KeyError::NotPrivateKey(format!(
                "it is {other}; imagegen signs with ECDSA P-256 (cosign's default): make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem`"
            )));
        } else {
            SigningKey::from_pkcs8_pem(text).map_err(|error| {
                // pkcs8's errors name the structure that failed, never its bytes.
                KeyError::NotPrivateKey(error.to_string())
            })?
        };
        let key_id = KeyId::of(key.verifying_key());
        Ok(Signer { key, key_id })
    }

    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    /// The public half, as verification needs it.
    pub fn verifier(&self) -> Verifier {
        Verifier {
            key: *self.key.verifying_key(),
            key_id: self.key_id.clone(),
        }
    }

    /// The DER signature over `message`.
    pub fn sign_bytes(&self, message: &[u8]) -> Vec<u8> {
        let signature: Signature = self.key.sign(message);
        signature.to_der().as_bytes().to_vec()
    }

    /// Signs `payload` (an in-toto statement) as a DSSE envelope.
    pub fn sign(&self, payload: &[u8]) -> Envelope {
        let signature = self.sign_bytes(&pae(PAYLOAD_TYPE, payload));
        Envelope {
            payload_type: PAYLOAD_TYPE.to_string(),
            payload: BASE64.encode(payload),
            signatures: vec![EnvelopeSignature {
                keyid: self.key_id.to_string(),
                sig: BASE64.encode(signature),
            }],
        }
    }
}

/// A public key and its key id.
#[derive(Debug, Clone)]
pub struct Verifier {
    key: VerifyingKey,
    key_id: KeyId,
}

impl Verifier {
    /// Reads a PEM public key (`BEGIN PUBLIC KEY`, as `openssl ec -pubout` writes it).
    pub fn from_pem(text: &str) -> Result<Verifier, KeyError> {
        let key = VerifyingKey::from_public_key_pem(text.trim())
            .map_err(|error| KeyError::NotPublicKey(error.to_string()))?;
        let key_id = KeyId::of(&key);
        Ok(Verifier { key, key_id })
    }

    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    /// The public key as PEM.
    pub fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .expect("a P-256 public key always encodes")
    }

    /// Whether `signature` (DER) is this key's over `message`.
    pub fn verify_bytes(&self, message: &[u8], signature: &[u8]) -> bool {
        Signature::from_der(signature)
            .map(|signature| self.key.verify(message, &signature).is_ok())
            .unwrap_or(false)
    }

    /// The payload of `envelope` if one of its signatures is this key's over its PAE.
    pub fn open(&self, envelope: &Envelope) -> Result<Vec<u8>, EnvelopeError> {
        if envelope.payload_type != PAYLOAD_TYPE {
            return Err(EnvelopeError::PayloadType(envelope.payload_type.clone()));
        }
        let payload = BASE64
            .decode(&envelope.payload)
            .map_err(|_| EnvelopeError::PayloadEncoding)?;
        if envelope.signatures.is_empty() {
            return Err(EnvelopeError::Unsigned);
        }
        let message = pae(&envelope.payload_type, &payload);
        let verified = envelope.signatures.iter().any(|signature| {
            BASE64
                .decode(&signature.sig)
                .is_ok_and(|bytes| self.verify_bytes(&message, &bytes))
        });
        if verified {
            Ok(payload)
        } else {
            Err(EnvelopeError::BadSignature {
                key_id: self.key_id.clone(),
                count: envelope.signatures.len(),
            })
        }
    }
}

/// Reads an envelope's JSON.
pub fn parse_envelope(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
    serde_json::from_slice(bytes).map_err(|error| EnvelopeError::NotJson(error.to_string()))
}

/// The envelope's JSON bytes, as pushed.
pub fn envelope_bytes(envelope: &Envelope) -> Vec<u8> {
    serde_json::to_vec(envelope).expect("an envelope always serializes")
}

/// DSSE's pre-authentication encoding: `DSSEv1 <len> <type> <len> <payload>`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Test keys only (tests/fixtures/attest/README.md says how they were made).
    pub(crate) const TEST_KEY: &str = include_str!("../../../tests/fixtures/attest/team.pem");
    pub(crate) const OTHER_KEY: &str = include_str!("../../../tests/fixtures/attest/other.pem");

    #[test]
    fn pae_is_as_the_spec_writes_it() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn an_envelope_opens_with_its_key_and_not_another() {
        let signer = Signer::from_pem(TEST_KEY).unwrap();
        let other = Signer::from_pem(OTHER_KEY).unwrap();
        assert_ne!(signer.key_id(), other.key_id());
        let envelope = signer.sign(b"{\"a\":1}");
        let read = parse_envelope(&envelope_bytes(&envelope)).unwrap();
        assert_eq!(signer.verifier().open(&read).unwrap(), b"{\"a\":1}");
        let public = Verifier::from_pem(&signer.verifier().to_pem()).unwrap();
        assert_eq!(public.key_id(), signer.key_id());
        assert_eq!(public.open(&read).unwrap(), b"{\"a\":1}");
        assert!(matches!(
            other.verifier().open(&read),
            Err(EnvelopeError::BadSignature { count: 1, .. })
        ));
        let mut tampered = read.clone();
        tampered.payload = BASE64.encode(b"{\"a\":2}");
        assert!(matches!(
            signer.verifier().open(&tampered),
            Err(EnvelopeError::BadSignature { .. })
        ));
        let mut unsigned = read;
        unsigned.signatures.clear();
        assert_eq!(
            signer.verifier().open(&unsigned),
            Err(EnvelopeError::Unsigned)
        );
    }

    #[test]
    fn bad_keys_are_refused_without_their_text() {
        let error =
            Signer::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
                .unwrap_err();
        assert!(!error.to_string().contains("AAAA"), "{error}");
        assert_eq!(
            Signer::from_pem("-----BEGIN ENCRYPTED PRIVATE KEY-----\nx\n").unwrap_err(),
            KeyError::Encrypted
        );
        assert!(Verifier::from_pem(TEST_KEY).is_err());
    }
    /// Made with openssl for this test only.
    const ED25519_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEICpS68lSL5Rcatp4Ete8F3GUDFvUzPDEYLfKAb9IHOc3\n-----END PRIVATE KEY-----";
    /// Made with openssl for this test only.
    const RSA_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIBUwIBADANBgkqhkiG9w0BAQEFAASCAT0wggE5AgEAAkEAl3q7tjTT7qpBoKqU\n3bJYY8iTvHLkuN0WsckZgQSIYitsVdXObZVSayc+wbJ76ZTxUMhCMqgxM0jPjdhy\nOhqoFQIDAQABAkB42NWAW0zojrOktfHlnC6gDJiwMwj94oQEeeb64t7bUYbtzPER\nwXqKussL6WcCbjvPgS8eJjajTaSsaAJhwtNRAiEAyJCVTEBBZxV2yUs8ov4+EYNk\nhwapj5n4KrlS9vB44bsCIQDBWQEiyIJz3PVuAc7PKqcVtlUvnCdEWHx01gaxKIHY\nbwIgB1ay/81CF2GDrS3hlB01bDKglQg7YBPELtwFGyAFbE0CIEJfrZYlQzNHLTHg\niQBxYf6AI2o+rvQ1dDQfrRhwEXMdAiBt19JSrPUnqaznU/Hc28IfpJlc/rL7Imjf\nhEfvWiwBUw==\n-----END PRIVATE KEY-----";
    /// Made with openssl for this test only.
    const P384_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDAyVwpzBvkDUWkW7hoU\nQH/dLhJf7y9Rzzb1yUcBhv0UBhmZeQwgF4elAA1e/mjUPSahZANiAATz0Khu9u4T\nz7q2OJ6xbmMOLW0t8MbDqos1G0i32QVaJxSsd5CXVqWGLvhHuM+3Srxlbx/aDaYS\nmniiFTGdtJT4Kkzssc2kKaoZAAhKmmtAIRwfhkUjVC8cmCKIX6ZOiLY=\n-----END PRIVATE KEY-----";
    /// Made with openssl for this test only.
    const RSA_PKCS1_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIBPAIBAAJBALbIipoW/hjscLATY0TtRuRVDz7TtCeG092T0794XilVN/Sq/62v\nQ3fRkNBEqF07d4G/GeKbpxsQXdShFyvp5SkCAwEAAQJALPHk+vzaYGCLWRB7YXCC\n9RRhWk6ORwXlRN/buoIrjTfnk9uCsev41sbIiGi1HVjp93mXFvlNvPocsWdh1GTv\nvQIhAOggISCwezrVZkN40KHepl3YJnpjXDJ1aDe+9di/uSAXAiEAyZU7bxku+E7N\nXEFePNK2mTQcl+0r55/MHpgfQRhRLL8CIQCgkKD5sLn9D2Imp+qBHbcs0PiEzjgX\nOzl03iXG4Y/XzwIhAKtDnrtFKiLM0K0Q3H/QhlKjc6egWSzxFvrnQ6aKgm0BAiEA\nv2K8DwTVAHlNrMvK/b1IMhZLDWymqun2SDlExu4SJHY=\n-----END RSA PRIVATE KEY-----";

    #[test]
    fn a_key_of_another_kind_is_named_by_its_own_algorithm() {
        for (key, wanted) in [
            (ED25519_KEY, "an Ed25519 key (algorithm 1.3.101.112)"),
            (RSA_KEY, "an RSA key (algorithm 1.2.840.113549.1.1.1)"),
            (P384_KEY, "an ECDSA key on P-384, not P-256"),
            (RSA_PKCS1_KEY, "an RSA key (PKCS#1)"),
        ] {
            let error = Signer::from_pem(key).unwrap_err().to_string();
            assert!(error.contains(wanted), "{wanted}: {error}");
            assert!(!error.contains("1.2.840.10045.2.1 "), "{error}");
            let body: String = key.lines().nth(1).unwrap().chars().take(16).collect();
            assert!(!error.contains(&body), "{error}");
        }
        assert!(Signer::from_pem(TEST_KEY).is_ok());
    }
}
