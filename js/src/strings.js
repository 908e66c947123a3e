// Byte strings: "vlen-bytes" (zarr v3's variable-length bytes: a uint32 count, then per item
// a uint32 length and the bytes) and "h5lens.spacepad" (HDF5's space-padded fixed-length
// strings: trailing spaces dropped, as h5py gives them). zarrita.js 0.7 has no zarr v3 data
// type for either kind of value (variable_length_bytes, null_terminated_bytes), so no
// zarrita array reaches these decoders yet; they decode chunks given to them directly.

/** The items of one vlen-bytes chunk, as Uint8Arrays. */
export function decodeVlenBytes(bytes) {
	const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
	if (bytes.length < 4) throw new Error(`vlen-bytes: a ${bytes.length}-byte chunk has no item count`);
	const count = view.getUint32(0, true);
	if (count * 4 > bytes.length - 4) throw new Error(`vlen-bytes: ${count} items do not fit ${bytes.length} bytes`);
	const items = new Array(count);
	let pos = 4;
	for (let i = 0; i < count; i++) {
		if (pos + 4 > bytes.length) throw new Error("vlen-bytes: the chunk ends inside an item's length");
		const length = view.getUint32(pos, true);
		pos += 4;
		if (pos + length > bytes.length) throw new Error("vlen-bytes: an item runs past the chunk's end");
		items[i] = bytes.slice(pos, pos + length);
		pos += length;
	}
	return items;
}

function strides(shape) {
	const out = new Array(shape.length);
	let stride = 1;
	for (let i = shape.length - 1; i >= 0; i--) {
		out[i] = stride;
		stride *= shape[i];
	}
	return out;
}

export class VlenBytesCodec {
	kind = "array_to_bytes";
	#shape;

	constructor(shape) {
		this.#shape = shape;
	}

	static fromConfig(_configuration, meta) {
		return new VlenBytesCodec(meta.shape);
	}

	encode() {
		throw new Error("vlen-bytes: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(bytes) {
		return { data: decodeVlenBytes(bytes), shape: this.#shape, stride: strides(this.#shape) };
	}
}

/** Fixed-length strings of `size` bytes each in `bytes`, trailing spaces (and NULs) dropped. */
export function stripSpacePadding(bytes, size) {
	const items = [];
	for (let at = 0; at + size <= bytes.length; at += size) {
		let end = at + size;
		while (end > at && (bytes[end - 1] === 0x20 || bytes[end - 1] === 0)) end--;
		items.push(bytes.slice(at, end));
	}
	return items;
}

export class SpacePadCodec {
	kind = "array_to_array";

	static fromConfig() {
		return new SpacePadCodec();
	}

	encode() {
		throw new Error("h5lens.spacepad: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(chunk) {
		// zarrita's ByteStringArray: `chars` bytes per item over a Uint8Array
		const { data } = chunk;
		if (!data || typeof data.chars !== "number") {
			throw new Error("h5lens.spacepad: fixed-length byte strings only");
		}
		const raw = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
		const out = new Uint8Array(raw.length);
		stripSpacePadding(raw, data.chars).forEach((item, i) => out.set(item, i * data.chars));
		raw.set(out);
		return chunk;
	}
}
