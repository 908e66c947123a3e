"""What a browser's zarr reader decodes: zarrita.js 0.7 alone, and with h5lens's codec pack.

Facts read from zarrita 0.7.5's ``src/codecs.ts`` (its codec registry), ``src/util.ts``
(``getCtr``: the data types it allocates arrays for) and ``src/codecs/shuffle.ts``;
``js/`` (npm ``h5lens-codecs``) adds the decoders of :data:`PACK_CODECS`. Kept as tables
so that ``h5lens check --for browser`` and the docs say the same thing, and
``tests/test_js_codecs.py`` checks the tables against the packages themselves.
"""

from __future__ import annotations

# zarrita 0.7.5's registry (createDefaultRegistry), sharding aside: h5lens never writes it.
ZARRITA_CODECS = frozenset(
    {
        "blosc", "lz4", "zstd", "gzip", "zlib", "transpose", "bytes", "crc32c", "vlen-utf8", "json2", "bitround",
        "cast_value", "scale_offset", "numcodecs.blosc", "numcodecs.lz4", "numcodecs.zstd", "numcodecs.gzip",
        "numcodecs.zlib", "numcodecs.vlen-utf8", "numcodecs.shuffle", "numcodecs.delta", "numcodecs.bitround",
        "numcodecs.json2",
    }
)

# Registered by h5lens-codecs' register(zarr.registry) (js/src/index.js).
PACK_CODECS = frozenset(
    {
        "h5lens.lzf", "h5lens.shuffle", "numcodecs.fletcher32", "h5lens.bitshuffle", "h5lens.bitfield",
        "h5lens.spacepad", "vlen-bytes", "imagecodecs_lz4h5",
    }
)

# Codecs h5lens may write that no JavaScript decoder in the pack (or zarrita) handles.
NO_BROWSER_DECODER = {
    "numcodecs.bz2": "no bzip2 decoder in zarrita.js or h5lens-codecs",
    "h5lens.blosc2": "no maintained Blosc2 decoder on npm",
    "h5lens.zfp": "no maintained ZFP decoder on npm",
    "imagecodecs_szip": "no SZIP (libaec) decoder on npm",
}

# Data types zarrita 0.7.5 allocates arrays for in a zarr v3 document (getCtr), with
# their item sizes (None: variable length).
ZARRITA_DATA_TYPES: dict[str, int | None] = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "float32": 4, "float64": 8, "string": None,
}
# float16 needs the engine's Float16Array: Chromium 135 and later have it, Node 20 does not.
FLOAT16 = "float16"
FLOAT16_NOTE = "float16 needs the JavaScript engine's Float16Array (Chromium 135 or later; not Node 20)"

# Which characters a name may hold and still reach the store unchanged. @zarrita/storage's
# ReferenceStore looks a key up by the *percent-encoded* path of a URL built from it, so a
# space, '#', '?', a non-ASCII letter (and the other characters URLs percent-encode) make
# the key miss; zarrita's Location.resolve decodes %XX, so a name holding '%' (anndata's
# escaped keys) must be given percent-encoded itself. These characters pass both unchanged.
URL_SAFE_NAME_CHARACTERS = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@"
)

# The schemes a browser's fetch reads; @zarrita/storage turns s3:// and gs:// into the
# public AWS and Google endpoints, which only fit buckets there.
BROWSER_SCHEMES = ("http", "https")
