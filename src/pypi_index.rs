//! The HTTP edge of `imagegen knowledge derive`: a PyPI-style simple index (PEP 691 JSON, else
//! PEP 503 HTML) and the PEP 658 `.metadata` files of its wheels, fetched with ureq. What it
//! fetches goes to `model::knowledge::derive` as text; nothing is decided here.

use std::time::Duration;

use crate::docker::https_agent;

use crate::model::knowledge::derive::{
    normalize_name, parse_simple_html, parse_simple_json, IndexFile,
};

/// Index pages of large projects run to a few MB; metadata files to tens of kB.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// Transport failures and 5xx answers are tried this many times in all.
const ATTEMPTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: {reason}")]
    Body { url: String, reason: String },
}

/// A client for one simple index, e.g. `https://pypi.org/simple`.
pub struct IndexClient {
    agent: ureq::Agent,
    index: String,
}

impl IndexClient {
    pub fn new(index: &str, timeout: Duration) -> IndexClient {
        IndexClient {
            agent: https_agent(timeout),
            index: index.trim_end_matches('/').to_string(),
        }
    }

    /// The project page URL (`https://pypi.org/simple/torch/`).
    pub fn page_url(&self, project: &str) -> String {
        format!("{}/{}/", self.index, normalize_name(project))
    }

    /// The files of `project`'s page.
    pub fn project_files(&self, project: &str) -> Result<Vec<IndexFile>, IndexError> {
        let url = self.page_url(project);
        let (content_type, body) = self
            .get(&url, "application/vnd.pypi.simple.v1+json, text/html;q=0.1")?
            .ok_or_else(|| IndexError::Status {
                url: url.clone(),
                status: 404,
            })?;
        if content_type.contains("json") {
            parse_simple_json(&body, &url).map_err(|e| IndexError::Body {
                url: url.clone(),
                reason: e.to_string(),
            })
        } else {
            Ok(parse_simple_html(&body, &url))
        }
    }

    /// The PEP 658 metadata of `file`, or `None` when the index serves none for it.
    pub fn metadata(&self, file: &IndexFile) -> Result<Option<String>, IndexError> {
        let url = format!("{}.metadata", file.url);
        Ok(self.get(&url, "*/*")?.map(|(_, body)| body))
    }

    /// GET `url`: `None` on 404/410, the content type and body on success.
    fn get(&self, url: &str, accept: &str) -> Result<Option<(String, String)>, IndexError> {
        let mut last = None;
        for attempt in 1..=ATTEMPTS {
            match self.agent.get(url).header("Accept", accept).call() {
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    if status == 404 || status == 410 {
                        return Ok(None);
                    }
                    if status >= 500 && attempt < ATTEMPTS {
                        last = Some(IndexError::Status {
                            url: url.to_string(),
                            status,
                        });
                        std::thread::sleep(Duration::from_millis(500 * u64::from(attempt)));
                        continue;
                    }
                    if !(200..300).contains(&status) {
                        return Err(IndexError::Status {
                            url: url.to_string(),
                            status,
                        });
                    }
                    let content_type = response
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let body = response
                        .body_mut()
                        .with_config()
                        .limit(MAX_BODY_BYTES)
                        .read_to_string()
                        .map_err(|e| IndexError::Body {
                            url: url.to_string(),
                            reason: e.to_string(),
                        })?;
                    return Ok(Some((content_type, body)));
                }
                Err(error) => {
                    last = Some(IndexError::Unreachable {
                        url: url.to_string(),
                        reason: error.to_string(),
                    });
                    if attempt < ATTEMPTS {
                        std::thread::sleep(Duration::from_millis(500 * u64::from(attempt)));
                    }
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }
}
