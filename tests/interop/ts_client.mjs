// The official TypeScript SDK client against otpmcp: list and call tools, receive
// progress, and resume an interrupted call from a new connection with resumptionToken.
// Prints "ok" on success. Usage: node ts_client.mjs URL
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const url = new URL(process.argv[2]);
const first = new StreamableHTTPClientTransport(url);
const client = new Client({ name: "otpmcp-interop", version: "0" });
await client.connect(first);

const { tools } = await client.listTools();
assert.ok(tools.some(t => t.name === "echo") && tools.some(t => t.name === "stream_events"));

const echoed = await client.callTool({ name: "echo", arguments: { text: "hi from typescript" } });
assert.equal(echoed.content[0].text, "hi from typescript");

const progress = [];
const streamed = await client.callTool(
  { name: "stream_events", arguments: { count: 5, interval_ms: 5 } },
  CallToolResultSchema,
  { onprogress: p => progress.push(p.progress) },
);
assert.equal(streamed.content[0].text, "streamed 5 events");
assert.deepEqual(progress, [1, 2, 3, 4, 5]);

// Start a long call, keep the last resumption token, and drop the connection after
// three progress notifications (closing the transport, as a crashed client would).
const sessionId = first.sessionId;
const call = { method: "tools/call", params: { name: "stream_events", arguments: { count: 20, interval_ms: 20 } } };
let token;
let seen = 0;
let dropped;
const droppedNow = new Promise(resolve => (dropped = resolve));
const interrupted = client
  .request(call, CallToolResultSchema, {
    onresumptiontoken: t => (token = t),
    onprogress: () => { if (++seen === 3) dropped(); },
  })
  .catch(() => "interrupted");
await droppedNow;
await first.close();
assert.equal(await interrupted, "interrupted");
assert.ok(token, "a resumption token was issued");

// A new transport on the same session resumes the call from the token.
const second = new StreamableHTTPClientTransport(url, { sessionId });
const again = new Client({ name: "otpmcp-interop", version: "0" });
await again.connect(second);
const resumed = await again.request(call, CallToolResultSchema, { resumptionToken: token });
assert.equal(resumed.content[0].text, "streamed 20 events");
await second.close();
console.log("ok");
