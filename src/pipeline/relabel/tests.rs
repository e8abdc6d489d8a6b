use super::*;
use serde_json::json;

/// A two-stage Dockerfile, and what Docker 20.10's classic builder answered about its build with
/// four build labels (`docker history --no-trunc`, `docker inspect`, run here on 2026-12-05).
const DOCKERFILE: &str = "# GENERATED: fingerprint sha256:1\nFROM example/base:1 AS sys\nLABEL a=1\nFROM sys\n\
SHELL [\"/bin/sh\", \"-e\", \"-c\"]\nENV X=1\n# the labels\nLABEL b=\"two words\" \\\n      c=3 d='q q'\nLABEL e=5\n";

fn build_labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

fn the_build_labels() -> BTreeMap<String, String> {
    build_labels(&[("zk", "v1"), ("ak", "v 2"), ("mk", "x"), ("bb", "y")])
}

fn steps(texts: &[&str]) -> Vec<Step> {
    texts
        .iter()
        .map(|text| match text.strip_prefix("comment:") {
            Some(comment) => (String::new(), comment.to_string()),
            None => (text.to_string(), String::new()),
        })
        .collect()
}

fn base_history() -> Vec<Step> {
    steps(&["comment:Imported from -"])
}

fn base_config() -> Value {
    json!({"Env": null, "Cmd": null, "Labels": null, "OnBuild": null})
}

const BASE_LAYERS: &[&str] = &["sha256:aaaa"];

fn base_layers() -> Vec<String> {
    BASE_LAYERS.iter().map(|layer| layer.to_string()).collect()
}

/// The base image of [`DOCKERFILE`] as the daemon described it.
struct Base {
    config: Value,
    history: Vec<Step>,
    layers: Vec<String>,
}

impl Base {
    fn new() -> Base {
        Base {
            config: base_config(),
            history: base_history(),
            layers: base_layers(),
        }
    }

    fn parent(&self) -> Parent<'_> {
        Parent {
            config: &self.config,
            history: &self.history,
            layers: &self.layers,
        }
    }
}

fn the_history() -> Vec<Step> {
    steps(&[
        "comment:Imported from -",
        "/bin/sh -c #(nop)  LABEL a=1",
        "/bin/sh -e -c #(nop)  SHELL [/bin/sh -e -c]",
        "/bin/sh -e -c #(nop)  ENV X=1",
        "/bin/sh -e -c #(nop)  LABEL b=two words c=3 d=q q",
        "/bin/sh -e -c #(nop)  LABEL e=5",
        "/bin/sh -e -c #(nop)  LABEL ak=v 2",
        "/bin/sh -e -c #(nop)  LABEL bb=y",
        "/bin/sh -e -c #(nop)  LABEL mk=x",
        "/bin/sh -e -c #(nop)  LABEL zk=v1",
    ])
}

fn the_config() -> Value {
    json!({
        "Env": ["PATH=/usr/bin", "X=1"],
        "Cmd": null,
        "Image": "sha256:before",
        "Shell": ["/bin/sh", "-e", "-c"],
        "Labels": {"a": "1", "ak": "v 2", "b": "two words", "bb": "y", "c": "3", "d": "q q", "e": "5", "mk": "x", "zk": "v1"},
        "OnBuild": null
    })
}

fn learned() -> (LabelModel, LabelSteps) {
    let base = Base::new();
    let parent = base.parent();
    let label_steps = label_steps(DOCKERFILE).unwrap();
    let model = learn(
        &label_steps,
        &the_build_labels(),
        parent,
        &the_config(),
        &the_history(),
        "key".into(),
    )
    .unwrap();
    (model, label_steps)
}

#[test]
fn a_dockerfiles_labels_are_read_as_the_builder_reads_them() {
    let read = label_steps(DOCKERFILE).unwrap();
    assert_eq!(read.parent, "example/base:1");
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        read.labels,
        pairs(&[
            ("a", "1"),
            ("b", "two words"),
            ("c", "3"),
            ("d", "q q"),
            ("e", "5")
        ])
    );
    assert_eq!(
        read.trailing,
        vec![
            pairs(&[("b", "two words"), ("c", "3"), ("d", "q q")]),
            pairs(&[("e", "5")])
        ]
    );
    assert_eq!(
        read.rest,
        "FROM example/base:1 AS sys\nLABEL a=1\nFROM sys\nSHELL [\"/bin/sh\", \"-e\", \"-c\"]\nENV X=1\n"
    );
}

#[test]
fn the_model_learned_from_a_real_build_gives_its_answers_back() {
    let (model, _) = learned();
    assert_eq!(model.prefix, "/bin/sh -e -c #(nop)  ");
    assert_eq!(model.own_steps, the_history()[1..4].to_vec());
    assert_eq!(model.run_config.get("Labels"), None);
    assert_eq!(model.run_config["Env"], json!(["PATH=/usr/bin", "X=1"]));
}

#[test]
fn new_labels_give_the_steps_and_labels_a_build_would() {
    let (model, _) = learned();
    let changed = DOCKERFILE
        .replace("two words", "three words here")
        .replace("e=5", "e=6 f=\"x y\"");
    let changed = label_steps(&changed).unwrap();
    let base = Base::new();
    let parent = base.parent();
    let (config, history) = predict(
        &model,
        &changed,
        &build_labels(&[("ak", "v 3"), ("zk", "v1")]),
        parent,
    )
    .unwrap();
    assert_eq!(
        history,
        steps(&[
            "comment:Imported from -",
            "/bin/sh -c #(nop)  LABEL a=1",
            "/bin/sh -e -c #(nop)  SHELL [/bin/sh -e -c]",
            "/bin/sh -e -c #(nop)  ENV X=1",
            "/bin/sh -e -c #(nop)  LABEL b=three words here c=3 d=q q",
            "/bin/sh -e -c #(nop)  LABEL e=6 f=x y",
            "/bin/sh -e -c #(nop)  LABEL ak=v 3",
            "/bin/sh -e -c #(nop)  LABEL zk=v1",
        ])
    );
    assert_eq!(
        config["Labels"],
        json!({"a": "1", "ak": "v 3", "b": "three words here", "c": "3", "d": "q q", "e": "6", "f": "x y", "zk": "v1"})
    );
    let mut other_fields = config.clone();
    other_fields.as_object_mut().unwrap().remove("Labels");
    assert_eq!(
        other_fields, model.run_config,
        "nothing but the labels changes"
    );
}

#[test]
fn a_relabelled_parent_gives_its_labels_and_history_to_the_image_built_from_it() {
    let (model, label_steps) = learned();
    let config = json!({"Env": null, "Labels": {"a": "parent", "p": "new"}, "OnBuild": null});
    let history = steps(&["comment:Imported from -", "/bin/sh -c #(nop)  LABEL p=new"]);
    let layers = base_layers();
    let parent = Parent {
        config: &config,
        history: &history,
        layers: &layers,
    };
    let (config, predicted) = predict(&model, &label_steps, &the_build_labels(), parent).unwrap();
    assert_eq!(predicted[..2], history[..]);
    assert_eq!(predicted[2..], the_history()[1..]);
    assert_eq!(config["Labels"]["p"], json!("new"));
    assert_eq!(
        config["Labels"]["a"],
        json!("1"),
        "the stage's own LABEL wins over the parent's"
    );
}

#[test]
fn a_builder_that_writes_its_steps_otherwise_gets_no_model() {
    let base = Base::new();
    let parent = base.parent();
    let read = label_steps(DOCKERFILE).unwrap();
    // Build labels in the order given, not sorted.
    let mut unsorted = the_history();
    unsorted.swap(6, 9);
    let error = learn(
        &read,
        &the_build_labels(),
        parent,
        &the_config(),
        &unsorted,
        "key".into(),
    )
    .unwrap_err();
    assert!(error.contains("history step 6"), "{error}");
    // Labels other than the steps say.
    let mut config_other = the_config();
    config_other["Labels"]["a"] = json!("other");
    let error = learn(
        &read,
        &the_build_labels(),
        parent,
        &config_other,
        &the_history(),
        "key".into(),
    )
    .unwrap_err();
    assert!(error.contains("labels are"), "{error}");
    // Another parent's history.
    let other_history = steps(&["comment:Imported from elsewhere"]);
    let other = Parent {
        history: &other_history,
        ..parent
    };
    let error = learn(
        &read,
        &the_build_labels(),
        other,
        &the_config(),
        &the_history(),
        "key".into(),
    )
    .unwrap_err();
    assert!(
        error.contains("does not start with its parent's"),
        "{error}"
    );
}

#[test]
fn the_inputs_key_moves_with_everything_but_labels() {
    let base = Base::new();
    let parent = base.parent();
    let files = vec![(
        "requirements.lock".to_string(),
        0o644,
        "sha256:f".to_string(),
    )];
    let key =
        |dockerfile: &str, files: &[(String, u32, String)], parent: Parent<'_>, epoch: u64| {
            inputs_key(
                &label_steps(dockerfile).unwrap(),
                files,
                parent,
                epoch,
                "linux/amd64",
            )
        };
    let original = key(DOCKERFILE, &files, parent, 7);
    // The same: a trailing label, a comment, the parent's labels and history.
    assert_eq!(
        key(&DOCKERFILE.replace("e=5", "e=6 g=7"), &files, parent, 7),
        original
    );
    assert_eq!(
        key(
            &DOCKERFILE.replace("# the labels", "# other words"),
            &files,
            parent,
            7
        ),
        original
    );
    let relabelled = json!({"Env": null, "Cmd": null, "Labels": {"p": "1"}, "OnBuild": null});
    let longer = steps(&["comment:Imported from -", "x"]);
    assert_eq!(
        key(
            DOCKERFILE,
            &files,
            Parent {
                config: &relabelled,
                history: &longer,
                ..parent
            },
            7
        ),
        original
    );
    // Another key: an instruction, an earlier stage's label, a file, the parent's layers or
    // config, the epoch.
    assert_ne!(
        key(&DOCKERFILE.replace("X=1", "X=2"), &files, parent, 7),
        original
    );
    assert_ne!(
        key(&DOCKERFILE.replace("a=1", "a=2"), &files, parent, 7),
        original
    );
    let other_files = vec![(
        "requirements.lock".to_string(),
        0o644,
        "sha256:g".to_string(),
    )];
    assert_ne!(key(DOCKERFILE, &other_files, parent, 7), original);
    let other_layers = vec!["sha256:bbbb".to_string()];
    assert_ne!(
        key(
            DOCKERFILE,
            &files,
            Parent {
                layers: &other_layers,
                ..parent
            },
            7
        ),
        original
    );
    let other_env = json!({"Env": ["Y=1"], "Cmd": null, "Labels": null, "OnBuild": null});
    assert_ne!(
        key(
            DOCKERFILE,
            &files,
            Parent {
                config: &other_env,
                ..parent
            },
            7
        ),
        original
    );
    assert_ne!(key(DOCKERFILE, &files, parent, 8), original);
}

#[test]
fn what_the_model_cannot_read_exactly_is_refused() {
    for (dockerfile, expected) in [
        ("# escape=`\nFROM a\nLABEL x=1\n", "parser directive"),
        ("FROM a\nLABEL x=$Y\n", "`$`"),
        ("FROM a\nLABEL x=\"a\\\"b\"\n", "`$` or `\\`"),
        ("FROM a\nLABEL x 1\n", "not `key=value`"),
        ("FROM a\nLABEL x=\"open\n", "does not close"),
        ("ARG B=a\nFROM $B\nLABEL x=1\n", "variable"),
        ("LABEL x=1\nFROM a\n", "before the first FROM"),
    ] {
        let error = label_steps(dockerfile).unwrap_err();
        assert!(error.contains(expected), "{dockerfile:?}: {error}");
    }
    let (model, read) = learned();
    let config = json!({"Labels": null, "OnBuild": ["RUN x"]});
    let history = base_history();
    let layers = base_layers();
    let parent = Parent {
        config: &config,
        history: &history,
        layers: &layers,
    };
    let error = predict(&model, &read, &the_build_labels(), parent).unwrap_err();
    assert!(error.contains("ONBUILD"), "{error}");
    let config = base_config();
    let parent = Parent {
        config: &config,
        ..parent
    };
    let error = predict(&model, &read, &build_labels(&[("k", "it's")]), parent).unwrap_err();
    assert!(error.contains("quoting"), "{error}");
}

/// A normalized history as the template gives it: each step's text, comment and `empty_layer`.
fn template(steps: &[(&str, bool)]) -> Vec<(String, String, bool)> {
    steps
        .iter()
        .map(|(text, empty)| match text.strip_prefix("comment:") {
            Some(comment) => (String::new(), comment.to_string(), *empty),
            None => (text.to_string(), String::new(), *empty),
        })
        .collect()
}

fn same(text: &str) -> String {
    text.to_string()
}

#[test]
fn the_steps_that_made_no_layer_follow_from_the_learned_build_and_a_relabelled_parent() {
    // An image on a parent with one layer and one label step; its own RUN made one layer.
    let parent_history = steps(&["comment:Imported from -", "/bin/sh -c #(nop)  LABEL p=old"]);
    let parent_config = json!({"Labels": {"p": "old"}, "OnBuild": null});
    let layers = base_layers();
    let parent = Parent {
        config: &parent_config,
        history: &parent_history,
        layers: &layers,
    };
    let dockerfile = "FROM example/runtime:1\nRUN make\nLABEL v=1\n";
    let read = label_steps(dockerfile).unwrap();
    let labels = build_labels(&[("imagegen.build-key", "sha256:1")]);
    let built_history = steps(&[
        "comment:Imported from -",
        "/bin/sh -c #(nop)  LABEL p=old",
        "/bin/sh -c make",
        "/bin/sh -c #(nop)  LABEL v=1",
        "/bin/sh -c #(nop)  LABEL imagegen.build-key=sha256:1",
    ]);
    let built_config = json!({"Labels": {"p": "old", "v": "1", "imagegen.build-key": "sha256:1"}, "OnBuild": null});
    let model = learn(
        &read,
        &labels,
        parent,
        &built_config,
        &built_history,
        "key".into(),
    )
    .unwrap();
    assert_eq!(model.parent_steps, 2);
    let normalized = template(&[
        ("comment:Imported from -", false),
        ("/bin/sh -c #(nop)  LABEL p=old", true),
        ("/bin/sh -c make", false),
        ("/bin/sh -c #(nop)  LABEL v=1", true),
        ("/bin/sh -c #(nop)  LABEL imagegen.build-key=sha256:1", true),
    ]);

    // The parent relabelled (two label steps now), the image's own label changed.
    let new_parent_history = steps(&[
        "comment:Imported from -",
        "/bin/sh -c #(nop)  LABEL p=new",
        "/bin/sh -c #(nop)  LABEL q=added",
    ]);
    let new_parent_config = json!({"Labels": {"p": "new", "q": "added"}, "OnBuild": null});
    let new_parent = Parent {
        config: &new_parent_config,
        history: &new_parent_history,
        ..parent
    };
    let relabelled = label_steps(&dockerfile.replace("v=1", "v=2")).unwrap();
    let (_, history) = predict(&model, &relabelled, &labels, new_parent).unwrap();
    let empty = empty_layers(&normalized, &model, &history, 3, 1, same).unwrap();
    assert_eq!(empty, vec![false, true, true, false, true, true]);

    // The parent unchanged: the template's flags throughout.
    let (_, history) = predict(&model, &relabelled, &labels, parent).unwrap();
    let empty = empty_layers(&normalized, &model, &history, 2, 1, same).unwrap();
    assert_eq!(empty, vec![false, true, false, true, true]);

    // A new parent step that made one of its layers: which one is not known.
    let layered_history = steps(&["comment:Imported from -", "/bin/sh -c apt-get install x"]);
    let two_layers = vec!["sha256:aaaa".to_string(), "sha256:bbbb".to_string()];
    let layered = Parent {
        history: &layered_history,
        layers: &two_layers,
        ..parent
    };
    let (_, history) = predict(&model, &relabelled, &labels, layered).unwrap();
    let error = empty_layers(&normalized, &model, &history, 2, 2, same).unwrap_err();
    assert!(error.contains("1 of its layers come from them"), "{error}");

    // A template whose own steps are not the model's.
    let mut other = normalized.clone();
    other[2].0 = "/bin/sh -c make other".into();
    let (_, history) = predict(&model, &relabelled, &labels, parent).unwrap();
    let error = empty_layers(&other, &model, &history, 2, 1, same).unwrap_err();
    assert!(error.contains("is not the learned build's"), "{error}");
}

#[test]
fn the_listing_key_moves_with_the_script_the_layers_and_the_config_but_not_the_labels() {
    let config = the_config();
    let layers = base_layers();
    let key = listing_key("pip freeze", &layers, &config);
    assert!(key.starts_with("sha256:"), "{key}");
    let mut relabelled = config.clone();
    relabelled["Labels"] = json!({"org.opencontainers.image.vendor": "second"});
    assert_ne!(relabelled, config, "the labels moved");
    assert_eq!(
        listing_key("pip freeze", &layers, &relabelled),
        key,
        "labels are in no file the listing reads"
    );
    let mut unlabelled = config.clone();
    unlabelled.as_object_mut().unwrap().remove("Labels");
    assert_eq!(listing_key("pip freeze", &layers, &unlabelled), key);

    let mut env = config.clone();
    env["Env"] = json!(["PATH=/opt/other/bin:/usr/bin"]);
    let mut more_layers = layers.clone();
    more_layers.push("sha256:extra".into());
    let mut other_layer = layers.clone();
    other_layer[0] = "sha256:other".into();
    for (what, moved) in [
        ("the script", listing_key("dpkg-query -W", &layers, &config)),
        ("the env", listing_key("pip freeze", &layers, &env)),
        (
            "a layer more",
            listing_key("pip freeze", &more_layers, &config),
        ),
        (
            "another layer",
            listing_key("pip freeze", &other_layer, &config),
        ),
        ("no layers", listing_key("pip freeze", &[], &config)),
    ] {
        assert_ne!(moved, key, "{what} moves the key");
    }
}
