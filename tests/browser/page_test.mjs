// The web page of probe_server in a real browser: Debian's Chromium, headless, driven through the DevTools
// protocol (puppeteer-core). Starts probe_server on a free loopback port, loads the page, types a text, checks
// the rendered ranking against /v1/rank and the per-token heatmap, starts a generation and watches its tokens
// arrive (when the server generates) with the fixture SAE's latents beside them, compares steered and unsteered
// generations, holds a two-turn chat, checks that nothing was fetched from elsewhere, writes a screenshot, and stops
// the server with SIGTERM, which must end it cleanly.
//
//   node page_test.mjs PROBE_SERVER PROBES_DIR SCREENSHOT.png
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, stopServer } from "../probe_server_process.mjs";
import puppeteer from "puppeteer-core";

const [serverPath, probesDir, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error("usage: node page_test.mjs PROBE_SERVER PROBES_DIR SCREENSHOT.png");
  process.exit(2);
}
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
const text = "Instead of seeing it as a setback, I saw a chance to learn from it.";

async function checkRanking(page, base) {
  await page.type("#text", text);
  await page.click("#analyze");
  await page.waitForSelector("#ranking .row", { timeout: 60000 });
  await page.waitForSelector("#heatmap table", { timeout: 60000 });
  const rows = await page.$$eval("#ranking .row", (list) => list.map((row) => ({
    label: row.dataset.label,
    value: Number(row.querySelector(".value").textContent),
    width: parseFloat(row.querySelector(".bar span").style.width),
  })));
  // The page shows what the API answers for the same text and view.
  const expected = await (await fetch(base + "v1/rank", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ texts: [text], threshold: 0.1, top_k: 5, layers: [2, 5] }),
  })).json();
  const predictions = expected.results[0].predictions;
  assert.equal(rows.length, predictions.length, "one row per ranked label");
  rows.forEach((row, i) => {
    assert.equal(row.label, predictions[i].label);
    assert.ok(Math.abs(row.value - predictions[i].confidence) < 1e-4, `${row.label}: ${row.value}`);
    assert.ok(Math.abs(row.width - 100 * predictions[i].confidence) < 0.1, `${row.label}'s bar is ${row.width}%`);
  });
  const heat = await page.$$eval("#heatmap table tr", (list) => list.map((tr) => tr.children.length));
  const tokens = await page.$$eval("#heat-text span", (list) => list.map((span) => span.textContent));
  assert.ok(tokens.length > 10, "the text's tokens are shown");
  assert.equal(tokens.join("").trim().replace(/^<bos>/, ""), text);
  assert.ok(heat.length >= 2 && heat.every((cells) => cells === tokens.length + 1), "a label x token heatmap");
  console.log(`ranking: ${rows.map((r) => `${r.label} ${r.value}`).join(", ")}; ${tokens.length} tokens in the heatmap`);
}

async function checkGeneration(page, info) {
  if (!info.generation) {
    assert.equal(await page.$eval("#generate", (b) => b.disabled), true, "no generation: its button is disabled");
    console.log("generation: not in this server (its button is disabled)");
    return;
  }
  await page.type("#prompt", "Once upon a time");
  await page.$eval("#max-new-tokens", (input) => { input.value = "12"; });
  await page.click("#generate");
  await page.waitForFunction(() => document.querySelectorAll("#generated span").length >= 3, { timeout: 60000 });
  await page.waitForSelector("#live-labels .row", { timeout: 60000 });
  await page.waitForFunction(() => /tokens \(/.test(document.querySelector("#generate-status").textContent),
                             { timeout: 120000 });
  const status = await page.$eval("#generate-status", (s) => s.textContent);
  console.log(`generation: ${status}`);
  // The server reads the fixture SAE (--sae jr=... --sae-labels jr=...): the latest token's latents under the scores,
  // each described, and every generated token's tooltip names them.
  const latents = await page.$eval("#live-latents", (box) => box.textContent);
  const shown = latents.match(/^jr: (\d+) \(latent (\d+)\) [\d.]+/);
  assert.ok(shown && shown[1] === shown[2], `the live latents: ${latents}`);
  const titles = await page.$$eval("#generated span", (list) => list.map((span) => span.title));
  assert.ok(titles.every((title) => /\njr: /.test(title)), "each generated token's tooltip shows its latents");
  const section = await page.$("#generated");
  await (await section.evaluateHandle((e) => e.closest("section"))).asElement().screenshot({ path: screenshot.replace(/\.png$/, "_latents.png") });
  console.log(`latents: ${latents}`);
}

// The steering panel: the same prompt unsteered and steered along a label's direction at a probe layer, side by
// side; a positive coefficient raises the label's mean score, and the page's request carried the steering.
async function checkSteering(page, info) {
  if (!info.generation) return;
  const sent = [];
  page.on("request", (request) => { if (request.url().endsWith("/v1/generate")) sent.push(JSON.parse(request.postData())); });
  await page.select("#steer-label", "reframing");
  await page.select("#steer-layer", String(info.layers[0]));
  await page.$eval("#steer-coefficient", (slider) => { slider.value = "16"; slider.dispatchEvent(new Event("input")); });
  assert.equal(await page.$eval("#steer-coefficient-value", (o) => o.textContent), "16.0");
  await page.type("#steer-prompt", "Once upon a time");
  await page.$eval("#max-new-tokens", (input) => { input.value = "8"; });
  await page.click("#steer-run");
  await page.waitForFunction(() => /→/.test(document.querySelector("#steer-status").textContent), { timeout: 120000 });
  const status = await page.$eval("#steer-status", (s) => s.textContent);
  const [plain, steered] = status.match(/mean score ([\d.]+) → ([\d.]+)/).slice(1).map(Number);
  assert.ok(steered > plain, `steering reframing up raised its score: ${status}`);
  assert.ok((await page.$$eval("#steer-plain span", (l) => l.length)) >= 1, "the unsteered tokens are shown");
  assert.ok((await page.$$eval("#steer-steered span", (l) => l.length)) >= 1, "the steered tokens are shown");
  const steeredBody = sent.find((body) => body.steer);
  assert.deepEqual(steeredBody.steer, [{ label: "reframing", layer: info.layers[0], coefficient: 16 }]);
  assert.ok(sent.some((body) => !body.steer), "the unsteered generation carried no steering");
  console.log(`steering: ${status}`);
}

// The chat view: two turns through /v1/chat/completions. The streamed reply must be what the endpoint answers
// unstreamed for the same messages (temperature 0), the bars the last token's probes, and the second request must
// carry the whole conversation.
async function checkChat(page, base, info) {
  if (!info.generation || !info.chat) {
    assert.equal(await page.$eval("#chat-send", (b) => b.disabled), true, "no chat: its button is disabled");
    console.log("chat: not in this server (its button is disabled)");
    return;
  }
  const sent = [];
  page.on("request", (request) => {
    if (request.url().endsWith("/v1/chat/completions")) sent.push(JSON.parse(request.postData()));
  });
  await page.$eval("#max-new-tokens", (input) => { input.value = "6"; });
  const turn = async (message, replies) => {
    await page.type("#chat-input", message);
    await page.click("#chat-send");
    await page.waitForFunction((n) => document.querySelectorAll("#chat-log .message.assistant").length === n &&
                                      /tokens \(/.test(document.querySelector("#chat-status").textContent),
                               { timeout: 120000 }, replies);
  };
  await turn("Hello! How are you today?", 1);
  assert.equal(sent.length, 1);
  assert.equal(sent[0].stream, true);
  assert.deepEqual(sent[0].messages, [{ role: "user", content: "Hello! How are you today?" }]);
  const reply = await page.$eval("#chat-log .message.assistant .tokens", (box) => box.textContent);
  const expected = await (await fetch(base + "v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages: sent[0].messages, max_tokens: 6, temperature: 0, probes: sent[0].probes }),
  })).json();
  assert.equal(reply, expected.choices[0].message.content, "the streamed reply is the completion");
  const bars = await page.$$eval("#chat-labels .row", (rows) => rows.map((row) => row.dataset.label));
  const last = expected.probes[expected.probes.length - 1].predictions;
  assert.deepEqual(bars, last.map((p) => p.label), "the bars are the last token's probes");
  await turn("And tomorrow?", 2);
  assert.deepEqual(sent[1].messages, [sent[0].messages[0], { role: "assistant", content: reply },
                                      { role: "user", content: "And tomorrow?" }]);
  const status = await page.$eval("#chat-status", (s) => s.textContent);
  console.log(`chat: two turns, the second ${status}`);
  await checkChatMonitor(page, base, sent);
}

// A monitor on the chat: flagged at threshold 0 it fires at the first reply token, which the page outlines and notes
// as the endpoint reports it; the chat section is then photographed (the screenshot in docs/monitoring.md).
async function checkChatMonitor(page, base, sent) {
  await page.click("#chat-new");
  await page.click("#monitor-on");
  await page.select("#monitor-label", await page.$eval("#monitor-label", (s) => s.options[1].value));
  await page.$eval("#monitor-threshold", (input) => { input.value = "0"; });
  await page.$eval("#max-new-tokens", (input) => { input.value = "12"; });
  await page.type("#chat-input", "Tell me about your day.");
  await page.click("#chat-send");
  await page.waitForFunction(() => /tokens \(/.test(document.querySelector("#chat-status").textContent), { timeout: 120000 });
  const request = sent[sent.length - 1];
  assert.deepEqual(request.monitors, [{ label: request.monitors[0].label, threshold: 0, action: "flag" }]);
  const fired = await page.$$eval("#chat-log .message.assistant .tokens span", (spans) => spans.map((s) => s.classList.contains("fired")));
  assert.equal(fired[0], true, "the first reply token is outlined");
  assert.ok(fired.slice(1).every((f) => !f), "a monitor fires once");
  const note = await page.$eval("#chat-log .monitor-note", (n) => n.textContent);
  assert.match(note, new RegExp("monitor " + request.monitors[0].label + "@L\\d+ fired at reply token 0"));
  const expected = await (await fetch(base + "v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages: request.messages, max_tokens: 12, temperature: 0, monitors: request.monitors }),
  })).json();
  assert.equal(expected.monitor_firings[0].index, 0);
  const section = await page.$("#chat-log");
  await (await section.evaluateHandle((e) => e.closest("section"))).asElement().screenshot({ path: screenshot.replace(/\.png$/, "_monitor.png") });
  console.log(`chat monitor: ${note}`);
}

// The fixture model's SAE, its latents described as a Neuronpedia export of explanations describes them.
const labels = path.join(os.tmpdir(), `probekit-page-labels-${process.pid}.json`);
fs.writeFileSync(labels, JSON.stringify(Array.from({ length: 256 }, (_, i) => ({ index: String(i), description: `latent ${i}` }))));
const sae = fileURLToPath(new URL("../fixtures/saes/saelens_jumprelu", import.meta.url));
const { server, url, output } = startServer(serverPath, probesDir, ["--sae", `jr=${sae}`, "--sae-labels", `jr=${labels}`]);
let browser;
try {
  const base = await url;
  browser = await puppeteer.launch({ executablePath: chromium, headless: true,
                                     args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 1000 });
  const elsewhere = [];
  page.on("request", (request) => { if (!request.url().startsWith(base)) elsewhere.push(request.url()); });
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(base, { waitUntil: "load" });
  await page.waitForFunction(() => /labels/.test(document.querySelector("#model-info").textContent), { timeout: 30000 });
  const info = await (await fetch(base + "v1/info")).json();
  assert.deepEqual(await page.$$eval("#layers input", (boxes) => boxes.map((b) => Number(b.value))), info.layers);
  await checkRanking(page, base);
  await checkGeneration(page, info);
  await checkSteering(page, info);
  await checkChat(page, base, info);
  assert.deepEqual(elsewhere, [], "the page fetched nothing from elsewhere");
  assert.deepEqual(errors, [], "no script errors");
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`screenshot: ${screenshot}`);
  await browser.close();
  browser = undefined;
  await stopServer(server);
  fs.rmSync(labels, { force: true });
} catch (error) {
  console.error(error);
  console.error("probe_server's output:\n" + output());
  if (browser) await browser.close();
  server.kill("SIGKILL");
  process.exit(1);
}
