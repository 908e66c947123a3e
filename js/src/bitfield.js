// HDF5 integers with a bit precision or offset (H5Tset_precision, H5Tset_offset; codec
// "h5lens.bitfield", configuration {precision, offset, signed}), an array-to-array codec
// after `bytes`: each word's field shifted down and, for a signed type, sign-extended from
// its top bit, as libhdf5 converts it (h5lens.codecs.bitfield).

const UNSIGNED = {
	Int8Array: Uint8Array,
	Int16Array: Uint16Array,
	Int32Array: Uint32Array,
	Uint8Array: Uint8Array,
	Uint16Array: Uint16Array,
	Uint32Array: Uint32Array,
};

/** The fields of the integers of `data` (a typed array), as a new array of its type. */
export function extractBitfield(data, precision, offset, signed) {
	const out = new data.constructor(data.length);
	if (data instanceof BigInt64Array || data instanceof BigUint64Array) {
		const words = new BigUint64Array(data.buffer, data.byteOffset, data.length);
		const mask = (1n << BigInt(precision)) - 1n;
		const top = 1n << BigInt(precision - 1);
		for (let i = 0; i < words.length; i++) {
			let field = (words[i] >> BigInt(offset)) & mask;
			if (signed && field & top) field -= top * 2n;
			out[i] = data instanceof BigInt64Array ? BigInt.asIntN(64, field) : field;
		}
		return out;
	}
	const Unsigned = UNSIGNED[data.constructor.name];
	if (!Unsigned) throw new Error(`h5lens.bitfield: integers only, not ${data.constructor.name}`);
	const words = new Unsigned(data.buffer, data.byteOffset, data.length);
	const top = 2 ** (precision - 1);
	for (let i = 0; i < words.length; i++) {
		let field = Math.floor(words[i] / 2 ** offset) % 2 ** precision; // exact for 32-bit words
		if (signed && field >= top) field -= top * 2;
		out[i] = field;
	}
	return out;
}

export class BitfieldCodec {
	kind = "array_to_array";
	#precision;
	#offset;
	#signed;

	constructor({ precision, offset = 0, signed = true } = {}) {
		if (!Number.isInteger(precision) || precision < 1 || precision > 64 || !Number.isInteger(offset) || offset < 0 || precision + offset > 64) {
			throw new Error(`h5lens.bitfield: a field of ${precision} bits at bit ${offset} fits no integer`);
		}
		this.#precision = precision;
		this.#offset = offset;
		this.#signed = signed;
	}

	static fromConfig(configuration) {
		return new BitfieldCodec(configuration);
	}

	encode() {
		throw new Error("h5lens.bitfield: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(chunk) {
		return { ...chunk, data: extractBitfield(chunk.data, this.#precision, this.#offset, this.#signed) };
	}
}
