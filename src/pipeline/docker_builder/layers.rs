//! The layer store's records of layers (`docker::layer_store`) to and from the layers of a
//! normalized image: digests and sizes, never bytes. Pure; shared by `normalized`, `relabelled`
//! and `host_venv`.

use anyhow::Result;

use crate::docker::layer_store::{StoredImage, StoredLayer};
use crate::model::digest::Digest;
use crate::pipeline::normalize::NormalizedLayer;

/// The stored layers of `stored` as layers of a normalized image, without their bytes.
pub(super) fn stored_layers(stored: &StoredImage) -> Result<Vec<NormalizedLayer>> {
    stored.layers.iter().map(layer_of_stored).collect()
}

/// `layer` as the layer store keeps it: digests and sizes, no bytes.
pub(super) fn stored_layer(layer: &NormalizedLayer) -> StoredLayer {
    StoredLayer {
        digest: layer.digest.to_string(),
        diff_id: layer.diff_id.to_string(),
        unpacked_size: layer.unpacked_size,
        compressed_size: layer.compressed_size,
    }
}

/// A layer the store keeps, without its bytes (the daemon or the registry holds them).
pub(super) fn layer_of_stored(layer: &StoredLayer) -> Result<NormalizedLayer> {
    Ok(NormalizedLayer {
        gzip: None,
        digest: Digest::parse(&layer.digest)?,
        diff_id: Digest::parse(&layer.diff_id)?,
        unpacked_size: layer.unpacked_size,
        compressed_size: layer.compressed_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_goes_into_the_store_and_back_without_its_bytes() {
        let layer = NormalizedLayer {
            gzip: Some(bytes::Bytes::from_static(b"gz")),
            digest: Digest::of(b"blob"),
            diff_id: Digest::of(b"tar"),
            unpacked_size: 10,
            compressed_size: 2,
        };
        let stored = stored_layer(&layer);
        assert_eq!(stored.digest, layer.digest.to_string());
        let back = layer_of_stored(&stored).unwrap();
        assert!(back.gzip.is_none(), "the store keeps no bytes");
        assert_eq!(
            (
                back.digest,
                back.diff_id,
                back.unpacked_size,
                back.compressed_size
            ),
            (layer.digest, layer.diff_id, 10, 2)
        );
        let broken = StoredLayer {
            digest: "not a digest".into(),
            ..stored
        };
        assert!(layer_of_stored(&broken).is_err());
    }
}
