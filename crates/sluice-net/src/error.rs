//! The data plane's errors, by whose fault they are.

use sluice_types::Error;

/// Why a link or a channel of the data plane failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// The peer runs another protocol version; no retry helps until the
    /// same release runs on both.
    #[error("{0}")]
    VersionMismatch(String),
    /// The connection to the peer could not be made or broke (the peer
    /// died, the network failed); a later deployment reconnects.
    #[error("data plane link to worker {peer} failed: {reason}")]
    Link { peer: String, reason: String },
    /// The peer sent something this side cannot accept (a bug in one of
    /// the two, or mismatched configuration).
    #[error("data plane protocol error with worker {peer}: {reason}")]
    Protocol { peer: String, reason: String },
    /// The receiving side refused the channel (its deployment is closed,
    /// or too many channels wait for their receiver).
    #[error("worker {peer} refused the channel: {reason}")]
    Refused { peer: String, reason: String },
    /// The caller asked for something this data plane cannot do (an
    /// unknown peer, a closed deployment, a channel to itself).
    #[error("{0}")]
    Usage(String),
}

impl From<NetError> for Error {
    fn from(error: NetError) -> Self {
        match error {
            NetError::Link { .. } | NetError::Refused { .. } => Error::external(error.to_string()),
            NetError::VersionMismatch(_) | NetError::Protocol { .. } | NetError::Usage(_) => {
                Error::internal(error.to_string())
            }
        }
    }
}
