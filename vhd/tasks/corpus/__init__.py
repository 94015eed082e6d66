"""Corpus operations over stored environments: publish and its audit, export, instances, presets, statistics."""
