//! The pure stages as the commands call them on a project: resolve its matrix against its
//! knowledge, and render its images, with the templates it uses.

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
