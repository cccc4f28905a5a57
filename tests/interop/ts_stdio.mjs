// The official TypeScript SDK's StdioClientTransport launching an otpmcp server: list and
// call tools, receive progress, answer an elicitation (a server request on the session),
// and see the server exit when the client closes stdin. Prints "ok" on success.
// Usage: node ts_stdio.mjs COMMAND [ARG...]
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
const client = new Client(
  { name: "otpmcp-interop", version: "0" },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: "accept",
  content: { username: "ada", email: "ada@example.com" },
}));
await client.connect(transport);

const { tools } = await client.listTools();
assert.ok(tools.some(t => t.name === "test_tool_with_progress"));

const simple = await client.callTool({ name: "test_simple_text", arguments: {} });
assert.equal(simple.content[0].text, "This is a simple text response for testing.");

const progress = [];
const done = await client.callTool(
  { name: "test_tool_with_progress", arguments: {} },
  CallToolResultSchema,
  { onprogress: p => progress.push(p.progress) },
);
assert.equal(done.content[0].text, "Tool with progress executed successfully");
// The SDK handles a notification a microtask later than a response: when the last
// progress and the result arrive in one read, it drops that progress (the request is
// already done). The earlier ones are 50 ms apart.
assert.deepEqual(progress.slice(0, 2), [0, 50]);
assert.ok(progress.length <= 3 && progress.every((p, i) => p === [0, 50, 100][i]), `${progress}`);

const asked = await client.callTool({ name: "test_elicitation", arguments: { message: "Who are you?" } });
assert.match(asked.content[0].text, /^User response: action=accept/);
assert.match(asked.content[0].text, /ada@example\.com/);

const pid = transport.pid;
assert.ok(pid, "the server runs as a subprocess");
await client.close();
console.log("ok");
