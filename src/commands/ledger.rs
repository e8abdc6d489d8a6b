//! This run's identity in the ledger: [`RunId`] (which machine boot, which process, started
//! when) and the [`Owner`] of the alias moves it makes. A run id names a process so exactly that
//! a later run can tell whether it is gone: the cleanup of leftovers of dead runs never touches a
//! live run's. It changes nothing itself: the manifest changes through `history::ledger`.

use crate::history::alias_transaction::Owner;
use crate::project::{boot_id, process_start, LockHolder};

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
