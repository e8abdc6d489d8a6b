//! Making the found libraries loadable, then checking what was loaded.
//!
//! A change of `LD_LIBRARY_PATH` inside a running process does not reach the dynamic loader, so
//! the first stage searches (`discovery.rs`), writes a private folder of links, and re-executes
//! the binary with that folder and the libraries' folders first on `LD_LIBRARY_PATH`. The second
//! stage reads the search result back from the environment. Child processes (the framework
//! check's Python) get the original `LD_LIBRARY_PATH` back. cudarc panics on a missing library,
//! so presence is probed first, under `catch_unwind`.

use crate::discovery::{self, Discovery, LibrarySpec};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const STAGE_VARIABLE: &str = "GPU_SELFTEST_STAGE";
const DISCOVERY_VARIABLE: &str = "GPU_SELFTEST_DISCOVERY";
const ORIGINAL_PATH_VARIABLE: &str = "GPU_SELFTEST_ORIGINAL_LD_LIBRARY_PATH";
const LINK_FOLDER_VARIABLE: &str = "GPU_SELFTEST_LINK_FOLDER";
/// When the first stage started (nanoseconds since the Unix epoch), so that the report's
/// duration covers the search before the re-execution too.
const FIRST_STAGE_STARTED_VARIABLE: &str = "GPU_SELFTEST_FIRST_STAGE_STARTED";
/// Set to 1 to skip the re-execution (libraries then come from the default loader path only).
pub const NO_REEXEC_VARIABLE: &str = "GPU_SELFTEST_NO_REEXEC";

fn nanoseconds_since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0)
}

/// Time spent in the first stage before this process image started (zero when this is the
/// first stage): the report's duration adds it.
pub fn first_stage_elapsed() -> std::time::Duration {
    let started: Option<u128> = std::env::var(FIRST_STAGE_STARTED_VARIABLE)
        .ok()
        .and_then(|text| text.parse().ok());
    started
        .map(|started| {
            let nanoseconds = nanoseconds_since_epoch().saturating_sub(started);
            std::time::Duration::from_nanos(nanoseconds.min(u64::MAX as u128) as u64)
        })
        .unwrap_or_default()
}

/// The state after the loader stage.
pub struct Prepared {
    pub discovery: Discovery,
    pub specs: Vec<LibrarySpec>,
    /// The private link folder to delete at the end, if one was made.
    pub link_folder: Option<PathBuf>,
    /// `LD_LIBRARY_PATH` as the user set it (None: unset), for child processes.
    pub original_library_path: Option<String>,
    /// What the loader stage did, for the inventory check.
    pub note: String,
}

/// The CUDA major this binary was built for (cargo feature cu11, cu12 or cu13).
pub fn cuda_build_major() -> &'static str {
    if cfg!(feature = "cu13") {
        "13"
    } else if cfg!(feature = "cu11") {
        "11"
    } else {
        "12"
    }
}

/// Runs `program args` and returns its standard output when it exits 0.
fn command_output(program: &str, arguments: &[&str]) -> Option<String> {
    let output = Command::new(program).args(arguments).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `ldconfig -p`, from the usual places of `ldconfig`.
fn loader_cache_text() -> Option<String> {
    ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .into_iter()
        .find_map(|program| command_output(program, &["-p"]))
}

/// The site-packages folders that `python3` (and `python`) report.
fn reported_site_packages() -> Vec<PathBuf> {
    const SCRIPT: &str = "import site, sys\n\
        paths = list(getattr(site, 'getsitepackages', lambda: [])()) + [site.getusersitepackages()]\n\
        paths += [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))]\n\
        print('\\n'.join(paths))";
    // Asked side by side: each interpreter's start is most of the first stage's time, which
    // delays everything after the re-execution.
    std::thread::scope(|scope| {
        let answers: Vec<_> = ["python3", "python"]
            .into_iter()
            .map(|interpreter| scope.spawn(move || command_output(interpreter, &["-c", SCRIPT])))
            .collect();
        answers
            .into_iter()
            .filter_map(|answer| answer.join().ok().flatten())
            .flat_map(|text| text.lines().map(PathBuf::from).collect::<Vec<_>>())
            .collect()
    })
}

/// Searches the system for the libraries of this build.
pub fn discover_on_this_system(original_library_path: Option<&str>, prefer_pip: bool) -> Discovery {
    let specs = discovery::library_specs(cuda_build_major());
    let mut roots: Vec<PathBuf> = Vec::new();
    for variable in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(value) = std::env::var_os(variable) {
            roots.push(PathBuf::from(value));
        }
    }
    // The loader cache is read while the interpreters answer.
    let (reported, loader_cache) = std::thread::scope(|scope| {
        let loader_cache = scope.spawn(loader_cache_text);
        (reported_site_packages(), loader_cache.join().ok().flatten())
    });
    let site_packages = discovery::site_packages_candidates(&reported, &roots);
    let places = discovery::system_places(
        original_library_path,
        loader_cache.as_deref(),
        &site_packages,
        prefer_pip,
    );
    discovery::discover(&specs, places)
}

/// Creates the private link folder with the planned links.
fn make_link_folder(links: &[(String, PathBuf)]) -> std::io::Result<PathBuf> {
    let folder = std::env::temp_dir().join(format!("gpu-selftest-{}", std::process::id()));
    std::fs::create_dir_all(&folder)?;
    for (name, target) in links {
        let link = folder.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link)?;
    }
    Ok(folder)
}

/// First stage: search, link and re-execute (this call does not return then). Second stage (or
/// when re-execution is off or fails): return the search result.
pub fn prepare(prefer_pip: bool) -> Prepared {
    let specs = discovery::library_specs(cuda_build_major());
    if std::env::var(STAGE_VARIABLE).as_deref() == Ok("reexecuted") {
        let discovery = std::env::var(DISCOVERY_VARIABLE)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_else(|| discover_on_this_system(None, prefer_pip));
        let original_library_path = std::env::var(ORIGINAL_PATH_VARIABLE)
            .ok()
            .filter(|value| value != "\u{1}unset");
        let link_folder = std::env::var_os(LINK_FOLDER_VARIABLE).map(PathBuf::from);
        return Prepared {
            discovery,
            specs,
            note: format!(
                "re-executed with LD_LIBRARY_PATH={}",
                std::env::var("LD_LIBRARY_PATH").unwrap_or_default()
            ),
            link_folder,
            original_library_path,
        };
    }
    let first_stage_started = nanoseconds_since_epoch();
    let original_library_path = std::env::var("LD_LIBRARY_PATH").ok();
    let discovery = discover_on_this_system(original_library_path.as_deref(), prefer_pip);
    if std::env::var(NO_REEXEC_VARIABLE).as_deref() == Ok("1") {
        return Prepared {
            discovery,
            specs,
            link_folder: None,
            original_library_path,
            note: format!("{NO_REEXEC_VARIABLE}=1: default loader path only"),
        };
    }
    let plan = discovery::plan_loader(&discovery, &specs);
    // Without a writable temporary folder the run goes on without links: libraries with the
    // names cudarc tries still load from the planned folders; `libnccl.so.2` alone then will not.
    let link_folder = match make_link_folder(&plan.links) {
        Ok(folder) => Some(folder),
        Err(error) => {
            eprintln!(
                "gpu-selftest: warning: cannot create the library link folder in {}: {error}",
                std::env::temp_dir().display()
            );
            None
        }
    };
    let library_path = discovery::joined_library_path(
        link_folder.as_deref(),
        &plan,
        original_library_path.as_deref(),
    );
    let error = reexecute(
        &library_path,
        &discovery,
        original_library_path.as_deref(),
        link_folder.as_deref(),
        first_stage_started,
    );
    // Only reached when exec failed: carry on with the default loader path.
    if let Some(folder) = &link_folder {
        let _ = std::fs::remove_dir_all(folder);
    }
    Prepared {
        discovery,
        specs,
        link_folder: None,
        original_library_path,
        note: format!("re-execution failed ({error}); default loader path only"),
    }
}

/// Replaces this process with itself under the new environment; returns only on failure.
fn reexecute(
    library_path: &str,
    discovery: &Discovery,
    original_library_path: Option<&str>,
    link_folder: Option<&Path>,
    first_stage_started: u128,
) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let executable = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    let mut arguments = std::env::args_os();
    let program_name = arguments
        .next()
        .unwrap_or_else(|| OsString::from("gpu-selftest"));
    let mut command = Command::new(executable);
    command
        .arg0(program_name)
        .args(arguments)
        .env("LD_LIBRARY_PATH", library_path)
        .env(STAGE_VARIABLE, "reexecuted")
        .env(
            DISCOVERY_VARIABLE,
            serde_json::to_string(discovery).unwrap_or_default(),
        )
        .env(
            ORIGINAL_PATH_VARIABLE,
            original_library_path.unwrap_or("\u{1}unset"),
        )
        .env(
            FIRST_STAGE_STARTED_VARIABLE,
            first_stage_started.to_string(),
        );
    if let Some(folder) = link_folder {
        command.env(LINK_FOLDER_VARIABLE, folder);
    }
    command.exec()
}

/// Prepares a child command with the user's own library path and none of the stage variables.
pub fn restore_environment(command: &mut Command, original_library_path: Option<&str>) {
    for variable in [
        STAGE_VARIABLE,
        DISCOVERY_VARIABLE,
        ORIGINAL_PATH_VARIABLE,
        LINK_FOLDER_VARIABLE,
        FIRST_STAGE_STARTED_VARIABLE,
    ] {
        command.env_remove(variable);
    }
    match original_library_path {
        Some(value) => command.env("LD_LIBRARY_PATH", value),
        None => command.env_remove("LD_LIBRARY_PATH"),
    };
}

/// Whether cudarc can open library `key` ("cuda", "cublas", "nccl"), without panicking.
pub fn library_loads(key: &str) -> bool {
    std::panic::catch_unwind(|| unsafe {
        match key {
            "cuda" => cudarc::driver::sys::is_culib_present(),
            "cublas" => cudarc::cublas::sys::is_culib_present(),
            "nccl" => cudarc::nccl::sys::is_culib_present(),
            _ => false,
        }
    })
    .unwrap_or(false)
}

/// The message for a library that cannot be loaded: its name, what it is, and where the search
/// looked. Used for exit code 2.
pub fn missing_library_message(spec: &LibrarySpec, discovery: &Discovery) -> String {
    let found_note = match discovery.get(&spec.key) {
        Some(found) => format!(
            "; {} was found but did not load (wrong architecture, or a library it needs is missing)",
            found.path.display()
        ),
        None => String::new(),
    };
    format!(
        "cannot load {} ({}){found_note}; looked in: {}",
        spec.file_names.join(" or "),
        spec.description,
        discovery.places_looked()
    )
}

/// A library mapped into this process: its key, the path mapped, and the version its file name
/// carries ("libcublas.so.12.6.4.1" → "12.6.4.1").
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LoadedLibrary {
    pub key: String,
    pub path: String,
    pub file_version: Option<String>,
}

/// Reads the mapped CUDA libraries out of `/proc/self/maps` text.
pub fn loaded_libraries(maps_text: &str) -> Vec<LoadedLibrary> {
    const PREFIXES: [(&str, &str); 5] = [
        ("libcublasLt.so", "cublasLt"),
        ("libcublas.so", "cublas"),
        ("libcuda.so", "cuda"),
        ("libnccl.so", "nccl"),
        ("libnvidia-ml.so", "nvml"),
    ];
    let mut libraries: Vec<LoadedLibrary> = Vec::new();
    for line in maps_text.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        let file_name = path.rsplit('/').next().unwrap_or(path);
        for (prefix, key) in PREFIXES {
            if let Some(rest) = file_name.strip_prefix(prefix) {
                if !libraries.iter().any(|known| known.path == path) {
                    let version = rest.strip_prefix('.').filter(|v| !v.is_empty());
                    libraries.push(LoadedLibrary {
                        key: key.to_string(),
                        path: path.to_string(),
                        file_version: version.map(str::to_string),
                    });
                }
                break;
            }
        }
    }
    libraries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_name_the_libraries_and_their_versions() {
        let text = "7f00-7f01 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n\
            7f01-7f02 r-xp 00001000 08:01 123 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n\
            7f02-7f03 r--p 00000000 08:01 124 /opt/venv/site-packages/nvidia/cu13/lib/libcublasLt.so.13\n\
            7f03-7f04 r--p 00000000 08:01 125 /usr/local/cuda-13.0/lib64/libcublas.so.13.0.0.19\n\
            7f04-7f05 r--p 00000000 08:01 126 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3\n\
            7f05-7f06 rw-p 00000000 00:00 0 \n\
            7f06-7f07 r--p 00000000 08:01 127 /usr/lib/x86_64-linux-gnu/libc.so.6\n";
        let libraries = loaded_libraries(text);
        let keys: Vec<&str> = libraries.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, vec!["cuda", "cublasLt", "cublas", "nccl"]);
        assert_eq!(libraries[0].file_version.as_deref(), Some("580.159.04"));
        assert_eq!(libraries[1].file_version.as_deref(), Some("13"));
        assert_eq!(libraries[2].file_version.as_deref(), Some("13.0.0.19"));
        assert_eq!(libraries[3].file_version.as_deref(), Some("2.28.3"));
    }

    #[test]
    fn missing_message_names_the_library_and_the_places() {
        let specs = discovery::library_specs("12");
        let discovery = discovery::discover(
            &specs,
            discovery::system_places(Some("/nonexistent/lib"), None, &[], false),
        );
        let cublas = specs.iter().find(|spec| spec.key == "cublas").unwrap();
        let message = missing_library_message(cublas, &discovery);
        assert!(message.starts_with("cannot load libcublas.so.12 (cuBLAS); looked in: "));
        assert!(message.contains("/nonexistent/lib (LD_LIBRARY_PATH)"));
        assert!(message.contains("/usr/local/cuda/lib64 (fixed folder)"));
    }

    #[test]
    fn build_major_follows_the_feature() {
        // The feature (cu11, cu12, cu13) selects the cudarc bindings compiled in; their
        // `CUDA_VERSION` (cuda.h's, e.g. 12000) is the witness of which one did, independent of
        // the `cfg!` chain under test. A build whose major and bindings disagree would look for
        // libraries of one major through the functions of another.
        let bindings_major = (cudarc::driver::sys::CUDA_VERSION / 1000).to_string();
        assert_eq!(cuda_build_major(), bindings_major);
        let cublas = discovery::library_specs(cuda_build_major())
            .into_iter()
            .find(|spec| spec.key == "cublas")
            .unwrap();
        assert!(
            cublas
                .file_names
                .contains(&format!("libcublas.so.{bindings_major}")),
            "{:?}",
            cublas.file_names
        );
    }

    #[test]
    fn child_environment_gets_the_original_library_path() {
        let mut command = Command::new("true");
        restore_environment(&mut command, Some("/user/lib"));
        let variables: Vec<_> = command.get_envs().collect();
        assert!(variables.contains(&(
            std::ffi::OsStr::new("LD_LIBRARY_PATH"),
            Some(std::ffi::OsStr::new("/user/lib"))
        )));
        assert!(variables.contains(&(std::ffi::OsStr::new(STAGE_VARIABLE), None)));
    }

    #[test]
    fn the_first_stage_adds_nothing_when_there_was_none() {
        // The test process was not re-executed, so the variable is not set.
        assert!(std::env::var_os(FIRST_STAGE_STARTED_VARIABLE).is_none());
        assert_eq!(first_stage_elapsed(), std::time::Duration::ZERO);
        assert!(nanoseconds_since_epoch() > 1_700_000_000 * 1_000_000_000);
    }
}
