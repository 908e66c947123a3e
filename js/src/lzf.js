// HDF5's LZF filter (id 32000, h5py's compression="lzf"): the raw output of liblzf's
// lzf_compress, no header. Where compressing did not help, HDF5 stores the chunk as it is
// (the filter is optional), which only the length tells: a chunk as long as its decoded
// size is stored uncompressed. As h5lens.codecs.lzf decodes it (codec "h5lens.lzf").
import { decodedSize } from "./dtypes.js";

const MAX_EXPANSION = 90; // a 3-byte back reference expands to at most 264 bytes

/** Decode a raw LZF stream into `out`; the number of bytes written, or -1 when `out` is too small. */
export function lzfDecompress(input, out) {
	let ip = 0;
	let op = 0;
	const inLength = input.length;
	const outLength = out.length;
	while (ip < inLength) {
		let ctrl = input[ip++];
		if (ctrl < 32) {
			ctrl += 1; // a literal run
			if (op + ctrl > outLength) return -1;
			if (ip + ctrl > inLength) throw new Error("invalid LZF data: a literal run past the end");
			out.set(input.subarray(ip, ip + ctrl), op);
			ip += ctrl;
			op += ctrl;
		} else {
			let length = ctrl >> 5; // a back reference
			let ref = op - ((ctrl & 0x1f) << 8) - 1;
			if (ip >= inLength) throw new Error("invalid LZF data: a back reference past the end");
			if (length === 7) {
				length += input[ip++];
				if (ip >= inLength) throw new Error("invalid LZF data: a back reference past the end");
			}
			ref -= input[ip++];
			if (op + length + 2 > outLength) return -1;
			if (ref < 0) throw new Error("invalid LZF data: a back reference before the start");
			length += 2;
			for (let k = 0; k < length; k++) out[op++] = out[ref++];
		}
	}
	return op;
}

/** One HDF5-LZF chunk of `expected` decoded bytes (null: unknown). */
export function decodeHdf5Lzf(data, expected) {
	if (expected !== null && data.length === expected) return data; // stored uncompressed
	if (data.length === 0 || expected === 0) {
		throw new Error(`LZF chunk of ${data.length} bytes for a chunk of ${expected} bytes`);
	}
	const limit = data.length * MAX_EXPANSION + 64;
	let capacity = expected ?? data.length * 4;
	for (;;) {
		const out = new Uint8Array(capacity);
		const written = lzfDecompress(data, out);
		if (written >= 0) {
			if (expected !== null && written !== expected) {
				throw new Error(`LZF chunk decoded to ${written} bytes, expected ${expected}`);
			}
			return written === capacity ? out : out.slice(0, written);
		}
		if (capacity >= limit) {
			throw new Error(`invalid LZF data: ${data.length} bytes claim more than ${limit} decoded bytes`);
		}
		capacity = Math.min(limit, Math.max(capacity * 2, capacity + data.length));
	}
}

export class LzfCodec {
	kind = "bytes_to_bytes";
	#expected;

	constructor(expected) {
		this.#expected = expected;
	}

	static fromConfig(_configuration, meta) {
		return new LzfCodec(decodedSize(meta));
	}

	encode() {
		throw new Error("h5lens.lzf: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(bytes) {
		return decodeHdf5Lzf(bytes, this.#expected);
	}
}
