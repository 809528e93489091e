"""Widgets of the monitor screen."""
