"""The official Python SDK client resuming a long call on a server with a short `retry:`
hint. The SDK reconnects an interrupted call's stream in the background (after the hint)
as well as on the explicit resume, so two connections follow the call's stream at once.
Each used to close the other in turn and the resume never got its answer. Prints the
number of GETs that resumed the call's stream, then "ok"."""
import sys

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import ClientMessageMetadata

resumed_ids = []  # the Last-Event-ID of every GET that resumes a stream


async def on_request(request: httpx2.Request) -> None:
    if request.method == "GET" and request.headers.get("last-event-id"):
        resumed_ids.append(request.headers["last-event-id"])


async def main(url: str) -> None:
    http = create_mcp_http_client()
    http.event_hooks = {"request": [on_request], "response": []}
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        session, token = client.session, None

        async def on_token(value):
            nonlocal token
            token = value

        # Three seconds of work, many times the hint: a background reconnect lands mid-call.
        call = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name="stream_events", arguments={"count": 30, "interval_ms": 100}
            )
        )
        with anyio.move_on_after(0.2):
            await session.send_request(
                call, types.CallToolResult,
                metadata=ClientMessageMetadata(on_resumption_token_update=on_token),
            )
        assert token, "a resumption token was issued"
        stream = token.rsplit("-", 1)[0]
        with anyio.fail_after(15):
            resumed = await session.send_request(
                call, types.CallToolResult,
                metadata=ClientMessageMetadata(resumption_token=token),
            )
        assert resumed.content[0].text == "streamed 30 events", resumed
        mine = [i for i in resumed_ids if i.rsplit("-", 1)[0] == stream]
        # The explicit resume and at most one background reconnect.
        assert 1 <= len(mine) <= 2, f"{len(mine)} resumes of the call's stream: {mine}"
        print(len(mine))
    print("ok")


anyio.run(main, sys.argv[1])
