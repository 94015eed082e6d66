"""Mechanism families: pure maths, one module each. See docs/ADDING_A_FAMILY.md."""

from vhd.mechanisms._contract import (
    AgentError, BaseWorld, Certificate, Episode, Family, Solution, ToolSpec, integer, number, register, registry, text,
    tool, tools_of,
)

__all__ = ["AgentError", "BaseWorld", "Certificate", "Episode", "Family", "Solution", "ToolSpec", "integer", "number",
           "register", "registry", "text", "tool", "tools_of"]
