//! The Debian bases the tests that need a real dpkg and apt build on: a minbase debootstrap of a
//! suite with Debian's own sources (archive, updates, security), imported as
//! `imagegen-test/<suite>-minbase:1`. The real-build test (and the offline example it proves)
//! builds on trixie (Debian 13, the supported release); `host_venv.rs` and the apt-lock test keep
//! bookworm (Debian 12), whose Python 3.11 paths and debian12 fixtures they check. Made when it is
//! not there (debootstrap needs root, or `sudo -n`, and deb.debian.org), removed when the test
//! process exits unless kept (`IMAGEGEN_TEST_KEEP_BASES=1`). The slow tier's tests run beside each
//! other and share each base: one debootstrap per suite and test process.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use super::project::text;

pub const BOOKWORM_BASE: &str = "imagegen-test/bookworm-minbase:1";
pub const TRIXIE_BASE: &str = "imagegen-test/trixie-minbase:1";

/// One test of this process makes a base at a time.
static MAKING: Mutex<()> = Mutex::new(());

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI (docker.io)")
}

fn as_root(program: &str) -> Command {
    let id = Command::new("id").arg("-u").output().expect("id -u");
    if String::from_utf8_lossy(&id.stdout).trim() == "0" {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.args(["-n", program]);
        command
    }
}

/// The bookworm base's image id, made first when the daemon does not have it.
pub fn bookworm_base() -> String {
    base("bookworm", BOOKWORM_BASE)
}

/// The trixie base's image id, made first when the daemon does not have it.
pub fn trixie_base() -> String {
    base("trixie", TRIXIE_BASE)
}

/// The base of Debian `suite`, imported as `image`: its id, made first when the daemon lacks it.
fn base(suite: &str, image: &str) -> String {
    let _making = MAKING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let inspect = docker(&["image", "inspect", "--format", "{{.Id}}", image]);
    if inspect.status.success() {
        return String::from_utf8_lossy(&inspect.stdout).trim().to_string();
    }
    assert!(
        Path::new("/usr/sbin/debootstrap").exists(),
        "/usr/sbin/debootstrap is missing; run .ci/install-deps.sh (debootstrap)"
    );
    let folder = tempfile::tempdir().unwrap();
    let rootfs = folder.path().join("rootfs");
    let rootfs_text = rootfs.to_str().unwrap();
    let output = as_root("/usr/sbin/debootstrap")
        .args([
            "--variant=minbase",
            suite,
            rootfs_text,
            "http://deb.debian.org/debian",
        ])
        .output()
        .expect("debootstrap");
    assert!(
        output.status.success(),
        "debootstrap failed (it needs root and deb.debian.org):\n{}",
        text(&output)
    );
    let sources = format!("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {suite} {suite}-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: {suite}-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n");
    let mut write = as_root("tee")
        .arg(format!(
            "{rootfs_text}/etc/apt/sources.list.d/debian.sources"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    write
        .stdin
        .take()
        .unwrap()
        .write_all(sources.as_bytes())
        .unwrap();
    assert!(write.wait().unwrap().success());
    let cleanup = as_root("sh")
        .arg("-c")
        .arg(format!(
            "rm -rf {0}/etc/apt/sources.list {0}/var/cache/apt/archives/*.deb {0}/var/cache/apt/*.bin {0}/var/lib/apt/lists/* {0}/var/log/* {0}/tmp/*",
            rootfs_text
        ))
        .status()
        .unwrap();
    assert!(cleanup.success());
    let mut tar = as_root("tar")
        .args(["--numeric-owner", "-C", rootfs_text, "-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tar");
    let import = Command::new("docker")
        .args(["import", "--change", "CMD [\"bash\"]", "-", image])
        .stdin(tar.stdout.take().unwrap())
        .output()
        .expect("docker import");
    assert!(tar.wait().unwrap().success(), "tar of the rootfs failed");
    assert!(import.status.success(), "docker import: {}", text(&import));
    super::remove_at_exit(image);
    let _ = as_root("rm").args(["-rf", rootfs_text]).status();
    let inspect = docker(&["image", "inspect", "--format", "{{.Id}}", image]);
    String::from_utf8_lossy(&inspect.stdout).trim().to_string()
}
