// HDF5's Fletcher-32 checksum filter (id 3; codec "numcodecs.fletcher32"): the data, then
// its checksum as a little-endian uint32. The checksum is libhdf5's H5_checksum_fletcher32
// (16-bit big-endian words, an odd last byte as the high byte of a word). As libhdf5 does,
// the checksum libhdf5 before 1.6.3 wrote on little-endian machines (its 16-bit halves
// byte-swapped) is accepted too.

/** libhdf5's Fletcher-32 of `data`. */
export function fletcher32(data) {
	let sum1 = 0;
	let sum2 = 0;
	let words = data.length >> 1;
	let i = 0;
	while (words > 0) {
		const block = words > 360 ? 360 : words;
		words -= block;
		for (let k = 0; k < block; k++) {
			sum1 += (data[i] << 8) | data[i + 1];
			sum2 += sum1;
			i += 2;
		}
		sum1 = (sum1 & 0xffff) + (sum1 >>> 16);
		sum2 = (sum2 & 0xffff) + (sum2 >>> 16);
	}
	if (data.length & 1) {
		sum1 += data[i] << 8;
		sum2 += sum1;
		sum1 = (sum1 & 0xffff) + (sum1 >>> 16);
		sum2 = (sum2 & 0xffff) + (sum2 >>> 16);
	}
	sum1 = (sum1 & 0xffff) + (sum1 >>> 16);
	sum2 = (sum2 & 0xffff) + (sum2 >>> 16);
	return ((sum2 << 16) | sum1) >>> 0;
}

/** The data of a checksummed chunk, or an error when the checksum does not match. */
export function checkFletcher32(bytes) {
	if (bytes.length < 4) throw new Error(`numcodecs.fletcher32: a ${bytes.length}-byte chunk has no checksum`);
	const body = bytes.subarray(0, bytes.length - 4);
	const view = new DataView(bytes.buffer, bytes.byteOffset + body.length, 4);
	const stored = view.getUint32(0, true);
	const computed = fletcher32(body);
	const reversed =
		(((computed & 0x00ff00ff) << 8) | ((computed & 0xff00ff00) >>> 8)) >>> 0;
	if (stored !== computed && stored !== reversed) {
		throw new Error(
			`numcodecs.fletcher32: checksum mismatch (stored ${stored.toString(16)}, computed ${computed.toString(16)}): the chunk is damaged`,
		);
	}
	return body;
}

export class Fletcher32Codec {
	kind = "bytes_to_bytes";

	static fromConfig() {
		return new Fletcher32Codec();
	}

	encode() {
		throw new Error("numcodecs.fletcher32: encoding is not implemented (h5lens-codecs only reads)");
	}

	decode(bytes) {
		return checkFletcher32(bytes);
	}
}
