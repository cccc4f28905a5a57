//! The files server's tools, resources and prompt, over a [`Root`].

use std::collections::HashMap;
use std::sync::Arc;

use otpmcp::handler::SkillsDirectory;
use otpmcp::prelude::*;
use serde_json::json;
use tokio::sync::watch;

use crate::index::{Hit, Index, MAX_FILE_BYTES, PathError, Root};

/// Reads one file.
#[derive(serde::Deserialize, JsonSchema)]
struct ReadFile {
    /// The file, relative to the served folder (`/`-separated).
    path: String,
}

/// Searches the indexed files for lines containing `query` (case-insensitive). Run the
/// `index` tool first.
#[derive(serde::Deserialize, JsonSchema)]
struct Search {
    /// Text to look for.
    query: String,
    /// Most lines to return.
    #[schemars(range(min = 1, max = 500))]
    max: Option<usize>,
}

/// What `search` answers.
#[derive(serde::Serialize, JsonSchema)]
struct Found {
    /// The matching lines, in file order.
    hits: Vec<Hit>,
    /// How many files the index holds.
    indexed: usize,
}

/// The index, replaced whole by each `index` run; readers take a snapshot.
type Shared = Arc<watch::Sender<Arc<Option<Index>>>>;

/// The server over `root`: `read_file`, `search` and the long-running `index` (a task for
/// clients that declare the tasks extension), the resources `files://index` and
/// `files://file/{path}`, the prompt `review`, and `skills` when given (the skills
/// extension: instructions for the model that come with the folder).
pub(crate) fn server(root: Root, skills: Option<SkillsDirectory>) -> McpServer {
    let index: Shared = Arc::new(watch::Sender::new(Arc::new(None)));
    let server = McpServer::new(tools(&root, &index))
        .with_resources(resources(&root, &index))
        .with_prompts(prompts(&root));
    match skills {
        Some(skills) => server.with_skills(skills),
        None => server,
    }
    .with_instructions(
        "A read-only view of one folder. Call `index` once (it reports progress), then \
             `search`; read files with `read_file` or as `files://file/{path}` resources.",
    )
}

/// The text of `path` under `root` (blocking: see [`read_text`]).
pub(crate) fn read_text_blocking(root: &Root, path: &str) -> Result<String, ToolError> {
    root.read(path).map_err(|e| match e {
        PathError::NotRelative(_) | PathError::Hidden(_) => {
            ToolError::InvalidArguments(e.to_string())
        }
        _ => ToolError::Failed(e.to_string()),
    })
}

/// The text of `path` under `root`, read on the blocking pool: file I/O on a runtime
/// worker would stall every request that worker serves.
async fn read_text(root: &Root, path: &str) -> Result<String, ToolError> {
    let (root, path) = (root.clone(), path.to_owned());
    tokio::task::spawn_blocking(move || read_text_blocking(&root, &path))
        .await
        .map_err(|e| ToolError::Internal(e.to_string()))?
}

fn tools(root: &Root, index: &Shared) -> ToolRegistry {
    let mut tools = ToolRegistry::default();
    let (reader, builder, searcher) = (root.clone(), root.clone(), index.clone());
    let published = index.clone();
    tools
        .register(tool("read_file", move |args: ReadFile, _ctx| {
            let root = reader.clone();
            async move { read_text(&root, &args.path).await }
        }))
        .register(
            tool("index", move |(), ctx| {
                let (root, index) = (builder.clone(), published.clone());
                async move { build_index(&root, &index, &ctx).await }
            })
            .description("Reads every text file of the folder into the search index, reporting progress; long for a large folder.")
            .task_support(TaskSupport::Optional)
            // Reading files again is harmless: a task whose replica dies runs again.
            .rerunnable(),
        )
        .register(tool("search", move |args: Search, _ctx| {
            let snapshot = searcher.borrow().clone();
            async move {
                let Some(index) = snapshot.as_ref() else {
                    return Err(ToolError::Failed(
                        "nothing is indexed yet: call the index tool first".into(),
                    ));
                };
                let hits = index.search(&args.query, args.max.unwrap_or(50).clamp(1, 500));
                Ok(Json(Found {
                    hits,
                    indexed: index.files.len(),
                }))
            }
        }));
    tools
}

/// Walks the root, reads each file into a new index, then publishes it.
async fn build_index(
    root: &Root,
    index: &Shared,
    ctx: &RequestContext,
) -> Result<String, ToolError> {
    let walked = {
        let root = root.clone();
        tokio::task::spawn_blocking(move || root.walk())
            .await
            .map_err(|e| ToolError::Internal(e.to_string()))?
    };
    let total = walked.len();
    let mut built = Index::default();
    // Read on the blocking pool, a batch at a time, reporting progress between batches.
    let mut done = 0;
    let mut walked = walked.into_iter();
    loop {
        let batch: Vec<String> = walked.by_ref().take(100).collect();
        if batch.is_empty() {
            break;
        }
        done += batch.len();
        let reader = root.clone();
        let texts = tokio::task::spawn_blocking(move || {
            batch
                .into_iter()
                .map(|path| {
                    let text = reader.read(&path).ok();
                    (path, text)
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ToolError::Internal(e.to_string()))?;
        for (path, text) in texts {
            match text {
                Some(text) => {
                    built.add(path, text);
                }
                None => built.skipped += 1,
            }
        }
        ctx.progress(done as f64, Some(total as f64), None).await?;
    }
    let summary = format!(
        "indexed {} files ({} skipped: not UTF-8, over {MAX_FILE_BYTES} bytes or past the index's limits)",
        built.files.len(),
        built.skipped
    );
    index.send_replace(Arc::new(Some(built)));
    Ok(summary)
}

fn resources(root: &Root, index: &Shared) -> ResourceRegistry {
    let mut resources = ResourceRegistry::default();
    let summary = ResourceDefinition {
        uri: "files://index".into(),
        name: "index".into(),
        description: "The indexed files, as JSON (empty until `index` has run).".into(),
        mime_type: Some("application/json".into()),
    };
    let index = index.clone();
    resources.resource(summary, move |uri, _ctx| {
        let snapshot = index.borrow().clone();
        async move {
            let files: Vec<_> = snapshot
                .as_ref()
                .as_ref()
                .map(|i| {
                    i.files
                        .iter()
                        .map(|f| json!({"path": f.path, "bytes": f.text.len()}))
                        .collect()
                })
                .unwrap_or_default();
            Ok(vec![ResourceContents {
                uri,
                mime_type: Some("application/json".into()),
                text: Some(json!({ "files": files }).to_string()),
                blob: None,
            }])
        }
    });
    let file = ResourceTemplateDefinition {
        uri_template: "files://file/{path}".into(),
        name: "file".into(),
        description: "A file of the folder; write each `/` of its path as %2F.".into(),
        mime_type: Some("text/plain".into()),
    };
    let root = root.clone();
    resources.template(
        file,
        move |uri, variables: HashMap<String, String>, _ctx| {
            let root = root.clone();
            async move {
                let path = variables
                    .get("path")
                    .map(|p| p.replace("%2F", "/").replace("%2f", "/"));
                let path = path.ok_or_else(|| ResourceError::NotFound(uri.clone()))?;
                let text = read_text(&root, &path)
                    .await
                    .map_err(|_| ResourceError::NotFound(uri.clone()))?;
                Ok(vec![ResourceContents {
                    uri,
                    mime_type: Some("text/plain".into()),
                    text: Some(text),
                    blob: None,
                }])
            }
        },
    );
    resources
}

fn prompts(root: &Root) -> PromptRegistry {
    let mut prompts = PromptRegistry::default();
    let review = PromptDefinition {
        name: "review".into(),
        description: "Asks the model to review one file of the folder.".into(),
        arguments: vec![PromptArgument {
            name: "path".into(),
            description: Some("The file, relative to the folder".into()),
            required: true,
        }],
    };
    let root = root.clone();
    prompts.prompt(review, move |args, _ctx| {
        let root = root.clone();
        async move {
            let path = args
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or_default();
            let text = read_text(&root, path)
                .await
                .map_err(|e| PromptError::InvalidParams(format!("{e:?}")))?;
            Ok(GetPromptResult {
                description: Some(format!("Review of {path}")),
                messages: vec![PromptMessage {
                    role: Role::User,
                    content: Content::text(format!(
                        "Review this file ({path}) and list concrete problems:\n\n{text}"
                    )),
                }],
            })
        }
    });
    prompts
}
