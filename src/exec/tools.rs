//! The execution tools: `execute`, `get_execution_output`, `list_executions` and
//! `cancel_execution`. They see arguments and a [`RequestContext`] like any tool; while
//! `execute` runs, each chunk goes to the client as a `notifications/otpmcp/execution_output`
//! on the request's stream (stored and resumable like progress), after it is stored in
//! the execution's own log (which `get_execution_output` reads from any replica).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::args::ArgsRule;
use super::record::{ExecRecord, Outcome};
use super::{ExecCaller, ExecError, ExecHandle, StartRequest};
use crate::handler::{RequestContext, Tool, ToolError, ToolRegistry, tool};
use crate::ids::SessionId;
use crate::protocol::methods::{CallToolResult, Content, TaskSupport};

/// The notification each output chunk is.
pub const OUTPUT_METHOD: &str = "notifications/otpmcp/execution_output";
/// The notification that gives the execution's id as it starts.
pub const STARTED_METHOD: &str = "notifications/otpmcp/execution_started";
/// Most executions `list_executions` returns.
const LIST_LIMIT: usize = 100;

/// Runs a configured program and answers with its outcome.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExecuteArgs {
    /// The program's name.
    program: String,
    /// Arguments appended to the program's configured command, as its policy allows
    /// (by default, none that begins with `-`).
    #[serde(default)]
    args: Vec<String>,
    /// Text written to its standard input.
    #[serde(default)]
    stdin: Option<String>,
    /// Wall time in milliseconds; at most the program's configured wall time.
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// Reads an execution's output after an event id, waiting for more if asked.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OutputArgs {
    /// The execution's id.
    execution_id: String,
    /// The `id` of the last chunk already read; omit to read from the start.
    #[serde(default)]
    last_event_id: Option<String>,
    /// Wait up to this long (ms) for output when there is none yet.
    #[serde(default)]
    wait_ms: Option<u64>,
}

/// Lists the caller's executions, newest first.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

/// Stops a running execution (SIGTERM, then SIGKILL after the grace period).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CancelArgs {
    /// The execution's id.
    execution_id: String,
}

/// Adds the four tools to `tools`.
pub fn register(tools: &mut ToolRegistry, handle: &ExecHandle) {
    let programs = handle
        .settings()
        .programs
        .iter()
        .map(|(name, p)| match p.description.is_empty() {
            true => format!("`{name}`"),
            false => format!("`{name}` ({})", p.description),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let description = format!(
        "Runs a configured program and answers with its exit status, resource usage and the start of its output. Programs: {programs}. Output chunks arrive as {OUTPUT_METHOD} notifications while it runs; get_execution_output reads them later."
    );
    // Each program's argument rule, its pattern compiled once.
    let rules: Arc<BTreeMap<String, ArgsRule>> = Arc::new(
        handle
            .settings()
            .programs
            .iter()
            .map(|(name, p)| (name.clone(), ArgsRule::new(p)))
            .collect(),
    );
    let body = move |handle, args, ctx| execute(handle, rules.clone(), args, ctx);
    // A durable task for clients that ask (2026-07-28), never run again by another
    // replica: a program's effects are not known to be repeatable.
    let execute_tool =
        with_handle(handle, "execute", &description, body).task_support(TaskSupport::Optional);
    tools
        .register(execute_tool)
        .register(with_handle(
            handle,
            "get_execution_output",
            "Returns an execution's output chunks after last_event_id (each with its id), its status and, once it ended, its outcome. wait_ms long-polls for new output.",
            output,
        ))
        .register(with_handle(
            handle,
            "list_executions",
            "Lists the caller's executions (this session's, or this principal's with authorization), newest first.",
            list,
        ))
        .register(with_handle(
            handle,
            "cancel_execution",
            "Stops a running execution: SIGTERM to its process group, SIGKILL after the grace period.",
            cancel,
        ));
}

/// A tool whose body gets its own clone of `handle`.
fn with_handle<A, F, Fut>(handle: &ExecHandle, name: &str, description: &str, body: F) -> Tool
where
    A: serde::de::DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(ExecHandle, A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    let handle = handle.clone();
    tool(name, move |args: A, ctx| body(handle.clone(), args, ctx)).description(description)
}

async fn output(
    handle: ExecHandle,
    args: OutputArgs,
    ctx: RequestContext,
) -> Result<CallToolResult, ToolError> {
    let id = execution_id(&args.execution_id)?;
    let wait = Duration::from_millis(args.wait_ms.unwrap_or(0));
    let page = handle
        .output(&caller(&ctx), id, args.last_event_id.as_deref(), wait)
        .await?;
    let mut out = Map::new();
    out.insert("executionId".into(), id.to_string().into());
    out.insert("status".into(), page.status.as_str().into());
    out.insert(
        "chunks".into(),
        page.chunks.into_iter().map(Value::Object).collect(),
    );
    out.insert("next".into(), page.next.into());
    out.insert("more".into(), page.more.into());
    if page.missing > 0 {
        out.insert("missing".into(), page.missing.into());
    }
    if let Some(outcome) = page.outcome {
        out.insert("outcome".into(), serde_json::to_value(outcome)?);
    }
    Ok(structured(Value::Object(out)))
}

async fn list(
    handle: ExecHandle,
    _: ListArgs,
    ctx: RequestContext,
) -> Result<CallToolResult, ToolError> {
    let records = handle.list(&caller(&ctx), LIST_LIMIT).await?;
    let list = records.iter().map(summary).collect::<Vec<_>>();
    Ok(structured(json!({ "executions": list })))
}

async fn cancel(
    handle: ExecHandle,
    args: CancelArgs,
    ctx: RequestContext,
) -> Result<CallToolResult, ToolError> {
    let id = execution_id(&args.execution_id)?;
    let record = handle.cancel(&caller(&ctx), id).await?;
    let running = record.status == super::Status::Running;
    Ok(structured(json!({
        "executionId": id.to_string(),
        "cancelled": running,
        "status": if running { "cancelling" } else { record.status.as_str() },
    })))
}

fn caller(ctx: &RequestContext) -> ExecCaller {
    ExecCaller {
        owner: ctx.principal().map(|p| p.owner().to_string()),
        session: ctx.session(),
    }
}

fn execution_id(text: &str) -> Result<SessionId, ToolError> {
    text.parse()
        .map_err(|_| ToolError::InvalidArguments(format!("`{text}` is not an execution id")))
}

/// A result whose text is its structured content.
fn structured(value: Value) -> CallToolResult {
    CallToolResult {
        content: vec![Content::text(value.to_string())],
        is_error: false,
        structured_content: Some(value),
    }
}

fn summary(record: &ExecRecord) -> Value {
    let mut out = json!({
        "executionId": record.id.to_string(),
        "program": record.program,
        "status": record.status.as_str(),
        "startedMs": record.started_ms,
    });
    if let (Some(map), Some(outcome)) = (out.as_object_mut(), &record.outcome) {
        map.insert(
            "outcome".into(),
            serde_json::to_value(outcome).unwrap_or_default(),
        );
    }
    out
}

/// Stops the execution if the request is dropped before it ended (the client cancelled,
/// the session ended, the server stops).
struct Abandon<'a> {
    handle: &'a ExecHandle,
    id: Option<SessionId>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.handle.abandon(id);
        }
    }
}

async fn execute(
    handle: ExecHandle,
    rules: Arc<BTreeMap<String, ArgsRule>>,
    args: ExecuteArgs,
    ctx: RequestContext,
) -> Result<CallToolResult, ToolError> {
    let settings = handle.settings();
    let Some(program) = settings.programs.get(&args.program) else {
        return Err(ExecError::UnknownProgram(args.program).into());
    };
    let invalid = |why: String| Err(ToolError::InvalidArguments(why));
    if args.args.len() > program.max_args {
        return invalid(format!("at most {} args", program.max_args));
    }
    if args.args.iter().any(|a| a.contains('\0')) {
        return invalid("args may not contain NUL".into());
    }
    // Refused as the tool's error (isError), so the model reads which argument and why.
    let Some(rule) = rules.get(&args.program) else {
        return Err(ExecError::UnknownProgram(args.program).into());
    };
    let program_args = rule.apply(&args.program, args.args)?;
    let stdin = args.stdin.map(String::into_bytes);
    if stdin
        .as_ref()
        .is_some_and(|s| s.len() > program.max_stdin_bytes)
    {
        return invalid(format!("stdin is over {} bytes", program.max_stdin_bytes));
    }
    let wall = program.wall_time;
    let timeout = match args.timeout_ms.map(Duration::from_millis) {
        Some(t) if t > wall.get() => {
            return invalid(format!(
                "timeout_ms is over this program's {} ms",
                wall.get().as_millis()
            ));
        }
        Some(t) if t.is_zero() => return invalid("timeout_ms must be more than 0".into()),
        Some(t) => t,
        None => wall.get(),
    };
    let who = caller(&ctx);
    let mut started = handle
        .run(StartRequest {
            program: args.program.clone(),
            args: program_args,
            stdin,
            timeout,
            owner: who.owner.clone(),
            party: who.party(),
        })
        .await?;
    let id = started.id;
    let mut guard = Abandon {
        handle: &handle,
        id: Some(id),
    };
    let _ = ctx
        .notify(
            STARTED_METHOD,
            json!({"executionId": id.to_string(), "program": args.program}),
        )
        .await;
    let limit = settings.result_bytes;
    let mut heads = [Vec::new(), Vec::new()];
    while let Some(output) = started.output.recv().await {
        let head = &mut heads[output.chunk.stream.index()];
        let room = limit
            .saturating_sub(head.len())
            .min(output.chunk.bytes.len());
        head.extend_from_slice(&output.chunk.bytes[..room]);
        let mut params = output.chunk.to_json();
        params.insert("executionId".into(), id.to_string().into());
        params.insert("id".into(), output.id.to_string().into());
        // A client gone meanwhile still finds everything in the execution's log.
        let _ = ctx.notify(OUTPUT_METHOD, Value::Object(params)).await;
    }
    let outcome = started.done.await.map_err(|_| {
        ToolError::Failed(format!(
            "execution {id} stopped before its outcome was stored; get_execution_output tells its status"
        ))
    })?;
    guard.id = None;
    Ok(result(id, &args.program, &outcome, &heads, limit))
}

fn result(
    id: SessionId,
    program: &str,
    outcome: &Outcome,
    heads: &[Vec<u8>; 2],
    limit: usize,
) -> CallToolResult {
    let how = match (outcome.exit_code, outcome.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "no exit status".into(),
    };
    let mut content = vec![Content::text(format!(
        "{program}: {} ({how}) after {} ms; execution {id}{}",
        outcome.status.as_str(),
        outcome.duration_ms,
        if outcome.truncated {
            "; output truncated"
        } else {
            ""
        },
    ))];
    let text = |bytes: &Vec<u8>| String::from_utf8_lossy(bytes).into_owned();
    let mut structured = serde_json::to_value(outcome).unwrap_or_default();
    if let Some(map) = structured.as_object_mut() {
        map.insert("executionId".into(), id.to_string().into());
        for (name, head) in [("stdout", &heads[0]), ("stderr", &heads[1])] {
            if !head.is_empty() {
                content.push(Content::text(format!("{name}:\n{}", text(head))));
            }
            // Text when it is text (a character cut at result_bytes left out); bytes
            // that are not UTF-8 as base64, not mangled.
            let whole = &head[..head.len() - super::chunker::utf8_tail(head)];
            match std::str::from_utf8(whole) {
                Ok(utf8) => map.insert(name.into(), utf8.into()),
                Err(_) => map.insert(
                    format!("{name}Base64"),
                    base64::engine::general_purpose::STANDARD
                        .encode(head)
                        .into(),
                ),
            };
        }
        let cut = [outcome.stdout_bytes, outcome.stderr_bytes]
            .iter()
            .any(|&n| n > limit as u64);
        map.insert("resultTruncated".into(), cut.into());
    }
    CallToolResult {
        content,
        is_error: outcome.status == super::Status::Failed,
        structured_content: Some(structured),
    }
}
