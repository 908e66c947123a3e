// The HDF5 bitshuffle filter (id 32008, bshuf_h5filter.c; codec "h5lens.bitshuffle",
// configuration {elementsize, blocksize, compression: "none" | "lz4" | "zstd"}), as
// h5lens.codecs.bitshuffle describes it: blocks of `blocksize` elements (then one of the
// remainder rounded down to 8), each bit-transposed on its own, the last n % 8 elements left
// as they are. Compressed: a 12-byte big-endian header (uint64 decoded bytes, uint32 block
// size in bytes), then per block a big-endian uint32 length and an LZ4 block or zstd frame,
// then the leftover elements raw.
import { lz4DecodeBlock } from "./lz4.js";

/** bshuf_default_block_size: about 8 KiB of elements, a multiple of 8, at least 128. */
export function defaultBlockSize(elementSize) {
	const block = Math.floor(8192 / elementSize);
	return Math.max(block - (block % 8), 128);
}

function blockCounts(count, blockSize) {
	const full = Math.floor(count / blockSize);
	const rest = count % blockSize;
	const counts = new Array(full).fill(blockSize);
	if (rest - (rest % 8) > 0) counts.push(rest - (rest % 8));
	return counts;
}

// Bit row j*8+k of a block holds bit k of byte j of each element, element i at bit i % 8 of
// the row's byte i / 8 (bshuf_trans_bit_elem: bytes transposed, then bits, then bit rows).
function untransposeBlock(input, out, count, elementSize) {
	const rowBytes = count >> 3;
	for (let j = 0; j < elementSize; j++) {
		for (let k = 0; k < 8; k++) {
			const row = (j * 8 + k) * rowBytes;
			const bit = 1 << k;
			for (let g = 0; g < rowBytes; g++) {
				const value = input[row + g];
				if (value === 0) continue;
				const base = g * 8 * elementSize + j;
				for (let t = 0; t < 8; t++) {
					if ((value >> t) & 1) out[base + t * elementSize] |= bit;
				}
			}
		}
	}
}

/** Undo the blocked bitshuffle of `data` (whole elements). */
export function unbitshuffle(data, elementSize, blockSize) {
	if (data.length % elementSize) {
		throw new Error(`h5lens.bitshuffle: ${data.length} bytes is not a whole number of ${elementSize}-byte elements`);
	}
	const out = new Uint8Array(data.length);
	let at = 0;
	for (const count of blockCounts(data.length / elementSize, blockSize)) {
		const size = count * elementSize;
		untransposeBlock(data.subarray(at, at + size), out.subarray(at, at + size), count, elementSize);
		at += size;
	}
	out.set(data.subarray(at), at);
	return out;
}

async function zstdDecoder() {
	const { default: Zstd } = await import("numcodecs/zstd");
	return Zstd.fromConfig({ level: 3 });
}

/** Decode one chunk as bshuf_h5filter does. */
export async function decodeHdf5Bitshuffle(data, elementSize, blockSize, compression) {
	if (compression === "none") return unbitshuffle(data, elementSize, blockSize || defaultBlockSize(elementSize));
	if (compression !== "lz4" && compression !== "zstd") {
		throw new Error(`h5lens.bitshuffle: unknown compression ${compression}`);
	}
	if (data.length < 12) throw new Error(`h5lens.bitshuffle: a ${data.length}-byte chunk has no room for the header`);
	const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
	const total = Number(view.getBigUint64(0, false));
	const block = view.getUint32(8, false) / elementSize;
	if (total % elementSize || !Number.isInteger(block) || block === 0 || block % 8) {
		throw new Error(`h5lens.bitshuffle: header sizes ${total}, ${block} do not fit ${elementSize}-byte elements`);
	}
	const zstd = compression === "zstd" ? await zstdDecoder() : null;
	const shuffled = new Uint8Array(total);
	let pos = 12;
	let written = 0;
	for (const count of blockCounts(total / elementSize, block)) {
		if (pos + 4 > data.length) throw new Error("h5lens.bitshuffle: the chunk ends inside block headers");
		const length = view.getUint32(pos, false);
		pos += 4;
		if (pos + length > data.length) throw new Error("h5lens.bitshuffle: a block runs past the chunk's end");
		const size = count * elementSize;
		const packed = data.subarray(pos, pos + length);
		const target = shuffled.subarray(written, written + size);
		if (zstd) {
			const decoded = await zstd.decode(packed);
			if (decoded.length !== size) throw new Error(`h5lens.bitshuffle: a block decoded to ${decoded.length} bytes, expected ${size}`);
			target.set(decoded);
		} else if (lz4DecodeBlock(packed, target) !== size) {
			throw new Error(`h5lens.bitshuffle: a block decoded to other than ${size} bytes`);
		}
		pos += length;
		written += size;
	}
	if (pos + (total - written) !== data.length) {
		throw new Error(`h5lens.bitshuffle: ${data.length - pos} bytes after the blocks, expected ${total - written}`);
	}
	shuffled.set(data.subarray(pos), written);
	return unbitshuffle(shuffled, elementSize, block);
}

export class BitshuffleCodec {
	kind = "bytes_to_bytes";
	#elementSize;
	#blockSize;
	#compression;

	constructor(configuration) {
		this.#elementSize = configuration?.elementsize;
		this.#blockSize = configuration?.blocksize ?? 0;
		this.#compression = configuration?.compression ?? "lz4";
		if (!Number.isInteger(this.#elementSize) || this.#elementSize < 1) {
			throw new Error(`h5lens.bitshuffle: elementsize must be a positive integer, got ${this.#elementSize}`);
		}
		if (!Number.isInteger(this.#blockSize) || this.#blockSize < 0 || this.#blockSize % 8) {
			throw new Error(`h5lens.bitshuffle: blocksize must be a multiple of 8 elements, got ${this.#blockSize}`);
		}
	}

	static fromConfig(configuration) {
		return new BitshuffleCodec(configuration);
	}

	encode() {
		throw new Error("h5lens.bitshuffle: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(bytes) {
		return decodeHdf5Bitshuffle(bytes, this.#elementSize, this.#blockSize, this.#compression);
	}
}
