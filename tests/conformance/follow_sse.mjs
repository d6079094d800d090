// Follows one durable stream with the Durable Streams npm client's live SSE mode until the stream
// closes (used by test_durable_npm_client.py). Arguments: the stream's URL and a key. Prints one
// JSON line: the items read, how many requests of each kind the client made, and whether it saw
// the stream closed. "connected" goes to stderr once the first answer has come.
import { stream } from "@durable-streams/client";

const [url, key] = process.argv.slice(2);
const requests = { sse: 0, longPoll: 0, other: 0 };

function counting(input, init) {
  const live = new URL(typeof input === "string" ? input : input.url).searchParams.get("live");
  if (live === "sse") requests.sse += 1;
  else if (live === "long-poll") requests.longPoll += 1;
  else requests.other += 1;
  return fetch(input, init);
}

const res = await stream({ url, headers: { apikey: key }, offset: "-1", live: "sse", fetch: counting,
  warnOnHttp: false });
console.error("connected");
const items = [];
for await (const item of res.jsonStream()) items.push(item);
console.log(JSON.stringify({ items, requests, streamClosed: res.streamClosed }));
