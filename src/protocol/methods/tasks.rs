//! The params of `tasks/stream` (SEP-2694), read once at the edge.

use serde_json::Value;

use crate::ids::TaskId;
use crate::protocol::{ErrorObject, Request};

/// What `tasks/stream` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStreamParams {
    /// The task followed.
    pub task_id: TaskId,
    /// The last sequence number the client has (everything retained without one).
    pub after: Option<u64>,
}

impl TaskStreamParams {
    /// Reads `request`'s params, or says which one is wrong (-32602).
    pub fn read(request: &Request) -> Result<Self, ErrorObject> {
        let task_id = request.task_id().ok_or_else(|| {
            ErrorObject::invalid_params("Invalid params: taskId must be a string")
        })?;
        let after = match request.param("after") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().ok_or_else(|| {
                ErrorObject::invalid_params("Invalid params: after must be a non-negative integer")
            })?),
        };
        // After `after`'s check, which came first when only the store found a malformed
        // id unknown; its error is an unknown task's.
        let task_id = task_id
            .parse::<TaskId>()
            .map_err(|e| ErrorObject::invalid_params(e.to_string()))?;
        Ok(Self { task_id, after })
    }
}
