//! Where a build fetches from: the apt hosts an image's build reaches and the mirror each is
//! rewritten to (`mirrors.*` in matrix.yaml), and the Python package indexes its packages come
//! from. Pure: the cell's OS, platform and the matrix in, values for the templates and the lock out.
//!
//! An apt rewrite is kept as the `sed -E` expression the Dockerfile runs over `/etc/apt`, built
//! here once from validated URLs, so the template prints it and cannot get the escaping wrong.

use crate::model::http_url::HttpUrl;
use crate::model::matrix::{Mirrors, TorchWheels};
pub(crate) use crate::resolve::image::{AptRewrite, PipIndexes};

/// The plain PyPI index, where torch's dependencies come from by default.
pub(crate) const PYPI_SIMPLE: &str = "https://pypi.org/simple";

/// An apt host a build reaches, and the mirror key that covers it.
struct AptHost {
    key: &'static str,
    /// What the sources say, for the comment.
    host: &'static str,
    /// Extended regular expression of the URL prefix (scheme, host and archive path).
    pattern: &'static str,
    /// Whether the archive path must end there (followed by `/`, white space or the line's
    /// end), so `deb.debian.org/debian` does not match `deb.debian.org/debian-security`.
    whole_path: bool,
}

/// The apt hosts a build on `os` for `arch` reaches through its own sources, plus NVIDIA's
/// repository where the base configures it (nvidia/cuda bases): the hosts in the order they are
/// rewritten (security archives before the archives whose path they extend).
fn apt_hosts(os: &str, arch: &str, nvidia_repository: bool) -> Vec<AptHost> {
    let mut hosts = Vec::new();
    if os.starts_with("debian") {
        hosts.push(AptHost {
            key: "debian_security",
            host: "deb.debian.org/debian-security",
            pattern: r"https?://deb\.debian\.org/debian-security",
            whole_path: true,
        });
        hosts.push(AptHost {
            key: "debian_security",
            host: "security.debian.org/debian-security",
            pattern: r"https?://security\.debian\.org/debian-security",
            whole_path: true,
        });
        hosts.push(AptHost {
            key: "debian",
            host: "deb.debian.org/debian",
            pattern: r"https?://deb\.debian\.org/debian",
            whole_path: true,
        });
    } else if arch == "arm64" {
        hosts.push(AptHost {
            key: "apt_ports",
            host: "ports.ubuntu.com/ubuntu-ports",
            pattern: r"https?://ports\.ubuntu\.com/ubuntu-ports",
            whole_path: true,
        });
    } else {
        hosts.push(AptHost {
            key: "apt",
            host: "archive.ubuntu.com/ubuntu",
            pattern: r"https?://archive\.ubuntu\.com/ubuntu",
            whole_path: true,
        });
        hosts.push(AptHost {
            key: "apt",
            host: "security.ubuntu.com/ubuntu",
            pattern: r"https?://security\.ubuntu\.com/ubuntu",
            whole_path: true,
        });
    }
    if nvidia_repository {
        hosts.push(AptHost {
            key: "nvidia_apt",
            host: "developer.download.nvidia.com/compute/cuda/repos",
            pattern: r"https?://developer\.download\.nvidia\.com/compute/cuda/repos",
            whole_path: false,
        });
    }
    hosts
}

fn mirror_of<'m>(mirrors: &'m Mirrors, key: &str) -> Option<&'m HttpUrl> {
    match key {
        "apt" => mirrors.apt.as_ref(),
        "apt_ports" => mirrors.apt_ports.as_ref(),
        "debian" => mirrors.debian.as_ref(),
        "debian_security" => mirrors.debian_security.as_ref(),
        "nvidia_apt" => mirrors.nvidia_apt.as_ref(),
        _ => None,
    }
}

/// The rewrites an image's build runs over its apt sources: one per host it reaches that has a
/// mirror. `nvidia_repository`: the base configures NVIDIA's repository (nvidia/cuda).
pub(crate) fn apt_rewrites(
    os: &str,
    arch: &str,
    nvidia_repository: bool,
    mirrors: &Mirrors,
) -> Vec<AptRewrite> {
    apt_hosts(os, arch, nvidia_repository)
        .into_iter()
        .filter_map(|host| {
            let mirror = mirror_of(mirrors, host.key)?.trim_end_matches('/');
            // In a sed replacement `&` and `\` are special; matrix validation already refuses
            // `#` (the delimiter), quotes and white space in apt mirrors.
            let replacement = mirror.replace('\\', r"\\").replace('&', r"\&");
            let expression = if host.whole_path {
                format!("s#{}/?([[:space:]]|$)#{replacement}/\\1#g", host.pattern)
            } else {
                format!("s#{}#{replacement}#g", host.pattern)
            };
            Some(AptRewrite {
                host: host.host.to_string(),
                key: host.key.to_string(),
                expression,
            })
        })
        .collect()
}

/// The `mirrors.*` keys of apt hosts an image's build reaches that no mirror covers.
pub(crate) fn uncovered_apt_hosts(
    os: &str,
    arch: &str,
    nvidia_repository: bool,
    mirrors: &Mirrors,
) -> Vec<(&'static str, &'static str)> {
    apt_hosts(os, arch, nvidia_repository)
        .into_iter()
        .filter(|host| mirror_of(mirrors, host.key).is_none())
        .map(|host| (host.key, host.host))
        .collect()
}

/// Whether the matrix names any apt mirror: then every apt host should have one.
pub(crate) fn any_apt_mirror(mirrors: &Mirrors) -> bool {
    [
        "apt",
        "apt_ports",
        "debian",
        "debian_security",
        "nvidia_apt",
    ]
    .iter()
    .any(|key| mirror_of(mirrors, key).is_some())
}

/// The indexes of an image whose torch wheels come from `wheel_index` (PyTorch's index of its
/// CUDA, or the plain index with `torch_wheels: pypi`).
pub(crate) fn pip_indexes(
    torch_wheels: TorchWheels,
    wheel_index: &str,
    mirrors: &Mirrors,
) -> PipIndexes {
    match torch_wheels {
        TorchWheels::Pypi => PipIndexes {
            index_url: wheel_index.to_string(),
            extra_index_url: None,
        },
        // PyTorch's index carries torch's dependencies too; a plain index beside it only when
        // the matrix names one (as before locks, so the same images resolve the same way).
        TorchWheels::Pytorch => PipIndexes {
            index_url: wheel_index.to_string(),
            extra_index_url: mirrors.pip_index.as_ref().map(HttpUrl::to_string),
        },
    }
}

/// The plain index: `mirrors.pip_index`, else PyPI.
pub(crate) fn plain_index(mirrors: &Mirrors) -> String {
    mirrors
        .pip_index
        .as_ref()
        .map_or_else(|| PYPI_SIMPLE.to_string(), HttpUrl::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirrors() -> Mirrors {
        Mirrors {
            apt: Some("http://apt.example.com/ubuntu/".into()),
            apt_ports: Some("http://apt.example.com/ubuntu-ports".into()),
            debian: Some("http://apt.example.com/debian".into()),
            debian_security: Some("http://apt.example.com/debian-security".into()),
            nvidia_apt: Some("https://apt.example.com/nvidia".into()),
            ..Mirrors::default()
        }
    }

    /// Runs GNU sed with the expressions over `sources`, as the Dockerfile does.
    fn rewrite(rewrites: &[AptRewrite], sources: &str) -> String {
        let mut command = std::process::Command::new("sed");
        command.arg("-E");
        for rewrite in rewrites {
            command.arg("-e").arg(&rewrite.expression);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sed");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sources.as_bytes())
            .unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    }

    #[test]
    fn ubuntu_amd64_rewrites_archive_security_and_nvidia() {
        let rewrites = apt_rewrites("ubuntu24.04", "amd64", true, &mirrors());
        let keys: Vec<&str> = rewrites.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["apt", "apt", "nvidia_apt"]);
        let sources = "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\nSuites: noble noble-updates\n\nURIs: http://security.ubuntu.com/ubuntu/\n\ndeb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /\ndeb http://archive.ubuntu.com/ubuntu jammy main\n";
        let rewritten = rewrite(&rewrites, sources);
        assert_eq!(
            rewritten,
            "Types: deb\nURIs: http://apt.example.com/ubuntu/\nSuites: noble noble-updates\n\nURIs: http://apt.example.com/ubuntu/\n\ndeb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] https://apt.example.com/nvidia/ubuntu2404/x86_64/ /\ndeb http://apt.example.com/ubuntu/ jammy main\n"
        );
    }

    #[test]
    fn ubuntu_arm64_rewrites_the_ports_archive() {
        let rewrites = apt_rewrites("ubuntu22.04", "arm64", true, &mirrors());
        let rewritten = rewrite(
            &rewrites,
            "deb http://ports.ubuntu.com/ubuntu-ports/ jammy-security main\ndeb https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/ /\n",
        );
        assert_eq!(
            rewritten,
            "deb http://apt.example.com/ubuntu-ports/ jammy-security main\ndeb https://apt.example.com/nvidia/ubuntu2204/sbsa/ /\n"
        );
    }

    #[test]
    fn debian_keeps_the_security_archive_apart() {
        let rewrites = apt_rewrites("debian12", "amd64", false, &mirrors());
        let rewritten = rewrite(
            &rewrites,
            "URIs: http://deb.debian.org/debian\nURIs: http://deb.debian.org/debian-security\ndeb http://deb.debian.org/debian bookworm main\ndeb http://security.debian.org/debian-security bookworm-security main\n",
        );
        assert_eq!(
            rewritten,
            "URIs: http://apt.example.com/debian/\nURIs: http://apt.example.com/debian-security/\ndeb http://apt.example.com/debian/ bookworm main\ndeb http://apt.example.com/debian-security/ bookworm-security main\n"
        );
        // Without a security mirror the archive's rewrite leaves the security archive alone.
        let only_archive = Mirrors {
            debian: Some("http://m.example.com/debian".into()),
            ..Mirrors::default()
        };
        let rewritten = rewrite(
            &apt_rewrites("debian12", "amd64", false, &only_archive),
            "URIs: http://deb.debian.org/debian-security\n",
        );
        assert_eq!(rewritten, "URIs: http://deb.debian.org/debian-security\n");
        assert_eq!(
            uncovered_apt_hosts("debian12", "amd64", false, &only_archive),
            vec![
                ("debian_security", "deb.debian.org/debian-security"),
                ("debian_security", "security.debian.org/debian-security")
            ]
        );
    }

    #[test]
    fn sed_special_characters_in_a_mirror_are_escaped() {
        let odd = Mirrors {
            apt: Some(HttpUrl::unchecked_for_tests(
                "http://m.example.com/ubuntu?a=1&b=2",
            )),
            ..Mirrors::default()
        };
        let rewritten = rewrite(
            &apt_rewrites("ubuntu24.04", "amd64", false, &odd),
            "deb http://archive.ubuntu.com/ubuntu noble main\n",
        );
        assert_eq!(
            rewritten,
            "deb http://m.example.com/ubuntu?a=1&b=2/ noble main\n"
        );
    }

    #[test]
    fn indexes_per_wheel_source() {
        let plain = Mirrors {
            pip_index: Some("https://proxy.example.com/simple".into()),
            ..Mirrors::default()
        };
        assert_eq!(
            pip_indexes(TorchWheels::Pypi, &plain_index(&plain), &plain).all(),
            ["https://proxy.example.com/simple"]
        );
        assert_eq!(
            pip_indexes(
                TorchWheels::Pytorch,
                "https://download.pytorch.org/whl/cu126",
                &plain
            )
            .all(),
            [
                "https://download.pytorch.org/whl/cu126",
                "https://proxy.example.com/simple"
            ]
        );
        assert_eq!(plain_index(&Mirrors::default()), PYPI_SIMPLE);
    }
}
