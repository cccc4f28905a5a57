"""FastMCP's client (`fastmcp[tasks]==4.1.4`, on the Python SDK `mcp==2.3.0`) against
otpmcp on the stateless revision 2026-07-28: runs a task-capable tool through `call_tool`
(FastMCP polls the task with `tasks/get` behind it) to its result, starts another as a
task and cancels it (`tasks/cancel`), and reads arguments the tool refuses as a tool
error it can hand the model, not an exception. fastmcp-tasks sends `tasks/get`,
`tasks/update` and `tasks/cancel` without the `Mcp-Name` header (issue 23, part 7).
Prints "ok" on success.

Usage: python_fastmcp_tasks.py URL"""
import sys

import anyio
from fastmcp import Client
from fastmcp_tasks.client import call_tool_task


async def main(url: str) -> None:
    async with Client(url) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version

        # `stream_events` may run as a task; FastMCP declares the extension, so otpmcp
        # answers with a task, and `call_tool` polls it to the tool's result.
        done = await client.call_tool("stream_events", {"count": 5, "interval_ms": 20})
        assert not done.is_error, done
        assert done.content[0].text == "streamed 5 events", done

        # The same, driven by hand: the handle shows it is a task, and its result is the
        # tool's.
        task = await call_tool_task(client, "stream_events", {"count": 3, "interval_ms": 20})
        assert len(task.task_id) == 32, task.task_id
        result = await task.result()
        assert result.content[0].text == "streamed 3 events", result

        # `wait` works until cancelled.
        task = await call_tool_task(client, "wait", {})
        await task.cancel()
        with anyio.fail_after(10):
            final = await task.wait()
        assert final.status == "cancelled", final

        # Arguments the tool refuses: a tool error FastMCP returns (it raised MCPError
        # for the -32602 this used to be), in a call run as a task and in one that is not.
        refused = await client.call_tool(
            "stream_events", {"count": "many"}, raise_on_error=False
        )
        assert refused.is_error, refused
        assert "Invalid arguments for tool stream_events" in refused.content[0].text, refused
        refused = await client.call_tool("echo", {"text": 7}, raise_on_error=False)
        assert refused.is_error, refused
        assert "Invalid arguments for tool echo" in refused.content[0].text, refused
    print("ok")


anyio.run(main, sys.argv[1])
