// h5lens-codecs: what zarrita.js 0.7 needs to read the manifests h5lens writes.
//
//   import * as zarr from "zarrita";
//   import { register, ReferenceStore, encodePath } from "h5lens-codecs";
//   register(zarr.registry);
//   const store = await ReferenceStore.fromUrl("https://host/data/file.h5ad.json");
//   const x = await zarr.open(zarr.root(store).resolve(encodePath("obsm/X_umap")), { kind: "array" });
//   const { data, shape } = await zarr.get(x);
import { BitfieldCodec } from "./bitfield.js";
import { BitshuffleCodec } from "./bitshuffle.js";
import { Fletcher32Codec } from "./fletcher32.js";
import { Hdf5Lz4Codec } from "./lz4.js";
import { LzfCodec } from "./lzf.js";
import { Hdf5ShuffleCodec } from "./shuffle.js";
import { SpacePadCodec, VlenBytesCodec } from "./strings.js";

export { extractBitfield } from "./bitfield.js";
export { decodeHdf5Bitshuffle, unbitshuffle } from "./bitshuffle.js";
export { checkFletcher32, fletcher32 } from "./fletcher32.js";
export { decodeHdf5Lz4, lz4DecodeBlock } from "./lz4.js";
export { decodeHdf5Lzf, lzfDecompress } from "./lzf.js";
export { unshuffle } from "./shuffle.js";
export { encodePath, nonFiniteAsStrings, publicHttpsUrl, ReferenceStore } from "./store.js";
export { decodeVlenBytes, stripSpacePadding } from "./strings.js";

/** The codecs this package decodes, by the names h5lens writes them under. */
export const CODECS = {
	"h5lens.lzf": LzfCodec,
	"h5lens.shuffle": Hdf5ShuffleCodec,
	"numcodecs.fletcher32": Fletcher32Codec,
	"h5lens.bitshuffle": BitshuffleCodec,
	"h5lens.bitfield": BitfieldCodec,
	"h5lens.spacepad": SpacePadCodec,
	"vlen-bytes": VlenBytesCodec,
	imagecodecs_lz4h5: Hdf5Lz4Codec,
};

/**
 * Add this package's codecs to zarrita's registry (`zarr.registry`), leaving every codec
 * zarrita has as it is: a name zarrita already decodes is not replaced.
 * Returns the names added.
 */
export function register(registry) {
	const added = [];
	for (const [name, codec] of Object.entries(CODECS)) {
		if (registry.has(name)) continue;
		registry.set(name, () => codec);
		added.push(name);
	}
	return added;
}
