// HDF5's shuffle (filter 2) with HDF5's rule for a buffer that is not whole elements: the
// last `length % elementsize` bytes stay as they are (codec "h5lens.shuffle", written where
// shuffle runs after a filter that changes the length: netCDF-C's fletcher32, then shuffle).

/** Undo HDF5's shuffle of `data` by `elementSize`-byte elements. */
export function unshuffle(data, elementSize) {
	const count = Math.floor(data.length / elementSize);
	const out = new Uint8Array(data.length);
	for (let byte = 0; byte < elementSize; byte++) {
		const from = byte * count;
		for (let i = 0; i < count; i++) out[i * elementSize + byte] = data[from + i];
	}
	out.set(data.subarray(count * elementSize), count * elementSize);
	return out;
}

export class Hdf5ShuffleCodec {
	kind = "bytes_to_bytes";
	#elementSize;

	constructor(elementSize) {
		if (!Number.isInteger(elementSize) || elementSize < 1) {
			throw new Error(`h5lens.shuffle: elementsize must be a positive integer, got ${elementSize}`);
		}
		this.#elementSize = elementSize;
	}

	static fromConfig(configuration) {
		return new Hdf5ShuffleCodec(configuration?.elementsize ?? 1);
	}

	encode() {
		throw new Error("h5lens.shuffle: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(bytes) {
		return unshuffle(bytes, this.#elementSize);
	}
}
