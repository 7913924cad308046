// Bytes on the wire and their text. The daemon sends output as a string when it is valid UTF-8
// and as base64 (with an `<key>Encoding: "base64"` sibling) when it is not, so a chunk may end
// in the middle of a character: Utf8Stream holds such a tail back until the rest arrives.

/** The bytes of obj[key]: base64-decoded when obj[encodingKey] says so, else the string's UTF-8. */
export function wireBytes(obj, key, encodingKey) {
  const value = obj[key] ?? "";
  if (obj[encodingKey] === "base64") return Buffer.from(value, "base64");
  return Buffer.from(String(value), "utf8");
}

/** Text or bytes as a Buffer (strings as UTF-8). */
export function toBuffer(data) {
  if (typeof data === "string") return Buffer.from(data, "utf8");
  if (Buffer.isBuffer(data)) return data;
  if (data instanceof ArrayBuffer) return Buffer.from(data);
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError("expected a string, a Uint8Array or an ArrayBuffer");
}

/** How many bytes at the end of buf start a UTF-8 sequence that is not complete yet. */
function incompleteTail(buf) {
  const n = buf.length;
  for (let back = 1; back <= 3 && back <= n; back++) {
    const b = buf[n - back];
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: the lead is further back
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

/**
 * An incremental UTF-8 decoder whose state (the held-back bytes) can be read and set, which
 * TextDecoder's cannot: a handle reconnecting to a process resumes a character split across
 * the cursor it resumes from.
 */
export class Utf8Stream {
  constructor(pending) {
    this.pending = pending ?? Buffer.alloc(0);
  }

  /** Text of `bytes` after what is held; `str` is their UTF-8 string when the caller has it. */
  decode(bytes, str) {
    let buf = bytes;
    if (this.pending.length) {
      buf = Buffer.concat([this.pending, bytes]);
      str = undefined;
    }
    const tail = incompleteTail(buf);
    if (tail === 0) {
      this.pending = Buffer.alloc(0);
      return str ?? buf.toString("utf8");
    }
    this.pending = Buffer.from(buf.subarray(buf.length - tail));
    return buf.toString("utf8", 0, buf.length - tail);
  }

  /** What is still held, as U+FFFD: the stream ended inside a character. */
  end() {
    const text = this.pending.length ? this.pending.toString("utf8") : "";
    this.pending = Buffer.alloc(0);
    return text;
  }
}
