# `make demo` and `make test` set everything up on a fresh machine.
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo js vitessce test explore test-oldest lindi typecheck mutate bench bench-s3 bench-nodes bench-scale bench-read bench-loader clean

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $$(scripts/find-python) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/h5lens demo

# The codec pack's npm packages, from its lockfile, for tests/test_js_codecs.py (which skips
# without node and npm, saying so; CI sets H5LENS_REQUIRE_JS=1 and fails instead).
JS_STAMP := js/node_modules/.package-lock.json

$(JS_STAMP): js/package-lock.json
	@if command -v npm >/dev/null; then cd js && npm ci --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the JavaScript tests will skip"; fi

js: $(JS_STAMP)

# The emulators the tests start that are not Python packages: Azurite (tests/test_azure.py), from npm.
EMULATORS := tests/emulators/node_modules/.installed

$(EMULATORS): tests/emulators/package.json tests/emulators/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix tests/emulators --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: tests/test_azure.py will skip (Azurite is an npm package)"; fi

# Vitessce (pinned, with esbuild to bundle its page) for tests/test_vitessce.py, which skips
# without them, saying so (CI sets H5LENS_REQUIRE_CHROMIUM=1 and fails instead).
VITESSCE_STAMP := tests/vitessce/node_modules/.package-lock.json

$(VITESSCE_STAMP): tests/vitessce/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix tests/vitessce --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: tests/test_vitessce.py will skip"; fi

vitessce: $(VITESSCE_STAMP)

test: $(STAMP) $(JS_STAMP) $(EMULATORS) $(VITESSCE_STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile

# The property tests with fresh random examples, many of them (`make test` draws the same
# ones every run): run it now and then, and turn what it finds into a test of its own.
explore: $(STAMP)
	H5LENS_EXPLORE=1 H5LENS_RANDOM_TREES=3000 $(VENV)/bin/python -m pytest -q -n auto -p no:cacheprovider \
		tests/test_random_trees.py tests/test_keys.py tests/test_slabs.py tests/test_pipeline.py tests/test_filter_table_equal.py \
		tests/test_fuzz_manifest.py tests/test_manifest_columns.py

# The read, AnnData and store tests again, under the oldest zarr, numcodecs, anndata and
# xarray h5lens supports (.ci/oldest.txt); CI runs it after `make test`.
OLDEST := .venv-oldest
OLDEST_TESTS := tests/test_pipeline.py tests/test_store.py tests/test_whole.py tests/test_navigate.py \
	tests/test_anndata.py tests/test_treedata.py tests/test_xarray_backend.py tests/test_netcdf.py \
	tests/test_patch_nobody.py tests/test_s3.py tests/test_fetch.py tests/test_check.py tests/test_hdf5_types.py

$(OLDEST)/.installed: pyproject.toml .ci/oldest.txt
	@test -x $(OLDEST)/bin/python || $$(scripts/find-python) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet -c .ci/oldest.txt -e ".[anndata]" pytest pytest-xdist hypothesis \
		hdf5plugin s3fs obstore "moto[server]" netCDF4 h5netcdf awkward kerchunk==0.2.10
	@touch $@

test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python -c "import zarr, numcodecs, anndata, xarray; print('oldest:', 'zarr', zarr.__version__, 'numcodecs', numcodecs.__version__, 'anndata', anndata.__version__, 'xarray', xarray.__version__)" 2>/dev/null
	$(OLDEST)/bin/python -m pytest -q -n auto --dist loadfile $(OLDEST_TESTS)

# LINDI's own reader (pip `lindi`, which needs zarr 2) and pynwb, in a venv of their own,
# for tests/test_lindi.py: h5lens writes .lindi.json files in the project's venv, and
# tests/lindi_check.py reads them back under this one (the test skips, saying so, without it).
LINDI := .venv-lindi

$(LINDI)/.installed: Makefile
	@test -x $(LINDI)/bin/python || $$(scripts/find-python) -m venv $(LINDI)
	$(LINDI)/bin/python -m pip install --quiet --upgrade pip
	$(LINDI)/bin/python -m pip install --quiet lindi==0.4.6 pynwb==4.2.0 "zarr>=2.18,<3"
	@touch $@

lindi: $(LINDI)/.installed

typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/scan_chunks.py

bench-s3: $(STAMP)
	$(VENV)/bin/python benchmarks/s3_bench.py

bench-remote: $(STAMP)
	$(VENV)/bin/python benchmarks/remote_scan.py

bench-nodes: $(STAMP)
	$(VENV)/bin/python benchmarks/many_nodes.py

bench-scale: $(STAMP)
	$(VENV)/bin/python benchmarks/manifest_scale.py

# Reads, locally and on a simulated S3 (benchmarks/README.md); `--quick` for a few minutes' version.
bench-read: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet hidefix==0.12  # the hidefix route: a Rust HDF5 reader, the per-chunk cost to reach
	$(VENV)/bin/python benchmarks/read_bench.py

# annbatch minibatches over h5lens, VirtualiZarr and annbatch's converted copy, locally and on a
# simulated S3 (docs/ml-loading.md); `--cells 1000000` for the issue's bigger atlas.
bench-loader: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet zarrs  # the copy-zarrs route: zarrs-python's pipeline
	$(VENV)/bin/python benchmarks/loader_bench.py

# Mutation testing (docs/testing.md): occasional, not part of CI; results in .mutation/.
mutate: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet "cosmic-ray==8.7.0"
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/mutate

clean:
	rm -rf $(VENV) $(OLDEST) h5lens-demo
