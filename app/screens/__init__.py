"""Screens: loading, chat, settings, history, missing model."""
