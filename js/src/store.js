// A read-only zarrita store over a kerchunk reference manifest (version 1, zarr v3 keys,
// `templates`, inline text and "base64:" bytes), as h5lens writes them, which differs from
// @zarrita/storage 0.2.0's ReferenceStore where that one reads otherwise than h5lens:
//
// - relative source URLs resolve against the manifest's own URL (a manifest written beside
//   its file), not against the page;
// - keys are looked up as they are: no URL is built from a key, so names with a space, '#',
//   '?', '%' or non-ASCII letters are found;
// - bare NaN / Infinity / -Infinity in a zarr.json (the convention's released profile, as
//   zarr-python writes attributes) are given as the strings "NaN", "Infinity", "-Infinity"
//   (what the convention's proposal profile and zarr v3 fill values write), where
//   JSON.parse would refuse the whole document;
// - a server that ignores Range and answers 200 with the whole file still gives the range;
// - the byte ranges asked for together (zarrita asks for an array's chunks at once) are
//   fetched together: ranges of one file that touch, or lie less than `gap` bytes apart,
//   become one request of at most `maxBytes` (HDF5 writers lay a dataset's chunks end to
//   end; a browser fetches at most six at a time from one host, each costing a round trip).

const PROTOCOL_HOSTS = { "s3:": "s3.amazonaws.com", "gs:": "storage.googleapis.com", "gcs:": "storage.googleapis.com" };

/** An s3:// or gs:// URL as the public endpoint's https URL (as @zarrita/storage does). */
export function publicHttpsUrl(url) {
	const colon = url.indexOf("://");
	const host = colon === -1 ? undefined : PROTOCOL_HOSTS[url.slice(0, colon + 1)];
	return host ? `https://${host}/${url.slice(colon + 3)}` : url;
}

/** JSON text with bare NaN / Infinity / -Infinity tokens (outside strings) as strings. */
export function nonFiniteAsStrings(text) {
	if (!/NaN|Infinity/.test(text)) return text;
	let out = "";
	let last = 0;
	let i = 0;
	while (i < text.length) {
		const c = text[i];
		if (c === '"') {
			i++;
			while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
			i++;
			continue;
		}
		const token = text.startsWith("NaN", i)
			? "NaN"
			: text.startsWith("-Infinity", i)
				? "-Infinity"
				: text.startsWith("Infinity", i)
					? "Infinity"
					: null;
		if (token) {
			out += `${text.slice(last, i)}"${token}"`;
			i += token.length;
			last = i;
			continue;
		}
		i++;
	}
	return out + text.slice(last);
}

function decodeBase64(text) {
	if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
	const binary = atob(text);
	const out = new Uint8Array(binary.length);
	for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
	return out;
}

function expandTemplates(url, templates) {
	return url.replace(/\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g, (whole, name) =>
		Object.hasOwn(templates, name) ? templates[name] : whole,
	);
}

// Ranges this close are fetched as one: a round trip costs more than the bytes between them.
const DEFAULT_GAP = 64 * 1024;
const DEFAULT_MAX_BYTES = 8 * 1024 * 1024;

const METADATA = /(^|\/)(zarr\.json|\.zarray|\.zgroup|\.zattrs|\.zmetadata)$/;

export class ReferenceStore {
	#refs;
	#baseUrl;
	#fetch;
	#coalesce;
	#waiting = new Map(); // url -> [{start, end, resolve, reject}], fetched at the next turn
	#flushing = false;

	/**
	 * @param {Map<string, string | [string | null, number?, number?]>} refs keys to references
	 * @param {{ baseUrl?: string, fetch?: typeof fetch, coalesce?: false | { gap?: number, maxBytes?: number } }} options
	 *   baseUrl: the manifest's URL; coalesce: how ranges asked for together are merged
	 *   (false: one request per key)
	 */
	constructor(refs, { baseUrl, fetch: fetchFn, coalesce = {} } = {}) {
		this.#refs = refs;
		this.#baseUrl = baseUrl;
		this.#fetch = fetchFn ?? ((request) => globalThis.fetch(request));
		this.#coalesce = coalesce === false ? false : { gap: DEFAULT_GAP, maxBytes: DEFAULT_MAX_BYTES, ...coalesce };
	}

	/** The manifest at `url` (relative: to the page), its relative source URLs resolved against it. */
	static async fromUrl(url, options = {}) {
		const fetchFn = options.fetch ?? ((request) => globalThis.fetch(request));
		const absolute = new URL(url, globalThis.location?.href).href;
		const response = await fetchFn(new Request(absolute));
		if (!response.ok) throw new Error(`${absolute}: HTTP ${response.status} reading the manifest`);
		return ReferenceStore.fromSpec(await response.json(), { ...options, baseUrl: options.baseUrl ?? absolute });
	}

	/** A manifest already parsed; `baseUrl` (the manifest's URL) resolves relative source URLs. */
	static fromSpec(spec, options = {}) {
		const version = spec.version ?? 0;
		if (version !== 1 && version !== 0) throw new Error(`reference manifest version ${version}: versions 0 and 1 are read`);
		const entries = version === 1 ? spec.refs : spec;
		const templates = spec.templates ?? {};
		const refs = new Map();
		for (const [key, value] of Object.entries(entries ?? {})) {
			if (Array.isArray(value)) {
				const url = value[0] == null ? null : expandTemplates(String(value[0]), templates);
				refs.set(key, [url, value[1], value[2]]);
			} else {
				refs.set(key, typeof value === "string" ? value : JSON.stringify(value));
			}
		}
		if (version === 1 && spec.gen) throw new Error("reference manifests with `gen` are not read");
		return new ReferenceStore(refs, options);
	}

	/** Where the bytes of `url` (as the manifest records it) are fetched from. */
	resolveUrl(url) {
		if (/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(url)) return publicHttpsUrl(url);
		const base = this.#baseUrl ?? globalThis.location?.href;
		if (!base) throw new Error(`${url}: a relative source URL, and no baseUrl (the manifest's URL) to resolve it against`);
		return new URL(url, base).href;
	}

	async get(key, options = {}) {
		return this.#read(key, undefined, options);
	}

	async getRange(key, range, options = {}) {
		return this.#read(key, range, options);
	}

	async #read(key, range, options) {
		const name = key.startsWith("/") ? key.slice(1) : key;
		const ref = this.#refs.get(name);
		if (ref === undefined) return undefined;
		if (typeof ref === "string") {
			let bytes;
			if (ref.startsWith("base64:")) bytes = decodeBase64(ref.slice(7));
			else bytes = new TextEncoder().encode(METADATA.test(name) ? nonFiniteAsStrings(ref) : ref);
			return range ? slice(bytes, range) : bytes;
		}
		const [url, offset = 0, length] = ref;
		if (url === null) throw new Error(`${name}: a reference with no URL`);
		let start = offset;
		let end = length === undefined ? undefined : offset + length; // exclusive
		if (range && "suffixLength" in range) {
			if (end === undefined) throw new Error(`${name}: a suffix of a whole-file reference`);
			start = Math.max(offset, end - range.suffixLength);
		} else if (range) {
			start = offset + range.offset;
			end = end === undefined ? start + range.length : Math.min(end, start + range.length);
		}
		const where = this.resolveUrl(url);
		if (end !== undefined && this.#coalesce && !options.signal) {
			return this.#together(where, start, end, name);
		}
		return this.#fetchRange(where, start, end, name, options.signal);
	}

	/** The bytes [start, end) of `url` (end undefined: to the end), or undefined for a 404. */
	async #fetchRange(url, start, end, name, signal, cache) {
		const headers = {};
		if (end !== undefined) headers.Range = `bytes=${start}-${end - 1}`;
		else if (start > 0) headers.Range = `bytes=${start}-`;
		const request = new Request(url, { headers, signal, cache });
		const response = await this.#fetch(request);
		if (response.status === 404) return undefined;
		if (!response.ok) throw new Error(`${request.url}: HTTP ${response.status} reading ${name}`);
		const body = new Uint8Array(await response.arrayBuffer());
		if (response.status === 200 && (start > 0 || end !== undefined)) {
			return body.slice(start, end); // the server ignored Range and sent the whole file
		}
		return body;
	}

	/** The bytes [start, end) of `url`, fetched with the other ranges asked for in this turn. */
	#together(url, start, end, name) {
		return new Promise((resolve, reject) => {
			if (!this.#waiting.has(url)) this.#waiting.set(url, []);
			this.#waiting.get(url).push({ start, end, name, resolve, reject });
			if (!this.#flushing) {
				this.#flushing = true;
				setTimeout(() => this.#flush(), 0); // after the microtasks that ask for the other chunks
			}
		});
	}

	#flush() {
		this.#flushing = false;
		const waiting = this.#waiting;
		this.#waiting = new Map();
		const { gap, maxBytes } = this.#coalesce;
		for (const [url, asked] of waiting) {
			asked.sort((a, b) => a.start - b.start);
			let group = [];
			let start = 0;
			let end = 0;
			for (const range of asked) {
				if (group.length && range.start <= end + gap && Math.max(end, range.end) - start <= maxBytes) {
					group.push(range);
					end = Math.max(end, range.end);
					continue;
				}
				if (group.length) this.#fetchGroup(url, start, end, group);
				group = [range];
				start = range.start;
				end = range.end;
			}
			if (group.length) this.#fetchGroup(url, start, end, group);
		}
	}

	async #fetchGroup(url, start, end, group) {
		try {
			// past Chromium's HTTP cache: with it, concurrent ranges of megabytes of one URL were
			// sent two or three times each (benchmarks/browser_bench.py: 7 GETs for 4 ranges)
			const body = await this.#fetchRange(url, start, end, group[0].name, undefined, "no-store");
			if (body === undefined) {
				for (const range of group) range.resolve(undefined);
				return;
			}
			if (body.length < end - start) throw new Error(`${url}: ${body.length} bytes where ${end - start} were asked for`);
			for (const range of group) range.resolve(body.slice(range.start - start, range.end - start));
		} catch (error) {
			for (const range of group) range.reject(error);
		}
	}
}

function slice(bytes, range) {
	if ("suffixLength" in range) return bytes.slice(bytes.length - range.suffixLength);
	return bytes.slice(range.offset, range.offset + range.length);
}

/**
 * A node path as zarrita's `root(store).resolve` must be given it so that the keys it reads
 * are the manifest's: `zarr.open(zarr.root(store).resolve(encodePath("obs/my data")))`.
 *
 * zarrita's Location.resolve builds a URL from the path and percent-decodes its pathname,
 * once per resolve: `resolve` from the root, then `resolve("zarr.json")` and
 * `resolve("c/0")` under the node. A name holding '%' (anndata's escaped keys), '#', '?',
 * a space or non-ASCII letters must therefore reach the node's Location encoded once, and
 * is given to the first resolve encoded twice. Give every path from the root this way (a
 * child resolved from a node's Location is decoded one time too many).
 */
export function encodePath(path) {
	return path
		.split("/")
		.filter((name) => name !== "")
		.map((name) => encodeURIComponent(encodeURIComponent(name)))
		.join("/");
}
