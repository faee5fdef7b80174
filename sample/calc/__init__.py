"""A tiny calculator package."""
from .ops import add, sub, mul, div

__all__ = ["add", "sub", "mul", "div"]
