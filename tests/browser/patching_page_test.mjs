// patch_activations' heatmap page in a real browser: Debian's Chromium, headless (puppeteer-core). Runs the tool on a
// fixture model's prompt pair (two sites, both methods), opens patching.html from disk, and checks that the page
// fetched nothing, that it draws one cell per (site, method, layer, position) with the numbers of patching.json in
// their titles, layer 0 at the bottom and the tokens along x; then writes a screenshot (docs/patching_page.png).
//
//   node patching_page_test.mjs PATCH_ACTIVATIONS MODEL_DIR SCREENSHOT.png
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import puppeteer from "puppeteer-core";

const [tool, modelDir, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error("usage: node patching_page_test.mjs PATCH_ACTIVATIONS MODEL_DIR SCREENSHOT.png");
  process.exit(2);
}
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
const pair = JSON.parse(readFileSync(join(modelDir, "patching.json"), "utf8"));
const work = mkdtempSync(join(tmpdir(), "probekit-patching-page-"));
let browser;
try {
  execFileSync(tool, ["--model", modelDir, "--clean", pair.clean, "--corrupted", pair.corrupted, "--site",
                      "resid_post,attn_out", "--method", "both", "--device", "cpu", "--output-dir", join(work, "out"), "-q"]);
  const result = JSON.parse(readFileSync(join(work, "out", "patching.json"), "utf8"));
  const layers = result.patched.layers.length, positions = result.patched.positions.length;
  const page_url = pathToFileURL(join(work, "out", "patching.html")).href;
  browser = await puppeteer.launch({ executablePath: chromium, headless: true,
                                     args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const fetched = [];
  page.on("request", (request) => fetched.push(request.url()));
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(page_url, { waitUntil: "load" });
  assert.deepEqual(fetched, [page_url], "the page fetched nothing but itself");
  assert.deepEqual(errors, []);

  const maps = await page.$$eval("section svg", (svgs) => svgs.map((svg) => ({
    cells: [...svg.querySelectorAll("rect.cell")].map((rect) => ({
      y: Number(rect.getAttribute("y")), title: rect.querySelector("title").textContent })),
    labels: [...svg.querySelectorAll("text[transform]")].map((text) => text.textContent),
  })));
  assert.equal(maps.length, 4, "a heatmap per site and method");
  for (const map of maps) {
    assert.equal(map.cells.length, layers * positions);
    assert.deepEqual(map.labels, result.patched.positions.map((p) => result.tokens[p]), "the tokens along x");
    // Row-major by layer: the first row (layer 0) lies below the next (layer 1).
    assert.ok(map.cells[0].y > map.cells[positions].y, "layer 0 at the bottom");
  }
  // The first map is resid_post's grid: each cell's title ends with its value.
  maps[0].cells.forEach((cell, i) => {
    const value = Number(cell.title.split(" ").pop());
    const expected = result.grid.resid_post[Math.floor(i / positions)][i % positions];
    assert.ok(Math.abs(value - expected) <= 1e-5 * Math.max(1, Math.abs(expected)), `${cell.title} vs ${expected}`);
  });
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(`${maps.length} heatmaps of ${layers} x ${positions} cells; screenshot: ${screenshot}`);
  await browser.close();
  browser = undefined;
} catch (error) {
  console.error(error);
  if (browser) await browser.close();
  process.exitCode = 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
