"""Mechanism families: pure maths, one module each. See docs/ADDING_A_FAMILY.md."""

from vhd.mechanisms._contract import Certificate, Episode, Family, Solution, ToolSpec, register, registry

__all__ = ["Certificate", "Episode", "Family", "Solution", "ToolSpec", "register", "registry"]
