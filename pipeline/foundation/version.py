"""The version of cpp-data, recorded in every stage record and manifest."""

__version__ = "0.1.0"
