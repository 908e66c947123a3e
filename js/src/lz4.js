// LZ4 blocks (the raw block format of LZ4_compress_default), and HDF5's LZ4 filter (id
// 32004, hdf5plugin.LZ4; codec "imagecodecs_lz4h5"): a big-endian uint64 decoded size and
// uint32 block size, then per block a big-endian uint32 length and the LZ4 block, a block
// whose length equals its decoded size being stored as it is.

/** Decode one LZ4 block into `out` (exactly its size); the bytes written. */
export function lz4DecodeBlock(input, out) {
	let ip = 0;
	let op = 0;
	const end = input.length;
	while (ip < end) {
		const token = input[ip++];
		let literals = token >> 4;
		if (literals === 15) {
			let b;
			do {
				if (ip >= end) throw new Error("invalid LZ4 block: a length past the end");
				b = input[ip++];
				literals += b;
			} while (b === 255);
		}
		if (ip + literals > end || op + literals > out.length) {
			throw new Error("invalid LZ4 block: literals past the end");
		}
		out.set(input.subarray(ip, ip + literals), op);
		ip += literals;
		op += literals;
		if (ip >= end) break; // the last sequence holds literals only
		if (ip + 2 > end) throw new Error("invalid LZ4 block: an offset past the end");
		const offset = input[ip] | (input[ip + 1] << 8);
		ip += 2;
		if (offset === 0 || offset > op) throw new Error("invalid LZ4 block: an offset before the start");
		let match = token & 15;
		if (match === 15) {
			let b;
			do {
				if (ip >= end) throw new Error("invalid LZ4 block: a length past the end");
				b = input[ip++];
				match += b;
			} while (b === 255);
		}
		match += 4;
		if (op + match > out.length) throw new Error("invalid LZ4 block: a match past the end of the output");
		let ref = op - offset;
		for (let k = 0; k < match; k++) out[op++] = out[ref++];
	}
	return op;
}

/** One chunk of HDF5's LZ4 filter. */
export function decodeHdf5Lz4(data) {
	if (data.length < 12) throw new Error(`imagecodecs_lz4h5: a ${data.length}-byte chunk has no room for its header`);
	const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
	const total = Number(view.getBigUint64(0, false));
	let blockSize = view.getUint32(8, false);
	if (blockSize > total) blockSize = total;
	const out = new Uint8Array(total);
	let pos = 12;
	let written = 0;
	while (written < total) {
		const size = Math.min(blockSize, total - written);
		if (pos + 4 > data.length) throw new Error("imagecodecs_lz4h5: the chunk ends inside a block header");
		const length = view.getUint32(pos, false);
		pos += 4;
		if (pos + length > data.length) throw new Error("imagecodecs_lz4h5: a block runs past the chunk's end");
		const block = data.subarray(pos, pos + length);
		if (length === size) {
			out.set(block, written);
		} else if (lz4DecodeBlock(block, out.subarray(written, written + size)) !== size) {
			throw new Error(`imagecodecs_lz4h5: a block decoded to other than ${size} bytes`);
		}
		pos += length;
		written += size;
	}
	return out;
}

export class Hdf5Lz4Codec {
	kind = "bytes_to_bytes";

	static fromConfig() {
		return new Hdf5Lz4Codec();
	}

	encode() {
		throw new Error("imagecodecs_lz4h5: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(bytes) {
		return decodeHdf5Lz4(bytes);
	}
}
