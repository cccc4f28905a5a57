"""The official Python SDK client through otpmcp's record/replay proxy (tests/proxy.rs):
the same session against the recording proxy and against the replay, whose printed
transcripts must be equal. `everything` drives examples/everything (tools, progress,
sampling, a stream the server closes and the client resumes); `ts` drives the
TypeScript SDK's example server (tools and prompts). One JSON line per step."""
import json
import sys

import anyio
import mcp.types as types
from mcp import Client


async def sample(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="a fixed answer"),
        model="test-model",
        stop_reason="endTurn",
    )


def show(step, value):
    print(json.dumps({"step": step, "value": value}, sort_keys=True), flush=True)


def texts(result):
    return [c.text for c in result.content if getattr(c, "text", None) is not None]


async def everything(client):
    tools = await client.list_tools()
    show("tools", sorted(t.name for t in tools.tools))
    progress = []

    async def on_progress(value, total, message):
        progress.append([value, total])

    result = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
    show("progress", [texts(result), progress])
    result = await client.call_tool("test_sampling", {"prompt": "Say something."})
    show("sampling", texts(result))
    result = await client.call_tool("test_reconnection", {})
    show("reconnection", texts(result))


async def ts(client):
    # Its tools that answer without notifications: those it sends on its standalone
    # stream arrive with timing that a replay need not keep.
    tools = await client.list_tools()
    show("tools", sorted(t.name for t in tools.tools))
    result = await client.call_tool("greet", {"name": "proxy"})
    show("greet", texts(result))
    prompts = await client.list_prompts()
    show("prompts", sorted(p.name for p in prompts.prompts))
    result = await client.call_tool("greet", {"name": "again"})
    show("greet again", texts(result))


async def main(kind, url):
    logs = []

    async def on_log(params):
        logs.append(params.data)

    async with Client(url, mode="legacy", sampling_callback=sample, logging_callback=on_log) as client:
        await (everything if kind == "everything" else ts)(client)
    show("logs", logs)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
