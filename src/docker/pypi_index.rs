//! The HTTP edge of `imagegen knowledge derive`: a PyPI-style simple index (PEP 691 JSON, else
//! PEP 503 HTML), the PEP 658 `.metadata` files of its wheels, and, where an index serves none,
//! the byte ranges of a wheel that hold its `*.dist-info/METADATA` (see
//! `model::knowledge::derive::wheel_zip`), fetched with ureq. What it fetches goes to
//! `model::knowledge::derive` as text; nothing is decided here.

use std::time::Duration;

use crate::model::extensions::ExtraIndex;
use imagegen_oci::https_agent;

use std::str::FromStr;

use imagegen_python::wheel_zip::{self, WheelZipError};
use imagegen_python::{LockedPackage, PackageName, WheelFilename};

use crate::model::knowledge::derive::{parse_simple_html, parse_simple_json, IndexFile};

/// Index pages of large projects run to a few MB; metadata files to tens of kB.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;
/// Transport failures and 5xx answers are tried this many times in all.
const ATTEMPTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub(crate) enum IndexError {
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
pub(crate) enum MetadataFrom {
    /// The index's PEP 658 `.metadata` file.
    Index,
    /// The wheel itself, read by HTTP range requests.
    WheelRanges,
}

/// A client for one simple index, e.g. `https://pypi.org/simple`.
pub(crate) struct IndexClient {
    agent: ureq::Agent,
    /// For whole files: a deadline on connecting and on the answer's start, none on the body.
    download_agent: ureq::Agent,
    index: String,
    /// `Basic ...` for a team's index, sent only to the index's own host.
    authorization: Option<String>,
}

impl IndexClient {
    pub(crate) fn new(index: &str, timeout: Duration) -> IndexClient {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let download_config = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_connect(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .user_agent(concat!("imagegen/", env!("CARGO_PKG_VERSION")))
            .build();
        IndexClient {
            agent: https_agent(timeout),
            download_agent: ureq::Agent::new_with_config(download_config),
            index: index.trim_end_matches('/').to_string(),
            authorization: None,
        }
    }

    /// This client sending `credentials` (HTTP basic) to the index's host, and to no other.
    pub(crate) fn with_credentials(
        mut self,
        credentials: Option<&IndexCredentials>,
    ) -> IndexClient {
        use base64::Engine as _;
        self.authorization = credentials.map(|c| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", c.username, c.password))
            )
        });
        self
    }

    /// The authorization header for `url`: only on the index's own origin (scheme, host and
    /// port as the WHATWG parser reads them), and never to a URL carrying user information.
    fn authorization_for(&self, url: &str) -> Option<&str> {
        let target = url::Url::parse(url).ok()?;
        let index = url::Url::parse(&self.index).ok()?;
        let plain = target.username().is_empty() && target.password().is_none();
        (plain && target.origin() == index.origin())
            .then_some(self.authorization.as_deref())
            .flatten()
    }

    /// The bytes of the file at `url` (with the credentials where they belong).
    pub(crate) fn download(&self, url: &str) -> Result<Vec<u8>, IndexError> {
        let mut request = self.agent.get(url);
        if let Some(authorization) = self.authorization_for(url) {
            request = request.header("Authorization", authorization);
        }
        let mut response = request.call().map_err(|error| IndexError::Unreachable {
            url: url.to_string(),
            reason: error.to_string(),
        })?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(IndexError::Status {
                url: url.to_string(),
                status,
            });
        }
        response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| IndexError::Body {
                url: url.to_string(),
                reason: e.to_string(),
            })
    }

    /// Streams the file at `url` into `out` (with the credentials where they belong), calling
    /// `on_bytes` with each chunk's length: for wheels of any size (torch's is over 500 MB), with
    /// no deadline on the whole body, only on connecting and on the answer's start.
    pub(crate) fn download_to(
        &self,
        url: &str,
        out: &mut dyn std::io::Write,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<u64, IndexError> {
        let mut request = self.download_agent.get(url);
        if let Some(authorization) = self.authorization_for(url) {
            request = request.header("Authorization", authorization);
        }
        let mut response = request.call().map_err(|error| IndexError::Unreachable {
            url: url.to_string(),
            reason: error.to_string(),
        })?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(IndexError::Status {
                url: url.to_string(),
                status,
            });
        }
        let body_error = |error: std::io::Error| IndexError::Body {
            url: url.to_string(),
            reason: error.to_string(),
        };
        let mut reader = response.body_mut().with_config().limit(u64::MAX).reader();
        let mut buffer = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let read = std::io::Read::read(&mut reader, &mut buffer).map_err(body_error)?;
            if read == 0 {
                return Ok(total);
            }
            out.write_all(&buffer[..read]).map_err(body_error)?;
            on_bytes(&buffer[..read]);
            total += read as u64;
        }
    }

    /// The project page URL (`https://pypi.org/simple/torch/`), under the normalized name
    /// (PEP 503); a text that is no package name goes as written (the index answers 404).
    pub(crate) fn page_url(&self, project: &str) -> String {
        match PackageName::from_str(project) {
            Ok(name) => format!("{}/{name}/", self.index),
            Err(_) => format!("{}/{project}/", self.index),
        }
    }

    /// The files of `project`'s page.
    pub(crate) fn project_files(&self, project: &str) -> Result<Vec<IndexFile>, IndexError> {
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
    pub(crate) fn metadata(&self, file: &IndexFile) -> Result<Option<String>, IndexError> {
        let url = format!("{}.metadata", file.url);
        Ok(self.get(&url, "*/*")?.map(|(_, body)| body))
    }

    /// The wheel's METADATA: the index's PEP 658 file, else the member inside the wheel read with
    /// byte ranges; `None` only when the index serves no `.metadata` and the wheel is gone (404).
    pub(crate) fn metadata_or_ranges(
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
            let mut request = self.agent.get(url).header("Accept", accept);
            if let Some(authorization) = self.authorization_for(url) {
                request = request.header("Authorization", authorization);
            }
            match request.call() {
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

/// A user name and password for a team's index, read on the host; `Debug` shows neither.
#[derive(Clone)]
pub(crate) struct IndexCredentials {
    pub(crate) username: String,
    pub(crate) password: String,
}

impl std::fmt::Debug for IndexCredentials {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("IndexCredentials(***)")
    }
}

/// The credentials of `index` from the variables the matrix names (`username_env`,
/// `password_env`); `None` when it names none (then netrc serves them). A named variable that is
/// unset is an error naming it.
pub(crate) fn env_credentials(index: &ExtraIndex) -> anyhow::Result<Option<IndexCredentials>> {
    let (Some(user_variable), Some(password_variable)) = (&index.username_env, &index.password_env)
    else {
        return Ok(None);
    };
    let read = |variable: &str| {
        std::env::var(variable).map_err(|_| {
            anyhow::anyhow!(
                "the credentials of {} come from ${variable} (extra_indexes in the matrix), which is not set\nhint: export {user_variable} and {password_variable}",
                index.url
            )
        })
    };
    Ok(Some(IndexCredentials {
        username: read(user_variable)?,
        password: read(password_variable)?,
    }))
}

/// The credentials of `url`'s host in a netrc file (`$NETRC`, else `~/.netrc`): its `machine`
/// entry, else its `default` entry.
pub(crate) fn netrc_credentials(url: &str) -> Option<IndexCredentials> {
    let path = std::env::var_os("NETRC")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".netrc"))
        })?;
    let text = std::fs::read_to_string(path).ok()?;
    let host = url::Url::parse(url).ok()?.host_str()?.to_string();
    netrc_lookup(&text, &host)
}

/// The `login` and `password` of `host` in netrc `text`.
pub(crate) fn netrc_lookup(text: &str, host: &str) -> Option<IndexCredentials> {
    let mut tokens = text.split_whitespace();
    let (mut found, mut default) = (None, None);
    let mut current: Option<(bool, Option<String>, Option<String>)> = None;
    let mut finish = |entry: Option<(bool, Option<String>, Option<String>)>| {
        if let Some((is_default, Some(username), Some(password))) = entry {
            let credentials = IndexCredentials { username, password };
            if is_default {
                default.get_or_insert(credentials);
            } else {
                found.get_or_insert(credentials);
            }
        }
    };
    while let Some(token) = tokens.next() {
        match token {
            "machine" => {
                finish(current.take());
                let name = tokens.next().unwrap_or_default();
                // Another host's entry: its login and password are skipped.
                current = (name == host).then_some((false, None, None));
            }
            "default" => {
                finish(current.take());
                current = Some((true, None, None));
            }
            "login" => {
                let value = tokens.next().map(str::to_string);
                if let Some(entry) = &mut current {
                    entry.1 = value;
                }
            }
            "password" => {
                let value = tokens.next().map(str::to_string);
                if let Some(entry) = &mut current {
                    entry.2 = value;
                }
            }
            _ => {}
        }
    }
    finish(current.take());
    found.or(default)
}

/// The credentials of a team's index: its variables, else netrc, else none.
pub(crate) fn credentials(index: &ExtraIndex) -> anyhow::Result<Option<IndexCredentials>> {
    Ok(env_credentials(index)?.or_else(|| netrc_credentials(&index.url)))
}

/// The packages of a lock's text (`imagegen_python::lock`: names, PEP 440 versions, sha256
/// hashes, the index uv took each from, `# from URL`, which `imagegen lock` asks uv for when the
/// matrix has extra indexes); a lock that does not read is an error naming its line.
pub(crate) fn locked_packages(lock: &str) -> anyhow::Result<Vec<LockedPackage>> {
    imagegen_python::parse_lock(lock).map_err(|error| anyhow::anyhow!("the lock, {error}"))
}

/// The wheels of the lock's packages that uv took from one of `indexes`: every wheel of the
/// locked version on that index whose sha256 the lock allows, fetched with the index's
/// credentials, as (file name, bytes). A package with no such wheel is an error naming it.
pub(crate) fn fetch_team_wheels(
    lock: &str,
    indexes: &[ExtraIndex],
    timeout: Duration,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let sha256_hex = |bytes: &[u8]| crate::model::digest::Digest::of(bytes).hex().to_string();
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let mut wheels = Vec::new();
    for package in locked_packages(lock)? {
        let Some(from) = &package.index else { continue };
        let Some(index) = indexes.iter().find(|index| same(&index.url, from)) else {
            continue;
        };
        let client =
            IndexClient::new(&index.url, timeout).with_credentials(credentials(index)?.as_ref());
        let files = client
            .project_files(package.name.as_ref())
            .map_err(|error| anyhow::anyhow!("{}: {error}", package.name))?;
        let before = wheels.len();
        for file in files.iter().filter(|file| {
            WheelFilename::from_str(&file.filename)
                .is_ok_and(|wheel| *wheel.version() == package.version)
        }) {
            let bytes = client
                .download(&file.url)
                .map_err(|error| anyhow::anyhow!("{}: {error}", package.name))?;
            let sha256 = sha256_hex(&bytes);
            if package.sha256.iter().any(|allowed| allowed.hex() == sha256) {
                wheels.push((file.filename.clone(), bytes));
            }
        }
        if wheels.len() == before {
            anyhow::bail!(
                "{}=={} is locked from {}, which serves no wheel of it with a sha256 the lock allows\nhint: run `imagegen lock` again if the team's index replaced the file",
                package.name,
                package.version,
                index.url
            );
        }
    }
    Ok(wheels)
}

/// The `extension-wheels/` files of an image's build context (for `imagegen build` and `imagegen
/// bake` alike): the team's wheels of its lock ([`fetch_team_wheels`]) and a `SOURCES` list
/// (file, sha256), so the folder exists when nothing comes from the team's indexes.
pub(crate) fn team_context_files(
    lock: &str,
    indexes: &[ExtraIndex],
    timeout: Duration,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let sha256_hex = |bytes: &[u8]| crate::model::digest::Digest::of(bytes).hex().to_string();
    let mut sources = String::from(
        "# The wheels of the image's lock from the matrix's extra indexes, fetched by imagegen on the host.\n",
    );
    let mut files = Vec::new();
    for (name, bytes) in fetch_team_wheels(lock, indexes, timeout)? {
        sources.push_str(&format!("{name} sha256:{}\n", sha256_hex(&bytes)));
        files.push((format!("extension-wheels/{name}"), bytes));
    }
    files.push(("extension-wheels/SOURCES".to_string(), sources.into_bytes()));
    Ok(files)
}

#[cfg(test)]
mod team_index_tests {
    use super::*;

    #[test]
    fn netrc_entries_and_default_are_found() {
        let text = "machine other.example login a password b\nmachine 127.0.0.1\n  login team\n  password s3cret\ndefault login anon password none\n";
        let found = netrc_lookup(text, "127.0.0.1").unwrap();
        assert_eq!(
            (found.username.as_str(), found.password.as_str()),
            ("team", "s3cret")
        );
        assert_eq!(netrc_lookup(text, "x.example").unwrap().username, "anon");
        assert!(netrc_lookup("machine a login b password c", "z").is_none());
        assert_eq!(format!("{found:?}"), "IndexCredentials(***)");
    }

    #[test]
    fn a_lock_says_where_each_package_is_from() {
        let (aa, bb, cc) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        let lock = format!("einops==0.8.1 \\\n    --hash=sha256:{aa} \\\n    --hash=sha256:{bb}\n    # via -r requirements.in\n    # from https://pypi.org/simple\nteam_lib==0.1.0 \\\n    --hash=sha256:{cc}\n    # from http://127.0.0.1:9/simple\n");
        let packages = locked_packages(&lock).unwrap();
        assert_eq!(packages.len(), 2);
        let hashes: Vec<&str> = packages[0].sha256.iter().map(|hash| hash.hex()).collect();
        assert_eq!(hashes, [aa.as_str(), bb.as_str()]);
        assert_eq!(packages[1].name.as_ref(), "team-lib");
        assert_eq!(
            packages[1].index.as_deref(),
            Some("http://127.0.0.1:9/simple")
        );
        let error = locked_packages("einops==0.8.1 --hash=sha256:aa\n").unwrap_err();
        assert!(
            error.to_string().starts_with("the lock, line 1: "),
            "{error}"
        );
    }

    #[test]
    fn credentials_go_only_to_the_index_host() {
        let client = IndexClient::new("http://127.0.0.1:9/simple", Duration::from_secs(1))
            .with_credentials(Some(&IndexCredentials {
                username: "u".into(),
                password: "p".into(),
            }));
        assert!(client
            .authorization_for("http://127.0.0.1:9/files/x.whl")
            .is_some());
        assert!(client
            .authorization_for("http://127.0.0.1:10/x.whl")
            .is_none());
        assert!(client
            .authorization_for("https://files.example/x.whl")
            .is_none());
    }
}
