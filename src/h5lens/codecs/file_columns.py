"""The codec of an array only h5lens's reader can assemble: zarr's readers refuse it, saying why.

``h5lens combine`` of AnnData files whose var differ (``join="inner"`` / ``"outer"``) keeps
each file's matrix where it lies, its columns numbered as in the file; h5lens's reader maps
them to the combined var (:mod:`h5lens.adata.columns`). zarr's readers cannot: a value read
through them would sit in the wrong column. So the array every reader of such a matrix must
read (a csr matrix's ``indptr``, a dense matrix itself) carries this codec, whose decoding
raises an error that says why, instead of giving values. Without h5lens installed, zarr
refuses the codec's name (``UnknownCodecError``): never a wrong value either way.

JSON: ``{"name": "h5lens.file_columns", "configuration": {"matrix": "X", "columns": "h5lens_columns"}}``
(the matrix, and the group holding each file's column map).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from zarr.abc.codec import ArrayBytesCodec
from zarr.core.common import JSON, parse_named_configuration

from h5lens.codecs.named import only
from h5lens.errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

__all__ = ["CODEC_NAME", "FileColumnsCodec", "codec_json", "refusal", "register"]

CODEC_NAME = "h5lens.file_columns"


def refusal(matrix: str) -> str:
    """Why zarr's readers cannot read matrix ``matrix`` of a combined AnnData."""
    return (
        f"/{matrix}: the files combined into this AnnData have different var, and each file's "
        "matrix keeps its own columns; h5lens's reader maps them to the combined var "
        "(h5lens.read_anndata, eager or lazy), zarr's readers cannot: read it with h5lens.read_anndata"
    )


@dataclass(frozen=True)
class FileColumnsCodec(ArrayBytesCodec):
    """Refuses to decode (and encode): see the module's docstring."""

    matrix: str = ""
    columns: str = ""
    is_fixed_size = True

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, CODEC_NAME, require_configuration=False)
        given = only(configuration, CODEC_NAME, {"matrix", "columns"})
        return cls(matrix=str(given.get("matrix", "")), columns=str(given.get("columns", "")))

    def to_dict(self) -> dict[str, JSON]:
        return codec_json(self.matrix, self.columns)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        raise UnsupportedFeatureError(refusal(self.matrix))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        raise UnsupportedFeatureError(refusal(self.matrix))

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length


def codec_json(matrix: str, columns: str) -> dict[str, Any]:
    return {"name": CODEC_NAME, "configuration": {"matrix": matrix, "columns": columns}}


def register() -> None:
    """Register :class:`FileColumnsCodec` with zarr under ``h5lens.file_columns`` (idempotent)."""
    from zarr.registry import register_codec

    register_codec(CODEC_NAME, FileColumnsCodec)
