//! Finding images by the names people use: a full tag, a per-platform tag, an index tag or an
//! alias, with or without `repository:`. An unknown name is an error listing the closest names.

use anyhow::{bail, Result};

use crate::model::names::closest;
use crate::resolve::image::ImageSpec;

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
    let names = closest(
        bare,
        images.iter().flat_map(|image| {
            std::iter::once(image.tag.as_str())
                .chain(image.index.as_deref())
                .chain(image.aliases.iter().map(String::as_str))
        }),
        5,
    );
    bail!(
        "the matrix makes no image tagged {wanted:?}\nhint: closest tags and aliases: {}; `imagegen resolve` lists them all",
        names.join(", ")
    )
}
