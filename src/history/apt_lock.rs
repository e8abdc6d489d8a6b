//! `images/<image>/apt.lock`: the versions of the matrix's apt extras (`apt:`) and of the packages
//! apt installed with them, as dpkg recorded them in the image after its last build. It is an
//! output of `imagegen build`, not an input: it is in no fingerprint and no build context, so
//! writing it never makes an image look changed. What it is for: the next build of the image
//! says which of those packages moved (the Debian/Ubuntu archive serves newer versions than last
//! time), in its output and log, and writes the file again.
//!
//! Which packages count as "installed with the extras" is read from the image alone: the extras'
//! `Pre-Depends`/`Depends` (and what `Provides` a virtual name), followed only through packages
//! apt marked as automatically installed (`/var/lib/apt/extended_states`). A dependency the base
//! image or the template installed on purpose is not the extras' to record. Pure: text in, values
//! out; the Docker builder runs [`APT_DEPENDS`] and the build command reads and writes the file.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// The file beside an image's Dockerfile.
pub(crate) const APT_LOCK_FILE: &str = "apt.lock";

/// The marker before [`APT_DEPENDS`]'s output in a package listing.
pub(crate) const APT_DEPENDS_MARKER: &str = "--- imagegen: apt dependencies ---";
/// The marker between dpkg's package fields and apt's auto-installed marks.
const AUTO_MARKER: &str = "--- imagegen: apt auto marks ---";

/// A shell fragment (appended to the package listing of an image with apt extras) that prints
/// each installed package's name, version, pre-dependencies, dependencies and provided names,
/// then apt's record of which packages it installed automatically.
pub(crate) const APT_DEPENDS: &str = "echo '--- imagegen: apt dependencies ---'; dpkg-query -W -f='${db:Status-Abbrev}\\t${Package}\\t${Version}\\t${Pre-Depends}, ${Depends}\\t${Provides}\\n'; echo '--- imagegen: apt auto marks ---'; cat /var/lib/apt/extended_states 2>/dev/null || true";

const HEADER: &str = "# apt.lock of this image: written by `imagegen build` after each build, not an input of it (in no\n# fingerprint or build context). The matrix's apt extras and the packages apt installed with\n# them, as `name=version` at the versions dpkg recorded in the image, so that the next build can\n# say what moved in the archive since. Edit the matrix, not this file.\n";

/// The packages of an `apt.lock`: name to version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AptLock {
    pub(crate) packages: BTreeMap<String, String>,
}

impl AptLock {
    /// Reads an `apt.lock`: `#` comments and blank lines, then `name=version` lines; an error
    /// names the line.
    pub(crate) fn parse(text: &str) -> Result<AptLock, String> {
        let mut packages = BTreeMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, version) = line
                .split_once('=')
                .filter(|(name, version)| !name.is_empty() && !version.is_empty())
                .ok_or_else(|| format!("{}: {line:?} is not `name=version`", index + 1))?;
            if packages
                .insert(name.to_string(), version.to_string())
                .is_some()
            {
                return Err(format!("{}: {name} is listed twice", index + 1));
            }
        }
        Ok(AptLock { packages })
    }

    /// The file's text: the header, then sorted `name=version` lines.
    pub(crate) fn to_text(&self) -> String {
        let mut text = String::from(HEADER);
        for (name, version) in &self.packages {
            text.push_str(&format!("{name}={version}\n"));
        }
        text
    }
}

/// How one package of an `apt.lock` differs from the image just built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AptMove {
    /// The same package at another version.
    Version {
        name: String,
        before: String,
        now: String,
    },
    /// Installed now, not in the last build's `apt.lock`.
    Added { name: String, now: String },
    /// In the last build's `apt.lock`, not installed with the extras now.
    Gone { name: String, before: String },
}

impl fmt::Display for AptMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AptMove::Version { name, before, now } => write!(
                f,
                "apt: {name} {before} -> {now} (the archive moved since the last build)"
            ),
            AptMove::Added { name, now } => {
                write!(f, "apt: {name} {now} is new (not in the last build's apt.lock)")
            }
            AptMove::Gone { name, before } => write!(
                f,
                "apt: {name} {before} is gone (in the last build's apt.lock, not installed with the extras now)"
            ),
        }
    }
}

/// What moved from `before` (the last build's `apt.lock`) to `now`, by package name.
pub(crate) fn apt_moves(before: &AptLock, now: &AptLock) -> Vec<AptMove> {
    let names: BTreeSet<&String> = before.packages.keys().chain(now.packages.keys()).collect();
    names
        .into_iter()
        .filter_map(
            |name| match (before.packages.get(name), now.packages.get(name)) {
                (Some(old), Some(new)) if old != new => Some(AptMove::Version {
                    name: name.clone(),
                    before: old.clone(),
                    now: new.clone(),
                }),
                (None, Some(new)) => Some(AptMove::Added {
                    name: name.clone(),
                    now: new.clone(),
                }),
                (Some(old), None) => Some(AptMove::Gone {
                    name: name.clone(),
                    before: old.clone(),
                }),
                _ => None,
            },
        )
        .collect()
}

/// One installed package as [`APT_DEPENDS`] lists it.
struct Installed<'a> {
    version: &'a str,
    /// Package names it depends on (every alternative of a `a | b` group).
    depends: Vec<&'a str>,
}

/// The names in a `Depends`/`Provides` field: alternatives split, versions and `:any` dropped.
fn field_names(field: &str) -> impl Iterator<Item = &str> {
    field
        .split([',', '|'])
        .filter_map(|item| item.split_whitespace().next())
        .map(|name| name.split(':').next().unwrap_or(name))
        .filter(|name| !name.is_empty())
}

/// The packages apt installed for `extras` (matrix `apt:` items, `name` or `name=version`): each
/// extra that is installed, and what the extras depend on, directly or through each other, that
/// apt marked automatically installed. `output` is what [`APT_DEPENDS`] printed (after its
/// marker). Without apt's marks (no `extended_states`), only the extras.
pub(crate) fn installed_with_extras(extras: &[String], output: &str) -> AptLock {
    let (dpkg, marks) = output.split_once(AUTO_MARKER).unwrap_or((output, ""));
    let mut installed: BTreeMap<&str, Installed> = BTreeMap::new();
    let mut providers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in dpkg.lines() {
        let fields: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        let [status, name, version, depends, provides] = fields[..] else {
            continue;
        };
        // `ii`: wanted and installed; a removed package's left configuration (`rc`) is not.
        if !status.trim().starts_with("ii") || name.is_empty() || version.is_empty() {
            continue;
        }
        installed.insert(
            name,
            Installed {
                version,
                depends: field_names(depends).collect(),
            },
        );
        for provided in field_names(provides) {
            providers.entry(provided).or_default().push(name);
        }
    }
    let mut automatic = BTreeSet::new();
    for stanza in marks.split("\n\n") {
        let field = |key: &str| {
            stanza
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .map(str::trim)
        };
        if let (Some(name), Some("1")) = (field("Package:"), field("Auto-Installed:")) {
            automatic.insert(name);
        }
    }
    let mut found: BTreeSet<&str> = BTreeSet::new();
    let mut queue: VecDeque<&str> = VecDeque::new();
    for extra in extras {
        let name = extra.split('=').next().unwrap_or(extra);
        if let Some((name, _)) = installed.get_key_value(name) {
            if found.insert(name) {
                queue.push_back(name);
            }
        }
    }
    while let Some(name) = queue.pop_front() {
        for dependency in &installed[name].depends {
            let candidates = std::iter::once(*dependency)
                .chain(providers.get(dependency).into_iter().flatten().copied());
            for candidate in candidates {
                if installed.contains_key(candidate)
                    && automatic.contains(candidate)
                    && found.insert(candidate)
                {
                    queue.push_back(candidate);
                }
            }
        }
    }
    AptLock {
        packages: found
            .into_iter()
            .map(|name| (name.to_string(), installed[name].version.to_string()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(lines: &[(&str, &str)]) -> AptLock {
        AptLock {
            packages: lines
                .iter()
                .map(|(name, version)| (name.to_string(), version.to_string()))
                .collect(),
        }
    }

    #[test]
    fn an_apt_lock_is_written_sorted_and_read_back() {
        let written = lock(&[("libnl-3-200", "3.7.0-0.2+b1"), ("htop", "3.2.2-2")]);
        let text = written.to_text();
        assert!(text.starts_with("# apt.lock of this image: written by `imagegen build`"));
        assert!(
            text.ends_with("\nhtop=3.2.2-2\nlibnl-3-200=3.7.0-0.2+b1\n"),
            "{text}"
        );
        assert_eq!(AptLock::parse(&text), Ok(written));
        // An epoch's colon and a version's `=`-free text survive; blank lines are fine.
        assert_eq!(
            AptLock::parse("\ngit=1:2.39.5-0+deb12u2\n")
                .unwrap()
                .packages["git"],
            "1:2.39.5-0+deb12u2"
        );
        assert_eq!(
            AptLock::parse("# c\nhtop 3.2.2-2\n"),
            Err("2: \"htop 3.2.2-2\" is not `name=version`".to_string())
        );
        assert_eq!(
            AptLock::parse("htop=1\nhtop=2\n"),
            Err("2: htop is listed twice".to_string())
        );
        assert_eq!(
            AptLock::parse("=1\n"),
            Err("1: \"=1\" is not `name=version`".to_string())
        );
    }

    #[test]
    fn what_moved_since_the_last_build_is_said_per_package() {
        let before = lock(&[("htop", "3.2.2-2"), ("libnl-3-200", "3.7.0"), ("old", "1")]);
        let now = lock(&[("htop", "3.2.2-3"), ("libnl-3-200", "3.7.0"), ("new", "2")]);
        let said: Vec<String> = apt_moves(&before, &now)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            said,
            [
                "apt: htop 3.2.2-2 -> 3.2.2-3 (the archive moved since the last build)",
                "apt: new 2 is new (not in the last build's apt.lock)",
                "apt: old 1 is gone (in the last build's apt.lock, not installed with the extras now)",
            ]
        );
        assert!(apt_moves(&now, &now).is_empty());
    }

    #[test]
    fn the_extras_and_what_apt_installed_for_them_are_found() {
        // htop needs libnl (auto: pulled in by htop) and libc6 (the base's, not auto); libnl
        // needs libnl-genl through a virtual name; git-man is auto but only python3 needs it;
        // a removed package's configuration is not installed.
        let output = "\
ii \thtop\t3.2.2-2\t, libc6 (>= 2.34), libnl-3-200 (>= 3.2.7) | libnl-alt\t
ii \tlibc6\t2.36-9+deb12u9\t, libgcc-s1\t
ii \tlibnl-3-200\t3.7.0-0.2+b1\t, libc6, nl-genl:any\t
ii \tlibnl-genl-3-200\t3.7.0-0.2+b1\t, libnl-3-200 (= 3.7.0-0.2+b1)\tnl-genl
ii \tpython3\t3.11.2-1+b1\t, git-man\t
ii \tgit-man\t1:2.39.5-0+deb12u2\t, \t
rc \tlibnl-alt\t1.0\t, \t
--- imagegen: apt auto marks ---
Package: libnl-3-200
Architecture: amd64
Auto-Installed: 1

Package: libnl-genl-3-200
Architecture: amd64
Auto-Installed: 1

Package: git-man
Architecture: amd64
Auto-Installed: 1

Package: libnl-alt
Architecture: amd64
Auto-Installed: 1
";
        let found = installed_with_extras(&["htop=3.2.2-2".to_string()], output);
        assert_eq!(
            found,
            lock(&[
                ("htop", "3.2.2-2"),
                ("libnl-3-200", "3.7.0-0.2+b1"),
                ("libnl-genl-3-200", "3.7.0-0.2+b1"),
            ])
        );
        // Without apt's marks: only the extras; an extra that is not installed: nothing.
        let dpkg_only = output.split(AUTO_MARKER).next().unwrap();
        assert_eq!(
            installed_with_extras(&["htop".to_string(), "absent".to_string()], dpkg_only),
            lock(&[("htop", "3.2.2-2")])
        );
    }
}
