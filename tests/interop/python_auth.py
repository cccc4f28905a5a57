"""The official Python SDK sending a bearer token to otpmcp with `[auth]` on, in both
protocol eras: a 2025-11-25 session (mode "legacy") and the stateless revision (the
default mode, which probes `server/discover`). The `whoami` tool answers with the
principal it sees. Without the token the SDK reports the 401's message. Prints "ok".

Usage: python_auth.py URL TOKEN SUBJECT"""
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def client(url: str, token: str | None, mode: str) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=mode)


async def main(url: str, token: str, subject: str) -> None:
    for mode, version in (("legacy", "2025-11-25"), ("auto", "2026-07-28")):
        async with client(url, token, mode) as session:
            assert session.protocol_version == version, (mode, session.protocol_version)
            who = await session.call_tool("whoami", {})
            assert who.content[0].text.split(" ")[0] == subject, who
            echoed = await session.call_tool("echo", {"text": f"hi in {mode}"})
            assert echoed.content[0].text == f"hi in {mode}", echoed
    try:
        async with client(url, None, "legacy") as session:
            await session.call_tool("echo", {"text": "no token"})
    except BaseException as e:  # the SDK raises an exception group from its task group
        assert "Unauthorized: a bearer token is required" in repr(e), repr(e)
    else:
        raise AssertionError("a client without a token was served")
    print("ok")


anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
