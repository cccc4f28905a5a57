"""The official Python SDK client in its default mode against otpmcp: it probes
`server/discover` and must negotiate the stateless revision 2026-07-28. Lists and calls
tools, receives progress, listens for a tools list change, and answers a tool's question
(`input_required`, the client driving the retry). Prints "ok" on success.

Usage: python_modern.py URL [LISTEN_URL]. The listen stream goes to LISTEN_URL (default:
URL), so a test can listen on one replica while the change happens on another."""
import sys

import anyio
import mcp_types as types
from mcp import Client


async def on_elicit(context, params):
    assert params.message == "What is your name?", params
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def main(url: str, listen_url: str) -> None:
    async with Client(url, elicitation_callback=on_elicit) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version

        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert {"echo", "stream_events", "greet", "touch_tools"} <= names, names

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

        # The tool asks the user; the client answers through its callback and retries.
        greeted = await client.call_tool("greet", {})
        assert greeted.content[0].text == "Hello, Ada!", greeted

        async with Client(listen_url) as listener:
            assert listener.protocol_version == "2026-07-28", listener.protocol_version
            async with listener.listen(tools_list_changed=True) as sub:
                assert sub.honored.tools_list_changed, sub.honored
                await client.call_tool("touch_tools", {})
                with anyio.fail_after(10):
                    event = await sub.__anext__()
                assert type(event).__name__ == "ToolsListChanged", event
    print("ok")


anyio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1])
