//! SIGINT (Ctrl-C) and SIGTERM (what CI runners send on cancel): both stop a command the same
//! way, with cleanup, and the exit code says which one it was (130 or 143, 128 + the signal).

/// The signal that stopped a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    pub(crate) fn exit_code(self) -> i32 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment [`Signals::listen`] returns: from then on neither
/// ends the process by itself; [`Signals::recv`] reports them so the command stops cleanly,
/// writes down what it finished and exits 130 or 143. Must be created inside a Tokio runtime;
/// a handler that cannot be installed leaves that signal its default action.
pub(crate) struct Signals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub(crate) fn listen() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves when SIGINT or SIGTERM arrives (or arrived since `listen`), with the one that did.
    pub(crate) async fn recv(&mut self) -> Signal {
        match (&mut self.interrupt, &mut self.terminate) {
            (Some(interrupt), Some(terminate)) => tokio::select! {
                _ = interrupt.recv() => Signal::Interrupt,
                _ = terminate.recv() => Signal::Terminate,
            },
            (Some(interrupt), None) => {
                interrupt.recv().await;
                Signal::Interrupt
            }
            (None, Some(terminate)) => {
                terminate.recv().await;
                Signal::Terminate
            }
            (None, None) => std::future::pending().await,
        }
    }
}
