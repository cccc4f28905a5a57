"""The official Python SDK client against otpmcp on a 2025-11-25 session (`mode="legacy"`,
the initialize handshake): list and call tools, receive progress, and resume an
interrupted call with a resumption token. Prints "ok" on success. (Its default mode
negotiates the stateless revision: see python_modern.py.)"""
import sys

import anyio
import mcp.types as types
from mcp import Client
from mcp.shared.message import ClientMessageMetadata


async def main(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25", client.protocol_version
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert {"echo", "stream_events"} <= names, names

        echoed = await client.call_tool("echo", {"text": "hi from python"})
        assert echoed.content[0].text == "hi from python", echoed

        progress = []

        async def on_progress(value, total, message):
            progress.append(value)

        streamed = await client.call_tool(
            "stream_events", {"count": 5, "interval_ms": 5}, progress_callback=on_progress
        )
        assert streamed.content[0].text == "streamed 5 events", streamed
        assert progress == [1, 2, 3, 4, 5], progress

        # Interrupt a call after it started, then resume it with the last token seen.
        session = client.session
        token = None

        async def on_token(value):
            nonlocal token
            token = value

        call = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name="stream_events", arguments={"count": 20, "interval_ms": 20}
            )
        )
        with anyio.move_on_after(0.1):
            await session.send_request(
                call, types.CallToolResult, metadata=ClientMessageMetadata(on_resumption_token_update=on_token)
            )
        assert token, "a resumption token was issued"
        with anyio.fail_after(20):
            resumed = await session.send_request(
                call, types.CallToolResult, metadata=ClientMessageMetadata(resumption_token=token)
            )
        assert resumed.content[0].text == "streamed 20 events", resumed
    print("ok")


anyio.run(main, sys.argv[1])
