//! The real build: one runtime image (and the devel image on it) built end to end on the Docker
//! daemon as a new user would, from the repository's own templates: a Debian trixie base made
//! here (debootstrap into a folder, then `docker import`: nothing can be pulled), torch 2.13.0 and
//! everything it needs from a plain package index (PyPI) at the versions and hashes `imagegen
//! lock` resolved with uv, the host's CA bundle, a real gpu-selftest (the CUDA 13 build).
//!
//! Inside the image it checks what the issue asks: torch, CUDA, cuDNN and NCCL are the versions
//! the labels say (the CUDA runtime label is the lock's `nvidia-cuda-runtime`, and no label names
//! a toolkit the Debian base lacks); `torch.compile` on the CPU matches eager; pip installed exactly
//! the lock; the wheels' CUDA libraries are in the loader cache; gpu-selftest exits 2 with its "no
//! driver" report, and syft reads its crates from the binary (built with cargo-auditable), each at
//! its `Cargo.lock` version. With nothing passed to `docker run`, pip, requests, httpx and urllib
//! reach PyPI through the machine's TLS-intercepting proxy, and requests and httpx fail on the
//! certificate once the image's CA variables are unset (so the proxy really intercepts). A build from a tampered lock fails on the hash. In the devel image (CUDA toolkit from
//! PyPI) a CPU and a CUDA `torch.utils.cpp_extension` compile, with the NCCL and cuDNN headers of
//! the wheels, and `-lcuda` links against the stub. The jupyter and ssh flavours are built on the
//! runtime image and started (`flavour_services.rs`).
//!
//! The runtime venv is made on the host (`wheels: host`, the fast path: torch's 5.7 GB written
//! once, straight into a normalized layer); pip installing the lock inside the Docker build is
//! checked file by file against it in `host_venv.rs` on stand-in wheels, and the team's step runs
//! in the devel image (a runtime image with `wheels: host` takes no step). Same inputs giving the
//! same digest is the quick tier's `reproducible::two_clean_builds_of_the_same_inputs_push_one_digest`
//! and `host_venv.rs`'s fourth build; for this real image it was measured by
//! `bench/real_push_rebuild.sh` (BENCHMARKS.md), not built a second time here (9 minutes).
//!
//! The build is the README quick start's: `imagegen build --push` to a registry on 127.0.0.1, each
//! image pushed as it was normalized (a derived image's parent layers are in the registry once),
//! its aliases waiting for a self-test on a GPU (none here), and then `imagegen verify` (exit 0:
//! the registry serves every full tag as the manifest records it).
//!
//! It needs the daemon, debootstrap, docker-registry, uv and syft (`.ci/install-deps.sh`: `.ci/venv/bin/uv` and
//! `.ci/venv/bin/syft`, or `IMAGEGEN_UV`/`IMAGEGEN_SYFT`, or PATH), cargo-auditable
//! (`target/tools/bin`, which `.ci/install-deps.sh` and `selftest/build.sh` install), cargo and the
//! network (deb.debian.org, PyPI), and fails, never skips, without them.
//! It removes what it built, and the base image when it made it (`IMAGEGEN_TEST_KEEP_BASES=1`
//! keeps it for the next run); it prints each phase's time and the image's layers (see BENCHMARKS.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use crate::support::project::{assert_code, text};
use crate::support::{unique_name, Registry};

/// The base image this test makes (removed at the end of the run unless
/// `IMAGEGEN_TEST_KEEP_BASES=1`), or finds from an earlier run.
const BASE_IMAGE: &str = crate::support::debian::TRIXIE_BASE;
/// Where the runtime image gets its CA bundle, as containers on this host need it.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const TORCH: &str = "2.13.0";
/// The free disk the test needs before it starts (the daemon's and the temporary folder's, one
/// disk here). Its peak, sampled every 5 s on the 2-core machine (2026-12-06, BENCHMARKS.md,
/// "CI and the test tiers"): 19.7 GiB alone, while the devel image and the flavours build on the
/// runtime image (5.9 GiB of it in the temporary folder: the wheel cache and the venv's layer
/// kept for the next build); 21 GiB for the whole slow tier in `.ci/run`, its other tests beside
/// it. Before syft read the package databases out of the image instead of saving the whole
/// image, 25.5 GiB. Plus a margin for the daemon's and the registry's bookkeeping.
const FREE_DISK_GIB: u64 = 23;

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `program args`, failing the test with its output when it cannot run or fails.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{}",
        text(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI (docker.io)")
}

/// Phase timer: prints `[  12.3 s] what` to stderr and keeps the marks for the summary.
struct Phases {
    started: Instant,
    marks: Vec<(String, f64)>,
}

impl Phases {
    fn mark(&mut self, what: &str) {
        let seconds = self.started.elapsed().as_secs_f64();
        eprintln!("[{seconds:7.1} s] {what}");
        self.marks.push((what.to_string(), seconds));
    }
}

/// What the test built, removed on drop (also when an assertion fails): the tags it made, then
/// every image the daemon gained while it ran that is one of those tags' images or whose parent
/// chain reaches one of them or the base image: the classic builder's intermediate images, the
/// tampered build's layers, and the builds replaced by their normalized images (those have no
/// parent: the devel image and the flavours are built on the normalized runtime image, so their
/// steps reach it, not the base).
struct Built {
    tags: Vec<String>,
    /// `HOST/REPOSITORY` of the images: every tag of it in the daemon is removed too; empty until
    /// known.
    repository: String,
    images_before: BTreeSet<String>,
    base_id: String,
}

impl Drop for Built {
    fn drop(&mut self) {
        self.remove();
    }
}

impl Built {
    /// Removes what the test built so far (see [`Built`]).
    fn remove(&self) {
        let id_of = |reference: &str| -> Option<String> {
            let output = docker(&["image", "inspect", "--format", "{{.Id}}", reference]);
            let id = String::from_utf8_lossy(&output.stdout).trim().to_string();
            (output.status.success() && !id.is_empty()).then_some(id)
        };
        let mut tags: BTreeSet<String> = self.tags.iter().cloned().collect();
        if !self.repository.is_empty() {
            let listed = docker(&[
                "images",
                "--format",
                "{{.Repository}}:{{.Tag}}",
                &self.repository,
            ]);
            tags.extend(
                String::from_utf8_lossy(&listed.stdout)
                    .lines()
                    .filter(|tag| !tag.ends_with(":<none>"))
                    .map(str::to_string),
            );
        }
        let mut roots: BTreeSet<String> = tags.iter().filter_map(|tag| id_of(tag)).collect();
        // An image of the repository with no tag (pulled by digest: diff-build's, when the
        // rebuild's digest differs) is one of ours too.
        if !self.repository.is_empty() {
            let listed = docker(&["images", "-q", "--no-trunc", &self.repository]);
            roots.extend(
                String::from_utf8_lossy(&listed.stdout)
                    .lines()
                    .map(str::to_string),
            );
        }
        for tag in &tags {
            let _ = docker(&["rmi", tag]);
        }
        roots.retain(|id| !self.images_before.contains(id));
        let parent_of = |id: &str| -> String {
            let output = docker(&["image", "inspect", "--format", "{{.Parent}}", id]);
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        };
        let ours = |id: &str| -> bool {
            let mut cursor = id.to_string();
            for _ in 0..64 {
                if cursor.is_empty() {
                    return false;
                }
                if cursor == self.base_id || roots.contains(&cursor) {
                    return true;
                }
                cursor = parent_of(&cursor);
            }
            false
        };
        // Children before parents: newest first, as `docker images` lists them; a normalized
        // image carries its base's time, so it comes late, and a second pass takes what a child
        // still held in the first.
        for _pass in 0..3 {
            let listed = docker(&["images", "-a", "-q", "--no-trunc"]);
            let mine: Vec<String> = String::from_utf8_lossy(&listed.stdout)
                .lines()
                .filter(|id| !self.images_before.contains(*id) && *id != self.base_id)
                .filter(|id| ours(id))
                .map(str::to_string)
                .collect();
            if mine.is_empty() {
                break;
            }
            for id in &mine {
                let _ = docker(&["rmi", id]);
            }
        }
    }
}

/// The base image: the minbase debootstrap of trixie (Debian 13)
/// (`support::debian::trixie_base`: one made per test process, under a lock, so that the tests
/// of the tier running beside each other debootstrap once), with the phase's time.
fn base_image(phases: &mut Phases) -> String {
    let there = docker(&["image", "inspect", BASE_IMAGE]).status.success();
    let id = crate::support::debian::trixie_base();
    phases.mark(&if there {
        format!("base image {BASE_IMAGE} is there")
    } else {
        format!("base image {BASE_IMAGE} made (debootstrap, import), or waited for")
    });
    id
}

/// A tool of `.ci/venv`: `$variable`, the one `.ci/install-deps.sh` puts in `.ci/venv`, or `name`
/// on PATH; the first that answers `version_argument`.
fn venv_tool(name: &str, variable: &str, version_argument: &str) -> PathBuf {
    let candidates = [
        std::env::var_os(variable).map(PathBuf::from),
        Some(repository_root().join(".ci/venv/bin").join(name)),
        Some(PathBuf::from(name)),
    ];
    for candidate in candidates.into_iter().flatten() {
        if Command::new(&candidate)
            .arg(version_argument)
            .output()
            .is_ok_and(|output| output.status.success())
        {
            return candidate;
        }
    }
    panic!("{name} is missing: run .ci/install-deps.sh (it installs {name} into .ci/venv) or set {variable}");
}

/// uv, the resolver `imagegen lock` runs.
fn uv() -> PathBuf {
    venv_tool("uv", "IMAGEGEN_UV", "--version")
}

/// syft, the SBOM scanner that must read gpu-selftest's crates.
fn syft() -> PathBuf {
    venv_tool("syft", "IMAGEGEN_SYFT", "version")
}

/// Where `.ci/install-deps.sh` and `selftest/build.sh` install cargo-auditable.
fn tools_bin() -> PathBuf {
    repository_root().join("target/tools/bin")
}

/// Starts building gpu-selftest for CUDA 13 with cargo-auditable (release, in a target folder of
/// its own, beside the test's own build), while the base image and the locks are made.
fn start_selftest_build() -> (Child, PathBuf) {
    let auditable = tools_bin().join("cargo-auditable");
    assert!(
        auditable.exists(),
        "{} is missing: run .ci/install-deps.sh or selftest/build.sh (they install cargo-auditable into target/tools)",
        auditable.display()
    );
    let path = std::env::join_paths(std::iter::once(tools_bin()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let target = repository_root().join("target/real-build");
    let child = Command::new(env!("CARGO"))
        .current_dir(repository_root())
        .env("CARGO_TARGET_DIR", &target)
        .env("PATH", path)
        .args([
            "auditable",
            "build",
            "--quiet",
            "--release",
            "--locked",
            "-p",
            "gpu-selftest",
            "--no-default-features",
            "--features",
            "cu13",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo");
    (child, target.join("release/gpu-selftest"))
}

fn imagegen(project: &Path, args: &[&str]) -> Output {
    assert_cmd::Command::cargo_bin("imagegen")
        .unwrap()
        .current_dir(project)
        .env("DOCKER_CONFIG", project.join("docker-config"))
        .env("CI", "true")
        // The host-side wheel cache of this run only (the user's own cache stays untouched).
        .env("IMAGEGEN_WHEEL_CACHE", project.join("wheel-cache"))
        .env("IMAGEGEN_TEST_INDEX_USER", TEAM_INDEX_USER)
        .env("IMAGEGEN_TEST_INDEX_PASSWORD", team_index_password())
        .args(args)
        .output()
        .unwrap()
}

/// The user of the team's index (`tests/fixtures/real-build/team_index.py`).
const TEAM_INDEX_USER: &str = "team";

/// The password of the team's index: made for this run, so finding it anywhere is a leak.
/// `imagegen build --no-test` of the runtime image `runtime_name` alone (the pattern anchored:
/// a plain name also matches the flavours' tags, which it is part of).
fn build_runtime_only(project: &Path, runtime_name: &str) -> Output {
    imagegen(
        project,
        &[
            "build",
            "--selftest-dir",
            "selftest",
            "--only",
            &format!("*{runtime_name}"),
            "--no-test",
        ],
    )
}

fn team_index_password() -> &'static str {
    static PASSWORD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PASSWORD.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("tok{:x}{:x}", nanos, std::process::id())
    })
}

/// The team's private index on 127.0.0.1 behind basic auth (a Python process serving two wheels
/// it builds), stopped on drop.
struct TeamIndex {
    child: Child,
    port: u16,
}

impl TeamIndex {
    fn start(dir: &Path) -> TeamIndex {
        let port_file = dir.join("team-index.port");
        let mut child = Command::new("python3")
            .arg(repository_root().join("tests/fixtures/real-build/team_index.py"))
            .args([TEAM_INDEX_USER, team_index_password()])
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 for the team's index");
        for _ in 0..100 {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                return TeamIndex { child, port };
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the team's index did not start");
    }
}

impl Drop for TeamIndex {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What runs inside the image with additions, as its user: who and where it is, the team's
/// packages and file, the apt package, what the user owns, pip check.
const ADDITIONS_CHECKS: &str = r#"set -e
echo "id=$(id -u):$(id -g) pwd=$(pwd) home=$HOME team_config=$TEAM_CONFIG"
python -c 'import team_lib, einops, json; print(json.dumps({"team_lib": team_lib.__version__, "einops": einops.__version__}))'
python -m pip check
cat /etc/team/config.toml
dpkg-query -W -f='htop=${Version}
' htop
htop --version | head -1
if touch /opt/venv/imagegen-test 2>/dev/null; then echo "venv writable"; fi
echo "owned:"; find / -xdev \( -path /proc -o -path /sys \) -prune -o -user 1000 -print 2>/dev/null | sort
"#;

/// Runs `script` with the image's Python and returns the JSON it prints last.
fn python_in(image: &str, script: &str) -> serde_json::Value {
    let mut child = Command::new("docker")
        .args([
            "run",
            "--rm",
            "-i",
            "--network",
            "none",
            image,
            "python",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "python in {image}:\n{}",
        text(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|error| panic!("{error}: {}", text(&output)))
}

fn labels_of(image: &str) -> BTreeMap<String, String> {
    let output = docker(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Labels}}",
        image,
    ]);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The checks inside the runtime image, printed as one JSON line.
const RUNTIME_CHECKS: &str = r#"
import ctypes, json, subprocess, sys, time
import torch, torchvision, torchaudio
report = {
    "torch": torch.__version__, "torchvision": torchvision.__version__,
    "torchaudio": torchaudio.__version__, "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version(),
    "nccl": ".".join(str(part) for part in torch.cuda.nccl.version()),
}
def f(x, y):
    return torch.sin(x) * torch.cos(y) + (x @ y).relu().sum(dim=-1, keepdim=True)
x, y = torch.randn(64, 64), torch.randn(64, 64)
eager = f(x, y)
started = time.time()
compiled = torch.compile(f)(x, y)
report["compile_seconds"] = round(time.time() - started, 1)
report["compile_matches_eager"] = bool(torch.allclose(eager, compiled, rtol=1e-4, atol=1e-5))
cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
report["loader_cache"] = sorted({line.split()[0] for line in cache.splitlines()[1:] if "/opt/venv/" in line})
ctypes.CDLL("libnccl.so")
freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True).stdout
report["pip"] = sorted(line.strip().lower() for line in freeze.splitlines() if "==" in line)
print(json.dumps(report))
"#;

/// The checks inside the devel image: the extensions compile (CPU, and CUDA through nvcc with the
/// wheels' NCCL and cuDNN headers), and `-lcuda` links against the stub without a GPU.
const DEVEL_CHECKS: &str = r#"
import json, os, subprocess, tempfile, time
import torch
from torch.utils.cpp_extension import CUDA_HOME, load_inline
report = {"cuda_home": CUDA_HOME, "library_path": os.environ.get("LIBRARY_PATH", "")}
nvcc_version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout.strip().splitlines()
report["nvcc"] = nvcc_version[-1]
report["nvcc_release"] = next((line for line in nvcc_version if "release" in line), "")
started = time.time()
cpu = load_inline(name="imagegen_cpu", cpp_sources=["torch::Tensor add_one(torch::Tensor x) { return x + 1; }"], functions=["add_one"])
report["cpu_extension"] = cpu.add_one(torch.zeros(3)).tolist()
report["cpu_seconds"] = round(time.time() - started, 1)
cuda_source = r'''
#include <torch/extension.h>
#include <nccl.h>
#include <cudnn.h>
__global__ void scale_kernel(float* x, float s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; }
torch::Tensor scale(torch::Tensor x, double s) {
  auto y = x.clone(); int n = y.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), (float)s, n);
  return y;
}
std::vector<int64_t> header_versions() { return {NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL}; }
'''
started = time.time()
cuda = load_inline(name="imagegen_cuda", cpp_sources=["torch::Tensor scale(torch::Tensor x, double s);\nstd::vector<int64_t> header_versions();"],
                   cuda_sources=[cuda_source], functions=["scale", "header_versions"],
                   extra_cuda_cflags=["-gencode=arch=compute_90,code=sm_90"])
report["cuda_seconds"] = round(time.time() - started, 1)
report["header_versions"] = cuda.header_versions()
report["cuda_extension_needs"] = subprocess.run(["readelf", "-d", cuda.__file__], capture_output=True, text=True, check=True).stdout
folder = tempfile.mkdtemp()
with open(folder + "/driver.c", "w") as source:
    source.write("int cuInit(unsigned int flags);\nint main(void) { return cuInit(0); }\n")
subprocess.run(["gcc", folder + "/driver.c", "-lcuda", "-o", folder + "/driver"], check=True)
report["driver_program_needs"] = subprocess.run(["readelf", "-d", folder + "/driver"], capture_output=True, text=True, check=True).stdout
report["libcuda_in_loader_cache"] = "libcuda.so" in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
report["ssl_cert_file"] = os.environ.get("SSL_CERT_FILE")
print(json.dumps(report))
"#;

/// The variables the runtime image sets where the matrix has a `ca_bundle`.
const CA_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "AWS_CA_BUNDLE",
];

/// The CA bundle at run time, in a container started with nothing passed: pip installs requests
/// and httpx into a throwaway folder from PyPI, then requests, httpx and urllib (and curl, where
/// the image has it) fetch a PyPI page; the same clients again with the CA variables unset. One
/// JSON line.
const CA_CHECKS: &str = r#"
import json, os, shutil, subprocess, sys, tempfile
VARIABLES = sys.argv[1].split(",")
URL = "https://pypi.org/simple/requests/"
report = {"environment": {name: os.environ.get(name) for name in VARIABLES}}
target = tempfile.mkdtemp()
pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", target, "requests", "httpx"], capture_output=True, text=True)
report["pip"] = "ok" if pip.returncode == 0 else pip.stdout[-400:] + pip.stderr[-800:]
CLIENTS = r"""
import json, sys, urllib.request
sys.path.insert(0, sys.argv[1])
URL = sys.argv[2]
report = {}
def attempt(name, call):
    try:
        report[name] = call()
    except Exception as error:
        report[name] = (type(error).__name__ + ": " + str(error))[:300]
import requests, httpx, certifi
report["certifi"] = certifi.where()
attempt("requests", lambda: requests.get(URL, timeout=60).status_code)
attempt("httpx", lambda: httpx.get(URL, timeout=60).status_code)
attempt("urllib", lambda: urllib.request.urlopen(URL, timeout=60).status)
print(json.dumps(report))
"""
def clients(environment):
    run = subprocess.run([sys.executable, "-c", CLIENTS, target, URL], env=environment, capture_output=True, text=True)
    if run.returncode != 0:
        return {"error": run.stderr[-800:]}
    return json.loads(run.stdout.strip().splitlines()[-1])
report["with"] = clients(dict(os.environ))
report["without"] = clients({key: value for key, value in os.environ.items() if key not in VARIABLES})
curl = shutil.which("curl")
report["curl"] = subprocess.run([curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", URL], capture_output=True, text=True).stdout if curl else None
print(json.dumps(report))
"#;

/// `name vVERSION` of each crate in `Cargo.lock`.
fn cargo_lock_crates() -> BTreeSet<String> {
    let lock = std::fs::read_to_string(repository_root().join("Cargo.lock")).unwrap();
    let mut crates = BTreeSet::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(value) = line.strip_prefix("name = ") {
            name = Some(value.trim_matches('"').to_string());
        } else if let (Some(value), Some(crate_name)) = (line.strip_prefix("version = "), &name) {
            crates.insert(format!("{crate_name} v{}", value.trim_matches('"')));
            name = None;
        }
    }
    crates
}

/// `name vVERSION` of each crate linked into gpu-selftest's CUDA 13 build: its normal dependency
/// graph without proc-macros (which run at compile time only), as `cargo tree` prints it.
fn selftest_linked_crates() -> BTreeSet<String> {
    let tree = run(
        env!("CARGO"),
        &[
            "tree",
            "--locked",
            "--offline",
            "--manifest-path",
            repository_root().join("Cargo.toml").to_str().unwrap(),
            "-p",
            "gpu-selftest",
            "--no-default-features",
            "--features",
            "cu13",
            "--prefix",
            "none",
            "-e",
            "normal,no-proc-macro",
            "--target",
            "x86_64-unknown-linux-gnu",
        ],
    );
    tree.lines()
        .map(|line| {
            let line = line.trim_end_matches(" (*)");
            // The workspace's own crate carries its path: `gpu-selftest v0.1.0 (/.../selftest)`.
            line.split(" (").next().unwrap_or(line).to_string()
        })
        .filter(|line| !line.is_empty())
        .collect()
}

/// `9.20.0.48` → `9.20.0`: the part of a version a library reports about itself.
fn first_three(version: &str) -> String {
    version.split('.').take(3).collect::<Vec<_>>().join(".")
}

/// `name==version` with the name normalized as PEP 503 does (pip freeze prints
/// `typing_extensions`, a lock `typing-extensions`).
fn normalized(pin: &str) -> String {
    let (name, version) = pin.split_once("==").unwrap_or((pin, ""));
    let mut normal = String::new();
    for character in name.trim().to_lowercase().chars() {
        let character = if "_.".contains(character) {
            '-'
        } else {
            character
        };
        if !(character == '-' && normal.ends_with('-')) {
            normal.push(character);
        }
    }
    format!("{normal}=={}", version.trim())
}

/// The packages a lock pins, normalized.
fn pins(lock: &str) -> BTreeSet<String> {
    lock.lines()
        .filter(|line| !line.starts_with([' ', '#']) && line.contains("=="))
        .map(|line| normalized(line.trim_end_matches(['\\', ' '])))
        .collect()
}

/// Checks `imagegen attest sbom IMAGE` against syft's scan of the image from the daemon (the same
/// bytes a push would send): validated strictly as CycloneDX 1.6, then every Python package syft
/// finds under the venv and every Debian package of the dpkg database must be a component at the
/// same version. Returns how many of each syft found.
fn sbom_holds_what_syft_finds(project: &Path, name: &str, tag: &str) -> (usize, usize) {
    let printed = imagegen(project, &["attest", "sbom", name]);
    assert_code(&printed, 0);
    let sbom: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap_or_else(|error| {
        panic!("attest sbom printed no JSON ({error}):\n{}", text(&printed))
    });
    let folder = tempfile::tempdir().unwrap();
    let sbom_file = folder.path().join("sbom.json");
    std::fs::write(&sbom_file, &printed.stdout).unwrap();
    let python = venv_tool("python", "IMAGEGEN_PYTHON", "--version");
    let validated = run(
        python.to_str().unwrap(),
        &[
            "-c",
            "import sys\n\
             from cyclonedx.schema import SchemaVersion\n\
             from cyclonedx.validation.json import JsonStrictValidator\n\
             errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(open(sys.argv[1]).read())\n\
             print(errors if errors else 'valid')",
            sbom_file.to_str().unwrap(),
        ],
    );
    assert_eq!(
        validated.trim(),
        "valid",
        "the SBOM is not valid CycloneDX 1.6"
    );
    let components: BTreeSet<(String, String, String)> = sbom["components"]
        .as_array()
        .expect("the SBOM has components")
        .iter()
        .filter_map(|component| {
            let purl = component["purl"].as_str()?;
            let kind = purl.strip_prefix("pkg:")?.split('/').next()?.to_string();
            Some((
                kind,
                component["name"].as_str()?.to_string(),
                component["version"].as_str()?.to_string(),
            ))
        })
        .collect();
    // What syft's two catalogers read, taken out of the image: every `.dist-info` and `.egg-info`
    // of the venv, dpkg's database and the os-release file, as the image holds them. syft's
    // `docker:` source would first save the whole image (torch's 5.7 GB) to the temporary
    // folder and unpack it: 10 GB of disk at the slow tier's peak for the same findings.
    let tree = folder.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    let extract = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; docker run --rm --user 0:0 --network none --entrypoint sh {tag} -c \
             \"find /opt/venv \\( -name '*.dist-info' -o -name '*.egg-info' \\) -prune -print \
               | tar -c -f - -T - /var/lib/dpkg /etc/os-release /usr/lib/os-release\" \
             | tar -x -f - --no-same-owner -C {}",
            tree.display()
        ))
        .output()
        .unwrap();
    assert!(extract.status.success(), "{}", text(&extract));
    let scanned = run(
        syft().to_str().unwrap(),
        &[
            "scan",
            &format!("dir:{}", tree.display()),
            "--override-default-catalogers",
            "python-installed-package-cataloger,dpkg-db-cataloger",
            "-o",
            "syft-json",
        ],
    );
    let scanned: serde_json::Value = serde_json::from_str(&scanned).unwrap();
    let mut found: Vec<(String, String, String)> = Vec::new();
    for artifact in scanned["artifacts"].as_array().unwrap() {
        let (Some(name), Some(version)) = (artifact["name"].as_str(), artifact["version"].as_str())
        else {
            continue;
        };
        let in_venv = artifact["locations"].as_array().is_some_and(|locations| {
            locations.iter().any(|location| {
                location["path"]
                    .as_str()
                    .is_some_and(|path| path.starts_with("/opt/venv/"))
            })
        });
        match artifact["type"].as_str() {
            Some("python") if in_venv => found.push((
                "pypi".to_string(),
                imagegen::attest::sbom::pypi_name(name),
                version.to_string(),
            )),
            Some("deb") => found.push(("deb".to_string(), name.to_string(), version.to_string())),
            _ => {}
        }
    }
    let python_count = found.iter().filter(|(kind, ..)| kind == "pypi").count();
    let deb_count = found.len() - python_count;
    // The lock alone holds more than 25 packages; a Debian base more than 80.
    assert!(
        python_count > 25,
        "syft found {python_count} Python packages in the venv: {found:?}"
    );
    assert!(
        deb_count > 80,
        "syft found {deb_count} Debian packages: {found:?}"
    );
    let missing: Vec<&(String, String, String)> = found
        .iter()
        .filter(|package| !components.contains(*package))
        .collect();
    assert!(
        missing.is_empty(),
        "syft finds these packages in {tag} that the SBOM lacks (or lists at another version): {missing:?}"
    );
    (python_count, deb_count)
}

/// What `build --push --format json` reported and recorded, and `imagegen verify` of it: each image
/// pushed by this run (the registry was empty) at the digest it reports, the manifest recording that
/// digest under `repository`, each image's aliases (with and without the OS) waiting on it for a
/// passing self-test on a GPU (`tests` policy: any GPU; none here), no alias moved; `verify` exits
/// 0 with every full tag served as recorded, no drift, and lists the same waiting aliases.
fn check_pushed_and_verified(
    dir: &Path,
    build: &Output,
    image_names: &[&String],
    repository: &str,
    outputs: &mut String,
) {
    let report: serde_json::Value = serde_json::from_slice(&build.stdout)
        .unwrap_or_else(|error| panic!("build --push printed no JSON ({error}):\n{}", text(build)));
    let log = String::from_utf8_lossy(&build.stderr).into_owned();
    let pushed: BTreeMap<String, String> = report["images"]
        .as_array()
        .unwrap_or_else(|| panic!("{report:#}"))
        .iter()
        .map(|result| {
            (
                result["name"].as_str().unwrap_or_default().to_string(),
                result["digest"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        pushed.keys().collect::<BTreeSet<_>>(),
        image_names.iter().copied().collect::<BTreeSet<_>>(),
        "{report:#}"
    );
    for (name, digest) in &pushed {
        assert!(digest.starts_with("sha256:"), "{name}: {report:#}");
        assert!(
            log.contains(&format!(
                "[{name}] == pushed {repository}:{name} {digest}: "
            )),
            "{name} was not pushed as {digest}:\n{log}"
        );
    }
    // What pushing cost, image by image (a derived image sends only its own layers).
    for line in log.lines().filter(|line| line.contains("] == pushed ")) {
        eprintln!("{line}");
    }
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("imagegen-manifest.json")).unwrap())
            .unwrap();
    let minor = TORCH.rsplit_once('.').unwrap().0;
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for name in image_names {
        let (variant, suffix) = if name.contains("-devel-") {
            ("devel", "")
        } else if let Some(flavour) = ["-jupyter", "-ssh"].iter().find(|f| name.ends_with(*f)) {
            ("runtime", *flavour)
        } else {
            ("runtime", "")
        };
        for os in ["", "-debian13"] {
            expected
                .entry(name.to_string())
                .or_default()
                .insert(format!("{minor}-cuda13.0-{variant}{os}{suffix}"));
        }
        let record = &manifest["images"][name.as_str()];
        assert_eq!(record["status"], "ok", "{name}: {record:#}");
        assert_eq!(record["repository"], repository, "{name}: {record:#}");
        assert_eq!(
            record["digest"].as_str(),
            Some(pushed[name.as_str()].as_str()),
            "{name}: {record:#}"
        );
        let awaiting: BTreeSet<String> = record["awaiting_aliases"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no awaiting aliases: {record:#}"))
            .iter()
            .map(|alias| alias.as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(awaiting, expected[name.as_str()], "{record:#}");
    }
    assert!(
        manifest["aliases"]
            .as_object()
            .is_none_or(|aliases| aliases.is_empty()),
        "no alias moves without a passing self-test: {manifest:#}"
    );
    let verify = imagegen(dir, &["verify", "--format", "json"]);
    outputs.push_str(&text(&verify));
    let verified: serde_json::Value = serde_json::from_slice(&verify.stdout)
        .unwrap_or_else(|error| panic!("verify printed no JSON ({error}):\n{}", text(&verify)));
    assert_code(&verify, 0);
    assert_eq!(verified["checked"], image_names.len(), "{verified:#}");
    assert_eq!(verified["drift"], 0, "{verified:#}");
    let waiting: BTreeMap<String, BTreeSet<String>> = verified["waiting_for_tests"]
        .as_array()
        .unwrap_or_else(|| panic!("{verified:#}"))
        .iter()
        .map(|entry| {
            (
                entry["tag"].as_str().unwrap_or_default().to_string(),
                entry["aliases"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|alias| alias.as_str().unwrap_or_default().to_string())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(waiting, expected, "{verified:#}");
}

#[test]
#[ignore = "slow tier: the real torch images from PyPI on a debootstrapped Debian base, built, pushed and verified as the quick start does, their CUDA libraries, compilers and the flavours' services checked; nothing in the quick tier installs a real wheel"]
fn a_runtime_and_a_devel_image_built_for_real_from_pypi_on_a_debootstrapped_base() {
    let mut phases = Phases {
        started: Instant::now(),
        marks: Vec::new(),
    };
    let version = docker(&["version", "--format", "{{.Server.Version}}"]);
    assert!(
        version.status.success(),
        "this test builds a real image and needs a running Docker daemon:\n{}",
        text(&version)
    );
    // Measured at its peak: see FREE_DISK_GIB.
    crate::support::require_free_disk(FREE_DISK_GIB, "the real build");
    let uv = uv();
    let (selftest_build, selftest_binary) = start_selftest_build();
    let base_id = base_image(&mut phases);
    let listed = docker(&["images", "-a", "-q", "--no-trunc"]);
    let mut built = Built {
        tags: Vec::new(),
        images_before: String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        repository: String::new(),
        base_id,
    };

    // The project: the fixture matrix, pointing at this base and at a registry on 127.0.0.1, with
    // the host's CA bundle.
    let project = tempfile::tempdir().unwrap();
    let dir = project.path();
    let repository = unique_name("imagegen-test/real");
    let registry = Registry::start();
    let registry_host = registry.host().to_string();
    built.repository = format!("{registry_host}/{repository}");
    let team_index = TeamIndex::start(dir);
    let matrix =
        std::fs::read_to_string(repository_root().join("tests/fixtures/real-build/matrix.yaml"))
            .unwrap()
            .replace("REGISTRY", &registry_host)
            .replace("REPOSITORY", &repository)
            .replace("BASE_IMAGE", BASE_IMAGE)
            .replace("PORT", &team_index.port.to_string());
    std::fs::write(dir.join("matrix.yaml"), &matrix).unwrap();
    std::fs::create_dir_all(dir.join("steps")).unwrap();
    std::fs::write(
        dir.join("steps/team.Dockerfile"),
        "# The team's config, naming the image's torch.\nRUN mkdir -p /etc/team \\\n && printf 'torch = \"{{ image.torch }}\"\\n' > /etc/team/config.toml\n",
    )
    .unwrap();
    let mut outputs = String::new();
    std::fs::copy(HOST_CA_BUNDLE, dir.join("host-ca.pem")).expect(HOST_CA_BUNDLE);
    std::fs::create_dir_all(dir.join("docker-config")).unwrap();
    std::fs::write(dir.join("docker-config/config.json"), "{}").unwrap();

    let lock = imagegen(dir, &["lock", "--uv", uv.to_str().unwrap()]);
    outputs.push_str(&text(&lock));
    assert_code(&lock, 0);
    phases.mark("imagegen lock (uv, PyPI, the team's index): 4 locks (2 flavours)");
    let runtime_name = format!("{TORCH}-cuda13.0-cudnn9-runtime-debian13");
    let devel_name = format!("{TORCH}-cuda13.0-cudnn9-devel-debian13");
    let runtime_tag = format!("{registry_host}/{repository}:{runtime_name}");
    let devel_tag = format!("{registry_host}/{repository}:{devel_name}");
    built.tags.extend([devel_tag.clone(), runtime_tag.clone()]);
    // The flavours on the runtime image (tests/it/flavour_services.rs checks them).
    built
        .tags
        .extend(["jupyter", "ssh"].map(|f| format!("{runtime_tag}-{f}")));
    let check = imagegen(dir, &["render", "--check"]);
    assert_code(&check, 0);
    assert!(
        text(&check).contains("4 images up to date, 4 locks fresh"),
        "{}",
        text(&check)
    );
    let images = dir.join("images");
    let runtime_lock =
        std::fs::read_to_string(images.join(&runtime_name).join("requirements.lock")).unwrap();
    let dockerfile =
        std::fs::read_to_string(images.join(&runtime_name).join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("\nFROM {BASE_IMAGE}\n")),
        "{dockerfile}"
    );
    // The debootstrapped base has no cuda-compat libraries: no forward-compatibility clauses.
    assert!(
        dockerfile.contains("NVIDIA_REQUIRE_CUDA=\"cuda>=13.0\" \\\n"),
        "{dockerfile}"
    );
    assert!(
        runtime_lock.contains("\ntorch==2.13.0 \\\n"),
        "{runtime_lock}"
    );
    // The extras are in the image's one lock: the team's wheel from its index, einops from PyPI.
    let team_index_url = format!("http://127.0.0.1:{}/simple", team_index.port);
    let team_entry = runtime_lock
        .split("\nteam-lib==0.1.0 \\\n")
        .nth(1)
        .unwrap_or_else(|| panic!("team-lib not in the lock:\n{runtime_lock}"));
    let team_entry: String = team_entry
        .lines()
        .take_while(|line| line.starts_with(' '))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        team_entry.contains(&format!("# from {team_index_url}")),
        "{team_entry}"
    );
    assert!(runtime_lock.contains("\neinops=="), "{runtime_lock}");
    assert!(runtime_lock.contains(
        "# extras (within the pins of the requirements alone): team-lib==0.1.0 | einops"
    ));

    // An extra that would move the torch stack's pins (team-conflict needs sympy<1.0) fails the
    // lock, naming it and why, and leaves the locks as they were.
    std::fs::write(
        dir.join("matrix.yaml"),
        matrix.replace("  - einops\n", "  - einops\n  - team-conflict==0.1.0\n"),
    )
    .unwrap();
    let conflict = imagegen(dir, &["lock", "--uv", uv.to_str().unwrap()]);
    outputs.push_str(&text(&conflict));
    assert_code(&conflict, 2);
    let conflict_text = text(&conflict);
    assert!(
        conflict_text.contains("the pip extras would change the pins of the torch stack")
            && conflict_text.contains("- `team-conflict==0.1.0`:")
            && conflict_text.contains("sympy")
            && !conflict_text.contains("- `einops`"),
        "{conflict_text}"
    );
    eprintln!("an extra that would change torch's pins:\n{conflict_text}");
    std::fs::write(dir.join("matrix.yaml"), &matrix).unwrap();
    assert_eq!(
        std::fs::read_to_string(images.join(&runtime_name).join("requirements.lock")).unwrap(),
        runtime_lock
    );
    phases.mark("a conflicting extra refused by imagegen lock");

    let selftest_output = selftest_build.wait_with_output().unwrap();
    assert!(
        selftest_output.status.success(),
        "cargo build -p gpu-selftest --features cu13:\n{}",
        text(&selftest_output)
    );
    phases.mark("gpu-selftest (CUDA 13 build) ready");
    std::fs::create_dir_all(dir.join("selftest")).unwrap();
    std::fs::copy(&selftest_binary, dir.join("selftest/gpu-selftest-cu13")).unwrap();

    // The build as the README quick start runs it: the images built, tested (no GPU here:
    // skipped), pushed to the registry on 127.0.0.1 and recorded; two at a time (the default
    // --jobs), so devel and the flavours build beside each other once the runtime image they are
    // built FROM is there (and pushed: their parent's layers are then in the registry once).
    let build = imagegen(
        dir,
        &[
            "build",
            "--selftest-dir",
            "selftest",
            "--push",
            "--format",
            "json",
        ],
    );
    outputs.push_str(&text(&build));
    let build_log = std::fs::read_to_string(
        dir.join(".imagegen/logs")
            .join(format!("{runtime_name}.log")),
    )
    .unwrap_or_default();
    assert_code(&build, 0);
    phases.mark("imagegen build --push: runtime, devel and the two flavours");
    // The heartbeat of a real build (no terminal: a `still …` line for an image quiet for 15 s)
    // names the phase running now, never an event that already happened ("still built …",
    // "still normalized …", "still moving …").
    let build_text = text(&build);
    let heartbeats: Vec<&str> = build_text
        .lines()
        .filter(|line| line.contains("] still "))
        .collect();
    const PHASES: [&str; 6] = [
        "building the image (docker build)",
        "making the venv on the host",
        "exporting its layers from the daemon and normalizing them",
        "loading the normalized image into the daemon",
        "pushing ",
        "testing: gpu-selftest",
    ];
    assert!(
        !heartbeats.is_empty(),
        "a build of many minutes printed no heartbeat:\n{build_text}"
    );
    for beat in &heartbeats {
        let phase = beat.split_once("] still ").unwrap().1;
        assert!(
            PHASES.iter().any(|known| phase.starts_with(known)),
            "a heartbeat that names no phase running now: {beat}"
        );
    }
    let named: BTreeSet<&str> = heartbeats
        .iter()
        .filter_map(|beat| {
            let phase = beat.split_once("] still ").unwrap().1;
            PHASES
                .iter()
                .copied()
                .find(|known| phase.starts_with(known))
        })
        .collect();
    eprintln!(
        "{} heartbeats, naming: {named:?}; the first: {}",
        heartbeats.len(),
        heartbeats[0]
    );
    assert!(
        named.contains("building the image (docker build)"),
        "no heartbeat named the Docker build: {heartbeats:#?}"
    );
    let flavour_names = ["jupyter", "ssh"].map(|flavour| format!("{runtime_name}-{flavour}"));
    let image_names: Vec<&String> = [&runtime_name, &devel_name]
        .into_iter()
        .chain(&flavour_names)
        .collect();
    check_pushed_and_verified(
        dir,
        &build,
        &image_names,
        &format!("{registry_host}/{repository}"),
        &mut outputs,
    );
    phases.mark(&format!(
        "pushed digests and waiting aliases recorded; imagegen verify: {} full tags served as recorded",
        image_names.len()
    ));
    // apt fetched from Debian's security archive through mirrors.debian_security; when another
    // run on this daemon left the apt layer in the build cache, the log says so and shows no
    // fetch, and the mirror is then checked in the image's apt sources instead.
    let security = "http://security.debian.org/debian-security";
    if build_log.contains("Using cache") && !build_log.contains(security) {
        let sources = run(
            "docker",
            &[
                "run",
                "--rm",
                "--entrypoint",
                "sh",
                &runtime_tag,
                "-c",
                "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null",
            ],
        );
        assert!(sources.contains(security), "{sources}");
    } else {
        assert!(
            build_log.contains(&format!("{security} trixie-security")),
            "apt reached Debian's security archive through mirrors.debian_security:\n{build_log}"
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("imagegen-manifest.json")).unwrap())
            .unwrap();
    let record = &manifest["images"][&runtime_name];
    // The venv is cut along its wheels (issue 48): torch's and the large CUDA libraries' files
    // first, below the base, each in its own layer; the loader cache and the lock last; the
    // jupyter image, built FROM it, starts with the same layers (a node holding one reuses them).
    let parts = record["size"]["parts"]
        .as_array()
        .expect("each layer recorded")
        .clone();
    let holds: Vec<&str> = parts
        .iter()
        .map(|part| part["holds"].as_str().unwrap_or(""))
        .collect();
    let below: Vec<&&str> = holds
        .iter()
        .take_while(|holds| {
            holds.starts_with("imagegen: ") && holds.contains(" installed into /opt/venv")
        })
        .collect();
    assert!(
        below.len() >= 4
            && below
                .iter()
                .any(|holds| holds.starts_with("imagegen: torch-2.13.0-")),
        "the large wheels' layers come first: {holds:#?}"
    );
    assert!(
        !below.iter().any(|holds| holds.contains("group ")),
        "{holds:#?}"
    );
    assert!(
        holds
            .last()
            .unwrap()
            .contains("what host-venv.sh wrote besides bytecode"),
        "{holds:#?}"
    );
    assert!(
        holds
            .iter()
            .any(|holds| holds.starts_with("imagegen: group ")),
        "{holds:#?}"
    );
    assert!(parts.len() < 127, "{} layers", parts.len());
    let flavour = manifest["images"][&flavour_names[0]]["size"]["parts"]
        .as_array()
        .expect("the flavour's layers recorded")
        .clone();
    assert_eq!(
        flavour[..parts.len()]
            .iter()
            .map(|part| &part["digest"])
            .collect::<Vec<_>>(),
        parts.iter().map(|part| &part["digest"]).collect::<Vec<_>>(),
        "the flavour image starts with its runtime image's layers"
    );
    eprintln!(
        "the runtime image's {} layers: {} of large wheels below the base",
        parts.len(),
        below.len()
    );
    assert_eq!(record["selftest"]["status"], "skipped", "{record:#}");
    assert!(
        record["selftest"]["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot load libcuda.so.1"),
        "{:#}",
        record["selftest"]
    );

    // torch, CUDA, cuDNN and NCCL as the labels say; torch.compile; the lock; the loader cache.
    let labels = labels_of(&runtime_tag);
    let report = python_in(&runtime_tag, RUNTIME_CHECKS);
    phases.mark(&format!(
        "runtime checks (torch.compile on the CPU: {} s)",
        report["compile_seconds"]
    ));
    let torch_version = report["torch"].as_str().unwrap();
    assert_eq!(
        torch_version.split('+').next().unwrap(),
        labels["imagegen.torch"],
        "{report:#}"
    );
    assert_eq!(report["cuda"], labels["imagegen.cuda"].as_str());
    assert_eq!(labels["imagegen.cuda"], "13.0");
    let cudnn = report["cudnn"].as_u64().unwrap();
    assert_eq!(
        format!("{}.{}.{}", cudnn / 10000, cudnn % 10000 / 100, cudnn % 100),
        first_three(&labels["imagegen.cudnn"]),
        "{report:#}"
    );
    assert_eq!(report["nccl"], labels["imagegen.nccl"].as_str());
    // PyPI's torchvision says `0.28.0+cu130` of itself: the release is the part before `+`.
    for companion in ["torchvision", "torchaudio"] {
        let reported = report[companion].as_str().unwrap();
        assert_eq!(
            reported.split('+').next().unwrap(),
            labels[&format!("imagegen.{companion}")],
            "{report:#}"
        );
    }
    assert_eq!(report["compile_matches_eager"], true, "{report:#}");
    let cache: BTreeSet<&str> = report["loader_cache"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry.as_str())
        .collect();
    for library in [
        "libcudart.so.13",
        "libcublas.so.13",
        "libcudnn.so.9",
        "libnccl.so.2",
        "libnvJitLink.so.13",
    ] {
        assert!(
            cache.contains(library),
            "{library} not in the loader cache: {cache:?}"
        );
    }
    let installed: BTreeSet<String> = report["pip"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| normalized(entry.as_str().unwrap()))
        .collect();
    let locked = pins(&runtime_lock);
    assert!(locked.len() > 25, "{locked:?}");
    let missing: Vec<&String> = locked.difference(&installed).collect();
    assert!(
        missing.is_empty(),
        "installed differs from the lock: {missing:?}"
    );
    let extra: Vec<&String> = installed
        .difference(&locked)
        .filter(|pin| !pin.starts_with("pip=="))
        .collect();
    assert!(extra.is_empty(), "installed beyond the lock: {extra:?}");

    // The additions, inside the image as its user: the devel image, which holds the runtime
    // image's and runs the team's step (the fixture's include rule; a runtime image with
    // `wheels: host` takes no step).
    let additions = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        &devel_tag,
        "bash",
        "-c",
        ADDITIONS_CHECKS,
    ]);
    assert!(additions.status.success(), "{}", text(&additions));
    let additions = String::from_utf8_lossy(&additions.stdout).to_string();
    eprintln!("additions in the image:\n{additions}");
    assert!(
        additions.contains(
            "id=1000:1000 pwd=/workspace home=/home/dev team_config=/etc/team/config.toml"
        ),
        "{additions}"
    );
    let locked_einops = runtime_lock
        .lines()
        .find_map(|line| line.strip_prefix("einops=="))
        .map(|version| version.trim_end_matches([' ', '\\']).to_string())
        .unwrap();
    assert!(
        additions.contains(&format!(
            "{{\"team_lib\": \"0.1.0\", \"einops\": \"{locked_einops}\"}}"
        )),
        "{additions}"
    );
    assert!(
        additions.contains("No broken requirements found."),
        "{additions}"
    );
    assert!(additions.contains("torch = \"2.13.0\""), "{additions}");
    assert!(additions.contains("htop=3."), "{additions}");
    assert!(!additions.contains("venv writable"), "{additions}");
    let owned: Vec<&str> = additions
        .split("owned:\n")
        .nth(1)
        .unwrap()
        .lines()
        .filter(|line| !line.is_empty())
        .collect();
    assert!(
        owned.contains(&"/home/dev") && owned.contains(&"/workspace"),
        "{owned:?}"
    );
    let stray: Vec<&&str> = owned
        .iter()
        .filter(|path| !path.starts_with("/home/dev") && **path != "/workspace")
        .collect();
    assert!(
        stray.is_empty(),
        "the user owns more than its home and workdir: {stray:?}"
    );
    let record_packages = record["packages"]["os"].to_string();
    assert!(record_packages.contains("htop"), "{record_packages}");
    phases.mark("additions checked in the image (user, packages, step, apt)");
    for line in crate::flavour_services::check_real_build_flavours(
        dir,
        &format!("{registry_host}/{repository}"),
        &runtime_name,
        "dev",
        1000,
    ) {
        phases.mark(&line);
    }

    // gpu-selftest, the CUDA 13 build, in the image: exit 2 with its "no driver" report.
    let selftest = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        &runtime_tag,
        "gpu-selftest",
        "--format",
        "json",
    ]);
    assert_eq!(selftest.status.code(), Some(2), "{}", text(&selftest));
    let selftest_report: serde_json::Value = serde_json::from_slice(&selftest.stdout).unwrap();
    assert_eq!(selftest_report["overall"], "error");
    assert_eq!(selftest_report["cuda_build_major"], "13");
    assert!(selftest_report["checks"].as_array().unwrap().is_empty());
    assert!(
        selftest_report["error"]
            .as_str()
            .unwrap()
            .contains("cannot load libcuda.so.1 (the NVIDIA driver library)"),
        "{selftest_report:#}"
    );

    // The labels name what the image holds: its CUDA runtime is the lock's wheel; the Debian base
    // holds no CUDA toolkit, so no label names one.
    let locked_runtime = runtime_lock
        .lines()
        .find_map(|line| line.strip_prefix("nvidia-cuda-runtime=="))
        .map(|version| version.trim_end_matches([' ', '\\']).to_string())
        .unwrap_or_else(|| panic!("no nvidia-cuda-runtime in the lock:\n{runtime_lock}"));
    assert_eq!(
        labels["imagegen.cuda.runtime"], locked_runtime,
        "{labels:#?}"
    );
    assert!(
        !labels.contains_key("imagegen.cuda.toolkit"),
        "a Debian base holds no CUDA toolkit: {labels:#?}"
    );
    let no_toolkit = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        &runtime_tag,
        "test",
        "!",
        "-e",
        "/usr/local/cuda/version.json",
    ]);
    assert!(no_toolkit.status.success(), "{}", text(&no_toolkit));

    // syft reads gpu-selftest's crates from the binary in the image (cargo-auditable's .dep-v0
    // section): every crate linked into it, each at its Cargo.lock version, and nothing else.
    let scan_folder = tempfile::tempdir().unwrap();
    let container = format!("{}-selftest", unique_name("imagegen-test-real"));
    let created = docker(&[
        "create",
        "--name",
        &container,
        "--label",
        &format!("{}={}", crate::support::RUN_LABEL, crate::support::run_id()),
        &runtime_tag,
    ]);
    assert!(created.status.success(), "{}", text(&created));
    let copied = docker(&[
        "cp",
        &format!("{container}:/usr/local/bin/gpu-selftest"),
        scan_folder.path().to_str().unwrap(),
    ]);
    let _ = docker(&["rm", &container]);
    assert!(copied.status.success(), "{}", text(&copied));
    let scanned_binary = scan_folder.path().join("gpu-selftest");
    let sbom = run(
        syft().to_str().unwrap(),
        &[
            "scan",
            &format!("file:{}", scanned_binary.display()),
            "-o",
            "syft-json",
            "-q",
        ],
    );
    let sbom: serde_json::Value = serde_json::from_str(&sbom).unwrap();
    let listed: BTreeSet<String> = sbom["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|artifact| artifact["type"] == "rust-crate")
        .map(|artifact| {
            format!(
                "{} v{}",
                artifact["name"].as_str().unwrap(),
                artifact["version"].as_str().unwrap()
            )
        })
        .collect();
    let linked = selftest_linked_crates();
    assert!(linked.len() > 20, "cargo tree: {linked:?}");
    let unlisted: Vec<&String> = linked.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "syft does not list these crates of gpu-selftest: {unlisted:?} (it lists {listed:?})"
    );
    let locked_crates = cargo_lock_crates();
    let not_locked: Vec<&String> = listed.difference(&locked_crates).collect();
    assert!(
        not_locked.is_empty(),
        "syft lists crates at versions Cargo.lock does not have: {not_locked:?}"
    );
    phases.mark(&format!(
        "syft: {} crates of gpu-selftest, {} linked ones all at their Cargo.lock versions",
        listed.len(),
        linked.len()
    ));

    // The image's package record (the manifest) lists the same binary: its version, its sha256,
    // its crates as cargo-auditable recorded them.
    let binaries = record["packages"]["binaries"]
        .as_array()
        .unwrap_or_else(|| {
            panic!(
                "no binaries in the package record: {:#}",
                record["packages"]
            )
        });
    assert_eq!(binaries.len(), 1, "{binaries:#?}");
    let recorded = &binaries[0];
    assert_eq!(recorded["path"], "/usr/local/bin/gpu-selftest");
    assert_eq!(recorded["name"], "gpu-selftest");
    let selftest_version = linked
        .iter()
        .find_map(|entry| entry.strip_prefix("gpu-selftest v"))
        .unwrap();
    assert_eq!(recorded["version"], selftest_version, "{recorded:#}");
    let scanned_bytes = std::fs::read(&scanned_binary).unwrap();
    assert_eq!(
        recorded["sha256"],
        imagegen::model::digest::Digest::of(&scanned_bytes).to_string(),
        "the record's sha256 is the binary's in the image"
    );
    let recorded_crates: BTreeSet<String> = recorded["crates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry.as_str().unwrap().replacen("==", " v", 1))
        .collect();
    let missing_in_record: Vec<&String> = linked
        .iter()
        .filter(|entry| !entry.starts_with("gpu-selftest v") && !recorded_crates.contains(*entry))
        .collect();
    assert!(
        missing_in_record.is_empty(),
        "the package record lacks these crates: {missing_in_record:?}"
    );
    let not_scanned: Vec<&String> = recorded_crates.difference(&listed).collect();
    assert!(
        not_scanned.is_empty(),
        "recorded but not seen by syft: {not_scanned:?}"
    );

    // The SBOM imagegen attests for this image, valid CycloneDX 1.6 by cyclonedx-python-lib's
    // strict validator, holds every package syft finds in the same image: each Python package of
    // the venv and each Debian package of the dpkg database, at the version syft reads.
    let (python_count, deb_count) = sbom_holds_what_syft_finds(dir, &runtime_name, &runtime_tag);
    phases.mark(&format!(
        "SBOM (CycloneDX 1.6, strict) holds all {python_count} Python and {deb_count} Debian packages syft finds in the image"
    ));

    // The CA bundle at run time: nothing passed to `docker run`, and the network of the machine,
    // whose TLS-intercepting proxy only the CA bundle makes trusted.
    let mut ca_run = Command::new("docker")
        .args([
            "run",
            "--rm",
            "-i",
            &runtime_tag,
            "python",
            "-",
            &CA_VARIABLES.join(","),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ca_run
        .stdin
        .take()
        .unwrap()
        .write_all(CA_CHECKS.as_bytes())
        .unwrap();
    let ca_output = ca_run.wait_with_output().unwrap();
    assert!(ca_output.status.success(), "{}", text(&ca_output));
    let ca: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&ca_output.stdout)
            .lines()
            .last()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|error| panic!("{error}: {}", text(&ca_output)));
    eprintln!("CA bundle at run time: {ca}");
    for variable in CA_VARIABLES {
        assert_eq!(
            ca["environment"][variable], "/etc/ssl/certs/ca-certificates.crt",
            "{variable}: {ca:#}"
        );
    }
    assert_eq!(ca["pip"], "ok", "pip install from PyPI: {ca:#}");
    for client in ["requests", "httpx", "urllib"] {
        assert_eq!(ca["with"][client], 200, "{client}: {ca:#}");
    }
    // certifi (installed by pip above) does not hold the proxy's CA: without the variables,
    // requests and httpx fail on the certificate. So the proxy intercepts, and the variables are
    // what make them work.
    assert!(
        ca["with"]["certifi"]
            .as_str()
            .unwrap_or_default()
            .ends_with("certifi/cacert.pem"),
        "{ca:#}"
    );
    for client in ["requests", "httpx"] {
        assert!(
            ca["without"][client]
                .as_str()
                .unwrap_or_default()
                .contains("CERTIFICATE_VERIFY_FAILED"),
            "{client} without the CA variables must fail on the proxy's certificate: {ca:#}"
        );
    }
    // curl: the Debian runtime image does not install it; where it is there it must reach PyPI.
    if let Some(code) = ca["curl"].as_str() {
        assert_eq!(code, "200", "curl: {ca:#}");
    }
    phases.mark(&format!(
        "CA bundle at run time: pip, requests, httpx, urllib reach PyPI (curl: {})",
        ca["curl"].as_str().unwrap_or("not in the image")
    ));

    // The devel image: nvcc from PyPI, extensions compile, -lcuda links against the stub.
    let devel_labels = labels_of(&devel_tag);
    let devel = python_in(&devel_tag, DEVEL_CHECKS);
    phases.mark(&format!(
        "devel checks (CPU extension {} s, CUDA extension {} s)",
        devel["cpu_seconds"], devel["cuda_seconds"]
    ));
    assert_eq!(devel["cuda_home"], "/usr/local/cuda");
    assert!(
        devel["nvcc"].as_str().unwrap().contains("cuda_13.0"),
        "{devel:#}"
    );
    assert_eq!(devel["cpu_extension"], serde_json::json!([1.0, 1.0, 1.0]));
    let header_versions: Vec<String> = devel["header_versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|part| part.to_string())
        .collect();
    assert_eq!(
        header_versions[..3].join("."),
        devel_labels["imagegen.nccl"]
    );
    assert_eq!(
        header_versions[3..].join("."),
        first_three(&devel_labels["imagegen.cudnn"])
    );
    assert!(
        devel["driver_program_needs"]
            .as_str()
            .unwrap()
            .contains("Shared library: [libcuda.so.1]"),
        "{devel:#}"
    );
    assert!(
        devel["library_path"]
            .as_str()
            .unwrap()
            .starts_with("/usr/local/cuda/lib64/stubs:"),
        "{devel:#}"
    );
    assert_eq!(
        devel["libcuda_in_loader_cache"], false,
        "the stub is for linking only, never for the loader"
    );
    assert_eq!(
        devel["ssl_cert_file"], "/etc/ssl/certs/ca-certificates.crt",
        "the devel image inherits the CA variables"
    );
    // The nvcc label is the lock's toolkit wheel; nvcc's own `--version` is printed beside it.
    let devel_lock =
        std::fs::read_to_string(images.join(&devel_name).join("requirements.lock")).unwrap();
    let locked_nvcc = devel_lock
        .lines()
        .find_map(|line| line.strip_prefix("nvidia-cuda-nvcc=="))
        .map(|version| version.trim_end_matches([' ', '\\']).to_string())
        .unwrap_or_else(|| panic!("no nvidia-cuda-nvcc in the devel lock:\n{devel_lock}"));
    eprintln!(
        "imagegen.cuda.nvcc={} (nvcc says: {})",
        devel_labels["imagegen.cuda.nvcc"], devel["nvcc_release"]
    );
    assert_eq!(devel_labels["imagegen.cuda.nvcc"], locked_nvcc);
    assert_eq!(devel_labels["imagegen.cuda.runtime"], locked_runtime);
    assert!(!devel_labels.contains_key("imagegen.cuda.toolkit"));

    // The layers, for BENCHMARKS.md.
    let history = docker(&[
        "history",
        "--no-trunc",
        "--human=false",
        "--format",
        "{{.Size}}\t{{.CreatedBy}}",
        &runtime_tag,
    ]);
    let size = docker(&["image", "inspect", "--format", "{{.Size}}", &runtime_tag]);
    eprintln!(
        "runtime image {runtime_tag}: {} bytes; layers, newest first:",
        String::from_utf8_lossy(&size.stdout).trim()
    );
    for line in String::from_utf8_lossy(&history.stdout).lines() {
        let (bytes, created_by) = line.split_once('\t').unwrap_or((line, ""));
        let bytes: u64 = bytes.parse().unwrap_or(0);
        if bytes > 0 {
            let created_by: String = created_by.chars().take(100).collect();
            eprintln!("  {:>10.1} MB  {created_by}", bytes as f64 / 1e6);
        }
    }

    // A lock whose hashes do not match what the index serves: pip refuses to install it.
    let lock_path = images.join(&runtime_name).join("requirements.lock");
    let first_package = runtime_lock
        .lines()
        .find(|line| !line.starts_with([' ', '#']) && line.contains("=="))
        .unwrap()
        .split("==")
        .next()
        .unwrap()
        .to_string();
    let mut tampered = String::new();
    let mut in_first = false;
    for line in runtime_lock.lines() {
        if !line.starts_with([' ', '#']) {
            in_first = line.starts_with(&format!("{first_package}=="));
        }
        if in_first && line.trim_start().starts_with("--hash=sha256:") {
            let digest: String = line.trim_start()["--hash=sha256:".len()..]
                .chars()
                .take(64)
                .collect();
            // Another hash of the same length: every file of the package now "differs".
            let changed: String = digest
                .chars()
                .map(|c| if c == '0' { '1' } else { '0' })
                .collect();
            tampered.push_str(&line.replace(&digest, &changed));
        } else {
            tampered.push_str(line);
        }
        tampered.push('\n');
    }
    assert_ne!(tampered, runtime_lock);
    std::fs::write(&lock_path, &tampered).unwrap();
    assert_code(&imagegen(dir, &["render"]), 0);
    let refused = build_runtime_only(dir, &runtime_name);
    // The host-side wheel cache refuses it before any build: no file has a hash it allows.
    assert_code(&refused, 2);
    let refused_log = text(&refused);
    assert!(
        refused_log.contains(&format!("{first_package}=="))
            && refused_log.contains("with a sha256 the lock allows"),
        "a tampered lock must fail the build on its hashes:\n{refused_log}"
    );
    phases.mark("tampered lock refused by the wheel cache");

    // The team's password is nowhere: not in the image's history or layers, the build logs,
    // the manifest, the rendered files and locks, nor anything imagegen printed.
    let password = team_index_password();
    let history = docker(&["history", "--no-trunc", &runtime_tag]);
    assert!(history.status.success());
    assert!(!text(&history).contains(password));
    assert!(!outputs.contains(password), "imagegen printed the password");
    let save = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "docker save {devel_tag} | grep -a -c -F -e {password} || true"
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&save.stdout).trim(),
        "0",
        "the password is in the images' layers"
    );
    let mut searched = 0;
    for folder in [dir.join(".imagegen"), dir.join("images")] {
        let found = Command::new("grep")
            .args(["-r", "-l", "-F", "-e", password])
            .arg(&folder)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&found.stdout).trim().is_empty(),
            "the password is in {}",
            String::from_utf8_lossy(&found.stdout)
        );
        searched += 1;
    }
    assert_eq!(searched, 2);
    let manifest_text = std::fs::read_to_string(dir.join("imagegen-manifest.json")).unwrap();
    assert!(!manifest_text.contains(password));
    assert!(
        manifest_text.contains("ext.pip"),
        "the manifest records the additions' inputs"
    );
    phases.mark("the team's password is in no history, layer, log, file or manifest");

    drop(team_index);

    eprintln!("phases:");
    for (what, seconds) in &phases.marks {
        eprintln!("  {seconds:7.1} s  {what}");
    }
    drop(built);
}
