//! Registry authentication: the `WWW-Authenticate` challenge (Basic, or Bearer per the Docker
//! token specification), token requests (an identity token is an OAuth2 refresh token), and the
//! per-scope token cache, so one push asks for a token once. Secrets never reach a message.

use std::collections::HashMap;

use crate::credentials::Credentials;
use crate::error::RegistryError;
use crate::registry::{
    transport_failure, Answer, Call, RegistryClient, TransportFailure, MAX_BODY_BYTES,
};

/// A parsed `WWW-Authenticate` header.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut parameters: HashMap<String, String> = HashMap::new();
    let mut characters = rest.chars().peekable();
    loop {
        while characters
            .peek()
            .is_some_and(|c| *c == ',' || c.is_whitespace())
        {
            characters.next();
        }
        let key: String = characters.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if characters.peek() == Some(&'"') {
            characters.next();
            let mut escaped = false;
            for c in characters.by_ref() {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => break,
                    (_, c) => {
                        value.push(c);
                        escaped = false;
                    }
                }
            }
        } else {
            while let Some(c) = characters.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                characters.next();
            }
        }
        parameters.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    match scheme.to_ascii_lowercase().as_str() {
        "basic" => Some(Challenge::Basic),
        "bearer" => Some(Challenge::Bearer {
            realm: parameters.remove("realm")?,
            service: parameters.remove("service"),
            scope: parameters.remove("scope"),
        }),
        _ => None,
    }
}

impl RegistryClient {
    /// One attempt, with at most one authentication round.
    pub(super) fn send_authenticated(
        &self,
        call: &Call<'_>,
    ) -> Result<Result<Answer, TransportFailure>, RegistryError> {
        let authorization = self.cached_authorization(&call.scope);
        let answer = match self.transmit(call, authorization.as_deref()) {
            Ok(answer) => answer,
            Err(failure) => return Ok(Err(failure)),
        };
        if answer.status != 401 {
            return Ok(Ok(answer));
        }
        let Some(challenge) = answer.www_authenticate.as_deref().and_then(parse_challenge) else {
            return Ok(Ok(answer));
        };
        let authorization = match challenge {
            Challenge::Basic => match self
                .inner
                .credentials
                .as_ref()
                .and_then(Credentials::basic_authorization)
            {
                Some(basic) => {
                    *self.inner.basic_auth.lock().expect("basic-auth flag lock") = true;
                    basic
                }
                None => return Ok(Ok(answer)),
            },
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => {
                let scope = if call.scope.is_empty() {
                    scope.unwrap_or_default()
                } else {
                    call.scope.clone()
                };
                let token =
                    match self.fetch_token(&realm, service.as_deref(), &scope, &call.action)? {
                        Ok(token) => token,
                        Err(failure) => return Ok(Err(failure)),
                    };
                self.inner
                    .tokens
                    .lock()
                    .expect("token cache lock")
                    .insert(call.scope.clone(), token.clone());
                format!("Bearer {token}")
            }
        };
        Ok(self.transmit(call, Some(&authorization)))
    }

    fn cached_authorization(&self, scope: &str) -> Option<String> {
        if let Some(token) = self
            .inner
            .tokens
            .lock()
            .expect("token cache lock")
            .get(scope)
        {
            return Some(format!("Bearer {token}"));
        }
        if *self.inner.basic_auth.lock().expect("basic-auth flag lock") {
            return self
                .inner
                .credentials
                .as_ref()
                .and_then(Credentials::basic_authorization);
        }
        None
    }

    /// Gets a bearer token from `realm` (docker token spec; OAuth2 refresh for identity tokens).
    fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        action: &str,
    ) -> Result<Result<String, TransportFailure>, RegistryError> {
        let credentials = self.inner.credentials.as_ref();
        let result = match credentials.and_then(Credentials::identity_token) {
            Some(refresh_token) => {
                let mut form: Vec<(&str, &str)> = vec![
                    ("grant_type", "refresh_token"),
                    ("client_id", "imagegen"),
                    ("refresh_token", refresh_token),
                ];
                if let Some(service) = service {
                    form.push(("service", service));
                }
                if !scope.is_empty() {
                    form.push(("scope", scope));
                }
                self.inner.agent.post(realm).send_form(form)
            }
            None => {
                let mut request = self.inner.agent.get(realm);
                if let Some(service) = service {
                    request = request.query("service", service);
                }
                if !scope.is_empty() {
                    request = request.query("scope", scope);
                }
                if let Some(basic) = credentials.and_then(Credentials::basic_authorization) {
                    request = request.header("Authorization", basic);
                }
                request.call()
            }
        };
        let mut response = match result {
            Ok(response) => response,
            Err(error) => return Ok(Err(transport_failure(realm, error))),
        };
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|error| {
                self.protocol_error(action, format!("reading the token answer: {error}"))
            })?;
        if !(200..300).contains(&status) {
            let detail: String = self
                .redact(String::from_utf8_lossy(&body).trim())
                .chars()
                .take(400)
                .collect();
            return Err(RegistryError::Auth {
                host: self.inner.host.clone(),
                action: format!("a token for {action} (from {realm})"),
                status,
                detail,
            });
        }
        let document: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
            self.protocol_error(action, format!("the token service {realm} sent no JSON"))
        })?;
        document["token"]
            .as_str()
            .or_else(|| document["access_token"].as_str())
            .map(|token| Ok(token.to_string()))
            .ok_or_else(|| {
                self.protocol_error(action, format!("the token service {realm} sent no token"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_challenge_with_commas_in_scope() {
        let challenge = parse_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:team/app:pull,push""#,
        );
        assert_eq!(
            challenge,
            Some(Challenge::Bearer {
                realm: "https://auth.example.com/token".into(),
                service: Some("registry.example.com".into()),
                scope: Some("repository:team/app:pull,push".into()),
            })
        );
    }

    #[test]
    fn parses_basic_and_rejects_unknown() {
        assert_eq!(
            parse_challenge(r#"Basic realm="imagegen-test""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
    }
}
