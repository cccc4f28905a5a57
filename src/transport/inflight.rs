//! Where the transport registers the requests it runs, so that another replica can answer
//! them if this one dies before it does. The transport only needs these two calls; the
//! cluster's leases implement them (with Redis), and without a registry nothing is done.

use crate::handler::BoxFuture;
use crate::ids::StreamKey;
use crate::protocol::RequestId;
use crate::server::Handover;

/// A request could not be registered: if this replica dies, it goes unanswered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not register the running request: {0}")]
pub struct InFlightError(pub String);

/// The registry of running requests.
pub trait InFlight: Send + Sync + std::fmt::Debug {
    /// Registers the request answered on stream `key`; awaited before the stream is given
    /// to the client, so a request the client can resume is always covered. With
    /// `handover`, a replica that finds it left behind by a planned shutdown runs it again.
    fn begin<'a>(
        &'a self,
        key: StreamKey,
        request: &'a RequestId,
        handover: Option<&'a Handover>,
    ) -> BoxFuture<'a, Result<(), InFlightError>>;

    /// The request on `key` ended (answered, cancelled or dropped).
    fn end(&self, key: StreamKey) -> BoxFuture<'_, ()>;
}
