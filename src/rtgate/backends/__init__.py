"""Model backends: where tokens come from."""

from rtgate.backends.base import Backend, Generation

__all__ = ["Backend", "Generation"]
