"""The terminal UI: the only package that imports textual.

Build the monitor with :func:`gputui.tui.app.make_app`.
"""
