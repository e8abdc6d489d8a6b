//! The HTTP edge of `imagegen knowledge derive`: a PyPI-style simple index (PEP 691 JSON, else
//! PEP 503 HTML), the PEP 658 `.metadata` files of its wheels, and, where an index serves none,
//! the byte ranges of a wheel that hold its `*.dist-info/METADATA` (see
//! `model::knowledge::derive::wheel_zip`), fetched with ureq. What it fetches goes to
//! `model::knowledge::derive` as text; nothing is decided here.

use std::time::Duration;

use crate::docker::https_agent;

use crate::model::knowledge::derive::wheel_zip::{self, WheelZipError};
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
    #[error("{url} does not serve byte ranges (answered HTTP {status} to a Range request)")]
    NoRanges { url: String, status: u16 },
    #[error("{url}: {source}")]
    Wheel {
        url: String,
        #[source]
        source: WheelZipError,
    },
}

/// Where a wheel's METADATA came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataFrom {
    /// The index's PEP 658 `.metadata` file.
    Index,
    /// The wheel itself, read by HTTP range requests.
    WheelRanges,
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

    /// The wheel's METADATA: the index's PEP 658 file, else the member inside the wheel read with
    /// byte ranges; `None` only when the index serves no `.metadata` and the wheel is gone (404).
    pub fn metadata_or_ranges(
        &self,
        file: &IndexFile,
    ) -> Result<Option<(String, MetadataFrom)>, IndexError> {
        if let Some(text) = self.metadata(file)? {
            return Ok(Some((text, MetadataFrom::Index)));
        }
        Ok(self
            .metadata_from_wheel(&file.url)?
            .map(|text| (text, MetadataFrom::WheelRanges)))
    }

    /// The `*.dist-info/METADATA` member of the wheel at `url`, from its tail, its central
    /// directory (only when the tail does not hold the member's entry), its local header and its
    /// data: three or four requests whatever the wheel's size.
    pub(crate) fn metadata_from_wheel(&self, url: &str) -> Result<Option<String>, IndexError> {
        let wheel_error = |source| IndexError::Wheel {
            url: url.to_string(),
            source,
        };
        let Some((tail, tail_start, file_size)) =
            self.range(url, &format!("bytes=-{}", wheel_zip::TAIL_BYTES))?
        else {
            return Ok(None);
        };
        let directory = wheel_zip::central_directory(&tail, tail_start).map_err(wheel_error)?;
        let directory_end = directory.offset.saturating_add(directory.size);
        if directory_end > file_size {
            return Err(wheel_error(WheelZipError::Format(format!(
                "the central directory ends at byte {directory_end}, past the file's {file_size}"
            ))));
        }
        let member = if directory.offset >= tail_start {
            let start = usize::try_from(directory.offset - tail_start).unwrap_or(usize::MAX);
            let end = usize::try_from(directory_end - tail_start).unwrap_or(usize::MAX);
            let bytes = tail
                .get(start..end)
                .ok_or_else(|| wheel_error(WheelZipError::Format("a short tail".into())))?;
            wheel_zip::metadata_member(bytes).map_err(wheel_error)?
        } else {
            // The tail holds the directory's end, where wheels keep their .dist-info; the local
            // header's name confirms what a signature search found. Otherwise read it all.
            let in_tail = usize::try_from(directory_end.saturating_sub(tail_start))
                .unwrap_or(usize::MAX)
                .min(tail.len());
            match wheel_zip::metadata_in_part(&tail[..in_tail]) {
                Some(member) => member,
                None => {
                    let (bytes, _, _) = self
                        .range(
                            url,
                            &format!("bytes={}-{}", directory.offset, directory_end - 1),
                        )?
                        .ok_or_else(|| IndexError::Status {
                            url: url.to_string(),
                            status: 404,
                        })?;
                    wheel_zip::metadata_member(&bytes).map_err(wheel_error)?
                }
            }
        };
        // The local header's name and extra field may differ in length from the directory's;
        // ask for the fixed part, the name and a generous extra field in one request.
        let header_end = member.local_header_offset
            + wheel_zip::LOCAL_HEADER_BYTES
            + member.name.len() as u64
            + 1024;
        let (header, _, _) = self
            .range(
                url,
                &format!(
                    "bytes={}-{}",
                    member.local_header_offset,
                    header_end.min(file_size) - 1
                ),
            )?
            .ok_or_else(|| IndexError::Status {
                url: url.to_string(),
                status: 404,
            })?;
        let data_start = wheel_zip::data_offset(&member, &header).map_err(wheel_error)?;
        let data = if member.compressed_size == 0 {
            Vec::new()
        } else {
            self.range(
                url,
                &format!(
                    "bytes={}-{}",
                    data_start,
                    data_start + member.compressed_size - 1
                ),
            )?
            .ok_or_else(|| IndexError::Status {
                url: url.to_string(),
                status: 404,
            })?
            .0
        };
        wheel_zip::inflate(&member, &data)
            .map(Some)
            .map_err(wheel_error)
    }

    /// GET a byte range of `url`: the bytes, the offset they start at and the file's size (from
    /// `Content-Range`); `None` on 404/410. A server that answers with the whole file is refused
    /// before its body is read (a torch wheel is gigabytes).
    fn range(&self, url: &str, range: &str) -> Result<Option<(Vec<u8>, u64, u64)>, IndexError> {
        let mut last = None;
        for attempt in 1..=ATTEMPTS {
            match self.agent.get(url).header("Range", range).call() {
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
                    if status != 206 {
                        return Err(IndexError::NoRanges {
                            url: url.to_string(),
                            status,
                        });
                    }
                    // `bytes START-END/SIZE`
                    let content_range = response
                        .headers()
                        .get("content-range")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let parsed = content_range
                        .strip_prefix("bytes ")
                        .and_then(|rest| rest.split_once('/'))
                        .and_then(|(span, size)| {
                            let start = span.split_once('-')?.0.parse::<u64>().ok()?;
                            Some((start, size.parse::<u64>().ok()?))
                        });
                    let Some((start, size)) = parsed else {
                        return Err(IndexError::Body {
                            url: url.to_string(),
                            reason: format!(
                                "a 206 answer without a usable Content-Range ({content_range:?})"
                            ),
                        });
                    };
                    let body = response
                        .body_mut()
                        .with_config()
                        .limit(MAX_BODY_BYTES)
                        .read_to_vec()
                        .map_err(|e| IndexError::Body {
                            url: url.to_string(),
                            reason: e.to_string(),
                        })?;
                    return Ok(Some((body, start, size)));
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
