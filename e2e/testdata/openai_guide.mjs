// Drives the official Node openai SDK through a gateway running the LLM
// guide's configuration (docs/guides/llm-gateway.md), for
// e2e/llm_guide_test.go. One JSON line per step on stdout.
//
// Environment: QG_SDK (the directory holding node_modules/openai), QG_BASE
// (the gateway's base URL), QG_KEY (the guide's llm-free-key).
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const sdk = await import(pathToFileURL(path.join(process.env.QG_SDK, 'node_modules', 'openai', 'index.mjs')).href);
const OpenAI = sdk.default;
const client = new OpenAI({ apiKey: process.env.QG_KEY, baseURL: process.env.QG_BASE + '/v1', timeout: 30000 });
const messages = [{ role: 'user', content: 'hello' }];
const out = (step, fields) => process.stdout.write(JSON.stringify({ step, ...fields }) + '\n');

// A stream with its usage: settled from the last chunk.
{
  const t0 = Date.now();
  try {
    const stream = await client.chat.completions.create(
      { model: 'gpt-4o', messages, max_tokens: 100, stream: true, stream_options: { include_usage: true } },
      { maxRetries: 0 });
    let usage = null;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    out('stream', { ok: true, usage, elapsedMs: Date.now() - t0 });
  } catch (err) {
    out('stream', { ok: false, status: err.status ?? null, message: err.message });
  }
}

// A burst past the free tier's requests: admitted until a policy on
// requests denies; the first denial as the SDK parses it.
{
  const t0 = Date.now();
  let ok = 0, denied = 0, first = null, other = null;
  for (let i = 0; i < 30; i++) {
    try {
      await client.chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 10 }, { maxRetries: 0 });
      ok++;
    } catch (err) {
      if (err.status === 429) {
        denied++;
        first ??= { code: err.code ?? null, type: err.type ?? null, message: err.message,
          retryAfterMs: err.headers?.get('retry-after-ms') ?? null };
      } else {
        other ??= { status: err.status ?? null, message: err.message };
      }
    }
  }
  out('burst', { ok, denied, first, other, elapsedMs: Date.now() - t0 });
}

// One more, with the SDK's retries: it waits what retry-after-ms says and
// is admitted.
{
  const t0 = Date.now();
  try {
    await client.chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 10 }, { maxRetries: 3 });
    out('retried', { ok: true, elapsedMs: Date.now() - t0 });
  } catch (err) {
    out('retried', { ok: false, status: err.status ?? null, message: err.message, elapsedMs: Date.now() - t0 });
  }
}
