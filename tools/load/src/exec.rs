//! `exec`: the output throughput of one execution (otpmcp's `[exec]`), from the program's
//! pipe through the event store to this client: bytes/s of output read, server CPU per
//! MB. The server must offer a program (`--program`) that writes as many bytes as its
//! one argument says, e.g. `yes | head -c "$0"` (config/exec-bench.toml). A connection
//! the server closes because this reader fell behind is resumed with `Last-Event-ID`,
//! as MCP clients do; the resumes are counted.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::time::timeout;

use crate::client::Conn;
use crate::workloads::{Ctx, Out};
use crate::{Result, mcp};

/// Runs `program` with `bytes` as its argument in a session of its own and reads its
/// output notifications to the end.
pub(crate) async fn throughput(ctx: &Ctx, out: &Out, program: &str, bytes: u64) -> Result<()> {
    let name = format!("exec_{}mb", bytes >> 20);
    let mut conn = Conn::open(&ctx.target).await?;
    let session = mcp::initialize(&mut conn, &ctx.target).await?;
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "execute", "arguments": {"program": program, "args": [bytes.to_string()]}}
    })
    .to_string();
    let (cpu0, t0) = (ctx.cpu(), Instant::now());
    let mut resumes = 0u64;
    // Generous: 1 MB/s is far below what any run has shown.
    let limit = Duration::from_secs(30 + bytes / 1_000_000);
    let read = timeout(limit, async {
        let mut msgs = mcp::post(&mut conn, &ctx.target, Some(&session), body).await?;
        let (mut got, mut first, mut last) = (0u64, None, None);
        loop {
            while let Some(event) = msgs.next().await? {
                if event.id.is_some() {
                    last = event.id;
                }
                if event.data.is_empty() {
                    continue;
                }
                let msg: Value = serde_json::from_str(&event.data)?;
                if msg["method"] == "notifications/otpmcp/execution_output" {
                    first.get_or_insert_with(|| t0.elapsed());
                    got += msg["params"]["text"].as_str().map_or(0, |t| t.len() as u64);
                } else if mcp::is_reply_to(&msg, 1) {
                    let result = mcp::result_of(&msg)?;
                    let status = &result["structuredContent"]["status"];
                    if status != "exited" {
                        return Err(format!("the execution ended {status}").into());
                    }
                    return Ok((got, first, resumes));
                }
            }
            // Closed as too slow a reader: resume from the store, as clients do.
            let Some(id) = last.as_deref() else {
                return Err("the stream ended before its first event".into());
            };
            resumes += 1;
            msgs = mcp::get(&mut conn, &ctx.target, &session, Some(id)).await?;
        }
    })
    .await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = ctx.cpu();
    let _ = mcp::delete(&mut conn, &ctx.target, &session).await;
    let (got, first, resumes) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(format!("no answer within {limit:?}").into()),
    };
    if got != bytes {
        return Err(format!("{got} of {bytes} bytes arrived").into());
    }
    let mb = got as f64 / 1e6;
    out.num(&format!("{name}.mb_per_s"), mb / secs);
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let ms = b.saturating_sub(a) as f64 * crate::procfs::TICK_US / 1000.0;
        out.num(&format!("{name}.cpu_ms_per_mb"), ms / mb);
    }
    out.num(&format!("{name}.resumes"), resumes as f64);
    if let Some(first) = first {
        out.num(
            &format!("{name}.first_chunk_ms"),
            first.as_secs_f64() * 1000.0,
        );
    }
    Ok(())
}
