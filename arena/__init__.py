"""privacy-arena: a tournament harness for machine-learning privacy."""

__version__ = "0.1.0"
