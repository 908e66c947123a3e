# `make demo` and `make test` set everything up on a fresh machine.
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test typecheck mutate bench bench-s3 bench-nodes bench-scale bench-read clean

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $$(scripts/find-python) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/h5lens demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile

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
	$(VENV)/bin/python benchmarks/read_bench.py

# Mutation testing (docs/testing.md): occasional, not part of CI; results in .mutation/.
mutate: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet "cosmic-ray==8.7.0"
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/mutate

clean:
	rm -rf $(VENV) h5lens-demo
