// Response bodies compressed with Content-Encoding gzip, deflate or br (what we offer in
// Accept-Encoding). node:zlib does the work; this only picks the decoder per coding and bounds the
// output, so a small hostile body cannot inflate into gigabytes.
import { brotliDecompress, gunzip, inflate, inflateRaw, type ZlibOptions } from 'node:zlib';
import { promisify } from 'node:util';

/** The value of our Accept-Encoding header. */
export const ACCEPT_ENCODING = 'gzip, deflate, br';

/** Far above any feed page or subject (a page of 50 expanded events is a few MB). */
const MAX_DECODED_BYTES = 256 * 1024 * 1024;

const gunzipAsync = promisify(gunzip);
const inflateAsync = promisify(inflate);
const inflateRawAsync = promisify(inflateRaw);
const brotliAsync = promisify(brotliDecompress);

export class ContentEncodingError extends Error {
  override name = 'ContentEncodingError';
}

/** Undo every coding in `header` (listed in the order they were applied), last first. */
export async function decodeContentEncoding(
  body: Buffer,
  header: string | string[] | undefined,
): Promise<Buffer> {
  const codings = (Array.isArray(header) ? header.join(',') : (header ?? ''))
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  // Same cap as curl and urllib3: a chain longer than this is an attack, not a server.
  if (codings.length > 5) throw new ContentEncodingError(`too many content codings (${codings.length})`);
  let out = body;
  for (const coding of codings.reverse()) out = await decodeOne(out, coding);
  return out;
}

async function decodeOne(body: Buffer, coding: string): Promise<Buffer> {
  const opts: ZlibOptions = { maxOutputLength: MAX_DECODED_BYTES };
  try {
    switch (coding) {
      case 'gzip':
      case 'x-gzip':
        return await gunzipAsync(body, opts);
      case 'br':
        return await brotliAsync(body, { maxOutputLength: MAX_DECODED_BYTES });
      case 'deflate':
        // RFC 9110 says zlib-wrapped; some servers send raw deflate, as browsers also accept.
        return await inflateAsync(body, opts).catch(() => inflateRawAsync(body, opts));
    }
  } catch (err) {
    throw new ContentEncodingError(
      `cannot decode the ${coding} body: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  throw new ContentEncodingError(`unsupported Content-Encoding ${JSON.stringify(coding)}`);
}
