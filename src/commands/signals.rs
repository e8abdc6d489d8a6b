//! SIGINT (Ctrl-C) and SIGTERM (what CI runners send on cancel): both stop a command the same
//! way, with cleanup, and the exit code says which one it was (130 or 143, 128 + the signal).

/// The signal that stopped a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    pub fn exit_code(self) -> i32 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// Resolves when SIGINT or SIGTERM arrives, with the one that did. Must run inside a Tokio
/// runtime; if a handler cannot be installed, that signal keeps its default action.
pub async fn interrupted() -> Signal {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    match (interrupt, terminate) {
        (Ok(mut interrupt), Ok(mut terminate)) => tokio::select! {
            _ = interrupt.recv() => Signal::Interrupt,
            _ = terminate.recv() => Signal::Terminate,
        },
        (Ok(mut interrupt), Err(_)) => {
            interrupt.recv().await;
            Signal::Interrupt
        }
        (Err(_), Ok(mut terminate)) => {
            terminate.recv().await;
            Signal::Terminate
        }
        (Err(_), Err(_)) => std::future::pending().await,
    }
}
