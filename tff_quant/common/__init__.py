"""Pieces every layer shares (numpy only): argument validation."""
