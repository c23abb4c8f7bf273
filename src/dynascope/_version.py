"""The version, in a leaf module: every layer may read it without importing the package's __init__."""

__version__ = "0.1.0"  # as pyproject.toml says
