// Item sizes of the zarr v3 data types zarrita.js allocates arrays for.
const ITEM_SIZES = {
	bool: 1,
	int8: 1,
	uint8: 1,
	int16: 2,
	uint16: 2,
	float16: 2,
	int32: 4,
	uint32: 4,
	float32: 4,
	int64: 8,
	uint64: 8,
	float64: 8,
};

/** Bytes per element of `dataType`, or null where elements have no fixed size. */
export function itemSize(dataType) {
	return typeof dataType === "string" ? (ITEM_SIZES[dataType] ?? null) : null;
}

/** Bytes of one whole decoded chunk (HDF5 stores edge chunks whole too), or null. */
export function decodedSize(meta) {
	const size = meta ? itemSize(meta.dataType) : null;
	if (size === null) return null;
	return meta.shape.reduce((a, b) => a * b, 1) * size;
}
