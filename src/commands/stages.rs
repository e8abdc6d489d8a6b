//! The pure stages as the commands call them on a project: resolve its matrix against its
//! knowledge, and render its images, with the templates it uses. A matrix that makes no image is
//! an error for every command that would write or build from it ([`no_images`]).

use anyhow::Result;

use crate::project::Project;
use crate::render::{render_all, RenderedImage};
use crate::resolve::image::{Resolution, ResolveOptions};
use crate::resolve::resolve;

/// Resolves the project's matrix; `options.template_digest` is filled in from the templates in
/// use, so a template change changes every fingerprint.
pub fn resolve_project(project: &Project, mut options: ResolveOptions) -> Result<Resolution> {
    let definition = project.definition()?;
    options.template_digest = definition.templates.digest();
    Ok(resolve(&definition.matrix, &definition.knowledge, &options))
}

/// Resolves and renders every image the project's matrix makes.
pub fn render_project(project: &Project) -> Result<(Resolution, Vec<RenderedImage>)> {
    let definition = project.definition()?;
    let resolution = resolve_project(project, ResolveOptions::default())?;
    let rendered = render_all(
        &resolution.images,
        &definition.matrix,
        &definition.templates,
    )?;
    Ok((resolution, rendered))
}

/// The error of a command that needs images when the matrix makes none: every cell was rejected,
/// and the first reason is shown (`imagegen resolve` lists them all). `consequence` says what the
/// command would have done; `extra_hint` names the way to go on anyway, where there is one.
pub fn no_images(
    project: &Project,
    resolution: &Resolution,
    consequence: &str,
    extra_hint: &str,
) -> anyhow::Error {
    let first = resolution
        .rejected
        .first()
        .map(|rejection| {
            format!(
                " (the first: torch {} cuda {} {} {}: {})",
                rejection.torch, rejection.cuda, rejection.os, rejection.variant, rejection.reason
            )
        })
        .unwrap_or_default();
    let rejected = resolution.rejected.len();
    anyhow::anyhow!(
        "{} makes no images{consequence}: {rejected} cell{} rejected{first}\nhint: `imagegen resolve` lists every rejected cell and why{extra_hint}",
        project.matrix_path.display(),
        if rejected == 1 { " is" } else { "s are" },
    )
}
