"""The package's version, written once: ``pyproject.toml`` reads it, the facade and the result rows report it."""

__version__ = "0.1.0"
