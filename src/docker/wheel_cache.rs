//! The host-side, content-addressed wheel cache of `imagegen build`: every file an image's lock
//! installs, fetched on the host from the index the lock names (with that index's credentials,
//! which never enter a build), checked against the lock's sha256 and kept under
//! `ROOT/sha256/<hex>/<file name>`, shared by every image and run. A file found there is hashed
//! again before it is used; one whose bytes no longer match its name is removed and fetched again,
//! so a tampered or truncated cache costs a download, never a wrong wheel.
//!
//! What to fetch (which packages, which indexes, which Python and platform) is the caller's
//! decision; this module fetches, checks and stores, in parallel on a bounded pool, and counts
//! what it did in a [`FetchProgress`] the caller reports from.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use imagegen_python::{Version, WheelFilename};
use sha2::{Digest as _, Sha256};

use crate::docker::pypi_index::{IndexClient, IndexCredentials};

/// Which wheel file names an image can install (the caller's policy: its Python and platform).
pub(crate) type Accepts = std::sync::Arc<dyn Fn(&WheelFilename) -> bool + Send + Sync>;

/// One locked package for one Python and platform: fetch a wheel of it the target accepts whose
/// sha256 the lock allows.
#[derive(Clone)]
pub(crate) struct WheelNeed {
    pub(crate) name: String,
    pub(crate) version: String,
    /// The sha256 hex digests the lock allows.
    pub(crate) hashes: Vec<String>,
    /// The target, for messages (`Python 3.12 on x86_64-manylinux_2_39`).
    pub(crate) target: String,
    pub(crate) accepts: Accepts,
    /// The indexes to ask, in order (the lock's `# from` index alone when it names one).
    pub(crate) indexes: Vec<IndexSource>,
}

/// An index and the credentials the host holds for it.
#[derive(Debug, Clone)]
pub(crate) struct IndexSource {
    pub(crate) url: String,
    pub(crate) credentials: Option<IndexCredentials>,
}

/// A wheel in the cache, its bytes checked against its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CachedWheel {
    pub(crate) filename: String,
    pub(crate) sha256: String,
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
}

/// What a fetch did so far, for a progress line: files and bytes taken from the cache, fetched
/// from an index, and cached files refused because their bytes no longer match their sha256.
#[derive(Debug, Default)]
pub(crate) struct FetchProgress {
    pub(crate) files_total: AtomicU64,
    pub(crate) files_done: AtomicU64,
    pub(crate) files_cached: AtomicU64,
    pub(crate) bytes_cached: AtomicU64,
    pub(crate) files_fetched: AtomicU64,
    pub(crate) bytes_fetched: AtomicU64,
    pub(crate) refused: AtomicU64,
}

/// The cache at a folder (made on first use).
#[derive(Debug, Clone)]
pub(crate) struct WheelCache {
    root: PathBuf,
}

impl WheelCache {
    pub(crate) fn new(root: impl Into<PathBuf>) -> WheelCache {
        WheelCache { root: root.into() }
    }

    fn entry_dir(&self, sha256: &str) -> PathBuf {
        self.root.join("sha256").join(sha256)
    }

    /// The wheel of `need` already in the cache, its bytes hashed again; a file whose bytes do
    /// not match is removed (counted in `progress.refused`) and not returned.
    fn find(
        &self,
        need: &WheelNeed,
        progress: &FetchProgress,
    ) -> anyhow::Result<Option<CachedWheel>> {
        for sha256 in &need.hashes {
            let dir = self.entry_dir(sha256);
            let Ok(listing) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<String> = listing
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| {
                    WheelFilename::from_str(name).is_ok_and(|wheel| (need.accepts)(&wheel))
                })
                .collect();
            names.sort();
            for filename in names {
                let path = dir.join(&filename);
                let (actual, size) = sha256_of_file(&path)?;
                if actual == *sha256 {
                    return Ok(Some(CachedWheel {
                        filename,
                        sha256: sha256.clone(),
                        path,
                        size,
                    }));
                }
                progress.refused.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "warning: the cached {filename} ({}) has sha256 {actual}, not {sha256}: removed, fetching it again",
                    path.display()
                );
                std::fs::remove_file(&path).map_err(|error| {
                    anyhow::anyhow!("removing the refused {}: {error}", path.display())
                })?;
            }
        }
        Ok(None)
    }

    /// The wheel of `need`: from the cache when a file there still has its sha256, else fetched
    /// from the first index that serves one, checked, and stored.
    pub(crate) fn get(
        &self,
        need: &WheelNeed,
        timeout: Duration,
        progress: &FetchProgress,
    ) -> anyhow::Result<CachedWheel> {
        if let Some(found) = self.find(need, progress)? {
            progress.files_cached.fetch_add(1, Ordering::Relaxed);
            progress
                .bytes_cached
                .fetch_add(found.size, Ordering::Relaxed);
            return Ok(found);
        }
        let mut looked_at = Vec::new();
        for index in &need.indexes {
            let client =
                IndexClient::new(&index.url, timeout).with_credentials(index.credentials.as_ref());
            let files = match client.project_files(&need.name) {
                Ok(files) => files,
                Err(error) => {
                    looked_at.push(format!("{}: {error}", index.url));
                    continue;
                }
            };
            let locked = Version::from_str(&need.version).ok();
            let mut candidates: Vec<_> = files
                .into_iter()
                .filter(|file| {
                    WheelFilename::from_str(&file.filename).is_ok_and(|wheel| {
                        Some(wheel.version()) == locked.as_ref() && (need.accepts)(&wheel)
                    }) && file
                        .sha256
                        .as_ref()
                        .is_none_or(|sha256| need.hashes.contains(sha256))
                })
                .collect();
            // Files whose sha256 the index gives first: they need no download to be judged.
            candidates.sort_by_key(|file| file.sha256.is_none());
            let count = candidates.len();
            for file in candidates {
                if let Some(wheel) =
                    self.download(&client, need, &file.filename, &file.url, progress)?
                {
                    progress.files_fetched.fetch_add(1, Ordering::Relaxed);
                    return Ok(wheel);
                }
            }
            looked_at.push(format!(
                "{}: {count} file(s) of {} for the target, none with a sha256 the lock allows",
                index.url, need.version
            ));
        }
        anyhow::bail!(
            "{}=={}: no wheel for {} with a sha256 the lock allows\n{}\nhint: run `imagegen lock` again if an index replaced the file",
            need.name,
            need.version,
            need.target,
            looked_at.join("\n")
        )
    }

    /// Streams `url` into a temporary file of the cache while hashing it; a file whose sha256
    /// the lock allows is moved to its place, another is deleted (`None`).
    fn download(
        &self,
        client: &IndexClient,
        need: &WheelNeed,
        filename: &str,
        url: &str,
        progress: &FetchProgress,
    ) -> anyhow::Result<Option<CachedWheel>> {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let temporary_dir = self.root.join("tmp");
        std::fs::create_dir_all(&temporary_dir)
            .map_err(|error| anyhow::anyhow!("{}: {error}", temporary_dir.display()))?;
        let temporary = temporary_dir.join(format!(
            "{}-{}.part",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = std::fs::File::create(&temporary)
            .map_err(|error| anyhow::anyhow!("{}: {error}", temporary.display()))?;
        let mut hasher = Sha256::new();
        let downloaded = client.download_to(url, &mut file, &mut |chunk| {
            hasher.update(chunk);
            progress
                .bytes_fetched
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        });
        let written = downloaded.and_then(|size| {
            file.flush()
                .and_then(|()| file.sync_all())
                .map(|()| size)
                .map_err(|error| crate::docker::pypi_index::IndexError::Body {
                    url: url.to_string(),
                    reason: error.to_string(),
                })
        });
        drop(file);
        let size = match written {
            Ok(size) => size,
            Err(error) => {
                let _ = std::fs::remove_file(&temporary);
                return Err(anyhow::anyhow!("{}=={}: {error}", need.name, need.version));
            }
        };
        let sha256 = hex(&hasher.finalize());
        if !need.hashes.contains(&sha256) {
            let _ = std::fs::remove_file(&temporary);
            return Ok(None);
        }
        let dir = self.entry_dir(&sha256);
        std::fs::create_dir_all(&dir)
            .map_err(|error| anyhow::anyhow!("{}: {error}", dir.display()))?;
        let path = dir.join(filename);
        std::fs::rename(&temporary, &path)
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
        Ok(Some(CachedWheel {
            filename: filename.to_string(),
            sha256,
            path,
            size,
        }))
    }
}

/// Every need's wheel, in the order of `needs`, fetched by at most `jobs` threads at once. The
/// first failure (in the order of `needs`) is the error; the others are still fetched, so a
/// second run has less to do.
pub(crate) fn fetch_all(
    cache: &WheelCache,
    needs: &[WheelNeed],
    jobs: usize,
    timeout: Duration,
    progress: &FetchProgress,
) -> anyhow::Result<Vec<CachedWheel>> {
    progress
        .files_total
        .fetch_add(needs.len() as u64, Ordering::Relaxed);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<CachedWheel>>>> =
        Mutex::new((0..needs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, needs.len().max(1)) {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(need) = needs.get(at) else { break };
                let result = cache.get(need, timeout, progress);
                progress.files_done.fetch_add(1, Ordering::Relaxed);
                results.lock().expect("no thread panics holding it")[at] = Some(result);
            });
        }
    });
    results
        .into_inner()
        .expect("no thread panics holding it")
        .into_iter()
        .map(|result| result.expect("every need was taken by a thread"))
        .collect()
}

/// The sha256 (hex) and size of the file at `path`, read in 1 MiB pieces.
pub(crate) fn sha256_of_file(path: &Path) -> anyhow::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)
        .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let read = file
            .read(&mut buffer)
            .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        size += read as u64;
    }
    Ok((hex(&hasher.finalize()), size))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A wheel of the cache opened for reading.
pub(crate) type WheelReader = std::io::BufReader<std::fs::File>;

/// The file name of a wheel of the cache (what its installer and its layer's cut go by).
fn file_name_of(path: &std::path::Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The file name and size of each wheel at `paths` (what `pipeline::venv_cut` cuts by).
pub(crate) fn wheel_sizes(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, u64)>> {
    paths
        .iter()
        .map(|path| {
            let size = std::fs::metadata(path)
                .map_err(|error| anyhow::anyhow!("{}: cannot read it: {error}", path.display()))?
                .len();
            Ok((file_name_of(path), size))
        })
        .collect()
}

/// The wheels at `paths` (files of the cache), opened for reading, each with its file name: what
/// `pipeline::wheel_install` installs from.
pub(crate) fn open_wheels(paths: &[PathBuf]) -> anyhow::Result<Vec<(String, WheelReader)>> {
    paths
        .iter()
        .map(|path| {
            let file = std::fs::File::open(path)
                .map_err(|error| anyhow::anyhow!("{}: cannot open it: {error}", path.display()))?;
            Ok((
                file_name_of(path),
                std::io::BufReader::with_capacity(1 << 20, file),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(hashes: &[&str]) -> WheelNeed {
        WheelNeed {
            name: "pkg".into(),
            version: "1.0".into(),
            hashes: hashes.iter().map(|h| h.to_string()).collect(),
            target: "Python 3.12 on x86_64-manylinux_2_39".into(),
            // What the caller's policy would say for that target, here by file name's end.
            accepts: std::sync::Arc::new(|wheel: &WheelFilename| {
                wheel.as_str().ends_with("-none-any.whl")
            }),
            // Nothing listens on port 9: a test that reaches the network fails.
            indexes: vec![IndexSource {
                url: "http://127.0.0.1:9/simple".into(),
                credentials: None,
            }],
        }
    }

    #[test]
    fn a_cached_file_is_used_only_while_its_bytes_match_its_sha256() {
        let folder = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(folder.path());
        let bytes = b"a wheel's bytes";
        let sha256 = hex(&Sha256::digest(bytes));
        let dir = cache.entry_dir(&sha256);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pkg-1.0-py3-none-any.whl");
        std::fs::write(&path, bytes).unwrap();
        // A file of another platform under the same hash is not taken.
        std::fs::write(dir.join("pkg-1.0-cp312-cp312-win_amd64.whl"), bytes).unwrap();
        let progress = FetchProgress::default();
        let found = cache
            .get(&need(&[&sha256]), Duration::from_secs(2), &progress)
            .unwrap();
        assert_eq!(found.path, path);
        assert_eq!(found.size, bytes.len() as u64);
        assert_eq!(progress.files_cached.load(Ordering::Relaxed), 1);

        // Tampered: refused, removed, and (no index answering) an error naming the package.
        std::fs::write(&path, b"another wheel's bytes").unwrap();
        let progress = FetchProgress::default();
        let error = cache
            .get(&need(&[&sha256]), Duration::from_secs(2), &progress)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("pkg==1.0: no wheel for Python 3.12 on x86_64-manylinux_2_39"),
            "{error}"
        );
        assert!(error.contains("http://127.0.0.1:9/simple"), "{error}");
        assert_eq!(progress.refused.load(Ordering::Relaxed), 1);
        assert!(!path.exists());
    }
}
