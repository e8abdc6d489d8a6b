//! The manifest file as the record side of alias moves ([`ManifestLedger`], the
//! `pipeline::alias_move::AliasLedger` of `build`, `publish` and `rollback`), this run's identity
//! ([`RunId`]: which machine boot, which process, started when), and waiting for a lock from async
//! code. A run id names a process so exactly that a later run can tell whether it is gone: the
//! cleanup of leftovers of dead runs never touches a live run's.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use crate::history::alias_transaction::Owner;
use crate::history::manifest::Manifest;
use crate::pipeline::alias_move::{AliasLedger, Claim};
use crate::project::{
    boot_id, lock_timeout_error, process_start, waiting_line, LockHolder, ManifestFile,
    ProjectLock, LOCK_POLL,
};

/// One process on one machine boot: `<boot>-<pid>-<start>`, where `boot` is the first 12 hex
/// digits of the kernel's boot id and `start` the process start time in clock ticks since boot.
/// Unique for as long as the machine runs, unlike a pid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunId {
    pub(crate) boot: String,
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

/// Whether a run is still going, as far as this machine can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    Alive,
    Gone,
    /// Another machine (or boot), or a run id of another form: nothing can be said.
    Unknown,
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}-{}", self.boot, self.pid, self.start)
    }
}

impl RunId {
    /// This process.
    pub(crate) fn this_process() -> RunId {
        let pid = std::process::id();
        RunId {
            boot: boot_id(),
            pid,
            start: process_start(pid).unwrap_or(0),
        }
    }

    /// A run id as [`Display`](std::fmt::Display) writes it; `None` for anything else (an
    /// older imagegen's `pid-nanos`).
    pub(crate) fn parse(text: &str) -> Option<RunId> {
        let mut parts = text.splitn(3, '-');
        let boot = parts.next()?;
        let pid = parts.next()?.parse().ok()?;
        let start = parts.next()?.parse().ok()?;
        (boot.len() == 12 && boot.chars().all(|c| c.is_ascii_hexdigit())).then(|| RunId {
            boot: boot.to_string(),
            pid,
            start,
        })
    }

    /// Whether this run is still going: on this machine's boot, its pid is alive with the same
    /// start time.
    pub(crate) fn liveness(&self) -> Liveness {
        if self.boot != boot_id() || self.start == 0 {
            return Liveness::Unknown;
        }
        match process_start(self.pid) {
            Some(start) if start == self.start => Liveness::Alive,
            _ => Liveness::Gone,
        }
    }
}

/// This run as the owner of the alias moves it makes.
pub(crate) fn this_owner() -> Owner {
    Owner {
        run: RunId::this_process().to_string(),
        by: LockHolder::this_run(),
    }
}

/// Takes the lock at `path` from async code, waiting (without blocking a worker) up to
/// `timeout`; `on_wait` gets one "waiting for ..." line, and the deadline is an error naming the
/// holder.
pub(crate) async fn wait_for_lock(
    path: &Path,
    what: &str,
    timeout: std::time::Duration,
    mut on_wait: impl FnMut(&str),
) -> Result<ProjectLock> {
    let start = Instant::now();
    let mut announced = false;
    loop {
        match ProjectLock::try_acquire(path)? {
            Ok(lock) => return Ok(lock),
            Err(holder) => {
                if start.elapsed() >= timeout {
                    return Err(lock_timeout_error(what, &holder, timeout));
                }
                if !announced {
                    on_wait(&waiting_line(what, &holder));
                    announced = true;
                }
                tokio::time::sleep(LOCK_POLL).await;
            }
        }
    }
}

/// The manifest file as the ledger of alias moves: an alias's lock beside the manifest's, and
/// every write a locked read-change-write.
pub(crate) struct ManifestLedger {
    pub(crate) file: ManifestFile,
    /// Where the "waiting for alias ..." line goes.
    pub(crate) on_wait: Box<dyn Fn(&str) + Send + Sync>,
}

impl ManifestLedger {
    /// A ledger that prints its waiting line on stderr.
    pub(crate) fn new(file: ManifestFile) -> ManifestLedger {
        ManifestLedger {
            file,
            on_wait: Box::new(|line| eprintln!("{line}")),
        }
    }
}

impl AliasLedger for ManifestLedger {
    async fn hold_alias(&self, alias: &str) -> Result<Claim> {
        let path = self.file.alias_lock_path(alias)?;
        let what = format!("alias {alias}, which another run is moving");
        let lock = wait_for_lock(&path, &what, self.file.lock_timeout(), |line| {
            (self.on_wait)(line)
        })
        .await?;
        Ok(Box::new(lock))
    }

    fn write<T>(&self, change: impl FnOnce(&mut Manifest) -> T) -> Result<T> {
        // Waiting for the manifest's lock blocks: off the async workers where there are several.
        match tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                tokio::task::block_in_place(|| self.file.update(change))
            }
            _ => self.file.update(change),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_run_is_alive_and_a_dead_or_foreign_one_is_told_apart() {
        let me = RunId::this_process();
        assert_eq!(RunId::parse(&me.to_string()), Some(me.clone()));
        assert_eq!(me.liveness(), Liveness::Alive);
        let restarted = RunId {
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(
            restarted.liveness(),
            Liveness::Gone,
            "same pid, another process"
        );
        let elsewhere = RunId {
            boot: "abcdefabcdef".into(),
            ..me.clone()
        };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown);
        assert_eq!(RunId::parse("4242-1732961234123456789"), None);
    }
}
