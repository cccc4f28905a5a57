//! What a session's `tools/call` leaves behind so that another replica can run it again
//! from its start when the replica running it shuts down (a planned restart): only for a
//! tool declared re-runnable. The transport keeps it with the request's lease entry.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::HandedPrincipal;
use crate::protocol::{Request, RequestId};

/// The note a handed-on call's client sees on its stream before the new run's events.
pub const HANDED_ON_NOTE: &str =
    "the server replica running this call shut down; another replica runs it again from its start";

/// A running call, as another replica needs it to run it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// The request's `params` as the client sent them (`_meta` included: its progress
    /// token).
    pub params: Value,
    /// The caller (`[auth]`), so the tool run again sees who asked: its owner, scopes
    /// and token expiry, none of its other claims. An entry an older replica wrote (the
    /// whole principal) reads as this too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<HandedPrincipal>,
}

impl Handover {
    /// The request to run again, with its original id.
    pub fn request(&self, id: RequestId) -> Request {
        Request::new(id, "tools/call", Some(self.params.clone()))
    }
}
