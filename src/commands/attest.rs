//! `imagegen attest sign|show` and the attestation half of `imagegen verify --attestations`:
//! the imperative shell around `attest/`. It reads the signing key (a PEM file that only its
//! owner may read, or `IMAGEGEN_SIGNING_KEY`), builds each image's three statements, pushes
//! them in cosign's layout through `docker::Registries`, records them in the manifest, and reads
//! them back to check. No key material is ever printed or written anywhere but the signatures.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use imagegen_python::{parse_lock, LockedPackage};

use crate::attest::check::{check_image, Fetched, ImageCheck};
use crate::attest::cosign::{
    artifact, attestation_layer, attestation_tag, layer_refs, signature_layer, signature_tag,
    simple_signing_payload, Artifact, OCI_MANIFEST,
};
use crate::attest::dsse::{envelope_bytes, KeyId, Signer, Verifier};
use crate::attest::index::{
    index_provenance, index_sbom, index_selftest, platform_digests, PlatformPredicates,
};
use crate::attest::provenance::{provenance, BuildContext};
use crate::attest::referrers::{
    fallback_tag, referrer_manifest, updated_fallback_index, SubjectManifest,
    ATTESTATION_ARTIFACT_TYPE, EMPTY_CONFIG, OCI_INDEX as REFERRERS_INDEX, SIGNATURE_ARTIFACT_TYPE,
};
use crate::attest::sbom::sbom;
use crate::attest::selftest::selftest_result;
use crate::attest::statement::{statement_bytes, Subject};
use crate::attest::{from_attest, to_attest, PredicateKind};
use crate::cli::{
    AttestAction, AttestArgs, AttestSbomArgs, AttestShowArgs, AttestSignArgs, SigningArgs,
};
use crate::commands::outcome::Outcome;
use crate::commands::output::table;
use crate::docker::{repository_path_of, Registries, RegistryClient, RetryPolicy};
use crate::history::attestations::{Artifact as ArtifactRecord, AttestationRecord};
use crate::history::ledger::Transaction;
use crate::history::manifest::{now_rfc3339, ImageRecord, IndexRecord, Manifest};
use crate::model::digest::Digest;
use crate::project::{
    host_name, load_existing_manifest, read_private_key, read_text, ManifestFile, Project,
};

/// The environment variable that may hold the signing key's PEM text itself (a CI secret).
pub(crate) const KEY_ENV: &str = "IMAGEGEN_SIGNING_KEY";

pub(crate) fn run(project: &Project, args: &AttestArgs) -> Result<Outcome> {
    match &args.action {
        AttestAction::Sign(sign) => run_sign(project, sign),
        AttestAction::Show(show) => run_show(show),
        AttestAction::Sbom(sbom) => run_sbom(project, sbom),
    }
}

/// Why a key file's mode is too open, if it is: group or others may read or write it.
pub(crate) fn key_mode_problem(mode: u32) -> Option<String> {
    (mode & 0o077 != 0).then(|| {
        format!(
            "it is readable or writable by others (mode {:o}); hint: chmod 600 it",
            mode & 0o777
        )
    })
}

/// The signing key: `--signing-key`/`IMAGEGEN_SIGNING_KEY_FILE`, else `IMAGEGEN_SIGNING_KEY`
/// (PEM text); `None` when neither is set.
/// Whether a signing key is set (`--signing-key`, or the key's text in [`KEY_ENV`]), without
/// reading it: what `imagegen plan` needs to say that `build --push` signs.
pub(crate) fn signing_configured(signing: &SigningArgs) -> bool {
    signing.signing_key.is_some()
        || std::env::var(KEY_ENV).is_ok_and(|text| !text.trim().is_empty())
}

pub(crate) fn load_signer(signing: &SigningArgs) -> Result<Option<Signer>> {
    if let Some(path) = &signing.signing_key {
        return read_key_file(path).map(Some);
    }
    match std::env::var(KEY_ENV) {
        Ok(text) if !text.trim().is_empty() => Signer::from_pem(&text)
            .map(Some)
            .with_context(|| format!("the signing key in ${KEY_ENV} cannot be used")),
        _ => Ok(None),
    }
}

fn read_key_file(path: &Path) -> Result<Signer> {
    let (text, mode) = read_private_key(path)?;
    if let Some(problem) = key_mode_problem(mode) {
        bail!("refusing the signing key {}: {problem}", path.display());
    }
    Signer::from_pem(&text)
        .with_context(|| format!("the signing key {} cannot be used", path.display()))
}

/// The key to verify with: `--key PUB`, else the public half of the configured signing key.
pub(crate) fn load_verifier(key: Option<&Path>, signing: &SigningArgs) -> Result<Verifier> {
    if let Some(path) = key {
        let text = read_text(path, "the public key")?;
        return Verifier::from_pem(&text)
            .with_context(|| format!("the public key {} cannot be used", path.display()));
    }
    match load_signer(signing)? {
        Some(signer) => Ok(signer.verifier()),
        None => bail!(
            "no key to verify with\nhint: pass --key PUB (a PEM public key: `openssl ec -in KEY -pubout`), or configure the signing key (--signing-key, IMAGEGEN_SIGNING_KEY_FILE or {KEY_ENV})"
        ),
    }
}

/// The lock of `record` when the project holds the very lock it was built from (its digest is
/// the one the record's inputs name); otherwise none, and the SBOM lists the packages read
/// from the image without hashes.
fn lock_of(locks: &BTreeMap<String, String>, record: &ImageRecord) -> Result<Vec<LockedPackage>> {
    let Some(wanted) = record.inputs.get("lock") else {
        return Ok(Vec::new());
    };
    let Some((path, text)) = locks
        .iter()
        .find(|(_, text)| Digest::of(text.as_bytes()).as_str() == wanted)
    else {
        return Ok(Vec::new());
    };
    parse_lock(text).with_context(|| {
        format!(
            "{path}: the lock {}:{} was built from",
            record.repository, record.tag
        )
    })
}

/// What signing one image needs besides the record.
pub(crate) struct SignContext {
    pub(crate) build: BuildContext,
    pub(crate) node: Option<String>,
    pub(crate) locks: BTreeMap<String, String>,
}

impl SignContext {
    pub(crate) fn of(project: &Project) -> SignContext {
        SignContext {
            build: BuildContext {
                imagegen_version: env!("CARGO_PKG_VERSION").to_string(),
                source_repository: project.source_repository(),
                selftest_binaries: BTreeMap::new(),
                invocation_id: std::env::var("GITHUB_RUN_ID").ok().map(|run| {
                    format!(
                        "{}/{}/actions/runs/{run}",
                        std::env::var("GITHUB_SERVER_URL").unwrap_or_default(),
                        std::env::var("GITHUB_REPOSITORY").unwrap_or_default()
                    )
                }),
            },
            node: host_name(),
            locks: project.locks().unwrap_or_default(),
        }
    }
}

/// Pushes an artifact: its blobs, then its manifest under `tag`; returns the manifest digest.
async fn push_artifact(
    client: &RegistryClient,
    repository: &str,
    tag: &str,
    built: &Artifact,
) -> Result<Digest> {
    client.put_blob(repository, built.config.clone()).await?;
    for layer in &built.layers {
        client.put_blob(repository, layer.bytes.clone()).await?;
    }
    Ok(client
        .put_manifest(repository, tag, OCI_MANIFEST, built.manifest.clone())
        .await?)
}

/// Builds, signs and pushes the attestations and signature of the image `record` describes,
/// as pushed at `digest`; returns what the manifest records.
pub(crate) async fn attest_image(
    registries: &Registries,
    signer: &Signer,
    record: &ImageRecord,
    digest: &Digest,
    context: &SignContext,
) -> Result<AttestationRecord> {
    let lock = lock_of(&context.locks, record)?;
    let version = context.build.imagegen_version.as_str();
    let predicates = [
        (
            PredicateKind::Provenance,
            provenance(record, &context.build),
        ),
        (PredicateKind::Sbom, sbom(record, digest, &lock, version)),
        (
            PredicateKind::GpuSelftest,
            selftest_result(record, context.node.as_deref()),
        ),
    ];
    sign_and_push(
        registries,
        signer,
        (&record.repository, &record.tag),
        digest,
        predicates,
    )
    .await
}

/// Builds, signs and pushes the attestations and signature of the OCI image index `index` (see
/// `attest::index`), from the predicates of its platform images as `manifest` records them;
/// refuses when a platform image is not recorded under the digest the index names.
pub(crate) async fn attest_index(
    registries: &Registries,
    signer: &Signer,
    manifest: &Manifest,
    index: &IndexRecord,
    context: &SignContext,
) -> Result<AttestationRecord> {
    let version = context.build.imagegen_version.as_str();
    let mut platforms = Vec::new();
    for (platform, digest) in platform_digests(index) {
        let record = manifest
            .images()
            .values()
            .find(|record| record.digest.as_ref() == Some(&digest))
            .with_context(|| {
                format!(
                    "{}:{}: its {platform} image {digest} is not an image the manifest records; not signed",
                    index.repository, index.tag
                )
            })?;
        let lock = lock_of(&context.locks, record)?;
        platforms.push(PlatformPredicates {
            platform,
            sbom: sbom(record, &digest, &lock, version),
            selftest: selftest_result(record, context.node.as_deref()),
            digest,
        });
    }
    let predicates = [
        (PredicateKind::Provenance, index_provenance(index, version)),
        (
            PredicateKind::Sbom,
            index_sbom(index, &index.digest, &platforms, version),
        ),
        (PredicateKind::GpuSelftest, index_selftest(&platforms)),
    ];
    sign_and_push(
        registries,
        signer,
        (&index.repository, &index.tag),
        &index.digest,
        predicates,
    )
    .await
}

/// Signs the three statements about `digest` (in `repository`, recorded under full tag `tag`),
/// pushes them as the `.att` artifact and the simple-signing signature as `.sig`.
async fn sign_and_push(
    registries: &Registries,
    signer: &Signer,
    (repository_name, tag): (&str, &str),
    digest: &Digest,
    predicates: [(PredicateKind, serde_json::Value); 3],
) -> Result<AttestationRecord> {
    let subject = Subject {
        name: repository_name.to_string(),
        digest: to_attest(digest),
    };
    let gpu_selftest = predicates[2].1["result"]
        .as_str()
        .unwrap_or("not-run")
        .to_string();
    let mut layers = Vec::new();
    let mut statements = BTreeMap::new();
    for (kind, predicate) in predicates {
        let envelope = signer.sign(&statement_bytes(&subject, kind.uri(), predicate));
        let layer = attestation_layer(envelope_bytes(&envelope), kind.uri());
        statements.insert(kind.name().to_string(), from_attest(&layer.digest()));
        layers.push(layer);
    }
    let client = registries.client(repository_name)?;
    let repository = repository_path_of(repository_name);
    let att_tag = attestation_tag(&subject.digest);
    let attestations = artifact(layers);
    let att_digest = push_artifact(&client, repository, &att_tag, &attestations).await?;
    let payload = simple_signing_payload(repository_name, &subject.digest);
    let signature = BASE64.encode(signer.sign_bytes(&payload));
    let sig_tag = signature_tag(&subject.digest);
    let signatures = artifact(vec![signature_layer(payload, signature)]);
    let sig_digest = push_artifact(&client, repository, &sig_tag, &signatures).await?;
    let (referrers, referrers_tag) = push_referrers(
        &client,
        repository,
        digest,
        [
            (&attestations, ATTESTATION_ARTIFACT_TYPE),
            (&signatures, SIGNATURE_ARTIFACT_TYPE),
        ],
    )
    .await?;
    Ok(AttestationRecord {
        repository: repository_name.to_string(),
        tag: tag.to_string(),
        key_id: signer.key_id().to_string(),
        attestations: ArtifactRecord {
            tag: att_tag,
            digest: att_digest,
        },
        signature: ArtifactRecord {
            tag: sig_tag,
            digest: sig_digest,
        },
        statements,
        gpu_selftest,
        signed_at: now_rfc3339(),
        referrers,
        referrers_tag,
    })
}

/// Pushes each artifact (blobs already there) again as an OCI 1.1 referrer of the image
/// `digest`; where the registry does not index them itself (no `OCI-Subject` answer), adds them to
/// the referrers fallback index tagged `sha256-<hex>`. Returns the referrers' digests and the
/// fallback tag when one was written.
async fn push_referrers(
    client: &RegistryClient,
    repository: &str,
    digest: &Digest,
    artifacts: [(&Artifact, &str); 2],
) -> Result<(Vec<Digest>, Option<String>)> {
    let image = client
        .get_manifest(repository, digest.as_str())
        .await?
        .with_context(|| format!("the registry no longer serves {repository}@{digest}"))?;
    let subject = SubjectManifest {
        media_type: image.media_type,
        digest: to_attest(digest),
        size: image.bytes.len() as u64,
    };
    client.put_blob(repository, EMPTY_CONFIG.to_vec()).await?;
    let mut digests = Vec::new();
    let mut fallback = None;
    for (built, artifact_type) in artifacts {
        let manifest = referrer_manifest(built, artifact_type, &subject);
        let (stored, indexed) = client
            .put_referrer(repository, OCI_MANIFEST, manifest.clone())
            .await?;
        digests.push(stored);
        if !indexed {
            let tag = fallback_tag(&subject.digest);
            let existing = client.get_manifest(repository, &tag).await?;
            let index = updated_fallback_index(
                existing.as_ref().map(|found| found.bytes.as_slice()),
                &manifest,
                artifact_type,
            )
            .map_err(|problem| anyhow::anyhow!("{repository}:{tag}: {problem}"))?;
            client
                .put_manifest(repository, &tag, REFERRERS_INDEX, index)
                .await?;
            fallback = Some(tag);
        }
    }
    Ok((digests, fallback))
}

/// The layers of manifest `tag` with their bytes; `None` when the tag is absent.
async fn fetch_layers(
    client: &RegistryClient,
    repository: &str,
    tag: &str,
) -> Result<Option<Vec<Fetched>>> {
    let Some(manifest) = client.get_manifest(repository, tag).await? else {
        return Ok(None);
    };
    let refs = layer_refs(&manifest.bytes)
        .map_err(|reason| anyhow::anyhow!("{repository}:{tag}: {reason}"))?;
    let mut fetched = Vec::new();
    for layer in refs {
        let bytes = client
            .get_blob(repository, &from_attest(&layer.digest))
            .await?
            .with_context(|| format!("{repository}:{tag}: layer {} is missing", layer.digest))?;
        fetched.push(Fetched { layer, bytes });
    }
    Ok(Some(fetched))
}

/// What the registry serves for `repository:tag`, and the verdict on its attestations.
pub(crate) async fn check_served(
    registries: &Registries,
    repository_ref: &str,
    tag: &str,
    verifier: &Verifier,
) -> Result<(Option<Digest>, ImageCheck)> {
    let client = registries.client(repository_ref)?;
    let repository = repository_path_of(repository_ref);
    let Some(served) = client.manifest_digest(repository, tag).await? else {
        return Ok((
            None,
            ImageCheck {
                problems: vec![format!("the registry has no {repository_ref}:{tag}")],
                ..ImageCheck::default()
            },
        ));
    };
    let subject = to_attest(&served);
    let attestations = fetch_layers(&client, repository, &attestation_tag(&subject)).await?;
    let signatures = fetch_layers(&client, repository, &signature_tag(&subject)).await?;
    let check = check_image(
        &subject,
        attestations.as_deref(),
        signatures.as_deref(),
        verifier,
    );
    Ok((Some(served), check))
}

/// The images of `manifest` that `wanted` names (full tags, or all good pushed ones).
fn chosen<'a>(manifest: &'a Manifest, wanted: &[String]) -> Result<Vec<&'a ImageRecord>> {
    let (images, indexes) = chosen_with_indexes(manifest, wanted)?;
    if let Some(index) = indexes.first() {
        bail!(
            "{}:{} is an OCI image index, not one image; name one of its platform images: {}",
            index.repository,
            index.tag,
            index
                .platforms
                .iter()
                .map(|(platform, image)| format!("{} ({platform})", image.tag))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(images)
}

/// The images and indexes of `manifest` that `wanted` names (full tags, with or without
/// `registry/repository:`), or all good pushed images and every index when it names none.
fn chosen_with_indexes<'a>(
    manifest: &'a Manifest,
    wanted: &[String],
) -> Result<(Vec<&'a ImageRecord>, Vec<&'a IndexRecord>)> {
    if wanted.is_empty() {
        return Ok((
            manifest
                .images()
                .values()
                .filter(|record| record.digest.is_some())
                .collect(),
            manifest.indexes().values().collect(),
        ));
    }
    let names = |repository: &str, tag: &str, name: &str| {
        tag == name || format!("{repository}:{tag}") == name
    };
    let mut images = Vec::new();
    let mut indexes = Vec::new();
    for name in wanted {
        if let Some(record) = manifest
            .images()
            .values()
            .find(|record| names(&record.repository, &record.tag, name))
        {
            images.push(record);
        } else if let Some(index) = manifest
            .indexes()
            .values()
            .find(|index| names(&index.repository, &index.tag, name))
        {
            indexes.push(index);
        } else {
            bail!("{name} is not an image the manifest records");
        }
    }
    Ok((images, indexes))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn run_sign(project: &Project, args: &AttestSignArgs) -> Result<Outcome> {
    let Some(signer) = load_signer(&args.signing)? else {
        bail!("no signing key\nhint: pass --signing-key KEY.pem, or set IMAGEGEN_SIGNING_KEY_FILE or {KEY_ENV}");
    };
    let file = ManifestFile::new(&args.manifest, Duration::from_secs(args.lock.lock_timeout));
    let manifest = load_existing_manifest(&args.manifest)?;
    let (images, indexes) = chosen_with_indexes(&manifest, &args.images)?;
    let registries = Registries::new(
        Duration::from_secs(args.deadlines.registry_timeout),
        RetryPolicy::default(),
    );
    let context = SignContext::of(project);
    let runtime = runtime()?;
    let mut signed = 0;
    for record in images {
        let Some(digest) = &record.digest else {
            eprintln!(
                "{}: not pushed (no digest recorded); not signed",
                record.tag
            );
            continue;
        };
        let attested =
            runtime.block_on(attest_image(&registries, &signer, record, digest, &context))?;
        println!(
            "{}:{}: signed {} (key {}, gpu-selftest {}): {}",
            record.repository,
            record.tag,
            digest,
            &attested.key_id[..12],
            attested.gpu_selftest,
            attested.attestations.tag
        );
        let digest = digest.clone();
        let mut transaction = Transaction::begin(&file)?;
        transaction.record_attestation(digest, attested);
        transaction.commit()?;
        signed += 1;
    }
    // Indexes after their platform images, whose records they are made from.
    for index in indexes {
        let attested = runtime.block_on(attest_index(
            &registries,
            &signer,
            &manifest,
            index,
            &context,
        ))?;
        println!(
            "{}:{}: signed index {} (key {}, gpu-selftest {} over {} platform(s)): {}",
            index.repository,
            index.tag,
            index.digest,
            &attested.key_id[..12],
            attested.gpu_selftest,
            index.platforms.len(),
            attested.attestations.tag
        );
        let digest = index.digest.clone();
        let mut transaction = Transaction::begin(&file)?;
        transaction.record_attestation(digest, attested);
        transaction.commit()?;
        signed += 1;
    }
    println!(
        "signed {signed} image(s); recorded in {}",
        args.manifest.display()
    );
    Ok(Outcome::Success)
}

/// `attest sbom`: the SBOM of a recorded image, subject to the pushed digest (or, for an image
/// only built, its local image id), printed as JSON.
fn run_sbom(project: &Project, args: &AttestSbomArgs) -> Result<Outcome> {
    let manifest = load_existing_manifest(&args.manifest)?;
    let record = chosen(&manifest, std::slice::from_ref(&args.image))?[0];
    let digest = match (&record.digest, &record.image_id) {
        (Some(digest), _) => digest.clone(),
        (None, Some(id)) => id.clone(),
        (None, None) => bail!(
            "{}: the manifest records no digest and no image id (the image was never built)",
            record.tag
        ),
    };
    if record.packages.is_none() {
        eprintln!(
            "{}: the record holds no package list read from the image; the SBOM has the lock's packages only",
            record.tag
        );
    }
    let lock = lock_of(&project.locks().unwrap_or_default(), record)?;
    if lock.is_empty() {
        eprintln!(
            "{}: the project holds no lock with the digest the record names; Python packages are listed without hashes",
            record.tag
        );
    }
    let document = sbom(record, &digest, &lock, env!("CARGO_PKG_VERSION"));
    println!("{}", serde_json::to_string_pretty(&document)?);
    Ok(Outcome::Success)
}

fn run_show(args: &AttestShowArgs) -> Result<Outcome> {
    let verifier = load_verifier(args.key.as_deref(), &args.signing)?;
    let manifest = load_existing_manifest(&args.manifest)?;
    let (images, indexes) = chosen_with_indexes(&manifest, std::slice::from_ref(&args.image))?;
    let (repository, tag) = match (images.first(), indexes.first()) {
        (Some(record), _) => (&record.repository, &record.tag),
        (None, Some(index)) => (&index.repository, &index.tag),
        (None, None) => bail!("{} is not an image the manifest records", args.image),
    };
    let registries = Registries::new(
        Duration::from_secs(args.deadlines.registry_timeout),
        RetryPolicy::default(),
    );
    let (served, check) =
        runtime()?.block_on(check_served(&registries, repository, tag, &verifier))?;
    let statements: BTreeMap<&str, &serde_json::Value> = check
        .statements
        .iter()
        .map(|(kind, statement)| (kind.name(), &statement.predicate))
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "image": format!("{repository}:{tag}"),
            "digest": served,
            "key_id": verifier.key_id(),
            "verified": statements,
            "problems": check.problems,
        }))?
    );
    Ok(if check.problems.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// One image as `verify --attestations` found it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ImageVerdict {
    pub(crate) image: String,
    /// The digest the registry serves for the tag, if it serves one.
    pub(crate) served: Option<Digest>,
    /// The kinds of statement that verified.
    pub(crate) statements: Vec<String>,
    /// What is missing or bad; empty when the image is whole.
    pub(crate) problems: Vec<String>,
}

/// `verify --attestations`: every recorded pushed image, its statements and signature as the
/// registry serves them.
pub(crate) async fn verify_attestations(
    manifest: &Manifest,
    verifier: &Verifier,
    registries: &Registries,
) -> Result<Vec<ImageVerdict>> {
    let mut verdicts = Vec::new();
    // Every pushed image, then every index (what a node resolves a multi-platform alias to).
    let images = manifest
        .images()
        .values()
        .filter_map(|r| Some((&r.repository, &r.tag, r.digest.as_ref()?)));
    let indexes = manifest
        .indexes()
        .values()
        .map(|index| (&index.repository, &index.tag, &index.digest));
    for (repository, tag, recorded) in images.chain(indexes) {
        let (served, check) = check_served(registries, repository, tag, verifier).await?;
        let mut problems = check.problems.clone();
        if let Some(served) = &served {
            if served != recorded {
                problems.push(format!(
                    "the manifest records {recorded}, the registry serves {served}"
                ));
            }
        }
        verdicts.push(ImageVerdict {
            image: format!("{repository}:{tag}"),
            served,
            statements: check
                .statements
                .keys()
                .map(|kind| kind.name().to_string())
                .collect(),
            problems,
        });
    }
    Ok(verdicts)
}

/// Whether every image verified (and there was at least one).
pub(crate) fn all_whole(verdicts: &[ImageVerdict]) -> bool {
    !verdicts.is_empty() && verdicts.iter().all(|v| v.problems.is_empty())
}

/// The verdicts as a table, each problem named after it, and a last line.
pub(crate) fn verdict_table(verdicts: &[ImageVerdict], key_id: &KeyId) -> String {
    let mut rows = vec![vec![
        "image".to_string(),
        "digest".to_string(),
        "statements".to_string(),
        "verdict".to_string(),
    ]];
    for verdict in verdicts {
        rows.push(vec![
            verdict.image.clone(),
            verdict
                .served
                .as_ref()
                .map(|d| d.short().to_string())
                .unwrap_or_else(|| "-".into()),
            verdict.statements.join(", "),
            if verdict.problems.is_empty() {
                "ok".into()
            } else {
                "BAD".into()
            },
        ]);
    }
    let mut out = table(&rows);
    let mut count = 0;
    for verdict in verdicts {
        for problem in &verdict.problems {
            count += 1;
            out.push_str(&format!("{}: {problem}\n", verdict.image));
        }
    }
    out.push_str(&format!(
        "{} image(s) checked with key {}: {}\n",
        verdicts.len(),
        key_id.short(),
        if count == 0 {
            "every statement and signature verifies".to_string()
        } else {
            format!("{count} problem(s)")
        }
    ));
    if verdicts.is_empty() {
        out.push_str("the manifest records no pushed image: nothing to verify\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_others_may_read_or_write_is_refused() {
        assert_eq!(key_mode_problem(0o100600), None);
        assert_eq!(key_mode_problem(0o100400), None);
        for mode in [0o100640, 0o100604, 0o100620, 0o100644, 0o100666] {
            let problem = key_mode_problem(mode).unwrap();
            assert!(
                problem.contains(&format!("{:o}", mode & 0o777)),
                "{problem}"
            );
        }
    }
}
