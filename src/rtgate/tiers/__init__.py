"""Tiers: the ways a request can be answered."""

from rtgate.tiers.base import Message, Piece, Request, Tier

__all__ = ["Message", "Piece", "Request", "Tier"]
