"""Tiers: the ways a request can be answered."""

from rtgate.core.request import Message, Piece, Request
from rtgate.tiers.base import Tier

__all__ = ["Message", "Piece", "Request", "Tier"]
