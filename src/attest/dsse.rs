//! DSSE envelopes (<https://github.com/secure-systems-lab/dsse/blob/v1.0.0/envelope.md>) signed
//! with ECDSA P-256 over SHA-256, the signature in ASN.1 DER as cosign and securesystemslib
//! write it. Keys arrive as PEM text (PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`; public
//! keys as `PUBLIC KEY`); no message here ever holds key material. The key id is the sha256 of
//! the public key's DER SubjectPublicKeyInfo, in hex.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePublicKey as _, LineEnding};
use serde::{Deserialize, Serialize};

use crate::model::digest::Digest;

/// The DSSE payload type of an in-toto statement.
pub(crate) const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A DSSE envelope as stored in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Envelope {
    #[serde(rename = "payloadType")]
    pub(crate) payload_type: String,
    /// Base64 (standard, padded) of the payload bytes.
    pub(crate) payload: String,
    pub(crate) signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EnvelopeSignature {
    #[serde(default)]
    pub(crate) keyid: String,
    /// Base64 of the DER signature over the PAE.
    pub(crate) sig: String,
}

/// Why a key cannot be used. Never holds the key's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("the private key is encrypted; imagegen reads unencrypted PKCS#8 or SEC1 keys (see docs/attestations.md, \"The key\")")]
    Encrypted,
    #[error("the private key is not an ECDSA P-256 key in PEM (`BEGIN PRIVATE KEY` or `BEGIN EC PRIVATE KEY`): {0}")]
    NotPrivateKey(String),
    #[error("the public key is not an ECDSA P-256 key in PEM (`BEGIN PUBLIC KEY`): {0}")]
    NotPublicKey(String),
}

/// Why an envelope does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvelopeError {
    #[error("the envelope is not DSSE JSON: {0}")]
    NotJson(String),
    #[error("the payload type is {0:?}, not {PAYLOAD_TYPE:?}")]
    PayloadType(String),
    #[error("the payload is not base64")]
    PayloadEncoding,
    #[error("the envelope has no signature")]
    Unsigned,
    #[error("no signature verifies with key {key_id} ({count} signature(s) tried)")]
    BadSignature { key_id: String, count: usize },
}

/// A signing key and its key id.
pub(crate) struct Signer {
    key: SigningKey,
    key_id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Signer(key id {})", self.key_id)
    }
}

impl Signer {
    /// Reads a PEM private key.
    pub(crate) fn from_pem(text: &str) -> Result<Signer, KeyError> {
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
        } else {
            SigningKey::from_pkcs8_pem(text).map_err(|error| {
                // pkcs8's errors name the structure that failed, never its bytes.
                KeyError::NotPrivateKey(error.to_string())
            })?
        };
        let key_id = key_id(key.verifying_key());
        Ok(Signer { key, key_id })
    }

    pub(crate) fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public half, as verification needs it.
    pub(crate) fn verifier(&self) -> Verifier {
        Verifier {
            key: *self.key.verifying_key(),
            key_id: self.key_id.clone(),
        }
    }

    /// The DER signature over `message`.
    pub(crate) fn sign_bytes(&self, message: &[u8]) -> Vec<u8> {
        let signature: Signature = self.key.sign(message);
        signature.to_der().as_bytes().to_vec()
    }

    /// Signs `payload` (an in-toto statement) as a DSSE envelope.
    pub(crate) fn sign(&self, payload: &[u8]) -> Envelope {
        let signature = self.sign_bytes(&pae(PAYLOAD_TYPE, payload));
        Envelope {
            payload_type: PAYLOAD_TYPE.to_string(),
            payload: BASE64.encode(payload),
            signatures: vec![EnvelopeSignature {
                keyid: self.key_id.clone(),
                sig: BASE64.encode(signature),
            }],
        }
    }
}

/// A public key and its key id.
#[derive(Debug, Clone)]
pub(crate) struct Verifier {
    key: VerifyingKey,
    key_id: String,
}

impl Verifier {
    /// Reads a PEM public key (`BEGIN PUBLIC KEY`, as `openssl ec -pubout` writes it).
    pub(crate) fn from_pem(text: &str) -> Result<Verifier, KeyError> {
        let key = VerifyingKey::from_public_key_pem(text.trim())
            .map_err(|error| KeyError::NotPublicKey(error.to_string()))?;
        let key_id = key_id(&key);
        Ok(Verifier { key, key_id })
    }

    pub(crate) fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public key as PEM.
    pub(crate) fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .expect("a P-256 public key always encodes")
    }

    /// Whether `signature` (DER) is this key's over `message`.
    pub(crate) fn verify_bytes(&self, message: &[u8], signature: &[u8]) -> bool {
        Signature::from_der(signature)
            .map(|signature| self.key.verify(message, &signature).is_ok())
            .unwrap_or(false)
    }

    /// The payload of `envelope` if one of its signatures is this key's over its PAE.
    pub(crate) fn open(&self, envelope: &Envelope) -> Result<Vec<u8>, EnvelopeError> {
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
pub(crate) fn parse_envelope(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
    serde_json::from_slice(bytes).map_err(|error| EnvelopeError::NotJson(error.to_string()))
}

/// The envelope's JSON bytes, as pushed.
pub(crate) fn envelope_bytes(envelope: &Envelope) -> Vec<u8> {
    serde_json::to_vec(envelope).expect("an envelope always serializes")
}

/// DSSE's pre-authentication encoding: `DSSEv1 <len> <type> <len> <payload>`.
pub(crate) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
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

/// sha256 of the key's DER SubjectPublicKeyInfo, hex.
fn key_id(key: &VerifyingKey) -> String {
    let der = key
        .to_public_key_der()
        .expect("a P-256 public key always encodes");
    Digest::of(der.as_bytes()).hex().to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Test keys only (tests/fixtures/attest/README.md says how they were made).
    pub(crate) const TEST_KEY: &str = include_str!("../../tests/fixtures/attest/team.pem");
    pub(crate) const OTHER_KEY: &str = include_str!("../../tests/fixtures/attest/other.pem");

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
}
