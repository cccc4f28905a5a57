//! The server of docs/guide.md. Run: `cargo run --example guide` (port 8080 by default),
//! or `cargo run --example guide -- --stdio` to serve it on stdin and stdout. Its
//! `hello_mcp` module stands for the crate's library (`src/lib.rs`).

#[allow(unreachable_pub)] // `pub` as in the reader's library.
mod hello_mcp;

use otpmcp::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|arg| arg == "--stdio") {
        // OTPMCP__ vars only: a client starts this inside a workspace whose ./sys.toml
        // the user may not have written.
        let config = Config::load_overlays(&[])?;
        // Until stdin closes; nothing but MCP may be printed to stdout.
        serve_stdio(config, hello_mcp::server()).await?;
        return Ok(());
    }
    let config = Config::load(&std::env::current_dir()?, &[])?; // ./sys.toml, OTPMCP__ vars
    let app = start_with(config, hello_mcp::server()).await?;
    println!("serving MCP at {}", app.url());
    tokio::signal::ctrl_c().await?;
    app.shutdown().await;
    Ok(())
}
