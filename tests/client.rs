//! `otpmcp::client::Client` (issue 38, item 3), the test client in the box, against a
//! real server: over loopback HTTP in both revisions (2025-11-25 sessions, 2026-07-28
//! stateless with its routing headers) and over stdio (`serve_io` on pipes) in both;
//! JSON and SSE answers, progress and log notifications, typed results, the lists,
//! resources, prompts, and a tool call that becomes a task (polled to its end, and its
//! events followed with `tasks/stream`).

use std::time::Duration;

use otpmcp::client::{Client, ClientError, Ending, Era, Unreachable};
use otpmcp::prelude::*;
use serde_json::{Value, json};

/// How many steps.
#[derive(serde::Deserialize, JsonSchema)]
struct Steps {
    /// At most 100.
    n: u64,
}

/// Logs once, then reports `n` steps of progress; answers `did n`.
async fn steps(args: Steps, ctx: RequestContext) -> Result<String, ToolError> {
    if args.n > 100 {
        return Err(ToolError::InvalidArguments("n is at most 100".into()));
    }
    ctx.log(
        LoggingLevel::Info,
        Some("steps"),
        json!(format!("{} steps", args.n)),
    )
    .await?;
    for i in 1..=args.n {
        ctx.progress(i as f64, Some(args.n as f64), None).await?;
    }
    Ok(format!("did {}", args.n))
}

#[derive(serde::Deserialize, JsonSchema)]
struct Pair {
    a: i64,
    b: i64,
}

#[derive(serde::Serialize, serde::Deserialize, JsonSchema, Debug, PartialEq)]
struct Quotient {
    quotient: i64,
    remainder: i64,
}

fn server() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(tool("steps", steps).task_support(TaskSupport::Optional))
        .register(
            tool("divide", |p: Pair, _ctx| async move {
                if p.b == 0 {
                    return Err(ToolError::Failed("division by zero".into()));
                }
                Ok(Json(Quotient {
                    quotient: p.a / p.b,
                    remainder: p.a % p.b,
                }))
            })
            .description("Divides a by b."),
        );
    let mut resources = ResourceRegistry::default();
    let note = ResourceDefinition {
        uri: "test://note".into(),
        name: "note".into(),
        description: "A note.".into(),
        mime_type: Some("text/plain".into()),
    };
    resources.resource(note, |uri, _ctx| async move {
        Ok(vec![ResourceContents {
            uri,
            mime_type: Some("text/plain".into()),
            text: Some("a note".into()),
            blob: None,
        }])
    });
    let mut prompts = PromptRegistry::default();
    let greet = PromptDefinition {
        name: "greet".into(),
        description: "Greets someone.".into(),
        arguments: vec![PromptArgument {
            name: "name".into(),
            description: None,
            required: true,
        }],
    };
    prompts.prompt(greet, |args, _ctx| async move {
        let name = args.get("name").and_then(Value::as_str).unwrap_or("?");
        Ok(GetPromptResult {
            description: None,
            messages: vec![PromptMessage {
                role: Role::User,
                content: Content::text(format!("Greet {name}.")),
            }],
        })
    });
    McpServer::new(tools)
        .with_resources(resources)
        .with_prompts(prompts)
}

fn config() -> Config {
    let mut config = Config::default();
    config.server.bind = ([127, 0, 0, 1], 0).into();
    config.server.shutdown_timeout = Duration::from_secs(2);
    config
}

/// What every link and revision must do alike.
async fn exercise(client: &Client) -> Result<(), ClientError> {
    let tools = client.list_tools().await?;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["steps", "divide"]);
    assert_eq!(tools[0].input_schema["required"], json!(["n"]));
    assert!(
        tools[1].output_schema.is_some(),
        "Json<T> advertises its schema"
    );

    // Without a progress token: the result alone.
    let quiet = client.call_tool("steps", json!({"n": 2})).await?;
    assert_eq!(quiet.text(), "did 2");
    assert!(quiet.progress.is_empty(), "{:?}", quiet.progress);

    // With one: every step's progress, in order, and the log line, before the result.
    let loud = client
        .call_tool_with_progress("steps", json!({"n": 5}))
        .await?;
    assert_eq!(loud.text(), "did 5");
    let steps: Vec<f64> = loud.progress.iter().map(|p| p.progress).collect();
    assert_eq!(steps, [1.0, 2.0, 3.0, 4.0, 5.0]);
    assert!(loud.progress.iter().all(|p| p.total == Some(5.0)));
    assert_eq!(loud.logs.len(), 1, "{:?}", loud.logs);
    assert_eq!(loud.logs[0].text(), "5 steps");
    assert_eq!(loud.logs[0].logger.as_deref(), Some("steps"));

    let divided = client.call_tool("divide", json!({"a": 7, "b": 2})).await?;
    let quotient: Quotient = divided.structured()?;
    assert_eq!(
        quotient,
        Quotient {
            quotient: 3,
            remainder: 1
        }
    );
    assert!(!divided.is_error);

    // A tool's failure is a result; a protocol error is typed, with its code.
    let failed = client.call_tool("divide", json!({"a": 1, "b": 0})).await?;
    assert!(failed.is_error);
    assert_eq!(failed.text(), "division by zero");
    let unknown = client.call_tool("nope", json!({})).await;
    assert!(
        matches!(unknown, Err(ClientError::Rpc { .. })),
        "{unknown:?}"
    );
    assert_eq!(unknown.err().and_then(|e| e.code()), Some(-32602));

    let resources = client.list_resources().await?;
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0].uri, "test://note");
    let contents = client.read_resource("test://note").await?;
    assert_eq!(contents[0].text.as_deref(), Some("a note"));

    let prompts = client.list_prompts().await?;
    assert_eq!(prompts[0].name, "greet");
    assert!(prompts[0].arguments[0].required);
    let prompt = client.get_prompt("greet", json!({"name": "Ada"})).await?;
    assert_eq!(prompt.messages[0].content, Content::text("Greet Ada."));
    let missing = client.get_prompt("greet", json!({})).await;
    assert_eq!(missing.err().and_then(|e| e.code()), Some(-32602));
    Ok(())
}

/// A call that becomes a task: polled to its end, and its events streamed.
async fn exercise_tasks(client: &Client) -> Result<(), ClientError> {
    let id = client.start_task("steps", json!({"n": 3})).await?;
    let done = client.wait_task(&id).await?;
    assert_eq!(done.status, "completed");
    assert_eq!(client.task_result(&id).await?.text(), "did 3");

    let events = client.task_events(&id).await?;
    assert_eq!(events.ending, Ending::Completed);
    assert_eq!(events.progress(), [1.0, 2.0, 3.0]);
    assert_eq!(
        events.statuses().last().map(String::as_str),
        Some("completed")
    );
    let seqs: Vec<u64> = events
        .events
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let mut sorted = seqs.clone();
    sorted.dedup();
    assert_eq!(seqs, sorted, "each event once, in order");

    // A task's own tool error, and a task that is not one.
    let not_a_task = client.start_task("divide", json!({"a": 1, "b": 1})).await;
    assert!(
        matches!(not_a_task, Err(ClientError::NotATask { .. })),
        "{not_a_task:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_session_over_http() -> Result<(), Box<dyn std::error::Error>> {
    let app = start_with(config(), server()).await?;
    let client = Client::http(app.url())
        .log_level(LoggingLevel::Info)
        .connect()
        .await?;
    assert_eq!(client.era(), Era::Sessions);
    assert!(client.session_id().is_some());
    let info = client.server_info().cloned().unwrap_or_default();
    assert_eq!(info["protocolVersion"], "2025-11-25");
    exercise(&client).await?;
    // Tasks are the stateless revision's.
    let refused = client.start_task("steps", json!({"n": 1})).await;
    assert!(
        matches!(refused, Err(ClientError::Unsupported(_))),
        "{refused:?}"
    );
    assert_eq!(client.close().await?, None);
    app.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn stateless_over_http_with_a_task() -> Result<(), Box<dyn std::error::Error>> {
    let app = start_with(config(), server()).await?;
    let client = Client::http(app.url())
        .stateless()
        .log_level(LoggingLevel::Info)
        .connect()
        .await?;
    assert_eq!(client.session_id(), None);
    exercise(&client).await?;
    exercise_tasks(&client).await?;
    client.close().await?;
    app.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_client_that_declares_tasks_gets_the_tasks_result()
-> Result<(), Box<dyn std::error::Error>> {
    let app = start_with(config(), server()).await?;
    let client = Client::http(app.url())
        .stateless()
        .capabilities(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}))
        .connect()
        .await?;
    // The call becomes a task; call_tool follows it to its result.
    assert_eq!(
        client.call_tool("steps", json!({"n": 2})).await?.text(),
        "did 2"
    );
    app.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_session_over_stdio() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::stdio(config(), server())
        .log_level(LoggingLevel::Info)
        .connect()
        .await?;
    let info = client.server_info().cloned().unwrap_or_default();
    assert_eq!(info["protocolVersion"], "2025-11-25");
    exercise(&client).await?;
    assert_eq!(client.close().await?, Some(otpmcp::Exit::Shutdown));
    Ok(())
}

#[tokio::test]
async fn stateless_over_stdio_with_a_task() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::stdio(config(), server())
        .stateless()
        .log_level(LoggingLevel::Info)
        .connect()
        .await?;
    exercise(&client).await?;
    exercise_tasks(&client).await?;
    assert_eq!(client.close().await?, Some(otpmcp::Exit::Shutdown));
    Ok(())
}

#[tokio::test]
async fn failures_are_errors_not_panics() -> Result<(), Box<dyn std::error::Error>> {
    let app = start_with(config(), server()).await?;
    let url = app.url();
    app.shutdown().await;
    // Nobody listens there any more.
    let gone = Client::http(&url).connect().await;
    assert!(
        matches!(gone, Err(ClientError::Transport { .. })),
        "{gone:?}"
    );
    let bad = Client::http("not a url").connect().await;
    assert!(
        matches!(bad, Err(ClientError::Unreachable(Unreachable::Url(_)))),
        "{bad:?}"
    );
    let insecure = Client::http("http://example.com/mcp")
        .token("t")
        .connect()
        .await;
    assert!(
        matches!(
            insecure,
            Err(ClientError::Unreachable(Unreachable::Insecure(_)))
        ),
        "{insecure:?}"
    );
    Ok(())
}
