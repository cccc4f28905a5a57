"""The official Python SDK client launching an otpmcp server over stdio, in its default
mode (it probes `server/discover` and must negotiate 2026-07-28) or in legacy mode (the
initialize handshake, 2025-11-25). Lists and calls tools, receives progress and log
messages, and answers the tools' questions: elicitation and sampling (server requests on
the legacy session, `input_required` rounds the client retries in the default mode).
Prints "ok" on success.

Usage: python_stdio.py MODE COMMAND [ARG...]   (MODE: auto or legacy)"""
import sys

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters


async def on_elicit(context, params):
    return types.ElicitResult(
        action="accept", content={"username": "ada", "email": "ada@example.com"}
    )


async def on_sample(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="forty-two"),
        model="stub-model",
    )


async def main(mode: str, command: str, args: list[str]) -> None:
    logs = []

    async def on_log(params):
        logs.append(params.data)

    server = StdioServerParameters(command=command, args=args)
    async with Client(
        server,
        mode=mode,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        logging_callback=on_log,
        log_level="info",
    ) as client:
        expected = "2026-07-28" if mode == "auto" else "2025-11-25"
        assert client.protocol_version == expected, client.protocol_version
        if mode == "legacy":
            await client.set_logging_level("info")

        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert {"test_tool_with_progress", "test_elicitation", "test_sampling"} <= names, names

        simple = await client.call_tool("test_simple_text", {})
        assert simple.content[0].text == "This is a simple text response for testing.", simple

        progress = []

        async def on_progress(value, total, message):
            progress.append(value)

        done = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert done.content[0].text == "Tool with progress executed successfully", done
        assert progress == [0, 50, 100], progress

        logged = await client.call_tool("test_tool_with_logging", {})
        assert logged.content[0].text == "Tool with logging executed successfully", logged
        assert logs == [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ], logs

        asked = await client.call_tool("test_elicitation", {"message": "Who are you?"})
        text = asked.content[0].text
        assert text.startswith("User response: action=accept"), text
        assert "ada@example.com" in text, text

        sampled = await client.call_tool("test_sampling", {"prompt": "the answer?"})
        assert sampled.content[0].text == "LLM response: forty-two", sampled
    print("ok")


anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3:])
