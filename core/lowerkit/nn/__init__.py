"""Layers for building traceable models (stub)."""
