// Drives the official Node openai SDK through a quotagate gateway, one chat
// completion per step, for e2e tests that state the steps. Each step is
// {step, key, model, max_tokens, stream}; it is sent without retries and
// printed as one JSON line: the usage and x-ratelimit-* headers the SDK
// returned, or the error it raised, as the SDK parsed it.
//
// Environment: QG_SDK (the directory holding node_modules/openai), QG_BASE
// (the gateway's base URL), QG_STEPS (the steps, a JSON array).
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const sdk = await import(pathToFileURL(path.join(process.env.QG_SDK, 'node_modules', 'openai', 'index.mjs')).href);
const OpenAI = sdk.default;
const messages = [{ role: 'user', content: 'hello' }];
const clients = new Map();

function client(key) {
  if (!clients.has(key)) {
    clients.set(key, new OpenAI({ apiKey: key, baseURL: process.env.QG_BASE + '/v1', timeout: 30000, maxRetries: 0 }));
  }
  return clients.get(key);
}

for (const s of JSON.parse(process.env.QG_STEPS)) {
  const line = { step: s.step };
  try {
    const req = { model: s.model, messages, max_tokens: s.max_tokens };
    if (s.stream) {
      req.stream = true;
      req.stream_options = { include_usage: true };
    }
    const { data, response } = await client(s.key).chat.completions.create(req).withResponse();
    let usage = null;
    if (s.stream) {
      for await (const chunk of data) if (chunk.usage) usage = chunk.usage;
    } else {
      usage = data.usage;
    }
    const h = (name) => response.headers.get(name);
    Object.assign(line, {
      ok: true, usage,
      remainingRequests: h('x-ratelimit-remaining-requests'),
      remainingTokens: h('x-ratelimit-remaining-tokens'),
    });
  } catch (err) {
    Object.assign(line, {
      ok: false, status: err.status ?? null, code: err.code ?? null, type: err.type ?? null, message: err.message,
      retryAfterMs: err.headers?.get('retry-after-ms') ?? null,
      shouldRetry: err.headers?.get('x-should-retry') ?? null,
    });
  }
  process.stdout.write(JSON.stringify(line) + '\n');
}
