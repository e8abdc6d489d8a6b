//! Finding images by the names people use: a full tag, a per-platform tag, an index tag or an
//! alias, with or without `repository:`. An unknown name is an error listing the closest names.

use anyhow::{bail, Result};

use crate::model::names::closest;
use crate::resolve::image::ImageSpec;

/// `wanted` without a leading `repository:` of one of the images (`ghcr.io/acme/pytorch:latest`
/// → `latest`).
pub(crate) fn without_repository<'w>(images: &[ImageSpec], wanted: &'w str) -> &'w str {
    images
        .iter()
        .find_map(|image| wanted.strip_prefix(&format!("{}:", image.repository)))
        .unwrap_or(wanted)
}

/// The images a full tag or alias names (with or without `repository:`): one image, or with
/// several platforms, the per-platform images of the index a full tag or alias names (a
/// per-platform tag names just its image). Empty when nothing has that name.
pub(crate) fn named_images<'a>(images: &'a [ImageSpec], wanted: &str) -> Vec<&'a ImageSpec> {
    let bare = without_repository(images, wanted);
    if let Some(image) = images.iter().find(|image| image.tag == bare) {
        return vec![image];
    }
    images
        .iter()
        .filter(|image| {
            image.index.as_deref() == Some(bare) || image.aliases.iter().any(|a| a == bare)
        })
        .collect()
}

/// Up to five tags, index tags and aliases closest to `wanted`.
pub(crate) fn closest_names<'a>(images: &'a [ImageSpec], wanted: &str) -> Vec<&'a str> {
    closest(
        without_repository(images, wanted),
        images.iter().flat_map(|image| {
            std::iter::once(image.tag.as_str())
                .chain(image.index.as_deref())
                .chain(image.aliases.iter().map(String::as_str))
        }),
        5,
    )
}

/// [`named_images`], where finding nothing is an error listing the closest tags and aliases.
pub(crate) fn find_images<'a>(images: &'a [ImageSpec], wanted: &str) -> Result<Vec<&'a ImageSpec>> {
    let named = named_images(images, wanted);
    if !named.is_empty() {
        return Ok(named);
    }
    bail!(
        "the matrix makes no image tagged {wanted:?}\nhint: closest tags and aliases: {}; `imagegen resolve` lists them all",
        closest_names(images, wanted).join(", ")
    )
}
