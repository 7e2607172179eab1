// probe_server as a child process for the JavaScript tests (tests/browser, tests/openai_client): started on a free
// loopback port with the CPU, and stopped with SIGTERM, which must end it cleanly.
import { spawn } from "node:child_process";
import assert from "node:assert/strict";

// Starts probe_server (with `flags` besides); `url` resolves with its URL once it prints it, `output()` is what it
// printed so far.
export function startServer(serverPath, probesDir, flags = []) {
  const server = spawn(serverPath, ["--probes-dir", probesDir, "--device", "cpu", "--port", "0", ...flags],
                       { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const url = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("probe_server printed no URL:\n" + output)), 120000);
    const read = (chunk) => {
      output += chunk;
      const found = output.match(/on (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    };
    server.stdout.on("data", read);
    server.stderr.on("data", read);
    server.on("exit", (code) => reject(new Error(`probe_server exited with ${code}:\n${output}`)));
  });
  return { server, url, output: () => output };
}

export async function stopServer(server) {
  const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
  server.kill("SIGTERM");
  const { code, signal } = await exited;
  assert.equal(code, 0, `probe_server ended with code ${code}, signal ${signal} after SIGTERM`);
}
