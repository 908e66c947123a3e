"""``python -m h5lens.cli``: the ``h5lens`` command."""

import sys

from h5lens.cli import main

if __name__ == "__main__":
    main(sys.argv[1:])
