// Read arrays of a manifest served over HTTP with zarrita.js, as a page would, and write
// what was read for tests/test_js_codecs.py to compare with h5py:
//
//   node read-arrays.mjs MODE MANIFEST_URL PATHS.json OUT_DIR
//
// MODE "pack": h5lens-codecs registered, its ReferenceStore, paths through encodePath.
// MODE "plain": zarrita.js and @zarrita/storage's ReferenceStore alone, paths as they are.
// OUT_DIR/results.json: per path {path, ok, error | dtype, shape, attrs, file | values};
// typed arrays' bytes in OUT_DIR/<i>.bin.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readArrays } from "./read.js";

// zarrita 0.7.5 loads an array's codecs as parallel promises and stops at the first unknown
// one: the others' rejections go unhandled, which ends a Node process (a page only logs
// them). The array's own error is what counts here.
process.on("unhandledRejection", () => {});

const [mode, manifestUrl, pathsFile, outDir] = process.argv.slice(2);
const paths = JSON.parse(readFileSync(pathsFile, "utf8"));
mkdirSync(outDir, { recursive: true });
const results = await readArrays(mode, manifestUrl, paths);
for (const [i, result] of results.entries()) {
	if (result.bytes) {
		result.file = `${i}.bin`;
		writeFileSync(join(outDir, result.file), result.bytes);
		delete result.bytes;
	}
}
writeFileSync(join(outDir, "results.json"), JSON.stringify(results));
