"""Functional ops, following torch.nn.functional (stub)."""
