//! The commands `bake`, `k8s`, `ci --github` and `manifest merge`: load the project, call the
//! pure generators (`bake`, `k8s`, `ci`, `manifest_merge`), and do the little file work at the
//! edges (writing the bake file, staging the self-test binaries, reading manifests). Holds no
//! generation logic of its own.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::commands::Outcome;
use crate::history::manifest::Manifest;
use crate::project::{write_atomically, Project};
use crate::resolve::{ImageSpec, ResolveOptions};

fn images(matrix: &Path, knowledge: Option<&Path>) -> Result<Vec<ImageSpec>> {
    let project = Project::load(matrix, knowledge)?;
    Ok(project.resolve(ResolveOptions::default()).images)
}

/// `imagegen bake`: writes the bake file (or prints it with `-`) and stages
/// `<selftest_dir>/gpu-selftest-cuNN` as `.imagegen/bake/gpu-selftest-cuNN/gpu-selftest` beside it.
pub fn bake(
    matrix: &Path,
    knowledge: Option<&Path>,
    out: &Path,
    selftest_dir: &Path,
    stage: bool,
) -> Result<Outcome> {
    let images = images(matrix, knowledge)?;
    let value = crate::generate::bake::bake_file(&images)?;
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    let to_stdout = out.as_os_str() == "-";
    let root = if to_stdout {
        Path::new(".")
    } else {
        out.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    if stage {
        for selftest in crate::generate::bake::selftest_builds(&images) {
            let source = selftest_dir.join(&selftest);
            let bytes = std::fs::read(&source).with_context(|| {
                format!(
                    "cannot read the self-test binary {}\nhint: build it with `bash selftest/build.sh`, pass --selftest-dir, or use --no-stage and copy it to {}/gpu-selftest yourself",
                    source.display(),
                    crate::generate::bake::staging_context(&selftest)
                )
            })?;
            let target = root
                .join(crate::generate::bake::staging_context(&selftest))
                .join("gpu-selftest");
            write_atomically(&target, &bytes)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                    .with_context(|| format!("cannot make {} executable", target.display()))?;
            }
            eprintln!("staged {}", target.display());
        }
    }
    if to_stdout {
        print!("{text}");
    } else {
        write_atomically(out, text.as_bytes())?;
        eprintln!(
            "wrote {} ({} targets){}",
            out.display(),
            images.len(),
            if stage {
                ""
            } else {
                "; not staged: copy target/selftest/gpu-selftest-cuNN to .imagegen/bake/gpu-selftest-cuNN/gpu-selftest before `docker buildx bake`"
            }
        );
    }
    Ok(Outcome::Success)
}

/// Levenshtein distance, for "did you mean" lists.
fn edit_distance(left: &str, right: &str) -> usize {
    let right: Vec<char> = right.chars().collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (i, left_char) in left.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, right_char) in right.iter().enumerate() {
            let substitution = previous[j] + usize::from(left_char != *right_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[right.len()]
}

/// The images a full tag or alias names (with or without `repository:`): one image, or with
/// several platforms, the per-platform images of the index a full tag or alias names (a
/// per-platform tag names just its image). An unknown name is an error listing the closest tags
/// and aliases.
pub fn find_images<'a>(images: &'a [ImageSpec], wanted: &str) -> Result<Vec<&'a ImageSpec>> {
    let bare = images
        .iter()
        .find_map(|image| wanted.strip_prefix(&format!("{}:", image.repository)))
        .unwrap_or(wanted);
    if let Some(image) = images.iter().find(|image| image.tag == bare) {
        return Ok(vec![image]);
    }
    let named: Vec<&ImageSpec> = images
        .iter()
        .filter(|image| {
            image.index.as_deref() == Some(bare) || image.aliases.iter().any(|a| a == bare)
        })
        .collect();
    if !named.is_empty() {
        return Ok(named);
    }
    let mut names: Vec<&str> = images
        .iter()
        .flat_map(|image| {
            std::iter::once(image.tag.as_str())
                .chain(image.index.as_deref())
                .chain(image.aliases.iter().map(String::as_str))
        })
        .collect();
    names.sort_by_key(|name| (edit_distance(bare, name), name.to_string()));
    names.dedup();
    names.truncate(5);
    bail!(
        "the matrix makes no image tagged {wanted:?}\nhint: closest tags and aliases: {}; `imagegen resolve` lists them all",
        names.join(", ")
    )
}

/// `imagegen k8s IMAGE`: prints the Job (and Service) YAML, pinned to the digest `manifest`
/// recorded for the image's current good build, if any.
pub fn k8s(
    matrix: &Path,
    knowledge: Option<&Path>,
    wanted: &str,
    manifest: &Path,
    mut settings: crate::generate::k8s::JobSettings,
) -> Result<Outcome> {
    let images = images(matrix, knowledge)?;
    let named = find_images(&images, wanted)?;
    // A digest pins one image; an index of several platforms runs by its tag.
    if let [image] = named.as_slice() {
        let recorded = Manifest::load(manifest)?;
        settings.digest = recorded
            .images
            .get(&image.tag)
            .filter(|record| record.status == "ok" && record.fingerprint == image.fingerprint)
            .and_then(|record| record.digest.clone());
        if settings.digest.is_none() {
            eprintln!(
                "note: {} has no pushed build of {} with this fingerprint; the Job uses the tag without a digest",
                manifest.display(),
                image.tag
            );
        }
    }
    let manifests = crate::generate::k8s::manifests(&named, &settings)?;
    print!("{}", manifests.to_yaml());
    Ok(Outcome::Success)
}

/// `imagegen ci --github`: prints the matrix on one line (what `$GITHUB_OUTPUT` takes).
pub fn ci_github(
    matrix: &Path,
    knowledge: Option<&Path>,
    fan_out: crate::generate::github::FanOut,
) -> Result<Outcome> {
    let images = images(matrix, knowledge)?;
    if images.is_empty() {
        bail!("the matrix makes no images, so there is nothing to fan out\nhint: `imagegen resolve` says why each cell was rejected");
    }
    let matrix = crate::generate::github::github_matrix(&images, fan_out);
    println!("{}", serde_json::to_string(&matrix)?);
    Ok(Outcome::Success)
}

/// `imagegen manifest merge A B ... [--out FILE]`.
pub fn manifest_merge(inputs: &[std::path::PathBuf], out: Option<&Path>) -> Result<Outcome> {
    let manifests = inputs
        .iter()
        .map(|path| Manifest::load(path))
        .collect::<Result<Vec<_>>>()?;
    let merged = crate::history::merge::merge_all(manifests);
    match out {
        Some(path) => {
            merged.save(path)?;
            eprintln!(
                "wrote {} ({} images, {} aliases, from {} manifests)",
                path.display(),
                merged.images.len(),
                merged.aliases.len(),
                inputs.len()
            );
        }
        None => println!("{}", serde_json::to_string_pretty(&merged)?),
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
