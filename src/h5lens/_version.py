"""The version of h5lens, imported by everyone who needs it."""

__version__ = "0.1.0"
