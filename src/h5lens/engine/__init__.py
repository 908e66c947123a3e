"""The read engine: a selection of one array becomes one read plan (its chunks, their
bytes, decoded, laid out), run on the calling thread or on the event loop.

It reads through what a chunk source gives it (documents, chunk tables, stored bytes)
and imports none of the store, zarr's integration or the readers above it.
"""
