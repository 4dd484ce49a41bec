// tests/test_server_webui.sh: the page of `chatterbox serve` (GET /) in headless Chromium, driven
// with puppeteer-core. Checks streaming playback by the page's own event log (window.cbxEvents),
// never by timers. Exit 0 = passed, 1 = failed, 77 = Chromium cannot start here (skip).
// Usage: node browser_test.mjs BASE_URL CHROMIUM REF.wav OUT_DIR
import fs from "node:fs";
import path from "node:path";
import puppeteer from "puppeteer-core";

const [base, chromium, refWav, outDir] = process.argv.slice(2);
if (!base || !chromium || !refWav || !outDir) {
  console.error("usage: node browser_test.mjs BASE_URL CHROMIUM REF.wav OUT_DIR");
  process.exit(2);
}
const origin = new URL(base).origin;
const TIMEOUT = 300_000;
// Several sentences: the server splits them into text chunks and streams each chunk's audio when
// it is made, so the page gets audio while the rest is still being generated.
const LONG = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
  .map((w) => `Sentence number ${w} is spoken here, and it keeps going for a while longer.`).join(" ");

let browser;
try {
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: [
      "--no-sandbox",  // CI runs as root, where Chromium's sandbox cannot start
      "--autoplay-policy=no-user-gesture-required",
      "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",  // a synthetic microphone
      // Nothing outside this machine: every host name but the loopback address fails to resolve.
      "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-default-apps", "--no-first-run", "--disable-gpu", "--disable-dev-shm-usage",
    ],
    protocolTimeout: TIMEOUT,
  });
} catch (e) {
  console.log(`skip: Chromium (${chromium}) cannot start: ${e.message.split("\n")[0]}`);
  process.exit(77);
}

const problems = [];
function check(ok, what) {
  if (!ok) {
    problems.push(what);
    throw new Error(what);
  }
}

const page = await browser.newPage();
page.setDefaultTimeout(TIMEOUT);
await page.setViewport({ width: 1100, height: 900 });
const external = [], pageErrors = [];
page.on("request", (r) => {
  const u = r.url();
  if (!u.startsWith(origin + "/") && !u.startsWith("data:") && !u.startsWith("blob:")) external.push(u);
});
page.on("pageerror", (e) => pageErrors.push(e.message));
page.on("console", (m) => { if (m.type() === "error") console.log("page console:", m.text()); });
page.on("dialog", (d) => d.accept());  // the delete confirmation

// Waits for the next page event of one of `types` after index `from`; returns it and its index.
async function nextEvent(types, from) {
  await page.waitForFunction((t, f) => window.cbxEvents.slice(f).some((e) => t.includes(e.type)), {}, types, from);
  return page.evaluate((t, f) => {
    const i = window.cbxEvents.findIndex((e, k) => k >= f && t.includes(e.type));
    return { ev: window.cbxEvents[i], index: i };
  }, types, from);
}
const events = () => page.evaluate(() => window.cbxEvents);
const optionValues = (sel) => page.$$eval(`${sel} option`, (os) => os.map((o) => o.value));
async function setText(text) {
  await page.$eval("#text", (t) => { t.value = ""; });
  await page.focus("#text");
  if (text) await page.keyboard.type(text);
}
// Clicks Speak (or presses Ctrl+Enter) and waits for the generation to end; returns its events.
async function generate(how = "click") {
  const from = (await events()).length;
  if (how === "click") await page.click("#speak");
  else {
    await page.focus("#text");
    await page.keyboard.down("Control");
    await page.keyboard.press("Enter");
    await page.keyboard.up("Control");
  }
  const end = await nextEvent(["done", "error"], from);
  check(end.ev.type === "done", `generation failed: ${end.ev.message}`);
  return (await events()).slice(from);
}

try {
  // ---- the page loads, talks to the server and shows its limit ----
  const resp = await page.goto(base + "/", { waitUntil: "load" });
  check(resp.status() === 200, `GET / answered ${resp.status()}`);
  await nextEvent(["ready", "error"], 0);
  check((await events()).some((e) => e.type === "ready"), `the page did not connect: ${await page.$eval("#error", (e) => e.textContent)}`);
  check((await optionValues("#model")).includes("chatterbox-turbo"), "the model picker lacks chatterbox-turbo");
  const voices = await optionValues("#voice");
  check(voices.includes("default") && voices.includes("nova"), `voice picker: ${voices}`);

  // Turbo: the Multilingual-only parameters are hidden, Turbo's top_k is shown; no language picker.
  const shownParams = await page.$$eval(".param", (ps) => ps.filter((p) => p.offsetParent !== null).map((p) => p.dataset.name));
  check(!shownParams.includes("exaggeration") && !shownParams.includes("cfg_weight") && shownParams.includes("top_k"),
        `parameters shown for Turbo: ${shownParams}`);
  check(await page.$eval("#language-box", (e) => e.offsetParent === null), "a language picker for an English-only model");

  // Every visible control has a label (its <label>, or aria-label).
  const unlabelled = await page.$$eval("input, select, textarea, button", (els) => els
    .filter((e) => e.offsetParent !== null && e.type !== "hidden")
    .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute("aria-label") && !(e.textContent || "").trim())
    .map((e) => e.id || e.outerHTML.slice(0, 60)));
  check(unlabelled.length === 0, `controls without a label: ${unlabelled}`);

  // ---- pick a voice, type text, speak: audio plays while the rest is generated ----
  await page.select("#voice", "nova");
  await setText(LONG);
  const count = await page.$eval("#count", (e) => e.textContent);
  check(count === `${[...LONG].length} / 4096 characters`, `character count: '${count}'`);
  await page.$eval("#p-seed", (e) => { e.value = ""; });
  await page.type("#p-seed", "7");
  const ev1 = await generate("click");
  const req = ev1.find((e) => e.type === "request");
  check(req && req.body.voice === "nova" && req.body.seed === 7 && req.body.response_format === "wav",
        `request body: ${JSON.stringify(req && req.body)}`);
  const iFirst = ev1.findIndex((e) => e.type === "first-audio"), iDone = ev1.findIndex((e) => e.type === "done");
  check(iFirst >= 0, "no first-audio event");
  check(iFirst < iDone, `first audio (event ${iFirst}) after the end of the stream (event ${iDone})`);
  check(ev1[iFirst].contextState === "running", `audio context ${ev1[iFirst].contextState} at the first audio`);
  const laterChunks = ev1.slice(iFirst + 1, iDone).filter((e) => e.type === "chunk").length;
  check(laterChunks >= 1, "no audio arrived after playback started: the response was not streamed");
  check(ev1[iDone].seconds > 0, `done: ${JSON.stringify(ev1[iDone])}`);
  // The first block really played (its 'ended' fires after its duration on the audio clock).
  await nextEvent(["first-block-played"], 0);
  const loaded = await nextEvent(["recent-audio-loaded"], 0);
  check(loaded.ev.duration > 0 && Number.isFinite(loaded.ev.duration), `recent audio duration ${loaded.ev.duration}`);
  check(Math.abs(loaded.ev.duration - ev1[iDone].seconds) < 0.05,
        `the saved WAV lasts ${loaded.ev.duration} s, the streamed audio ${ev1[iDone].seconds} s`);
  const dl = await page.$eval("#download", (a) => ({ href: a.href, name: a.download, off: a.getAttribute("aria-disabled") }));
  check(dl.href.startsWith("blob:") && dl.name.endsWith(".wav") && dl.off === "false", `download: ${JSON.stringify(dl)}`);
  // The download holds the server's WAV with its real sizes.
  const wavInfo = await page.evaluate(async (href) => {
    const b = new Uint8Array(await (await fetch(href)).arrayBuffer()), v = new DataView(b.buffer);
    return { riff: String.fromCharCode(...b.subarray(0, 4)), size: v.getUint32(4, true), n: b.length };
  }, dl.href);
  check(wavInfo.riff === "RIFF" && wavInfo.size === wavInfo.n - 8, `downloaded WAV: ${JSON.stringify(wavInfo)}`);
  const recentText = await page.$eval("#recent li .settings", (e) => e.textContent);
  check(recentText.includes("voice nova") && recentText.includes("seed 7"), `recent settings: '${recentText}'`);
  fs.mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, "webui.png") });

  // ---- clone a voice from an uploaded reference, speak with it (Ctrl+Enter), delete it ----
  let from = (await events()).length;
  await page.type("#clone-name", "webvoice");
  const fileInput = await page.$("#clone-file");
  await fileInput.uploadFile(refWav);
  await page.click("#clone");
  const created = await nextEvent(["voice-created", "error"], from);
  check(created.ev.type === "voice-created", `clone failed: ${created.ev.message}`);
  check((await optionValues("#voice")).includes("webvoice"), "the cloned voice is not listed");
  check((await page.$eval("#voice", (s) => s.value)) === "webvoice", "the cloned voice is not selected");
  await setText("A cloned voice says hello. Then it says goodbye.");
  const ev2 = await generate("keyboard");
  check(ev2.find((e) => e.type === "request").body.voice === "webvoice", "the second request did not use the cloned voice");
  check(ev2.find((e) => e.type === "done").seconds > 0, "no audio from the cloned voice");
  check((await page.$$("#recent li")).length === 2, "recent generations should list two");
  from = (await events()).length;
  await page.click("#delete-voice");
  const deleted = await nextEvent(["voice-deleted", "error"], from);
  check(deleted.ev.type === "voice-deleted" && deleted.ev.id === "webvoice", `delete: ${JSON.stringify(deleted.ev)}`);
  check(!(await optionValues("#voice")).includes("webvoice"), "the deleted voice is still listed");
  const listed = await page.evaluate(async () => (await (await fetch("/v1/audio/voices")).json()).data.map((v) => v.id));
  check(!listed.includes("webvoice"), "the server still lists the deleted voice");

  // ---- record a reference from the (synthetic) microphone and clone it ----
  from = (await events()).length;
  await page.click("#record");
  await page.waitForFunction(() => /recording… ([6-9]|\d\d) s/.test(document.getElementById("record-state").textContent));
  await page.click("#record");
  const recState = await page.$eval("#record-state", (e) => e.textContent);
  check(/^recorded \d+\.\d s$/.test(recState), `record state: '${recState}'`);
  await page.type("#clone-name", "micvoice");
  await page.click("#clone");
  const rec = await nextEvent(["voice-created", "error"], from);
  check(rec.ev.type === "voice-created" && rec.ev.id === "micvoice", `clone from the microphone: ${rec.ev.message}`);
  from = (await events()).length;
  await page.click("#delete-voice");
  check((await nextEvent(["voice-deleted", "error"], from)).ev.type === "voice-deleted", "delete micvoice");

  // ---- an empty text: the server's message is shown ----
  await setText("");
  from = (await events()).length;
  await page.click("#speak");
  const err = await nextEvent(["error", "done"], from);
  check(err.ev.type === "error", "an empty text was accepted");
  const shown = await page.$eval("#error", (e) => e.textContent);
  check(shown.includes("'input' is empty"), `error shown: '${shown}'`);

  // ---- a phone-sized window: nothing wider than the screen ----
  await page.setViewport({ width: 390, height: 844 });  // (isMobile would reload the page)
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `the page is ${overflow} px wider than a phone's screen`);
  await page.screenshot({ path: path.join(outDir, "webui-phone.png") });

  check(pageErrors.length === 0, `errors in the page: ${pageErrors.join("; ")}`);
  check(external.length === 0, `requests outside the server: ${external.join(", ")}`);
} catch (e) {
  if (!problems.length) problems.push(e.stack || String(e));
  try { await page.screenshot({ path: path.join(outDir, "webui-failed.png") }); } catch (_) { /* best effort */ }
}
await browser.close();
if (problems.length) {
  for (const p of problems) console.log("FAIL:", p);
  process.exit(1);
}
console.log("web page browser test: ok");
