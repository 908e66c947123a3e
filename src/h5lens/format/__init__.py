"""The on-disk forms h5lens writes and reads: the convention's attribute names, anndata's escaped keys, and the zarr forms of HDF5 types zarr lacks."""
