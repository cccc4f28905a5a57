//! The MCP surface beyond tools, through real HTTP: resources and templates, prompts,
//! completion, and cursor pagination of every list.

mod common;

use common::{Client, TestServer};
use otpmcp::McpServer;
use otpmcp::handler::tool;
use otpmcp::handler::{PromptError, PromptRegistry, ResourceRegistry, ToolRegistry};
use otpmcp::protocol::methods::{
    CallToolResult, Content, GetPromptResult, PromptArgument, PromptDefinition, PromptMessage,
    ResourceContents, ResourceDefinition, ResourceTemplateDefinition, Role,
};
use serde_json::{Value, json};

async fn server() -> TestServer {
    let mut tools = ToolRegistry::default();
    for i in 0..250 {
        tools.register(
            tool(&format!("tool_{i:03}"), |(), _| async {
                Ok(CallToolResult::text("ok"))
            })
            .description("numbered"),
        );
    }
    let mut resources = ResourceRegistry::default();
    resources
        .resource(
            ResourceDefinition {
                uri: "mem://a".into(),
                name: "a".into(),
                description: "A".into(),
                mime_type: None,
            },
            |uri, _| async move {
                Ok(vec![ResourceContents {
                    uri,
                    mime_type: None,
                    text: Some("alpha".into()),
                    blob: None,
                }])
            },
        )
        .template(
            ResourceTemplateDefinition {
                uri_template: "mem://users/{name}".into(),
                name: "user".into(),
                description: "A user".into(),
                mime_type: Some("text/plain".into()),
            },
            |uri, vars, _| async move {
                let text = format!("user {}", vars.get("name").cloned().unwrap_or_default());
                Ok(vec![ResourceContents {
                    uri,
                    mime_type: Some("text/plain".into()),
                    text: Some(text),
                    blob: None,
                }])
            },
        );
    let mut prompts = PromptRegistry::default();
    prompts.prompt(
        PromptDefinition {
            name: "greet".into(),
            description: "Greets someone".into(),
            arguments: vec![PromptArgument {
                name: "who".into(),
                description: None,
                required: true,
            }],
        },
        |args, _| async move {
            let who = args
                .get("who")
                .and_then(Value::as_str)
                .ok_or_else(|| PromptError::InvalidParams("who".into()))?;
            Ok(GetPromptResult {
                description: None,
                messages: vec![PromptMessage {
                    role: Role::User,
                    content: Content::text(format!("Hello, {who}")),
                }],
            })
        },
    );
    let server = McpServer::new(tools)
        .with_resources(resources)
        .with_prompts(prompts)
        .with_completion(|_, arg, _| async move {
            ["alice", "albert", "bob"]
                .iter()
                .filter(|n| n.starts_with(&arg.value))
                .map(|n| n.to_string())
                .collect()
        });
    TestServer::start_with(|_| {}, server).await
}

#[tokio::test]
async fn capabilities_follow_what_the_server_offers() {
    let server = server().await;
    let mut client = server.client();
    let init = client.initialize().await;
    let caps = &init["result"]["capabilities"];
    for cap in ["tools", "resources", "prompts", "completions", "logging"] {
        assert!(caps[cap].is_object(), "{cap} offered: {caps}");
    }
    assert_eq!(caps["resources"]["subscribe"], true);
    server.shutdown().await;
}

#[tokio::test]
async fn resources_are_listed_read_by_uri_and_by_template() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let list = client.ask("resources/list", json!({})).await;
    assert_eq!(list["result"]["resources"][0]["uri"], "mem://a");
    let templates = client.ask("resources/templates/list", json!({})).await;
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"],
        "mem://users/{name}"
    );
    let a = client
        .ask("resources/read", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(a["result"]["contents"][0]["text"], "alpha");
    let user = client
        .ask("resources/read", json!({"uri": "mem://users/ada"}))
        .await;
    assert_eq!(user["result"]["contents"][0]["text"], "user ada");
    let missing = client
        .ask("resources/read", json!({"uri": "mem://nope"}))
        .await;
    assert_eq!(missing["error"]["code"], -32002);
    assert_eq!(missing["error"]["data"]["uri"], "mem://nope");
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let answer = client.ask(method, json!({"uri": "mem://a"})).await;
        assert_eq!(answer["result"], json!({}), "{method}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn prompts_render_with_their_arguments_and_refuse_missing_ones() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let list = client.ask("prompts/list", json!({})).await;
    assert_eq!(list["result"]["prompts"][0]["arguments"][0]["name"], "who");
    let got = client
        .ask(
            "prompts/get",
            json!({"name": "greet", "arguments": {"who": "Ada"}}),
        )
        .await;
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        "Hello, Ada"
    );
    let missing = client.ask("prompts/get", json!({"name": "greet"})).await;
    assert_eq!(missing["error"]["code"], -32602);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("who")
    );
    let unknown = client.ask("prompts/get", json!({"name": "nope"})).await;
    assert_eq!(unknown["error"]["code"], -32602);
    server.shutdown().await;
}

#[tokio::test]
async fn completion_suggests_by_prefix() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let answer = client.ask("completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "who", "value": "al"}})).await;
    assert_eq!(
        answer["result"]["completion"]["values"],
        json!(["alice", "albert"])
    );
    assert_eq!(answer["result"]["completion"]["hasMore"], false);
    server.shutdown().await;
}

#[tokio::test]
async fn lists_are_paginated_with_cursors() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let page = client.ask("tools/list", params).await;
        pages += 1;
        for t in page["result"]["tools"].as_array().into_iter().flatten() {
            names.push(t["name"].as_str().unwrap_or_default().to_owned());
        }
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3, "250 tools in pages of 100");
    assert_eq!(names.len(), 250);
    assert_eq!(names.first().map(String::as_str), Some("tool_000"));
    assert_eq!(names.last().map(String::as_str), Some("tool_249"));
    let bad = client
        .ask("tools/list", json!({"cursor": "not-ours"}))
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    server.shutdown().await;
}

#[tokio::test]
async fn subscribers_are_told_of_resource_updates_live_or_on_resume() {
    let server = server().await;
    let mut alice = server.client();
    alice.initialize().await;
    let mut bob = Client::new(&server.url);
    bob.initialize().await;
    for client in [&alice, &bob] {
        let answer = client
            .ask("resources/subscribe", json!({"uri": "mem://a"}))
            .await;
        assert_eq!(answer["result"], json!({}));
    }
    // Alice listens live; Bob is not connected and will resume.
    let mut live = alice.resume("none").await;
    assert!(live.next().await.is_some_and(|f| f.is_priming()));
    let mut bobs = bob.resume("none").await;
    let bob_priming = bobs.next().await.and_then(|f| f.id).unwrap_or_default();
    drop(bobs);

    let told = server.app.notify_resource_updated("mem://a").await;
    assert_eq!(told.ok(), Some(2));
    let update = live.next_json().await;
    assert_eq!(update["method"], "notifications/resources/updated");
    assert_eq!(update["params"]["uri"], "mem://a");
    let mut resumed = bob.resume(&bob_priming).await;
    let replayed = resumed.next_event().await.unwrap_or_default();
    let replayed = if replayed.is_priming() {
        resumed.next_event().await.unwrap_or_default()
    } else {
        replayed
    };
    assert_eq!(
        replayed.json().unwrap_or_default()["method"],
        "notifications/resources/updated"
    );

    for client in [&alice, &bob] {
        client
            .ask("resources/unsubscribe", json!({"uri": "mem://a"}))
            .await;
    }
    assert_eq!(
        server.app.notify_resource_updated("mem://a").await.ok(),
        Some(0)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn changing_the_lists_at_runtime_tells_every_session() {
    let server = server().await;
    let mut client = server.client();
    let init = client.initialize().await;
    for cap in ["tools", "resources", "prompts"] {
        assert_eq!(
            init["result"]["capabilities"][cap]["listChanged"], true,
            "{cap}"
        );
    }
    let mut live = client.resume("none").await;
    assert!(live.next().await.is_some_and(|f| f.is_priming()));
    let told = server
        .app
        .update_tools(|tools| {
            tools.register(
                tool("late", |(), _| async {
                    Ok(CallToolResult::text("here now"))
                })
                .description("Added at runtime."),
            );
        })
        .await;
    assert_eq!(told.ok(), Some(1));
    let note = live.next_json().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let called = client.ask("tools/call", json!({"name": "late"})).await;
    assert_eq!(called["result"]["content"][0]["text"], "here now");

    let _ = server
        .app
        .update_tools(|tools| {
            tools.remove("late");
        })
        .await;
    let note = live.next_json().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let gone = client.ask("tools/call", json!({"name": "late"})).await;
    assert_eq!(gone["error"]["code"], -32602);

    let _ = server
        .app
        .update_prompts(|prompts| {
            prompts.remove("greet");
        })
        .await;
    let note = live.next_json().await;
    assert_eq!(note["method"], "notifications/prompts/list_changed");
    let list = client.ask("prompts/list", json!({})).await;
    assert_eq!(list["result"]["prompts"], json!([]));

    let _ = server
        .app
        .update_resources(|resources| {
            resources.remove("mem://a");
        })
        .await;
    let note = live.next_json().await;
    assert_eq!(note["method"], "notifications/resources/list_changed");
    let read = client
        .ask("resources/read", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(read["error"]["code"], -32002);
    server.shutdown().await;
}

#[tokio::test]
async fn subscriptions_only_to_resources_we_serve() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let unknown = client
        .ask("resources/subscribe", json!({"uri": "mem://nope"}))
        .await;
    assert_eq!(unknown["error"]["code"], -32002);
    let long = client
        .ask(
            "resources/subscribe",
            json!({"uri": format!("mem://{}", "x".repeat(3000))}),
        )
        .await;
    assert_eq!(long["error"]["code"], -32602);
    assert_eq!(
        server.app.notify_resource_updated("mem://nope").await.ok(),
        Some(0),
        "nothing was recorded"
    );
    let templated = client
        .ask("resources/subscribe", json!({"uri": "mem://users/ada"}))
        .await;
    assert_eq!(
        templated["result"],
        json!({}),
        "a URI a template serves is fine"
    );
    assert_eq!(
        server
            .app
            .notify_resource_updated("mem://users/ada")
            .await
            .ok(),
        Some(1)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn list_changes_go_only_to_sessions_offered_that_list() {
    // No prompts at start: sessions are not offered the prompts capability.
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    let init = client.initialize().await;
    assert!(init["result"]["capabilities"]["prompts"].is_null());
    let told = server
        .app
        .update_prompts(|prompts| {
            prompts.prompt(
                PromptDefinition {
                    name: "late".into(),
                    description: "d".into(),
                    arguments: vec![],
                },
                |_, _| async {
                    Ok(GetPromptResult {
                        description: None,
                        messages: vec![],
                    })
                },
            );
        })
        .await;
    assert_eq!(told.ok(), Some(0), "not offered, not told");
    let told = server.app.update_tools(|_| {}).await;
    assert_eq!(told.ok(), Some(1), "tools are always offered");
    server.shutdown().await;
}
