// Read arrays of a manifest with zarrita.js: shared by read-arrays.mjs (Node) and page.html
// (Chromium), so that both read as the same code does.
import * as zarr from "zarrita";
import { encodePath, ReferenceStore, register } from "h5lens-codecs";

function jsonable(value) {
	if (typeof value === "bigint") return value.toString();
	if (typeof value === "number" && !Number.isFinite(value)) return String(value);
	return value;
}

/** The store and a path → Location function for `mode` "pack" (h5lens-codecs) or "plain". */
export async function openManifest(mode, manifestUrl) {
	if (mode === "pack") {
		register(zarr.registry);
		const store = await ReferenceStore.fromUrl(manifestUrl);
		return (path) => zarr.root(store).resolve(encodePath(path));
	}
	if (mode === "plain") {
		const { default: PlainReferenceStore } = await import("@zarrita/storage/ref");
		const store = await PlainReferenceStore.fromUrl(manifestUrl);
		return (path) => zarr.root(store).resolve(path);
	}
	throw new Error(`mode ${mode}: pack or plain`);
}

/** Per path: {path, ok, error} or {path, ok, dtype, shape, attrs, bytes (typed arrays) | values}. */
export async function readArrays(mode, manifestUrl, paths) {
	const location = await openManifest(mode, manifestUrl);
	const results = [];
	for (const path of paths) {
		try {
			const array = await zarr.open(location(path), { kind: "array" });
			const chunk = await zarr.get(array);
			const attrs = JSON.parse(JSON.stringify(array.attrs, (_k, v) => jsonable(v)));
			const result = { path, ok: true, dtype: String(array.dtype), shape: array.shape, attrs };
			const data = chunk?.data ?? chunk;
			if (data && typeof data === "object" && "buffer" in data && "byteLength" in data) {
				// typed arrays, and zarrita's BoolArray and string arrays over bytes
				result.bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
			} else if (Array.isArray(data)) {
				result.values = data.map(jsonable);
			} else {
				result.values = [jsonable(data)];
			}
			results.push(result);
		} catch (error) {
			results.push({ path, ok: false, error: `${error?.name}: ${error?.message}` });
		}
	}
	return results;
}
