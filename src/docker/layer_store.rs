//! What earlier runs normalized, kept so a build whose layers are an earlier build's (a label or
//! an `ENV` changed, nothing else) skips the export and the normalizing: `<dir>/normalized.json`,
//! one entry per daemon build whose layers were normalized, keyed by the epoch and the daemon's
//! layer diff IDs. An entry holds the normalized layers (digests and sizes, no bytes: the daemon
//! and the registry hold those) and the normalized config, whose fields the daemon's inspect
//! answer does not give (the history's `empty_layer` flags) are taken from.
//!
//! Beside them it keeps package listings (what the listing container printed), keyed by what
//! decides them: the listing script, the image's layers and its config but labels. An image whose
//! layers and config but labels are an earlier one's (a relabelled image) takes the listing from
//! here instead of starting a container.
//!
//! And it keeps the venvs `wheels: host` made (`pipeline/docker_builder/host_venv.rs`): their two
//! layers (digests and sizes: the registry they were pushed to holds the bytes) and the package
//! listing made beside them, keyed by what decides them (the wheels, the scripts, the image the
//! venv goes into but its labels). A later build of the same venv whose registry still holds both
//! layers takes them without installing anything.
//!
//! The file is a cache: a missing, unreadable or malformed one is an empty one, and losing an
//! entry (two runs writing at once: the last rename wins) costs only speed. Whether an entry may
//! be used is the caller's decision (`pipeline/docker_builder.rs`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The file name in the store's folder.
const FILE: &str = "normalized.json";
/// The most entries kept; the oldest go first.
const MOST_ENTRIES: usize = 64;
/// The most package listings kept; the oldest go first.
const MOST_LISTINGS: usize = 64;
/// The most venvs made on the host kept; the oldest go first.
const MOST_HOST_VENVS: usize = 16;

/// One history step as the daemon's history answer gives it: (`created_by`, `comment`).
pub(crate) type Step = (String, String);

/// The model of a build's config as a function of its labels, learned from a real build (`pipeline::relabel::learn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LabelModel {
    /// `pipeline::relabel::inputs_key` of the build it was learned from.
    pub(crate) inputs: String,
    /// What the builder writes before `LABEL` in a label step (`/bin/sh -c #(nop)  `).
    pub(crate) prefix: String,
    /// How many history steps its parent had when it was learned.
    pub(crate) parent_steps: usize,
    /// The build's own history steps after the parent's, up to its trailing label steps.
    pub(crate) own_steps: Vec<Step>,
    /// The daemon's config of the build (inspect `Config`), without `Labels`.
    pub(crate) run_config: Value,
}

/// One normalized layer, as a manifest names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredLayer {
    pub(crate) digest: String,
    pub(crate) diff_id: String,
    pub(crate) unpacked_size: u64,
    pub(crate) compressed_size: u64,
}

/// A daemon build and what normalizing it gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredImage {
    pub(crate) epoch: u64,
    /// The daemon's diff IDs of the build, bottom first.
    pub(crate) raw_layers: Vec<String>,
    /// The normalized image last loaded with these layers (its image ID, the config digest).
    pub(crate) image_id: String,
    /// Its normalized config, as pushed.
    pub(crate) config: String,
    /// Its normalized layers, bottom first (as many as `raw_layers`).
    pub(crate) layers: Vec<StoredLayer>,
    /// How its config follows from its labels (`pipeline::relabel`), when the build's own answers
    /// confirmed it: a later build of the same inputs with other labels takes these layers
    /// without a Docker build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) relabel: Option<LabelModel>,
}

/// A package listing: the listing container's standard output, and the key of what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredListing {
    key: String,
    output: String,
}

/// A venv `wheels: host` made: its layers (the venv's, then what host-venv.sh wrote besides) and
/// the package listing made beside it, under the key of what decided them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredHostVenv {
    pub(crate) key: String,
    /// The part of `key` known before the Docker build (`wheel_install::venv_wheels_key`): a
    /// build that may find its venv here does not start writing one beside the Docker build.
    #[serde(default)]
    pub(crate) wheels: String,
    /// The venv's layers, those placed below the image's base first (`pipeline::venv_cut`).
    pub(crate) layers: Vec<StoredLayer>,
    /// What each layer holds (its history entry), one per layer; empty in a record written
    /// before the layers were cut along the wheels, which is not used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) holds: Vec<String>,
    /// How many of `layers` go below the base.
    #[serde(default)]
    pub(crate) below: usize,
    pub(crate) listing: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    images: Vec<StoredImage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    listings: Vec<StoredListing>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    host_venvs: Vec<StoredHostVenv>,
}

/// The store in one folder.
#[derive(Debug)]
pub(crate) struct LayerStore {
    path: PathBuf,
    /// Serializes this process's read-modify-write of the file.
    writing: Mutex<()>,
}

impl LayerStore {
    /// The store kept in `dir` (made on the first write).
    pub(crate) fn in_dir(dir: &Path) -> LayerStore {
        LayerStore {
            path: dir.join(FILE),
            writing: Mutex::new(()),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> StoreFile {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// The entry for a build with `raw_layers` at `epoch`, if one is kept.
    pub(crate) fn find(&self, epoch: u64, raw_layers: &[String]) -> Option<StoredImage> {
        self.read()
            .images
            .into_iter()
            .find(|image| image.epoch == epoch && image.raw_layers == raw_layers)
    }

    /// The newest entry at `epoch` whose label model was learned from a build of `inputs`
    /// (`pipeline::relabel::inputs_key`), if one is kept.
    pub(crate) fn find_inputs(&self, epoch: u64, inputs: &str) -> Option<StoredImage> {
        self.read().images.into_iter().rev().find(|image| {
            image.epoch == epoch
                && image
                    .relabel
                    .as_ref()
                    .is_some_and(|model| model.inputs == inputs)
        })
    }

    /// Keeps `image`, replacing an entry with the same epoch and layers.
    pub(crate) fn remember(&self, image: StoredImage) -> std::io::Result<()> {
        self.update(|file| {
            file.images
                .retain(|kept| !(kept.epoch == image.epoch && kept.raw_layers == image.raw_layers));
            file.images.push(image);
            drop_oldest(&mut file.images, MOST_ENTRIES);
        })
    }

    /// The package listing kept under `key`, if one is.
    pub(crate) fn listing(&self, key: &str) -> Option<String> {
        self.read()
            .listings
            .into_iter()
            .find(|listing| listing.key == key)
            .map(|listing| listing.output)
    }

    /// Keeps `output` as the package listing under `key`, replacing one kept under it.
    pub(crate) fn remember_listing(&self, key: &str, output: &str) -> std::io::Result<()> {
        self.update(|file| {
            file.listings.retain(|kept| kept.key != key);
            file.listings.push(StoredListing {
                key: key.to_string(),
                output: output.to_string(),
            });
            drop_oldest(&mut file.listings, MOST_LISTINGS);
        })
    }

    /// The venv made on the host kept under `key`, if one is.
    pub(crate) fn host_venv(&self, key: &str) -> Option<StoredHostVenv> {
        self.read()
            .host_venvs
            .into_iter()
            .find(|venv| venv.key == key)
    }

    /// Whether a venv made from the wheels and scripts of `wheels` (a
    /// `wheel_install::venv_wheels_key`) is kept, into whatever image.
    pub(crate) fn has_host_venv_of_wheels(&self, wheels: &str) -> bool {
        self.read()
            .host_venvs
            .iter()
            .any(|venv| venv.wheels == wheels)
    }

    /// Keeps `venv`, replacing one kept under its key.
    pub(crate) fn remember_host_venv(&self, venv: StoredHostVenv) -> std::io::Result<()> {
        self.update(|file| {
            file.host_venvs.retain(|kept| kept.key != venv.key);
            file.host_venvs.push(venv);
            drop_oldest(&mut file.host_venvs, MOST_HOST_VENVS);
        })
    }

    /// Reads the file, changes it, and writes it to a temporary file beside the store, then
    /// renamed over it.
    fn update(&self, change: impl FnOnce(&mut StoreFile)) -> std::io::Result<()> {
        let _writing = self.writing.lock().expect("layer store lock");
        let mut file = self.read();
        change(&mut file);
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
        serde_json::to_writer(&mut temporary, &file)?;
        temporary.persist(&self.path).map_err(|error| error.error)?;
        Ok(())
    }
}

/// Drops the oldest (first) entries beyond `most`.
fn drop_oldest<T>(entries: &mut Vec<T>, most: usize) {
    if entries.len() > most {
        let extra = entries.len() - most;
        entries.drain(..extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(epoch: u64, raw: &str, id: &str) -> StoredImage {
        StoredImage {
            epoch,
            raw_layers: vec![raw.to_string()],
            image_id: id.to_string(),
            config: "{}".into(),
            layers: vec![StoredLayer {
                digest: "sha256:d".into(),
                diff_id: "sha256:i".into(),
                unpacked_size: 2,
                compressed_size: 1,
            }],
            relabel: None,
        }
    }

    #[test]
    fn an_entry_is_found_by_its_epoch_and_layers_and_replaced_by_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = LayerStore::in_dir(&dir.path().join("state"));
        assert_eq!(store.find(1, &["sha256:a".into()]), None, "an empty store");
        store
            .remember(image(1, "sha256:a", "sha256:first"))
            .unwrap();
        store
            .remember(image(2, "sha256:a", "sha256:other-epoch"))
            .unwrap();
        assert_eq!(
            store.find(1, &["sha256:a".into()]).unwrap().image_id,
            "sha256:first"
        );
        assert_eq!(store.find(1, &["sha256:b".into()]), None, "other layers");
        store
            .remember(image(1, "sha256:a", "sha256:second"))
            .unwrap();
        assert_eq!(
            store.find(1, &["sha256:a".into()]).unwrap().image_id,
            "sha256:second"
        );
        assert_eq!(
            store.find(2, &["sha256:a".into()]).unwrap().image_id,
            "sha256:other-epoch"
        );
        assert_eq!(store.read().images.len(), 2, "replaced, not added");
    }

    #[test]
    fn an_entry_with_a_label_model_is_found_by_its_inputs_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = LayerStore::in_dir(dir.path());
        let with_model = |raw: &str, id: &str, inputs: &str| StoredImage {
            relabel: Some(LabelModel {
                inputs: inputs.into(),
                prefix: "/bin/sh -c #(nop)  ".into(),
                parent_steps: 1,
                own_steps: vec![],
                run_config: serde_json::json!({}),
            }),
            ..image(1, raw, id)
        };
        store
            .remember(image(1, "sha256:a", "sha256:plain"))
            .unwrap();
        assert_eq!(store.find_inputs(1, "sha256:in"), None, "no model kept");
        store
            .remember(with_model("sha256:b", "sha256:older", "sha256:in"))
            .unwrap();
        store
            .remember(with_model("sha256:c", "sha256:newer", "sha256:in"))
            .unwrap();
        assert_eq!(
            store.find_inputs(1, "sha256:in").unwrap().image_id,
            "sha256:newer"
        );
        assert_eq!(store.find_inputs(2, "sha256:in"), None, "another epoch");
        assert_eq!(store.find_inputs(1, "sha256:other"), None, "other inputs");
    }

    #[test]
    fn a_host_venv_is_found_by_its_key_replaced_by_a_newer_one_and_the_oldest_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = LayerStore::in_dir(dir.path());
        let venv = |key: &str, listing: &str| StoredHostVenv {
            key: key.into(),
            wheels: format!("wheels of {listing}"),
            layers: image(1, "sha256:a", "sha256:x").layers,
            holds: vec!["the venv".into()],
            below: 0,
            listing: listing.into(),
        };
        assert_eq!(store.host_venv("sha256:k"), None, "an empty store");
        store
            .remember(image(1, "sha256:a", "sha256:plain"))
            .unwrap();
        store.remember_host_venv(venv("sha256:k", "first")).unwrap();
        store
            .remember_host_venv(venv("sha256:k", "second"))
            .unwrap();
        assert_eq!(store.host_venv("sha256:k").unwrap().listing, "second");
        assert!(store.has_host_venv_of_wheels("wheels of second"));
        assert!(
            !store.has_host_venv_of_wheels("wheels of first"),
            "replaced"
        );
        assert_eq!(store.read().host_venvs.len(), 1, "replaced, not added");
        assert_eq!(store.host_venv("sha256:other"), None);
        assert!(
            store.find(1, &["sha256:a".into()]).is_some(),
            "beside the images"
        );
        for index in 0..MOST_HOST_VENVS {
            store
                .remember_host_venv(venv(&format!("sha256:{index}"), "later"))
                .unwrap();
        }
        assert_eq!(store.host_venv("sha256:k"), None, "the oldest went");
        assert!(!store.has_host_venv_of_wheels("wheels of second"));
        assert_eq!(store.read().host_venvs.len(), MOST_HOST_VENVS);
    }

    #[test]
    fn a_listing_is_found_by_its_key_replaced_by_a_newer_one_and_kept_beside_the_images() {
        let dir = tempfile::tempdir().unwrap();
        let store = LayerStore::in_dir(dir.path());
        assert_eq!(store.listing("sha256:k"), None, "an empty store");
        store
            .remember(image(1, "sha256:a", "sha256:first"))
            .unwrap();
        store
            .remember_listing("sha256:k", "torch==2.7.0\n")
            .unwrap();
        store
            .remember_listing("sha256:j", "numpy==2.0.0\n")
            .unwrap();
        assert_eq!(store.listing("sha256:k").as_deref(), Some("torch==2.7.0\n"));
        assert_eq!(store.listing("sha256:other"), None, "another key");
        store
            .remember_listing("sha256:k", "torch==2.8.0\n")
            .unwrap();
        assert_eq!(store.listing("sha256:k").as_deref(), Some("torch==2.8.0\n"));
        let file = store.read();
        assert_eq!(file.listings.len(), 2, "replaced, not added");
        assert_eq!(
            file.images.len(),
            1,
            "the images are kept beside the listings"
        );
        for n in 0..MOST_LISTINGS {
            store.remember_listing(&format!("sha256:{n}"), "").unwrap();
        }
        assert_eq!(store.read().listings.len(), MOST_LISTINGS);
        assert_eq!(store.listing("sha256:k"), None, "the oldest went first");
        assert_eq!(store.listing("sha256:0").as_deref(), Some(""));
    }

    #[test]
    fn a_malformed_store_is_an_empty_one_and_is_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = LayerStore::in_dir(dir.path());
        std::fs::write(store.path(), b"{not json").unwrap();
        assert_eq!(store.find(1, &["sha256:a".into()]), None);
        store.remember(image(1, "sha256:a", "sha256:x")).unwrap();
        assert!(store.find(1, &["sha256:a".into()]).is_some());
    }

    #[test]
    fn the_oldest_entries_go_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = LayerStore::in_dir(dir.path());
        for n in 0..MOST_ENTRIES + 3 {
            store
                .remember(image(1, &format!("sha256:{n}"), "sha256:x"))
                .unwrap();
        }
        assert_eq!(store.read().images.len(), MOST_ENTRIES);
        assert_eq!(store.find(1, &["sha256:0".into()]), None, "the oldest went");
        assert!(store
            .find(1, &[format!("sha256:{}", MOST_ENTRIES + 2)])
            .is_some());
    }
}
