"""Setters: render a solved family's decision process as an environment module."""
