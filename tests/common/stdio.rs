//! A client's end of a stdio server running in the test's process on in-memory pipes
//! (`otpmcp::app::serve_io`, what `serve_stdio` runs on stdin and stdout).

use otpmcp::{Config, Exit, McpServer, StartError};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

use super::stateless::TASKS;
use super::within;

/// A client's end of a stdio server running on pipes.
pub struct Pipe {
    input: Option<DuplexStream>,
    output: Lines<BufReader<DuplexStream>>,
    served: tokio::task::JoinHandle<Result<Exit, StartError>>,
    next: i64,
}

impl Pipe {
    pub async fn start(server: McpServer, configure: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config::default();
        configure(&mut config);
        let (input, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, output) = tokio::io::duplex(1 << 20);
        let served = tokio::spawn(otpmcp::app::serve_io(
            config,
            server,
            server_in,
            server_out,
            std::future::pending(),
        ));
        Self {
            input: Some(input),
            output: BufReader::new(output).lines(),
            served,
            next: 1,
        }
    }

    pub async fn write(&mut self, line: &[u8]) {
        let input = self
            .input
            .as_mut()
            .unwrap_or_else(|| panic!("input closed"));
        input
            .write_all(line)
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
        input
            .write_all(b"\n")
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    /// Sends request `method`; returns its id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next;
        self.next += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write(message.to_string().as_bytes()).await;
        id
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.write(message.to_string().as_bytes()).await;
    }

    /// The next line the server writes, which must be JSON; `Null` at the end of output.
    pub async fn next_message(&mut self) -> Value {
        let line = within("a line from the server", self.output.next_line())
            .await
            .unwrap_or_else(|e| panic!("read: {e}"));
        match line {
            Some(line) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")),
            None => Value::Null,
        }
    }

    /// Reads until the answer to `id`: the answer and what came before it.
    pub async fn answer(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.next_message().await;
            assert!(!message.is_null(), "output ended before the answer to {id}");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return (message, before);
            }
            before.push(message);
        }
    }

    pub async fn ask(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        self.answer(id).await.0
    }

    pub async fn initialize(&mut self, capabilities: Value) -> Value {
        let answer = self
            .ask(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                       "clientInfo": {"name": "stdio-test", "version": "0"}}),
            )
            .await;
        self.notify("notifications/initialized", json!({})).await;
        answer
    }

    /// Closes the server's input and waits for it to stop: how it ended, and every line it
    /// wrote after the close.
    pub async fn close(mut self) -> (Exit, Vec<Value>) {
        drop(self.input.take());
        let mut rest = Vec::new();
        loop {
            let message = self.next_message().await;
            if message.is_null() {
                break;
            }
            rest.push(message);
        }
        let exit = within("the server to stop", self.served)
            .await
            .unwrap_or_else(|e| panic!("serve_io: {e}"))
            .unwrap_or_else(|e| panic!("serve_io: {e}"));
        (exit, rest)
    }
}

/// With the tasks extension's capabilities in `_meta`, as a 2026-07-28 client sends.
pub fn modern(params: Value) -> Value {
    modern_with(
        params,
        json!({"elicitation": {}, "extensions": {TASKS: {}}}),
    )
}

/// With revision 2026-07-28 and `capabilities` in `_meta`.
pub fn modern_with(mut params: Value, capabilities: Value) -> Value {
    let meta = params["_meta"].as_object().cloned().unwrap_or_default();
    let mut meta = Value::Object(meta);
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    params["_meta"] = meta;
    params
}
