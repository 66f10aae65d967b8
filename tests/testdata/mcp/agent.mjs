// An MCP client (the official TypeScript SDK, over Streamable HTTP) doing
// a small agent task through sandboxd's MCP endpoint. Prints one JSON
// object with what it saw, for tests/mcp_test.go to check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "sandboxd-e2e", version: "1.0.0" });
await client.connect(transport);

const out = { tools: (await client.listTools()).tools.map((t) => t.name).sort(), calls: [] };
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args });
  out.calls.push({ name, isError: r.isError === true, text: r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n") });
  return r;
};
await call("sandbox_create", {});
await call("execute_bash", { command: "echo hello from $SHELL" });
await call("str_replace_editor", { command: "create", path: "calc.py", file_text: "def add(a, b):\n    return a - b\n" });
await call("str_replace_editor", { command: "create", path: "test_calc.py", file_text: "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n" });
await call("execute_bash", { command: "python3 test_calc.py" });
await call("str_replace_editor", { command: "str_replace", path: "calc.py", old_str: "return a - b", new_str: "return a + b" });
await call("execute_bash", { command: "python3 test_calc.py > result.txt; echo status $?" });
await call("str_replace_editor", { command: "view", path: "result.txt" });
await call("str_replace_editor", { command: "str_replace", path: "calc.py", old_str: "not there", new_str: "x" });
await client.callTool({ name: "execute_bash", arguments: { command: "true" } });
await client.close();
console.log(JSON.stringify(out));
