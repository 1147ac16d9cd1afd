"""Fuzz harness for lowerkit's file loading: see fuzz/README.md."""
