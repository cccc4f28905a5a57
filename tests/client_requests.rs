//! Server-to-client requests (sampling, elicitation, roots): the request travels on the
//! tool call's stream as a stored event, the client answers by POST, and the answer reaches
//! the waiting handler — also when the client was disconnected in between.

mod common;

use common::{Client, SseReader, TestServer, Transcript};
use otpmcp::McpServer;
use otpmcp::handler::ToolRegistry;
use serde_json::{Value, json};

async fn server() -> TestServer {
    let mut tools = ToolRegistry::default();
    tools.register(common::ask_tool());
    TestServer::start_with(|_| {}, McpServer::new(tools)).await
}

/// Reads frames until the server's sampling request; returns it.
async fn server_request(reader: &mut SseReader) -> Value {
    request_named(reader, "sampling/createMessage").await
}

fn answer(request: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": text}, "model": "test"}})
}

#[tokio::test]
async fn a_handler_gets_the_clients_answer() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client.call_stream("ask", json!({}), None).await;
    let request = server_request(&mut reader).await;
    let posted = Client::send(client.post(&answer(&request, "four"))).await;
    assert_eq!(posted.status(), 202);
    let mut t = Transcript::default();
    for f in reader.rest().await {
        t.add(&f);
    }
    assert_eq!(t.result_text().as_deref(), Some("four"));
    server.shutdown().await;
}

#[tokio::test]
async fn an_answer_posted_while_disconnected_reaches_the_handler_and_the_result_is_resumed() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client.call_stream("ask", json!({}), None).await;
    let request = server_request(&mut reader).await;
    let last = reader.last_id.clone().unwrap_or_default();
    drop(reader);
    assert_eq!(
        Client::send(client.post(&answer(&request, "four")))
            .await
            .status(),
        202
    );
    let mut resumed = client.resume(&last).await;
    let mut t = Transcript::default();
    for f in resumed.rest().await {
        t.add(&f);
    }
    assert_eq!(t.result_text().as_deref(), Some("four"));
    server.shutdown().await;
}

#[tokio::test]
async fn a_refusal_reaches_the_handler_as_an_error() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client.call_stream("ask", json!({}), None).await;
    let request = server_request(&mut reader).await;
    let refusal = json!({"jsonrpc": "2.0", "id": request["id"],
        "error": {"code": -1, "message": "user declined"}});
    assert_eq!(Client::send(client.post(&refusal)).await.status(), 202);
    let frames = reader.rest().await;
    let response = frames
        .iter()
        .find(|f| f.is_response())
        .and_then(|f| f.json())
        .unwrap_or_default();
    assert_eq!(response["result"]["isError"], true);
    assert!(
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("user declined")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_answer_nobody_waits_for_is_accepted_and_ignored() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let stray = json!({"jsonrpc": "2.0", "id": "otpmcp-999", "result": {}});
    assert_eq!(Client::send(client.post(&stray)).await.status(), 202);
    server.shutdown().await;
}

/// A tool that asks the client's model, then for its roots, through the typed questions.
fn typed_questions_tool() -> otpmcp::handler::Tool {
    use otpmcp::protocol::client::Sampling;
    otpmcp::handler::tool("model_and_roots", |(), ctx| async move {
        let said = ctx.sample(Sampling::prompt("2+2?", 10)).await?;
        let roots = ctx.list_roots().await?;
        let names: Vec<String> = roots.into_iter().map(|r| r.uri).collect();
        Ok(format!(
            "{} in {}",
            said.text().unwrap_or("(no text)"),
            names.join(",")
        ))
    })
}

/// Reads frames until a request of the server's with `method`, which must be a stored,
/// resumable event; returns it.
async fn request_named(reader: &mut SseReader, method: &str) -> Value {
    loop {
        let frame = reader
            .next_event()
            .await
            .unwrap_or_else(|| panic!("stream ended before {method}"));
        if let Some(v) = frame.json()
            && v["method"] == method
        {
            assert!(
                frame.id.is_some(),
                "the request is a stored, resumable event"
            );
            return v;
        }
    }
}

#[tokio::test]
async fn typed_questions_reach_a_client_that_declared_them() {
    let mut tools = ToolRegistry::default();
    tools.register(typed_questions_tool());
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    let mut client = server.client();
    client
        .initialize_with(json!({"sampling": {}, "roots": {}}))
        .await;
    let mut reader = client.call_stream("model_and_roots", json!({}), None).await;

    let sampling = request_named(&mut reader, "sampling/createMessage").await;
    assert_eq!(sampling["params"]["maxTokens"], 10);
    let posted = Client::send(client.post(&answer(&sampling, "four"))).await;
    assert_eq!(posted.status(), 202);

    let roots = request_named(&mut reader, "roots/list").await;
    let reply = json!({"jsonrpc": "2.0", "id": roots["id"],
                       "result": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b", "name": "b"}]}});
    assert_eq!(Client::send(client.post(&reply)).await.status(), 202);

    let mut t = Transcript::default();
    for f in reader.rest().await {
        t.add(&f);
    }
    assert_eq!(
        t.result_text().as_deref(),
        Some("four in file:///a,file:///b")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_typed_question_the_client_did_not_declare_is_refused_without_asking() {
    let mut tools = ToolRegistry::default();
    tools.register(typed_questions_tool());
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    let mut client = server.client();
    // Sampling, but not roots: the first question is asked, the second is not.
    client.initialize_with(json!({"sampling": {}})).await;
    let mut reader = client.call_stream("model_and_roots", json!({}), None).await;
    let sampling = request_named(&mut reader, "sampling/createMessage").await;
    let posted = Client::send(client.post(&answer(&sampling, "four"))).await;
    assert_eq!(posted.status(), 202);

    let frames = reader.rest().await;
    assert!(
        !frames
            .iter()
            .filter_map(|f| f.json())
            .any(|v| v["method"] == "roots/list"),
        "a client that did not declare roots is not asked for them"
    );
    let mut t = Transcript::default();
    for f in &frames {
        t.add(f);
    }
    let response = t.response.unwrap_or_else(|| panic!("no response"));
    assert_eq!(response["error"]["code"], -32021, "{response}");
    assert_eq!(
        response["error"]["data"]["requiredCapabilities"],
        json!({"roots": {}})
    );
    server.shutdown().await;
}
