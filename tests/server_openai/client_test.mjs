// Drives `chatterbox serve` with the official openai npm client (tests/test_server_openai.sh).
// usage: node client_test.mjs BASE_URL API_KEY OUT_DIR
import fs from "node:fs";
import OpenAI from "openai";

const [, , baseURL, apiKey, out] = process.argv;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });
const input = "Hello from the official client. This is its second sentence.";
const fail = (msg) => {
  console.error("FAIL: " + msg);
  process.exit(1);
};

// Whole files: mp3 (OpenAI's default format) and wav.
for (const fmt of ["mp3", "wav"]) {
  const r = await client.audio.speech.create({ model: "tts-1", voice: "alloy", input, response_format: fmt, seed: 5 });
  const bytes = Buffer.from(await r.arrayBuffer());
  if (bytes.length < 100) fail(`${fmt}: ${bytes.length} bytes`);
  fs.writeFileSync(`${out}/client.${fmt}`, bytes);
}

// A streamed response, read chunk by chunk as it arrives.
const streamed = await client.audio.speech.create({
  model: "chatterbox-turbo", voice: "alloy", input, response_format: "pcm", stream_format: "audio", seed: 5,
});
const reader = streamed.body.getReader();
const parts = [];
for (;;) {
  const { done, value } = await reader.read();
  if (done) break;
  parts.push(Buffer.from(value));
}
const pcm = Buffer.concat(parts);
if (pcm.length === 0 || pcm.length % 2) fail(`streamed pcm: ${pcm.length} bytes`);
fs.writeFileSync(`${out}/client.pcm`, pcm);

// SSE: speech.audio.delta events, then speech.audio.done; the deltas are the same audio.
const sse = await client.audio.speech.create({
  model: "tts-1", voice: "alloy", input, response_format: "pcm", stream_format: "sse", seed: 5,
});
const text = await sse.text();
const events = text.split("\n\n").filter((b) => b.trim()).map((b) => JSON.parse(b.replace(/^data: /, "")));
const deltas = events.filter((e) => e.type === "speech.audio.delta");
if (!deltas.length || events.at(-1).type !== "speech.audio.done") fail("sse events: " + events.map((e) => e.type));
const sseAudio = Buffer.concat(deltas.map((e) => Buffer.from(e.audio, "base64")));
if (!sseAudio.equals(pcm)) fail("sse audio differs from the streamed pcm");

// Errors reach the client as APIError with OpenAI's fields.
try {
  await client.audio.speech.create({ model: "tts-1", voice: "nobody", input });
  fail("unknown voice accepted");
} catch (e) {
  if (!(e instanceof OpenAI.APIError) || e.status !== 400 || !String(e.message).includes("voice 'nobody' does not exist"))
    fail("unknown voice: " + e);
}
const bad = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
try {
  await bad.audio.speech.create({ model: "tts-1", voice: "alloy", input });
  fail("wrong key accepted");
} catch (e) {
  if (!(e instanceof OpenAI.AuthenticationError)) fail("wrong key: " + e);
}
const models = await client.models.list();
if (!models.data.some((m) => m.id === "chatterbox-turbo")) fail("models.list: " + JSON.stringify(models.data));
console.log(`openai client: ok (${parts.length} streamed chunks, ${pcm.length / 2} samples)`);
