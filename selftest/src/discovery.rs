//! Finding the CUDA user libraries where images put them, before anything is loaded.
//!
//! cudarc opens libraries by bare name through the default loader path only, and never tries
//! `libnccl.so.2`. This module searches, in order: `LD_LIBRARY_PATH`, the loader cache
//! (`ldconfig -p`), the usual fixed folders (`/usr/local/cuda/lib64`, the driver's folders), and
//! pip's `site-packages/nvidia/*/lib` of every Python it can see. It then plans a private folder
//! of symbolic links (`libcublas.so`, `libnccl.so`, `libcuda.so` → the chosen files) that the
//! re-executed process puts first on `LD_LIBRARY_PATH` (see `loader.rs`). It does no loading.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One library the self-test may need, with the file names accepted, best first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibrarySpec {
    /// Short key used in reports and in the link folder ("cuda", "cublas", "nccl", …).
    pub key: String,
    /// What it is, for messages ("the NVIDIA driver", "cuBLAS").
    pub description: String,
    pub file_names: Vec<String>,
    /// The unversioned name cudarc tries first; a link of this name goes in the link folder.
    pub link_name: Option<String>,
}

/// The libraries of a binary built for CUDA major `cuda_major`.
pub fn library_specs(cuda_major: &str) -> Vec<LibrarySpec> {
    let spec = |key: &str, description: &str, names: Vec<String>, link: Option<&str>| LibrarySpec {
        key: key.to_string(),
        description: description.to_string(),
        file_names: names,
        link_name: link.map(str::to_string),
    };
    vec![
        spec(
            "cuda",
            "the NVIDIA driver library",
            vec!["libcuda.so.1".to_string()],
            Some("libcuda.so"),
        ),
        spec(
            "nvml",
            "NVML (the driver's management library)",
            vec!["libnvidia-ml.so.1".to_string()],
            None,
        ),
        spec(
            "cublas",
            "cuBLAS",
            vec![format!("libcublas.so.{cuda_major}")],
            Some("libcublas.so"),
        ),
        spec(
            "cublasLt",
            "cuBLASLt (loaded by cuBLAS)",
            vec![format!("libcublasLt.so.{cuda_major}")],
            None,
        ),
        spec(
            "nccl",
            "NCCL",
            vec!["libnccl.so.2".to_string(), "libnccl.so".to_string()],
            Some("libnccl.so"),
        ),
    ]
}

/// Where a folder or file came from, so messages can say where the search looked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    LdLibraryPath,
    LoaderCache,
    FixedFolder,
    PythonSitePackages,
}

impl Origin {
    pub fn describe(&self) -> &'static str {
        match self {
            Origin::LdLibraryPath => "LD_LIBRARY_PATH",
            Origin::LoaderCache => "loader cache",
            Origin::FixedFolder => "fixed folder",
            Origin::PythonSitePackages => "pip site-packages",
        }
    }
}

/// A folder to search and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchFolder {
    pub path: PathBuf,
    pub origin: Origin,
}

/// Everything the search looks at, gathered from the system (or built by tests).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchPlaces {
    pub folders: Vec<SearchFolder>,
    /// Loader cache entries: (file name, full path), from `ldconfig -p`.
    pub cache_entries: Vec<(String, PathBuf)>,
}

/// One library as found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundLibrary {
    pub key: String,
    pub file_name: String,
    /// The path found (may be a symbolic link such as `libcublas.so.12`).
    pub path: PathBuf,
    /// The path with links followed (`libcublas.so.12.6.4.1`), which names the full version.
    pub resolved_path: PathBuf,
    pub origin: Origin,
    /// Every other copy found, in search order (for the report: a second CUDA stack shows here).
    pub alternatives: Vec<PathBuf>,
}

/// The outcome of the search over all specs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    pub found: Vec<FoundLibrary>,
    pub missing: Vec<LibrarySpec>,
    pub places: SearchPlaces,
}

impl Discovery {
    pub fn get(&self, key: &str) -> Option<&FoundLibrary> {
        self.found.iter().find(|library| library.key == key)
    }

    /// One line naming every place the search looked, for "not found" messages.
    pub fn places_looked(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.places.cache_entries.is_empty() {
            parts.push(format!(
                "the loader cache ({} entries from ldconfig -p)",
                self.places.cache_entries.len()
            ));
        } else {
            parts.push("the loader cache (ldconfig -p gave nothing)".to_string());
        }
        for folder in &self.places.folders {
            parts.push(format!(
                "{} ({})",
                folder.path.display(),
                folder.origin.describe()
            ));
        }
        parts.join(", ")
    }
}

/// The `ldconfig -p` tag of this build's architecture (`libc6,x86-64` or `libc6,AArch64`).
const LOADER_CACHE_ARCH_TAG: &str = if cfg!(target_arch = "aarch64") {
    "AArch64"
} else {
    "x86-64"
};

/// The fixed library folders of this build's architecture (SBSA images use `sbsa-linux` and
/// `aarch64-linux-gnu`).
#[cfg(target_arch = "aarch64")]
const ARCH_FOLDERS: [&str; 3] = [
    "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/aarch64-linux-gnu",
];
#[cfg(not(target_arch = "aarch64"))]
const ARCH_FOLDERS: [&str; 3] = [
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
];

/// Parses `ldconfig -p` output into (file name, path) pairs, keeping entries of this build's
/// architecture and entries without an architecture tag.
pub fn parse_loader_cache(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter_map(|line| {
            let (left, path) = line.split_once(" => ")?;
            let left = left.trim();
            let name = left.split_whitespace().next()?;
            let tags = left.get(name.len()..).unwrap_or("").trim();
            let is_other_architecture =
                tags.contains("libc6") && !tags.contains(LOADER_CACHE_ARCH_TAG);
            if is_other_architecture {
                return None;
            }
            Some((name.to_string(), PathBuf::from(path.trim())))
        })
        .collect()
}

/// The `lib` folders of pip's NVIDIA wheels under one site-packages folder:
/// `nvidia/<package>/lib` (cuBLAS, NCCL, …) and `nvidia/cu13/lib` alike, sorted by name.
pub fn nvidia_wheel_folders(site_packages: &Path) -> Vec<PathBuf> {
    let nvidia = site_packages.join("nvidia");
    let Ok(entries) = std::fs::read_dir(&nvidia) else {
        return Vec::new();
    };
    let mut folders: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("lib"))
        .filter(|path| path.is_dir())
        .collect();
    folders.sort();
    folders
}

/// Finds each spec: the folders in order, with the loader cache consulted just before the first
/// fixed folder (the dynamic loader's own order: `LD_LIBRARY_PATH`, cache, default folders), and
/// the spec's file names best first (a `libnccl.so.2` anywhere beats a `libnccl.so`).
pub fn discover(specs: &[LibrarySpec], places: SearchPlaces) -> Discovery {
    let mut discovery = Discovery {
        places,
        ..Discovery::default()
    };
    for spec in specs {
        let mut candidates: Vec<(PathBuf, Origin)> = Vec::new();
        for file_name in &spec.file_names {
            let mut ordered: Vec<(PathBuf, Origin)> = Vec::new();
            let mut cache_done = false;
            for folder in &discovery.places.folders {
                if folder.origin == Origin::FixedFolder && !cache_done {
                    cache_done = true;
                    ordered.extend(cache_hits(&discovery.places, file_name));
                }
                ordered.push((folder.path.join(file_name), folder.origin.clone()));
            }
            if !cache_done {
                ordered.extend(cache_hits(&discovery.places, file_name));
            }
            candidates.extend(ordered.into_iter().filter(|(path, _)| path.is_file()));
        }
        // The same file may be reached through several places; keep the first of each.
        let mut seen_resolved: Vec<PathBuf> = Vec::new();
        let mut unique: Vec<(PathBuf, PathBuf, Origin)> = Vec::new();
        for (path, origin) in candidates {
            let resolved = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if !seen_resolved.contains(&resolved) {
                seen_resolved.push(resolved.clone());
                unique.push((path, resolved, origin));
            }
        }
        match unique.first() {
            Some((path, resolved, origin)) => discovery.found.push(FoundLibrary {
                key: spec.key.clone(),
                file_name: path
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                path: path.clone(),
                resolved_path: resolved.clone(),
                origin: origin.clone(),
                alternatives: unique.iter().skip(1).map(|(p, _, _)| p.clone()).collect(),
            }),
            None => discovery.missing.push(spec.clone()),
        }
    }
    discovery
}

fn cache_hits(places: &SearchPlaces, file_name: &str) -> Vec<(PathBuf, Origin)> {
    places
        .cache_entries
        .iter()
        .filter(|(name, _)| name == file_name)
        .map(|(_, path)| (path.clone(), Origin::LoaderCache))
        .collect()
}

/// What the re-executed process needs: the link folder's links and the folders to put on
/// `LD_LIBRARY_PATH` after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderPlan {
    /// (link name, target) pairs to create in the private link folder.
    pub links: Vec<(String, PathBuf)>,
    /// Folders of the chosen libraries, in order, without duplicates.
    pub folders: Vec<PathBuf>,
}

/// Plans the links and folders for the libraries found. Folders of libraries found through the
/// loader cache are left out: the loader finds those already, and adding a system folder first
/// could shadow another library the process needs.
pub fn plan_loader(discovery: &Discovery, specs: &[LibrarySpec]) -> LoaderPlan {
    let mut plan = LoaderPlan {
        links: Vec::new(),
        folders: Vec::new(),
    };
    for library in &discovery.found {
        let spec = specs.iter().find(|spec| spec.key == library.key);
        if let Some(link_name) = spec.and_then(|spec| spec.link_name.as_ref()) {
            if *link_name != library.file_name {
                plan.links.push((link_name.clone(), library.path.clone()));
            }
        }
        if library.origin != Origin::LoaderCache {
            if let Some(folder) = library.path.parent() {
                if !plan.folders.iter().any(|known| known == folder) {
                    plan.folders.push(folder.to_path_buf());
                }
            }
        }
    }
    plan
}

/// Joins the new `LD_LIBRARY_PATH`: link folder, planned folders, then the original entries.
pub fn joined_library_path(
    link_folder: Option<&Path>,
    plan: &LoaderPlan,
    original: Option<&str>,
) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut push = |entry: String| {
        if !entry.is_empty() && !entries.contains(&entry) {
            entries.push(entry);
        }
    };
    if let Some(folder) = link_folder {
        push(folder.display().to_string());
    }
    for folder in &plan.folders {
        push(folder.display().to_string());
    }
    for entry in original.unwrap_or("").split(':') {
        push(entry.to_string());
    }
    entries.join(":")
}

/// The folders searched on a real system, in order, given the environment's
/// `LD_LIBRARY_PATH` and the site-packages folders of the Pythons found.
/// With `prefer_pip`, pip's wheel folders come right after `LD_LIBRARY_PATH`, before the loader
/// cache and the fixed folders: the libraries torch itself uses.
pub fn system_places(
    ld_library_path: Option<&str>,
    loader_cache_text: Option<&str>,
    site_packages: &[PathBuf],
    prefer_pip: bool,
) -> SearchPlaces {
    let mut places = SearchPlaces::default();
    let mut add = |path: PathBuf, origin: Origin| {
        if !places.folders.iter().any(|folder| folder.path == path) {
            places.folders.push(SearchFolder { path, origin });
        }
    };
    for entry in ld_library_path.unwrap_or("").split(':') {
        if !entry.is_empty() {
            add(PathBuf::from(entry), Origin::LdLibraryPath);
        }
    }
    let wheel_folders: Vec<PathBuf> = site_packages
        .iter()
        .flat_map(|site| nvidia_wheel_folders(site))
        .collect();
    if prefer_pip {
        for folder in &wheel_folders {
            add(folder.clone(), Origin::PythonSitePackages);
        }
    }
    let [cuda_targets, usr_lib_arch, lib_arch] = ARCH_FOLDERS;
    for fixed in [
        "/usr/local/cuda/lib64",
        cuda_targets,
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
        usr_lib_arch,
        lib_arch,
        "/usr/lib64",
        "/usr/lib/wsl/lib",
    ] {
        add(PathBuf::from(fixed), Origin::FixedFolder);
    }
    for folder in wheel_folders {
        add(folder, Origin::PythonSitePackages);
    }
    places.cache_entries = loader_cache_text
        .map(parse_loader_cache)
        .unwrap_or_default();
    places
}

/// Site-packages folders to search: those the given Python interpreters report, then the
/// usual layouts (system, /usr/local, conda, virtual environments under /opt and $VIRTUAL_ENV).
pub fn site_packages_candidates(
    reported: &[PathBuf],
    environment_roots: &[PathBuf],
) -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = Vec::new();
    let mut push = |path: PathBuf| {
        if path.is_dir() && !folders.contains(&path) {
            folders.push(path);
        }
    };
    for path in reported {
        push(path.clone());
    }
    let mut prefixes: Vec<PathBuf> = environment_roots.to_vec();
    for root in ["/usr", "/usr/local", "/opt/conda"] {
        prefixes.push(PathBuf::from(root));
    }
    if let Ok(entries) = std::fs::read_dir("/opt") {
        let mut venvs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join(".venv"))
            .filter(|path| path.is_dir())
            .collect();
        venvs.sort();
        prefixes.extend(venvs);
    }
    for prefix in prefixes {
        push(prefix.join("lib/python3/dist-packages"));
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("python3"))
            })
            .collect();
        pythons.sort();
        for python in pythons {
            push(python.join("site-packages"));
            push(python.join("dist-packages"));
        }
    }
    folders
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn touch(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"not really a library").unwrap();
    }

    fn folder(path: &Path, origin: Origin) -> SearchFolder {
        SearchFolder {
            path: path.to_path_buf(),
            origin,
        }
    }

    #[test]
    fn loader_cache_lines_are_parsed() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n\
            \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n\
            Cache generated by: ldconfig (GNU libc) stable release version 2.35\n";
        let entries = parse_loader_cache(text);
        assert_eq!(
            entries,
            vec![
                (
                    "libnccl.so.2".to_string(),
                    PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")
                ),
                (
                    "libcuda.so.1".to_string(),
                    PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
                ),
            ]
        );
    }

    #[test]
    fn pip_wheel_layout_is_found_including_cu13_and_nccl_so_2_only() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("venv/lib/python3.12/site-packages");
        // A cu13 torch wheel layout: cuBLAS under nvidia/cu13/lib, NCCL with only libnccl.so.2.
        touch(&site.join("nvidia/cu13/lib/libcublas.so.13"));
        touch(&site.join("nvidia/cu13/lib/libcublasLt.so.13"));
        touch(&site.join("nvidia/nccl/lib/libnccl.so.2"));
        touch(&site.join("nvidia/cudnn/lib/libcudnn.so.9"));
        fs::create_dir_all(site.join("nvidia/not_a_lib_package")).unwrap();
        let driver = root.path().join("driver");
        touch(&driver.join("libcuda.so.1"));

        let folders = nvidia_wheel_folders(&site);
        assert_eq!(
            folders,
            vec![
                site.join("nvidia/cu13/lib"),
                site.join("nvidia/cudnn/lib"),
                site.join("nvidia/nccl/lib")
            ]
        );
        let mut places = SearchPlaces::default();
        places.folders.push(folder(&driver, Origin::FixedFolder));
        for wheel in folders {
            places
                .folders
                .push(folder(&wheel, Origin::PythonSitePackages));
        }
        let specs = library_specs("13");
        let discovery = discover(&specs, places);
        assert_eq!(
            discovery.get("cublas").unwrap().path,
            site.join("nvidia/cu13/lib/libcublas.so.13")
        );
        assert_eq!(
            discovery.get("nccl").unwrap().path,
            site.join("nvidia/nccl/lib/libnccl.so.2")
        );
        assert_eq!(
            discovery.get("nccl").unwrap().origin,
            Origin::PythonSitePackages
        );
        assert_eq!(discovery.get("cuda").unwrap().origin, Origin::FixedFolder);
        assert_eq!(
            discovery
                .missing
                .iter()
                .map(|spec| spec.key.as_str())
                .collect::<Vec<_>>(),
            vec!["nvml"]
        );

        let plan = plan_loader(&discovery, &specs);
        assert!(plan.links.contains(&(
            "libnccl.so".to_string(),
            site.join("nvidia/nccl/lib/libnccl.so.2")
        )));
        assert!(plan.links.contains(&(
            "libcublas.so".to_string(),
            site.join("nvidia/cu13/lib/libcublas.so.13")
        )));
        assert_eq!(
            plan.folders,
            vec![
                driver.clone(),
                site.join("nvidia/cu13/lib"),
                site.join("nvidia/nccl/lib")
            ]
        );
        let joined = joined_library_path(Some(Path::new("/tmp/links")), &plan, Some("/a::/b"));
        assert_eq!(
            joined,
            format!(
                "/tmp/links:{}:{}:{}:/a:/b",
                driver.display(),
                site.join("nvidia/cu13/lib").display(),
                site.join("nvidia/nccl/lib").display()
            )
        );
    }

    #[test]
    fn ld_library_path_wins_over_cache_and_fixed_folders() {
        let root = tempfile::tempdir().unwrap();
        let custom = root.path().join("custom");
        let cuda = root.path().join("usr/local/cuda/lib64");
        let cached = root.path().join("cache");
        touch(&custom.join("libcublas.so.12"));
        touch(&cuda.join("libcublas.so.12"));
        touch(&cached.join("libcublas.so.12"));
        let places = SearchPlaces {
            folders: vec![
                folder(&custom, Origin::LdLibraryPath),
                folder(&cuda, Origin::FixedFolder),
            ],
            cache_entries: vec![(
                "libcublas.so.12".to_string(),
                cached.join("libcublas.so.12"),
            )],
        };
        let discovery = discover(&library_specs("12"), places.clone());
        let cublas = discovery.get("cublas").unwrap();
        assert_eq!(cublas.path, custom.join("libcublas.so.12"));
        assert_eq!(
            cublas.alternatives,
            vec![cached.join("libcublas.so.12"), cuda.join("libcublas.so.12")]
        );
        // Without LD_LIBRARY_PATH the loader cache comes before the fixed folders.
        let without = SearchPlaces {
            folders: places.folders[1..].to_vec(),
            ..places
        };
        let discovery = discover(&library_specs("12"), without);
        assert_eq!(discovery.get("cublas").unwrap().origin, Origin::LoaderCache);
        // A library found through the cache adds a link but no folder.
        let plan = plan_loader(&discovery, &library_specs("12"));
        assert!(plan.folders.is_empty());
        assert_eq!(plan.links.len(), 1);
    }

    #[test]
    fn wrong_major_is_not_taken_and_missing_lists_places() {
        let root = tempfile::tempdir().unwrap();
        let cuda = root.path().join("cuda/lib64");
        touch(&cuda.join("libcublas.so.11"));
        touch(&cuda.join("libnccl.so"));
        let places = SearchPlaces {
            folders: vec![folder(&cuda, Origin::FixedFolder)],
            cache_entries: Vec::new(),
        };
        let discovery = discover(&library_specs("12"), places);
        assert!(discovery.get("cublas").is_none());
        assert_eq!(
            discovery
                .missing
                .iter()
                .find(|spec| spec.key == "cublas")
                .unwrap()
                .file_names,
            vec!["libcublas.so.12".to_string()]
        );
        // An unversioned libnccl.so is accepted when libnccl.so.2 is absent, with no link needed.
        let nccl = discovery.get("nccl").unwrap();
        assert_eq!(nccl.file_name, "libnccl.so");
        let plan = plan_loader(&discovery, &library_specs("12"));
        assert!(plan.links.iter().all(|(name, _)| name != "libnccl.so"));
        let looked = discovery.places_looked();
        assert!(looked.contains(&cuda.display().to_string()));
        assert!(looked.contains("loader cache"));
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_resolve_to_the_versioned_file_and_duplicates_collapse() {
        let root = tempfile::tempdir().unwrap();
        let lib = root.path().join("lib");
        touch(&lib.join("libcublas.so.12.6.4.1"));
        std::os::unix::fs::symlink("libcublas.so.12.6.4.1", lib.join("libcublas.so.12")).unwrap();
        let places = SearchPlaces {
            folders: vec![
                folder(&lib, Origin::LdLibraryPath),
                folder(&lib, Origin::FixedFolder),
            ],
            cache_entries: vec![("libcublas.so.12".to_string(), lib.join("libcublas.so.12"))],
        };
        let discovery = discover(&library_specs("12"), places);
        let cublas = discovery.get("cublas").unwrap();
        assert!(cublas.resolved_path.ends_with("lib/libcublas.so.12.6.4.1"));
        assert!(cublas.alternatives.is_empty());
    }

    #[test]
    fn site_packages_candidates_follow_the_usual_layouts() {
        let root = tempfile::tempdir().unwrap();
        let venv = root.path().join("venv");
        fs::create_dir_all(venv.join("lib/python3.11/site-packages")).unwrap();
        fs::create_dir_all(venv.join("lib/python3/dist-packages")).unwrap();
        let reported = root.path().join("reported");
        fs::create_dir_all(&reported).unwrap();
        let folders = site_packages_candidates(
            &[reported.clone(), root.path().join("nope")],
            std::slice::from_ref(&venv),
        );
        assert_eq!(folders[0], reported);
        assert!(folders.contains(&venv.join("lib/python3.11/site-packages")));
        assert!(folders.contains(&venv.join("lib/python3/dist-packages")));
        assert!(!folders.contains(&root.path().join("nope")));
    }

    #[test]
    fn prefer_pip_puts_wheels_before_the_cache_and_fixed_folders() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        touch(&site.join("nvidia/cublas/lib/libcublas.so.12"));
        let cached = root.path().join("cache/libcublas.so.12");
        touch(&cached);
        let cache_text = format!("\tlibcublas.so.12 (libc6,x86-64) => {}\n", cached.display());
        let default_order =
            system_places(None, Some(&cache_text), std::slice::from_ref(&site), false);
        let discovery = discover(&library_specs("12"), default_order.clone());
        assert_eq!(discovery.get("cublas").unwrap().path, cached);
        let pip_first = system_places(None, Some(&cache_text), std::slice::from_ref(&site), true);
        assert_eq!(pip_first.folders[0].origin, Origin::PythonSitePackages);
        let discovery = discover(&library_specs("12"), pip_first);
        assert_eq!(
            discovery.get("cublas").unwrap().path,
            site.join("nvidia/cublas/lib/libcublas.so.12")
        );
        assert_eq!(discovery.get("cublas").unwrap().alternatives, vec![cached]);
    }

    #[test]
    fn system_places_keep_order_and_skip_duplicates() {
        let places = system_places(
            Some("/x:/usr/local/cuda/lib64:"),
            Some("\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/libcuda.so.1\n"),
            &[],
            false,
        );
        assert_eq!(places.folders[0].path, PathBuf::from("/x"));
        assert_eq!(places.folders[1].origin, Origin::LdLibraryPath);
        assert_eq!(
            places
                .folders
                .iter()
                .filter(|folder| folder.path == Path::new("/usr/local/cuda/lib64"))
                .count(),
            1
        );
        assert_eq!(places.cache_entries.len(), 1);
    }
}
