// Response bytes → text in the charset the server declared: the Content-Type `charset`, else a
// byte-order mark, else an XML declaration's `encoding`, else UTF-8 (what JSON must be and what
// both specs' services send). WHATWG TextDecoder knows every label a server may use.
//
// Bytes that are not valid UTF-8 in a UTF-8 body are decoded as U+FFFD (the WHATWG rule) and
// reported, so the caller can count and log them: node:buffer's isUtf8 (simdutf) checks a body at
// memory speed, far below what decoding it costs.

import { isUtf8 } from 'node:buffer';
import { TextDecoder } from 'node:util';

export class CharsetError extends Error {
  override name = 'CharsetError';
}

const XML_DECLARATION_ENCODING = /^<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z0-9._:-]+)["']/;

export interface DecodedText {
  text: string;
  /** The charset is UTF-8 and the bytes are not valid UTF-8 (each bad sequence became U+FFFD). */
  invalidUtf8: boolean;
}

/** The usual case, built once; decode() without `stream` keeps no state between calls. */
const UTF8 = new TextDecoder('utf-8');

export function decodeText(bytes: Uint8Array, contentType: string | string[] | undefined): DecodedText {
  const label = charsetParam(contentType) ?? bomCharset(bytes) ?? declaredXmlEncoding(bytes) ?? 'utf-8';
  let decoder: TextDecoder;
  if (label === 'utf-8' || label === 'UTF-8') decoder = UTF8;
  else {
    try {
      decoder = new TextDecoder(label);
    } catch {
      throw new CharsetError(`unsupported charset ${JSON.stringify(label)}`);
    }
  }
  // `encoding` is the canonical name: every alias of UTF-8 (utf8, unicode-1-1-utf-8…) gives utf-8.
  const invalidUtf8 = decoder.encoding === 'utf-8' && !isUtf8(bytes);
  return { text: decoder.decode(bytes), invalidUtf8 };
}

function charsetParam(contentType: string | string[] | undefined): string | undefined {
  const value = Array.isArray(contentType) ? contentType[0] : contentType;
  const m = value ? /;\s*charset\s*=\s*("?)([^";\s]+)\1/i.exec(value) : null;
  return m?.[2];
}

function bomCharset(b: Uint8Array): string | undefined {
  if (b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) return 'utf-8';
  if (b[0] === 0xff && b[1] === 0xfe) return 'utf-16le';
  if (b[0] === 0xfe && b[1] === 0xff) return 'utf-16be';
  return undefined;
}

function declaredXmlEncoding(b: Uint8Array): string | undefined {
  // The declaration is ASCII in every encoding without a BOM that a server would use here.
  const head = Buffer.from(b.buffer, b.byteOffset, Math.min(b.byteLength, 200)).toString('latin1');
  return XML_DECLARATION_ENCODING.exec(head)?.[1];
}
