"""``python -m h5lens.cli``: the ``h5lens`` command."""

from h5lens.cli import main

if __name__ == "__main__":
    main()  # the process's own arguments (sys.argv[1:])
