// The webhook sink: POSTs each change as JSON to one URL, signed when a secret is configured.
import { createHmac } from 'node:crypto';
import { exchangeFailure, receive } from '../upstream/dispatch.js';
import { Pool } from '../upstream/undici-dispatchers.js';
import { parseRetryAfter } from '../backoff.js';
import { z } from 'zod';
import { durationMs, httpUrl, nonEmpty, sinkCommonFields } from '../config/fields.js';
import { ConfigError, errorMessage, isRetryableStatus, NeverError, RetryLaterError } from '../core/errors.js';
import type { Change } from '../core/change.js';
import type { SinkDefinition } from './definition.js';
import type { Sink, SinkContext } from './sink.js';
import { feedsyncVersion } from './version.js';
import { changeJson } from '../core/change-json.js';

/** A `type: webhook` entry of `sinks`. */
export const webhookSinkSchema = z.strictObject({
  ...sinkCommonFields,
  type: z.literal('webhook'),
  url: httpUrl,
  secret: nonEmpty.optional(),
  timeout_ms: durationMs.default(10000),
});
export type WebhookSinkConfig = z.output<typeof webhookSinkSchema>;

/** Longest Retry-After we pass on; the queue caps it again at queue.max_backoff_ms. */
const RETRY_AFTER_CAP_MS = 60 * 60 * 1000;
/** How much of an error response body we quote in the error message. */
const SNIPPET_BYTES = 300;

export async function openWebhookSink(config: WebhookSinkConfig, ctx: SinkContext): Promise<Sink> {
  let url: URL;
  try {
    url = new URL(config.url);
  } catch {
    throw new ConfigError(`sinks.${config.name}.url`, 'not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`sinks.${config.name}.url`, `must be http: or https:, got ${url.protocol}`);
  }
  return new WebhookSink(config.name, url, config.secret, config.timeout_ms, ctx);
}

class WebhookSink implements Sink {
  private readonly pool: Pool;
  /** The URL as shown in messages: no userinfo, no query (either may carry a token). */
  private readonly shownUrl: string;
  private readonly path: string;
  private readonly userAgent = `feedsync/${feedsyncVersion()}`;
  private closing: Promise<void> | undefined;

  constructor(
    private readonly name: string,
    url: URL,
    private readonly secret: string | undefined,
    private readonly timeoutMs: number,
    private readonly ctx: SinkContext,
  ) {
    // One keep-alive pool per sink: a sink posts to a single origin.
    this.pool = new Pool(url.origin, { keepAliveTimeout: 30_000 });
    this.path = url.pathname + url.search;
    this.shownUrl = url.origin + url.pathname + (url.search ? '?…' : '');
  }

  async deliver(change: Change): Promise<void> {
    if (this.closing)
      throw new RetryLaterError(`sink "${this.name}": closed, not posting to ${this.shownUrl}`);
    const body = Buffer.from(changeJson(change), 'utf8');
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'x-feedsync-key': change.key,
      'user-agent': this.userAgent,
    };
    if (this.secret !== undefined && this.secret !== '') {
      headers['x-feedsync-signature'] =
        'sha256=' + createHmac('sha256', this.secret).update(body).digest('hex');
    }
    const where = `sink "${this.name}": POST ${this.shownUrl} (key ${change.key})`;
    let status: number;
    let retryAfter: string | string[] | undefined;
    let snippet: string;
    try {
      // The whole body is always read (an unread body keeps the connection from being reused);
      // of an error answer, its start is kept for the message.
      const res = await receive(
        this.pool,
        { path: this.path, method: 'POST', headers, body },
        {
          deadline: Date.now() + this.timeoutMs,
          keepBytes: (s) => (s >= 200 && s < 300 ? 0 : SNIPPET_BYTES),
        },
      );
      status = res.status;
      retryAfter = res.headers['retry-after'];
      snippet = res.body.toString('utf8').replace(/\s+/g, ' ').trim();
    } catch (caught) {
      const { cause, timedOut } = exchangeFailure(caught);
      const detail = timedOut ? `timed out after ${this.timeoutMs} ms` : errorMessage(cause);
      throw new RetryLaterError(`${where}: ${detail}`, undefined, { cause });
    }
    if (status >= 200 && status < 300) return;
    const detail = `HTTP ${status}${snippet ? `: ${snippet}` : ''}`;
    if (isRetryableStatus(status)) {
      const retryAfterMs = parseRetryAfter(retryAfter, RETRY_AFTER_CAP_MS);
      this.ctx.logger.debug(
        { sink: this.name, key: change.key, status, retryAfterMs },
        'webhook asked to retry',
      );
      throw new RetryLaterError(`${where}: ${detail}`, retryAfterMs);
    }
    if (status >= 300 && status < 400) {
      throw new NeverError(`${where}: ${detail} (redirects are not followed: configure the final URL)`);
    }
    throw new NeverError(`${where}: ${detail}`);
  }

  close(): Promise<void> {
    this.closing ??= this.pool.close().catch((err: unknown) => {
      this.ctx.logger.warn({ sink: this.name, err: errorMessage(err) }, 'webhook sink close failed');
    });
    return this.closing;
  }
}

export const webhookSink = {
  type: 'webhook',
  schema: webhookSinkSchema,
  open: (config, ctx) => openWebhookSink(config, ctx),
} satisfies SinkDefinition<WebhookSinkConfig>;
