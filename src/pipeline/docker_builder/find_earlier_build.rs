//! The step `find-earlier-build`: an image carrying the build key, a normalized one in the
//! daemon, else the registry's full tag with that key and the digest the manifest records.

use anyhow::{Context, Result};

use super::{EngineBuilder, BUILD_KEY_LABEL};
use crate::docker::repository_path_of;
use crate::model::digest::Digest;
use crate::pipeline::executor::Existing;
use crate::pipeline::normalize::NORMALIZED_LABEL;
use crate::pipeline::planned::PlannedImage;

impl EngineBuilder {
    pub(super) async fn find_by_build_key(
        &self,
        image: &PlannedImage,
        in_registry: Option<&Digest>,
    ) -> Result<Option<Existing>> {
        if let Some(local) = self
            .engine
            .find_image_with_labels(
                BUILD_KEY_LABEL,
                image.build_key.as_str(),
                // The normalized image, not a raw build FROM a normalized parent (a devel image
                // on its runtime image inherits the parent's label, never its epoch `created`).
                Some(NORMALIZED_LABEL),
            )
            .await?
        {
            return Ok(Some(Existing::Local(daemon_image_id(&local.id)?)));
        }
        if let Some(recorded) = in_registry {
            let client = self.registry(&image.spec.repository).await?;
            let path = repository_path_of(&image.spec.repository);
            if let Some(labels) = client.image_labels(path, &image.spec.tag).await? {
                if labels.get(BUILD_KEY_LABEL).map(String::as_str) == Some(image.build_key.as_str())
                {
                    if let Some(digest) = client.manifest_digest(path, &image.spec.tag).await? {
                        if digest == *recorded {
                            return Ok(Some(Existing::Registry(digest)));
                        }
                    }
                }
            }
        }
        Ok(None)
    }
}

/// An image ID the daemon gave (`sha256:<hex>`), parsed once where it enters.
fn daemon_image_id(text: &str) -> Result<Digest> {
    Digest::parse(text)
        .with_context(|| format!("the Docker daemon gave a malformed image ID {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_id_is_a_digest_or_an_error_that_says_so() {
        let id = Digest::of(b"config");
        assert_eq!(daemon_image_id(id.as_str()).unwrap(), id);
        let error = format!("{:#}", daemon_image_id("abc").unwrap_err());
        assert!(
            error.starts_with("the Docker daemon gave a malformed image ID \"abc\""),
            "{error}"
        );
    }
}
