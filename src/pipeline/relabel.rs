//! A change of labels only, made without a Docker build: the image's config is predicted from an
//! earlier build of the same inputs, and its layers are that build's normalized layers.
//!
//! A label lives in the config alone; the classic builder writes each `LABEL` instruction as a
//! history step `<shell> #(nop)  LABEL k=v k2=v2` (no layer) and each build label (the
//! request's `labels`, sorted by key) as one more such step at the end. So when two builds differ
//! only in the trailing `LABEL` instructions of their last stage, in their build labels, or in
//! the labels and history of the image they are built `FROM` (a runtime image relabelled under a
//! devel image), their layers and every other config field are the same, and the second build's
//! config follows from the first's:
//!
//! - **Labels**: the parent's labels, then every `LABEL` of the last stage's chain of stages in
//!   order, then the build labels (a later one wins).
//! - **History**: the parent's history, then the build's own steps (the first build's, up to its
//!   trailing `LABEL` steps), then one step per trailing `LABEL` and one per build label.
//!
//! [`learn`] takes this model from a real build and keeps it only when it gives that build's
//! config and history back exactly (the self-check: a builder that writes its steps otherwise
//! never gets a prediction); [`predict`] applies it to new labels. What decides everything else
//! is hashed into the model's [`inputs_key`]: the Dockerfile without its trailing `LABEL`s and
//! comments, every other file of the context, the parent's layers and its config but labels, the
//! epoch and the platform. Anything the model cannot read exactly is refused (the caller builds
//! with Docker): parser directives, `$` or `\` in a label, a label without `=`, a `FROM` by
//! variable, a parent with `ONBUILD` triggers.
//!
//! Everything here is values in, values out; the daemon's answers and the store are the Docker
//! adapter's (`pipeline/docker_builder/`, `docker/layer_store.rs`).

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

pub(crate) use crate::docker::layer_store::{LabelModel, Step};

/// One file of a build context but its Dockerfile: (path, mode, sha256 of the content).
pub(crate) type InputFile = (String, u32, String);

/// What a Dockerfile says about the labels of the image it builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabelSteps {
    /// Every instruction (comments and blank lines left out, continuation lines joined) but the
    /// trailing `LABEL` instructions of the last stage, one per line.
    pub(crate) rest: String,
    /// The image the last stage's chain of stages starts `FROM`.
    pub(crate) parent: String,
    /// Every label the chain's `LABEL` instructions set, in order (a later one wins).
    pub(crate) labels: Vec<(String, String)>,
    /// The trailing `LABEL` instructions of the last stage, each as its pairs.
    pub(crate) trailing: Vec<Vec<(String, String)>>,
}

/// The image a build is made `FROM`, as the daemon describes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parent<'a> {
    /// Its inspect `Config`.
    pub(crate) config: &'a Value,
    /// Its history, oldest first.
    pub(crate) history: &'a [Step],
    /// Its layers (diff IDs), bottom first.
    pub(crate) layers: &'a [String],
}

/// One instruction: its word (upper case) and the rest of its line.
struct Instruction {
    word: String,
    args: String,
}

/// Reads what `dockerfile` says about labels; `Err` names what the model cannot follow.
pub(crate) fn label_steps(dockerfile: &str) -> Result<LabelSteps, String> {
    let instructions = instructions(dockerfile)?;
    // Stages: (name, FROM image, instructions after the FROM).
    let mut stages: Vec<(Option<String>, String, Vec<&Instruction>)> = Vec::new();
    for instruction in &instructions {
        if instruction.word == "FROM" {
            let (image, name) = from_args(&instruction.args)?;
            stages.push((name, image, Vec::new()));
        } else {
            match stages.last_mut() {
                Some(stage) => stage.2.push(instruction),
                None if instruction.word == "ARG" => {}
                None => return Err(format!("{} before the first FROM", instruction.word)),
            }
        }
    }
    let Some(last) = stages.len().checked_sub(1) else {
        return Err("no FROM".into());
    };
    // The last stage's chain: each stage FROM an earlier stage's name, up to an image.
    let mut chain = vec![last];
    loop {
        let from = &stages[*chain.last().expect("not empty")].1;
        let earlier = stages[..*chain.last().expect("not empty")]
            .iter()
            .rposition(|(name, _, _)| {
                name.as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(from))
            });
        match earlier {
            Some(index) => chain.push(index),
            None => break,
        }
    }
    let parent = stages[*chain.last().expect("not empty")].1.clone();
    let mut labels = Vec::new();
    for &index in chain.iter().rev() {
        for instruction in &stages[index].2 {
            if instruction.word == "LABEL" {
                labels.extend(label_pairs(&instruction.args)?);
            }
        }
    }
    let last_steps = &stages[last].2;
    let kept = last_steps
        .iter()
        .rposition(|instruction| instruction.word != "LABEL")
        .map_or(0, |index| index + 1);
    let trailing = last_steps[kept..]
        .iter()
        .map(|instruction| label_pairs(&instruction.args))
        .collect::<Result<Vec<_>, _>>()?;
    let rest: String = instructions[..instructions.len() - trailing.len()]
        .iter()
        .map(|instruction| format!("{} {}\n", instruction.word, instruction.args))
        .collect();
    Ok(LabelSteps {
        rest,
        parent,
        labels,
        trailing,
    })
}

/// The instructions of `dockerfile`: comment and blank lines left out (inside a continued
/// instruction too, as the builder does), lines ending in `\` joined with the next.
fn instructions(dockerfile: &str) -> Result<Vec<Instruction>, String> {
    let mut lines = dockerfile.lines().peekable();
    if let Some(first) = lines.peek() {
        if is_directive(first) {
            return Err(format!("a parser directive ({})", first.trim()));
        }
    }
    let mut found = Vec::new();
    let mut current = String::new();
    for line in lines {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let end = line.trim_end();
        match end.strip_suffix('\\') {
            Some(joined) => current.push_str(joined),
            None => {
                current.push_str(end);
                found.push(instruction(&current));
                current.clear();
            }
        }
    }
    if !current.trim().is_empty() {
        found.push(instruction(&current));
    }
    Ok(found)
}

fn instruction(text: &str) -> Instruction {
    let text = text.trim();
    let (word, args) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    Instruction {
        word: word.to_ascii_uppercase(),
        args: args.trim().to_string(),
    }
}

/// `# name=value` on the first line: a parser directive (`escape`, `syntax`) changes how the
/// rest is read.
fn is_directive(line: &str) -> bool {
    let Some(comment) = line.trim_start().strip_prefix('#') else {
        return false;
    };
    comment.split_once('=').is_some_and(|(name, _)| {
        let name = name.trim();
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `FROM [--flag=…] image [AS name]`.
fn from_args(args: &str) -> Result<(String, Option<String>), String> {
    let words: Vec<&str> = args
        .split_whitespace()
        .filter(|word| !word.starts_with("--"))
        .collect();
    let image = match words.first() {
        Some(image) if !image.contains('$') => (*image).to_string(),
        Some(image) => return Err(format!("FROM {image}: an image named by a variable")),
        None => return Err("FROM without an image".into()),
    };
    let name = match &words[1..] {
        [] => None,
        [as_word, name] if as_word.eq_ignore_ascii_case("as") => Some((*name).to_string()),
        _ => return Err(format!("FROM {args}: not `image [AS name]`")),
    };
    Ok((image, name))
}

/// The `key=value` pairs of a `LABEL` instruction's arguments, quotes taken away as the builder
/// takes them (`k="a b"` is `a b`).
fn label_pairs(args: &str) -> Result<Vec<(String, String)>, String> {
    if args.contains(['$', '\\']) {
        return Err(format!(
            "LABEL {args}: a `$` or `\\` the model does not expand"
        ));
    }
    let mut pairs = Vec::new();
    let mut chars = args.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        let mut value = String::new();
        let mut in_value = false;
        let mut quote: Option<char> = None;
        while let Some(c) = chars.peek().copied() {
            if quote.is_none() && c.is_whitespace() {
                break;
            }
            chars.next();
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(open), c) if c == open => quote = None,
                (None, '=') if !in_value => in_value = true,
                _ if in_value => value.push(c),
                _ => key.push(c),
            }
        }
        if quote.is_some() {
            return Err(format!("LABEL {args}: a quote that does not close"));
        }
        if !in_value || key.is_empty() {
            return Err(format!("LABEL {args}: not `key=value`"));
        }
        pairs.push((key, value));
    }
    if pairs.is_empty() {
        return Err("LABEL without a label".into());
    }
    Ok(pairs)
}

/// The key that decides everything of a build but its labels (see the module docs): `files` are
/// the context's other files.
pub(crate) fn inputs_key(
    steps: &LabelSteps,
    files: &[InputFile],
    parent: Parent<'_>,
    epoch: u64,
    platform: &str,
) -> String {
    let mut hasher = Sha256::new();
    let mut line = |text: &str| {
        hasher.update(text.as_bytes());
        hasher.update(b"\n");
    };
    line("imagegen relabel inputs 1");
    line(&format!("epoch {epoch}"));
    line(&format!("platform {platform}"));
    line(&format!("parent {}", steps.parent));
    for layer in parent.layers {
        line(&format!("parent layer {layer}"));
    }
    line(&format!("parent config {}", without_labels(parent.config)));
    let mut files = files.to_vec();
    files.sort();
    for (path, mode, sha256) in &files {
        line(&format!("file {path:?} {mode:o} {sha256}"));
    }
    line("dockerfile");
    line(&steps.rest);
    crate::model::digest::Digest::from_sha256(hasher.finalize().as_slice()).to_string()
}

/// What decides an image's package listing: the listing `script`, the image's `layers` (diff IDs,
/// bottom first) and its `run_config` (the daemon's inspect `Config`) but its labels, which are in
/// no file the script reads. Two images with one key list the same packages.
pub(crate) fn listing_key(script: &str, layers: &[String], run_config: &Value) -> String {
    let mut hasher = Sha256::new();
    let mut line = |text: &str| {
        hasher.update(text.as_bytes());
        hasher.update(b"\n");
    };
    line("imagegen package listing 1");
    line(&format!("script {script:?}"));
    for layer in layers {
        line(&format!("layer {layer}"));
    }
    line(&format!("config {}", without_labels(run_config)));
    crate::model::digest::Digest::from_sha256(hasher.finalize().as_slice()).to_string()
}

fn without_labels(config: &Value) -> Value {
    let mut config = config.clone();
    if let Some(object) = config.as_object_mut() {
        object.remove("Labels");
    }
    config
}

/// The model of a real build (`run_config`, `history`: the daemon's answers about it), when it
/// gives them back exactly; `Err` says where it would not.
pub(crate) fn learn(
    steps: &LabelSteps,
    build_labels: &BTreeMap<String, String>,
    parent: Parent<'_>,
    run_config: &Value,
    history: &[Step],
    inputs: String,
) -> Result<LabelModel, String> {
    let modelled = steps.trailing.len() + build_labels.len();
    let parent_steps = parent.history.len();
    if modelled == 0 {
        return Err("no label steps to follow".into());
    }
    if history.len() < parent_steps + modelled || history[..parent_steps] != *parent.history {
        return Err("the build's history does not start with its parent's".into());
    }
    let first = &history[history.len() - modelled].0;
    let prefix = match first.find("LABEL ") {
        Some(at) if first[..at].ends_with("#(nop)  ") => first[..at].to_string(),
        _ => return Err(format!("the first label step reads {first:?}")),
    };
    let model = LabelModel {
        inputs,
        prefix,
        parent_steps,
        own_steps: history[parent_steps..history.len() - modelled].to_vec(),
        run_config: without_labels(run_config),
    };
    let (predicted_config, predicted_history) = predict(&model, steps, build_labels, parent)?;
    if predicted_history != history {
        let at = predicted_history
            .iter()
            .zip(history)
            .position(|(predicted, real)| predicted != real)
            .unwrap_or(history.len().min(predicted_history.len()));
        return Err(format!(
            "the builder wrote history step {at} as {:?}, the model as {:?}",
            history.get(at),
            predicted_history.get(at)
        ));
    }
    if predicted_config != *run_config {
        return Err(format!(
            "the builder's labels are {}, the model's {}",
            run_config.get("Labels").unwrap_or(&Value::Null),
            predicted_config.get("Labels").unwrap_or(&Value::Null)
        ));
    }
    Ok(model)
}

/// The daemon's answers a build of `steps` with `build_labels` on `parent` would give: the config
/// (inspect `Config`) and the history, oldest first.
pub(crate) fn predict(
    model: &LabelModel,
    steps: &LabelSteps,
    build_labels: &BTreeMap<String, String>,
    parent: Parent<'_>,
) -> Result<(Value, Vec<Step>), String> {
    if parent
        .config
        .get("OnBuild")
        .and_then(Value::as_array)
        .is_some_and(|triggers| !triggers.is_empty())
    {
        return Err(format!("{} has ONBUILD triggers", steps.parent));
    }
    for (key, value) in build_labels {
        if format!("{key}{value}").contains(['$', '\\', '\'', '"', '\n']) {
            return Err(format!(
                "build label {key}={value:?} needs quoting the model does not follow"
            ));
        }
    }
    let mut labels: BTreeMap<String, Value> = match parent.config.get("Labels") {
        Some(Value::Object(labels)) => labels.clone().into_iter().collect(),
        _ => BTreeMap::new(),
    };
    let own = steps.labels.iter().map(|(key, value)| (key, value));
    for (key, value) in own.chain(build_labels) {
        labels.insert(key.clone(), Value::String(value.clone()));
    }
    let mut config = model.run_config.clone();
    let object = config
        .as_object_mut()
        .ok_or("the stored config is not a JSON object")?;
    object.insert(
        "Labels".into(),
        if labels.is_empty() {
            Value::Null
        } else {
            Value::Object(labels.into_iter().collect())
        },
    );
    let mut history = parent.history.to_vec();
    history.extend(model.own_steps.iter().cloned());
    let step = |pairs: &mut dyn Iterator<Item = (&String, &String)>| {
        let pairs: Vec<String> = pairs.map(|(key, value)| format!("{key}={value}")).collect();
        (
            format!("{}LABEL {}", model.prefix, pairs.join(" ")),
            String::new(),
        )
    };
    for pairs in &steps.trailing {
        history.push(step(&mut pairs.iter().map(|(key, value)| (key, value))));
    }
    for pair in build_labels {
        history.push(step(&mut std::iter::once(pair)));
    }
    Ok((config, history))
}

/// Which steps of `history` (predicted from `model` on a parent with `parent_steps` steps and
/// `parent_layers` layers) made no layer, from the learned build's normalized history
/// (`template`: each step's `created_by` without source hashes, `comment`, `empty_layer`):
/// - the parent's steps the template shares at the same place keep its flags; the parent's other
///   steps (a relabelled parent's label steps) made none of its layers, or the flags are unknown
///   and this is an `Err`;
/// - the build's own steps have the template's flags for them;
/// - the label steps made no layer.
pub(crate) fn empty_layers(
    template: &[(String, String, bool)],
    model: &LabelModel,
    history: &[Step],
    parent_steps: usize,
    parent_layers: usize,
    normalize: impl Fn(&str) -> String,
) -> Result<Vec<bool>, String> {
    let own = model.own_steps.len();
    if history.len() < parent_steps + own || template.len() < model.parent_steps + own {
        return Err("the history is shorter than the model's steps".into());
    }
    let mut empty = Vec::with_capacity(history.len());
    let mut shared = true;
    let mut unknown = 0;
    let mut layers = 0;
    for (index, (created_by, comment)) in history[..parent_steps].iter().enumerate() {
        let known = template
            .get(index)
            .filter(|(old_created_by, old_comment, _)| {
                index < model.parent_steps
                    && *old_created_by == normalize(created_by)
                    && old_comment == comment
            });
        match known {
            Some((_, _, flag)) if shared => {
                layers += usize::from(!flag);
                empty.push(*flag);
            }
            _ => {
                shared = false;
                unknown += 1;
                empty.push(true);
            }
        }
    }
    if unknown > 0 && layers != parent_layers {
        return Err(format!(
            "{unknown} of its parent's steps are new, and {} of its layers come from them",
            parent_layers.saturating_sub(layers)
        ));
    }
    let own_template = &template[model.parent_steps..model.parent_steps + own];
    for ((created_by, comment), (old_created_by, old_comment, flag)) in
        model.own_steps.iter().zip(own_template)
    {
        if normalize(created_by) != *old_created_by || comment != old_comment {
            return Err(format!(
                "its step {created_by:?} is not the learned build's {old_created_by:?}"
            ));
        }
        empty.push(*flag);
    }
    empty.resize(history.len(), true);
    Ok(empty)
}

#[cfg(test)]
mod tests;
