"""Widgets of the chat screen: answers with per-token spans, stats, legend."""
