"""VHD-Play corpus factory: solved mechanisms rendered as stateful tool environments."""

__version__ = "0.1.0"
