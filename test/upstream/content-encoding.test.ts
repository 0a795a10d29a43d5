// decodeContentEncoding decodes small bodies synchronously and large ones on the thread pool
// (src/upstream/content-encoding.ts): both paths must give the same bytes and the same errors.
import { randomBytes } from 'node:crypto';
import { brotliCompressSync, deflateRawSync, deflateSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { ContentEncodingError, decodeContentEncoding } from '../../src/upstream/content-encoding.js';

// Random bytes do not compress: 400 KB stays above the synchronous limit (256 KB) once encoded.
const SIZES = { small: Buffer.from('{"resource_type":"job","id":1}'), large: randomBytes(400 * 1024) };

describe.each(Object.entries(SIZES))('a %s body', (_size, body) => {
  it.each([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
    ['deflate', deflateRawSync],
    ['br', brotliCompressSync],
  ] as const)('%s decodes to the original bytes', async (coding, encode) => {
    const encoded = encode(body);
    expect(encoded.length > 256 * 1024).toBe(body.length > 1000);
    expect((await decodeContentEncoding(encoded, coding)).equals(body)).toBe(true);
  });

  it('a corrupt body is a ContentEncodingError naming the coding', async () => {
    const corrupt = gzipSync(body);
    corrupt.fill(0x41, 10, Math.min(corrupt.length - 8, 4000));
    await expect(decodeContentEncoding(corrupt, 'gzip')).rejects.toThrow(ContentEncodingError);
    await expect(decodeContentEncoding(corrupt, 'gzip')).rejects.toThrow(/cannot decode the gzip body/);
  });
});
