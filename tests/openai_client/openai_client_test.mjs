// probe_server's OpenAI endpoints driven by the official openai client (no network beyond loopback): the model
// list, a completion and a stream of the same request at temperature 0 giving the same text, the probes riding
// along (per token on the completion, on each token's chunk of the stream), the usage counted, a monitor's stop read
// as finish_reason content_filter, an error in OpenAI's shape; then SIGTERM, which must end the server cleanly.
//
//   node openai_client_test.mjs PROBE_SERVER PROBES_DIR
import assert from "node:assert/strict";
import { startServer, stopServer } from "../probe_server_process.mjs";
import OpenAI from "openai";

const [serverPath, probesDir] = process.argv.slice(2);
if (!probesDir) {
  console.error("usage: node openai_client_test.mjs PROBE_SERVER PROBES_DIR");
  process.exit(2);
}

const messages = [
  { role: "system", content: "Answer briefly." },
  { role: "user", content: "Instead of a setback, I saw a chance to learn. What do you see?" },
];

async function main() {
  const { server, url } = startServer(serverPath, probesDir);
  try {
    const client = new OpenAI({ baseURL: (await url) + "v1", apiKey: "not-needed", maxRetries: 0 });
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    const name = models.data[0].id;
    assert.equal(models.data[0].object, "model");

    const request = { model: "any-name", messages, max_tokens: 8, temperature: 0 };
    const completion = await client.chat.completions.create(request);
    assert.equal(completion.object, "chat.completion");
    assert.equal(completion.model, name, "responses name the loaded model");
    assert.match(completion.id, /^chatcmpl-/);
    const choice = completion.choices[0];
    assert.equal(choice.message.role, "assistant");
    assert.equal(typeof choice.message.content, "string");
    assert.ok(["stop", "length"].includes(choice.finish_reason));
    assert.equal(completion.usage.completion_tokens, completion.probes.length, "one probes entry per generated token");
    assert.ok(completion.usage.prompt_tokens > 10);
    assert.equal(completion.usage.total_tokens, completion.usage.prompt_tokens + completion.usage.completion_tokens);
    assert.ok(completion.probes[0].predictions.length >= 1, "the probes' scores ride along");

    const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    let text = "", roles = 0, withProbes = 0, finish = null, usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, "chat.completion.chunk");
      assert.equal(chunk.model, name);
      if (chunk.usage) usage = chunk.usage;
      if (chunk.probes) withProbes += 1;
      for (const c of chunk.choices) {
        if (c.delta.role) roles += 1;
        text += c.delta.content ?? "";
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(roles, 1);
    assert.equal(text, choice.message.content, "the stream's text is the completion's at temperature 0");
    assert.equal(finish, choice.finish_reason);
    assert.deepEqual(usage, completion.usage);
    assert.equal(withProbes, completion.usage.completion_tokens, "every token's chunk carries the probes");

    // A monitor that stops at once (threshold 0): the reply is cut before its first token, as OpenAI's own
    // content filter cuts one.
    const monitors = [{ label: "reframing", layer: 2, threshold: 0, action: "stop" }];
    const filtered = await client.chat.completions.create({ ...request, monitors });
    assert.equal(filtered.choices[0].finish_reason, "content_filter");
    assert.equal(filtered.choices[0].message.content, "");
    assert.equal(filtered.usage.completion_tokens, 0);
    assert.equal(filtered.monitor_firings[0].action, "stop");
    const filteredStream = await client.chat.completions.create({ ...request, monitors, stream: true });
    let filteredFinish = null, filteredText = "";
    for await (const chunk of filteredStream) {
      for (const c of chunk.choices) {
        filteredText += c.delta.content ?? "";
        if (c.finish_reason) filteredFinish = c.finish_reason;
      }
    }
    assert.equal(filteredFinish, "content_filter");
    assert.equal(filteredText, "");

    await assert.rejects(client.chat.completions.create({ ...request, messages: [] }), (error) => {
      assert.equal(error.status, 400);
      assert.match(error.message, /'messages' is empty/);
      return true;
    });
    console.log(`openai client: completion and stream agree (${JSON.stringify(text)}), ${usage.completion_tokens} tokens`);
  } finally {
    await stopServer(server);
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
