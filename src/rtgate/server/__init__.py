"""The HTTP/WebSocket server: ``create_app(config)`` and ``rtgate serve``."""

from rtgate.server.app import create_app, load_routers
from rtgate.server.state import ServerState, get_state

__all__ = ["ServerState", "create_app", "get_state", "load_routers"]
