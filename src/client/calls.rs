//! The MCP methods a test calls, typed: the lists (every page), `resources/read`,
//! `prompts/get`, `tools/call` (with progress and logs collected).

use std::sync::atomic::Ordering;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::results::{
    self, ListedPrompt, ListedResource, ListedTemplate, ListedTool, Prompt, ToolResult,
};
use super::{Client, ClientError, parse, tasks};
use crate::protocol::meta::header_params;
use crate::protocol::methods::ResourceContents;

impl Client {
    /// Every page of list `method`'s `key` items.
    async fn list<T: DeserializeOwned>(
        &self,
        method: &str,
        key: &str,
    ) -> Result<Vec<T>, ClientError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request(method, params).await?.result;
            let batch: Vec<T> = parse(method, page[key].clone())?;
            items.extend(batch);
            match page["nextCursor"].as_str() {
                Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
    }

    /// `tools/list`, every page.
    pub async fn list_tools(&self) -> Result<Vec<ListedTool>, ClientError> {
        let tools: Vec<ListedTool> = self.list("tools/list", "tools").await?;
        if let Ok(mut known) = self.header_params.lock() {
            for tool in &tools {
                known.insert(tool.name.clone(), header_params(&tool.input_schema));
            }
        }
        Ok(tools)
    }

    /// `resources/list`, every page.
    pub async fn list_resources(&self) -> Result<Vec<ListedResource>, ClientError> {
        self.list("resources/list", "resources").await
    }

    /// `resources/templates/list`, every page.
    pub async fn list_resource_templates(&self) -> Result<Vec<ListedTemplate>, ClientError> {
        self.list("resources/templates/list", "resourceTemplates")
            .await
    }

    /// `prompts/list`, every page.
    pub async fn list_prompts(&self) -> Result<Vec<ListedPrompt>, ClientError> {
        self.list("prompts/list", "prompts").await
    }

    /// `resources/read`: the resource's contents.
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<ResourceContents>, ClientError> {
        let method = "resources/read";
        let result = self.request(method, json!({ "uri": uri })).await?.result;
        Ok(parse::<results::ReadResult>(method, result)?.contents)
    }

    /// `prompts/get` with `arguments` (an object of strings).
    pub async fn get_prompt(&self, name: &str, arguments: Value) -> Result<Prompt, ClientError> {
        let method = "prompts/get";
        let params = json!({"name": name, "arguments": arguments});
        parse(method, self.request(method, params).await?.result)
    }

    /// `tools/call`. A tool's failure (`isError`) is an `Ok` result with `is_error` set;
    /// a protocol error (unknown tool, -32021 …) is [`ClientError::Rpc`].
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<ToolResult, ClientError> {
        self.call(name, json!({"name": name, "arguments": arguments}))
            .await
    }

    /// [`Client::call_tool`] with a `progressToken`, so that the tool's progress
    /// notifications come (the answer is then an SSE stream): they are in the result's
    /// `progress`, its log notifications in `logs`.
    pub async fn call_tool_with_progress(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<ToolResult, ClientError> {
        let token = format!("progress-{}", self.next_id.load(Ordering::Relaxed));
        let params =
            json!({"name": name, "arguments": arguments, "_meta": {"progressToken": token}});
        self.call(name, params).await
    }

    async fn call(&self, name: &str, params: Value) -> Result<ToolResult, ClientError> {
        let method = "tools/call";
        let response = self.request(method, params).await?;
        if response.result["resultType"] == "task" {
            // A client that declared the tasks extension: the result is the task's.
            let task = tasks::task_id(name, &response.result)?;
            return self.task_result(&task).await;
        }
        let result: ToolResult = parse(method, response.result)?;
        Ok(result.with_notifications(&response.notifications))
    }
}
