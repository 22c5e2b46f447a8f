// Drives the official Node openai SDK through a quotagate gateway, for
// e2e/openai_sdk_test.go. It runs a fixed sequence of calls and prints one
// JSON line per step: what the SDK returned or the error it raised (as the
// SDK parsed it), for the Go test to check.
//
// Environment: QG_SDK (the directory holding node_modules/openai), QG_BASE
// (the gateway's base URL, in front of which the test records every
// exchange), QG_KEY (an API key the gateway knows).
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const sdk = await import(pathToFileURL(path.join(process.env.QG_SDK, 'node_modules', 'openai', 'index.mjs')).href);
const OpenAI = sdk.default;
const base = process.env.QG_BASE;
const chat = new OpenAI({ apiKey: process.env.QG_KEY, baseURL: base + '/v1', timeout: 30000 });
const daily = new OpenAI({ apiKey: process.env.QG_KEY, baseURL: base + '/daily/v1', timeout: 30000 });
const messages = [{ role: 'user', content: 'hello' }];

function out(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + '\n');
}

function failure(err) {
  return {
    ok: false,
    name: err.constructor.name,
    status: err.status ?? null,
    code: err.code ?? null,
    type: err.type ?? null,
    message: err.message,
    retryAfterMs: err.headers?.get('retry-after-ms') ?? null,
    shouldRetry: err.headers?.get('x-should-retry') ?? null,
  };
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    out(name, { ok: true, ...(await fn()), elapsedMs: Date.now() - t0 });
  } catch (err) {
    out(name, { ...failure(err), elapsedMs: Date.now() - t0 });
  }
}

// Fills the token policy: 1000 tokens reserved and settled.
await step('fill', async () => {
  const { data: r, response } = await chat.chat.completions
    .create({ model: 'gpt-test', messages, max_tokens: 1000 }, { maxRetries: 0 })
    .withResponse();
  const h = (name) => response.headers.get(name);
  return {
    content: r.choices[0].message.content,
    usage: r.usage,
    limitTokens: h('x-ratelimit-limit-tokens'),
    remainingTokens: h('x-ratelimit-remaining-tokens'),
    resetTokens: h('x-ratelimit-reset-tokens'),
  };
});
// Denied, no retry: the error as the SDK parses it.
await step('denied', async () => {
  await chat.chat.completions.create({ model: 'gpt-test', messages, max_tokens: 1000 }, { maxRetries: 0 });
  return {};
});
// Denied, then retried by the SDK after retry-after-ms: a stream with usage.
await step('retried', async () => {
  const stream = await chat.chat.completions.create(
    { model: 'gpt-test', messages, max_tokens: 1000, stream: true, stream_options: { include_usage: true } },
    { maxRetries: 2 });
  let content = '';
  let usage = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) content += c.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  return { content, usage };
});
// A reservation past the route's max: 400.
await step('bad', async () => {
  await chat.chat.completions.create({ model: 'gpt-test', messages, max_tokens: 5000 }, { maxRetries: 0 });
  return {};
});
// A wait past what the SDK waits: x-should-retry: false, no retry.
await step('daily-fill', async () => {
  const r = await daily.chat.completions.create({ model: 'gpt-test', messages, max_tokens: 1000 }, { maxRetries: 0 });
  return { usage: r.usage };
});
await step('daily-denied', async () => {
  await daily.chat.completions.create({ model: 'gpt-test', messages, max_tokens: 100 }, { maxRetries: 2 });
  return {};
});
