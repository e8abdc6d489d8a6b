//! The build context of every image, assembled before the first Docker call: `images/<name>/`
//! (less its `apt.lock`, which records the last build and is no input) plus the gpu-selftest
//! binary for the image's CUDA major, and the team's wheels; their sha256 goes into the build
//! keys. The cached wheels are added when a context is sent (`build`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use crate::docker::{context_tar_leaving_out, ContextFile, ContextWheels};
use crate::history::apt_lock::APT_LOCK_FILE;
use crate::history::manifest::BinaryRecord;
use crate::model::digest::Digest;
use crate::pipeline::selftest::binary_record;
use crate::resolve::image::ImageSpec;

/// Where the runtime template copies gpu-selftest (`COPY gpu-selftest /usr/local/bin/gpu-selftest`).
const SELFTEST_PATH: &str = "/usr/local/bin/gpu-selftest";

/// The build context of every image, assembled before the first Docker call.
pub(crate) struct Contexts {
    pub(crate) tars: BTreeMap<String, Vec<u8>>,
    /// The gpu-selftest each context carries, by image name, as the package record lists it.
    pub(crate) binaries: BTreeMap<String, BinaryRecord>,
    /// sha256 of each gpu-selftest binary the contexts hold, by its name (`gpu-selftest-cu12`),
    /// for the images' provenance.
    pub(crate) selftest_digests: BTreeMap<String, Digest>,
    /// The cached wheels each image's context gets under `wheels/` when it is sent, read from
    /// disk then (the tars above stay small; the lock in each names what these are), with the
    /// small files beside them (`SOURCES`).
    pub(crate) wheels: BTreeMap<String, ContextWheels>,
}

impl Contexts {
    /// Tars `images_dir/<name>/` plus `selftest_dir/gpu-selftest-cuNN` (as `gpu-selftest`) for
    /// every image, with more files for some images, by image name (the team's wheels under
    /// `extension-wheels/`, fetched on the host). Fails naming the missing binary or directory.
    pub(crate) fn assemble_with(
        images: &[ImageSpec],
        images_dir: &Path,
        selftest_dir: &Path,
        more_files: &BTreeMap<String, Vec<ContextFile>>,
    ) -> Result<Contexts> {
        let mut tars = BTreeMap::new();
        let mut records = BTreeMap::new();
        let mut binaries: BTreeMap<String, (ContextFile, BinaryRecord)> = BTreeMap::new();
        for image in images {
            let dir = images_dir.join(&image.name);
            if !dir.join("Dockerfile").exists() {
                anyhow::bail!(
                    "{} has no Dockerfile\nhint: run `imagegen render` first",
                    dir.display()
                );
            }
            let (binary, record) = match binaries.get(&image.selftest) {
                Some(found) => found.clone(),
                None => {
                    let path = selftest_dir.join(&image.selftest);
                    let file = ContextFile::read("gpu-selftest", &path).map_err(|e| {
                        anyhow!("{e}\nhint: build the self-test with `bash selftest/build.sh` (it writes target/selftest/gpu-selftest-cu11/12/13 and -cu12/13-arm64) or pass --selftest-dir")
                    })?;
                    let file = ContextFile {
                        executable: true,
                        ..file
                    };
                    let record = binary_record(SELFTEST_PATH, &file.contents);
                    binaries.insert(image.selftest.clone(), (file.clone(), record.clone()));
                    (file, record)
                }
            };
            let mut files = vec![binary];
            files.extend(more_files.get(&image.name).cloned().unwrap_or_default());
            // apt.lock records the last build; it is not an input (nor in the build key).
            let tar = context_tar_leaving_out(&dir, &files, &[APT_LOCK_FILE])
                .with_context(|| format!("build context of {}", image.name))?;
            tars.insert(image.name.clone(), tar);
            records.insert(image.name.clone(), record);
        }
        let selftest_digests = binaries
            .iter()
            .map(|(name, (file, _))| (name.clone(), Digest::of(&file.contents)))
            .collect();
        Ok(Contexts {
            tars,
            binaries: records,
            selftest_digests,
            wheels: BTreeMap::new(),
        })
    }

    /// sha256 of each context, for build keys.
    pub(crate) fn digests(&self) -> BTreeMap<String, Digest> {
        self.tars
            .iter()
            .map(|(name, tar)| (name.clone(), Digest::of(tar)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two images of one CUDA major and their rendered folders, in a temporary project.
    fn project() -> (tempfile::TempDir, Vec<ImageSpec>) {
        let specs = crate::resolve::test_images(
            "registry: r.example\nrepository: t/p\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
        );
        let dir = tempfile::tempdir().unwrap();
        for spec in &specs {
            let folder = dir.path().join("images").join(&spec.name);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(
                folder.join("Dockerfile"),
                format!("FROM {}\n", spec.base_image),
            )
            .unwrap();
        }
        std::fs::create_dir_all(dir.path().join("selftest")).unwrap();
        (dir, specs)
    }

    #[test]
    fn a_context_is_the_rendered_folder_and_the_selftest_of_its_cuda_major() {
        let (dir, specs) = project();
        let images = dir.path().join("images");
        let selftest = dir.path().join("selftest");
        let missing = Contexts::assemble_with(&specs, &images, &selftest, &BTreeMap::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            missing.contains("hint: build the self-test with `bash selftest/build.sh`"),
            "{missing}"
        );
        std::fs::write(selftest.join(&specs[0].selftest), b"selftest binary").unwrap();
        let contexts =
            Contexts::assemble_with(&specs, &images, &selftest, &BTreeMap::new()).unwrap();
        assert_eq!(contexts.tars.len(), specs.len());
        assert_eq!(
            contexts.selftest_digests,
            [(specs[0].selftest.clone(), Digest::of(b"selftest binary"))].into(),
            "one binary for both images of the CUDA major"
        );
        assert_eq!(contexts.binaries[&specs[1].name].path, SELFTEST_PATH);
        // apt.lock records the last build: no input, so it changes no context.
        let digests = contexts.digests();
        std::fs::write(images.join(&specs[0].name).join(APT_LOCK_FILE), "{}").unwrap();
        let again = Contexts::assemble_with(&specs, &images, &selftest, &BTreeMap::new()).unwrap();
        assert_eq!(again.digests(), digests);
        // A folder without its Dockerfile is not rendered yet.
        std::fs::remove_file(images.join(&specs[1].name).join("Dockerfile")).unwrap();
        let error = Contexts::assemble_with(&specs, &images, &selftest, &BTreeMap::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.ends_with("has no Dockerfile\nhint: run `imagegen render` first"),
            "{error}"
        );
    }
}
