//! Deterministic build-context tarballs: the same directory contents and extra files give the same
//! bytes on any machine, at any time. Entries are sorted by path, owned by uid/gid 0 with empty
//! owner names, stamped with mtime 0, and carry one of two fixed modes (0755 when the source is
//! executable, 0644 otherwise; directories 0755). Symbolic links are stored as links.
//! This module reads files; it does not decide which files belong in a context beyond what it is
//! given, and it does not talk to Docker.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::error::DockerError;

/// A file added to the build context that does not live in the context directory, e.g. the
/// self-test binary. `path` is where it appears inside the context ("bin/gpu-selftest").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    pub path: String,
    pub contents: Vec<u8>,
    pub executable: bool,
}

impl ContextFile {
    /// Reads `source` from disk; the executable bit is taken from the file's mode.
    pub(crate) fn read(
        path_in_context: impl Into<String>,
        source: &Path,
    ) -> Result<Self, DockerError> {
        let contents = fs::read(source).map_err(|error| DockerError::Context {
            path: source.to_path_buf(),
            reason: error.to_string(),
        })?;
        let metadata = fs::metadata(source).map_err(|error| DockerError::Context {
            path: source.to_path_buf(),
            reason: error.to_string(),
        })?;
        Ok(ContextFile {
            path: path_in_context.into(),
            contents,
            executable: metadata.permissions().mode() & 0o111 != 0,
        })
    }
}

enum Entry {
    Directory,
    File { contents: Vec<u8>, executable: bool },
    Symlink { target: PathBuf },
}

/// Builds an uncompressed, deterministic tar of everything under `dir` plus `extra_files`.
/// An extra file whose path is already present in `dir` is an error naming that path, so nothing
/// is silently replaced.
pub fn context_tar(dir: &Path, extra_files: &[ContextFile]) -> Result<Vec<u8>, DockerError> {
    context_tar_leaving_out(dir, extra_files, &[])
}

/// [`context_tar`] without the files of `dir` named in `left_out` (paths inside the context):
/// files the caller keeps beside a context that are no input of the build.
pub(crate) fn context_tar_leaving_out(
    dir: &Path,
    extra_files: &[ContextFile],
    left_out: &[&str],
) -> Result<Vec<u8>, DockerError> {
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    collect_directory(dir, dir, &mut entries)?;
    entries.retain(|path, entry| {
        !(matches!(entry, Entry::File { .. }) && left_out.contains(&path.as_str()))
    });

    for extra in extra_files {
        let path = normalize_context_path(&extra.path).ok_or_else(|| DockerError::Context {
            path: PathBuf::from(&extra.path),
            reason: "an extra file's path must be relative, without `..`, and not empty".into(),
        })?;
        if entries.contains_key(&path) {
            return Err(DockerError::Context {
                path: dir.join(&path),
                reason: format!(
                    "the extra file `{path}` would replace a file of the same path in the context directory"
                ),
            });
        }
        let mut parent = Path::new(&path).parent();
        while let Some(directory) = parent.filter(|p| !p.as_os_str().is_empty()) {
            entries
                .entry(directory.to_string_lossy().into_owned())
                .or_insert(Entry::Directory);
            parent = directory.parent();
        }
        entries.insert(
            path,
            Entry::File {
                contents: extra.contents.clone(),
                executable: extra.executable,
            },
        );
    }

    write_tar(&entries).map_err(|error| DockerError::Context {
        path: dir.to_path_buf(),
        reason: format!("writing the tar stream: {error}"),
    })
}

/// A file of the build context read from disk when the context is sent (a cached wheel): the
/// tar of [`context_tar`] stays small, and the file's bytes are read only for the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiskFile {
    /// Where it appears inside the context (`wheels/torch-2.13.0-....whl`).
    pub(crate) path: String,
    pub(crate) source: PathBuf,
}

/// The `wheels/` folder of one image's context: files of the host's wheel cache, and small files.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContextWheels {
    pub(crate) files: Vec<DiskFile>,
    pub(crate) small_files: Vec<ContextFile>,
}

/// `tar` (made by [`context_tar`]) with `files` (read from disk now) and `small_files` appended
/// under `folder/`, in the order of their paths, with the same fixed owners, modes and mtimes. A
/// path the tar already holds is an error naming it.
pub(crate) fn append_to_context(
    tar: &[u8],
    folder: &str,
    files: &[DiskFile],
    small_files: &[ContextFile],
) -> Result<Vec<u8>, DockerError> {
    let context_error = |path: &Path, reason: String| DockerError::Context {
        path: path.to_path_buf(),
        reason,
    };
    let mut existing = tar::Archive::new(tar);
    let entries = existing
        .entries()
        .map_err(|error| context_error(Path::new(folder), error.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|error| context_error(Path::new(folder), error.to_string()))?;
        let path = entry
            .path()
            .map_err(|error| context_error(Path::new(folder), error.to_string()))?
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        if path == folder || path.starts_with(&format!("{folder}/")) {
            return Err(context_error(
                Path::new(&path),
                format!("the context directory already holds `{path}`, where imagegen places its own `{folder}/`"),
            ));
        }
    }
    // A tar ends in two zero blocks; the appended entries go before them.
    let mut bytes = tar.to_vec();
    let end = bytes.len().saturating_sub(1024);
    if bytes.len() < 1024 || bytes[end..].iter().any(|byte| *byte != 0) {
        return Err(context_error(
            Path::new(folder),
            "the context tar does not end in two zero blocks".into(),
        ));
    }
    bytes.truncate(end);
    let mut builder = tar::Builder::new(bytes);
    builder.mode(tar::HeaderMode::Deterministic);
    let write_error = |error: std::io::Error| context_error(Path::new(folder), error.to_string());
    let mut header = fixed_header(tar::EntryType::Directory, 0o755, 0);
    builder
        .append_data(&mut header, format!("{folder}/"), std::io::empty())
        .map_err(write_error)?;
    let mut sorted: Vec<(String, Option<&DiskFile>, Option<&ContextFile>)> = files
        .iter()
        .map(|file| (file.path.clone(), Some(file), None))
        .chain(
            small_files
                .iter()
                .map(|file| (file.path.clone(), None, Some(file))),
        )
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, disk, small) in sorted {
        let path = format!("{folder}/{name}");
        if normalize_context_path(&path).as_deref() != Some(path.as_str()) || name.contains('/') {
            return Err(context_error(
                Path::new(&path),
                "a file's name must be one plain path component".into(),
            ));
        }
        if let Some(disk) = disk {
            let file = fs::File::open(&disk.source)
                .map_err(|error| context_error(&disk.source, error.to_string()))?;
            let size = file
                .metadata()
                .map_err(|error| context_error(&disk.source, error.to_string()))?
                .len();
            let mut header = fixed_header(tar::EntryType::Regular, 0o644, size);
            builder
                .append_data(&mut header, &path, file)
                .map_err(|error| context_error(&disk.source, error.to_string()))?;
        } else if let Some(small) = small {
            let mode = if small.executable { 0o755 } else { 0o644 };
            let mut header =
                fixed_header(tar::EntryType::Regular, mode, small.contents.len() as u64);
            builder
                .append_data(&mut header, &path, small.contents.as_slice())
                .map_err(write_error)?;
        }
    }
    builder.into_inner().map_err(write_error)
}

fn normalize_context_path(path: &str) -> Option<String> {
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    if parts.is_empty() {
        None
    } else {
        Some(parts.join("/"))
    }
}

fn collect_directory(
    root: &Path,
    dir: &Path,
    entries: &mut BTreeMap<String, Entry>,
) -> Result<(), DockerError> {
    let context_error = |path: &Path, error: std::io::Error| DockerError::Context {
        path: path.to_path_buf(),
        reason: error.to_string(),
    };
    let listing = fs::read_dir(dir).map_err(|error| context_error(dir, error))?;
    for item in listing {
        let item = item.map_err(|error| context_error(dir, error))?;
        let path = item.path();
        let relative = path
            .strip_prefix(root)
            .expect("read_dir yields children of the walked directory")
            .to_string_lossy()
            .into_owned();
        let metadata = fs::symlink_metadata(&path).map_err(|error| context_error(&path, error))?;
        let file_type = metadata.file_type();
        if file_type.is_symlink() {
            let target = fs::read_link(&path).map_err(|error| context_error(&path, error))?;
            entries.insert(relative, Entry::Symlink { target });
        } else if file_type.is_dir() {
            entries.insert(relative, Entry::Directory);
            collect_directory(root, &path, entries)?;
        } else if file_type.is_file() {
            let contents = fs::read(&path).map_err(|error| context_error(&path, error))?;
            entries.insert(
                relative,
                Entry::File {
                    contents,
                    executable: metadata.permissions().mode() & 0o111 != 0,
                },
            );
        } else {
            return Err(DockerError::Context {
                path,
                reason:
                    "only regular files, directories and symbolic links can go into a build context"
                        .into(),
            });
        }
    }
    Ok(())
}

fn fixed_header(entry_type: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(entry_type);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    // Empty owner names keep the bytes independent of the user running imagegen.
    let _ = header.set_username("");
    let _ = header.set_groupname("");
    header
}

fn write_tar(entries: &BTreeMap<String, Entry>) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    for (path, entry) in entries {
        match entry {
            Entry::Directory => {
                let mut header = fixed_header(tar::EntryType::Directory, 0o755, 0);
                builder.append_data(&mut header, format!("{path}/"), std::io::empty())?;
            }
            Entry::File {
                contents,
                executable,
            } => {
                let mode = if *executable { 0o755 } else { 0o644 };
                let mut header = fixed_header(tar::EntryType::Regular, mode, contents.len() as u64);
                builder.append_data(&mut header, path, contents.as_slice())?;
            }
            Entry::Symlink { target } => {
                let mut header = fixed_header(tar::EntryType::Symlink, 0o777, 0);
                builder.append_link(&mut header, path, target)?;
            }
        }
    }
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn entry_listing(tar_bytes: &[u8]) -> Vec<(String, u32, u64, u64)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let header = entry.header();
                (
                    entry.path().unwrap().to_string_lossy().into_owned(),
                    header.mode().unwrap(),
                    header.mtime().unwrap(),
                    header.uid().unwrap(),
                )
            })
            .collect()
    }

    fn sample_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("b/nested")).unwrap();
        fs::write(dir.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        fs::write(dir.path().join("b/nested/z.txt"), "z").unwrap();
        fs::write(dir.path().join("a.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(dir.path().join("a.sh"), fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("a.sh", dir.path().join("link")).unwrap();
        dir
    }

    #[test]
    fn same_input_gives_same_bytes_despite_mtimes() {
        let dir = sample_dir();
        let extra = [ContextFile {
            path: "bin/gpu-selftest".into(),
            contents: b"\x7fELF".to_vec(),
            executable: true,
        }];
        let first = context_tar(dir.path(), &extra).unwrap();
        let file = fs::File::options()
            .write(true)
            .open(dir.path().join("Dockerfile"))
            .unwrap();
        file.set_modified(SystemTime::now() + Duration::from_secs(3600))
            .unwrap();
        let second = context_tar(dir.path(), &extra).unwrap();
        assert_eq!(first, second);
    }

    #[test]
    fn entries_are_sorted_with_fixed_metadata() {
        let dir = sample_dir();
        let extra = [ContextFile {
            path: "bin/gpu-selftest".into(),
            contents: vec![1, 2, 3],
            executable: true,
        }];
        let listing = entry_listing(&context_tar(dir.path(), &extra).unwrap());
        let expected = vec![
            ("Dockerfile".to_string(), 0o644, 0, 0),
            ("a.sh".to_string(), 0o755, 0, 0),
            ("b/".to_string(), 0o755, 0, 0),
            ("b/nested/".to_string(), 0o755, 0, 0),
            ("b/nested/z.txt".to_string(), 0o644, 0, 0),
            ("bin/".to_string(), 0o755, 0, 0),
            ("bin/gpu-selftest".to_string(), 0o755, 0, 0),
            ("link".to_string(), 0o777, 0, 0),
        ];
        assert_eq!(listing, expected);
    }

    #[test]
    fn content_change_changes_bytes() {
        let dir = sample_dir();
        let before = context_tar(dir.path(), &[]).unwrap();
        fs::write(dir.path().join("b/nested/z.txt"), "y").unwrap();
        assert_ne!(before, context_tar(dir.path(), &[]).unwrap());
    }

    #[test]
    fn files_left_out_are_not_in_the_context() {
        let dir = sample_dir();
        let before = context_tar(dir.path(), &[]).unwrap();
        fs::write(dir.path().join("apt.lock"), "htop=3.2.2-2\n").unwrap();
        assert_ne!(before, context_tar(dir.path(), &[]).unwrap());
        assert_eq!(
            before,
            context_tar_leaving_out(dir.path(), &[], &["apt.lock"]).unwrap()
        );
    }

    #[test]
    fn extra_file_may_not_replace_or_escape() {
        let dir = sample_dir();
        let clash = ContextFile {
            path: "Dockerfile".into(),
            contents: vec![],
            executable: false,
        };
        let error = context_tar(dir.path(), &[clash]).unwrap_err().to_string();
        assert!(error.contains("`Dockerfile`"), "{error}");
        let escape = ContextFile {
            path: "../outside".into(),
            contents: vec![],
            executable: false,
        };
        assert!(context_tar(dir.path(), &[escape]).is_err());
    }

    #[test]
    fn missing_directory_names_the_path() {
        let error = context_tar(Path::new("/nonexistent/imagegen-context"), &[])
            .unwrap_err()
            .to_string();
        assert!(error.contains("/nonexistent/imagegen-context"), "{error}");
    }
}
