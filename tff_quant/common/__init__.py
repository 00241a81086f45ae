"""Pieces every layer shares (numpy only): argument validation, exact laws,
the coordinates a client sends (`dims.sent_dim`)."""
